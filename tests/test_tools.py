"""Tests of environment pools and tool calls (rlsim/sim/engine/tools.py, rlsim/sim/costs/environment.py).

Exact traces use fixed latencies so every time can be written out by hand; the properties run random
pools, tools and arrival patterns and check the invariants after every SimPy event (Ciw style).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsim.sim.costs.environment import attempt_outcome, backoff_delay
from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.engine.tools import EnvironmentPool, ToolResult, ToolRunner
from rlsim.sim.scenario.schema import (
    EmpiricalSeconds,
    EnvironmentsSpec,
    EnvPoolSpec,
    FixedLength,
    FixedSeconds,
    LognormalSeconds,
    ToolSpec,
    UniformLength,
    UniformSeconds,
)


def _tool(latency, pool: str = "p", **kw) -> ToolSpec:
    kw.setdefault("observation_tokens", FixedLength(kind="fixed", value=7))
    return ToolSpec(pool=pool, latency=latency, **kw)


def _fixed(s: float) -> FixedSeconds:
    return FixedSeconds(kind="fixed", value=s)


def _envs(tools: dict[str, ToolSpec], concurrency: int = 1, cold_start_s: float = 0.0) -> EnvironmentsSpec:
    return EnvironmentsSpec(pools={"p": EnvPoolSpec(concurrency=concurrency, cold_start_s=cold_start_s)}, tools=tools)


def _run_calls(env: SimEnvironment, runner: ToolRunner, calls: list[tuple[float, str]]) -> list[ToolResult]:
    """Start one process per (arrival time, tool) and run to the end; results in call order."""
    results: list[ToolResult | None] = [None] * len(calls)

    def caller(i: int, at: float, tool: str):
        if at > 0:
            yield env.timeout(at)
        assert results[i] is None
        results[i] = yield from runner.call(tool)

    for i, (at, tool) in enumerate(calls):
        env.process(caller(i, at, tool))
    env.run()
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]


# ---------------------------------------------------------------- cost functions


def test_backoff_delay_asearcher_schedule() -> None:
    b = [1.0, 2.0, 4.0]
    assert [backoff_delay(b, k) for k in range(6)] == [0.0, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff_delay([], 3) == 0.0
    with pytest.raises(ValueError):
        backoff_delay(b, -1)


def test_attempt_outcome_timeout_wins() -> None:
    assert attempt_outcome(40.0, False, 30.0) == ("timeout", 30.0)
    assert attempt_outcome(40.0, True, 30.0) == ("timeout", 30.0)
    assert attempt_outcome(20.0, True, 30.0) == ("failed", 20.0)
    assert attempt_outcome(30.0, False, 30.0) == ("ok", 30.0)
    assert attempt_outcome(99.0, False, None) == ("ok", 99.0)


def test_lognormal_median_and_cap() -> None:
    rng = np.random.default_rng(1)
    dist = LognormalSeconds(kind="lognormal", median=2.97, sigma=0.8)
    x = dist.sample(rng, 20_000)
    assert abs(np.median(x) / 2.97 - 1) < 0.05
    capped = LognormalSeconds(kind="lognormal", median=2.97, sigma=0.8, max=13.9).sample(rng, 20_000)
    assert capped.max() <= 13.9 and (capped == 13.9).any()
    one = dist.sampler()(rng)
    assert isinstance(one, float) and one > 0


def test_fixed_and_uniform_latency() -> None:
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    assert _fixed(3.0).sampler()(rng) == 3.0
    assert rng.bit_generator.state == state  # fixed latencies draw nothing
    u = UniformSeconds(kind="uniform", min=1.0, max=2.0).sample(rng, 1000)
    assert u.min() >= 1.0 and u.max() <= 2.0
    with pytest.raises(ValueError, match="min"):
        UniformSeconds(kind="uniform", min=3.0, max=2.0)


def test_empirical_latency_resamples_column(tmp_path) -> None:
    path = tmp_path / "lat.csv"
    path.write_text("seconds,other\n1.5,0\n2.5,0\n9.0,0\n")
    x = EmpiricalSeconds(kind="empirical", path=str(path)).sample(np.random.default_rng(0), 500)
    assert set(np.unique(x)) == {1.5, 2.5, 9.0}


# ---------------------------------------------------------------- exact traces


def test_fifo_queue_concurrency_one() -> None:
    env = SimEnvironment(0)
    runner = ToolRunner(env, _envs({"search": _tool(_fixed(1.0))}))
    results = _run_calls(env, runner, [(0.0, "search")] * 3)
    assert [r.end_s for r in results] == [1.0, 2.0, 3.0]
    assert [r.queue_s for r in results] == [0.0, 1.0, 2.0]
    assert [r.service_s for r in results] == [1.0, 1.0, 1.0]
    assert all(r.ok and r.outcome == "ok" and r.attempts == 1 and r.observation_tokens == 7 for r in results)
    pools = runner.pool_frame()
    assert pools.loc["p", "max_in_service"] == 1 and pools.loc["p", "busy_fraction"] == 1.0


def test_concurrency_two_serves_pairs() -> None:
    env = SimEnvironment(0)
    runner = ToolRunner(env, _envs({"search": _tool(_fixed(2.0))}, concurrency=2))
    results = _run_calls(env, runner, [(0.0, "search")] * 5)
    assert [r.end_s for r in results] == [2.0, 2.0, 4.0, 4.0, 6.0]
    assert runner.pool_frame().loc["p", "busy_fraction"] == pytest.approx(10.0 / 12.0)


def test_asearcher_timeouts_and_backoff() -> None:
    """Search: 30 s timeout, 4 attempts, 1/2/4 s backoff; a 40 s server never answers in time."""
    env = SimEnvironment(0)
    spec = _tool(_fixed(40.0), timeout_s=30.0, max_attempts=4, backoff_s=[1.0, 2.0, 4.0])
    runner = ToolRunner(env, _envs({"search": spec}))
    (r,) = _run_calls(env, runner, [(0.0, "search")])
    assert (r.ok, r.outcome, r.attempts, r.observation_tokens) == (False, "timeout", 4, 0)
    assert r.latency_s == 30 + 1 + 30 + 2 + 30 + 4 + 30 == 127
    assert (r.queue_s, r.service_s, r.backoff_s) == (0.0, 120.0, 7.0)
    row = runner.stats_frame().loc["search"]
    assert (row.calls, row.ok_calls, row.failed_calls, row.attempts, row.timeouts) == (1, 0, 1, 4, 4)


def test_backoff_frees_the_slot() -> None:
    """While the timed-out call backs off, a queued call runs on its slot; the retry then queues behind it."""
    env = SimEnvironment(0)
    tools = {
        "slow": _tool(_fixed(40.0), timeout_s=30.0, max_attempts=4, backoff_s=[1.0, 2.0, 4.0]),
        "fast": _tool(_fixed(2.0)),
    }
    runner = ToolRunner(env, _envs(tools))
    slow, fast = _run_calls(env, runner, [(0.0, "slow"), (0.5, "fast")])
    assert (fast.queue_s, fast.end_s, fast.latency_s) == (29.5, 32.0, 31.5)
    # attempt 1 0-30, backoff to 31, queue to 32, attempt 2 to 62, +2, 64-94, +4, 98-128
    assert (slow.end_s, slow.queue_s, slow.attempts, slow.outcome) == (128.0, 1.0, 4, "timeout")


def test_certain_failure_and_certain_success() -> None:
    env = SimEnvironment(0)
    tools = {"broken": _tool(_fixed(2.0), failure_prob=1.0, max_attempts=3), "fine": _tool(_fixed(1.0))}
    runner = ToolRunner(env, _envs(tools, concurrency=4))
    broken, *fine = _run_calls(env, runner, [(0.0, "broken")] + [(float(i), "fine") for i in range(20)])
    assert (broken.ok, broken.outcome, broken.attempts, broken.latency_s) == (False, "failed", 3, 6.0)
    assert all(r.ok and r.attempts == 1 for r in fine)
    stats = runner.stats_frame()
    assert stats.loc["broken", "failed_attempts"] == 3 and stats.loc["broken", "timeouts"] == 0
    assert stats.loc["fine", "ok_calls"] == 20 and stats.loc["fine", "failed_calls"] == 0


def test_cold_start_once_per_trajectory_on_a_slot() -> None:
    env = SimEnvironment(0)
    runner = ToolRunner(env, _envs({"search": _tool(_fixed(1.0))}, cold_start_s=5.0))
    done: dict[str, tuple[float, float]] = {}

    def trajectory(tid: str):
        took = yield from runner.cold_start(tid)
        again = yield from runner.cold_start(tid)
        assert again == 0.0
        yield from runner.call("search")
        done[tid] = (took, env.now)

    for tid in ("a", "b"):
        env.process(trajectory(tid))
    env.run()
    # a: start 0-5, call 5-6 queued behind b's start (5-10) -> 10-11; b: start 5-10, call 11-12
    assert done == {"a": (5.0, 11.0), "b": (10.0, 12.0)}
    pools = runner.pool_frame()
    assert pools.loc["p", "cold_starts"] == 2 and pools.loc["p", "requests"] == 4


def test_undefined_pool_is_an_error() -> None:
    spec = EnvironmentsSpec(pools={}, tools={"search": _tool(_fixed(1.0), pool="nowhere")})
    with pytest.raises(ValueError, match="nowhere"):
        ToolRunner(SimEnvironment(0), spec)


def test_pool_hold_returns_queue_time() -> None:
    env = SimEnvironment(0)
    pool = EnvironmentPool(env, "p", EnvPoolSpec(concurrency=1))
    queued: list[float] = []

    def user():
        queued.append((yield from pool.hold(3.0)))

    for _ in range(3):
        env.process(user())
    env.run()
    assert queued == [0.0, 3.0, 6.0] and pool.busy_fraction() == 1.0


# ---------------------------------------------------------------- properties


class MonitoredEnvironment(SimEnvironment):
    """Checks every pool's occupancy after every event."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.pools: list[EnvironmentPool] = []
        self.checks = 0

    def step(self) -> None:
        super().step()
        for p in self.pools:
            assert 0 <= p.in_service <= p.concurrency
            assert 0 <= p.slots_granted <= p.concurrency
            self.checks += 1


