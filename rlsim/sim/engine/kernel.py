"""The fast kernel: SimPy's event loop with its private internals used directly. The one module in rlsim that
names SimPy's private attributes (`_queue`, `_eid`, `_now`, `_value`, `_ok`, `Process._target`, events built
with `object.__new__`); tests/test_architecture.py keeps every other module off them.

`FastKernel` is `simpy.Environment` with the same events in the same order, built cheaper: ~1.11x per
generation turn of an agentic run. Its twin `rlsim.sim.engine.reference.ReferenceKernel` offers the same
methods on SimPy's public API alone; tests/test_kernel.py runs the shipped scenarios on both and requires
bit-identical results. simpy is pinned with `==` in pyproject.toml: a new simpy is adopted by re-running that test.
"""

from __future__ import annotations

from heapq import heappop, heappush
from inspect import getattr_static

import simpy
from simpy.core import BoundClass, EmptySchedule, StopSimulation
from simpy.events import NORMAL, PENDING, URGENT, EventPriority

_new_event = object.__new__


class FastKernel(simpy.Environment):
    """simpy.Environment, cheaper per event: see each method for what it saves and what it keeps identical."""

    # The clock as a plain attribute, kept equal to simpy's `_now` wherever that moves (`_loop`, `step`):
    # simpy's `now` is a property, and an agentic run reads the clock ~16 times per generation turn.
    now: float = 0.0

    def __init__(self) -> None:
        super().__init__()
        self.now = self._now
        # simpy binds `env.process`, `env.all_of`, ... to the instance only for names in the instance's own
        # class dict, which for a subclass is empty: without this every `env.process(...)` builds a bound class.
        # Not for the methods this class defines instead (`timeout`, `event`): an instance attribute of a method's
        # name would keep every `env.timeout(...)` method lookup from being specialised by the interpreter.
        for name, obj in vars(simpy.Environment).items():
            if type(obj) is BoundClass and type(getattr_static(type(self), name)) is BoundClass:
                setattr(self, name, getattr(self, name))
        self._empty_pops = 0  # steps on an empty queue (events_processed counts them, as a step does)

    def timeout(self, delay: float = 0, value=None) -> simpy.Event:
        """What simpy's `Timeout(self, delay, value)` is (an event triggered now with `value`, in the queue at
        the same place), built without its `__init__` and `schedule` calls: an agentic run makes ~5 per turn.

        Of the one class `Event` (no `Timeout` subclass, no `_delay`), with its fields set in the order `event`
        sets them: the event loop and simpy's process resume read `callbacks`, `_ok` and `_value` of every
        event, and the interpreter keeps those reads specialised only while they keep meeting one class and
        one attribute layout (2.5% of an agentic run's instructions went to the generic lookups)."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        event = _new_event(simpy.Event)
        event.env = self
        event.callbacks = []
        event._value = value
        event._ok = True
        heappush(self._queue, (self.now + delay, NORMAL, next(self._eid), event))
        return event

    def event(self) -> simpy.Event:
        """simpy's `Event(self)`, built without calling the class: a class call enters `__init__` through C and
        a fresh interpreter frame, a method call does not (an engine makes one per request). `_value` is set
        here (simpy leaves the class's PENDING) so that every event has the layout `timeout` gives it."""
        event = _new_event(simpy.Event)
        event.env = self
        event.callbacks = []
        event._value = PENDING
        return event

    def succeed_once(self, event: simpy.Event, value=None) -> None:
        """`event.succeed(value)` unless the event has already been triggered: the queue entry simpy's `succeed`
        makes, without its `triggered` property and two method calls (an engine ends ~1 request per turn)."""
        if event._value is PENDING:
            event._ok = True
            event._value = value
            heappush(self._queue, (self.now, NORMAL, next(self._eid), event))

    def redirect(self, process: simpy.Process, old: simpy.Event, delay: float | None) -> simpy.Event:
        """Make `process`, waiting on `old`, wait instead on a new event `delay` from now (None: an urgent event
        now, where an Interrupt would wake it); `old` stays in the queue and expires unheard. Returns the new event.

        One event instead of an Interrupt's two (the Interruption, then the process's next timeout) and no
        exception thrown into the generator."""
        if delay is not None:
            new = self.timeout(delay)
        else:
            new = self.event()
            new._ok, new._value = True, None
            self.schedule(new, URGENT)
        new.callbacks, old.callbacks = old.callbacks, []
        process._target = new  # SimPy's record of what the process waits on (as Interrupt uses it)
        return new

    def step(self) -> None:
        """simpy's step (for callers stepping by hand), with the clock attribute kept in step."""
        if self._queue:
            self.now = self._queue[0][0]  # before the callbacks run: the time simpy's step moves to
        super().step()

    @property
    def events_processed(self) -> int:
        """Events processed so far (meta.json reports how many a run took), counting a step on an empty queue.

        Every event enters the queue with the next id of simpy's counter, and leaves it only to be processed.
        """
        return int(repr(self._eid)[len("count("):-1]) - len(self._queue) + self._empty_pops

    def run(self, until: float | simpy.Event | None = None):
        """simpy's `Environment.run`, with `step` inlined into the loop.

        The loop is simpy 4's `run` + `step` line for line (same event order, same failure and
        StopSimulation handling); what it saves is a method call and two attribute lookups per event.
        A run that ends on an empty queue took one more (failed) step: counted.
        """
        if until is not None:
            if not isinstance(until, simpy.Event):
                at = until if isinstance(until, int) else float(until)
                if at <= self._now:
                    raise ValueError(f"until ({at}) must be greater than the current simulation time")
                until = self.event()  # (the layout every event here has)
                until._ok, until._value = True, None
                self.schedule(until, URGENT, at - self._now)
            elif until.callbacks is None:
                return until.value  # already processed
            until.callbacks.append(StopSimulation.callback)
        try:
            if type(self).step is FastKernel.step:
                self._loop()
            else:  # a subclass hooks `step` (a test checking invariants after every event): step by hand
                while True:
                    self.step()
        except StopSimulation as stop:
            return stop.args[0]  # == until.value
        except EmptySchedule:
            self._empty_pops += 1
            if until is not None:
                raise RuntimeError(
                    f'No scheduled events left but "until" event was not triggered: {until}'
                ) from None
        return None

    def _loop(self) -> None:
        queue = self._queue
        while True:
            try:
                self._now, _, _, event = heappop(queue)
                self.now = self._now
            except IndexError:
                raise EmptySchedule from None
            # As simpy's step: callbacks set to None first, so that a late `callbacks.append` fails loudly.
            callbacks, event.callbacks = event.callbacks, None
            try:
                for callback in callbacks:
                    callback(event)
            except StopSimulation:
                # Keep the callbacks not yet run with the event and process it first when the run resumes.
                event.callbacks = callbacks[callbacks.index(callback) + 1:]
                self.schedule(event, EventPriority(-1))
                raise
            if not event._ok and not hasattr(event, "_defused"):
                # A failed event nobody handled crashes the run, with a fresh copy of its exception.
                exc = type(event._value)(*event._value.args)
                exc.__cause__ = event._value
                raise exc
