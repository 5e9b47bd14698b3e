"""NeMo-RL GRPO / DAPO recipe (examples/configs/*.yaml, its `defaults:` chain resolved) -> an rlsim scenario.

NeMo-RL reads a recipe with `load_config_with_inheritance` (nemo_rl/utils/config.py): `defaults:` is one
path or a list of paths relative to the recipe's folder, each loaded the same way and merged under the
recipe (OmegaConf.merge: mappings key by key, anything else replaced); Hydra-style `key=value` overrides
follow, then interpolations resolve, with NeMo-RL's own `${mul:a,b}` and `${max:a,b}` resolvers.

Schedules: generation colocated with training (`policy.generation.colocated.enabled`) and synchronous
GRPO -> hybridflow colocated; generation on GPUs of its own, synchronous -> hybridflow with the roles on
their own pools (generate, then train, in turn); `grpo.async_grpo.enabled` -> fully-async with NeMo-RL's
`max_trajectory_age_steps` and `in_flight_weight_updates` (rlsim's fields of the same names).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlsim.tools.importers.common import ImportProblem, Ledger
from rlsim.tools.importers.draft import Imported, finalize, hardware, workload
from rlsim.tools.importers.hydra import Resolver, apply_hydra_overrides, deep_merge, read_config
from rlsim.tools.importers.nemo_rl_ignored import ignore_rest
from rlsim.tools.importers.shapes import model_spec

P = "policy"
G = "policy.generation"
MEG = "policy.megatron_cfg"
DT = "policy.dtensor_cfg"
ASYNC = "grpo.async_grpo"
ENGINES = {"vllm": "vllm-v1"}
# vllm_cfg.precision values that quantise the rollout's weights (fp8: blockwise, NeMo-RL's deep_gemm path).
ROLLOUT_WEIGHT_FORMATS = {"fp8": "fp8", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}
ADVANTAGES = {"grpo": "grpo", "reinforce_plus_plus": "grpo"}
MAX_CHAIN = 32  # defaults deeper than this: a cycle NeMo-RL would recurse on forever
# NeMo-RL registers these OmegaConf resolvers (nemo_rl/utils/config.py) before resolving a recipe.
FUNCTIONS = {"mul": lambda a, b: a * b, "max": lambda a, b: max(a, b)}


def load_nemo_rl_config(path: Path, overrides: list[str]) -> tuple[dict, list[Path]]:
    """The recipe as NeMo-RL's entry point sees it, and the files of its defaults chain (recipe first)."""
    chain: list[Path] = []
    data = _inherit(path, path.parent, chain, str(path))
    data = apply_hydra_overrides(data, overrides, str(path))
    return Resolver(data, str(path), FUNCTIONS).resolve_all(), chain


def _inherit(path: Path, base_dir: Path, chain: list[Path], source: str) -> dict:
    if len(chain) >= MAX_CHAIN or path.resolve() in [p.resolve() for p in chain]:
        raise ImportProblem(source, "defaults", f"the defaults chain loops or is deeper than {MAX_CHAIN} files "
                            f"({' -> '.join(p.name for p in [*chain, path])})")
    chain.append(path)
    data, _ = read_config(path)
    if "defaults" not in data:
        return data
    defaults = data.pop("defaults")
    if isinstance(defaults, str):
        defaults = [defaults]
    if not isinstance(defaults, list) or not all(isinstance(d, str) and d for d in defaults):
        raise ImportProblem(source, "defaults", f"expected a path or a list of paths relative to the recipe "
                            f"(in {path.name}), got {defaults!r}")
    base: dict = {}
    for entry in defaults:
        parent = (base_dir / entry)
        if not parent.is_file():
            raise ImportProblem(source, "defaults", f"{entry!r} (named in {path.name}) not found in {base_dir}")
        base = deep_merge(base, _inherit(parent, base_dir, chain, source))
    return deep_merge(base, data)


