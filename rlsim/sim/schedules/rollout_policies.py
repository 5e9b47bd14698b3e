"""The policies an asynchronous rollout loop is composed from (schedules/async_rollout.py).

The loop owns the mechanics (engines, requests, trajectories, the buffer, weight updates, the trainer's
wait); four policies own the rules a framework chooses:

- `Admission`: how many prompt groups may start now (the staleness bound at admission).
- `Completion`: how many samples a group launches, when it is complete (redundancy: the first finishers
  win, the rest are aborted) and whether a complete group is filtered out instead of buffered.
- `Expiry`: which buffered (or running) groups are too old to train, looked at when the trainer takes
  a batch: aborted while running, dropped once finished.
- `Selection`: in what order the trainer takes buffered groups and what of a taken group it trains.

Each policy method receives the loop (`r`) and acts only through its public attributes and methods.
AReaL / verl fully_async (schedules/fully_async.py) and ROLL (schedules/roll.py) are compositions of
these; the ones shared by more than one framework live here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from rlsim.sim.schedules.groups import Group


class Admission(Protocol):
    staleness_samples: int  # verl: groups counted toward this weight version (0 where unused)

    def capacity(self, r) -> int:
        """How many more groups may start now."""

    def launched(self, r) -> None:
        """A group started."""

    def synced(self, r) -> None:
        """New weights reached the engines."""

    def taken(self, r) -> None:
        """The trainer took a batch out of the buffer."""


class Completion(Protocol):
    def launch_size(self, r) -> int:
        """Samples launched per prompt group."""

    def ready(self, r, g: Group) -> bool:
        """Whether `g` is complete now that one more of its samples ended (may abort the rest)."""

    def filtered(self, r, g: Group) -> bool:
        """Whether a complete group is dropped instead of buffered (its samples are then discarded)."""


class Expiry(Protocol):
    def expire(self, r) -> None:
        """Before the trainer looks at the buffer: discard (or abort) what is too old."""

    def screen(self, r, new: list[Group]) -> list[Group]:
        """The groups buffered since the trainer last looked that it may still train."""


class Selection(Protocol):
    def order(self, buffer: list[Group]) -> None:
        """Put the buffer in the order the trainer takes it (in place)."""

    def trim(self, r, batch: list[Group]) -> None:
        """What of a taken batch is not trained (discard it)."""


@dataclass(frozen=True)
class RolloutPolicies:
    admission: Admission
    completion: Completion
    expiry: Expiry
    selection: Selection


class CountingAdmission:
    """An admission rule that reads the loop's counters and keeps no state of its own (AReaL's eta, ROLL's
    alpha): nothing to update when a group starts, weights sync or the trainer takes a batch."""

    staleness_samples = 0

    def launched(self, r) -> None:
        pass

    def synced(self, r) -> None:
        pass

    def taken(self, r) -> None:
        pass


def admitted_limit(eta: float, syncs: int, admit_unit: int) -> int:
    """AReaL's (and ROLL's) bound: accepted + running groups <= floor((eta + version + 1) x unit)."""
    return math.floor((eta + syncs + 1) * admit_unit + 1e-9)


class WholeGroup:
    """A group launches `samples_per_prompt` samples and is complete when every one has ended."""

    def __init__(self, samples_per_prompt: int):
        self.size = samples_per_prompt

    def launch_size(self, r) -> int:
        return self.size

    def ready(self, r, g: Group) -> bool:
        return g.pending == 0

    def filtered(self, r, g: Group) -> bool:
        return False


class NoExpiry:
    """Nothing is too old to train (staleness is bounded at admission only)."""

    def expire(self, r) -> None:
        pass

    def screen(self, r, new: list[Group]) -> list[Group]:
        return new


class OldestFirst:
    """AReaL's trainer (and ROLL's): the groups that started at the oldest version first, then finish order."""

    def order(self, buffer: list[Group]) -> None:
        buffer.sort(key=lambda g: (g.start_version, g.finished_s, g.gid))

    def trim(self, r, batch: list[Group]) -> None:
        pass


class QueueOrder:
    """verl fully_async's message queue: groups in the order they finished."""

    def order(self, buffer: list[Group]) -> None:
        pass

    def trim(self, r, batch: list[Group]) -> None:
        pass


class DispatchOrder(QueueOrder):
    """NeMo-RL's InOrder sampler (as rlsim reads it): finished groups in the order their prompts were dispatched."""

    def order(self, buffer: list[Group]) -> None:
        buffer.sort(key=lambda g: g.gid)


class StartedBefore:
    """The samples still running whose group started too long ago for a bound that only tightens, in sample order.

    Groups start at non-decreasing versions, so those samples are a prefix of the loop's `samples_all`; only the
    part of it that was still running last time, and the part the bound has just passed, are read.
    """

    def __init__(self) -> None:
        self._seen = 0  # samples[:_seen] started below the bound last looked at
        self._running: list = []  # those of them still running then, in sample order

    def running(self, samples: list, too_old):
        """`too_old(start_version)`: whether groups started at that version are past the bound (true for a prefix
        of versions, a prefix that only grows)."""
        while self._seen < len(samples) and too_old(samples[self._seen].group.start_version):
            self._running.append(samples[self._seen])
            self._seen += 1
        for s in self._running:
            if not s.finished:
                yield s
        self._running = [s for s in self._running if not s.finished]
