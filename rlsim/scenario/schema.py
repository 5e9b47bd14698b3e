"""The scenario language: pydantic models of a cluster, its models, roles, algorithm, workload and schedule.

Every model forbids unknown keys: a typo must be an error, never a silent default. Knob names
mirror verl / vLLM / ROLL / AReaL where those systems have one (`gpu_memory_utilization`,
`max_num_seqs`, `rollout.n` ~ `samples_per_prompt`, `data.train_batch_size` ~ `prompts_per_step`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlsim.model_shapes import ModelShape, resolve_preset


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- cluster


class PoolSpec(Strict):
    """A homogeneous group of nodes; heterogeneous clusters are several pools."""

    hardware: str = Field(description="Hardware profile name (see `rlsim profiles`) or path to a YAML")
    nodes: int = Field(default=1, gt=0)
    gpus_per_node: int = Field(default=8, gt=0)
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0, description="Overrides the profile's")
    nic_gbit_per_s: float | None = Field(
        default=None, gt=0, description="Inter-node bandwidth per GPU of this cluster, overriding the profile's"
    )

    def profile(self):
        """The hardware profile with this pool's own network (a testbed's NICs differ from the datasheet)."""
        from rlsim.hardware import load_profile

        hw = load_profile(self.hardware)
        if self.nic_gbit_per_s is not None:
            sources = {**hw.sources, "nic_gbit_per_s": "scenario pool override"}
            hw = hw.model_copy(update={"nic_gbit_per_s": self.nic_gbit_per_s, "sources": sources})
        return hw

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


class ClusterSpec(Strict):
    pools: dict[str, PoolSpec] = Field(min_length=1)


# ---------------------------------------------------------------- models


class ModelSpec(ModelShape):
    """A model shape; `preset: qwen2.5-7b` fills every dimension, explicit keys override."""

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


# ---------------------------------------------------------------- roles

RoleName = Literal["actor", "rollout", "reference", "critic", "reward"]


class ParallelSpec(Strict):
    """Per-replica model parallelism; data parallelism = gpus / (tp * pp) unless given."""

    tp: int = Field(default=1, gt=0, description="Tensor parallel degree")
    pp: int = Field(default=1, gt=0, description="Pipeline parallel degree")
    dp: int | None = Field(default=None, gt=0, description="Data parallel degree (default: derived)")


class EngineSpec(Strict):
    """Inference-engine settings (vLLM / SGLang names)."""

    gpu_memory_utilization: float = Field(
        default=0.5, gt=0, le=1, description="Fraction of total GPU memory the engine may use (verl default 0.5)"
    )
    max_num_seqs: int = Field(default=256, gt=0, description="Maximum running sequences per engine")
    max_num_batched_tokens: int = Field(default=8192, gt=0, description="Prefill tokens per engine step")
    chunked_prefill: bool = Field(default=False, description="Piggyback prefill chunks on decode steps")
    enable_prefix_caching: bool = Field(default=True, description="Keep finished turns' KV for the next turn")
    activation_reserve_gb: float = Field(
        default=1.0, ge=0, description="Memory per GPU kept free for activations/CUDA graphs, GB (assumed)"
    )
    host_overhead_per_seq_us: float = Field(
        default=0.0,
        ge=0,
        description="Host (CPU) time per running sequence per decode step not overlapped with the GPU, us: "
        "scheduling, input preparation, sampler bookkeeping. ~0 for engines that overlap their scheduler "
        "(SGLang, vLLM >= 0.6); large for vLLM before 0.6 (Python scheduler, REFERENCE.md section 2)",
    )


class TrainSpec(Strict):
    """How a model role trains and runs forward passes (verl actor/critic/ref knob names)."""

    ppo_max_token_len_per_gpu: int = Field(
        default=16384, gt=0, description="Dynamic-batching token budget of one micro-batch per GPU (verl)"
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
    gpus: int | None = Field(default=None, gt=0, description="GPUs of the pool this role uses (default: all)")
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
    prompts_per_step: int = Field(default=512, gt=0, description="verl data.train_batch_size")
    samples_per_prompt: int = Field(default=1, gt=0, description="verl actor_rollout_ref.rollout.n")
    mini_batches: int = Field(default=1, gt=0, description="Optimizer updates per epoch")
    epochs: int = Field(default=1, gt=0, description="PPO epochs over each batch")
    rule_reward_s_per_sample: float = Field(
        default=0.002, ge=0,
        description="CPU seconds of a rule-based reward per sample, used when there is no reward role (assumed)",
    )
    rule_reward_workers: int = Field(default=16, gt=0, description="Parallel CPU reward workers (assumed)")
    judge_output_tokens: int = Field(
        default=64, gt=0, description="Tokens an LLM judge generates per sample (reward role with an engine; assumed)"
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
    value: int = Field(gt=0)


class UniformLength(Strict):
    kind: Literal["uniform"]
    min: int = Field(gt=0)
    max: int = Field(gt=0)

    @model_validator(mode="after")
    def _order(self) -> UniformLength:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class LognormalLength(Strict):
    """Lognormal with the given mean (of the untruncated law), clipped to [min, max] like max_tokens."""

    kind: Literal["lognormal"]
    mean: float = Field(gt=0)
    sigma: float = Field(gt=0, description="Std-dev of log(length): the tail weight")
    min: int = Field(default=1, gt=0)
    max: int = Field(gt=0, description="Truncation (generation max_tokens)")

    @model_validator(mode="after")
    def _order(self) -> LognormalLength:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class EmpiricalLength(Strict):
    """Lengths resampled from a CSV column (path relative to the scenario file)."""

    kind: Literal["empirical"]
    path: str
    column: str = "length"
    max: int | None = Field(default=None, gt=0)


LengthDistribution = Annotated[
    FixedLength | UniformLength | LognormalLength | EmpiricalLength, Field(discriminator="kind")
]


# ---------------------------------------------------------------- environments and tools (agentic RL)


class FixedSeconds(Strict):
    kind: Literal["fixed"]
    value: float = Field(ge=0)


class UniformSeconds(Strict):
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

    kind: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(ge=0)
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

    concurrency: int = Field(gt=0, description="Calls served at once; more wait in a FIFO queue")
    cold_start_s: float = Field(default=0.0, ge=0, description="Start/reset cost of an environment per trajectory")


class ToolSpec(Strict):
    """One tool: its latency, what it returns, and how it fails (ASearcher: 30 s timeout, 4 attempts, 1/2/4 s)."""

    pool: str = Field(description="Environment pool (key of environments.pools) that serves the calls")
    latency: LatencyDistribution
    observation_tokens: LengthDistribution = Field(description="Tokens the call appends to the context")
    timeout_s: float | None = Field(default=None, gt=0, description="An attempt longer than this is cut off")
    max_attempts: int = Field(default=1, gt=0, description="Attempts before the call (and trajectory) fails")
    backoff_s: list[float] = Field(default_factory=list, description="Wait before retry k (last value repeats)")
    failure_prob: float = Field(default=0.0, ge=0, le=1, description="Chance an attempt fails outright")


class EnvironmentsSpec(Strict):
    pools: dict[str, EnvPoolSpec] = Field(default_factory=dict)
    tools: dict[str, ToolSpec] = Field(default_factory=dict)


class AgentSpec(Strict):
    """Multi-turn trajectories: generate, call a tool, append its observation, generate again."""

    turns: LengthDistribution = Field(description="Generation turns per trajectory (up to 128)")
    tokens_per_turn: LengthDistribution = Field(description="Tokens generated per turn")
    tool_mix: dict[str, float] = Field(description="Probability of each tool after a turn (normalised)")
    max_context_tokens: int = Field(default=32768, gt=0, description="The trajectory ends when its context is full")


class WorkloadSpec(Strict):
    prompt_length: LengthDistribution
    response_length: LengthDistribution = Field(description="Single-turn response length (multi-turn: see agent)")
    agent: AgentSpec | None = Field(default=None, description="Multi-turn agentic trajectories with tool calls")


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
        "(verl: ~450 ms = 150 ms load + 295 ms gc, REFERENCE.md section 4)",
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

    The trainer takes `consumer_batch_size` finished prompt groups (oldest first) per step. AReaL's
    staleness control admits a new group only while
    started groups <= (max_head_offpolicyness + version + 1) x consumer_batch_size (the code form:
    capacity = min(max_concurrent_rollouts - running, (eta + version + 1) * B - (accepted + running)));
    samples older than the bound when training comes are dropped. verl's spelling
    (`staleness_threshold`, `trigger_parameter_sync_step`, `require_batches`) maps onto the same rule:
    eta = staleness_threshold, B = consumer groups per weight sync, weights pushed every
    `trigger_parameter_sync_step` trainer steps.
    """

    kind: Literal["fully-async"]
    placement: Literal["custom"] = "custom"
    consumer_batch_size: int | None = Field(
        default=None, gt=0, description="Prompt groups per trainer step (default algorithm.prompts_per_step)"
    )
    max_head_offpolicyness: float | None = Field(
        default=4, ge=0, description="Staleness bound eta in policy versions; null = unbounded (ASearcher: 4)"
    )
    max_concurrent_rollouts: int | None = Field(
        default=None, gt=0,
        description="Prompt groups in flight at most (null: only the staleness rule limits; with eta also null, "
        "4 x consumer_batch_size)",
    )
    interrupt: Literal["keep", "recompute", "abort-resume", "abort-discard"] = Field(
        default="recompute",
        description="At a weight update in-flight sequences keep their KV (keep), drop it and re-prefill with the "
        "new weights (recompute, AReaL), are aborted and resumed from their partial output (abort-resume, "
        "verl partial rollout), or are aborted and restarted from scratch (abort-discard)",
    )
    recompute_logprob: bool = Field(
        default=True, description="Decoupled PPO: an extra actor forward pass for proximal log-probs (AReaL)"
    )
    staleness_threshold: float | None = Field(
        default=None, ge=0, description="verl fully_async spelling of the staleness bound (overrides eta)"
    )
    trigger_parameter_sync_step: int = Field(default=1, gt=0, description="Trainer steps between weight syncs")
    require_batches: int | None = Field(
        default=None, gt=0,
        description="verl: mini-batches per trainer step; consumer groups = require_batches x prompts per mini-batch",
    )
    weight_sync_bucket_mb: float = Field(default=2048, gt=0, description="Weight-sync bucket size (verl: 2048 MB)")
    dispatch: Literal["least-loaded"] = Field(
        default="least-loaded", description="Each new request goes to the engine with the fewest requests"
    )
    reshard: Literal["3d-hybrid-engine", "hybridflow-v", "naive"] = "3d-hybrid-engine"
    switch_overhead_s: float = Field(default=0.0, ge=0, description="Unused: rollout never shares GPUs here")

    def consumer_groups(self, algo: AlgorithmSpec) -> int:
        if self.require_batches is not None:
            return max(1, self.require_batches * algo.prompts_per_step // algo.mini_batches)
        return self.consumer_batch_size or algo.prompts_per_step

    @property
    def eta(self) -> float | None:
        return self.staleness_threshold if self.staleness_threshold is not None else self.max_head_offpolicyness


class RollSpec(Strict):
    """ROLL's rollout scheduling (REFERENCE.md section 8) on a rollout pool of its own.

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
    group_size_redundancy: int = Field(default=0, ge=0, description="Extra episodes per group; first finishers win")
    dynamic_sampling: bool = Field(default=False, description="Drop all-equal-reward groups and replace them")
    filter_prob: float = Field(default=0.0, ge=0, le=1, description="Chance a finished group's rewards are all equal")
    max_additional_running_prompts: int = Field(default=0, ge=0, description="Extra groups allowed in flight")
    interrupt: Literal["keep", "recompute"] = Field(default="keep", description="In-flight KV at a weight update")
    recompute_logprob: bool = Field(default=True, description="Old log-probs from an actor forward pass")
    weight_sync_bucket_mb: float = Field(default=2048, gt=0)
    dispatch: Literal["least-loaded"] = "least-loaded"
    reshard: Literal["3d-hybrid-engine", "hybridflow-v", "naive"] = "3d-hybrid-engine"
    switch_overhead_s: float = Field(default=0.0, ge=0, description="Unused: rollout never shares GPUs here")
    staleness_threshold: None = None
    trigger_parameter_sync_step: int = 1
    max_concurrent_rollouts: int | None = Field(default=None, gt=0, description="Groups in flight at most")

    def consumer_groups(self, algo: AlgorithmSpec) -> int:
        return algo.prompts_per_step

    @property
    def eta(self) -> float:
        return self.async_generation_ratio


ScheduleSpec = Annotated[
    GenerationOnlySpec | HybridFlowSpec | OneStepOffSpec | FullyAsyncSpec | RollSpec, Field(discriminator="kind")
]


# ---------------------------------------------------------------- scenario


class Scenario(Strict):
    name: str = "scenario"
    description: str = ""
    seed: int = Field(default=0, ge=0)
    steps: int = Field(default=3, gt=0, description="Measured RL steps")
    warmup_steps: int = Field(default=0, ge=0, description="Steps simulated but left out of the summary")
    cluster: ClusterSpec
    models: dict[str, ModelSpec] = Field(min_length=1)
    roles: dict[RoleName, RoleSpec] = Field(min_length=1)
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    workload: WorkloadSpec
    environments: EnvironmentsSpec = Field(default_factory=EnvironmentsSpec)
    schedule: ScheduleSpec

    def role_gpus(self, name: str) -> int:
        """GPUs a role uses: its `gpus`, or its whole pool."""
        role = self.roles[name]
        return role.gpus if role.gpus is not None else self.cluster.pools[role.pool].gpus - role.gpu_offset

    def role_gpu_range(self, name: str) -> tuple[int, int]:
        """The pool GPUs [start, stop) a role holds."""
        start = self.roles[name].gpu_offset
        return start, start + self.role_gpus(name)

    def roles_share_gpus(self, a: str, b: str) -> bool:
        """Whether two roles hold a common GPU (then they time-share it; a hybrid engine for actor and rollout)."""
        ra, rb = self.roles[a], self.roles[b]
        if ra.pool != rb.pool:
            return False
        (a0, a1), (b0, b1) = self.role_gpu_range(a), self.role_gpu_range(b)
        return a0 < b1 and b0 < a1