def import_nemo_rl(path: Path, overrides: list[str], *, model_config: Path | None = None, gpu: str | None = None,
                   sets: list[str] = (), config_dirs: list[Path] = ()) -> Imported:
    """Compose the recipe as NeMo-RL would, map it, validate the scenario (problems as ImportProblem)."""
    config, chain = load_nemo_rl_config(path, list(overrides))
    for key in ("policy", "grpo", "cluster"):
        if not isinstance(config.get(key), dict):
            raise ImportProblem(str(path), key, "required: not a NeMo-RL GRPO recipe (it has policy, grpo and "
                                "cluster sections)")
    ledger = Ledger.of(str(path), config, "nemo-rl")
    hw = hardware(ledger, gpu)
    asynchronous = bool(ledger.flag(f"{ASYNC}.enabled", "schedule.kind = fully-async (else hybridflow)",
                                    default=False))
    pools, train_pool, gen_pool = _pools(ledger, hw, asynchronous)
    lengths = _lengths(ledger)
    models = {"policy": model_spec(ledger, f"{P}.model_name", model_config, "policy")}
    if ledger.peek(f"{P}.tokenizer.name") == ledger.peek(f"{P}.model_name"):
        ledger.use(f"{P}.tokenizer.name", "models.policy (the same model)")
    train_gpus = pools[train_pool]["nodes"] * pools[train_pool]["gpus_per_node"]
    actor = _train_role(ledger, train_pool, train_gpus, lengths)
    roles: dict[str, Any] = {"actor": actor, "rollout": _rollout_role(ledger, gen_pool, pools[gen_pool])}
    kl = ledger.use("loss_fn.reference_policy_kl_penalty", "roles.reference (a reference forward pass when != 0; "
                    "its weights wait in host memory, as NeMo-RL's policy worker keeps them)", default=0)
    if kl:
        roles["reference"] = {**actor, "parallel": dict(actor["parallel"]),
                              "train": {**{k: v for k, v in actor["train"].items()
                                           if k in ("sharding", "ppo_max_token_len_per_gpu")}, "param_offload": True}}
    algorithm = _algorithm(ledger)
    schedule = _schedule(ledger, asynchronous, gen_pool != train_pool)
    ignore_rest(ledger)
    data = {"name": path.stem, "description": f"imported from NeMo-RL recipe {path.name}", "steps": 3,
            "cluster": {"pools": pools}, "models": models, "roles": roles, "algorithm": algorithm,
            "workload": workload(ledger, *lengths), "schedule": schedule}
    files = " -> ".join(p.name for p in chain)
    return finalize(data, ledger, list(sets), f"Imported by `rlsim import nemo-rl {path}` (defaults chain: {files}).")


def _pools(ledger: Ledger, hw: str, asynchronous: bool) -> tuple[dict, str, str]:
    """NeMo-RL's split: colocated, every GPU does both; else generation takes `colocated.resources` (GPUs of the
    one node when cluster.num_nodes is 1, else whole nodes) and training the rest (nemo_rl/algorithms/grpo.py)."""
    nodes = ledger.int_value("cluster.num_nodes", "cluster.pools.*.nodes", default=1) or 1
    per_node = ledger.int_value("cluster.gpus_per_node", "cluster.pools.*.gpus_per_node", default=8) or 8
    colocated = ledger.flag(f"{G}.colocated.enabled", "schedule placement (colocated: one pool)", default=True)
    res = f"{G}.colocated.resources"
    if colocated:
        if asynchronous:
            ledger.error(f"{G}.colocated.enabled", "async GRPO needs generation on GPUs of its own (NeMo-RL "
                         "refuses async_grpo with colocated generation): set policy.generation.colocated.enabled="
                         "false and colocated.resources")
        ledger.ignore(res, "only read when generation is not colocated")
        return {"main": {"hardware": hw, "nodes": nodes, "gpus_per_node": per_node}}, "main", "main"
    if nodes == 1:
        gen = ledger.int_value(f"{res}.gpus_per_node", "cluster.pools.gen.gpus_per_node (one node: GPUs split)")
        ledger.use(f"{res}.num_nodes", "one node: generation takes gpus_per_node of its GPUs")
        if gen is None or gen >= per_node:
            ledger.error(f"{res}.gpus_per_node", f"on one node generation needs 1..{per_node - 1} of its "
                         f"{per_node} GPUs, got {gen!r}")
            gen = 1
        return {"train": {"hardware": hw, "nodes": 1, "gpus_per_node": per_node - gen},
                "gen": {"hardware": hw, "nodes": 1, "gpus_per_node": gen}}, "train", "gen"
    gen_nodes = ledger.int_value(f"{res}.num_nodes", "cluster.pools.gen.nodes")
    ledger.use(f"{res}.gpus_per_node", "cluster.pools.gen.gpus_per_node (= cluster.gpus_per_node)")
    if gen_nodes is None or gen_nodes >= nodes:
        ledger.error(f"{res}.num_nodes", f"generation needs 1..{nodes - 1} of the {nodes} nodes, got {gen_nodes!r}")
        gen_nodes = 1
    return {"train": {"hardware": hw, "nodes": nodes - gen_nodes, "gpus_per_node": per_node},
            "gen": {"hardware": hw, "nodes": gen_nodes, "gpus_per_node": per_node}}, "train", "gen"


