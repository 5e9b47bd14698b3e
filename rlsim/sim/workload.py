"""Sampling prompt and response lengths from the scenario's distributions, with the run's generator.

Every schedule draws a step's (or a group's) lengths through `LengthSampler` / `sample_group_lengths`:
`n_groups` prompts of `group_size` answers each, groups contiguous. Response lengths can carry the
shape of real RL generation (docs/scenarios.md, Response lengths: shaping the tail): a mass of truncated answers at
the cap, a per-prompt difficulty shared by a group, wrong answers longer than right ones, a mean that
drifts over steps, or (prompt, response) pairs replayed from a trace. Without those options the draws
are exactly the plain i.i.d. ones, in the same order, so existing scenarios keep their results.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from statistics import NormalDist

import numpy as np

from rlsim.sim.csv_inputs import read_length_trace, read_lengths_csv
from rlsim.sim.sampling import lognormal_sampler
from rlsim.sim.scenario.schema import (
    EmpiricalLength,
    FixedLength,
    LengthDistribution,
    LognormalLength,
    UniformLength,
    WorkloadSpec,
)

_N = NormalDist()
_cdf = np.frompyfunc(_N.cdf, 1, 1)
_ppf = np.frompyfunc(_N.inv_cdf, 1, 1)


def _phi(x) -> np.ndarray:
    """Standard normal CDF, elementwise (stdlib: no scipy dependency)."""
    return _cdf(np.asarray(x, dtype=float)).astype(float)


def _phi_inv(p) -> np.ndarray:
    return _ppf(np.clip(np.asarray(p, dtype=float), 1e-300, 1.0 - 1e-16)).astype(float)


@cache
def _empirical_lengths(path: str, column: str) -> np.ndarray:
    """The column as validated (rlsim/sim/scenario/csv_inputs.py: the same parser, read once)."""
    return np.asarray(read_lengths_csv(path, column), dtype=np.int64)


@cache
def _trace_pairs(path: str) -> tuple[np.ndarray, np.ndarray]:
    prompts, responses = read_length_trace(path)
    return np.asarray(prompts, dtype=np.int64), np.asarray(responses, dtype=np.int64)


def sample_lengths(dist: LengthDistribution, n: int, rng: np.random.Generator) -> np.ndarray:
    """n i.i.d. integer lengths >= 1. Lognormal: `mean` is the untruncated mean, clipped at max like max_tokens."""
    if isinstance(dist, FixedLength):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.min, dist.max, size=n, endpoint=True, dtype=np.int64)
    if isinstance(dist, LognormalLength):
        return sample_lognormal(dist, n, 1, 0, rng)[0]
    if isinstance(dist, EmpiricalLength):
        values = _empirical_lengths(dist.path, dist.column)
        x = rng.choice(values, size=n, replace=True)
        if dist.max is not None:
            x = np.minimum(x, dist.max)
        return np.maximum(x, 1).astype(np.int64)
    raise TypeError(f"unknown length distribution {type(dist).__name__}")


def sample_length(dist: LengthDistribution, rng: np.random.Generator) -> int:
    """One length: the value `sample_lengths(dist, 1, rng)[0]` gives, from the same draws, without arrays."""
    return length_sampler(dist)(rng)


def length_sampler(dist: LengthDistribution) -> Callable[[np.random.Generator], int]:
    """`sample_length(dist, .)` with the distribution read once: for a caller drawing many lengths from one law.

    A multi-turn agent draws one per turn and per tool call, where the array machinery costs more
    than the draw; scalar draws of numpy's Generator consume its stream exactly as size-1 arrays do.
    """
    kind = dist.kind  # the tag, cheaper than isinstance on pydantic classes
    if kind == "lognormal" and _plain_law(dist):
        mean, cap = stage_at(dist, 0) if dist.mean_schedule else (dist.mean, dist.max)
        lognormal, low = lognormal_sampler(_plain_mu(mean, dist.sigma), dist.sigma), dist.min
        # np.clip(np.rint(x), min, cap): rint and round both go half-even. The draw is numpy's own lognormal.
        # min(cap, max(low, n)) is written out: the builtins' argument parsing costs more than the comparisons.
        def draw(rng: np.random.Generator) -> int:
            n = round(lognormal(rng))
            if n < low:
                n = low
            return n if n < cap else cap

        return draw
    if kind == "uniform":
        low, high = dist.min, dist.max
        return lambda rng: int(rng.integers(low, high, endpoint=True, dtype=np.int64))
    if kind == "fixed":
        value = int(dist.value)
        return lambda rng: value
    return lambda rng: int(sample_lengths(dist, 1, rng)[0])


def _plain_law(dist: LognormalLength) -> bool:
    return dist.truncated_fraction is None and dist.group_correlation == 0 and dist.wrong_fraction == 0


@cache
def _plain_mu(mean: float, sigma: float) -> float:
    return np.log(mean) - sigma**2 / 2.0  # the expression sample_lognormal uses, so the bits agree


def sample_response_lengths(
    dist: LengthDistribution, n_groups: int, group_size: int, step: int, rng: np.random.Generator
) -> np.ndarray:
    """n_groups * group_size response lengths (groups contiguous) at RL step `step`."""
    if isinstance(dist, LognormalLength):
        return sample_lognormal(dist, n_groups, group_size, step, rng)[0]
    return sample_lengths(dist, n_groups * group_size, rng)


def sample_group_lengths(
    workload: WorkloadSpec, n_groups: int, group_size: int, step: int, rng: np.random.Generator, offset: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, response) lengths of n_groups prompts x group_size answers, groups contiguous.

    Distributions: one prompt length per group, repeated; the prompt lengths are drawn before the
    responses (the order every schedule always used). A length trace gives each sample one row:
    sequential from row `offset` (cycling) or rows drawn with `rng` (order: shuffle).
    """
    n = n_groups * group_size
    trace = workload.length_trace
    if trace is not None:
        prompts, responses = _trace_pairs(trace.path)
        if trace.order == "sequential":
            idx = (offset + np.arange(n)) % len(prompts)
        else:
            idx = rng.integers(0, len(prompts), size=n)
        return prompts[idx], responses[idx]
    prompt = np.repeat(sample_lengths(workload.prompt_length, n_groups, rng), group_size)
    return prompt, sample_response_lengths(workload.response_length, n_groups, group_size, step, rng)


