"""Scenario sections `environments` and `workload`: tools, environment pools, agents."""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable
from functools import cache
from statistics import NormalDist
from typing import Annotated, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from rlsim.sim.csv_inputs import read_seconds_csv
from rlsim.sim.limits import (  # sane upper bounds, shared with the file readers
    MAX_ATTEMPTS,
    MAX_PROMPTS_PER_STEP,
    MAX_SIGMA,
    MAX_TOKENS,
)
from rlsim.sim.sampling import lognormal_sampler, uniform_sampler
from rlsim.sim.scenario.schema.base import Strict
from rlsim.sim.scenario.schema.lengths import LengthDistribution, LengthTrace, _refuse_per_group

# ---------------------------------------------------------------- environments and tools (agentic RL)

LatencyDraw = Callable[[np.random.Generator], float]


class LatencyDistributionBase(Strict):
    """What every latency distribution does (seconds of one tool attempt): draw, bound, average.

    `sample(rng, n)` draws n latencies (numpy's array calls), `sampler()` a function drawing one from the
    same stream as `sample(rng, 1)[0]` (rlsim/sim/sampling.py, numpy's laws bit for bit); `minimum()`,
    `maximum()` (inf when unbounded), `expectation()` and `p_above(t)` = P(latency > t). An empirical
    law reads its file (CsvInputError when it cannot). `shape_fields`: the numbers that set the law's shape
    (not its cap); `centre_fields`: those that move its centre, scaled together (`rlsim sensitivity` varies these).
    """

    shape_fields: ClassVar[tuple[str, ...]] = ()
    centre_fields: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n latencies (seconds)."""

    @abstractmethod
    def sampler(self) -> LatencyDraw:
        """One latency per call, consuming the generator exactly as `sample(rng, 1)` does."""

    @abstractmethod
    def minimum(self) -> float:
        """The shortest latency a draw can take."""

    @abstractmethod
    def maximum(self) -> float:
        """The longest latency a draw can take (inf when the law has no cap)."""

    @abstractmethod
    def expectation(self) -> float:
        """The mean latency of a draw."""

    @abstractmethod
    def p_above(self, t: float) -> float:
        """P(latency > t)."""


class FixedSeconds(LatencyDistributionBase):
    seconds_fields: ClassVar[tuple[str, ...]] = ("value",)
    shape_fields: ClassVar[tuple[str, ...]] = ("value",)
    centre_fields: ClassVar[tuple[str, ...]] = ("value",)
    kind: Literal["fixed"]
    value: float = Field(ge=0)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, float(self.value))

    def sampler(self) -> LatencyDraw:
        value = float(self.value)
        return lambda rng: value

    def minimum(self) -> float:
        return self.value

    def maximum(self) -> float:
        return self.value

    def expectation(self) -> float:
        return self.value

    def p_above(self, t: float) -> float:
        return float(self.value > t)


class UniformSeconds(LatencyDistributionBase):
    seconds_fields: ClassVar[tuple[str, ...]] = ("min", "max")
    shape_fields: ClassVar[tuple[str, ...]] = ("min", "max")  # a uniform law's bounds are its shape
    centre_fields: ClassVar[tuple[str, ...]] = ("min", "max")
    kind: Literal["uniform"]
    min: float = Field(ge=0)
    max: float = Field(ge=0)

    @model_validator(mode="after")
    def _order(self) -> UniformSeconds:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.min, self.max, size=n)

    def sampler(self) -> LatencyDraw:
        return uniform_sampler(self.min, self.max)

    def minimum(self) -> float:
        return self.min

    def maximum(self) -> float:
        return self.max

    def expectation(self) -> float:
        return (self.min + self.max) / 2.0

    def p_above(self, t: float) -> float:
        if self.max <= t or self.min > t:
            return float(self.min > t)
        return (self.max - t) / (self.max - self.min)


class LognormalSeconds(LatencyDistributionBase):
    """Lognormal latency given by its median (what benchmarks report) and sigma, optionally capped."""

    seconds_fields: ClassVar[tuple[str, ...]] = ("median", "max")
    shape_fields: ClassVar[tuple[str, ...]] = ("median", "sigma")
    centre_fields: ClassVar[tuple[str, ...]] = ("median",)

    kind: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(ge=0, le=MAX_SIGMA)
    max: float | None = Field(default=None, gt=0)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        x = rng.lognormal(math.log(self.median), self.sigma, size=n)
        return x if self.max is None else np.minimum(x, self.max)

    def sampler(self) -> LatencyDraw:
        return lognormal_sampler(math.log(self.median), self.sigma, self.max)

    def _point(self) -> float:
        """The one value a sigma-0 law takes."""
        return min(self.median, self.max or self.median)

    def minimum(self) -> float:
        return 0.0 if self.sigma > 0 else self._point()

    def maximum(self) -> float:
        if self.sigma == 0:
            return self._point()
        return math.inf if self.max is None else self.max

    def expectation(self) -> float:
        """E[min(X, max)]: the lognormal's mean exp(mu + sigma^2 / 2), less what the cap cuts off."""
        if self.sigma == 0:
            return self._point()
        mu, s = math.log(self.median), self.sigma
        full = math.exp(mu + s * s / 2.0)
        if self.max is None:
            return full
        b = (math.log(self.max) - mu) / s
        below = NormalDist().cdf(b)
        return full * NormalDist().cdf(b - s) + self.max * (1.0 - below)

    def p_above(self, t: float) -> float:
        if (self.max is not None and self.max <= t) or self.sigma == 0:
            return float(self._point() > t)
        z = (math.log(t) - math.log(self.median)) / self.sigma
        return 0.5 * math.erfc(z / math.sqrt(2.0))


