"""A sample's life, in one vocabulary: the states it passes through and the record the run keeps of it.

Every schedule, every multi-turn trajectory and the run collector name a sample's state with
`SampleState`; `SampleLife` is the collector's record of one sample. The output tables keep their
column names and values: `samples.csv`'s `fate` and `trajectories.csv`'s `outcome` are read off the
state through `FATE` and `OUTCOME` (docs/metrics.md).

    running ──> completed ──> trained
       │            ├──> dropped  (stale, expired, filtered: finished, never trained)
       │            └──> aborted  (redundant: a surplus finisher of its group)
       ├──> failed   (a tool call failed past its retries)
       └──> aborted  (redundant, expired while running, aborted mid-generation, in flight at the end)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class SampleState(Enum):
    RUNNING = "running"  # generating, waiting on a tool, or being scored
    COMPLETED = "completed"  # its whole response is in: trainable, not trained yet
    TRAINED = "trained"  # a trainer step used it
    FAILED = "failed"  # a tool call failed past its retries: nothing to train
    ABORTED = "aborted"  # stopped (or set aside) before it could be trained
    DROPPED = "dropped"  # completed, then thrown away untrained


RUNNING, COMPLETED, TRAINED = SampleState.RUNNING, SampleState.COMPLETED, SampleState.TRAINED
FAILED, ABORTED, DROPPED = SampleState.FAILED, SampleState.ABORTED, SampleState.DROPPED

DISCARDED = frozenset({FAILED, ABORTED, DROPPED})  # ends whose generated tokens are waste
TERMINAL = DISCARDED | {TRAINED}

# The moves a sample may make (anything else is a bug in a schedule).
NEXT: dict[SampleState, frozenset[SampleState]] = {
    RUNNING: frozenset({COMPLETED, FAILED, ABORTED}),
    COMPLETED: frozenset({TRAINED, DROPPED, ABORTED}),
    TRAINED: frozenset(),
    FAILED: frozenset(),
    ABORTED: frozenset(),
    DROPPED: frozenset(),
}

# The user-visible columns, read off the state.
FATE = {RUNNING: "in_flight", COMPLETED: "finished", TRAINED: "trained",
        FAILED: "discarded", ABORTED: "discarded", DROPPED: "discarded"}  # samples.csv `fate`
OUTCOME = {RUNNING: "aborted", COMPLETED: "completed", TRAINED: "completed",
           FAILED: "failed", ABORTED: "aborted", DROPPED: "dropped"}  # trajectories.csv `outcome`
OUTCOMES = ("completed", "failed", "aborted", "dropped")  # the `trajectories_<outcome>` summary keys
WASTED_OUTCOMES = tuple(sorted({OUTCOME[s] for s in DISCARDED}))  # trajectories whose decoding was wasted


class Reason:
    """Why a sample was discarded (a failed tool call says which tool and how: "<tool> <how> after <n> attempts")."""

    REDUNDANT = "redundant"  # ROLL: its group already had enough finishers
    EXPIRED = "expired"  # ROLL: its group started too many versions ago (async_generation_ratio)
    STALE = "stale"  # drop_stale: older than the staleness bound when the trainer looked
    FILTERED = "filtered: all rewards equal"  # ROLL dynamic sampling, verl's DAPO filter (replay buffer)
    GROUP_FAILED = "a trajectory of its group failed"  # verl V1's replay buffer evicts the whole group
    END_OF_RUN = "in flight at end of run"
    MID_GENERATION = "aborted during generation"  # its request was aborted under it


def advance(sample, state: SampleState, reason: str | None = None) -> None:
    """Move `sample` (anything with `state` and `reason`) to `state`; an illegal move is a schedule bug."""
    if state not in NEXT[sample.state]:
        raise ValueError(f"sample {getattr(sample, 'sid', '?')}: {sample.state.value} -> {state.value} is not a move")
    sample.state = state
    if reason is not None:
        sample.reason = reason


@dataclass(eq=False)
class SampleLife:
    """The run's record of one sample: started, maybe finished, then trained, discarded or still in flight."""

    sample_id: int
    step: int | None
    prompt_tokens: int
    arrival_s: float
    engine: str | None = None
    response_tokens: int = 0
    admitted_s: float | None = None
    finished_s: float | None = None
    preemptions: int = 0
    oldest_version: int | None = None
    newest_version: int | None = None
    trained_step: int | None = None
    trained_version: int | None = None
    state: SampleState = RUNNING
    reason: str = ""  # why, when discarded

    @property
    def fate(self) -> str:
        """The `fate` column of samples.csv."""
        return FATE[self.state]

    @property
    def staleness(self) -> float:
        if self.trained_version is None:
            return float("nan")
        return self.trained_version - (self.oldest_version or 0)