class LengthSampler:
    """A run's length source: `sample_group_lengths` with the trace position kept between calls."""

    def __init__(self, workload: WorkloadSpec, rng: np.random.Generator):
        self.workload = workload
        self.rng = rng
        self.cursor = 0  # next trace row (sequential replay)

    def __call__(self, n_groups: int, group_size: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        out = sample_group_lengths(self.workload, n_groups, group_size, step, self.rng, self.cursor)
        self.cursor += n_groups * group_size
        return out


# ---------------------------------------------------------------- the shaped lognormal


def stage_at(dist: LognormalLength, step: int) -> tuple[float, int]:
    """(mean, cap) of a lognormal at RL step `step` under its mean_schedule (linear ramps within a stage)."""
    mean, cap = dist.mean, dist.max
    for stage in dist.mean_schedule or []:
        if stage.from_step > step:
            break
        mean = stage.mean
        if stage.to_mean is not None:
            mean += (stage.to_mean - stage.mean) * min(1.0, (step - stage.from_step) / stage.steps)
        cap = stage.max if stage.max is not None else dist.max
    return mean, cap


def sample_lognormal(
    dist: LognormalLength, n_groups: int, group_size: int, step: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, wrong): lengths in log space: log L = mu_i + sigma * (sqrt(rho) z_prompt + sqrt(1 - rho) z_sample).

    mu_i is the right or wrong answers' (their means solved so that the mixture's mean is `mean`).
    With truncated_fraction f, the top f of log-lengths (over the mixture) sit at the cap and the rest
    keep their rank below the cap: the body is each component's lognormal conditioned to < cap, and a
    group of hard prompts is truncated together.
    """
    n = n_groups * group_size
    mean, cap = stage_at(dist, step)
    s = dist.sigma
    rho, w, f = dist.group_correlation, dist.wrong_fraction, dist.truncated_fraction
    wrong = np.zeros(n, dtype=bool)
    if f is None and rho == 0 and w == 0:  # the plain law: today's draw, bit for bit
        x = rng.lognormal(np.log(mean) - s**2 / 2.0, s, size=n)
        return np.clip(np.rint(x), dist.min, cap).astype(np.int64), wrong
    z = rng.standard_normal(n) if rho < 1 else np.zeros(n)
    if rho > 0:
        z_prompt = rng.standard_normal(n_groups)
        z = math.sqrt(rho) * np.repeat(z_prompt, group_size) + math.sqrt(1.0 - rho) * z
    mu_right = math.log(mean / (1.0 - w + w * dist.wrong_length_ratio)) - s**2 / 2.0
    mu_wrong = mu_right + math.log(dist.wrong_length_ratio)
    mu = np.full(n, mu_right)
    if w > 0:
        wrong = rng.random(n) < w
        mu[wrong] = mu_wrong
    y = mu + s * z
    if f is None:
        return np.clip(np.rint(np.exp(y)), dist.min, cap).astype(np.int64), wrong
    t = _cap_threshold(mu_right, mu_wrong, s, w, f)
    hit = y >= t
    # Below the threshold: the same rank within [0, P(< cap)) of the component's own law. Draws at or above
    # it take the cap; their rank (0/0 where the threshold sits far below the law) is never used.
    below = _phi((t - mu) / s)
    u = np.divide(_phi((y - mu) / s), below, out=np.zeros_like(y), where=below > 0) * _phi((math.log(cap) - mu) / s)
    body = np.exp(mu + s * _phi_inv(u))
    body = np.clip(np.rint(body), dist.min, cap - 1)
    return np.where(hit, cap, body).astype(np.int64), wrong


@cache
def _cap_threshold(mu_right: float, mu_wrong: float, s: float, w: float, f: float) -> float:
    """The log-length t with P(log L >= t) = f over the right/wrong mixture (inf for f = 0)."""
    if f == 0:
        return math.inf
    if w in (0.0, 1.0):
        q = _N.inv_cdf(1.0 - f) if 1.0 - f < 1.0 else -_N.inv_cdf(f)  # 1 - f rounds to 1.0 below f ~ 1e-16
        return (mu_wrong if w == 1.0 else mu_right) + s * q

    def above(t: float) -> float:
        return (1.0 - w) * (1.0 - _N.cdf((t - mu_right) / s)) + w * (1.0 - _N.cdf((t - mu_wrong) / s))

    lo, hi = min(mu_right, mu_wrong) - 12 * s, max(mu_right, mu_wrong) + 12 * s
    for _ in range(200):
        mid = (lo + hi) / 2
        if above(mid) > f:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# ---------------------------------------------------------------- maxima (memory checks)


def max_length(dist: LengthDistribution) -> int:
    """The largest length a distribution can produce (for memory checks); a lognormal's over its stages."""
    if isinstance(dist, FixedLength):
        return dist.value
    if isinstance(dist, UniformLength):
        return dist.max
    if isinstance(dist, LognormalLength):
        return max(dist.caps())
    if isinstance(dist, EmpiricalLength):
        m = int(_empirical_lengths(dist.path, dist.column).max())
        return min(m, dist.max) if dist.max is not None else m
    raise TypeError(f"unknown length distribution {type(dist).__name__}")


def max_lengths(workload: WorkloadSpec) -> tuple[int, int]:
    """The largest (prompt, response) lengths a workload produces: the trace's, or its distributions'."""
    if workload.length_trace is not None:
        prompts, responses = _trace_pairs(workload.length_trace.path)
        return int(prompts.max()), int(responses.max())
    return max_length(workload.prompt_length), max_length(workload.response_length)
