"""Scenario section `workload`, length distributions of prompts and responses.

Each distribution is a class that draws its own lengths and knows its own bounds and average, so
no caller switches on its type:

- `sample(rng, n)`: n i.i.d. integer lengths >= 1 (numpy int64), with the run's generator
- `sampler()`: a function drawing one length, the value `sample(rng, 1)[0]` gives from the same draws
- `sample_groups(rng, n_groups, group_size, step)`: lengths of n_groups prompt groups at RL step `step`
  (only the lognormal's shape options make this differ from `sample`)
- `minimum()`, `maximum()`, `expectation()`: the smallest and largest length a draw can take and the
  mean of a draw (an empirical law reads its file: CsvInputError when it cannot)
- `shape_fields`, `centre_fields`: the numbers that set the law's shape (caps and lower bounds are not
  among them) and those that move its centre, moved together (`rlsim sensitivity` varies these)

Array draws are numpy's own calls; scalar draws go through rlsim/sim/sampling.py.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable
from functools import cache
from statistics import NormalDist
from typing import Annotated, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from rlsim.sim.csv_inputs import read_lengths_csv
from rlsim.sim.limits import (  # sane upper bounds, shared with the file readers
    MAX_SIGMA,
    MAX_TOKENS,
)
from rlsim.sim.sampling import lognormal_sampler
from rlsim.sim.scenario.schema.base import Strict

LengthDraw = Callable[[np.random.Generator], int]

# ---------------------------------------------------------------- workload: length distributions


class LengthDistributionBase(Strict):
    """What every length distribution does: draw lengths, bound them, average them."""

    shape_fields: ClassVar[tuple[str, ...]] = ()  # numbers that shape a draw (not its caps nor lower bounds)
    centre_fields: ClassVar[tuple[str, ...]] = ()  # numbers that move its centre, scaled together

    @abstractmethod
    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n i.i.d. integer lengths >= 1."""

    def sampler(self, step: int = 0) -> LengthDraw:
        """One length per call, from the same draws as `sample_groups(rng, 1, 1, step)`: for a caller drawing many
        from one law (at RL step `step`: a lognormal's mean_schedule).

        A multi-turn agent draws one per turn and per tool call, where the array machinery costs more
        than the draw; scalar draws of numpy's Generator consume its stream exactly as size-1 arrays do.
        """
        return lambda rng: int(self.sample_groups(rng, 1, 1, step)[0])

    def sample_groups(self, rng: np.random.Generator, n_groups: int, group_size: int, step: int) -> np.ndarray:
        """n_groups * group_size response lengths (groups contiguous) at RL step `step`."""
        return self.sample(rng, n_groups * group_size)

    @abstractmethod
    def minimum(self) -> int:
        """The smallest length a draw can take."""

    @abstractmethod
    def maximum(self) -> int:
        """The largest length a draw can take (for memory checks); a lognormal's over its stages."""

    @abstractmethod
    def expectation(self) -> float:
        """The mean of a draw (a lognormal's at step 0, clipped like its draws)."""

    @property
    def per_group(self) -> bool:
        """Whether the law depends on the prompt group or the step (only workload.response_length takes that)."""
        return False


class FixedLength(LengthDistributionBase):
    shape_fields: ClassVar[tuple[str, ...]] = ("value",)
    centre_fields: ClassVar[tuple[str, ...]] = ("value",)
    kind: Literal["fixed"]
    value: int = Field(gt=0, le=MAX_TOKENS)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)

    def sampler(self, step: int = 0) -> LengthDraw:
        value = int(self.value)
        return lambda rng: value

    def minimum(self) -> int:
        return self.value

    def maximum(self) -> int:
        return self.value

    def expectation(self) -> float:
        return float(self.value)


class UniformLength(LengthDistributionBase):
    shape_fields: ClassVar[tuple[str, ...]] = ("min", "max")  # a uniform law's bounds are its shape
    centre_fields: ClassVar[tuple[str, ...]] = ("min", "max")
    kind: Literal["uniform"]
    min: int = Field(gt=0, le=MAX_TOKENS)
    max: int = Field(gt=0, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _order(self) -> UniformLength:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.min, self.max, size=n, endpoint=True, dtype=np.int64)

    def sampler(self, step: int = 0) -> LengthDraw:
        low, high = self.min, self.max
        return lambda rng: int(rng.integers(low, high, endpoint=True, dtype=np.int64))

    def minimum(self) -> int:
        return self.min

    def maximum(self) -> int:
        return self.max

    def expectation(self) -> float:
        return (self.min + self.max) / 2.0


