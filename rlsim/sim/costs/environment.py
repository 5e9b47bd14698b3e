"""Environment (tool / sandbox / search API) costs: latency draws, retry backoff, attempt outcomes.

Pure functions of a distribution and the run's generator, so the SimPy side (rlsim/sim/engine/tools.py)
only decides *when* things happen. Lognormal latencies are given by their median because that is
what benchmarks of search servers and sandboxes report (docs/sources.md §7).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Literal, overload

import numpy as np

from rlsim.sim.csv_inputs import read_seconds_csv
from rlsim.sim.sampling import lognormal_sampler, uniform_sampler

# Latency distributions are the scenario's (rlsim.sim.scenario.schema *Seconds models), told apart by
# their `kind` tag: costs/ stays below the scenario package and never imports it.
LatencyDistribution = Any

Outcome = Literal["ok", "failed", "timeout"]


@cache
def _empirical_seconds(path: str, column: str) -> np.ndarray:
    """One read per (file, column) per process: a long run draws thousands of latencies from it."""
    values = np.asarray(read_seconds_csv(path, column), dtype=float)  # the parser validation used
    values.setflags(write=False)  # shared by every caller through the cache
    return values


@overload
def sample_latency(dist: LatencyDistribution, rng: np.random.Generator, n: None = None) -> float: ...
@overload
def sample_latency(dist: LatencyDistribution, rng: np.random.Generator, n: int) -> np.ndarray: ...


def sample_latency(dist: LatencyDistribution, rng: np.random.Generator, n: int | None = None) -> float | np.ndarray:
    """Seconds of one attempt (a float when n is None, else an array of n); fixed latencies draw nothing.

    One attempt is drawn as a scalar, which consumes the generator exactly as a size-1 array does
    (same value, same stream) at a fraction of the cost: an agentic run draws one per tool attempt.
    """
    if n is None:
        return _one_latency(dist, rng)
    if dist.kind == "fixed":
        x = np.full(n, float(dist.value))
    elif dist.kind == "uniform":
        if dist.min > dist.max:
            raise ValueError(f"uniform latency: min ({dist.min}) must be <= max ({dist.max})")
        x = rng.uniform(dist.min, dist.max, size=n)
    elif dist.kind == "lognormal":
        x = rng.lognormal(math.log(dist.median), dist.sigma, size=n)
        if dist.max is not None:
            x = np.minimum(x, dist.max)
    elif dist.kind == "empirical":
        x = rng.choice(_empirical_seconds(dist.path, dist.column), size=n, replace=True)
    else:
        raise TypeError(f"unknown latency distribution {type(dist).__name__}")
    return x


def _one_latency(dist: LatencyDistribution, rng: np.random.Generator) -> float:
    return latency_sampler(dist)(rng)


def latency_sampler(dist: LatencyDistribution) -> Callable[[np.random.Generator], float]:
    """`sample_latency(dist, .)` with the distribution read once: for a tool drawing one per attempt.

    Each returned function consumes the generator exactly as `sample_latency(dist, rng)` does.
    The uniform and lognormal laws are numpy's, bit for bit (rlsim/sim/sampling.py).
    """
    kind = dist.kind
    if kind == "fixed":
        value = float(dist.value)
        return lambda rng: value
    if kind == "uniform":
        if dist.min > dist.max:
            raise ValueError(f"uniform latency: min ({dist.min}) must be <= max ({dist.max})")
        return uniform_sampler(dist.min, dist.max)
    if kind == "lognormal":
        return lognormal_sampler(math.log(dist.median), dist.sigma, dist.max)
    if kind == "empirical":
        path, column = dist.path, dist.column
        return lambda rng: float(rng.choice(_empirical_seconds(path, column)))
    raise TypeError(f"unknown latency distribution {type(dist).__name__}")


def attempt_outcome(latency_s: float, failed: bool, timeout_s: float | None) -> tuple[Outcome, float]:
    """(outcome, seconds the attempt holds its slot): a timeout cuts the attempt off at timeout_s.

    A timed-out attempt never gets to report its own failure, so the timeout wins over `failed`.
    """
    if timeout_s is not None and latency_s > timeout_s:
        return "timeout", timeout_s
    return ("failed" if failed else "ok"), latency_s


def backoff_delay(backoff_s: Sequence[float], attempt: int) -> float:
    """Wait after the `attempt`-th failed attempt (k >= 1 waits backoff_s[k-1], the last value repeating).

    ASearcher's search tool retries after 1, 2, 4 s; an empty list retries at once, attempt 0 waits 0.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    if attempt == 0 or not backoff_s:
        return 0.0
    return float(backoff_s[min(attempt, len(backoff_s)) - 1])


def worst_case_call_s(latency_cap_s: float, timeout_s: float | None, max_attempts: int,
                      backoff_s: Sequence[float]) -> float:
    """Longest a call can take without queueing (every attempt cut off or at its cap, every backoff waited)."""
    attempt_s = latency_cap_s if timeout_s is None else min(latency_cap_s, timeout_s)
    return max_attempts * attempt_s + sum(backoff_delay(backoff_s, k) for k in range(1, max_attempts))
