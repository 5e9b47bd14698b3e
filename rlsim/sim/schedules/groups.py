"""The units of asynchronous rollout: a sample (one trajectory, one token history) and its prompt group."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlsim.sim.engine.request import Request
from rlsim.sim.results.lifecycle import SampleState


@dataclass(eq=False)
class Sample:
    """One trajectory: possibly several requests (aborted and resumed), one token history."""

    sid: int
    group: Group
    prompt_tokens: int
    response_tokens: int
    generated: int = 0
    version_tokens: dict[int, int] = field(default_factory=dict)
    request: Request | None = None
    finished: bool = False
    trained_step: int | None = None
    trained_version: int | None = None
    observation_tokens: int = 0  # multi-turn: tool output appended to the context (trained, not generated)
    trajectory: object | None = None
    state: SampleState = SampleState.RUNNING  # rlsim/sim/results/lifecycle.py
    reason: str = ""  # why, when discarded
    judged: bool = False

    @property
    def oldest_version(self) -> int:
        return min(self.version_tokens) if self.version_tokens else 0


@dataclass(eq=False)
class Group:
    """The n samples of one prompt (GRPO needs the whole group); the unit of admission and training."""

    gid: int
    start_version: int
    started_s: float
    samples: list[Sample] = field(default_factory=list)
    pending: int = 0
    finished_s: float | None = None
    closed: bool = False  # complete (in the buffer, trained or dropped)
    closing: bool = False  # completing: its redundant samples are being aborted
    taken_s: float | None = None  # when the trainer took it (or dropped it) from the buffer
