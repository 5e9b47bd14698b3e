"""Fully asynchronous RL (AReaL / ASearcher, verl fully_async): rollout never waits for training.

The asynchronous rollout loop (schedules/async_rollout.py) composed with AReaL's or verl's rules:

- admission: AReaL's eta in weight versions (accepted + running groups <= (eta + version + 1) x B,
  optionally capped by `max_concurrent_rollouts`; NeMo-RL's age bound counts trainer steps instead), or
  verl fully_async's staleness_threshold, a fraction of a sync's samples counted per weight version;
  nothing new is admitted while a weight update drains;
- completion: a group is complete when all `samples_per_prompt` samples have ended;
- expiry: none (both frameworks bound staleness at admission), unless `drop_stale` drops groups older
  than the bound, in the bound's own unit (rlsim.sim.staleness), when the trainer looks at them;
- selection: AReaL takes the oldest groups first, verl its queue in finish order.
"""

from __future__ import annotations

import math

from rlsim.sim.results.lifecycle import Reason
from rlsim.sim.scenario.schema import SwitchSpec
from rlsim.sim.schedules.async_rollout import AsyncRolloutSchedule
from rlsim.sim.schedules.elastic_replicas import ElasticReplicas
from rlsim.sim.schedules.groups import Group
from rlsim.sim.schedules.lending import Lending
from rlsim.sim.schedules.replay_buffer import ReplayBufferExpiry, ReplayBufferRule
from rlsim.sim.schedules.resplit import plug_gpu_moves
from rlsim.sim.schedules.rollout_policies import (
    CountingAdmission,
    DispatchOrder,
    NoExpiry,
    OldestFirst,
    QueueOrder,
    RolloutPolicies,
    StartedBefore,
    WholeGroup,
    admitted_limit,
)
from rlsim.sim.staleness import VERSIONS, Staleness


class EtaAdmission(CountingAdmission):
    """AReaL's rule in its code form, and `max_concurrent_rollouts`: with a bound in weight versions, at most
    (eta + versions + 1) x B groups, B a version's groups (k trainer steps' batches); with one in trainer
    steps (NeMo-RL), (bound + the rollout weights' trainer step + 1) x one step's batch."""

    def __init__(self, bound: Staleness | None, max_concurrent: int | None):
        self.bound, self.max_concurrent = bound, max_concurrent

    def capacity(self, r) -> int:
        if r.draining:
            return 0  # a draining weight update admits nothing new
        cap = math.inf
        if self.max_concurrent is not None:
            cap = self.max_concurrent - r.running_groups
        if self.bound is not None:
            if self.bound.unit is VERSIONS:
                limit = admitted_limit(self.bound.amount, r.syncs, r.admit_unit)
            else:
                limit = admitted_limit(self.bound.amount, r.rollout_version, r.batch_groups)
            cap = min(cap, limit - (r.accepted_groups + r.running_groups))
        if cap is math.inf:  # unbounded staleness and no concurrency cap: at most 4 trainer steps in flight
            cap = 4 * r.batch_groups - r.running_groups
        return max(0, int(cap))


class VerlAdmission:
    """verl's rollouter: pause while staleness_samples >= max_required_samples or the queue is full.

    verl 0.9.1 verl/experimental/fully_async_policy/fully_async_rollouter.py: max_required_samples =
    int(required_samples x (staleness_threshold + 1) x trigger_parameter_sync_step), the queue holds
    max_required_samples, and max_concurrent_samples = min(active replicas x 16, max_required_samples)
    (replicas asleep on the trainer's GPUs do not count: _update_max_concurrent_samples).
    """

    def __init__(self, admit_unit: int, staleness_threshold: float, max_concurrent: int | None):
        # At most (1 + s) x trigger x require_batches x ppo_mini_batch_size groups per version.
        self.max_required = int(admit_unit * (1 + staleness_threshold))
        self.max_concurrent = max_concurrent
        self.staleness_samples = 0  # groups started this version + those in flight or queued at the sync

    def capacity(self, r) -> int:
        if r.draining:
            return 0
        if len(r.buffer) >= self.max_required:
            return 0
        conc = self.max_concurrent or min(16 * len(r.balancer.awake), self.max_required)  # active replicas
        return max(0, min(self.max_required - self.staleness_samples, conc - r.running_groups))

    def launched(self, r) -> None:
        self.staleness_samples += 1

    def synced(self, r) -> None:
        """verl's reset_staleness: what is in flight or queued counts toward the new version."""
        self.staleness_samples = r.running_groups + len(r.buffer)
        r.sync_marks.append((r.env.now, r.groups_started, self.staleness_samples))

    def taken(self, r) -> None:
        r.wake_rollout()  # a slot in verl's queue freed