def _setting(low: float, high: float):
    """A scenario setting: 0, or at least 1e-12 (smaller non-zero values are refused as typos)."""
    return st.floats(low, high).map(lambda v: 0.0 if abs(v) < 1e-12 else v)


latencies = st.one_of(
    st.builds(lambda v: _fixed(v), _setting(0.0, 5.0)),
    st.builds(lambda a, w: UniformSeconds(kind="uniform", min=a, max=a + w), _setting(0, 3), _setting(0, 3)),
    st.builds(
        lambda m, s, cap: LognormalSeconds(kind="lognormal", median=m, sigma=s, max=cap),
        st.floats(0.1, 5.0), _setting(0.0, 1.5), st.one_of(st.none(), st.floats(1.0, 20.0)),
    ),
)
tool_specs = st.builds(
    lambda lat, timeout, attempts, backoff, fp: ToolSpec(
        pool="p", latency=lat, observation_tokens=UniformLength(kind="uniform", min=1, max=50),
        timeout_s=timeout, max_attempts=attempts, backoff_s=backoff, failure_prob=fp,
    ),
    latencies,
    st.one_of(st.none(), st.floats(0.5, 6.0)),
    st.integers(1, 4),
    st.lists(_setting(0.0, 3.0), max_size=3),
    st.one_of(st.just(0.0), st.just(1.0), _setting(0.0, 1.0)),
)
scenarios = st.tuples(
    st.integers(1, 4),  # concurrency
    st.lists(tool_specs, min_size=1, max_size=3),
    st.lists(st.tuples(st.floats(0.0, 10.0), st.integers(0, 2)), min_size=1, max_size=25),
    st.integers(0, 2**16),
)


