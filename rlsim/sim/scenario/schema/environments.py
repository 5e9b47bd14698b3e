"""Scenario sections `environments` and `workload`: tools, environment pools, agents."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from rlsim.sim.limits import (  # sane upper bounds, shared with the file readers
    MAX_ATTEMPTS,
    MAX_PROMPTS_PER_STEP,
    MAX_SIGMA,
    MAX_TOKENS,
)
from rlsim.sim.scenario.schema.base import Strict
from rlsim.sim.scenario.schema.lengths import LengthDistribution, LengthTrace, _refuse_per_group

# ---------------------------------------------------------------- environments and tools (agentic RL)


class FixedSeconds(Strict):
    _seconds_fields: ClassVar[tuple[str, ...]] = ("value",)
    kind: Literal["fixed"]
    value: float = Field(ge=0)


class UniformSeconds(Strict):
    _seconds_fields: ClassVar[tuple[str, ...]] = ("min", "max")
    kind: Literal["uniform"]
    min: float = Field(ge=0)
    max: float = Field(ge=0)

    @model_validator(mode="after")
    def _order(self) -> UniformSeconds:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class LognormalSeconds(Strict):
    """Lognormal latency given by its median (what benchmarks report) and sigma, optionally capped."""

    _seconds_fields: ClassVar[tuple[str, ...]] = ("median", "max")

    kind: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(ge=0, le=MAX_SIGMA)
    max: float | None = Field(default=None, gt=0)


class EmpiricalSeconds(Strict):
    """Latencies resampled from a CSV column (path relative to the scenario file)."""

    kind: Literal["empirical"]
    path: str
    column: str = "seconds"


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
            _refuse_per_group(self.agent.turns, "agent.turns")
            _refuse_per_group(self.agent.tokens_per_turn, "agent.tokens_per_turn")
        return self


