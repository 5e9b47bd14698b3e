"""Online re-splitting of a disaggregated pool (Libra-style): the trainer/rollout split re-planned as the run goes.

A component of the asynchronous loop (fully-async or verl-v1): the trainer's GPUs can also serve as
rollout engines (built on them by lending, asleep until used). After each step a trigger may fire: every
`interval_steps` steps, when training and rollout times differ by more than `imbalance` of the larger,
or when `queue_groups` finished groups wait in the buffer. The planner then scores every split (k
engines' worth of trainer GPUs generating): the step's training time scales with the trainer's data-
parallel size, the time to generate a batch with the rollout GPUs (measured from the last batch's group
completions), and it keeps the split that minimises max(train, rollout). It re-splits only if that gains
at least `min_gain` of the current bound and the saving over the steps left beats the reconfiguration
cost (`reconfig_s`, plus the engines' start when GPUs join generation). Sequences on engines that return
to training move, with their partial output, to the other engines. Each re-split is a `resplit` phase of
the actor in the timeline, and the steps report the split.

Limits: GPUs move between training and generation on the trainer's pool only (the standalone rollout
pool stays generating); other roles must not share the actor's GPUs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from rlsim.sim.scenario.schema import ResplitSpec
from rlsim.sim.schedules.lending import Lending
from rlsim.sim.schedules.loop_components import LoopComponent


class Resplit(LoopComponent):
    """Re-splitting as a component of the asynchronous loop: it moves `lending`'s engines (built on the
    trainer's GPUs, asleep) between training and generation. Plug it after `lending`."""

    def __init__(self, loop, lending: Lending, spec: ResplitSpec):
        self.loop, self.lending, self.rs = loop, lending, spec
        self._unit = loop.scenario.layout("actor").replica_gpus  # trainer GPUs per data-parallel rank
        self._engine_gpus = loop.scenario.layout("rollout").engine_gpus
        self.generating = 0  # lendable engines now generating (their GPUs left training)
        self.resplit_log: list[dict] = []
        self._work: deque = deque(maxlen=spec.window)

    def trainer_gpus(self, k: int | None = None) -> int:
        return self.loop.scenario.role_gpus("actor") - (self.generating if k is None else k) * self._engine_gpus

    def rollout_gpus(self, k: int | None = None) -> int:
        return self.loop.scenario.role_gpus("rollout") + (self.generating if k is None else k) * self._engine_gpus

    def dp_size(self, loop, role: str, dp: int) -> int:
        """The trainer trains on the GPUs it kept."""
        return self.trainer_gpus() // self._unit if role == "actor" else dp

    def _actor_gpus(self, n: int) -> None:
        """The actor's busy rows carry the GPUs it trains on now."""
        groups = self.loop.env.ledger.groups
        groups["actor"] = replace(groups["actor"], gpus=n)

    # ------------------------------------------------------------------ the planner

    def rollout_estimate(self, train_s: float, wait_s: float) -> float:
        """Seconds the rollout GPUs need per batch, read from queue pressure: a trainer that waited w for its
        batch saw rollout take train + w; a buffer still holding q groups after the batch means rollout made
        batch + q groups in one training time."""
        loop = self.loop
        if wait_s > 0:
            return train_s + wait_s
        return train_s * loop.batch_groups / (loop.batch_groups + len(loop.buffer))

    def plan(self, step: int, train_s: float, wait_s: float) -> dict:
        """Trigger, then the split minimising max(train, rollout) per batch; applied if it pays."""
        rs, loop = self.rs, self.loop
        roll_s = self.rollout_estimate(train_s, wait_s)
        if not loop.is_warmup(step):  # GPU-seconds per batch, so that steps under other splits compare
            self._work.append((train_s * self.trainer_gpus(), roll_s * self.rollout_gpus()))
        if self._work:  # the mean of the last `window` steps: one step's tail does not re-split the pool
            train_s = sum(w[0] for w in self._work) / len(self._work) / self.trainer_gpus()
            roll_s = sum(w[1] for w in self._work) / len(self._work) / self.rollout_gpus()
        rec = {"step": step, "train_s": train_s, "rollout_s": roll_s, "from": self.generating, "apply": False}
        fired = [name for name, hit in (
            ("interval", rs.interval_steps is not None and (step + 1) % rs.interval_steps == 0),
            ("imbalance", rs.imbalance is not None and roll_s > 0
             and abs(train_s - roll_s) >= rs.imbalance * max(train_s, roll_s)),
            ("queue", rs.queue_groups is not None and len(loop.buffer) >= rs.queue_groups)) if hit]
        rec["trigger"] = ",".join(fired)
        if loop.is_warmup(step):  # the first batch has nothing to overlap with: its wait says nothing of the split
            fired = []
        rec["trigger"] = ",".join(fired)
        if not fired or roll_s <= 0:
            self.resplit_log.append(rec)
            return rec

        def bound(k: int) -> float:
            return max(train_s * self.trainer_gpus() / self.trainer_gpus(k),
                       roll_s * self.rollout_gpus() / self.rollout_gpus(k))

        ok = [k for k in range(len(self.lending.lendable) + 1)
              if self.trainer_gpus(k) >= self._unit and self.trainer_gpus(k) % self._unit == 0]
        best = min(ok, key=lambda k: (bound(k), k))
        now_b, best_b = bound(self.generating), bound(best)
        cost = rs.reconfig_s + (loop.switch_to_generate_time() + self.lending.switch.engine_start_s
                                if best > self.generating else 0.0)
        left = loop.total_steps - step - 1
        rec.update(to=best, bound_s=now_b, new_bound_s=best_b, cost_s=cost,
                   gain=(now_b - best_b) / now_b if now_b > 0 else 0.0)
        rec["apply"] = best != self.generating and rec["gain"] >= rs.min_gain and (now_b - best_b) * left > cost
        self.resplit_log.append(rec)
        return rec

    def _resplit(self, k: int, cost: float):
        """Move engines' worth of trainer GPUs into generation (k up) or back into training (k down)."""
        loop, env = self.loop, self.loop.env
        lendable = self.lending.lendable
        leaving = lendable[k:self.generating]  # engines whose GPUs return to training
        if leaving:
            moved = yield from self.lending.put_to_sleep(leaving)
            self.generating = k
            for s in moved:
                loop.submit(s)
        start = env.now
        self._actor_gpus(self.trainer_gpus(min(k, self.generating)))
        yield env.timeout(cost)
        env.ledger.record("actor", "actor", "resplit", start, env.now, env.rl_step, env.policy_version)
        for e in lendable[self.generating:k]:  # engines joining generation, with the trainer's weights
            e.resume(version=env.policy_version)
            loop.balancer.wake(e)
        if k > self.generating:
            self.generating = k
            loop.wake_rollout()
        self._actor_gpus(self.trainer_gpus())

    def after_update(self, loop, step: int, timing: dict, batch, columns: dict):
        train_s = loop.env.now - loop.step_start_s - timing["timing_s/wait_rollout"]
        rec = self.plan(step, train_s, timing["timing_s/wait_rollout"])
        if rec["apply"]:
            start = loop.env.now
            yield from self._resplit(rec["to"], rec["cost_s"])
            timing["timing_s/resplit"] = loop.env.now - start
        columns.update({"resplit/trainer_gpus": self.trainer_gpus(), "resplit/rollout_gpus": self.rollout_gpus(),
                        "resplit/applied": int(rec["apply"])})


def plug_gpu_moves(loop, colocated: bool, switch, resplit: ResplitSpec | None) -> tuple[Lending, Resplit | None]:
    """Plug lending (engines on the trainer's GPUs, when lending or re-splitting needs them) and re-splitting."""
    build = switch.enable_switch or resplit is not None
    lending = loop.plug(Lending(loop, colocated, switch, build))
    return lending, None if resplit is None else loop.plug(Resplit(loop, lending, resplit))