def _simulate(concurrency, specs, arrivals, seed):
    env = MonitoredEnvironment(seed)
    tools = {f"t{i}": s for i, s in enumerate(specs)}
    runner = ToolRunner(env, _envs(tools, concurrency=concurrency))
    env.pools = list(runner.pools.values())
    calls = [(at, f"t{k % len(specs)}") for at, k in arrivals]
    return env, runner, calls, _run_calls(env, runner, calls)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_tool_call_invariants(case) -> None:
    concurrency, specs, arrivals, seed = case
    env, runner, calls, results = _simulate(*case)
    assert env.checks > 0
    pool = runner.pools["p"]
    assert pool.max_in_service <= concurrency and pool.in_service == 0
    for (at, tool), r in zip(calls, results, strict=True):
        spec = runner.tools[tool]
        assert r.tool == tool and r.start_s == pytest.approx(at)
        assert 1 <= r.attempts <= spec.max_attempts
        assert r.latency_s >= r.queue_s >= 0 and r.service_s >= 0
        backoff = sum(backoff_delay(spec.backoff_s, k) for k in range(1, r.attempts))
        assert r.latency_s == pytest.approx(r.queue_s + r.service_s + backoff, abs=1e-9)
        if spec.timeout_s is not None:
            assert r.service_s <= r.attempts * spec.timeout_s + 1e-9
        if r.ok:
            assert r.outcome == "ok" and 1 <= r.observation_tokens <= 50
        else:
            assert r.outcome in ("failed", "timeout") and r.attempts == spec.max_attempts
            assert r.observation_tokens == 0
        if spec.failure_prob == 0.0 and spec.timeout_s is None:
            assert r.ok
    # conservation: the slot-seconds the pool saw are exactly the service the calls report
    assert pool.busy_slot_seconds() == pytest.approx(sum(r.service_s for r in results), abs=1e-6)
    assert len(pool.queue_times) == sum(r.attempts for r in results)
    stats = runner.stats_frame()
    assert stats["calls"].sum() == len(calls)
    assert (stats["ok_calls"] + stats["failed_calls"] == stats["calls"]).all()
    assert stats["ok_calls"].sum() == sum(r.ok for r in results)
    assert stats["attempts"].sum() == sum(r.attempts for r in results)
    assert (stats["failed_attempts"] + stats["timeouts"] + stats["ok_calls"] == stats["attempts"]).all()
    called = stats[stats["calls"] > 0]
    assert (called["latency_p50_s"] <= called["latency_p99_s"] + 1e-12).all()
    assert 0.0 <= runner.pool_frame().loc["p", "busy_fraction"] <= 1.0 + 1e-12


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_same_seed_same_results(case) -> None:
    _, r1, _, a = _simulate(*case)
    _, r2, _, b = _simulate(*case)
    assert a == b
    s1, s2 = r1.stats_frame(), r2.stats_frame()
    assert s1.equals(s2) and r1.pool_frame().equals(r2.pool_frame())


