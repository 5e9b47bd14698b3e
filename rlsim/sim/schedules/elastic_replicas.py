"""Elastic hybrid replicas: verl fully_async's dynamic resource scheduling.

verl 0.9.1 verl/experimental/fully_async_policy/dynamic_schedule/ (default_policy.py, fixed_ratio_policy.py,
static_fully_async_policy.py, dynamic_resource_controller.py) and fully_async_trainer.py. Rollout replicas
built on the trainer's GPUs ("hybrid") start asleep. The controller moves them between two states:

- deactivate, at the start of each trainer step while they are active: wait until
  int(deactivate_ratio x cycle) finished groups are queued (cycle = the groups of one weight version,
  required_samples x trigger_parameter_sync_step), then take them out of the load balancer, abort what
  they run (partial rollout: it continues on the standalone replicas) and put them to sleep;
- activate, at each weight push, if the policy says so: push the weights to them, wake them, and (with
  rebalance) abort every in-flight request on every replica so that the retries spread by least load.

The `default` policy activates when the queue is short of the threshold (gap = deactivate_ratio x cycle -
(groups produced - cycle x weight versions so far) > 0) and the gap's estimated wait (gap x seconds per
group the trainer really waited for, 1,000 s until one is measured) beats the switch cost (the mean of
the last 3 measured deactivate + activate cycles, 10 s until one is measured). After each push it adapts
the ratio: if the trainer had to wait for groups not yet queued, up by that share of the cycle, clipped to
[0.02, 0.1], at most 1; otherwise down by 0.02 (verl sets no floor). `fixed_ratio` activates while the
surplus is below the threshold and never adapts; `static_fully_async` never activates.

`ElasticController` is that rule and its state, free of the event loop.
"""

from __future__ import annotations

from typing import Literal

POLICIES = ("default", "fixed_ratio", "static_fully_async")
DEFAULT_SWITCH_COST_S = 10.0  # verl default_policy.DEFAULT_SWITCH_THRESHOLD_S, before any switch is measured
SWITCH_OVERHEAD_WINDOW = 3  # SWITCH_OVERHEAD_WINDOW_SIZE
RATIO_UP_MIN, RATIO_UP_MAX = 0.02, 0.1  # DEACTIVATE_RATIO_INCREASE_MIN / _MAX
RATIO_DOWN = 0.02  # DEACTIVATE_RATIO_DECREASE_STEP
INITIAL_PER_GROUP_S = 1000.0  # INITIAL_PER_SAMPLE_TIME_S: pessimistic, so the first decisions activate


class ElasticController:
    """verl's dynamic-scheduling policy and the trainer-side counters it reads (a verl "sample" is one
    prompt group here)."""

    def __init__(self, policy: Literal["default", "fixed_ratio", "static_fully_async"], deactivate_ratio: float,
                 cycle_groups: int):
        if policy not in POLICIES:
            raise ValueError(f"unknown dynamic scheduling policy {policy!r}")
        self.policy, self.ratio, self.cycle_groups = policy, deactivate_ratio, cycle_groups
        self.active = False  # hybrid replicas start asleep (verl registers them sleeping)
        self.per_group_s = INITIAL_PER_GROUP_S
        self.overheads: list[float] = []  # measured deactivate + activate seconds, one per cycle with a switch
        self.log: list[dict] = []  # one record per activation decision
        self._waits: list[float] = []  # this cycle: each batch collection's wait, and the groups not yet queued
        self._wait_groups: list[int] = []
        self._switch_s = 0.0  # this cycle's deactivation + activation seconds

    # ------------------------------------------------------------------ deactivation (each trainer step)

    def should_deactivate(self) -> bool:
        return self.active

    def deactivate_wait_groups(self) -> int:
        """Queued groups to wait for before the hybrid replicas leave generation."""
        return 0 if self.policy == "static_fully_async" else int(self.cycle_groups * self.ratio)

    def deactivated(self, seconds: float) -> None:
        self.active = False
        self._switch_s += seconds

    def collected(self, wait_s: float, missing_groups: int) -> None:
        """A batch collection: how long the trainer waited, and how many of its groups were not yet queued."""
        self._waits.append(wait_s)
        self._wait_groups.append(missing_groups)

    # ------------------------------------------------------------------ activation (each weight push)

    def switch_cost(self) -> float:
        recent = self.overheads[-SWITCH_OVERHEAD_WINDOW:]
        return sum(recent) / len(recent) if recent else DEFAULT_SWITCH_COST_S

    def should_activate(self, produced: int, expected: int) -> dict:
        """At a weight push: whether the hybrid replicas join generation for the next cycle. `produced`: groups
        queued since the start; `expected`: the cycle's groups times the weight versions so far."""
        gap = self.ratio * self.cycle_groups - (produced - expected)
        rec = {"ratio": self.ratio, "gap_groups": gap, "benefit_s": None, "switch_cost_s": None}
        if self.policy == "static_fully_async":
            activate = False
        elif self.policy == "fixed_ratio":
            activate = gap > 0
        elif gap <= 0:
            activate = False
        else:
            waited, groups = sum(self._waits), sum(self._wait_groups)
            if waited > 0 and groups > 0:
                self.per_group_s = waited / groups
            rec["benefit_s"], rec["switch_cost_s"] = gap * self.per_group_s, self.switch_cost()
            activate = rec["benefit_s"] - rec["switch_cost_s"] > 0
        rec["activate"] = activate
        self.log.append(rec)
        return rec

    def activated(self, seconds: float) -> None:
        self.active = True
        self._switch_s += seconds

    def after_push(self) -> None:
        """After the push (and any activation): `default` adapts the ratio; the cycle's counters restart."""
        if self.policy == "default":
            if self._switch_s > 0:
                self.overheads.append(self._switch_s)
            missing = sum(self._wait_groups)
            if missing > 0:
                self.ratio = min(1.0, self.ratio + min(RATIO_UP_MAX, max(RATIO_UP_MIN, missing / self.cycle_groups)))
            else:
                self.ratio -= RATIO_DOWN
        self._waits, self._wait_groups, self._switch_s = [], [], 0.0
