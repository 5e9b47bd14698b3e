"""ROLL's rollout scheduling (Alibaba ROLL, docs/sources.md §8).

Built on the fully asynchronous machinery (a rollout controller, a buffer of finished prompt groups,
a trainer that pushes weights after each step), with ROLL's rules instead of AReaL's:

- `async_generation_ratio` alpha: a group may start while started <= (alpha + step + 1) x batch;
  a training batch takes only groups started at step >= current - ceil(alpha); older groups are
  aborted (still running) or dropped (finished), and their GPU time is reported as waste.
- Redundant environment rollout: `samples_per_prompt + group_size_redundancy` episodes per group;
  the group completes when the first `samples_per_prompt` finish and the rest are aborted.
- Dynamic sampling: a finished group whose rewards are all equal (probability `filter_prob`) is
  dropped and replaced; up to `max_additional_running_prompts` extra groups run ahead to cover it.
- Sample-level scheduling and prompt replication: every sample is its own request and is scored
  as soon as it finishes (the reward costs nothing on the trainer's critical path).
"""

from __future__ import annotations

import math

from rlsim.sim.schedules.fully_async import FullyAsyncSchedule
from rlsim.sim.schedules.groups import Group


class RollSchedule(FullyAsyncSchedule):
    def __init__(self, scenario, env):
        super().__init__(scenario, env)
        self.alpha = self.spec.async_generation_ratio
        self.redundancy = self.spec.group_size_redundancy
        self.filtered_groups = 0
        self.expired_groups = 0
        self.redundant_aborted = 0
        self._expiry_seen = 0  # samples_all[:_expiry_seen] started before the expiry bound last looked at
        self._expiry_running: list = []  # those of them still running then, in sample order

    def group_launch_size(self) -> int:
        return self.scenario.algorithm.samples_per_prompt + self.redundancy

    def capacity(self) -> int:
        cap = math.inf
        if self.spec.max_concurrent_rollouts is not None:
            cap = self.spec.max_concurrent_rollouts - self.running_groups
        extra = self.spec.max_additional_running_prompts if self.spec.dynamic_sampling else 0
        limit = math.floor((self.alpha + self.syncs + 1) * self.admit_unit + 1e-9) + extra
        cap = min(cap, limit - (self.accepted_groups + self.running_groups))
        return max(0, int(cap))

    def _group_ready(self, g: Group) -> bool:
        """The first `samples_per_prompt` finishers win: the redundant rest is aborted."""
        need = self.scenario.algorithm.samples_per_prompt
        done = sum(1 for x in g.samples if x.finished and x.fate == "completed")
        if done < need and g.pending > 0:
            return False
        g.closing = True
        for x in g.samples:
            if not x.finished:
                self.redundant_aborted += 1
                self.cancel(x, "redundant")
        return True

    def _group_complete(self, g: Group) -> None:
        if g.closed:
            return
        if self.spec.dynamic_sampling and self.env.rng.random() < self.spec.filter_prob:
            g.closed = True
            g.finished_s = self.env.now
            self.running_groups -= 1
            self.filtered_groups += 1
            self.discard_group(g, "filtered: all rewards equal")
            self._wake("_rollout_wake")  # a replacement group may start
            return
        super()._group_complete(g)

    def _take_batch(self) -> list[Group] | None:
        oldest_ok = self.env.policy_version - math.ceil(self.alpha)
        kept = []
        for g in self.buffer:
            if g.start_version < oldest_ok:
                self.expired_groups += 1
                self.accepted_groups -= 1
                self.discard_group(g, "expired")
            else:
                kept.append(g)
        if len(kept) < len(self.buffer):
            self.buffer = kept
            self._buffer_checked = (-1, 0)  # the buffer changed under the base class's record: look again
            self._wake("_rollout_wake")
        for s in self._expired_running(oldest_ok):  # running groups that can no longer be trained are aborted
            self.cancel(s, "expired")
        batch = super()._take_batch()
        if batch is not None:  # keep only the winners of redundant groups
            need = self.scenario.algorithm.samples_per_prompt
            for g in batch:
                winners = [s for s in g.samples if s.fate == "completed"][:need]
                for s in g.samples:
                    if s.fate == "completed" and s not in winners:
                        s.fate, s.reason = "aborted", "redundant"
                        self.tokens_discarded += s.generated
                        s.outcome = "aborted"
                        self.collector.sample_discarded(s.sid, "redundant")
        return batch

    def _expired_running(self, oldest_ok: int):
        """Samples still running whose group started before `oldest_ok`, in sample order (as a scan finds them).

        Groups start at non-decreasing versions, so those samples are a prefix of `samples_all`; only the
        part of it that was still running last time, and the part the bound has just passed, are read.
        """
        samples = self.samples_all
        while self._expiry_seen < len(samples) and samples[self._expiry_seen].group.start_version < oldest_ok:
            self._expiry_running.append(samples[self._expiry_seen])
            self._expiry_seen += 1
        for s in self._expiry_running:
            if not s.finished:
                yield s
        self._expiry_running = [s for s in self._expiry_running if not s.finished]
