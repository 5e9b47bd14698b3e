"""numpy's scalar draws, written out once: the one place rlsim re-implements a distribution of numpy's Generator.

A multi-turn agent draws a length per turn and a latency per tool call; numpy's scalar methods spend more
time parsing their arguments than drawing. Each sampler here is built once per law and returns exactly
what numpy's own method returns from the same generator state, consuming the stream exactly as it does
(tests/test_sampling.py checks bit for bit against numpy, with hypothesis):

- `lognormal_sampler(mu, sigma)`  ==  `rng.lognormal(mu, sigma)`  (numpy: exp(mu + sigma * z), one standard normal)
- `uniform_sampler(low, high)`    ==  `rng.uniform(low, high)`    (numpy: low + (high - low) * u, one double)
- `weighted_index_sampler(w)`     ==  `rng.choice(len(w), p=w / w.sum())`  (one double, searched in the
  normalised cumulative weights, side="right")

Array draws (`size=n`) stay numpy's own calls.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from math import exp

import numpy as np

Sampler = Callable[[np.random.Generator], float]


def lognormal_sampler(mu: float, sigma: float, cap: float | None = None) -> Sampler:
    """`rng.lognormal(mu, sigma)`, then min(x, cap) when a cap is given."""
    mu, sigma = float(mu), float(sigma)
    if cap is None:
        return lambda rng: exp(mu + sigma * rng.standard_normal())
    cap = float(cap)

    def capped(rng: np.random.Generator) -> float:
        x = exp(mu + sigma * rng.standard_normal())
        return cap if cap < x else x  # min(x, cap) without the builtin's argument parsing

    return capped


def uniform_sampler(low: float, high: float) -> Sampler:
    """`rng.uniform(low, high)`."""
    low, width = float(low), float(high) - float(low)
    return lambda rng: low + width * rng.random()


def weighted_index_sampler(weights: Sequence[float]) -> Callable[[np.random.Generator], int]:
    """`rng.choice(len(weights), p=weights / sum(weights))`: an index by weight (weights >= 0, sum > 0)."""
    w = np.asarray(weights, dtype=float)
    cdf = (w / w.sum()).cumsum()
    cdf /= cdf[-1]
    table = tuple(cdf.tolist())
    return lambda rng: bisect_right(table, rng.random())
