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

`ElasticController` is that rule and its state, free of the event loop; `ElasticReplicas` applies it as a
component of the asynchronous loop (schedules/loop_components.py), moving the engines that lending builds on
the trainer's GPUs (schedules/lending.py).
"""

from __future__ import annotations

from typing import Literal

from rlsim.sim.schedules.lending import Lending
from rlsim.sim.schedules.loop_components import LoopComponent

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


class ElasticReplicas(LoopComponent):
    """verl's dynamic resource scheduling as a component: it moves `lending`'s engines (asleep on the trainer's
    GPUs) into generation at a weight push and out of it at the start of a trainer step. Plug it after lending."""

    def __init__(self, loop, lending: Lending, spec):
        self.loop, self.lending, self.spec = loop, lending, spec
        self.controller = ElasticController(spec.policy, spec.deactivate_ratio, loop.batch_groups * loop.sync_every)
        self.rebalanced = 0  # sequences moved by rebalances (their partial output kept)
        self._missing = 0

    def before_batch(self, loop, step: int, timing: dict):
        """While active: wait for the threshold of queued groups, then send the GPUs back to training."""
        ctl, env = self.controller, loop.env
        if ctl.should_deactivate():
            wait_from = env.now
            yield from loop.until_buffered(ctl.deactivate_wait_groups())
            timing["timing_s/wait_for_enough_samples"] = env.now - wait_from
            start = env.now
            for s in (yield from self.lending.put_to_sleep(self.lending.lendable)):
                loop.submit(s)  # partial rollout: the sequence continues on a standalone engine
            back = env.now
            yield env.timeout(loop.switch_to_train_time())
            loop.mark_busy("actor", "actor", "switch", back)
            ctl.deactivated(env.now - start)
            timing["timing_s/switch_to_trainer"] = env.now - start
        self._missing = max(0, loop.batch_groups - len(loop.buffer))  # verl: not yet queued as collection starts

    def after_batch(self, loop, step: int, timing: dict, batch):
        self.controller.collected(timing["timing_s/wait_rollout"], self._missing)
        yield from ()

    def after_update(self, loop, step: int, timing: dict, batch, columns: dict):
        """At a weight push (the loop's, just made): the policy's decision, the activation, the adaptation."""
        ctl = self.controller
        rec = {"benefit_s": None, "switch_cost_s": None}
        if (step + 1) % loop.sync_every == 0:
            # verl: groups produced so far against the version's groups times the versions pushed
            rec = ctl.should_activate(loop.accepted_groups, ctl.cycle_groups * loop.syncs)
            rec["time"] = loop.env.now
            if rec["activate"]:
                yield from self._activate(timing)
            ctl.after_push()
        columns.update({"elastic/active": int(ctl.active), "elastic/deactivate_ratio": ctl.ratio,
                        "elastic/benefit_s": rec["benefit_s"] or 0.0,
                        "elastic/switch_cost_s": rec["switch_cost_s"] or 0.0})

    def _activate(self, timing: dict):
        """The trainer's weights onto the hybrid replicas (the colocated switch), into the balancer; with rebalance,
        every sample in flight on the standalone engines is aborted and placed again by least load."""
        loop, env, lending = self.loop, self.loop.env, self.lending
        start = env.now
        yield env.timeout(loop.switch_to_generate_time())
        loop.mark_busy("actor", "actor", "switch", start)
        for e in lending.lendable:
            e.resume(version=env.policy_version)
            loop.balancer.wake(e)
        if self.spec.rebalance:
            engines = lending.standalone
            yield env.all_of([e.pause() for e in engines])
            moved = []
            for e in engines:  # agents' turns stay where they run: only samples' own requests move
                moved += loop.withdraw(e, [r for r in [*e.running, *e.waiting] if loop.serves_sample(r)])
                e.resume(mode="keep")
            self.rebalanced += len(moved)
            for s in moved:
                loop.submit(s)
        loop.wake_rollout()
        self.controller.activated(env.now - start)
        timing["timing_s/switch_to_rollout"] = env.now - start
