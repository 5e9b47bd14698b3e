"""verl PPO trainer config (0.9.x; also its one_step_off and fully_async recipes) -> an rlsim scenario.

The mapping table is in docs/import-calibration.md. verl's knobs that
rlsim borrowed keep their names; the one change of unit: verl's `ppo_mini_batch_size` is a *size*
in prompts, rlsim's `algorithm.mini_batches` a *count* (train_batch_size / ppo_mini_batch_size).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlsim.sim.api import load_profile
from rlsim.tools.importers.common import Ledger
from rlsim.tools.importers.draft import Imported, finalize, hardware, workload
from rlsim.tools.importers.hydra import is_missing
from rlsim.tools.importers.loading import VERL_CONFIG_DIR, load_hydra_config, require_framework
from rlsim.tools.importers.shapes import model_spec
from rlsim.tools.importers.verl_ignored import ignore_rest
from rlsim.tools.importers.verl_rollout_modes import disaggregation, rollout_modes
from rlsim.tools.importers.verl_sampling import elastic
from rlsim.tools.importers.verl_v1 import v1_mode, v1_pools, v1_schedule, v1_sync_step
from rlsim.tools.importers.weight_sync import weight_sync_from_knobs

A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"

ENGINE_KINDS = {"vllm": "vllm-v1", "sglang": "sglang-0.4", "trtllm": "trtllm"}
STRATEGIES = {"fsdp": "fsdp", "fsdp2": "fsdp", "megatron": "megatron", "veomni": "fsdp", "torchtitan": "fsdp",
              "automodel": "fsdp"}
ENGINE_KNOBS = (("gpu_memory_utilization", "gpu_memory_utilization"), ("max_num_seqs", "max_num_seqs"),
                ("max_num_batched_tokens", "max_num_batched_tokens"), ("enable_chunked_prefill", "chunked_prefill"),
                ("enable_prefix_caching", "enable_prefix_caching"))
ADVANTAGES = {"gae": "ppo", "remax": "remax", "rloo": "rloo", "rloo_vectorized": "rloo"}


def import_verl(path: Path, overrides: list[str], *, model_config: Path | None = None, gpu: str | None = None,
                sets: list[str] = (), config_dirs: list[Path] = ()) -> Imported:
    """Compose the config as verl would, map it, validate the scenario (exit-2 problems as ImportProblem)."""
    config = load_hydra_config(path, list(overrides), list(config_dirs), VERL_CONFIG_DIR, "verl")
    require_framework(config, "verl", str(path))
    ledger = Ledger.of(str(path), config, "verl")
    kind = "fully-async" if isinstance(config.get("async_training"), dict) else \
        "one-step-off" if isinstance(config.get("rollout"), dict) else "hybridflow"
    mode = v1_mode(ledger)
    kind = "verl-v1" if mode is not None and kind == "hybridflow" else kind
    hw = hardware(ledger, gpu)
    pools, train_pool, gen_pool = _pools(ledger, kind, hw)
    lengths = _lengths(ledger)
    models = {"policy": model_spec(ledger, "actor_rollout_ref.model.path", model_config, "policy")}
    train_gpus = _gpus(pools[train_pool])
    roles = {"actor": _train_role(ledger, A, "fsdp_config", train_pool, "policy", train_gpus, lengths),
             "rollout": _rollout_role(ledger, gen_pool, pools[gen_pool], kind)}
    algorithm = _algorithm(ledger, kind, train_gpus)
    if ledger.peek(f"{A}.use_kl_loss") or ledger.peek("algorithm.use_kl_in_reward"):
        ledger.use(f"{A}.use_kl_loss", "roles.reference (a reference forward pass)")
        ledger.use("algorithm.use_kl_in_reward", "roles.reference (a reference forward pass)")
        roles["reference"] = _train_role(ledger, REF, "fsdp_config", train_pool, "policy", train_gpus, lengths)
    else:
        ledger.use(f"{A}.use_kl_loss", "no reference role (no KL term)")
        ledger.use("algorithm.use_kl_in_reward", "no reference role (no KL term)")
        ledger.ignore(REF, "no reference role (use_kl_loss and use_kl_in_reward are false)")
    critic = ledger.use("critic.enable", "roles.critic")
    if critic or (critic is None and algorithm["kind"] == "ppo"):
        models["critic"] = model_spec(ledger, "critic.model.path", None, "critic")
        roles["critic"] = _train_role(ledger, "critic", "fsdp", train_pool, "critic", train_gpus, lengths)
    else:
        ledger.ignore("critic", f"no critic ({algorithm['kind']} takes advantages from the sample group)")
    _reward(ledger, roles, models, algorithm, pools, train_pool, hw)
    rollout = roles["rollout"]
    engines = _gpus(pools[gen_pool]) // (rollout["parallel"]["tp"] * rollout["parallel"]["pp"])
    schedule = _schedule(ledger, kind, max(1, engines))
    if kind == "fully-async" and (dynamic := elastic(ledger, rollout["engine"])) is not None:
        schedule["elastic"] = dynamic
    ignore_rest(ledger, kind)
    data = {"name": path.stem, "description": f"imported from verl config {path.name}", "steps": 3,
            "cluster": {"pools": pools}, "models": models, "roles": roles, "algorithm": algorithm,
            "workload": workload(ledger, *lengths), "schedule": schedule}
    return finalize(data, ledger, list(sets), f"Imported by `rlsim import verl {path}`.")


def _pools(ledger: Ledger, kind: str, hw: str) -> tuple[dict, str, str]:
    nodes = ledger.int_value("trainer.nnodes", "cluster.pools.*.nodes (trainer)", default=1)
    per_node = ledger.int_value("trainer.n_gpus_per_node", "cluster.pools.*.gpus_per_node (trainer)", default=8)
    if kind == "hybridflow":
        return {"main": {"hardware": hw, "nodes": nodes or 1, "gpus_per_node": per_node or 8}}, "main", "main"
    if kind == "verl-v1":
        return v1_pools(ledger, v1_mode(ledger), hw, nodes or 1, per_node or 8)
    gen_nodes = ledger.int_value("rollout.nnodes", "cluster.pools.gen.nodes")
    gen_per_node = ledger.int_value("rollout.n_gpus_per_node", "cluster.pools.gen.gpus_per_node", default=8)
    if gen_nodes is None and ledger.peek("rollout.nnodes") is None:
        ledger.error("rollout.nnodes", f"{kind} needs the rollout pool's size (rollout.nnodes, "
                     "rollout.n_gpus_per_node)")
    pools = {"train": {"hardware": hw, "nodes": nodes or 1, "gpus_per_node": per_node or 8},
             "gen": {"hardware": hw, "nodes": gen_nodes or 1, "gpus_per_node": gen_per_node or 8}}
    # The recipes copy the pool size into actor_rollout_ref.rollout (fully_async_main.py, main_ppo.py).
    ledger.ignore(f"{R}.nnodes", "overwritten by rollout.nnodes in the one-step-off / fully-async recipes")
    ledger.ignore(f"{R}.n_gpus_per_node", "overwritten by rollout.n_gpus_per_node in the recipes")
    return pools, "train", "gen"


def _gpus(pool: dict) -> int:
    return pool["nodes"] * pool["gpus_per_node"]


def _lengths(ledger: Ledger) -> tuple[int | None, int | None]:
    """Prompt and response caps: the engine's prompt_length / response_length (default: data.max_*)."""
    prompt = ledger.int_value("data.max_prompt_length", "workload.prompt_length.max")
    response = ledger.int_value("data.max_response_length", "workload.response_length.max")
    prompt = ledger.int_value(f"{R}.prompt_length", "workload.prompt_length.max", default=prompt)
    response = ledger.int_value(f"{R}.response_length", "workload.response_length.max (max_tokens)",
                                default=response)
    return prompt, response


