"""The planning space: what `rlsim plan` may vary around a scenario, and the limits a plan must respect.

A space file is YAML read with `yaml.safe_load`; every model forbids unknown keys, and every problem
becomes one `space.yaml: dotted.path: what is wrong` line (exit code 2), like a scenario's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from rlsim.sim.api import Problem, RoleName, ScenarioError, Strict, read_yaml, validation_problems
from rlsim.sim.inputs import PLACEMENT_ALIASES, SCHEDULE_ALIASES, canonical_name

Layout = Literal["colocate", "split", "standalone", "partitions", "disaggregated"]
Offload = Literal["none", "optimizer", "all"]
Objective = Literal["throughput", "cost", "time-to-steps"]


def _known_hardware(name: str) -> str:
    """A hardware profile that loads: an unknown name is one line listing the known profiles."""
    from rlsim.sim.api import load_profile
    from rlsim.sim.inputs import canonical_profile

    try:
        load_profile(name)
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None
    except Exception as exc:  # a broken profile file
        raise ValueError(f"invalid hardware profile {name!r}: {' '.join(str(exc).split())[:200]}") from None
    return name if name.endswith((".yaml", ".yml")) else canonical_profile(name) or name



def seconds_per_step(summary: dict) -> float:
    """A run summary's mean simulated seconds per measured step (the deadline constraint's unit)."""
    return float(summary["simulated_seconds"]) / max(1, int(summary["steps"]))

class GpuOption(Strict):
    """One hardware type and the cluster sizes to try with it."""

    hardware: str = Field(description="Hardware profile name (see `rlsim profiles`)")
    counts: list[int] = Field(min_length=1, description="Total GPUs to try, e.g. [16, 32]")
    gpus_per_node: int = Field(default=8, gt=0)
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0, description="Default: the profile's price")

    _hardware = field_validator("hardware")(classmethod(lambda cls, v: _known_hardware(v)))

    @model_validator(mode="after")
    def _whole_nodes(self) -> GpuOption:
        bad = [c for c in self.counts if c <= 0 or (c > self.gpus_per_node and c % self.gpus_per_node)]
        if bad:
            raise ValueError(f"counts must be whole {self.gpus_per_node}-GPU nodes (or fewer GPUs than a node), "
                             f"got {bad}")
        return self


class PoolChoice(Strict):
    """One side of a disaggregated mix: its hardware and the GPU counts to try."""

    hardware: str
    gpus: list[int] = Field(min_length=1)
    gpus_per_node: int = Field(default=8, gt=0)
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0)

    _hardware = field_validator("hardware")(classmethod(lambda cls, v: _known_hardware(v)))


class MixOption(Strict):
    """Generation and training pools sized separately, possibly of different hardware (heterogeneous)."""

    generation: PoolChoice
    training: PoolChoice


class ScheduleOption(Strict):
    """A schedule kind, the layouts to try it on, and schedule fields to vary (a list = alternatives)."""

    kind: Literal["hybridflow", "one-step-off", "fully-async", "roll", "verl-v1"]
    layouts: list[Layout] | None = Field(
        default=None,
        description="colocate / split / standalone (HybridFlow shortcuts), partitions (every grouping of the "
        "model roles into colocated sets: 15 for PPO), disaggregated (generation pool + training pool). "
        "Default: colocate for hybridflow, disaggregated for the asynchronous kinds",
    )
    role_pools: dict[RoleName, Literal["generation", "training"]] | None = Field(
        default=None, description="disaggregated: the pool of each role (default: rollout on generation, rest on "
        "training)",
    )
    set: dict[str, Any] = Field(
        default_factory=dict, description="Schedule fields, e.g. {max_head_offpolicyness: [1, 2, 4]}; a list "
        "gives alternatives (wrap a list value in another list)",
    )

    @field_validator("kind", mode="before")
    @classmethod
    def _kind_alias(cls, value):
        return canonical_name(value, SCHEDULE_ALIASES)

    @field_validator("layouts", mode="before")
    @classmethod
    def _layout_aliases(cls, value):
        return [canonical_name(v, PLACEMENT_ALIASES) for v in value] if isinstance(value, list) else value

    @model_validator(mode="after")
    def _layouts(self) -> ScheduleOption:
        if self.kind != "hybridflow" and self.layouts is not None:  # split = rollout apart, for async kinds
            self.layouts = list(dict.fromkeys("disaggregated" if n == "split" else n for n in self.layouts))
        if self.layouts is None:
            self.layouts = ["colocate"] if self.kind == "hybridflow" else ["disaggregated"]
        if self.kind != "hybridflow" and set(self.layouts) != {"disaggregated"}:
            raise ValueError(f"{self.kind} runs rollout on GPUs of its own: layouts must be [disaggregated]")
        if "kind" in self.set or "placement" in self.set:
            raise ValueError("set: kind and placement are chosen by `kind` and `layouts`")
        return self

    @property
    def axes(self) -> dict[str, list[Any]]:
        return {k: (v if isinstance(v, list) else [v]) for k, v in self.set.items()}


class TrainConfig(Strict):
    """Training parallelism and offload of the model roles (tp is capped at a role's GPUs, as HybridFlow does)."""

    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    ep: int | None = Field(
        default=None, gt=0, description="Expert parallel degree of the actor and the other model roles whose model "
        "is MoE (must divide tp x dp and num_experts; default: each role's own from the scenario)",
    )
    offload: Offload = "none"

    @property
    def label(self) -> str:
        ep = "" if self.ep is None else f"-ep{self.ep}"
        return f"tp{self.tp}-pp{self.pp}{ep}-{self.offload}"


class ParallelOptions(Strict):
    generation_tp: list[int] | None = Field(default=None, description="Rollout TP sizes (default: the scenario's)")
    generation_ep: list[int] | None = Field(
        default=None, description="Rollout expert-parallel sizes of an MoE model, tried with every generation TP "
        "(each must divide the TP and num_experts; default: the scenario's)",
    )
    training: list[TrainConfig] | None = Field(
        default=None, description="Training configs in order of preference (default: the scenario's own)"
    )
    training_search: Literal["first-fit", "all"] = Field(
        default="first-fit",
        description="first-fit: per layout, the first config in which some generation TP fits (HybridFlow's "
        "auto-mapping); all: every config is a candidate",
    )
    micro_batch_tokens: list[int] | None = Field(
        default=None, description="ppo_max_token_len_per_gpu of the model roles (default: the scenario's)"
    )


class Constraints(Strict):
    max_staleness: float | None = Field(default=None, ge=0, description="staleness_max of a plan, trainer steps")
    deadline_hours: float | None = Field(default=None, gt=0, description="Wall-clock hours for deadline_steps")
    deadline_steps: int | None = Field(default=None, gt=0)
    min_throughput_tokens_per_s: float | None = Field(default=None, gt=0)
    max_gpus: int | None = Field(default=None, gt=0)
    budget_usd_per_hour: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _deadline(self) -> Constraints:
        if (self.deadline_hours is None) != (self.deadline_steps is None):
            raise ValueError("deadline_hours and deadline_steps go together (hours for that many steps)")
        return self


class SearchOptions(Strict):
    rungs: list[int] = Field(default=[1, 3], min_length=1, description="Measured steps per successive-halving rung")
    keep: float = Field(default=0.5, gt=0, le=1, description="Share of a rung's candidates the next rung runs")
    top_k: int = Field(default=3, gt=0, description="Recommendations; also the bound pruning's k")
    batch: int = Field(default=8, gt=0, description="Candidates per evaluation batch (fixed: same plan on any "
                       "backend)")
    exhaustive_limit: int = Field(default=300, gt=0, description="Above this many candidates, sample instead")
    trials: int = Field(default=120, gt=0, description="Candidates the sampler evaluates in a large space")

    @model_validator(mode="after")
    def _rungs(self) -> SearchOptions:
        if any(b <= a for a, b in zip(self.rungs, self.rungs[1:], strict=False)) or min(self.rungs) < 1:
            raise ValueError(f"rungs must be increasing step counts >= 1, got {self.rungs}")
        return self


class Space(Strict):
    description: str = ""
    gpus: list[GpuOption] = Field(default_factory=list)
    mixes: list[MixOption] = Field(default_factory=list)
    generation_fraction: list[float] = Field(
        default=[0.5], description="Share of a `gpus` option given to generation in disaggregated layouts"
    )
    schedules: list[ScheduleOption] = Field(min_length=1)
    parallel: ParallelOptions = Field(default_factory=ParallelOptions)
    constraints: Constraints = Field(default_factory=Constraints)
    search: SearchOptions = Field(default_factory=SearchOptions)

    @model_validator(mode="after")
    def _something_to_run_on(self) -> Space:
        if not self.gpus and not self.mixes:
            raise ValueError("give gpus (hardware options) or mixes (generation + training pools)")
        bad = [f for f in self.generation_fraction if not 0 < f < 1]
        if bad:
            raise ValueError(f"generation_fraction values must lie in (0, 1), got {bad}")
        return self


def parse_space(data: Any, source: str = "<space>") -> Space:
    """Validate a space mapping; ScenarioError with one problem per mistake."""
    if not isinstance(data, dict):
        raise ScenarioError(source, [Problem("", "expected a mapping at the top level")])
    try:
        return Space.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(source, validation_problems(exc, data, root=Space)) from None


def load_space(path: str | Path) -> Space:
    return parse_space(read_yaml(path), str(path))
