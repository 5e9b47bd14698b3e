"""The scenario language: pydantic models of a cluster, its models, roles, algorithm, workload and schedule.

Every model forbids unknown keys: a typo must be an error, never a silent default. Knob names
mirror verl / vLLM / ROLL / AReaL where those systems have one (`gpu_memory_utilization`,
`max_num_seqs`, `rollout.n` ~ `samples_per_prompt`, `data.train_batch_size` ~ `prompts_per_step`).
"""

# size: the scenario language is one pydantic tree (one JSON schema, one error path per field); split
# across modules its cross-references (pools, models, roles) would need forward imports everywhere.

from __future__ import annotations

import re
from functools import lru_cache
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails

from rlsim.limits import (  # sane upper bounds, shared with the file readers
    MAX_ATTEMPTS,
    MAX_EPOCHS,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    MAX_NUMBER,
    MAX_PROMPTS_PER_STEP,
    MAX_SAMPLES_PER_PROMPT,
    MAX_SECONDS,
    MAX_SIGMA,
    MAX_STEPS,
    MAX_TOKENS,
)
from rlsim.model_shapes import ModelShape, resolve_preset
from rlsim.scenario.calibration import CalibrationSpec


class Strict(BaseModel):
    """Unknown keys are errors; every float is finite (NaN or inf would run, then poison every result).

    A number without a bound of its own is at most MAX_NUMBER, and a duration in seconds (a field named
    `*_s` or `*_s_*`, or listed in `_seconds_fields`) at most MAX_SECONDS: 1e18 somewhere is a typo
    that would otherwise allocate exabytes or simulate for ages.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    _seconds_fields: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _sane_numbers(self) -> Strict:
        errors = []
        for name, field in type(self).model_fields.items():
            if any(getattr(m, k, None) is not None for m in field.metadata for k in ("le", "lt")):
                continue
            seconds = name in self._seconds_fields or name.endswith("_s") or "_s_" in name
            limit = MAX_SECONDS if seconds else MAX_NUMBER
            value = getattr(self, name)
            items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else None
            for key, v in items if items is not None else [(None, value)]:
                if isinstance(v, int | float) and not isinstance(v, bool) and abs(v) > limit:
                    loc = (name,) if key is None else (name, key)
                    errors.append(InitErrorDetails(type="less_than_equal", loc=loc, input=v, ctx={"le": limit}))
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self


# ---------------------------------------------------------------- cluster


_BOUND_CHECKS = {
    "gt": lambda v, b: v > b,
    "ge": lambda v, b: v >= b,
    "lt": lambda v, b: v < b,
    "le": lambda v, b: v <= b,
}
_BOUND_TYPES = {"gt": "greater_than", "ge": "greater_than_equal", "lt": "less_than", "le": "less_than_equal"}


@lru_cache(maxsize=1)
def profile_override_fields() -> tuple[str, ...]:
    """The hardware profile fields a pool's `profile_overrides` may set: its numbers, except the price
    (the pool's own `price_usd_per_gpu_hour` sets that)."""
    import typing

    from rlsim.hardware import HardwareProfile

    return tuple(
        name
        for name, field in HardwareProfile.model_fields.items()
        if float in (field.annotation, *typing.get_args(field.annotation)) and name != "price_usd_per_gpu_hour"
    )


@lru_cache(maxsize=256)
def _pool_profile(hardware: str, nic_gbit_per_s: float | None, overrides: tuple[tuple[str, float], ...]):
    """A pool's effective hardware profile (see PoolSpec.profile); the values were checked by PoolSpec."""
    from rlsim.hardware import load_profile

    hw = load_profile(hardware)
    update = dict(overrides)
    if nic_gbit_per_s is not None:
        update["nic_gbit_per_s"] = nic_gbit_per_s
    if update:
        sources = {**hw.sources, **{key: "scenario pool override" for key in update}}
        hw = hw.model_copy(update={**update, "sources": sources})
    return hw


class PoolSpec(Strict):
    """A homogeneous group of nodes; heterogeneous clusters are several pools."""

    hardware: str = Field(description="Hardware profile name (see `rlsim profiles`) or path to a YAML")
    nodes: int = Field(default=1, gt=0, le=MAX_NODES)
    gpus_per_node: int = Field(default=8, gt=0, le=MAX_GPUS_PER_NODE)
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0, description="Overrides the profile's")
    nic_gbit_per_s: float | None = Field(
        default=None, gt=0, description="Inter-node bandwidth per GPU of this cluster, overriding the profile's"
    )
    profile_overrides: dict[str, float] = Field(
        default_factory=dict,
        description="Hardware profile numbers replaced for this pool, e.g. {train_mfu: 0.35, decode_eta_mem: 0.6} "
        "(any numeric profile field but the price; the profile's own bounds apply)",
    )

    @model_validator(mode="after")
    def _check_profile_overrides(self) -> PoolSpec:
        """Unknown or non-numeric field names and out-of-bounds values: one error each, at its own key."""
        if not self.profile_overrides:
            return self
        from pydantic import ValidationError
        from pydantic_core import InitErrorDetails

        from rlsim.hardware import HardwareProfile

        known = profile_override_fields()
        errors: list[InitErrorDetails] = []
        for key, value in self.profile_overrides.items():
            loc = ("profile_overrides", key)
            if key not in known:
                why = (
                    "the price is set on the pool: use price_usd_per_gpu_hour"
                    if key == "price_usd_per_gpu_hour"
                    else f"not a hardware profile number; known: {', '.join(known)}"
                )
                errors.append(InitErrorDetails(type="value_error", loc=loc, input=key, ctx={"error": ValueError(why)}))
                continue
            if key == "nic_gbit_per_s" and self.nic_gbit_per_s is not None:
                why = "also given as the pool's nic_gbit_per_s: give it once"
                errors.append(InitErrorDetails(type="value_error", loc=loc, input=key, ctx={"error": ValueError(why)}))
                continue
            for bound in HardwareProfile.model_fields[key].metadata:
                for kind, ok in _BOUND_CHECKS.items():
                    limit = getattr(bound, kind, None)
                    if limit is not None and not ok(value, limit):
                        kind_type = _BOUND_TYPES[kind]
                        errors.append(InitErrorDetails(type=kind_type, loc=loc, input=value, ctx={kind: limit}))
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    def profile(self):
        """The hardware profile with this pool's own network (a testbed's NICs differ from the datasheet)
        and its `profile_overrides`; each overridden field's source says "scenario pool override".

        Cached: pools with the same hardware and overrides share one (frozen) profile object.
        """
        return _pool_profile(self.hardware, self.nic_gbit_per_s, tuple(sorted(self.profile_overrides.items())))

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


