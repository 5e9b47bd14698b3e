"""Environment pools and tool calls: the CPU side of agentic rollouts, as real FIFO queues.

An `EnvironmentPool` is a fixed number of workers (search clients, sandboxes, game servers); calls
beyond its concurrency wait in FIFO order, which is where long-horizon agents lose time when many
trajectories call tools at once (ASearcher: <= 20 concurrent searches per process). A `ToolRunner`
turns one tool call into attempts on a pool: each attempt queues for a slot, holds it for a latency
drawn from the tool's distribution (cut off at the timeout), may fail, and a failed attempt gives its
slot back before waiting out the backoff, exactly as a client-side retry loop does.

All randomness comes from `env.rng`, drawn in event order (latency, then the failure draw when
0 < failure_prob < 1, then the observation length of a successful call), so a run is reproducible
from its seed and a tool that cannot fail leaves the generator's stream untouched by failure draws.

A pool is a hand-made FIFO with simpy.Resource's rules (a slot frees when given back; the head of the
queue is granted when a request arrives or at the event the give-back schedules) and two shortcuts
that leave the order of everything, random draws included, unchanged: a free slot asked for when
nothing else is due at this instant is taken at once (its grant event would have been the very next
one processed), and a slot given back with nobody waiting schedules no event (it would find no one).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Hashable
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

import numpy as np
import pandas as pd
import simpy

from rlsim.sim.costs.environment import Outcome, attempt_outcome, backoff_delay
from rlsim.sim.scenario.schema import EnvironmentsSpec, EnvPoolSpec, ToolSpec

TOOL_STATS_COLUMNS = [
    "calls", "ok_calls", "failed_calls", "attempts", "failed_attempts", "timeouts",
    "latency_p50_s", "latency_p90_s", "latency_p99_s", "queue_p50_s", "queue_p90_s", "mean_queue_s",
]
POOL_STATS_COLUMNS = [
    "concurrency", "cold_start_s", "requests", "cold_starts", "max_in_service", "busy_fraction", "mean_queue_s",
]
T = TypeVar("T")  # what an attempt's draw decides besides how long it holds its slot


class EnvironmentPool:
    """`concurrency` workers behind one FIFO queue, with the bookkeeping to prove the limit holds."""

    def __init__(self, env: simpy.Environment, name: str, spec: EnvPoolSpec) -> None:
        self.env = env
        self.name = name
        self.spec = spec
        self.slots_free = self._limit = spec.concurrency  # (read per call: kept off the pydantic model)
        self._waiting: deque[simpy.Event] = deque()  # grant events of callers queued for a slot, FIFO
        self.in_service = 0
        self.max_in_service = 0
        self.queue_times: list[float] = []  # per slot request, in grant order
        self._busy_slot_s = 0.0  # integral of in_service over time up to _changed_at
        self._changed_at = 0.0
        self._cold_started: set[Hashable] = set()

    @property
    def concurrency(self) -> int:
        return self.spec.concurrency

    def _set_in_service(self, delta: int) -> None:
        now = self.env.now
        in_service = self.in_service
        self._busy_slot_s += in_service * (now - self._changed_at)
        self._changed_at = now
        self.in_service = in_service = in_service + delta
        if in_service > self._limit or in_service < 0:
            raise RuntimeError(f"environment pool {self.name!r}: {in_service} in service, "
                               f"concurrency {self.concurrency}")
        if in_service > self.max_in_service:
            self.max_in_service = in_service

    def hold(self, seconds: float | Callable[[], float]) -> Generator[simpy.Event, object, float]:
        """Queue for a slot, keep it `seconds`, give it back; returns the time spent queueing.

        `seconds` may be a function called once the slot is granted, so that draws happen in event order.
        """
        draw = (lambda: (None, seconds())) if callable(seconds) else (lambda: (None, seconds))
        queued, _, _ = yield from self.attempt(draw)
        return queued

    def attempt(self, draw: Callable[[], tuple[T, float]]) -> Generator[simpy.Event, object, tuple[float, T, float]]:
        """Queue for a slot, `draw()` -> (what, seconds), hold it, give it back; returns (queued, what, seconds).

        The draw happens once the slot is granted, so that random draws happen in event order.
        """
        env = self.env
        asked = env.now
        if self.slots_free and not self._waiting and env.peek() > asked:
            self.slots_free -= 1  # the shortcut: nothing else is due before the grant would be processed
            queued = 0.0
        else:
            yield from self._queue_for_slot()
            queued = env.now - asked
        self.queue_times.append(queued)
        self._set_in_service(+1)
        what, seconds = draw()
        try:
            yield env.timeout(seconds)
        except GeneratorExit:  # a process collected after the run: no hand-over (as simpy's `with` does)
            self._set_in_service(-1)
            raise
        except BaseException:
            self._set_in_service(-1)
            self._give_back()
            raise
        self._set_in_service(-1)
        self._give_back()
        return queued, what, seconds

    def _queue_for_slot(self) -> Generator[simpy.Event, object, None]:
        """Join the FIFO queue; as simpy does, a free slot then goes to the head of the queue."""
        grant = self.env.event()
        self._waiting.append(grant)
        self._grant_head()
        try:
            yield grant
        except BaseException as exc:  # interrupted while queued: leave the queue, or return a granted slot
            if grant in self._waiting:
                self._waiting.remove(grant)
            elif not isinstance(exc, GeneratorExit):
                self._give_back()
            raise

    def _give_back(self) -> None:
        """A slot comes back, free at once; a waiter gets it when the give-back event is processed."""
        self.slots_free += 1
        if self._waiting:
            ev = self.env.event()
            ev.callbacks.append(self._grant_head)
            ev.succeed()

    def _grant_head(self, _event: simpy.Event | None = None) -> None:
        """simpy's Resource rule: the longest waiter (only it) is granted if a slot is free."""
        if self._waiting and self.slots_free:
            self.slots_free -= 1
            self._waiting.popleft().succeed()

    @property
    def slots_granted(self) -> int:
        """Slots held or handed to a caller that has not resumed yet (never above concurrency)."""
        return self.concurrency - self.slots_free

    def cold_start(self, trajectory: Hashable) -> Generator[simpy.Event, object, float]:
        """Charge the environment's start/reset once per trajectory, on a slot; returns the seconds it took.

        Use with `yield from` (or wrap in env.process) at trajectory start; a second call for the same
        trajectory, or a pool without a cold start, costs nothing and takes no slot.
        """
        if self.spec.cold_start_s <= 0 or trajectory in self._cold_started:
            return 0.0
        self._cold_started.add(trajectory)
        start = self.env.now
        yield from self.hold(self.spec.cold_start_s)
        return self.env.now - start

    def busy_slot_seconds(self) -> float:
        """Slot-seconds in service over [0, env.now], including calls still running."""
        return self._busy_slot_s + self.in_service * (self.env.now - self._changed_at)

    def busy_fraction(self) -> float:
        now = self.env.now
        return self.busy_slot_seconds() / (self.concurrency * now) if now > 0 else 0.0

    @property
    def cold_starts(self) -> int:
        return len(self._cold_started)