def _lengths(ledger: Ledger) -> tuple[int, int]:
    """Prompt and response caps inside max_total_sequence_length (prompt + response <= it, vLLM max_model_len)."""
    total = ledger.int_value(f"{P}.max_total_sequence_length", "workload: prompt + response cap", default=512) or 512
    new = ledger.int_value(f"{G}.max_new_tokens", "workload.response_length.max", default=total) or total
    ledger.use(f"{G}.vllm_cfg.max_model_len", "engine context cap (= max_total_sequence_length here)")
    prompt = ledger.int_value("data.max_input_seq_length", "workload.prompt_length.max")
    if prompt is None or prompt >= total:
        shown = "absent" if prompt is None else f"{prompt}, the whole sequence budget"
        prompt = max(1, total // 8)
        ledger.assume(f"prompt cap (data.max_input_seq_length {shown})", f"{prompt} tokens (max_total_sequence_"
                      "length / 8)", "--set workload.prompt_length.max=N")
    response = min(new, total - prompt)
    if response < new:
        ledger.assume("response cap", f"{response} (max_total_sequence_length {total} - prompt cap {prompt}; "
                      f"max_new_tokens {new})", "--set workload.response_length.max=N")
    return prompt, response


def _train_role(ledger: Ledger, pool: str, gpus: int, lengths: tuple[int, int]) -> dict[str, Any]:
    megatron = bool(ledger.flag(f"{MEG}.enabled", "roles.actor.train.sharding = megatron", default=False))
    dtensor = ledger.flag(f"{DT}.enabled", "roles.actor.train.sharding = fsdp (DTensor)", default=not megatron)
    if megatron and dtensor:
        ledger.error(f"{DT}.enabled", "policy.megatron_cfg and policy.dtensor_cfg are both enabled: NeMo-RL "
                     "trains with one of them")
    train: dict[str, Any] = {"sharding": "megatron" if megatron else "fsdp"}
    section = MEG if megatron else DT
    ledger.ignore(DT if megatron else MEG, f"the policy trains with {'Megatron' if megatron else 'DTensor'}")
    tp = ledger.int_value(f"{section}.tensor{'_model' if megatron else ''}_parallel_size", "roles.actor.parallel.tp",
                          default=1) or 1
    pp, ep = 1, 1
    if megatron:
        pp = ledger.int_value(f"{MEG}.pipeline_model_parallel_size", "roles.actor.parallel.pp", default=1) or 1
        ep = ledger.int_value(f"{MEG}.expert_model_parallel_size", "roles.actor.parallel.ep", default=1) or 1
        offload = ledger.flag(f"{MEG}.optimizer.optimizer_cpu_offload", "roles.actor.train.optimizer_offload")
        if offload is not None:
            train["optimizer_offload"] = offload
    else:
        offload = ledger.flag(f"{DT}.cpu_offload", "roles.actor.train.param_offload / optimizer_offload")
        if offload is not None:
            train.update(param_offload=offload, optimizer_offload=offload)
    # Megatron's context parallelism and DTensor's (torch's context_parallel) both pass K/V around a ring.
    cp = ledger.int_value(f"{section}.context_parallel_size", "roles.actor.parallel.cp (cp_kind ring)", default=1) or 1
    if gpus % (tp * pp * cp):
        ledger.error(f"{section}.tensor{'_model' if megatron else ''}_parallel_size",
                     f"tensor × pipeline × context parallel = {tp} × {pp} × {cp} does not divide the {gpus} "
                     "training GPUs")
    checkpointing = ledger.flag(f"{section}.activation_checkpointing", "roles.actor.train.activation_checkpointing")
    if checkpointing is not None:
        train["activation_checkpointing"] = checkpointing
    train["ppo_max_token_len_per_gpu"] = _token_budget(ledger, lengths)
    return {"pool": pool, "model": "policy", "parallel": {"tp": tp, "pp": pp, **({"ep": ep} if ep > 1 else {}),
                                                          **({"cp": cp, "cp_kind": "ring"} if cp > 1 else {})},
            "train": train}


def _token_budget(ledger: Ledger, lengths: tuple[int, int]) -> int:
    """Sequence packing or dynamic batching: their train_mb_tokens; else micro-batch x the sequence cap."""
    target = "roles.actor.train.ppo_max_token_len_per_gpu"
    enabled = [section for section in ("sequence_packing", "dynamic_batching")
               if ledger.flag(f"{P}.{section}.enabled", f"{target} ({section} when true)", default=False)]
    for section in enabled:
        budget = ledger.int_value(f"{P}.{section}.train_mb_tokens", target)
        ledger.use(f"{P}.train_micro_batch_size", f"{target} (through {section}.train_mb_tokens)")
        if budget is not None:
            return budget
    micro = ledger.int_value(f"{P}.train_micro_batch_size", f"{target} = micro-batch × sequence cap", default=1) or 1
    total = ledger.peek(f"{P}.max_total_sequence_length") or sum(lengths)
    return micro * total


def _rollout_role(ledger: Ledger, pool: str, pool_spec: dict) -> dict[str, Any]:
    backend = ledger.use(f"{G}.backend", "roles.rollout.engine.kind", default="vllm")
    engine: dict[str, Any] = {}
    if backend in ENGINES:
        engine["kind"] = ENGINES[backend]
    else:
        ledger.error(f"{G}.backend", f"generation backend {backend!r} is not imported (rlsim models vllm here; "
                     "megatron inference: set policy.generation.backend=vllm, or --set roles.rollout.engine.kind)")
    vc = f"{G}.vllm_cfg"
    tp = ledger.int_value(f"{vc}.tensor_parallel_size", "roles.rollout.parallel.tp", default=1) or 1
    pp = ledger.int_value(f"{vc}.pipeline_parallel_size", "roles.rollout.parallel.pp", default=1) or 1
    ep = ledger.int_value(f"{vc}.expert_parallel_size", "roles.rollout.parallel.ep", default=1) or 1
    gpus = pool_spec["nodes"] * pool_spec["gpus_per_node"]
    if pool_spec["gpus_per_node"] % tp or gpus % (tp * pp):
        ledger.error(f"{vc}.tensor_parallel_size", f"rollout TP {tp} (× PP {pp}) does not divide the {gpus} "
                     f"generation GPUs ({pool_spec['gpus_per_node']} per node)")
    if ep > 1 and tp % ep:
        ledger.error(f"{vc}.expert_parallel_size", f"{ep} does not divide the rollout TP {tp}: rlsim shards experts "
                     "over one engine's GPUs (vLLM's EP without data-parallel attention)")
    memory = ledger.fraction(f"{vc}.gpu_memory_utilization", "roles.rollout.engine.gpu_memory_utilization")
    if memory is not None:
        engine["gpu_memory_utilization"] = memory
    eager = ledger.flag(f"{vc}.enforce_eager", "roles.rollout.engine.cuda_graphs = not this")
    if eager is not None:
        engine["cuda_graphs"] = not eager
    quantization = _rollout_quantization(ledger, vc)
    if quantization:
        engine["quantization"] = quantization
    return {"pool": pool, "model": "policy", "parallel": {"tp": tp, "pp": pp, **({"ep": ep} if ep > 1 else {})},
            "engine": engine}


def _rollout_quantization(ledger: Ledger, vc: str) -> dict[str, str]:
    """vLLM's weight precision and KV-cache dtype when quantised (FP8 rollout with a BF16 trainer,
    docs/rollout-quantisation.md); BF16 ones stay with the ignored precision keys."""
    out = {}
    weights = ledger.peek(f"{vc}.precision")
    if weights in ROLLOUT_WEIGHT_FORMATS:
        ledger.use(f"{vc}.precision", "roles.rollout.engine.quantization.weights")
        out["weights"] = ROLLOUT_WEIGHT_FORMATS[weights]
    if str(ledger.peek(f"{vc}.kv_cache_dtype")).startswith("fp8"):
        ledger.use(f"{vc}.kv_cache_dtype", "roles.rollout.engine.quantization.kv_cache")
        out["kv_cache"] = "fp8"
    return out


def _algorithm(ledger: Ledger) -> dict[str, Any]:
    prompts = ledger.int_value("grpo.num_prompts_per_step", "algorithm.prompts_per_step", default=32) or 1
    n = ledger.int_value("grpo.num_generations_per_prompt", "algorithm.samples_per_prompt", default=16) or 1
    name = ledger.use("grpo.adv_estimator.name", "algorithm.kind (grpo; reinforce_plus_plus priced as grpo)",
                      default="grpo")
    if name not in ADVANTAGES:
        ledger.error("grpo.adv_estimator.name", f"unknown advantage estimator {name!r} (known: "
                     f"{', '.join(ADVANTAGES)})")
    kind = "grpo"
    if ledger.flag("grpo.use_dynamic_sampling", "algorithm.kind = dapo when true (filtered groups not re-generated)",
                   default=False):
        kind = "dapo"
    batch = ledger.int_value(f"{P}.train_global_batch_size", "algorithm.mini_batches = samples per step / this",
                             default=prompts * n) or 1
    samples = prompts * n
    if samples % batch:
        ledger.error(f"{P}.train_global_batch_size", f"{batch} does not divide the {prompts} × {n} = {samples} "
                     "samples of a step (NeMo-RL takes whole global batches)")
    return {"kind": kind, "prompts_per_step": prompts, "samples_per_prompt": n, "epochs": 1,
            "mini_batches": max(1, samples // batch)}


def _schedule(ledger: Ledger, asynchronous: bool, separate: bool) -> dict[str, Any]:
    force = ledger.flag("loss_fn.force_on_policy_ratio", "schedule.recompute_logprob = not this", default=False)
    schedule: dict[str, Any] = {}
    if force:
        schedule["recompute_logprob"] = False
    if not asynchronous:
        ledger.ignore(ASYNC, "async_grpo is disabled (synchronous GRPO)")
        schedule = {"kind": "hybridflow", "placement": "custom" if separate else "colocate", **schedule}
        return schedule
    age = ledger.int_value(f"{ASYNC}.max_trajectory_age_steps", "schedule.max_trajectory_age_steps", minimum=0,
                           default=1)
    in_flight = ledger.flag(f"{ASYNC}.in_flight_weight_updates", "schedule.in_flight_weight_updates", default=False)
    recompute = ledger.flag(f"{ASYNC}.recompute_kv_cache_after_weight_updates",
                            "schedule.interrupt (recompute: re-prefill under the new weights)", default=False)
    schedule = {"kind": "fully-async", **schedule, "max_trajectory_age_steps": age}
    if in_flight and recompute:
        schedule["interrupt"] = "recompute"
    elif in_flight:
        schedule["in_flight_weight_updates"] = True
    else:
        schedule["interrupt"] = "drain"
        ledger.assume("weight update without in-flight updates", "interrupt: drain (running generations finish, "
                      "then the weights load)", "--set schedule.interrupt=keep|recompute|abort-resume")
    return schedule
