"""ROLL's reward workers, agentic environment managers, and the keys rlsim ignores.

Reward workers without GPUs (math, code, IFEval rules) are CPU work: their `world_size` adds up to
rlsim's rule-reward workers. One worker with a `device_mapping` becomes the reward role: an LLM
judge when it generates with vLLM / SGLang, else a reward-model forward pass. Agentic pipelines
(`train_env_manager`) become multi-turn trajectories whose game / tool latency rlsim must assume.
"""

from __future__ import annotations

from typing import Any

from rlsim.tools.importers.common import NOT_MODELLED, Ledger, show
from rlsim.tools.importers.roll_layout import contiguous, parse_device_mapping

ENGINES = {"vllm": "vllm-v1", "sglang": "sglang-0.4"}
ENV_STEP_S = 0.01  # assumed median latency of one environment step (a grid game: milliseconds)
OBSERVATION_TOKENS = (40, 120)  # assumed tokens an environment step returns


def rewards(ledger: Ledger, config: dict) -> tuple[dict | None, tuple[int, int] | None, dict[str, Any]]:
    """(reward role draft, its GPU range, algorithm fields) from `rewards:`."""
    workers = config.get("rewards") if isinstance(config.get("rewards"), dict) else {}
    role, where, extra, cpu = None, None, {}, 0
    for name, spec in workers.items():
        if not isinstance(spec, dict):
            continue
        key = f"rewards.{name}"
        if spec.get("device_mapping") is None:
            cpu += ledger.int_value(f"{key}.world_size", "algorithm.rule_reward_workers (summed)", default=1) or 0
            continue
        if role is not None:
            ledger.error(f"{key}.device_mapping", "rlsim models one reward role on GPUs; "
                         f"rewards.{role['_key']} already has one")
            continue
        try:
            run = contiguous(parse_device_mapping(ledger.use(f"{key}.device_mapping", "roles.reward (GPUs)")))
        except ValueError as exc:
            ledger.error(f"{key}.device_mapping", str(exc))
            continue
        if run is None:
            ledger.error(f"{key}.device_mapping", "not one contiguous run of GPUs")
            continue
        role, where = _reward_role(ledger, key, name, extra), run
    if cpu:
        extra["rule_reward_workers"] = cpu
    return role, where, extra


def _reward_role(ledger: Ledger, key: str, name: str, extra: dict) -> dict:
    strategy = ledger.use(f"{key}.strategy_args.strategy_name", "roles.reward (judge engine or forward pass)")
    strategy = strategy if strategy is None or isinstance(strategy, str) else show(strategy)  # a list: unknown
    conf = f"{key}.strategy_args.strategy_config"
    role: dict[str, Any] = {"_key": name, "parallel": {"tp": 1}}
    tp = ledger.int_value(f"{key}.num_gpus_per_worker", "roles.reward.parallel.tp")
    tp = ledger.int_value(f"{conf}.tensor_parallel_size", "roles.reward.parallel.tp") or tp
    role["parallel"]["tp"] = tp or 1
    if strategy in ENGINES:
        engine: dict[str, Any] = {"kind": ENGINES[strategy]}
        for keys, field in ((("gpu_memory_utilization", "mem_fraction_static"), "gpu_memory_utilization"),
                            (("max_num_seqs", "max_running_requests"), "max_num_seqs")):
            for sub in keys:
                value = ledger.use(f"{conf}.{sub}", f"roles.reward.engine.{field}")
                if value is not None:
                    engine[field] = value
        role["engine"] = engine
        tokens = ledger.int_value(f"{key}.generating_args.max_new_tokens", "algorithm.judge_output_tokens")
        if tokens:
            extra["judge_output_tokens"] = tokens
    else:
        role["train"] = {"sharding": "fsdp"}
    return role