class ToolResult(NamedTuple):
    """How one tool call went, as the trajectory sees it (times in seconds of simulated wall clock).

    Immutable; a named tuple rather than a frozen dataclass because an agentic run makes one per tool call.
    """

    tool: str
    ok: bool
    attempts: int
    outcome: Outcome  # "ok", or the last attempt's reason ("failed" | "timeout")
    latency_s: float  # call start -> end: queueing, service and backoff
    queue_s: float  # waiting for a slot, all attempts
    service_s: float  # holding a slot, all attempts
    observation_tokens: int  # tokens appended to the context (0 unless ok)
    start_s: float = 0.0
    end_s: float = 0.0

    @property
    def backoff_s(self) -> float:
        return self.latency_s - self.queue_s - self.service_s


@dataclass
class _ToolStats:
    calls: int = 0
    ok_calls: int = 0
    attempts: int = 0
    failed_attempts: int = 0
    timeouts: int = 0
    latencies: list[float] = field(default_factory=list)
    queue_times: list[float] = field(default_factory=list)


def _percentiles(values: list[float], qs: tuple[float, ...]) -> list[float]:
    """np.percentile at each of `qs` (NaN for no values), the list made an array once, not once per percentile."""
    if not values:
        return [float("nan")] * len(qs)
    return [float(x) for x in np.percentile(np.asarray(values, dtype=float), qs)]


