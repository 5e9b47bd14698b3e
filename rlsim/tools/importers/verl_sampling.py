"""`rlsim import verl`: V1's replay buffer and fully_async's dynamic resource scheduling.

verl 0.9.1: trainer/ppo/v1/replay_buffer.py and trainer_base.py (trainer.v1.sampler, trainer.v1.<mode>.
num_warmup_batches, algorithm.filter_groups) -> schedule.replay_buffer; experimental/fully_async_policy/
fully_async_trainer.py and dynamic_schedule/ (async_training.use_dynamic_resource_scheduling and the
dynamic_schedule_* keys, actor_rollout_ref.rollout.standalone_gpu_memory_utilization) -> schedule.elastic.
"""

from __future__ import annotations

from typing import Any

from rlsim.tools.importers.common import Ledger

SAMPLER = "trainer.v1.sampler"
AT = "async_training"
R = "actor_rollout_ref.rollout"
ASSUMED_FILTER_PROB = 0.3  # share of all-equal-reward groups when algorithm.filter_groups is on (assumed)
POLICIES = ("default", "fixed_ratio", "static_fully_async")


def replay_buffer(ledger: Ledger, mode: str) -> dict[str, Any]:
    """verl V1's asynchronous modes always sample through ReplayBufferAsync."""
    out: dict[str, Any] = {}
    warmup = ledger.use(f"trainer.v1.{mode}.num_warmup_batches", "schedule.replay_buffer.num_warmup_batches")
    if warmup is not None:
        if isinstance(warmup, bool) or not isinstance(warmup, (int, float)) or warmup < 0:
            ledger.error(f"trainer.v1.{mode}.num_warmup_batches", f"expected a number >= 0, got {warmup!r}")
        else:
            out["num_warmup_batches"] = warmup
    strategy = ledger.use(f"{SAMPLER}.max_off_policy_strategy", "schedule.replay_buffer (stale groups evicted)")
    if strategy not in (None, "drop"):
        ledger.error(f"{SAMPLER}.max_off_policy_strategy", f"{strategy!r} is not modelled: rlsim evicts stale "
                     "groups (drop); 'wait' holds sampling back until they finish")
    if ledger.peek(f"{SAMPLER}.custom_sampler.path") or ledger.peek(f"{SAMPLER}.custom_sampler.name"):
        ledger.error(f"{SAMPLER}.custom_sampler", "a custom sampler's rules are its own: rlsim models verl's "
                     "built-in ReplayBufferAsync")
    if ledger.peek("algorithm.filter_groups.enable") is True:
        ledger.use("algorithm.filter_groups.enable", "schedule.replay_buffer.filter_prob (evicted and refilled)")
        ledger.use("algorithm.filter_groups.metric", "schedule.replay_buffer.filter_prob (the metric compared)")
        ledger.assume("share of prompt groups whose rewards are all equal (DAPO filter)", ASSUMED_FILTER_PROB,
                      "--set schedule.replay_buffer.filter_prob=P")
        out["filter_prob"] = ASSUMED_FILTER_PROB
    ledger.ignore(f"{SAMPLER}.sync_refill_failed_groups", "the synchronous V1 trainer's option")
    return out


def elastic(ledger: Ledger, engine: dict[str, Any]) -> dict[str, Any] | None:
    """fully_async's dynamic resource scheduling; with standalone_gpu_memory_utilization set, the standalone
    engines take it and the hybrid replicas keep rollout.gpu_memory_utilization."""
    on = ledger.flag(f"{AT}.use_dynamic_resource_scheduling", "schedule.elastic (null when false)")
    standalone = ledger.peek(f"{R}.standalone_gpu_memory_utilization")
    if not on:
        ledger.ignore(f"{AT}.dynamic_schedule", "dynamic resource scheduling is off")
        ledger.ignore(f"{R}.standalone_gpu_memory_utilization", "dynamic resource scheduling is off")
        return None
    out: dict[str, Any] = {}
    policy = ledger.use(f"{AT}.dynamic_schedule_policy", "schedule.elastic.policy")
    if policy is not None:
        if policy not in POLICIES:
            ledger.error(f"{AT}.dynamic_schedule_policy", f"{policy!r}: rlsim models verl's built-in policies "
                         f"({', '.join(POLICIES)})")
        out["policy"] = policy
    ratio = ledger.fraction(f"{AT}.dynamic_schedule_deactivate_ratio", "schedule.elastic.deactivate_ratio")
    if ratio is not None:
        out["deactivate_ratio"] = ratio
    rebalance = ledger.flag(f"{AT}.dynamic_schedule_enable_rebalance", "schedule.elastic.rebalance")
    if rebalance is not None:
        out["rebalance"] = rebalance
    if standalone is not None:
        ledger.use(f"{R}.standalone_gpu_memory_utilization", "roles.rollout.engine.gpu_memory_utilization "
                   "(standalone replicas)")
        ledger.use(f"{R}.gpu_memory_utilization", "schedule.elastic.gpu_memory_utilization (hybrid replicas)")
        if "gpu_memory_utilization" in engine:
            out["gpu_memory_utilization"] = engine["gpu_memory_utilization"]
        engine["gpu_memory_utilization"] = standalone
    return out
