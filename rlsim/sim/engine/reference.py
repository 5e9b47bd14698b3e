"""The reference kernel: `FastKernel`'s methods on SimPy's public API alone (no private attribute).

It is the readable statement of what the fast kernel (rlsim/sim/engine/kernel.py) does, and the check on it:
tests/test_kernel.py runs the shipped scenarios on both and requires bit-identical results, event counts
included. Select it with `RLSIM_KERNEL=reference` (or `new_environment(seed, kernel="reference")`); it
costs ~11-15% more instructions per event.
"""

from __future__ import annotations

import simpy
from simpy.events import Initialize


class ReferenceKernel(simpy.Environment):
    """FastKernel's methods (succeed_once, redirect, events_processed) on simpy.Environment's public API."""

    def __init__(self) -> None:
        super().__init__()
        self._steps = 0  # every call of step, one that finds the queue empty included

    def succeed_once(self, event: simpy.Event, value=None) -> None:
        """`event.succeed(value)` unless the event has already been triggered."""
        if not event.triggered:
            event.succeed(value)

    def redirect(self, process: simpy.Process, old: simpy.Event, delay: float | None) -> simpy.Event:
        """Make `process`, waiting on `old`, wait instead on a new event `delay` from now (None: an urgent event
        now); `old` expires unheard. simpy's `Initialize` is the event its public API offers that is triggered at
        once with urgent priority (simpy documents it as used by `Process`; it takes no private argument).
        `process.target` keeps naming `old`: only an Interrupt reads it, and engines are never interrupted."""
        new = self.timeout(delay) if delay is not None else Initialize(self, process)
        new.callbacks, old.callbacks = old.callbacks, []
        return new

    def step(self) -> None:
        self._steps += 1
        super().step()

    @property
    def events_processed(self) -> int:
        """Events processed so far, counting a step on an empty queue (as the fast kernel counts)."""
        return self._steps
