"""`rlsim import verl` for the V1 trainer's asynchronous modes (trainer.use_v1, trainer.v1.trainer_mode).

verl 0.9.1 (verl/trainer/config/ppo_trainer.yaml, trainer/ppo/v1/trainer_separate_async.py): colocate_async
runs on the trainer's nodes; separate_async adds standalone rollout nodes sized by
actor_rollout_ref.rollout.nnodes x n_gpus_per_node, and lends trainer GPUs per
trainer.v1.separate_async.hybrid_rollout (HybridRolloutSwitchConfig). Both sample through verl's replay
buffer (verl_sampling.py).
"""

from __future__ import annotations

from typing import Any

from rlsim.tools.importers.common import Ledger
from rlsim.tools.importers.verl_sampling import replay_buffer

V1 = "trainer.v1"
R = "actor_rollout_ref.rollout"
SWITCH_KEYS = ("enable_switch", "switch_threshold_ratio", "adaptive_switch_threshold", "switch_threshold_step_up",
               "switch_threshold_step_down", "switch_threshold_release_steps", "switch_cost_window_size")


def v1_mode(ledger: Ledger) -> str | None:
    """The asynchronous V1 mode the config selects, or None (sync, or no V1 trainer)."""
    mode = ledger.peek(f"{V1}.trainer_mode")
    if ledger.peek("trainer.use_v1") and mode in ("colocate_async", "separate_async"):
        return mode
    return None


def v1_sync_step(ledger: Ledger, mode: str | None) -> int:
    """verl's trainer.v1.<mode>.parameter_sync_step (trainer_base.py reads it with default 1): the local updates
    of one verl step, which split data.train_batch_size between them; one weight push after all of them."""
    value = ledger.peek(f"{V1}.{mode}.parameter_sync_step") if mode else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def v1_pools(ledger: Ledger, mode: str, hw: str, nodes: int, per_node: int) -> tuple[dict, str, str]:
    train = {"hardware": hw, "nodes": nodes, "gpus_per_node": per_node}
    if mode == "colocate_async":
        ledger.ignore(f"{R}.nnodes", "colocate_async generates on the trainer's GPUs")
        return {"main": train}, "main", "main"
    gen_nodes = ledger.int_value(f"{R}.nnodes", "cluster.pools.gen.nodes (standalone rollout)", minimum=0)
    gen_per_node = ledger.int_value(f"{R}.n_gpus_per_node", "cluster.pools.gen.gpus_per_node", default=8)
    if not gen_nodes:
        ledger.error(f"{R}.nnodes", "separate_async needs standalone rollout nodes (actor_rollout_ref.rollout."
                     "nnodes > 0)")
    return {"train": train, "gen": {"hardware": hw, "nodes": gen_nodes or 1, "gpus_per_node": gen_per_node or 8}}, \
        "train", "gen"


def v1_schedule(ledger: Ledger, mode: str, schedule: dict[str, Any]) -> dict[str, Any]:
    ledger.use(f"{V1}.trainer_mode", "schedule.trainer_mode")
    ledger.use("trainer.use_v1", "schedule.kind = verl-v1")
    schedule.update(kind="verl-v1", trainer_mode=mode)
    sync = ledger.int_value(f"{V1}.separate_async.parameter_sync_step", "schedule.parameter_sync_step")
    if sync is not None and mode == "separate_async":
        schedule["parameter_sync_step"] = sync
    bound = ledger.use(f"{V1}.sampler.max_off_policy_threshold", "schedule.max_off_policy_threshold")
    if bound is not None:
        schedule["max_off_policy_threshold"] = bound
    schedule["replay_buffer"] = replay_buffer(ledger, mode)
    if mode == "separate_async":
        lending = {}
        for key in SWITCH_KEYS:
            value = ledger.use(f"{V1}.separate_async.hybrid_rollout.{key}", f"schedule.hybrid_rollout.{key}")
            if value is not None:
                lending[key] = value
        if lending:
            schedule["hybrid_rollout"] = lending
    return schedule