class ClusterSpec(Strict):
    pools: dict[str, PoolSpec] = Field(min_length=1)


# ---------------------------------------------------------------- models


class ModelSpec(ModelShape):
    """A model shape; `preset: qwen2.5-7b` fills every dimension, explicit keys override."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data):
        if isinstance(data, dict) and data.get("preset") is not None:
            try:
                base = resolve_preset(str(data["preset"]))
            except KeyError as exc:
                raise ValueError(exc.args[0]) from None
            return {**base, **data}
        return data

    @model_validator(mode="after")
    def _head_dim(self) -> ModelSpec:
        """hidden // heads is the head size unless head_dim is given: it must not round to 0."""
        if self.head_dim is None and self.hidden < self.heads:
            raise ValueError(
                f"hidden ({self.hidden}) must be >= heads ({self.heads}): the head size is hidden // heads "
                "(or give head_dim)"
            )
        return self


# ---------------------------------------------------------------- roles

RoleName = Literal["actor", "rollout", "reference", "critic", "reward"]


class ParallelSpec(Strict):
    """Per-replica model parallelism; data parallelism = gpus / (tp * pp) unless given."""

    tp: int = Field(default=1, gt=0, le=MAX_NODES * MAX_GPUS_PER_NODE, description="Tensor parallel degree")
    pp: int = Field(default=1, gt=0, le=MAX_NODES * MAX_GPUS_PER_NODE, description="Pipeline parallel degree")
    dp: int | None = Field(
        default=None, gt=0, le=MAX_NODES * MAX_GPUS_PER_NODE,
        description="Data parallel degree (default: derived)"
    )


