"""ROLL's rollout scheduling (Alibaba ROLL, docs/sources.md §8).

The asynchronous rollout loop (schedules/async_rollout.py: a rollout controller, a buffer of finished
prompt groups, a trainer that pushes weights after each step) composed with ROLL's rules:

- admission, `async_generation_ratio` alpha: a group may start while started <= (alpha + step + 1) x batch
  (plus `max_additional_running_prompts` under dynamic sampling, to cover filtered groups);
- expiry: a training batch takes only groups started at step >= current - ceil(alpha); older groups are
  aborted (still running) or dropped (finished), and their GPU time is reported as waste;
- completion, redundant environment rollout: `samples_per_prompt + group_size_redundancy` episodes per
  group; the group completes when the first `samples_per_prompt` finish and the rest are aborted.
  Dynamic sampling: a complete group whose rewards are all equal (probability `filter_prob`) is dropped
  and replaced;
- selection: oldest groups first; of a taken group only the first `samples_per_prompt` finishers train.

Sample-level scheduling and prompt replication: every sample is its own request and is scored as soon
as it finishes (the reward costs nothing on the trainer's critical path).
"""

from __future__ import annotations

import math

from rlsim.sim.results.lifecycle import ABORTED, COMPLETED, Reason
from rlsim.sim.schedules.async_rollout import AsyncRolloutSchedule
from rlsim.sim.schedules.groups import Group
from rlsim.sim.schedules.rollout_policies import (
    CountingAdmission,
    OldestFirst,
    RolloutPolicies,
    StartedBefore,
    admitted_limit,
)


class AlphaAdmission(CountingAdmission):
    """Started groups <= (alpha + version + 1) x batch, plus the extra groups dynamic sampling runs ahead."""

    def __init__(self, alpha: float, max_concurrent: int | None, extra: int):
        self.alpha, self.max_concurrent, self.extra = alpha, max_concurrent, extra

    def capacity(self, r) -> int:
        cap = math.inf
        if self.max_concurrent is not None:
            cap = self.max_concurrent - r.running_groups
        limit = admitted_limit(self.alpha, r.syncs, r.admit_unit) + self.extra
        cap = min(cap, limit - (r.accepted_groups + r.running_groups))
        return max(0, int(cap))


class RedundantGroup:
    """`need + redundancy` episodes a group; the first `need` finishers win and the rest are aborted.
    With dynamic sampling a complete group is filtered out with probability `filter_prob`."""

    def __init__(self, need: int, redundancy: int, filter_prob: float | None):
        self.need, self.redundancy, self.filter_prob = need, redundancy, filter_prob
        self.redundant_aborted = 0  # samples still running when their group completed

    def launch_size(self, r) -> int:
        return self.need + self.redundancy

    def ready(self, r, g: Group) -> bool:
        done = sum(1 for x in g.samples if x.finished and x.state is COMPLETED)
        if done < self.need and g.pending > 0:
            return False
        g.closing = True
        for x in g.samples:
            if not x.finished:
                self.redundant_aborted += 1
                r.cancel(x, Reason.REDUNDANT)
        return True

    def filtered(self, r, g: Group) -> bool:
        return self.filter_prob is not None and r.env.rng.random() < self.filter_prob


class AlphaExpiry:
    """A batch trains only groups started at version >= current - ceil(alpha): older ones expire."""

    def __init__(self, alpha: float):
        self.alpha = alpha
        self.expired_groups = 0
        self._started = StartedBefore()  # running samples of groups started before the bound

    def expire(self, r) -> None:
        oldest_ok = r.env.policy_version - math.ceil(self.alpha)
        kept = []
        for g in r.buffer:
            if g.start_version < oldest_ok:
                self.expired_groups += 1
                r.accepted_groups -= 1
                r.discard_group(g, Reason.EXPIRED)
            else:
                kept.append(g)
        if len(kept) < len(r.buffer):
            r.buffer = kept
            r.buffer_changed()
            r.wake_rollout()
        for s in self._started.running(r.samples_all, lambda v: v < oldest_ok):  # running groups too old to train
            r.cancel(s, Reason.EXPIRED)

    def screen(self, r, new: list[Group]) -> list[Group]:
        return new


class FirstFinishers(OldestFirst):
    """Oldest groups first; of each taken group only the first `need` completed samples are trained."""

    def __init__(self, need: int):
        self.need = need

    def trim(self, r, batch: list[Group]) -> None:
        for g in batch:
            winners = [s for s in g.samples if s.state is COMPLETED][: self.need]
            for s in g.samples:
                if s.state is COMPLETED and s not in winners:
                    r.discard(s, ABORTED, Reason.REDUNDANT)


def roll_policies(scenario) -> RolloutPolicies:
    spec, need = scenario.schedule, scenario.algorithm.samples_per_prompt
    dynamic = spec.dynamic_sampling
    admission = AlphaAdmission(spec.async_generation_ratio, spec.max_concurrent_rollouts,
                               spec.max_additional_running_prompts if dynamic else 0)
    completion = RedundantGroup(need, spec.group_size_redundancy, spec.filter_prob if dynamic else None)
    return RolloutPolicies(admission, completion, AlphaExpiry(spec.async_generation_ratio), FirstFinishers(need))


class RollSchedule(AsyncRolloutSchedule):
    def __init__(self, scenario, env):
        super().__init__(scenario, env, roll_policies(scenario))

    @property
    def redundant_aborted(self) -> int:
        return self.completion.redundant_aborted

    @property
    def expired_groups(self) -> int:
        return self.expiry.expired_groups