def _parallel(ledger: Ledger, prefix: str, engine_key: str, strategy: str, gpus: int) -> dict[str, Any]:
    if strategy != "megatron":
        # FSDP's Ulysses sequence parallelism: the role's (deprecated) key wins over fsdp_config's when > 1
        target = f"roles.*.parallel.cp ({prefix}, cp_kind ulysses)"
        sp = ledger.int_value(f"{prefix}.ulysses_sequence_parallel_size", target, default=1) or 1
        inner = ledger.int_value(f"{engine_key}.ulysses_sequence_parallel_size", target, default=1) or 1
        sp = sp if sp > 1 else inner
        if gpus % sp:
            ledger.error(f"{prefix}.ulysses_sequence_parallel_size",
                         f"Ulysses sequence parallel {sp} does not divide the {gpus} training GPUs")
        return {"tp": 1, **({"cp": sp, "cp_kind": "ulysses"} if sp > 1 else {})}
    meg = f"{prefix}.megatron"
    tp = ledger.int_value(f"{meg}.tensor_model_parallel_size", f"roles.*.parallel.tp ({prefix})", default=1) or 1
    pp = ledger.int_value(f"{meg}.pipeline_model_parallel_size", f"roles.*.parallel.pp ({prefix})", default=1) or 1
    if gpus % (tp * pp):
        ledger.error(f"{meg}.tensor_model_parallel_size",
                     f"tensor × pipeline parallel = {tp} × {pp} does not divide the {gpus} training GPUs")
    # Megatron's expert_model_parallel_size: experts sharded over ep of the tp x dp ranks (docs/operators.md)
    ep = ledger.int_value(f"{meg}.expert_model_parallel_size", f"roles.*.parallel.ep ({prefix})", default=1) or 1
    cp = ledger.int_value(f"{meg}.context_parallel_size", f"roles.*.parallel.cp ({prefix}, cp_kind ring)",
                          default=1) or 1
    context = {"cp": cp, "cp_kind": "ring"} if cp > 1 else {}
    if ledger.flag(f"{meg}.dynamic_context_parallel", f"roles.*.parallel.cp_dynamic ({prefix}); cp = GPUs / (tp × pp): "
                   "verl schedules the whole data x context parallel group"):
        context = {"cp": max(1, gpus // (tp * pp)), "cp_kind": "ring", "cp_dynamic": True}
    if gpus % (tp * pp * cp):
        ledger.error(f"{meg}.context_parallel_size",
                     f"tensor × pipeline × context parallel = {tp} × {pp} × {cp} does not divide the {gpus} GPUs")
    return {"tp": tp, "pp": pp, **({"ep": ep} if ep > 1 else {}), **context}


def _train_role(ledger: Ledger, prefix: str, fsdp_key: str, pool: str, model: str, gpus: int,
                lengths: tuple[int | None, int | None]) -> dict[str, Any]:
    """actor / ref / critic: strategy, Megatron sizes, offload, the micro-batch token budget."""
    role = prefix.split(".")[-1].replace("ref", "reference")
    raw = ledger.use(f"{prefix}.strategy", f"roles.{role}.train.sharding", default="fsdp")
    strategy = STRATEGIES.get(str(raw))
    if strategy is None:
        ledger.error(f"{prefix}.strategy", f"unknown strategy {raw!r} (known: {', '.join(STRATEGIES)})")
        strategy = "fsdp"
    engine = f"{prefix}.{'megatron' if strategy == 'megatron' else fsdp_key}"
    train: dict[str, Any] = {"sharding": strategy}
    for knob in ("param_offload", "optimizer_offload", "grad_offload"):
        value = ledger.flag(f"{engine}.{knob}", f"roles.{role}.train.{knob}")
        if value is not None:
            train[knob] = value
    checkpointing = ledger.flag(
        f"{'critic' if role == 'critic' else 'actor_rollout_ref'}.model.enable_gradient_checkpointing",
        f"roles.{role}.train.activation_checkpointing")
    if checkpointing is not None:
        train["activation_checkpointing"] = checkpointing
    balance = ledger.flag("trainer.balance_batch", "roles.*.train.balance_batch")
    if balance is not None:
        train["balance_batch"] = balance
    budget = _token_budget(ledger, prefix, role, gpus, lengths)
    parallel = _parallel(ledger, prefix, engine, strategy, gpus)
    if parallel.get("cp_dynamic"):  # dynamic CP packs micro-batches by its own per-rank budget
        budget = ledger.int_value(f"{engine}.max_seqlen_per_dp_cp_rank",
                                  f"roles.{role}.train.ppo_max_token_len_per_gpu (dynamic context parallel)") or budget
    if budget is not None:
        train["ppo_max_token_len_per_gpu"] = budget
    return {"pool": pool, "model": model, "parallel": parallel, "train": train}


def _token_budget(ledger: Ledger, prefix: str, role: str, gpus: int, lengths) -> int | None:
    """Dynamic batching's token budget, or a fixed micro-batch of samples x the longest sequence."""
    forward = role == "reference"
    dyn_key = f"{prefix}.{'log_prob_use_dynamic_bsz' if forward else 'use_dynamic_bsz'}"
    budget_key = f"{prefix}.{'log_prob_max_token_len_per_gpu' if forward else 'ppo_max_token_len_per_gpu'}"
    micro_key = f"{prefix}.{'log_prob_micro_batch_size_per_gpu' if forward else 'ppo_micro_batch_size_per_gpu'}"
    target = f"roles.{role}.train.ppo_max_token_len_per_gpu"
    if ledger.flag(dyn_key, f"{target} (dynamic batching)"):
        return ledger.int_value(budget_key, target)
    micro = ledger.int_value(micro_key, f"{target} = micro-batch x (prompt + response caps)")
    global_micro = ledger.int_value(micro_key.removesuffix("_per_gpu"), f"{target} (global micro-batch / GPUs)")
    if micro is None and global_micro is not None:
        micro = max(1, global_micro // gpus)
    if micro is None:
        ledger.ignore(budget_key, "used only with dynamic batching (use_dynamic_bsz: false here)")
        ledger.assume(f"{role} micro-batch (no {micro_key.split('.')[-1]} in the config)",
                      "16384 tokens per GPU", f"--set roles.{role}.train.ppo_max_token_len_per_gpu=N")
        return None
    ledger.ignore(budget_key, "used only with dynamic batching (use_dynamic_bsz: false here)")
    return micro * ((lengths[0] or 512) + (lengths[1] or 512))


def _rollout_role(ledger: Ledger, pool: str, pool_spec: dict, kind: str) -> dict[str, Any]:
    gpus = pool_spec["nodes"] * pool_spec["gpus_per_node"]
    name = ledger.use(f"{R}.name", "roles.rollout.engine.kind")
    engine: dict[str, Any] = {}
    if name is None or is_missing(name):
        ledger.assume("rollout engine (actor_rollout_ref.rollout.name is ??? in the config)", "generic",
                      "actor_rollout_ref.rollout.name=vllm|sglang, or --set roles.rollout.engine.kind=KIND")
    elif isinstance(name, str) and name in ENGINE_KINDS:
        engine["kind"] = ENGINE_KINDS[name]
    else:
        ledger.error(f"{R}.name", f"unknown rollout engine {name!r} (rlsim models {', '.join(ENGINE_KINDS)})")
    tp = ledger.int_value(f"{R}.tensor_model_parallel_size", "roles.rollout.parallel.tp", default=1) or 1
    pp = ledger.int_value(f"{R}.pipeline_model_parallel_size", "roles.rollout.parallel.pp", default=1) or 1
    if pp > 1:
        ledger.error(f"{R}.pipeline_model_parallel_size", f"{pp}: rlsim models an inference engine as tp GPUs "
                     "without pipeline stages (roles.rollout.parallel.pp must be 1)")
    if pool_spec["gpus_per_node"] % tp or gpus % (tp * pp):
        ledger.error(f"{R}.tensor_model_parallel_size", f"rollout TP {tp} (x PP {pp}) does not divide the "
                     f"{gpus} rollout GPUs ({pool_spec['gpus_per_node']} per node)")
    ep = ledger.int_value(f"{R}.expert_parallel_size", "roles.rollout.parallel.ep (experts over the engine's GPUs)",
                          default=1) or 1
    if tp % ep:
        ledger.error(f"{R}.expert_parallel_size", f"{ep} does not divide the rollout TP {tp}: rlsim shards experts "
                     "over one engine's GPUs (vLLM's EP without data-parallel attention)")
    for key, field in ENGINE_KNOBS:
        value = ledger.use(f"{R}.{key}", f"roles.rollout.engine.{field}")
        if value is not None:
            engine[field] = value
    eager = ledger.flag(f"{R}.enforce_eager", "roles.rollout.engine.cuda_graphs (= not enforce_eager)")
    if eager is not None:
        engine["cuda_graphs"] = not eager
    free = ledger.peek(f"{R}.free_cache_engine")
    if kind == "hybridflow" and free is False:
        ledger.ignore(f"{R}.free_cache_engine", "false (KV kept while training) is not modelled: rlsim's "
                      "colocated switch always frees the KV cache")
    else:
        ledger.use(f"{R}.free_cache_engine", "colocated switch frees the KV cache (hybridflow's switch)"
                   if kind == "hybridflow" else f"engines keep their KV ({kind}: rollout GPUs are its own)")
    engine.update(rollout_modes(ledger, engine.get("kind")))  # quantised / speculative rollout
    if ledger.peek(f"{R}.disaggregation.enabled") is True:  # prefill/decode split
        try:
            nvlink = load_profile(pool_spec["hardware"]).nvlink_gb_per_s > 0
        except KeyError:  # an unknown GPU: the scenario check names it
            nvlink = True
        engine.update(disaggregation(ledger, tp, gpus, pool_spec["gpus_per_node"], nvlink))
    parallel = {"tp": tp, "pp": pp, **({"ep": ep} if ep > 1 else {})}
    return {"pool": pool, "model": "policy", "parallel": parallel, "engine": engine}


def _algorithm(ledger: Ledger, kind: str, train_gpus: int) -> dict[str, Any]:
    adv = ledger.use("algorithm.adv_estimator", "algorithm.kind", default="grpo")
    algo_kind = ADVANTAGES.get(str(adv), "grpo")
    if ledger.peek("algorithm.filter_groups.enable") is True:
        ledger.use("algorithm.filter_groups.enable", "algorithm.kind = dapo (filtered groups are not re-generated)")
        algo_kind = "dapo"
    else:
        ledger.use("algorithm.filter_groups.enable", "algorithm.kind (no dynamic sampling)")
    n = ledger.int_value(f"{R}.n", "algorithm.samples_per_prompt", default=1) or 1
    epochs = ledger.int_value(f"{A}.ppo_epochs", "algorithm.epochs", default=1) or 1
    algo: dict[str, Any] = {"kind": algo_kind, "samples_per_prompt": n, "epochs": epochs}
    workers = ledger.int_value("reward.num_workers", "algorithm.rule_reward_workers")
    if workers:
        algo["rule_reward_workers"] = workers
    mini = ledger.peek(f"{A}.ppo_mini_batch_size")
    if kind == "fully-async":
        batch = ledger.peek("data.train_batch_size")
        if batch != 0:
            ledger.error("data.train_batch_size", f"verl fully_async requires 0 (its trainer takes require_batches "
                         f"× ppo_mini_batch_size prompts per step), got {batch!r}: set data.train_batch_size=0")
        ledger.use("data.train_batch_size", "0: prompts per step = require_batches × ppo_mini_batch_size")
        require = ledger.peek("async_training.require_batches") or 1
        mini = ledger.int_value(f"{A}.ppo_mini_batch_size", "schedule.ppo_mini_batch_size") or 1
        algo.update(prompts_per_step=require * mini, mini_batches=require)
        return algo
    if kind == "verl-v1":
        return algo | _v1_batch(ledger)
    batch = ledger.int_value("data.train_batch_size", "algorithm.prompts_per_step") or 1
    mini = ledger.int_value(f"{A}.ppo_mini_batch_size", "algorithm.mini_batches = train_batch_size / this") or batch
    if batch % mini:
        ledger.error(f"{A}.ppo_mini_batch_size", f"{mini} does not divide data.train_batch_size ({batch}): verl "
                     "needs a whole number of mini-batches")
    algo.update(prompts_per_step=batch, mini_batches=max(1, batch // mini))
    return algo


def _v1_batch(ledger: Ledger) -> dict[str, int]:
    """verl V1 (trainer_base.step): one verl step is `parameter_sync_step` local updates of train_batch_size / k
    prompts each, then one weight push. An rlsim trainer step is one local update, so a weight version
    (k trainer steps) holds train_batch_size prompts, as verl's does (not k times that)."""
    mode = v1_mode(ledger)
    k = v1_sync_step(ledger, mode)
    batch = ledger.int_value("data.train_batch_size", f"algorithm.prompts_per_step = train_batch_size / "
                             f"parameter_sync_step ({k}): one weight version") or 1
    mini = ledger.int_value(f"{A}.ppo_mini_batch_size", "algorithm.mini_batches = train_batch_size / "
                            "parameter_sync_step / this") or max(1, batch // k)
    if batch % k:
        ledger.error("data.train_batch_size", f"{batch} is not divisible by parameter_sync_step ({k}): verl's V1 "
                     "trainer splits it into that many local updates")
    elif mode == "separate_async" and batch != k * mini:
        ledger.error("data.train_batch_size", f"separate_async needs train_batch_size = parameter_sync_step × "
                     f"ppo_mini_batch_size ({k} × {mini} = {k * mini}), got {batch} (verl asserts it)")
    elif (batch // k) % mini:
        ledger.error(f"{A}.ppo_mini_batch_size", f"{mini} does not divide train_batch_size / parameter_sync_step "
                     f"({batch // k}): verl needs a whole number of mini-batches")
    return {"prompts_per_step": max(1, batch // k), "mini_batches": max(1, batch // k // mini)}


def _reward(ledger: Ledger, roles: dict, models: dict, algo: dict, pools: dict, train_pool: str, hw: str) -> None:
    """A reward model (reward.reward_model, or the legacy reward_model block) as a forward-pass role."""
    new, old = "reward.reward_model", "reward_model"
    enabled = ledger.flag(f"{new}.enable", "roles.reward") or ledger.use(f"{old}.enable", "roles.reward")
    if not enabled:
        return
    prefix = new if ledger.peek(f"{new}.enable") else old
    path_key = f"{new}.model_path" if prefix == new else f"{old}.model.path"
    models["reward"] = model_spec(ledger, path_key, None, "reward")
    tp = ledger.int_value(f"{prefix}.rollout.tensor_model_parallel_size", "roles.reward.parallel.tp", default=1) or 1
    pool = train_pool
    if ledger.flag(f"{prefix}.enable_resource_pool", "cluster.pools.reward (own GPUs)"):
        nodes = ledger.int_value(f"{prefix}.nnodes", "cluster.pools.reward.nodes") or 1
        per = ledger.int_value(f"{prefix}.n_gpus_per_node", "cluster.pools.reward.gpus_per_node") or 8
        pools["reward"] = {"hardware": hw, "nodes": nodes, "gpus_per_node": per}
        pool = "reward"
    roles["reward"] = {"pool": pool, "model": "reward", "parallel": {"tp": tp}, "train": {"sharding": "fsdp"}}
    algo.pop("rule_reward_workers", None)


def _rollout_logprobs(ledger: Ledger, schedule: dict[str, Any]) -> None:
    """Training on the engine's log-probs (no old_log_prob pass), in every schedule verl runs."""
    bypass = ledger.flag(f"{A}.use_rollout_log_probs", "schedule.recompute_logprob = not this")
    bypass = ledger.flag("algorithm.rollout_correction.bypass_mode", "schedule.recompute_logprob = not this") \
        or bypass
    if bypass is not None:
        schedule["recompute_logprob"] = not bypass


def _lora(ledger: Ledger, schedule: dict[str, Any]) -> None:
    """actor_rollout_ref.model.lora_rank > 0: LoRA RL (the adapters' rank and which modules they adapt)."""
    rank = ledger.int_value("actor_rollout_ref.model.lora_rank", "schedule.lora.rank", minimum=0)
    if not rank:
        return
    targets = ledger.use("actor_rollout_ref.model.target_modules", "schedule.lora.targets", default="all-linear")
    mlp = targets == "all-linear" or any(m in str(targets) for m in ("gate", "up_proj", "down_proj", "fc"))
    schedule["lora"] = {"rank": rank, "targets": "all-linear" if mlp else "attention"}


def _weight_sync(ledger: Ledger, schedule: dict[str, Any], disaggregated: bool) -> None:
    """actor_rollout_ref.rollout.checkpoint_engine -> schedule.weight_sync: the backend's path, its bucket size, and
    the NCCL engine's multi_sender (verl 0.9.1 default true: rank 0's node-local peers relay, `senders: all`)."""
    ce = f"{R}.checkpoint_engine"
    bucket = ledger.use(f"{ce}.update_weights_bucket_megabytes", "schedule.weight_sync.bucket_mb")
    backend = ledger.use(f"{ce}.backend", "schedule.weight_sync.path")
    senders = None
    if backend in ("nccl", "delta_sharded") and disaggregated:
        multi = ledger.flag(f"{ce}.engine_kwargs.nccl.multi_sender", "schedule.weight_sync.senders", default=True)
        senders = "all" if multi and backend == "nccl" else None
    ledger.ignore(f"{ce}.custom_backend_module", "a custom checkpoint-engine backend: rlsim prices the path named by "
                  "backend (describe yours with --set schedule.weight_sync...)")
    ledger.ignore(f"{ce}.engine_kwargs", "backend options that do not change the path (devices, dtypes, groups)")
    try:
        sync = weight_sync_from_knobs(transport=backend, bucket_mb=bucket, senders=senders)
    except ValueError as exc:
        ledger.error(f"{ce}.backend" if backend is not None else f"{ce}.update_weights_bucket_megabytes", str(exc))
        return
    if sync:
        schedule["weight_sync"] = sync


def _schedule(ledger: Ledger, kind: str, engines: int) -> dict[str, Any]:
    schedule: dict[str, Any] = {"kind": kind}
    colocated = kind == "hybridflow" or (kind == "verl-v1" and v1_mode(ledger) == "colocate_async")
    _weight_sync(ledger, schedule, disaggregated=not colocated)
    _rollout_logprobs(ledger, schedule)
    _lora(ledger, schedule)
    if kind == "hybridflow":
        if ledger.use("actor_rollout_ref.hybrid_engine", "schedule.placement = colocate") is False:
            ledger.error("actor_rollout_ref.hybrid_engine", "false needs a separate rollout pool: import the "
                         "one_step_off_policy or fully_async_policy config instead")
        mode = ledger.use("trainer.v1.trainer_mode", "schedule.kind = hybridflow (sync)", default="sync")
        if ledger.peek("trainer.use_v1") and mode != "sync":
            ledger.error("trainer.v1.trainer_mode", f"{mode!r} is not imported (only sync); for asynchronous "
                         "training import verl's fully_async_policy or one_step_off_policy config")
        ledger.use("trainer.use_v1", "schedule.kind = hybridflow")
        schedule["placement"] = "colocate"
        return schedule
    if kind == "one-step-off":
        return schedule
    if kind == "verl-v1":
        return v1_schedule(ledger, v1_mode(ledger), schedule)
    at = "async_training"
    schedule["max_head_offpolicyness"] = None
    schedule["staleness_threshold"] = ledger.use(f"{at}.staleness_threshold", "schedule.staleness_threshold")
    for key in ("trigger_parameter_sync_step", "require_batches"):
        value = ledger.int_value(f"{at}.{key}", f"schedule.{key}")
        if value is not None:
            schedule[key] = value
    partial = ledger.flag(f"{at}.partial_rollout", "schedule.partial_rollout")
    if partial is not None:
        schedule["partial_rollout"] = partial
    schedule["ppo_mini_batch_size"] = ledger.peek(f"{A}.ppo_mini_batch_size")
    per_replica = ledger.int_value(f"{at}.concurrent_samples_per_replica", "schedule.max_concurrent_rollouts")
    if per_replica is not None and per_replica != 16:
        schedule["max_concurrent_rollouts"] = per_replica * engines
    return schedule
