"""Scenario section `workload`, length distributions of prompts and responses."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rlsim.sim.limits import (  # sane upper bounds, shared with the file readers
    MAX_SIGMA,
    MAX_TOKENS,
)
from rlsim.sim.scenario.schema.base import Strict

# ---------------------------------------------------------------- workload: length distributions


class FixedLength(Strict):
    kind: Literal["fixed"]
    value: int = Field(gt=0, le=MAX_TOKENS)


class UniformLength(Strict):
    kind: Literal["uniform"]
    min: int = Field(gt=0, le=MAX_TOKENS)
    max: int = Field(gt=0, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _order(self) -> UniformLength:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


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


class LognormalLength(Strict):
    """Lognormal with the given mean (of the untruncated law), clipped to [min, max] like max_tokens.

    The optional shape keys (docs/scenarios.md, Response lengths: shaping the tail) default to the plain law.
    """

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
        """Whether the law depends on the prompt group or the step (only workload.response_length takes that)."""
        return self.group_correlation > 0 or self.wrong_fraction > 0 or self.mean_schedule is not None


class EmpiricalLength(Strict):
    """Lengths resampled from a CSV column (path relative to the scenario file)."""

    kind: Literal["empirical"]
    path: str
    column: str = "length"
    max: int | None = Field(default=None, gt=0, le=MAX_TOKENS)


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


def _refuse_per_group(dist: object, where: str) -> None:
    if isinstance(dist, LognormalLength) and dist.per_group:
        raise ValueError(
            f"{where}: group_correlation, wrong_fraction and mean_schedule shape workload.response_length only"
        )