class EngineSpec(Strict):
    """Inference-engine settings (vLLM / SGLang names)."""

    gpu_memory_utilization: float = Field(
        default=0.5, gt=0, le=1, description="Fraction of total GPU memory the engine may use (verl default 0.5)"
    )
    max_num_seqs: int = Field(default=256, gt=0, le=MAX_TOKENS, description="Maximum running sequences per engine")
    max_num_batched_tokens: int = Field(
        default=8192, gt=0, le=MAX_TOKENS, description="Prefill tokens per engine step"
    )
    chunked_prefill: bool = Field(default=False, description="Piggyback prefill chunks on decode steps")
    enable_prefix_caching: bool = Field(default=True, description="Keep finished turns' KV for the next turn")
    activation_reserve_gb: float = Field(
        default=1.0, ge=0, description="Memory per GPU kept free for activations/CUDA graphs, GB (assumed)"
    )
    kind: Literal["generic", "vllm-0.3", "vllm-0.6", "vllm-v1", "sglang-0.4", "trtllm"] = Field(
        default="generic",
        description="Engine family and version: selects its per-step cost, host cost per running sequence "
        "and TP all-reduce latency (rlsim/costs/engine_kinds.py; `rlsim engines` lists them). `generic` "
        "uses the hardware profile's calibrated per-step cost",
    )
    cuda_graphs: bool = Field(
        default=True, description="Decode with CUDA graphs (verl rollout enforce_eager=False); off adds launch cost"
    )
    step_overhead_ms: float | None = Field(
        default=None, ge=0, description="Per-step fixed cost, ms (default: the engine kind's)"
    )
    host_overhead_per_seq_us: float | None = Field(
        default=None,
        ge=0,
        description="Host (CPU) time per running sequence per decode step not overlapped with the GPU, us: "
        "scheduling, input preparation, sampler bookkeeping (default: the engine kind's; DistServe's c*B term)",
    )
    allreduce_latency_us: float | None = Field(
        default=None, ge=0, description="Latency of one TP all-reduce at decode sizes, us (default: the engine kind's)"
    )

    def overheads(self, hw):
        """This engine's per-step costs on hardware `hw` (seconds)."""
        from rlsim.costs.engine_kinds import engine_overheads

        return engine_overheads(
            self.kind, hw, self.cuda_graphs, self.step_overhead_ms, self.host_overhead_per_seq_us,
            self.allreduce_latency_us,
        )


class TrainSpec(Strict):
    """How a model role trains and runs forward passes (verl actor/critic/ref knob names)."""

    ppo_max_token_len_per_gpu: int = Field(
        default=16384, gt=0, le=MAX_TOKENS,
        description="Dynamic-batching token budget of one micro-batch per GPU (verl)",
    )
    balance_batch: bool = Field(
        default=True, description="Equalise tokens across DP ranks (verl trainer.balance_batch)"
    )
    sharding: Literal["megatron", "fsdp"] = Field(
        default="megatron",
        description="megatron: distributed optimizer (optimizer states sharded over DP); fsdp: params, grads "
        "and optimizer states all sharded",
    )
    param_offload: bool = Field(default=False, description="Keep params in host memory outside this role's phases")
    grad_offload: bool = Field(default=False, description="Keep grads in host memory outside training")
    optimizer_offload: bool = Field(default=False, description="Keep optimizer states in host memory outside training")
    activation_checkpointing: bool = True
    overlap_grad_reduce: bool = Field(default=True, description="Overlap the DP gradient all-reduce with backward")
    grad_reduce_dtype: Literal["fp32", "bf16"] = Field(
        default="fp32",
        description="dtype of the DP gradient reduction: Megatron-LM forces fp32 for bf16 training "
        "(accumulate_allreduce_grads_in_fp32); verl's FSDP mixed precision defaults reduce_dtype to fp32",
    )

    @property
    def grad_comm_bytes_per_param(self) -> float:
        """DP traffic per parameter per update, as the bytes of an equivalent ring all-reduce.

        An all-reduce moves 2x its size; Megatron's distributed optimizer reduce-scatters the gradients
        and all-gathers the bf16 params ((g + 2) / 2); FSDP all-gathers the params twice (forward and
        backward) and reduce-scatters the gradients ((g + 4) / 2).
        """
        grad = 4.0 if self.grad_reduce_dtype == "fp32" else 2.0
        return (grad + 2.0) / 2.0 if self.sharding == "megatron" else (grad + 4.0) / 2.0