class ToolRunner:
    """The scenario's environment pools and tools; `call(tool)` runs one call with its retries."""

    def __init__(self, env: simpy.Environment, spec: EnvironmentsSpec) -> None:
        missing = {t: s.pool for t, s in spec.tools.items() if s.pool not in spec.pools}
        if missing:
            raise ValueError(f"tools on undefined environment pools: {missing} (pools: {sorted(spec.pools)})")
        self.env = env
        self.spec = spec
        self.pools: dict[str, EnvironmentPool] = {n: EnvironmentPool(env, n, p) for n, p in spec.pools.items()}
        self.tools: dict[str, ToolSpec] = dict(spec.tools)
        self._stats: dict[str, _ToolStats] = {t: _ToolStats() for t in self.tools}
        rng: np.random.Generator = env.rng  # type: ignore[attr-defined]
        # One attempt's result, each tool's latency law read once.
        draws = {t: _attempt_drawer(s, s.latency.sampler(), rng) for t, s in self.tools.items()}
        # What a call needs of its tool, read from the specs once: a pydantic model defines __getattr__, so
        # each read of a field takes the interpreter's generic attribute lookup.
        self._plans = {t: (self.pools[s.pool], draws[t], self._stats[t], s.max_attempts, s.backoff_s)
                       for t, s in self.tools.items()}
        self._observations = {t: s.observation_tokens.sampler() for t, s in self.tools.items()}
        # Pools that charge a start-up, in name order (the others cost nothing and take no slot).
        self.cold_start_pools = [n for n in sorted(self.pools) if self.pools[n].spec.cold_start_s > 0]

    def call(self, tool: str) -> Generator[simpy.Event, object, ToolResult]:
        """One tool call with up to max_attempts attempts (use with `yield from` inside a SimPy process)."""
        pool, draw, stats, max_attempts, backoff_s = self._plans[tool]
        stats.calls += 1
        env = self.env
        start = env.now
        queue_s = service_s = 0.0
        outcome: Outcome = "failed"
        attempt = 0
        while attempt < max_attempts:
            if attempt > 0:
                wait = backoff_delay(backoff_s, attempt)
                if wait > 0:
                    yield env.timeout(wait)
            attempt += 1
            queued, outcome, held = yield from pool.attempt(draw)
            queue_s += queued
            service_s += held
            stats.attempts += 1
            if outcome == "ok":
                break
            if outcome == "timeout":
                stats.timeouts += 1
            else:
                stats.failed_attempts += 1
        ok = outcome == "ok"
        tokens = self._observations[tool](env.rng) if ok else 0
        end = env.now
        stats.ok_calls += ok
        stats.latencies.append(end - start)
        stats.queue_times.append(queue_s)
        return ToolResult(tool, ok, attempt, outcome, end - start, queue_s, service_s, tokens, start, end)

    def cold_start(
        self, trajectory: Hashable, pools: list[str] | None = None
    ) -> Generator[simpy.Event, object, float]:
        """Start a trajectory's environments, one pool after another (default: every pool with a cold start)."""
        total = 0.0
        for name in self.cold_start_pools if pools is None else pools:
            total += yield from self.pools[name].cold_start(trajectory)
        return total

    def stats_frame(self) -> pd.DataFrame:
        """One row per tool (index `tool`): call and attempt counts, latency and queueing percentiles.

        `calls` counts every call started; ok_calls + failed_calls the finished ones (a call whose process was
        interrupted, e.g. an aborted trajectory, is neither). Percentiles are over finished calls, NaN if none.
        """
        rows = {}
        for tool, s in self._stats.items():
            latency_p50, latency_p90, latency_p99 = _percentiles(s.latencies, (50, 90, 99))
            queue_p50, queue_p90 = _percentiles(s.queue_times, (50, 90))
            rows[tool] = {
                "calls": s.calls,
                "ok_calls": s.ok_calls,
                "failed_calls": len(s.latencies) - s.ok_calls,
                "attempts": s.attempts,
                "failed_attempts": s.failed_attempts,
                "timeouts": s.timeouts,
                "latency_p50_s": latency_p50,
                "latency_p90_s": latency_p90,
                "latency_p99_s": latency_p99,
                "queue_p50_s": queue_p50,
                "queue_p90_s": queue_p90,
                "mean_queue_s": float(np.mean(s.queue_times)) if s.queue_times else float("nan"),
            }
        df = pd.DataFrame.from_dict(rows, orient="index", columns=TOOL_STATS_COLUMNS)
        df.index.name = "tool"
        return df

    def pool_frame(self) -> pd.DataFrame:
        """One row per pool (index `pool`): concurrency, peak occupancy, busy fraction over [0, env.now]."""
        rows = {
            name: {
                "concurrency": p.concurrency,
                "cold_start_s": p.spec.cold_start_s,
                "requests": len(p.queue_times),
                "cold_starts": p.cold_starts,
                "max_in_service": p.max_in_service,
                "busy_fraction": p.busy_fraction(),
                "mean_queue_s": float(np.mean(p.queue_times)) if p.queue_times else float("nan"),
            }
            for name, p in self.pools.items()
        }
        df = pd.DataFrame.from_dict(rows, orient="index", columns=POOL_STATS_COLUMNS)
        df.index.name = "pool"
        return df


def _attempt_drawer(spec: ToolSpec, latency: Callable[[np.random.Generator], float],
                    rng: np.random.Generator) -> Callable[[], tuple[Outcome, float]]:
    """A tool's attempt draw: its result, drawn once its slot is granted, as (outcome, seconds it holds the slot).

    `latency` is `spec.latency.sampler()`, built once per tool. A closure rather than a
    functools.partial: calling a partial enters the function through C and a fresh interpreter frame.
    """
    failure_prob, timeout_s = spec.failure_prob, spec.timeout_s

    def draw() -> tuple[Outcome, float]:
        seconds = latency(rng)
        failed = failure_prob > 0.0 and _failure_draw(failure_prob, rng, seconds, timeout_s)  # (no call if it cannot)
        return attempt_outcome(seconds, failed, timeout_s)

    return draw


def _failure_draw(failure_prob: float, rng: np.random.Generator, latency: float, timeout_s: float | None) -> bool:
    """Whether the attempt fails outright; certain outcomes and cut-off attempts draw nothing."""
    if failure_prob <= 0.0:
        return False
    if failure_prob >= 1.0:
        return True
    if timeout_s is not None and latency > timeout_s:
        return False  # the timeout wins; no need to spend a draw
    return bool(rng.random() < failure_prob)
