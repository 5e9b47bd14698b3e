"""A generation request: one turn of one sample on one inference engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import simpy


@dataclass(eq=False, slots=True)
class Request:
    """`prompt_tokens` new tokens to prefill, then `max_new_tokens` to decode (its sampled length).

    For a later turn of a multi-turn trajectory, `prefix_tokens` is the context already built by
    earlier turns; if the engine still caches it under `trajectory_id`, only the new tokens are
    prefilled (prefix reuse), otherwise the whole context is re-prefilled.
    """

    rid: int
    prompt_tokens: int
    max_new_tokens: int
    prefix_tokens: int = 0
    trajectory_id: Any = None
    # The rest is filled in by the engine, so it is not a constructor argument (a stray one is a TypeError).
    # Not keyword-only either: a call then looks up every keyword-only default it was not given (16 per request).
    engine: str | None = field(default=None, init=False)
    arrival_s: float | None = field(default=None, init=False)
    admitted_s: float | None = field(default=None, init=False)
    first_token_s: float | None = field(default=None, init=False)
    finished_s: float | None = field(default=None, init=False)
    generated: int = field(default=0, init=False)
    preemptions: int = field(default=0, init=False)
    prefilled_tokens: int = field(default=0, init=False)  # all prefill work done for it, recomputation included
    aborted: bool = field(default=False, init=False)
    version_tokens: dict[int, int] = field(default_factory=dict, init=False)  # policy version -> tokens it decoded
    done: simpy.Event | None = field(default=None, init=False)
    # Engine bookkeeping while running, written and read by InferenceEngine only (a schedule asks the engine:
    # `generated_by_now`): tick and generated count at joining, the start tick and weight version of the current
    # version segment, the live heap entry.
    join_tick: int = field(default=0, init=False, repr=False)
    gen_at_join: int = field(default=0, init=False, repr=False)
    seg_tick: int = field(default=0, init=False, repr=False)
    seg_version: int = field(default=0, init=False, repr=False)
    heap_seq: int = field(default=-1, init=False, repr=False)
    # Set by a prefill pool (prefill/decode disaggregation) when the request's KV reaches its decode engine: that
    # engine admits it without prefilling; cleared at admission (a preempted request re-prefills where it runs).
    remote_kv: bool = field(default=False, init=False, repr=False)

    @property
    def context_tokens(self) -> int:
        """KV the request holds while running: prefix + prompt + what it generated."""
        return self.prefix_tokens + self.prompt_tokens + self.generated

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - self.generated

    @property
    def finished(self) -> bool:
        return self.finished_s is not None

    @property
    def oldest_version(self) -> int | None:
        return min(self.version_tokens) if self.version_tokens else None

    @property
    def newest_version(self) -> int | None:
        return max(self.version_tokens) if self.version_tokens else None