class RoleSpec(Strict):
    pool: str
    model: str = Field(description="Key into `models`")
    gpus: int | None = Field(
        default=None, gt=0, le=MAX_NODES * MAX_GPUS_PER_NODE,
        description="GPUs of the pool this role uses (default: all)"
    )
    gpu_offset: int = Field(
        default=0,
        ge=0,
        description="First GPU of the pool this role uses: it holds GPUs [gpu_offset, gpu_offset + gpus) (ROLL's "
        "device_mapping). Roles on overlapping GPUs take turns; roles on disjoint GPUs of one pool run concurrently",
    )
    parallel: ParallelSpec = Field(default_factory=ParallelSpec)
    engine: EngineSpec | None = Field(
        default=None, description="Required for the rollout role; on the reward role: an LLM judge served by engines"
    )
    train: TrainSpec = Field(default_factory=TrainSpec, description="Training / forward settings")


# ---------------------------------------------------------------- algorithm


class AlgorithmSpec(Strict):
    kind: Literal["generate", "ppo", "grpo", "dapo", "remax", "rloo"] = "grpo"
    prompts_per_step: int = Field(
        default=512, gt=0, le=MAX_PROMPTS_PER_STEP, description="verl data.train_batch_size"
    )
    samples_per_prompt: int = Field(
        default=1, gt=0, le=MAX_SAMPLES_PER_PROMPT, description="verl actor_rollout_ref.rollout.n"
    )
    mini_batches: int = Field(default=1, gt=0, le=MAX_EPOCHS, description="Optimizer updates per epoch")
    epochs: int = Field(default=1, gt=0, le=MAX_EPOCHS, description="PPO epochs over each batch")
    rule_reward_s_per_sample: float = Field(
        default=0.002, ge=0,
        description="CPU seconds of a rule-based reward per sample, used when there is no reward role (assumed)",
    )
    rule_reward_workers: int = Field(
        default=16, gt=0, le=MAX_PROMPTS_PER_STEP,
        description="Parallel CPU reward workers (assumed)"
    )
    judge_output_tokens: int = Field(
        default=64, gt=0, le=MAX_TOKENS,
        description="Tokens an LLM judge generates per sample (reward role with an engine; assumed)"
    )
    launch_reward_fn_async: bool = Field(
        default=False,
        description="verl: compute the rule reward concurrently with the forward passes (default: in the driver, "
        "before them)",
    )

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt


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

    The optional shape keys (README, Response lengths: shaping the tail) default to the plain law.
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


# ---------------------------------------------------------------- schedule


class GenerationOnlySpec(Strict):
    """Each step pushes one batch of prompts through the rollout engines; no training."""

    kind: Literal["generation-only"]
    dispatch: Literal["round-robin", "chunked", "least-loaded"] = Field(
        default="chunked", description="How samples are split across engines (verl: chunked by DP rank)"
    )


class HybridFlowSpec(Strict):
    """verl / HybridFlow synchronous RL: one step is generate -> forwards -> updates -> weights.

    `placement` is a shortcut that carves one hardware pool into resource pools (verl's
    resource_pool_spec): `colocate` puts every role on all its GPUs; `split` puts actor, rollout and
    reference on one part and critic and reward on the other (NeMo-Aligner style); `standalone`
    gives the actor (with its rollout engines), critic, reference and reward a part each (OpenRLHF
    style). `custom` uses the roles' own `pool` fields: roles on one pool time-share it.
    """

    kind: Literal["hybridflow"]
    placement: Literal["colocate", "split", "standalone", "custom"] = "colocate"
    pool: str | None = Field(default=None, description="Hardware pool the shortcut carves (default: the only pool)")
    placement_gpus: dict[str, int] | None = Field(
        default=None,
        description="GPUs per colocated set, keyed by its first role (split: actor, critic; standalone: actor, "
        "critic, reference, reward); default: an even split",
    )
    reshard: Literal["3d-hybrid-engine", "hybridflow-v", "naive"] = Field(
        default="3d-hybrid-engine", description="Train->generate weight reshard method (HybridFlow Table 2)"
    )
    switch_overhead_s: float = Field(
        default=0.45, ge=0,
        description="Fixed colocated switch cost per step: engine wake-up/KV re-allocation and gc "
        "(verl: ~450 ms = 150 ms load + 295 ms gc, docs/sources.md §4)",
    )
    weight_sync_bucket_mb: float = Field(default=2048, gt=0, description="Weight-sync bucket size (verl: 2048 MB)")
    dispatch: Literal["round-robin", "chunked", "least-loaded"] = "chunked"
    judge_scoring: Literal["batch", "sample"] = Field(
        default="batch",
        description="LLM judge: `batch` scores the whole batch after generation (verl); `sample` scores each "
        "response as soon as it finishes, on judge GPUs apart from the rollout's (ROLL's sample-level scheduling)",
    )


