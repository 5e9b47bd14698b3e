"""SimEnvironment.run: the same events, order and count as stepping one event at a time (meta.events)."""

from __future__ import annotations

import pytest

from rlsim.engine.environment import SimEnvironment


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


def test_timeout_and_event_are_bound_to_the_instance():
    env = SimEnvironment()
    assert "timeout" in vars(env) and "event" in vars(env) and "process" in vars(env)