class EmpiricalSeconds(LatencyDistributionBase):
    """Latencies resampled from a CSV column (path relative to the scenario file)."""

    kind: Literal["empirical"]
    path: str
    column: str = "seconds"

    def seconds(self) -> np.ndarray:
        """The column as validated (rlsim/sim/csv_inputs.py), read once per process; CsvInputError if bad."""
        return _empirical_seconds(self.path, self.column)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(self.seconds(), size=n, replace=True)

    def sampler(self) -> LatencyDraw:
        values = self.seconds()
        return lambda rng: float(rng.choice(values))

    def minimum(self) -> float:
        return float(self.seconds().min())

    def maximum(self) -> float:
        return float(self.seconds().max())

    def expectation(self) -> float:
        return float(self.seconds().mean())

    def p_above(self, t: float) -> float:
        values = self.seconds()
        return float(np.count_nonzero(values > t)) / len(values)


@cache
def _empirical_seconds(path: str, column: str) -> np.ndarray:
    """One read per (file, column) per process: a long run draws thousands of latencies from it."""
    values = np.asarray(read_seconds_csv(path, column), dtype=float)  # the parser validation used
    values.setflags(write=False)  # shared by every caller through the cache
    return values


LatencyDistribution = Annotated[
    FixedSeconds | UniformSeconds | LognormalSeconds | EmpiricalSeconds, Field(discriminator="kind")
]


class EnvPoolSpec(Strict):
    """CPU-side environment workers (search clients, sandboxes, game servers): a real queue."""

    concurrency: int = Field(
        gt=0, le=MAX_PROMPTS_PER_STEP,
        description="Calls served at once; more wait in a FIFO queue"
    )
    cold_start_s: float = Field(default=0.0, ge=0, description="Start/reset cost of an environment per trajectory")


class ToolSpec(Strict):
    """One tool: its latency, what it returns, and how it fails (ASearcher: 30 s timeout, 4 attempts, 1/2/4 s)."""

    pool: str = Field(description="Environment pool (key of environments.pools) that serves the calls")
    latency: LatencyDistribution
    observation_tokens: LengthDistribution = Field(description="Tokens the call appends to the context")
    timeout_s: float | None = Field(default=None, gt=0, description="An attempt longer than this is cut off")
    max_attempts: int = Field(
        default=1, gt=0, le=MAX_ATTEMPTS,
        description="Attempts before the call (and trajectory) fails"
    )
    backoff_s: list[float] = Field(default_factory=list, description="Wait before retry k (last value repeats)")
    failure_prob: float = Field(default=0.0, ge=0, le=1, description="Chance an attempt fails outright")

    @model_validator(mode="after")
    def _iid_tokens(self) -> ToolSpec:
        _refuse_per_group(self.observation_tokens, "observation_tokens")
        return self


class EnvironmentsSpec(Strict):
    pools: dict[str, EnvPoolSpec] = Field(default_factory=dict)
    tools: dict[str, ToolSpec] = Field(default_factory=dict)


class AgentSpec(Strict):
    """Multi-turn trajectories: generate, call a tool, append its observation, generate again."""

    turns: LengthDistribution = Field(description="Generation turns per trajectory (up to 128)")
    tokens_per_turn: LengthDistribution = Field(description="Tokens generated per turn")
    tool_mix: dict[str, float] = Field(description="Probability of each tool after a turn (normalised)")
    max_context_tokens: int = Field(
        default=32768, gt=0, le=MAX_TOKENS, description="The trajectory ends when its context is full"
    )


class WorkloadSpec(Strict):
    prompt_length: LengthDistribution | None = Field(default=None, description="Required unless length_trace is set")
    response_length: LengthDistribution | None = Field(
        default=None, description="Single-turn response length (multi-turn: see agent); required unless length_trace"
    )
    length_trace: LengthTrace | None = Field(
        default=None, description="Replay (prompt, response) length pairs from a CSV instead of the two distributions"
    )
    agent: AgentSpec | None = Field(default=None, description="Multi-turn agentic trajectories with tool calls")

    @model_validator(mode="after")
    def _lengths(self) -> WorkloadSpec:
        given = [k for k in ("prompt_length", "response_length") if getattr(self, k) is not None]
        if self.length_trace is not None:
            if given:
                raise ValueError(
                    f"length_trace sets prompt and response lengths as pairs: remove {' and '.join(given)}"
                )
            if self.agent is not None:
                raise ValueError("length_trace replays single-turn pairs; it cannot drive agent trajectories")
        else:
            missing = [k for k in ("prompt_length", "response_length") if k not in given]
            if missing:
                raise ValueError(f"{' and '.join(missing)} required (or a length_trace)")
        _refuse_per_group(self.prompt_length, "prompt_length")
        if self.agent is not None:
            _refuse_per_group(self.agent.turns, "agent.turns", drift=True)
            _refuse_per_group(self.agent.tokens_per_turn, "agent.tokens_per_turn", drift=True)
        return self