class OneStepOffSpec(Strict):
    """verl one-step-off: generation of step k+1 overlaps training of step k on disjoint pools.

    The rollout role must sit on its own pool (placement is always `custom`). Weights reach the
    engines by a bucketed NCCL broadcast after every update (`timing_s/sync_rollout_weights`).
    """

    kind: Literal["one-step-off"]
    placement: Literal["custom"] = "custom"
    weight_sync_bucket_mb: float = Field(default=2048, gt=0, description="Weight-sync bucket size (verl: 2048 MB)")
    dispatch: Literal["round-robin", "chunked", "least-loaded"] = "chunked"
    reshard: Literal["3d-hybrid-engine", "hybridflow-v", "naive"] = "3d-hybrid-engine"
    switch_overhead_s: float = Field(default=0.0, ge=0, description="Unused: rollout never shares GPUs here")


class FullyAsyncSpec(Strict):
    """Fully asynchronous RL (AReaL / ASearcher, verl fully_async): rollout never waits for training.

    Two admission rules, chosen by which staleness knob is set:

    - AReaL (default, `max_head_offpolicyness` eta, in policy versions): a new prompt group starts
      only while capacity = min(max_concurrent_rollouts - running, (eta + version + 1) * B -
      (accepted + running)) > 0, B = `consumer_batch_size` groups x `trigger_parameter_sync_step`;
      the trainer takes finished groups oldest first and trains them whatever their age: the bound acts
      at admission only (AReaL 1.0.4 areal/infra/staleness_manager.py and workflow_executor.wait_results,
      docs/sources.md §7). `drop_stale: true` adds a drop of samples older than eta (an rlsim option).
    - verl fully_async (`staleness_threshold` s, a fraction): per weight version the rollouter starts
      groups while staleness_samples < (1 + s) x trigger_parameter_sync_step x require_batches x
      ppo_mini_batch_size, where staleness_samples counts the groups started since the last sync plus
      those in flight or queued at the sync, and pauses while that many finished groups wait in the
      queue; stale samples are never dropped (verl 0.9.1
      verl/experimental/fully_async_policy/fully_async_rollouter.py, set_max_required_samples,
      reset_staleness, _should_pause_generation).

    A verl "sample" is one prompt with its rollout.n responses: one prompt group here.
    """

    kind: Literal["fully-async"]
    placement: Literal["custom"] = "custom"
    consumer_batch_size: int | None = Field(
        default=None, gt=0, le=MAX_PROMPTS_PER_STEP,
        description="AReaL: prompt groups per trainer step (default algorithm.prompts_per_step; with verl's "
        "require_batches / ppo_mini_batch_size: their product)",
    )
    max_head_offpolicyness: float | None = Field(
        default=4, ge=0,
        description="AReaL's staleness bound eta in policy versions; null = unbounded (ASearcher: 4). Ignored "
        "when verl's staleness_threshold is set",
    )
    max_concurrent_rollouts: int | None = Field(
        default=None, gt=0, le=MAX_PROMPTS_PER_STEP,
        description="Prompt groups in flight at most (null: AReaL: only the staleness rule limits, with eta "
        "also null 4 x consumer_batch_size; verl: min(16 x rollout engines, the staleness cap), verl's "
        "concurrent_samples_per_replica = 16)",
    )
    drop_stale: bool = Field(
        default=False,
        description="Drop finished samples older than max_head_offpolicyness when the trainer takes them (an "
        "rlsim option: neither AReaL 1.0.4 nor verl drops; AReaL bounds staleness at admission only)",
    )
    interrupt: Literal["keep", "recompute", "abort-resume", "abort-discard", "drain"] = Field(
        default="recompute",
        description="At a weight update in-flight sequences keep their KV (keep), drop it and re-prefill with the "
        "new weights (recompute, AReaL's interruptible generation), are aborted and resumed from their partial "
        "output (abort-resume, verl partial_rollout), are aborted and restarted from scratch (abort-discard), or "
        "run to completion before the weights load while nothing new is admitted (drain, AReaL's "
        "non-interruptible baseline; verl partial_rollout: false). Default with staleness_threshold: abort-resume",
    )
    recompute_logprob: bool = Field(
        default=True,
        description="Decoupled PPO: an extra actor forward pass for proximal log-probs (AReaL). verl fully_async's "
        "shipped config trains on the rollout's log-probs (bypass_mode): set false to match it",
    )
    staleness_threshold: float | None = Field(
        default=None, ge=0,
        description="verl fully_async: a FRACTION; the rollouter may start (1 + staleness_threshold) x "
        "trigger_parameter_sync_step x require_batches x ppo_mini_batch_size prompt groups per weight version. "
        "Setting it selects verl's admission rule instead of AReaL's",
    )
    trigger_parameter_sync_step: int = Field(
        default=1, gt=0, le=MAX_STEPS,
        description="Trainer steps between weight syncs (verl)"
    )
    require_batches: int | None = Field(
        default=None, gt=0, le=MAX_EPOCHS,
        description="verl: ppo_mini_batch_size batches the trainer takes per step, each one optimizer update: "
        "a step consumes require_batches x ppo_mini_batch_size groups and makes require_batches x epochs "
        "updates (algorithm.mini_batches is then unused)",
    )
    ppo_mini_batch_size: int | None = Field(
        default=None, gt=0, le=MAX_PROMPTS_PER_STEP,
        description="verl actor.ppo_mini_batch_size in prompts (x rollout.n samples); default "
        "algorithm.prompts_per_step / algorithm.mini_batches",
    )
    partial_rollout: bool | None = Field(
        default=None,
        description="verl: true = in-flight generations are interrupted at a sync and resumed after it "
        "(interrupt: abort-resume); false = the sync waits for them to finish (interrupt: drain)",
    )
    weight_sync_bucket_mb: float = Field(default=2048, gt=0, description="Weight-sync bucket size (verl: 2048 MB)")
    dispatch: Literal["least-loaded"] = Field(
        default="least-loaded", description="Each new request goes to the engine with the fewest requests"
    )
    reshard: Literal["3d-hybrid-engine", "hybridflow-v", "naive"] = "3d-hybrid-engine"
    switch_overhead_s: float = Field(default=0.0, ge=0, description="Unused: rollout never shares GPUs here")

    @model_validator(mode="after")
    def _framework_knobs(self) -> FullyAsyncSpec:
        """AReaL's and verl's knobs may not contradict each other; partial_rollout resolves `interrupt`."""
        given = self.model_fields_set
        if self.staleness_threshold is not None and self.max_head_offpolicyness is not None \
                and "max_head_offpolicyness" in given:
            _knob_error("staleness_threshold", self.staleness_threshold,
                        f"verl's staleness_threshold (a fraction of a sync's samples) and AReaL's "
                        f"max_head_offpolicyness ({self.max_head_offpolicyness} versions) are two different "
                        "admission rules; set one (max_head_offpolicyness: null for verl's)")
        verl_batch = self.require_batches is not None or self.ppo_mini_batch_size is not None
        if verl_batch and self.consumer_batch_size is not None:
            want = (self.require_batches or 1) * (self.ppo_mini_batch_size or 0)
            if self.consumer_batch_size != want:
                _knob_error("consumer_batch_size", self.consumer_batch_size,
                            "AReaL's consumer_batch_size and verl's require_batches / ppo_mini_batch_size both set "
                            "the prompt groups per trainer step"
                            + (f" and disagree ({self.consumer_batch_size} vs {want})" if want else "")
                            + "; set one")
        if self.partial_rollout is not None:
            mode = "abort-resume" if self.partial_rollout else "drain"
            if "interrupt" in given and self.interrupt != mode:
                _knob_error("partial_rollout", self.partial_rollout,
                            f"partial_rollout: {str(self.partial_rollout).lower()} means interrupt: {mode}, "
                            f"but interrupt is {self.interrupt!r}; set one")
            self.interrupt = mode
        elif self.staleness_threshold is not None and "interrupt" not in given:
            self.interrupt = "abort-resume"  # verl's default: partial_rollout: True
        if self.staleness_threshold is not None:
            self.max_head_offpolicyness = None  # AReaL's default eta does not apply under verl's rule
        if self.drop_stale and self.max_head_offpolicyness is None:
            _knob_error("drop_stale", True, "drop_stale drops samples older than max_head_offpolicyness versions; "
                        "it needs that bound set (not null, and not verl's staleness_threshold)")
        return self

    @property
    def verl_rule(self) -> bool:
        """verl fully_async's admission rule (staleness_threshold set) instead of AReaL's."""
        return self.staleness_threshold is not None

    def mini_batch_groups(self, algo: AlgorithmSpec) -> int:
        """Prompt groups per optimizer update (verl ppo_mini_batch_size)."""
        return self.ppo_mini_batch_size or max(1, algo.prompts_per_step // algo.mini_batches)

    def consumer_groups(self, algo: AlgorithmSpec) -> int:
        """Prompt groups the trainer takes per step."""
        if self.require_batches is not None or self.ppo_mini_batch_size is not None:
            return (self.require_batches or 1) * self.mini_batch_groups(algo)
        return self.consumer_batch_size or algo.prompts_per_step

    def optimizer_updates(self, algo: AlgorithmSpec) -> int:
        """Optimizer updates per trainer step, epochs included."""
        if self.require_batches is not None or self.ppo_mini_batch_size is not None:
            return (self.require_batches or 1) * algo.epochs
        return algo.mini_batches * algo.epochs

    @property
    def eta(self) -> float | None:
        """The staleness knob in effect: AReaL's eta (versions) or, under verl's rule, staleness_threshold."""
        return self.staleness_threshold if self.staleness_threshold is not None else self.max_head_offpolicyness


def _knob_error(field: str, value, message: str):
    """Raise a validation error located at `schedule.<field>` (one line: dotted path + what is wrong)."""
    from pydantic import ValidationError
    from pydantic_core import InitErrorDetails, PydanticCustomError

    err = PydanticCustomError("value_error", "{error}", {"error": message})
    raise ValidationError.from_exception_data("FullyAsyncSpec", [InitErrorDetails(type=err, loc=(field,), input=value)])


class RollSpec(Strict):
    """ROLL's rollout scheduling (docs/sources.md §8) on a rollout pool of its own.

    `async_generation_ratio` alpha: generation runs up to alpha steps ahead of training (0: synchronous;
    fractions allowed); a training batch takes only groups started at step >= current - ceil(alpha),
    older ones are aborted. Each prompt is replicated into its samples (one request each) and scored as
    soon as it finishes (sample-level queue scheduling). Redundant environment rollout launches
    `samples_per_prompt + group_size_redundancy` episodes per group and keeps the first finishers.
    Dynamic sampling drops groups whose rewards are all equal (probability `filter_prob` per group)
    and launches replacements, with up to `max_additional_running_prompts` extra groups running ahead.
    """

    kind: Literal["roll"]
    placement: Literal["custom"] = "custom"
    async_generation_ratio: float = Field(default=1.0, ge=0, description="alpha (ROLL async_generation_ratio)")
    group_size_redundancy: int = Field(
        default=0, ge=0, le=MAX_SAMPLES_PER_PROMPT,
        description="Extra episodes per group; first finishers win"
    )
    dynamic_sampling: bool = Field(default=False, description="Drop all-equal-reward groups and replace them")
    filter_prob: float = Field(default=0.0, ge=0, le=1, description="Chance a finished group's rewards are all equal")
    max_additional_running_prompts: int = Field(
        default=0, ge=0, le=MAX_PROMPTS_PER_STEP,
        description="Extra groups allowed in flight"
    )
    interrupt: Literal["keep", "recompute"] = Field(default="keep", description="In-flight KV at a weight update")
    recompute_logprob: bool = Field(default=True, description="Old log-probs from an actor forward pass")
    weight_sync_bucket_mb: float = Field(default=2048, gt=0)
    dispatch: Literal["least-loaded"] = "least-loaded"
    reshard: Literal["3d-hybrid-engine", "hybridflow-v", "naive"] = "3d-hybrid-engine"
    switch_overhead_s: float = Field(default=0.0, ge=0, description="Unused: rollout never shares GPUs here")
    max_concurrent_rollouts: int | None = Field(
        default=None, gt=0, le=MAX_PROMPTS_PER_STEP,
        description="Groups in flight at most (rlsim's cap, named after AReaL's knob)"
    )

    # ROLL pushes weights after every step and has no verl staleness_threshold: fixed, not settable.
    trigger_parameter_sync_step: ClassVar[int] = 1
    staleness_threshold: ClassVar[None] = None
    verl_rule: ClassVar[bool] = False
    drop_stale: ClassVar[bool] = False  # ROLL expires groups by start step instead (schedules/roll.py)

    def consumer_groups(self, algo: AlgorithmSpec) -> int:
        return algo.prompts_per_step

    def optimizer_updates(self, algo: AlgorithmSpec) -> int:
        return algo.mini_batches * algo.epochs

    @property
    def eta(self) -> float:
        return self.async_generation_ratio


ScheduleSpec = Annotated[
    GenerationOnlySpec | HybridFlowSpec | OneStepOffSpec | FullyAsyncSpec | RollSpec, Field(discriminator="kind")
]


# ---------------------------------------------------------------- scenario


class Scenario(Strict):
    name: str = Field(
        default="scenario",
        description="Names the results folder runs/<name>: letters, digits, space, '.', '_', '+', '-'",
    )
    description: str = ""
    seed: int = Field(default=0, ge=0, lt=2**63)
    steps: int = Field(default=3, gt=0, le=MAX_STEPS, description="Measured RL steps")
    warmup_steps: int = Field(
        default=0, ge=0, le=MAX_STEPS, description="Steps simulated but left out of the summary"
    )
    cluster: ClusterSpec
    models: dict[str, ModelSpec] = Field(min_length=1)
    roles: dict[RoleName, RoleSpec] = Field(min_length=1)
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    workload: WorkloadSpec
    environments: EnvironmentsSpec = Field(default_factory=EnvironmentsSpec)
    schedule: ScheduleSpec
    calibration: CalibrationSpec | None = Field(
        default=None, description="Factors fitted by `rlsim calibrate --from-log` (block, or an overlay file's path)"
    )

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        """The name becomes a folder under runs/: no separator or leading dot may take it elsewhere."""
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._+-]{0,99}", name):
            raise ValueError(
                f"must be a plain name of 1 to 100 letters, digits, spaces, '.', '_', '+' or '-', starting with a "
                f"letter or digit (it names the folder runs/<name>), got {name[:60]!r}"
            )
        return name

    def role_gpus(self, name: str) -> int:
        """GPUs a role uses: its `gpus`, or its whole pool."""
        role = self.roles[name]
        return role.gpus if role.gpus is not None else self.cluster.pools[role.pool].gpus - role.gpu_offset

    def role_gpu_range(self, name: str) -> tuple[int, int]:
        """The pool GPUs [start, stop) a role holds."""
        start = self.roles[name].gpu_offset
        return start, start + self.role_gpus(name)

    def gpu_runs(self, pool: str) -> list[tuple[int, int]]:
        """The pool's GPUs cut at every role's first and one-past-last GPU: runs the same roles hold."""
        edges = {0, self.cluster.pools[pool].gpus}
        for role, spec in self.roles.items():
            if spec.pool == pool:
                edges.update(self.role_gpu_range(role))
        ordered = sorted(edges)
        return list(zip(ordered, ordered[1:], strict=False))

    def roles_share_gpus(self, a: str, b: str) -> bool:
        """Whether two roles hold a common GPU (then they time-share it; a hybrid engine for actor and rollout)."""
        ra, rb = self.roles[a], self.roles[b]
        if ra.pool != rb.pool:
            return False
        (a0, a1), (b0, b1) = self.role_gpu_range(a), self.role_gpu_range(b)
        return a0 < b1 and b0 < a1