def test_different_seeds_differ() -> None:
    spec = [_tool(LognormalSeconds(kind="lognormal", median=1.0, sigma=1.0))]
    arrivals = [(0.0, 0)] * 10
    _, _, _, a = _simulate(2, spec, arrivals, 1)
    _, _, _, b = _simulate(2, spec, arrivals, 2)
    assert [r.latency_s for r in a] != [r.latency_s for r in b]
    assert not any(math.isnan(r.latency_s) for r in a)


def test_interrupted_call_gives_its_slot_back() -> None:
    """An aborted trajectory's call leaves the pool clean: the next caller gets the slot at once."""
    env = SimEnvironment(0)
    runner = ToolRunner(env, _envs({"search": _tool(_fixed(10.0))}))
    caught: list[float] = []

    def victim():
        try:
            yield from runner.call("search")
        except simpy.Interrupt:
            caught.append(env.now)

    proc = env.process(victim())

    def abort():
        yield env.timeout(3.0)
        proc.interrupt("weight update")

    env.process(abort())
    (late,) = _run_calls(env, runner, [(4.0, "search")])
    assert caught == [3.0] and (late.queue_s, late.end_s) == (0.0, 14.0)
    pool = runner.pools["p"]
    assert pool.in_service == 0 and pool.busy_slot_seconds() == 13.0
    row = runner.stats_frame().loc["search"]
    assert (row.calls, row.ok_calls, row.failed_calls) == (2, 1, 0)
