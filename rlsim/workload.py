"""Sampling prompt and response lengths from the scenario's distributions, with the run's generator."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from rlsim.scenario.schema import (
    EmpiricalLength,
    FixedLength,
    LengthDistribution,
    LognormalLength,
    UniformLength,
)


@cache
def _empirical_lengths(path: str, column: str) -> np.ndarray:
    values = pd.read_csv(Path(path))[column].to_numpy()
    return values.astype(np.int64)


def sample_lengths(dist: LengthDistribution, n: int, rng: np.random.Generator) -> np.ndarray:
    """n integer lengths >= 1. Lognormal: `mean` is the untruncated mean, clipped at max like max_tokens."""
    if isinstance(dist, FixedLength):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.min, dist.max, size=n, endpoint=True, dtype=np.int64)
    if isinstance(dist, LognormalLength):
        mu = np.log(dist.mean) - dist.sigma**2 / 2.0
        x = rng.lognormal(mu, dist.sigma, size=n)
        return np.clip(np.rint(x), dist.min, dist.max).astype(np.int64)
    if isinstance(dist, EmpiricalLength):
        values = _empirical_lengths(dist.path, dist.column)
        x = rng.choice(values, size=n, replace=True)
        if dist.max is not None:
            x = np.minimum(x, dist.max)
        return np.maximum(x, 1).astype(np.int64)
    raise TypeError(f"unknown length distribution {type(dist).__name__}")


def max_length(dist: LengthDistribution) -> int:
    """The largest length a distribution can produce (for memory checks)."""
    if isinstance(dist, FixedLength):
        return dist.value
    if isinstance(dist, UniformLength | LognormalLength):
        return dist.max
    if isinstance(dist, EmpiricalLength):
        m = int(_empirical_lengths(dist.path, dist.column).max())
        return min(m, dist.max) if dist.max is not None else m
    raise TypeError(f"unknown length distribution {type(dist).__name__}")
