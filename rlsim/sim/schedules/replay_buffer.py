"""verl V1's replay buffer (`ReplayBufferAsync`): eviction and refill of terminal prompt groups.

verl 0.9.1 verl/trainer/ppo/v1/replay_buffer.py, in its asynchronous modes: each time the trainer looks at
the buffer (sampling a batch, or waiting for a share of it), every terminal group is classified once:

- failed: at least one of its trajectories failed (verl's prompt status `failure`);
- stale: finished, and it spans more weight versions than `max_off_policy_threshold` (strategy `drop`):
  span = the trainer's step - the step its prompt was added + 1, so a group generated entirely by the
  weights the trainer now holds spans 1;
- filtered (DAPO, `algorithm.filter_groups`): finished, and its reward metric is identical across all
  its trajectories.

A group with any reason is evicted once (its trajectories discarded) and a fresh prompt replaces it
("evict k, refill k"). The rest are sampleable, oldest prompt first. rlsim has no reward values: a
finished group is all-equal with probability `filter_prob`, drawn once when the trainer first looks
at it (verl classifies a finished group once and caches it).

`ReplayBufferRule` and `ReplayBufferBook` are the rule and its counts, free of the event loop;
`ReplayBufferExpiry` applies them as the loop's expiry policy (schedules/rollout_policies.py), and the
`ReplayBufferColumns` component reports them per step (schedules/loop_components.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rlsim.sim.results.lifecycle import COMPLETED, Reason
from rlsim.sim.schedules.groups import Group
from rlsim.sim.schedules.loop_components import LoopComponent
from rlsim.sim.staleness import VERSIONS

STALE, FILTERED, FAILED = "stale", "filtered", "failed"  # verl's metrics: off_policy, filter_groups, rollout_failure
REASONS = (STALE, FILTERED, FAILED)
DISCARD_REASON = {STALE: Reason.STALE, FILTERED: Reason.FILTERED, FAILED: Reason.GROUP_FAILED}


@dataclass(frozen=True)
class ReplayBufferRule:
    """Which terminal groups verl's asynchronous replay buffer evicts."""

    max_off_policy_threshold: int | None  # weight versions a group may span (None: no staleness control)
    filter_prob: float = 0.0  # chance a finished group's rewards are all equal (0: no DAPO filter)

    @staticmethod
    def span(versions_behind: int) -> int:
        """Weight versions a group spans: 1 if its prompt was added under the weights the trainer holds now."""
        return versions_behind + 1

    def stale(self, versions_behind: int) -> bool:
        return self.max_off_policy_threshold is not None and self.span(versions_behind) > self.max_off_policy_threshold

    def reasons(self, versions_behind: int, failed: bool, all_equal: bool) -> frozenset[str]:
        """Why a terminal group is evicted (empty: sampleable). Staleness and the DAPO filter look at finished
        groups only; a failed group is evicted as such."""
        if failed:
            return frozenset((FAILED,))
        return frozenset(r for r, hit in ((STALE, self.stale(versions_behind)), (FILTERED, all_equal)) if hit)

    def draws_filter(self) -> bool:
        return self.filter_prob > 0


class ReplayBufferBook:
    """What the replay buffer evicted and refilled: per reason (a group evicted for two reasons counts under
    both, as verl's metrics do) and in groups refilled (one per evicted group)."""

    def __init__(self) -> None:
        self.evicted: Counter = Counter()
        self.refilled = 0
        self.spans: list[int] = []  # spans of the groups evicted as stale
        self._reported: Counter = Counter()
        self._reported_refills = 0

    def evict(self, reasons: frozenset[str], span: int) -> int:
        """Count one evicted group; returns the prompts to refill for it (verl's async modes: exactly one)."""
        self.evicted.update(reasons)
        if STALE in reasons:
            self.spans.append(span)
        self.refilled += 1
        return 1

    def step_columns(self) -> dict[str, int]:
        """Evictions and refills since the last call (one call per trainer step)."""
        cols = {f"replay/evicted_{r}": self.evicted[r] - self._reported[r] for r in REASONS}
        cols["replay/refilled"] = self.refilled - self._reported_refills
        self._reported = Counter(self.evicted)
        self._reported_refills = self.refilled
        return cols


class ReplayBufferExpiry:
    """The loop's expiry policy under verl V1's replay buffer: evict failed, stale and filtered groups when the
    trainer looks, and give each evicted group's admission slot to a fresh prompt (the refill)."""

    def __init__(self, rule: ReplayBufferRule):
        self.rule = rule
        self.book = ReplayBufferBook()
        self._all_equal: dict[int, bool] = {}  # gid -> the DAPO draw, made once per finished group

    def expire(self, r) -> None:
        pass  # verl evicts terminal groups only: nothing still running is aborted

    def _is_all_equal(self, r, g: Group) -> bool:
        if g.gid not in self._all_equal:
            self._all_equal[g.gid] = self.rule.draws_filter() and bool(r.env.rng.random() < self.rule.filter_prob)
        return self._all_equal[g.gid]

    def screen(self, r, new: list[Group]) -> list[Group]:
        keep = []
        for g in new:
            behind = r.age(g.start_version, VERSIONS).amount
            failed = any(s.state is not COMPLETED for s in g.samples)
            reasons = self.rule.reasons(behind, failed, not failed and self._is_all_equal(r, g))
            if not reasons:
                keep.append(g)
                continue
            g.taken_s = r.env.now
            if STALE in reasons:
                r.dropped_stale += len(g.samples)
            r.discard_group(g, DISCARD_REASON[min(reasons, key=REASONS.index)])
            self._all_equal.pop(g.gid, None)
            r.accepted_groups -= self.book.evict(reasons, self.rule.span(behind))  # its slot: a fresh prompt
        if len(keep) < len(new):
            r.wake_rollout()
        return keep


class ReplayBufferColumns(LoopComponent):
    """The step columns of the replay buffer's evictions and refills."""

    def __init__(self, book: ReplayBufferBook):
        self.book = book

    def after_update(self, loop, step: int, timing: dict, batch, columns: dict):
        columns.update(self.book.step_columns())
        yield from ()
