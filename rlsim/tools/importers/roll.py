"""ROLL pipeline config (RLVR and agentic) -> an rlsim scenario.

ROLL places every worker by `device_mapping` (GPU indices of one cluster). Workers on shared GPUs
take turns (a hybrid engine); `async_generation_ratio` > 0 needs actor_infer on GPUs of its own,
which becomes rlsim's `roll` schedule on a `gen` pool. Colocated ROLL becomes a hybridflow schedule
with `placement: custom` and ROLL's GPU ranges as `gpu_offset` + `gpus`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlsim.tools.importers.common import Ledger, show
from rlsim.tools.importers.draft import Imported, finalize, hardware, workload
from rlsim.tools.importers.loading import load_hydra_config, require_framework
from rlsim.tools.importers.roll_extras import agentic, ignore_rest, rewards
from rlsim.tools.importers.roll_layout import contiguous, layout, overlaps, parse_device_mapping
from rlsim.tools.importers.shapes import model_spec

WORKERS = {"actor_train": "actor", "actor_infer": "rollout", "reference": "reference", "critic": "critic"}
ENGINES = {"vllm": "vllm-v1", "sglang": "sglang-0.4"}
TRAIN = {"megatron_train": "megatron", "megatron_infer": "megatron", "deepspeed_train": "fsdp",
         "deepspeed_infer": "fsdp", "fsdp2_train": "fsdp", "fsdp2_infer": "fsdp", "hf_infer": "fsdp"}
ADVANTAGES = {"gae": "ppo"}


def import_roll(path: Path, overrides: list[str], *, model_config: Path | None = None, gpu: str | None = None,
                sets: list[str] = (), config_dirs: list[Path] = ()) -> Imported:
    config = load_hydra_config(path, list(overrides), list(config_dirs), framework="roll")
    require_framework(config, "roll", str(path))
    ledger = Ledger.of(str(path), config, "roll")
    for worker in ("actor_train", "actor_infer"):
        if not isinstance(config.get(worker), dict):
            ledger.error(worker, "required: rlsim needs the training and the generation workers")
    ledger.raise_problems()
    hw = hardware(ledger, gpu)
    ranges = _ranges(ledger, config)
    reward_role, reward_range, algo_extra = rewards(ledger, config)
    if reward_range is not None:
        ranges["reward"] = reward_range
    alpha = ledger.use("async_generation_ratio", "schedule.async_generation_ratio", default=0)
    separate = "rollout" in ranges and not any(
        overlaps(ranges["rollout"], r) for role, r in ranges.items() if role != "rollout")
    if alpha and not separate:
        ledger.error("async_generation_ratio", f"{alpha} needs actor_infer on GPUs of its own, but its "
                     "device_mapping overlaps another worker's")
    ledger.raise_problems()
    per_node = ledger.int_value("num_gpus_per_node", "cluster.pools.*.gpus_per_node", default=8) or 8
    pools, placed = layout(ranges, per_node, hw, separate)
    agent = agentic(ledger, config)
    lengths = (ledger.int_value("prompt_length", "workload.prompt_length.max"),
               ledger.int_value("response_length", "workload.response_length.max"))
    if agent is None:
        lengths = (lengths[0], ledger.int_value("actor_infer.generating_args.max_new_tokens",
                                                "workload.response_length.max (max_tokens)", default=lengths[1]))
    models = {"policy": _policy_model(ledger, config, model_config)}
    for worker in WORKERS:
        if worker in config and not isinstance(config[worker], dict):
            ledger.error(worker, f"expected a mapping (the worker's settings), got {show(config[worker])}")
    roles = {WORKERS[w]: _role(ledger, w, placed[WORKERS[w]], lengths) for w in WORKERS
             if isinstance(config.get(w), dict) and WORKERS[w] in placed}
    if reward_role is not None:
        judge_key = f"rewards.{reward_role.pop('_key')}.model_args.model_name_or_path"
        models["reward"] = model_spec(ledger, judge_key, None, "reward")
        roles["reward"] = {**reward_role, **placed["reward"], "model": "reward"}
        if ledger.peek("reward_pretrain") == ledger.peek(judge_key):
            ledger.use("reward_pretrain", "models.reward (same model)")
    algorithm = _algorithm(ledger, roles, ranges, algo_extra, agent[0] if agent else None)
    data = {"name": path.stem, "description": f"imported from ROLL config {path.name}", "steps": 3,
            "cluster": {"pools": pools}, "models": models, "roles": roles, "algorithm": algorithm,
            "workload": workload(ledger, *lengths)}
    if agent is not None:
        data["workload"]["agent"], data["environments"] = agent[1], agent[2]
    data["schedule"] = _schedule(ledger, separate, alpha, roles)
    ignore_rest(ledger)
    return finalize(data, ledger, list(sets), f"Imported by `rlsim import roll {path}`.")


def _ranges(ledger: Ledger, config: dict) -> dict[str, tuple[int, int]]:
    ranges = {}
    for worker, role in WORKERS.items():
        if not isinstance(config.get(worker), dict):
            continue
        key = f"{worker}.device_mapping"
        mapping = ledger.use(key, f"roles.{role}.pool / gpu_offset / gpus")
        try:
            gpus = parse_device_mapping(mapping)
        except ValueError as exc:
            ledger.error(key, str(exc))
            continue
        run = contiguous(gpus)
        if run is None:
            ledger.error(key, f"GPUs {gpus} are not one contiguous run: rlsim places a role on GPUs "
                         "[gpu_offset, gpu_offset + gpus)")
            continue
        ranges[role] = run
    return ranges


def _policy_model(ledger: Ledger, config: dict, model_config: Path | None) -> dict[str, Any]:
    key = "actor_train.model_args.model_name_or_path"
    if not ledger.has(key):
        key = "pretrain"
    spec = model_spec(ledger, key, model_config, "policy")
    for other in ("pretrain", "actor_infer.model_args.model_name_or_path", "reference.model_args.model_name_or_path",
                  "critic.model_args.model_name_or_path"):
        if ledger.has(other) and ledger.peek(other) == ledger.peek(key):
            ledger.use(other, "models.policy (same model)")
    return spec


def _role(ledger: Ledger, worker: str, placed: dict, lengths) -> dict[str, Any]:
    role = WORKERS[worker]
    strategy = ledger.use(f"{worker}.strategy_args.strategy_name", f"roles.{role} (strategy)")
    strategy = strategy if strategy is None or isinstance(strategy, str) else show(strategy)  # a list: unknown
    conf = f"{worker}.strategy_args.strategy_config"
    spec: dict[str, Any] = {**placed, "model": "policy"}
    if role == "rollout":
        if strategy not in ENGINES:
            ledger.error(f"{worker}.strategy_args.strategy_name",
                         f"unknown generation strategy {strategy!r} (rlsim models {', '.join(ENGINES)})")
        spec["engine"], spec["parallel"] = _engine(ledger, worker, conf, ENGINES.get(strategy, "generic"))
        return spec
    if strategy not in TRAIN:
        ledger.error(f"{worker}.strategy_args.strategy_name",
                     f"unknown strategy {strategy!r} (known: {', '.join(TRAIN)})")
    sharding = TRAIN.get(strategy, "fsdp")
    train: dict[str, Any] = {"sharding": sharding}
    tp = ledger.int_value(f"{conf}.tensor_model_parallel_size", f"roles.{role}.parallel.tp", default=1) or 1
    pp = ledger.int_value(f"{conf}.pipeline_model_parallel_size", f"roles.{role}.parallel.pp", default=1) or 1
    stage = ledger.use(f"{conf}.zero_optimization.stage", f"roles.{role}.train.sharding (ZeRO-3: fsdp, "
                       "ZeRO-1/2: optimizer sharded as megatron's distributed optimizer)")
    if stage in (0, 1, 2):
        train["sharding"] = "megatron"
    for knob, what in (("offload_param", "param_offload"), ("offload_optimizer", "optimizer_offload")):
        device = ledger.use(f"{conf}.zero_optimization.{knob}.device", f"roles.{role}.train.{what}")
        if device is not None:
            train[what] = device == "cpu"
    if role in ("actor", "critic"):
        checkpointing = ledger.flag(f"{worker}.model_args.disable_gradient_checkpointing",
                                    f"roles.{role}.train.activation_checkpointing = not this")
        if checkpointing is not None:
            train["activation_checkpointing"] = not checkpointing
    ep = ledger.int_value(f"{conf}.expert_model_parallel_size", f"roles.{role}.parallel.ep", default=1) or 1
    spec.update(parallel={"tp": tp, "pp": pp, **({"ep": ep} if ep > 1 else {})}, train=train)
    return spec


def _engine(ledger: Ledger, worker: str, conf: str, kind: str) -> tuple[dict, dict]:
    engine: dict[str, Any] = {"kind": kind}
    tp = ledger.int_value(f"{worker}.num_gpus_per_worker", "roles.rollout.parallel.tp")
    for key in ("tensor_parallel_size", "tp_size"):
        value = ledger.int_value(f"{conf}.{key}", "roles.rollout.parallel.tp")
        if value is not None and tp is not None and value != tp:
            ledger.error(f"{conf}.{key}", f"{value} contradicts {worker}.num_gpus_per_worker ({tp})")
        tp = value or tp
    for keys, field in ((("gpu_memory_utilization", "mem_fraction_static"), "gpu_memory_utilization"),
                        (("max_num_seqs", "max_running_requests"), "max_num_seqs"),
                        (("max_num_batched_tokens", "chunked_prefill_size"), "max_num_batched_tokens"),
                        (("enable_chunked_prefill",), "chunked_prefill"),
                        (("enable_prefix_caching",), "enable_prefix_caching")):
        for key in keys:
            value = ledger.use(f"{conf}.{key}", f"roles.rollout.engine.{field}")
            if value is not None and not (field == "max_num_batched_tokens" and value == -1):
                engine[field] = value
    eager = ledger.flag(f"{conf}.enforce_eager", "roles.rollout.engine.cuda_graphs = not this")
    if eager is not None:
        engine["cuda_graphs"] = not eager
    return engine, {"tp": tp or 1}


def _algorithm(ledger: Ledger, roles: dict, ranges: dict, extra: dict, counts) -> dict[str, Any]:
    adv = ledger.use("adv_estimator", "algorithm.kind", default="grpo")
    kind = ADVANTAGES.get(str(adv), "grpo")
    if counts is None:
        prompts = ledger.int_value("rollout_batch_size", "algorithm.prompts_per_step", default=1) or 1
        n = ledger.int_value("num_return_sequences_in_group", "algorithm.samples_per_prompt", default=1) or 1
    else:
        prompts, n = counts
    ledger.use("actor_infer.generating_args.num_return_sequences", "algorithm.samples_per_prompt")
    epochs = ledger.int_value("ppo_epochs", "algorithm.epochs", default=1) or 1
    actor = roles["actor"]
    dp = ranges["actor"][1] // (actor["parallel"]["tp"] * actor["parallel"]["pp"])
    if dp < 1:
        ledger.error("actor_train.strategy_args.strategy_config.tensor_model_parallel_size",
                     f"tensor × pipeline parallel = {actor['parallel']['tp']} × {actor['parallel']['pp']} is more than "
                     f"the actor's {ranges['actor'][1]} GPUs")
        dp = 1
    t = "actor_train.training_args"
    per_gpu = ledger.int_value(f"{t}.per_device_train_batch_size", "algorithm.mini_batches (samples per update)",
                               default=1) or 1
    accumulate = ledger.int_value(f"{t}.gradient_accumulation_steps", "algorithm.mini_batches (samples per update)",
                                  default=1) or 1
    per_update, total = per_gpu * accumulate * dp, prompts * n
    if total % per_update:
        ledger.error(f"{t}.gradient_accumulation_steps",
                     f"an update takes {per_gpu} × {accumulate} × {dp} (data-parallel ranks) = {per_update} samples, "
                     f"which does not divide the {prompts} × {n} = {total} samples of a step")
    return {"kind": kind, "prompts_per_step": prompts, "samples_per_prompt": n, "epochs": epochs,
            "mini_batches": max(1, total // per_update), **extra}


def _schedule(ledger: Ledger, separate: bool, alpha, roles: dict) -> dict[str, Any]:
    if separate:
        return {"kind": "roll", "async_generation_ratio": alpha or 0}
    schedule: dict[str, Any] = {"kind": "hybridflow", "placement": "custom"}
    reward = roles.get("reward")
    if reward is not None and reward.get("engine") is not None:
        schedule["judge_scoring"] = "sample"  # ROLL scores each response as soon as it finishes
    return schedule
