"""SimEnvironment.run: the same events, order and count as stepping one event at a time (meta.events)."""

from __future__ import annotations

import pytest
import simpy
from simpy.events import Timeout

from rlsim.sim.engine.environment import SimEnvironment


def _scenario(env: SimEnvironment, log: list):
    """A few processes with timeouts, plain events and a failure that a waiter defuses."""

    def worker(i):
        for k in range(3):
            yield env.timeout(0.5 * i + k)
            log.append((env.now, i, k))
        return i

    def failer():
        yield env.timeout(1.0)
        raise ValueError("boom")

    def catcher(proc):
        try:
            yield proc
        except ValueError:
            log.append((env.now, "caught"))

    procs = [env.process(worker(i)) for i in range(4)]
    env.process(catcher(env.process(failer())))
    return env.all_of(procs)


def _stepwise() -> tuple[list, int, float]:
    env, log = SimEnvironment(), []
    done = _scenario(env, log)
    while not done.processed:
        env.step()
    return log, env.events_processed, env.now


def test_run_matches_step_by_step():
    env, log = SimEnvironment(), []
    done = _scenario(env, log)
    value = env.run(until=done)
    ref_log, ref_events, ref_now = _stepwise()
    assert log == ref_log
    assert env.events_processed == ref_events
    assert env.now == ref_now
    assert sorted(value.values()) == [0, 1, 2, 3]
    assert env.run(until=done) == value  # an `until` already processed returns its value at once


def test_unhandled_failure_still_raises_and_counts():
    env = SimEnvironment()

    def failer():
        yield env.timeout(2.0)
        raise KeyError("lost")

    proc = env.process(failer())
    with pytest.raises(KeyError):
        env.run(until=env.event())
    assert env.now == 2.0 and env.events_processed == 3  # init, timeout, the failed process
    assert not proc.ok


def test_empty_schedule_before_until_is_an_error():
    env = SimEnvironment()
    env.timeout(1.0)
    with pytest.raises(RuntimeError, match="until"):
        env.run(until=env.event())
    assert env.events_processed == 2  # the timeout, then the failed pop (as the step override counts it)


def test_simpys_bound_classes_are_bound_to_the_instance_but_not_our_methods():
    """simpy's BoundClass names (process, all_of, ...) are bound once per environment; the methods this class
    defines instead (timeout, event) stay on the class, where the interpreter can specialise their lookup."""
    env = SimEnvironment()
    assert "process" in vars(env) and "all_of" in vars(env)
    assert "timeout" not in vars(env) and "event" not in vars(env)
    assert env.timeout.__func__ is SimEnvironment.timeout and env.event.__func__ is SimEnvironment.event


def test_same_trace_as_plain_simpy():
    """Inlined loop, plain-attribute clock and hand-built timeouts: the trace simpy's own Environment gives."""
    logs, clocks, scheduled = [], [], []
    for env in (simpy.Environment(), SimEnvironment()):
        log: list = []
        value = env.run(until=_scenario(env, log))
        logs.append(log)
        clocks.append((env.now, sorted(value.values())))
        scheduled.append(int(repr(env._eid)[len("count("):-1]))  # events ever scheduled
    assert logs[0] == logs[1] and clocks[0] == clocks[1] and scheduled[0] == scheduled[1]
    assert [type(e[0]) for e in logs[1]] == [type(e[0]) for e in logs[0]]  # int and float times alike


def test_timeout_is_simpys_triggered_event():
    """What simpy's Timeout is (an Event triggered now, processed `delay` later), of the one class Event."""
    env = SimEnvironment()
    t = env.timeout(2, value="x")
    theirs = Timeout(simpy.Environment(), 2, value="x")
    assert type(t) is simpy.Event and isinstance(theirs, simpy.Event)
    assert (t.value, t.ok, t.triggered, t.processed) == (theirs.value, theirs.ok, theirs.triggered, theirs.processed)
    assert t.value == "x" and t.ok and t.triggered and not t.processed
    env.run()
    assert env.now == 2 and t.processed
    with pytest.raises(ValueError, match="Negative delay"):
        env.timeout(-1)


def test_succeed_once_makes_simpys_queue_entry_and_only_once():
    """The engines' shortcut for `event.succeed(value)`: the same queue entry (time, priority, id); a second
    call, like a guarded succeed on an event already triggered, changes nothing."""
    ours, theirs = SimEnvironment(), simpy.Environment()
    for env in (ours, theirs):
        env.timeout(1.5)
        env.run()
    a, b = ours.event(), theirs.event()
    ours.succeed_once(a, "v")
    b.succeed("v")
    ours.succeed_once(a, "other")  # already triggered: no second entry, value kept
    assert [e[:3] for e in ours._queue] == [e[:3] for e in theirs._queue] == [(1.5, 1, 1)]
    assert a.triggered and a.ok and a.value == "v"
    got = []
    a.callbacks.append(lambda ev: got.append((ours.now, ev.value)))
    ours.run()
    assert got == [(1.5, "v")]


def test_a_subclass_hooking_step_sees_every_event():
    """Tests check invariants after each event by overriding `step`; `run` then steps by hand."""

    class Hooked(SimEnvironment):
        seen = 0

        def step(self):
            self.seen += 1
            super().step()

    env, log = Hooked(), []
    env.run(until=_scenario(env, log))
    ref_log, ref_events, _ = _stepwise()
    assert log == ref_log and env.seen == ref_events == env.events_processed