class DropStale:
    """rlsim's `drop_stale` option (and verl V1's, NeMo-RL's drop): a buffered group whose oldest token is older
    than the bound, counted in the bound's unit, is dropped, not trained. With `abort` (NeMo-RL's early abort) a
    group still running whose oldest token is already past the bound is aborted when the trainer looks, instead
    of finishing only to be dropped; its admission slot goes to a new prompt as a dropped group's does."""

    def __init__(self, bound: Staleness, abort: bool = False):
        self.bound = bound
        self._started = StartedBefore() if abort else None  # running samples of groups that may be too old

    def _too_old(self, r, version: int) -> bool:
        return r.age(version, self.bound.unit).exceeds(self.bound)

    def expire(self, r) -> None:
        if self._started is None:
            return
        doomed = set()
        for s in self._started.running(r.samples_all, lambda v: self._too_old(r, v)):
            req = s.request
            known = [*s.version_tokens, *(req.version_tokens if req is not None else ())]
            if known and self._too_old(r, min(known)):  # tokens only get newer: it can never be trained
                doomed.add(s.group.gid)
        for s in list(self._started.running(r.samples_all, lambda v: self._too_old(r, v))):
            if s.group.gid in doomed:
                r.cancel(s, Reason.STALE)

    def screen(self, r, new: list[Group]) -> list[Group]:
        keep = []
        for g in new:
            if r.age(min(s.oldest_version for s in g.samples), self.bound.unit).exceeds(self.bound):
                g.taken_s = r.env.now
                r.dropped_stale += len(g.samples)
                r.discard_group(g, Reason.STALE)
                r.accepted_groups -= 1  # a rejected group frees its admission slot (AReaL)
            else:
                keep.append(g)
        if len(keep) < len(new):
            r.wake_rollout()
        return keep


def fully_async_policies(scenario) -> RolloutPolicies:
    spec, algo = scenario.schedule, scenario.algorithm
    if spec.verl_rule:
        admit_unit = spec.consumer_groups(algo) * spec.trigger_parameter_sync_step
        admission = VerlAdmission(admit_unit, spec.staleness_threshold, spec.max_concurrent_rollouts)
    else:
        admission = EtaAdmission(getattr(spec, "admission_bound", spec.staleness_bound), spec.max_concurrent_rollouts)
    bound = spec.staleness_bound
    expiry = DropStale(bound, spec.abort_stale) if bound is not None and spec.drop_stale else NoExpiry()
    replay = getattr(spec, "replay_buffer", None)  # verl V1's replay buffer: its own eviction, refilled
    if replay is not None:
        threshold = spec.max_off_policy_threshold
        expiry = ReplayBufferExpiry(ReplayBufferRule(None if threshold is None else int(threshold), replay.filter_prob))
    sampler = spec.sampler or ("ready-first" if spec.verl_rule else "weight-fifo")
    return RolloutPolicies(admission, WholeGroup(algo.samples_per_prompt), expiry, SAMPLERS[sampler]())


# NeMo-RL's staleness samplers (docs/schedules-2026.md): the order a trainer step takes finished groups in.
SAMPLERS = {"weight-fifo": OldestFirst, "ready-first": QueueOrder, "in-order": DispatchOrder}


class FullyAsyncSchedule(AsyncRolloutSchedule):
    def __init__(self, scenario, env):
        super().__init__(scenario, env, fully_async_policies(scenario))
        self.verl = self.spec.verl_rule
        self.lending = self.resplit = None
        if self.spec.resplit is not None:  # re-splitting: engines on the trainer's GPUs, moved by the planner
            self.lending, self.resplit = plug_gpu_moves(self, False, SwitchSpec(), self.spec.resplit)
        self.elastic = None
        if (elastic := self.spec.elastic) is not None:  # verl's dynamic resource scheduling: the same engines
            self.lending = self.plug(Lending(self, False, SwitchSpec(), True, elastic.gpu_memory_utilization))
            self.elastic = self.plug(ElasticReplicas(self, self.lending, elastic))