def agentic(ledger: Ledger, config: dict):
    """((prompts, group size), workload.agent, environments) of an agentic pipeline, or None."""
    if not isinstance(config.get("train_env_manager"), dict):
        return None
    m = "train_env_manager"
    groups = ledger.int_value(f"{m}.num_env_groups", "algorithm.prompts_per_step") or 1
    size = ledger.int_value(f"{m}.group_size", "algorithm.samples_per_prompt") or 1
    batch = ledger.peek("rollout_batch_size")
    if batch is not None and batch != groups * size:
        ledger.error("rollout_batch_size", f"{batch} is not num_env_groups × group_size = {groups} × {size}")
    ledger.use("rollout_batch_size", "algorithm.prompts_per_step × samples_per_prompt (trajectories)")
    ledger.use("num_return_sequences_in_group", "agentic: group_size sets samples_per_prompt")
    per_turn = ledger.int_value("max_tokens_per_step", "workload.agent.tokens_per_turn.max")
    per_turn = ledger.int_value("actor_infer.generating_args.max_new_tokens", "workload.agent.tokens_per_turn.max",
                                default=per_turn) if per_turn is None else per_turn
    turns = ledger.int_value("max_actions_per_traj", "workload.agent.turns.max")
    envs = config.get("custom_envs") or {}
    if not isinstance(envs, dict):
        ledger.error("custom_envs", f"expected a mapping of environment name -> settings, got {envs!r}")
        envs = {}
    for env in envs:
        turns = ledger.int_value(f"custom_envs.{env}.max_steps", "workload.agent.turns.max", default=turns) or turns
        if per_turn is None:
            per_turn = ledger.int_value(f"custom_envs.{env}.max_tokens_per_step", "workload.agent.tokens_per_turn.max")
    context = ledger.int_value("sequence_length", "workload.agent.max_context_tokens", default=8192) or 8192
    turns, per_turn = turns or 10, per_turn or 128
    envs = ledger.int_value(f"{m}.max_env_num_per_worker", "environments.pools.envs.concurrency (x workers)")
    concurrency = groups * size
    ledger.assume("turns per trajectory", f"uniform 1..{turns}", "--set workload.agent.turns='{kind: ..}'")
    ledger.assume("tokens per turn", f"lognormal mean {max(1, per_turn // 2)} sigma 0.6 capped at {per_turn}",
                  "--set workload.agent.tokens_per_turn.mean=M")
    ledger.assume("environment step latency", f"lognormal median {ENV_STEP_S} s sigma 0.5",
                  "--set environments.tools.env_step.latency.median=S")
    ledger.assume("tokens an environment step returns", f"uniform {OBSERVATION_TOKENS[0]}..{OBSERVATION_TOKENS[1]}",
                  "--set environments.tools.env_step.observation_tokens='{kind: ..}'")
    agent = {"turns": {"kind": "uniform", "min": 1, "max": turns},
             "tokens_per_turn": {"kind": "lognormal", "mean": max(1, per_turn // 2), "sigma": 0.6, "max": per_turn},
             "tool_mix": {"env_step": 1.0}, "max_context_tokens": context}
    environments = {
        "pools": {"envs": {"concurrency": max(concurrency, envs or 1)}},
        "tools": {"env_step": {"pool": "envs", "latency": {"kind": "lognormal", "median": ENV_STEP_S, "sigma": 0.5},
                               "observation_tokens": {"kind": "uniform", "min": OBSERVATION_TOKENS[0],
                                                      "max": OBSERVATION_TOKENS[1]}}},
    }
    return (groups, size), agent, environments


IGNORED = [
    ("hydra", "Hydra run settings"),
    ("validation", "validation runs: not part of a training step"),
    ("val_env_manager", "validation runs: not part of a training step"),
    ("checkpoint_config", "checkpointing: no effect on simulated step time"),
    ("tracker_kwargs", "logging: no effect on speed"),
    ("system_envs", "runtime plumbing (environment variables)"),
]
REASONS = {
    "logging": ("exp_name", "logging_dir", "output_dir", "track_with", "logging_steps", "render_save_dir"),
    "run length: rlsim simulates `steps` steps (--set steps=N)": ("max_steps", "save_steps", "eval_steps",
                                                                  "resume_from_checkpoint", "seed"),
}


def ignore_rest(ledger: Ledger) -> None:
    for prefix, reason in IGNORED:
        ledger.ignore(prefix, reason)
    for reason, keys in REASONS.items():
        for key in keys:
            ledger.ignore(key, reason)
    ledger.ignore_matching(lambda k: any(p in k.split(".") for p in ("training_args", "generating_args",
                                                                       "data_args")),
                           "optimiser / sampling / dataset settings: change what is learned, not the step time")
    ledger.ignore_matching(lambda k: k.split(".")[0].startswith("deepspeed_zero"),
                           "DeepSpeed presets: read where a strategy_config refers to them")
    ledger.ignore_matching(lambda k: k.startswith("rewards."), "reward worker plumbing (classes, tags, templates)")
    ledger.ignore_matching(lambda k: ".strategy_args.strategy_config." in k or ".model_args." in k,
                           "engine / DeepSpeed / Megatron / model-loading settings rlsim does not model")
    ledger.ignore_matching(lambda k: "." not in k, "loss, advantage and reward shaping: change what is learned, "
                           "not the step time")
    ledger.finish(NOT_MODELLED)
