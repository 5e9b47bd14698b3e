"""slime launch script (flags in bash arrays, a sourced model script) -> an rlsim scenario.

The script is read as text (rlsim/tools/importers/slime_script.py), never run. Each flag passed to
`train.py` / `train_async.py` is one key of the lists (`--rollout-batch-size = 32 -> algorithm.prompts_per_step`).

Schedules (slime's README and its `train.py` / `train_async.py`): `--colocate` -> training and rollout take
turns on the same GPUs (hybridflow colocated); without it `train.py` still alternates, on a rollout pool of
`--rollout-num-gpus` and a training pool (hybridflow, roles on their own pools); `train_async.py` generates the
next rollout while the current one trains (one-step-off); `--max-policy-version-lag N` or a fully-async rollout
function (`--rollout-function-path ...fully_async...`) -> fully-async with the staleness bound N.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlsim.tools.importers.common import Assumption, ImportProblem, Ledger, pool_shape
from rlsim.tools.importers.draft import Imported, finalize, hardware, workload
from rlsim.tools.importers.shapes import model_spec
from rlsim.tools.importers.slime_ignored import ignore_rest
from rlsim.tools.importers.slime_script import flags_of, read_script

ENTRY = "(entry point)"
ADVANTAGES = {"grpo": "grpo", "gspo": "grpo", "reinforce_plus_plus": "grpo", "reinforce_plus_plus_baseline": "grpo",
              "ppo": "ppo"}
ASSUMED_GPUS_PER_NODE = 8
# Megatron model flags -> ModelShape fields (the sourced scripts/models/*.sh)
MODEL_FLAGS = {"layers": "--num-layers", "hidden": "--hidden-size", "heads": "--num-attention-heads",
               "vocab": "--vocab-size"}


def import_slime(path: Path, overrides: list[str], *, model_config: Path | None = None, gpu: str | None = None,
                 sets: list[str] = (), config_dirs: list[Path] = ()) -> Imported:
    """Read the launch script as text, map its flags (extra flags in `overrides` win, as argparse's last)."""
    script = read_script(path)
    flags, stray = flags_of([*script.args, *overrides])
    if stray:
        raise ImportProblem(str(path), ENTRY, f"arguments before the first flag: {' '.join(stray)} (slime takes "
                            "--flag value pairs)")
    ledger = Ledger.of(str(path), {ENTRY: script.entry, **flags})
    for text, why in script.unresolved.items():
        ledger.assume(f"{text} in the script: {why}", "not expanded (a flag that needs it is assumed below)",
                      "rlsim import slime SCRIPT -- --flag value")
    hw = hardware(ledger, gpu)
    mode = _mode(ledger)
    pools, train_pool, gen_pool = _pools(ledger, hw, mode)
    prompt = ledger.int_value("--rollout-max-prompt-len", "workload.prompt_length.max")
    response = ledger.int_value("--rollout-max-response-len", "workload.response_length.max")
    models = {"policy": _model(ledger, model_config)}
    train_gpus = pools[train_pool]["nodes"] * pools[train_pool]["gpus_per_node"]
    actor = _train_role(ledger, train_pool, train_gpus, (prompt, response))
    offload = mode == "colocate" or ledger.peek("--offload") is True or ledger.peek("--offload-train") is True
    if offload:
        for flag in ("--colocate", "--offload", "--offload-train"):
            ledger.use(flag, "roles.actor / reference .train.param_offload + optimizer_offload (slime's --colocate "
                       "implies --offload: the trainer's weights and optimizer leave the GPU for the rollout)")
        actor["train"].update(param_offload=True, optimizer_offload=True)
    roles: dict[str, Any] = {"actor": actor, "rollout": _rollout_role(ledger, gen_pool, pools[gen_pool])}
    if ledger.flag("--use-kl-loss", "roles.reference (slime computes reference log-probs with a KL loss)"):
        roles["reference"] = {**actor, "parallel": dict(actor["parallel"]),
                              "train": {k: v for k, v in actor["train"].items()
                                        if k in ("sharding", "ppo_max_token_len_per_gpu", "param_offload")}}
        ledger.assume("reference forward pass with --use-kl-loss", "every step, even at --kl-loss-coef 0",
                      "delete roles.reference from the written scenario")
    algorithm = _algorithm(ledger)
    schedule = _schedule(ledger, mode)
    ignore_rest(ledger)
    _slime_flags(ledger)
    data = {"name": path.stem, "description": f"imported from slime script {path.name}", "steps": 3,
            "cluster": {"pools": pools}, "models": models, "roles": roles, "algorithm": algorithm,
            "workload": workload(ledger, prompt, response), "schedule": schedule}
    sourced = "".join(f"\n(sourced {p})" for p in script.sourced)
    return finalize(data, ledger, list(sets), f"Imported by `rlsim import slime {path}`.{sourced}")


def _slime_flags(ledger: Ledger) -> None:
    """Absent flags read with slime's default are set on slime's command line, not as Hydra's `+key=V`."""
    ledger.assumed = [Assumption(a.what, a.value, f"rlsim import slime SCRIPT -- {a.flag[1:].removesuffix('=V')} V")
                      if a.flag.startswith("+--") else a for a in ledger.assumed]


def _int(ledger: Ledger, flag: str, target: str, default: int | None, what: str = "") -> int | None:
    """An integer flag; one the script computes (unresolved) is assumed `default` and listed."""
    value = ledger.peek(flag)
    if isinstance(value, str) and "$" in value:
        ledger.use(flag, target)
        ledger.assume(f"{flag} = {value} (computed by the shell, not resolved){what}", default,
                      f"rlsim import slime SCRIPT -- {flag} N")
        return default
    return ledger.int_value(flag, target, default=default)


def _mode(ledger: Ledger) -> str:
    """colocate | sync (disjoint pools, alternating) | one-step-off | fully-async."""
    entry = ledger.use(ENTRY, "schedule.kind (train.py: synchronous; train_async.py: one-step-off)")
    colocate = ledger.flag("--colocate", "schedule: hybridflow colocated")
    lag = ledger.peek("--max-policy-version-lag")
    function = ledger.peek("--rollout-function-path")
    fully = lag is not None or (isinstance(function, str) and "fully_async" in function)
    if fully:
        ledger.use("--rollout-function-path", "schedule.kind = fully-async (a fully-async rollout function)")
    if colocate and (entry == "train_async.py" or fully):
        ledger.error("--colocate", f"slime's asynchronous training ({entry}"
                     f"{', a policy-version lag' if fully else ''}) needs rollout GPUs of its own: drop --colocate")
    if colocate:
        return "colocate"
    if fully:
        return "fully-async"
    return "one-step-off" if entry == "train_async.py" else "sync"


def _pools(ledger: Ledger, hw: str, mode: str) -> tuple[dict, str, str]:
    nodes = _int(ledger, "--actor-num-nodes", "cluster.pools.*.nodes (training)", 1) or 1
    per_node = _int(ledger, "--actor-num-gpus-per-node", "cluster.pools.*.gpus_per_node (training)",
                    ASSUMED_GPUS_PER_NODE) or ASSUMED_GPUS_PER_NODE
    train = {"hardware": hw, "nodes": nodes, "gpus_per_node": per_node}
    if mode == "colocate":
        ledger.ignore("--rollout-num-gpus", "with --colocate slime generates on the training GPUs")
        return {"main": train}, "main", "main"
    gpus = _int(ledger, "--rollout-num-gpus", "cluster.pools.gen (rollout GPUs)", None)
    if gpus is None:
        ledger.error("--rollout-num-gpus", "without --colocate slime needs the rollout GPUs' count")
        gpus = per_node
    gen_nodes, gen_per_node = pool_shape(gpus, per_node)
    if gen_per_node != per_node or gpus % per_node:
        ledger.assume("rollout GPUs per node", f"{gen_per_node} ({gpus} GPUs on nodes of the trainer's {per_node})",
                      "--set cluster.pools.gen.gpus_per_node=N")
    return {"train": train, "gen": {"hardware": hw, "nodes": gen_nodes, "gpus_per_node": gen_per_node}}, "train", "gen"


def _model(ledger: Ledger, model_config: Path | None) -> dict[str, Any]:
    """The sourced model script's Megatron flags give the shape; else --hf-checkpoint's name (a preset)."""
    if model_config is not None or any(not isinstance(ledger.peek(f), int) for f in MODEL_FLAGS.values()):
        return model_spec(ledger, "--hf-checkpoint", model_config, "policy")
    shape: dict[str, Any] = {key: ledger.use(flag, f"models.policy.{key}") for key, flag in MODEL_FLAGS.items()}
    gqa = ledger.flag("--group-query-attention", "models.policy.kv_heads (--num-query-groups)")
    groups = ledger.int_value("--num-query-groups", "models.policy.kv_heads") if gqa else None
    shape["kv_heads"] = groups or shape["heads"]
    head_dim = ledger.int_value("--kv-channels", "models.policy.head_dim")
    if head_dim is not None:
        shape["head_dim"] = head_dim
    experts = ledger.int_value("--num-experts", "models.policy.num_experts")
    ffn_flag = "--moe-ffn-hidden-size" if experts else "--ffn-hidden-size"
    shape["ffn"] = ledger.int_value(ffn_flag, "models.policy.ffn (per expert for MoE)")
    if experts:
        ledger.ignore("--ffn-hidden-size", "the dense FFN width of an MoE model: rlsim's shape has MoE layers only "
                      "(--moe-ffn-hidden-size)")
        shape["num_experts"] = experts
        shape["experts_per_token"] = ledger.int_value("--moe-router-topk", "models.policy.experts_per_token",
                                                      default=2) or 2
        freq = ledger.peek("--moe-layer-freq")
        if freq is not None:
            ledger.use("--moe-layer-freq", "every layer an MoE layer (rlsim's model shape)")
            if isinstance(freq, str) and "$" in freq:
                ledger.assume(f"--moe-layer-freq = {freq} (computed by the model script's printf)",
                              "every layer MoE", "--set models.policy.* (rlsim has no dense layers among MoE ones)")
    shape["tied_embeddings"] = not ledger.flag("--untie-embeddings-and-output-weights",
                                               "models.policy.tied_embeddings = not this", default=False)
    if shape["ffn"] is None:
        return model_spec(ledger, "--hf-checkpoint", None, "policy")
    ledger.use("--hf-checkpoint", "models.policy (name only: the shape comes from the model script's flags)")
    return shape


def _train_role(ledger: Ledger, pool: str, gpus: int, lengths: tuple[int | None, int | None]) -> dict[str, Any]:
    tp = _int(ledger, "--tensor-model-parallel-size", "roles.actor.parallel.tp", 1) or 1
    pp = _int(ledger, "--pipeline-model-parallel-size", "roles.actor.parallel.pp", 1) or 1
    ep = _int(ledger, "--expert-model-parallel-size", "roles.actor.parallel.ep", 1) or 1
    cp = _int(ledger, "--context-parallel-size", "roles.actor.parallel.cp (Megatron's ring, cp_kind ring)", 1) or 1
    if gpus % (tp * pp * cp):
        ledger.error("--tensor-model-parallel-size", f"tensor × pipeline × context parallel = {tp} × {pp} × {cp} "
                     f"does not divide the {gpus} training GPUs")
    train: dict[str, Any] = {"sharding": "megatron"}
    granularity = ledger.use("--recompute-granularity", "roles.actor.train.activation_checkpointing (set: true)")
    train["activation_checkpointing"] = granularity is not None
    if ledger.flag("--optimizer-cpu-offload", "roles.actor.train.optimizer_offload"):
        train["optimizer_offload"] = True
    if ledger.flag("--balance-data", "roles.actor.train.balance_batch"):
        train["balance_batch"] = True
    target = "roles.actor.train.ppo_max_token_len_per_gpu"
    if ledger.flag("--use-dynamic-batch-size", f"{target} (dynamic batching)"):
        budget = ledger.int_value("--max-tokens-per-gpu", target)
        if budget is None:
            ledger.error("--max-tokens-per-gpu", "--use-dynamic-batch-size needs --max-tokens-per-gpu")
        train["ppo_max_token_len_per_gpu"] = budget or 16384
        ledger.ignore("--micro-batch-size", "unused with --use-dynamic-batch-size")
    else:
        micro = ledger.int_value("--micro-batch-size", f"{target} = micro-batch × (prompt + response caps)",
                                 default=1) or 1
        train["ppo_max_token_len_per_gpu"] = micro * ((lengths[0] or 512) + (lengths[1] or 512))
        ledger.ignore("--max-tokens-per-gpu", "used only with --use-dynamic-batch-size")
    return {"pool": pool, "model": "policy", "parallel": {"tp": tp, "pp": pp, **({"ep": ep} if ep > 1 else {}),
                                                          **({"cp": cp, "cp_kind": "ring"} if cp > 1 else {})},
            "train": train}


def _rollout_role(ledger: Ledger, pool: str, pool_spec: dict) -> dict[str, Any]:
    tp = _int(ledger, "--rollout-num-gpus-per-engine", "roles.rollout.parallel.tp (SGLang TP per engine)", 1) or 1
    gpus = pool_spec["nodes"] * pool_spec["gpus_per_node"]
    if pool_spec["gpus_per_node"] % tp or gpus % tp:
        ledger.error("--rollout-num-gpus-per-engine", f"{tp} GPUs per engine do not divide the {gpus} rollout GPUs "
                     f"({pool_spec['gpus_per_node']} per node): rlsim places an engine inside a node")
    engine: dict[str, Any] = {"kind": "sglang-0.4"}
    ledger.assume("rollout engine", "sglang-0.4 (slime serves rollouts with SGLang)",
                  "--set roles.rollout.engine.kind=KIND")
    memory = ledger.fraction("--sglang-mem-fraction-static", "roles.rollout.engine.gpu_memory_utilization")
    if memory is not None:
        engine["gpu_memory_utilization"] = memory
    running = ledger.int_value("--sglang-max-running-requests", "roles.rollout.engine.max_num_seqs")
    if running is not None:
        engine["max_num_seqs"] = running
    chunk = ledger.int_value("--sglang-chunked-prefill-size", "roles.rollout.engine.max_num_batched_tokens")
    if chunk is not None:
        engine["max_num_batched_tokens"] = chunk
    if ledger.flag("--sglang-disable-cuda-graph", "roles.rollout.engine.cuda_graphs = not this"):
        engine["cuda_graphs"] = False
    ep = ledger.int_value("--sglang-ep-size", "roles.rollout.parallel.ep", default=1) or 1
    if tp % ep:
        ledger.error("--sglang-ep-size", f"{ep} does not divide the engine's {tp} GPUs")
    prefill = ledger.int_value("--prefill-num-servers", "roles.rollout.engine.disaggregation.prefill_engines")
    if prefill is not None and gpus % tp == 0:  # SGLang PD behind slime's router: these prefill, the rest decode
        if prefill >= gpus // tp:
            ledger.error("--prefill-num-servers", f"{prefill} prefill engines leave none of the {gpus // tp} rollout "
                         "engines to decode")
        else:
            ledger.assume("SGLang PD: KV link between prefill and decode engines", "rdma (Mooncake over the NICs)",
                          "--set roles.rollout.engine.disaggregation.kv_link=nvlink|rdma|pcie")
            engine["disaggregation"] = {"prefill_engines": prefill, "decode_engines": gpus // tp - prefill,
                                        "kv_link": "rdma"}
    return {"pool": pool, "model": "policy", "parallel": {"tp": tp, **({"ep": ep} if ep > 1 else {})},
            "engine": engine}


def _algorithm(ledger: Ledger) -> dict[str, Any]:
    prompts = ledger.int_value("--rollout-batch-size", "algorithm.prompts_per_step")
    if prompts is None:
        if not ledger.has("--rollout-batch-size"):
            ledger.error("--rollout-batch-size", "required (prompts per rollout)")
        prompts = 1
    n = ledger.int_value("--n-samples-per-prompt", "algorithm.samples_per_prompt", default=1) or 1
    estimator = ledger.use("--advantage-estimator", "algorithm.kind (gspo / reinforce++ priced as grpo)",
                           default="grpo")
    kind = ADVANTAGES.get(str(estimator))
    if kind is None or kind == "ppo":
        ledger.error("--advantage-estimator", f"{estimator!r} is not imported (rlsim imports slime's grpo, gspo and "
                     "reinforce_plus_plus; PPO's critic is not mapped)")
        kind = "grpo"
    if ledger.peek("--dynamic-sampling-filter-path") is not None:
        ledger.use("--dynamic-sampling-filter-path", "algorithm.kind = dapo (filtered groups are not re-generated)")
        kind = "dapo"
    samples = prompts * n
    steps = ledger.int_value("--num-steps-per-rollout", "algorithm.mini_batches")
    batch = ledger.int_value("--global-batch-size", "algorithm.mini_batches = samples per rollout / this")
    if steps is None:
        if batch is None:
            ledger.assume("optimizer steps per rollout (no --global-batch-size or --num-steps-per-rollout)", 1,
                          "--set algorithm.mini_batches=N")
        steps = samples // batch if batch else 1
        if batch and samples % batch:
            ledger.error("--global-batch-size", f"{batch} does not divide the {prompts} × {n} = {samples} samples "
                         "of a rollout")
    return {"kind": kind, "prompts_per_step": prompts, "samples_per_prompt": n, "epochs": 1,
            "mini_batches": max(1, steps)}


def _schedule(ledger: Ledger, mode: str) -> dict[str, Any]:
    if mode in ("colocate", "sync"):
        return {"kind": "hybridflow", "placement": "colocate" if mode == "colocate" else "custom"}
    if mode == "one-step-off":
        return {"kind": "one-step-off"}
    lag = ledger.int_value("--max-policy-version-lag", "schedule.max_head_offpolicyness (admission bound)",
                           minimum=0)
    if lag is None:
        lag = 1
        ledger.assume("policy-version bound of the fully-async rollout (no --max-policy-version-lag)", lag,
                      "--set schedule.max_head_offpolicyness=N")
    ledger.assume("fully-async semantics of slime", "AReaL's admission rule with eta = the lag, samples over it "
                  "dropped, running generations finish before a weight update (interrupt: drain)",
                  "--set schedule.drop_stale=false --set schedule.interrupt=keep|recompute")
    return {"kind": "fully-async", "max_head_offpolicyness": lag, "drop_stale": True, "interrupt": "drain"}