class LengthStage(Strict):
    """From `from_step` on, a lognormal's mean (and cap) change: one stage of a context-length schedule."""

    from_step: int = Field(ge=0, description="First RL step (async: policy version) of the stage")
    mean: float = Field(gt=0, le=MAX_TOKENS, description="Mean length (tokens) at from_step")
    to_mean: float | None = Field(
        default=None, gt=0, le=MAX_TOKENS, description="Mean (tokens) reached linearly after `steps`, held"
    )
    steps: int | None = Field(default=None, gt=0, description="Length of the linear ramp to to_mean (steps)")
    max: int | None = Field(
        default=None, gt=0, le=MAX_TOKENS, description="Cap (max_tokens) in this stage; null: the lognormal's max"
    )

    @model_validator(mode="after")
    def _ramp(self) -> LengthStage:
        if (self.to_mean is None) != (self.steps is None):
            raise ValueError("to_mean and steps go together (a linear ramp from mean to to_mean over steps)")
        return self


class LognormalLength(LengthDistributionBase):
    """Lognormal with the given mean (of the untruncated law), clipped to [min, max] like max_tokens.

    The optional shape keys (docs/scenarios.md, Response lengths: shaping the tail) default to the plain law.
    """

    shape_fields: ClassVar[tuple[str, ...]] = (
        "mean", "sigma", "truncated_fraction", "group_correlation", "wrong_fraction", "wrong_length_ratio")
    centre_fields: ClassVar[tuple[str, ...]] = ("mean",)

    kind: Literal["lognormal"]
    mean: float = Field(gt=0, le=MAX_TOKENS)
    sigma: float = Field(gt=0, le=MAX_SIGMA, description="Std-dev of log(length): the tail weight")
    min: int = Field(default=1, gt=0, le=MAX_TOKENS)
    max: int = Field(gt=0, le=MAX_TOKENS, description="Truncation (generation max_tokens)")
    truncated_fraction: float | None = Field(
        default=None, ge=0, lt=1,
        description="Share of lengths exactly at max (hit max_tokens); the rest is drawn below max. Null: clip at max",
    )
    group_correlation: float = Field(
        default=0.0, ge=0, le=1, description="Correlation of log-lengths within a prompt group (shared difficulty)"
    )
    wrong_fraction: float = Field(default=0.0, ge=0, le=1, description="Share of answers that are wrong")
    wrong_length_ratio: float = Field(
        default=1.0, gt=0, description="Mean length of wrong / right answers (the overall mean stays `mean`)"
    )
    mean_schedule: list[LengthStage] | None = Field(
        default=None, description="Stages that replace mean (and max) from a step on; before the first: mean, max"
    )

    @model_validator(mode="after")
    def _order(self) -> LognormalLength:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        stages = self.mean_schedule or []
        for i, stage in enumerate(stages):
            if i and stage.from_step <= stages[i - 1].from_step:
                raise ValueError(f"mean_schedule: from_step must increase, got {stages[i - 1].from_step} "
                                 f"then {stage.from_step}")
            if stage.max is not None and stage.max < self.min:
                raise ValueError(f"mean_schedule[{i}]: max ({stage.max}) must be >= min ({self.min})")
        if self.truncated_fraction is not None and min(self.caps()) <= self.min:
            raise ValueError(f"truncated_fraction needs max > min (the body lies in [min, max)), got min {self.min}")
        return self

    def caps(self) -> list[int]:
        """Every cap the distribution uses (its max and the stages' maxima)."""
        return [self.max] + [s.max for s in self.mean_schedule or [] if s.max is not None]

    @property
    def per_group(self) -> bool:
        return self.group_correlation > 0 or self.wrong_fraction > 0 or self.mean_schedule is not None

    @property
    def plain(self) -> bool:
        """No shape option that changes a single draw (a mean_schedule only moves mean and cap)."""
        return self.truncated_fraction is None and self.group_correlation == 0 and self.wrong_fraction == 0

    def stage_at(self, step: int) -> tuple[float, int]:
        """(mean, cap) at RL step `step` under the mean_schedule (linear ramps within a stage)."""
        mean, cap = self.mean, self.max
        for stage in self.mean_schedule or []:
            if stage.from_step > step:
                break
            mean = stage.mean
            if stage.to_mean is not None:
                mean += (stage.to_mean - stage.mean) * min(1.0, (step - stage.from_step) / stage.steps)
            cap = stage.max if stage.max is not None else self.max
        return mean, cap

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Lognormal: `mean` is the untruncated mean, clipped at max like max_tokens."""
        return self.sample_shaped(rng, n, 1, 0)[0]

    def sample_groups(self, rng: np.random.Generator, n_groups: int, group_size: int, step: int) -> np.ndarray:
        return self.sample_shaped(rng, n_groups, group_size, step)[0]

    def sampler(self, step: int = 0) -> LengthDraw:
        if not self.plain:
            return super().sampler(step)
        mean, cap = self.stage_at(step)
        lognormal, low = lognormal_sampler(_plain_mu(mean, self.sigma), self.sigma), self.min
        # np.clip(np.rint(x), min, cap): rint and round both go half-even. The draw is numpy's own lognormal.
        # min(cap, max(low, n)) is written out: the builtins' argument parsing costs more than the comparisons.

        def draw(rng: np.random.Generator) -> int:
            n = round(lognormal(rng))
            if n < low:
                n = low
            return n if n < cap else cap

        return draw

    def minimum(self) -> int:
        return self.min

    def maximum(self) -> int:
        return max(self.caps())

    def _mus(self, mean: float) -> tuple[float, float]:
        """(mu of right answers, mu of wrong ones): solved so that the mixture's untruncated mean is `mean`."""
        w, s = self.wrong_fraction, self.sigma
        mu_right = math.log(mean / (1.0 - w + w * self.wrong_length_ratio)) - s**2 / 2.0
        return mu_right, mu_right + math.log(self.wrong_length_ratio)

    def expectation(self) -> float:
        """The mean of a draw at step 0: the clipped mixture, or f at the cap and the rest below it.

        Rounding to whole tokens is left out (it moves the mean by well under a token).
        """
        mean, cap = self.stage_at(0)
        s, w, f = self.sigma, self.wrong_fraction, self.truncated_fraction
        mu_right, mu_wrong = self._mus(mean)
        parts = [(p, mu) for p, mu in ((1.0 - w, mu_right), (w, mu_wrong)) if p > 0]
        if f is None:
            return sum(p * _clipped_mean(mu, s, self.min, cap) for p, mu in parts)
        t = _cap_threshold(mu_right, mu_wrong, s, w, f)
        return f * cap + sum(p * _phi_scalar((t - mu) / s) * _clipped_mean_below(mu, s, self.min, cap)
                             for p, mu in parts)

    def sample_shaped(
        self, rng: np.random.Generator, n_groups: int, group_size: int, step: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, wrong): log L = mu_i + sigma * (sqrt(rho) z_prompt + sqrt(1 - rho) z_sample).

        mu_i is the right or wrong answers' (their means solved so that the mixture's mean is `mean`).
        With truncated_fraction f, the top f of log-lengths (over the mixture) sit at the cap and the rest
        keep their rank below the cap: the body is each component's lognormal conditioned to < cap, and a
        group of hard prompts is truncated together.
        """
        n = n_groups * group_size
        mean, cap = self.stage_at(step)
        s = self.sigma
        rho, w, f = self.group_correlation, self.wrong_fraction, self.truncated_fraction
        wrong = np.zeros(n, dtype=bool)
        if f is None and rho == 0 and w == 0:  # the plain law: today's draw, bit for bit
            x = rng.lognormal(np.log(mean) - s**2 / 2.0, s, size=n)
            return np.clip(np.rint(x), self.min, cap).astype(np.int64), wrong
        z = rng.standard_normal(n) if rho < 1 else np.zeros(n)
        if rho > 0:
            z_prompt = rng.standard_normal(n_groups)
            z = math.sqrt(rho) * np.repeat(z_prompt, group_size) + math.sqrt(1.0 - rho) * z
        mu_right, mu_wrong = self._mus(mean)
        mu = np.full(n, mu_right)
        if w > 0:
            wrong = rng.random(n) < w
            mu[wrong] = mu_wrong
        y = mu + s * z
        if f is None:
            return np.clip(np.rint(np.exp(y)), self.min, cap).astype(np.int64), wrong
        t = _cap_threshold(mu_right, mu_wrong, s, w, f)
        hit = y >= t
        # Below the threshold: the same rank within [0, P(< cap)) of the component's own law. Draws at or above
        # it take the cap; their rank (0/0 where the threshold sits far below the law) is never used.
        below = _phi((t - mu) / s)
        u = np.divide(_phi((y - mu) / s), below, out=np.zeros_like(y), where=below > 0) * _phi((math.log(cap) - mu) / s)
        body = np.exp(mu + s * _phi_inv(u))
        body = np.clip(np.rint(body), self.min, cap - 1)
        return np.where(hit, cap, body).astype(np.int64), wrong


class EmpiricalLength(LengthDistributionBase):
    """Lengths resampled from a CSV column (path relative to the scenario file)."""

    kind: Literal["empirical"]
    path: str
    column: str = "length"
    max: int | None = Field(default=None, gt=0, le=MAX_TOKENS)

    def lengths(self) -> np.ndarray:
        """The column as validated (rlsim/sim/csv_inputs.py: the same parser, read once); CsvInputError if bad."""
        return _empirical_lengths(self.path, self.column)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        x = rng.choice(self.lengths(), size=n, replace=True)
        if self.max is not None:
            x = np.minimum(x, self.max)
        return np.maximum(x, 1).astype(np.int64)

    def _drawable(self) -> np.ndarray:
        x = self.lengths()
        return np.minimum(x, self.max) if self.max is not None else x

    def minimum(self) -> int:
        return int(self._drawable().min())

    def maximum(self) -> int:
        return int(self._drawable().max())

    def expectation(self) -> float:
        return float(self._drawable().mean())


LengthDistribution = Annotated[
    FixedLength | UniformLength | LognormalLength | EmpiricalLength, Field(discriminator="kind")
]


class LengthTrace(Strict):
    """Prompt and response lengths replayed as pairs from a CSV (path relative to the scenario file).

    Columns `prompt_len,response_len`, or Vidur's trace format `arrived_at,num_prefill_tokens,num_decode_tokens`
    (arrival times ignored). Each sample takes one row.
    """

    path: str
    order: Literal["sequential", "shuffle"] = Field(
        default="sequential", description="sequential: rows in order, cycling; shuffle: rows drawn at random (seeded)"
    )


def _refuse_per_group(dist: LengthDistributionBase | None, where: str, drift: bool = False) -> None:
    """Refuse the options that only workload.response_length takes; `drift`: a mean_schedule is allowed (agent
    turns and tokens per turn drift over a run as responses do)."""
    if dist is None or not dist.per_group:
        return
    if drift and dist.group_correlation == 0 and dist.wrong_fraction == 0:
        return
    only = "group_correlation and wrong_fraction" if drift else "group_correlation, wrong_fraction and mean_schedule"
    raise ValueError(f"{where}: {only} shape workload.response_length only")


# ---------------------------------------------------------------- the shaped lognormal's arithmetic

_N = NormalDist()
_cdf = np.frompyfunc(_N.cdf, 1, 1)
_ppf = np.frompyfunc(_N.inv_cdf, 1, 1)


def _phi(x) -> np.ndarray:
    """Standard normal CDF, elementwise (stdlib: no scipy dependency)."""
    return _cdf(np.asarray(x, dtype=float)).astype(float)


def _phi_inv(p) -> np.ndarray:
    return _ppf(np.clip(np.asarray(p, dtype=float), 1e-300, 1.0 - 1e-16)).astype(float)


def _phi_scalar(x: float) -> float:
    return _N.cdf(x) if math.isfinite(x) else float(x > 0)


@cache
def _empirical_lengths(path: str, column: str) -> np.ndarray:
    values = np.asarray(read_lengths_csv(path, column), dtype=np.int64)
    values.setflags(write=False)  # shared by every caller through the cache
    return values


@cache
def _plain_mu(mean: float, sigma: float) -> float:
    return np.log(mean) - sigma**2 / 2.0  # the expression sample_shaped uses, so the bits agree


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


def _clipped_mean(mu: float, s: float, lo: float, hi: float) -> float:
    """E[min(max(X, lo), hi)] for X = exp(mu + s Z)."""
    a, b = (math.log(lo) - mu) / s, (math.log(hi) - mu) / s
    middle = math.exp(mu + s * s / 2.0) * (_phi_scalar(b - s) - _phi_scalar(a - s))
    return lo * _phi_scalar(a) + middle + hi * (1.0 - _phi_scalar(b))


def _clipped_mean_below(mu: float, s: float, lo: float, hi: float) -> float:
    """E[max(X, lo) | X < hi] for X = exp(mu + s Z): the body of a law with a truncated fraction at hi."""
    a, b = (math.log(lo) - mu) / s, (math.log(hi) - mu) / s
    inside = _phi_scalar(b)
    if inside <= 0:
        return float(lo)
    middle = math.exp(mu + s * s / 2.0) * (_phi_scalar(b - s) - _phi_scalar(a - s))
    return (lo * _phi_scalar(a) + middle) / inside
