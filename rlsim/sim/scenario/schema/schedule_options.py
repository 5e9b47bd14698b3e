"""Options several schedules share (one definition each; schedule.py composes each spec of those it uses).

A schedule's spec is made only of the option groups its schedule reads, so a knob a schedule ignores is
an unknown key there (refused, with a did-you-mean), never a silent no-op:

- TrainingOptions (recompute_logprob, lora): every training schedule
- WeightSyncOptions (weight_sync: path, senders, bucket_mb, delta): every training schedule
- SyncDispatchOptions (dispatch): generation-only, hybridflow, one-step-off (a batch generated at once)
- HybridSwitchOptions (reshard, switch_overhead_s, engine_sleep_level): hybridflow, verl-v1 (GPUs switch roles)
- AsyncRolloutOptions (routing): fully-async, roll, verl-v1
- AsyncBatchOptions (consumer_batch_size, max_head_offpolicyness, max_concurrent_rollouts, drop_stale,
  trigger_parameter_sync_step, require_batches, ppo_mini_batch_size, resplit): fully-async, verl-v1
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlsim.sim.costs.weight_sync import DEFAULT_DELTA_FRACTION
from rlsim.sim.limits import (  # sane upper bounds, shared with the file readers
    MAX_BUCKET_MB,
    MAX_EPOCHS,
    MAX_PROMPTS_PER_STEP,
    MAX_STALENESS_STEPS,
    MAX_STEPS,
    MIN_BUCKET_MB,
)
from rlsim.sim.scenario.schema.algorithm import AlgorithmSpec
from rlsim.sim.scenario.schema.base import Strict

DEFAULT_BUCKET_MB = 2048.0  # verl's update_weights_bucket_megabytes


class LoraSpec(Strict):
    """LoRA RL: train rank-`rank` adapters over a frozen base; sync the adapter only (costs/lora.py)."""

    rank: int = Field(gt=0, le=4096, description="Adapter rank r (verl actor_rollout_ref.model.lora_rank)")
    targets: Literal["all-linear", "attention"] = Field(
        default="all-linear",
        description="Adapted modules: every linear layer (q, k, v, o, gate, up, down; verl target_modules: "
        "all-linear) or the attention projections only (q, k, v, o)",
    )
    sync: Literal["nccl", "store"] = Field(
        default="nccl",
        description="How the adapter reaches the engines: an NCCL broadcast like full weights (nccl), or written "
        "to shared storage and loaded by each engine (store)",
    )
    store_gb_per_s: float | None = Field(
        default=None, gt=0,
        description="sync: store: the shared storage's bandwidth per engine, GB/s (required then: measure yours)",
    )
    kernel_us: float = Field(
        default=4.0, ge=0,
        description="Time of one LoRA shrink or expand kernel in a decode step, floor part, microseconds (default: "
        "the smallest operators of a decode step on an H100, 4 us: Vidur's measured profile, "
        "profiles/vidur/compute/h100/meta-llama/Llama-2-7b-hf, attn_rope / input_layernorm at <= 64 tokens)",
    )

    @model_validator(mode="after")
    def _store_needs_bandwidth(self) -> LoraSpec:
        if self.sync == "store" and self.store_gb_per_s is None:
            raise ValueError("sync: store needs store_gb_per_s (the shared storage's bandwidth per engine)")
        return self


class TrainingOptions(Strict):
    """What every training schedule offers on the trainer side: where old log-probs come from, LoRA."""

    recompute_logprob: bool = Field(
        default=True,
        description="true: an actor forward pass over the batch computes the old-policy log-probs (verl's "
        "old_log_prob phase; AReaL's proximal log-probs in decoupled PPO). false: train on the log-probs the "
        "inference engine returned with each token (verl actor.use_rollout_log_probs / rollout_correction "
        "bypass_mode, AReaL recompute_logprob: false); the old_log_prob phase is then absent from the step",
    )
    lora: LoraSpec | None = Field(
        default=None, description="Train LoRA adapters over a frozen base instead of every weight (null: full)"
    )


class SwitchSpec(Strict):
    """verl V1 `separate_async` lending: verl's HybridRolloutSwitchConfig (trainer.v1.separate_async.hybrid_rollout).

    Defaults are verl 0.9.1's (verl/trainer/config/config.py, HybridRolloutSwitchConfig). The rule
    (verl/trainer/ppo/v1/trainer_separate_async.py, on_step_end) after each step: threshold = the
    switch_threshold_ratio of the batch in prompt groups (at least one mini-batch); remaining = threshold
    minus the groups already sampleable for the next step; benefit_seconds = remaining x the mean wait per
    missing group so far x hybrid / (hybrid + standalone GPUs); effective_switch_cost_seconds = the mean of
    the last switch_cost_window_size switches into generation plus that of the switches back. The trainer's
    GPUs join generation if remaining > 0 and the benefit beats the cost (or either is not known yet), and
    return when `threshold` groups are sampleable.
    """

    enable_switch: bool = Field(default=False, description="Lend idle trainer GPUs to generation")
    switch_threshold_ratio: float = Field(
        default=0.4, gt=0, le=1, description="Sampleable share of the batch at which the GPUs return to training"
    )
    adaptive_switch_threshold: bool = Field(
        default=True, description="Raise the ratio after idle steps, lower it after calm ones"
    )
    switch_threshold_step_up: float = Field(default=0.05, ge=0, le=1, description="Raise per idle streak")
    switch_threshold_step_down: float = Field(default=0.03, ge=0, le=1, description="Lower per calm streak")
    switch_threshold_release_steps: int = Field(
        default=2, gt=0, le=1024, description="Consecutive idle (or calm) steps before the ratio moves"
    )
    switch_cost_window_size: int = Field(default=3, gt=0, le=1024, description="Switches the cost averages over")
    engine_start_s: float = Field(
        default=0.0, ge=0,
        description="rlsim: a fixed cost per switch into generation on top of the modelled transition (engine "
        "wake, weight gather and load, graph capture, host work: costs/transition.py, docs/sources.md §12)",
    )


class TailReshardSpec(Strict):
    """Tail re-sharding in a synchronous rollout (schedules/tail_reshard.py; PAT, arXiv 2605.23945)."""

    threshold: float = Field(
        default=0.05, gt=0, lt=1,
        description="Consider the re-shard when this fraction of the batch is still running (assumed default)",
    )
    factor: int = Field(
        default=2, ge=2, le=64, description="Wide engines have factor x the rollout TP (and there are 1/factor as many)"
    )
    mode: Literal["migrate", "recompute"] = Field(
        default="migrate",
        description="Move the running sequences' KV over NVLink (migrate) or re-prefill their context (recompute)",
    )
    restart_s: float = Field(
        default=0.45, ge=0,
        description="Engine restart at the new TP (default: verl's engine wake-up and KV re-allocation, "
        "~450 ms, docs/sources.md §4)",
    )


class ResplitSpec(Strict):
    """Online re-splitting of trainer and rollout GPUs (schedules/resplit.py; Libra, arXiv 2606.03077)."""

    interval_steps: int | None = Field(default=None, gt=0, le=1_000_000, description="Re-plan every this many steps")
    imbalance: float | None = Field(
        default=0.2, gt=0, le=1,
        description="Re-plan when training and rollout times per batch differ by this fraction of the larger "
        "(assumed default)",
    )
    queue_groups: int | None = Field(
        default=None, gt=0, le=1_000_000, description="Re-plan when this many finished groups wait in the buffer"
    )
    window: int = Field(
        default=3, gt=0, le=1024,
        description="Steps the planner averages training and rollout GPU-seconds over (assumed default)",
    )
    min_gain: float = Field(
        default=0.05, ge=0, le=1,
        description="Re-split only if max(train, rollout) drops by at least this fraction (assumed default)",
    )
    reconfig_s: float = Field(
        default=5.0, ge=0,
        description="Reconfiguration cost per re-split: trainer process groups and optimizer state rebuilt "
        "(assumed; the engines' start is added when GPUs join generation)",
    )


class ReplayBufferSpec(Strict):
    """verl V1's sampling in its asynchronous modes (schedules/replay_buffer.py; verl 0.9.1 trainer/ppo/v1/
    replay_buffer.py ReplayBufferAsync, trainer_base.py): prompts are fed `num_warmup_batches` train batches
    ahead plus one batch per step; failed, stale and DAPO-filtered groups are evicted when the trainer looks,
    and each is replaced by a fresh prompt."""

    num_warmup_batches: float = Field(
        default=1.0, ge=0, le=MAX_STALENESS_STEPS,
        description="verl trainer.v1.<mode>.num_warmup_batches: train batches of prompts fed before the first step "
        "(the prefetch window; fractions allowed). With one batch fed per step and every eviction refilled, it "
        "is AReaL's admission rule with eta = num_warmup_batches weight versions",
    )

    filter_prob: float = Field(
        default=0.0, ge=0, lt=1,
        description="verl algorithm.filter_groups (DAPO): the chance a finished group's rewards are all equal, so "
        "that it is evicted and refilled (0: the filter is off). rlsim has no reward values: measure your task's "
        "share of all-equal groups (verl logs training/filter_groups/evicted_samples)",
    )


class ElasticSpec(Strict):
    """verl fully_async's dynamic resource scheduling (schedules/elastic_replicas.py; verl 0.9.1
    experimental/fully_async_policy/dynamic_schedule): rollout replicas on the trainer's GPUs join generation at
    a weight push and leave it once `deactivate_ratio` of a weight version's groups are queued."""

    policy: Literal["default", "fixed_ratio", "static_fully_async"] = Field(
        default="default",
        description="verl async_training.dynamic_schedule_policy: default (adaptive ratio, cost/benefit gate), "
        "fixed_ratio (activate while the queue is short, ratio fixed), static_fully_async (never activate)",
    )
    deactivate_ratio: float = Field(
        default=0.3, gt=0, le=1,
        description="verl async_training.dynamic_schedule_deactivate_ratio: the share of a weight version's prompt "
        "groups queued before the trainer's GPUs leave generation (the starting value under the default policy)",
    )
    rebalance: bool = Field(
        default=True,
        description="verl dynamic_schedule_enable_rebalance: on activation abort every in-flight request so the "
        "retries spread by least load (false: only new requests reach the woken replicas)",
    )
    gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1,
        description="The replicas on the trainer's GPUs: their share of GPU memory (verl: rollout."
        "gpu_memory_utilization when standalone_gpu_memory_utilization sets the standalone replicas'; null: "
        "the rollout engine's)",
    )


class RoutingSpec(Strict):
    """Group-affinity routing of a prompt group's requests (schedules/affinity.py); prefix sharing modelled."""

    policy: Literal["least-loaded", "affinity", "affinity-bounded"] = Field(
        description="least-loaded: each request to the engine with the fewest requests; affinity: a group's "
        "requests to the engine holding its prompt; affinity-bounded: affinity unless that engine would carry "
        "more than (1 + load_bound) x the mean load"
    )
    load_bound: float = Field(
        default=0.25, ge=0,
        description="affinity-bounded: the epsilon of consistent hashing with bounded loads (Mirrokni, Thorup & "
        "Zadimoghaddam, SODA 2018); 0.25 is an assumed default",
    )


class AsyncRolloutOptions(Strict):
    """Options of the asynchronous rollout controllers (fully-async, roll)."""

    routing: RoutingSpec | None = Field(
        default=None, description="Group-affinity routing of fresh requests (null: least-loaded, no prefix sharing)"
    )


class WeightSyncSpec(Strict):
    """Which path a weight sync takes (costs/weight_sync.py; docs/schedules.md, "Weight sync paths")."""

    path: Literal["bucketed", "per-tensor-nccl", "per-tensor-rpc", "staged"] = Field(
        default="bucketed",
        description="bucketed: tensors flattened into buckets, bytes-bound (verl's checkpoint engine, SGLang "
        "buckets); per-tensor-nccl: one NCCL call per tensor (1.65 ms each by default); per-tensor-rpc: one RPC "
        "with serialisation per tensor (38 ms each); staged: bucketed through host memory (device -> host -> "
        "device over PCIe)",
    )
    senders: Literal["one", "all"] = Field(
        default="one",
        description="one: a single trainer GPU broadcasts every byte (after gathering across trainer nodes); "
        "all: every trainer GPU sends its share over its own NIC (verl PR #7291's multi-sender broadcast). "
        "Syncs to engines on other GPUs only",
    )
    bucket_mb: float = Field(
        default=DEFAULT_BUCKET_MB, ge=MIN_BUCKET_MB, le=MAX_BUCKET_MB,
        description="Bucket size of the bucketed and staged paths, MB (verl update_weights_bucket_megabytes: 2048)",
    )
    delta: bool = Field(
        default=False,
        description="Send only the bytes that changed since the last sync (verl sharded delta sync, slime delta). "
        "Syncs to engines on other GPUs only",
    )
    delta_fraction: float = Field(
        default=DEFAULT_DELTA_FRACTION, gt=0, le=1,
        description="delta: share of the bytes that changed per sync (assumed 2%; the sources report 1-3% in bf16 "
        "RL runs)",
    )
    per_tensor_ms: float | None = Field(
        default=None, ge=1e-6, le=60_000,
        description="Per-tensor paths: cost of one call, ms (default 1.65 for per-tensor-nccl, 38 for "
        "per-tensor-rpc: docs/sources.md §4)",
    )
    host_gb_per_s: float | None = Field(
        default=None, ge=0.001, le=10_000,
        description="staged: host-memory bounce rate each way, GB/s (default: the GPUs' PCIe; pageable copies are "
        "far slower)",
    )

    @model_validator(mode="after")
    def _knobs_of_the_path(self) -> WeightSyncSpec:
        problems = []
        # A field at its default is harmless (a resolved dump writes every field); one set to something else is not.
        if self.delta_fraction != DEFAULT_DELTA_FRACTION and not self.delta:
            problems.append("delta_fraction is read only with delta: true")
        if self.per_tensor_ms is not None and not self.path.startswith("per-tensor"):
            problems.append(f"per_tensor_ms is read only by the per-tensor paths (path is {self.path})")
        if self.host_gb_per_s is not None and self.path != "staged":
            problems.append(f"host_gb_per_s is read only by path: staged (path is {self.path})")
        if self.bucket_mb != DEFAULT_BUCKET_MB and self.path.startswith("per-tensor"):
            problems.append(f"bucket_mb is not read by path {self.path} (one call per tensor, no buckets)")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def bucket_bytes(self) -> float:
        return self.bucket_mb * 1e6

    @property
    def changed_fraction(self) -> float | None:
        """Share of the bytes a sync moves under delta sync (None: every byte)."""
        return self.delta_fraction if self.delta else None


class WeightSyncOptions(Strict):
    """How the actor's weights reach the rollout engines (rl_base.weight_sync_time, costs/weight_sync.py)."""

    weight_sync: WeightSyncSpec = Field(
        default_factory=WeightSyncSpec,
        description="The sync path: bucketed / per-tensor / staged, senders, bucket size, delta sync",
    )

    @model_validator(mode="before")
    @classmethod
    def _moved_bucket_key(cls, data):
        if isinstance(data, dict) and "weight_sync_bucket_mb" in data:
            raise ValueError("weight_sync_bucket_mb moved: write weight_sync: {bucket_mb: ...}")
        return data


class SyncDispatchOptions(Strict):
    """How a batch generated at once is split across the engines (schedules/dispatch.py)."""

    dispatch: Literal["round-robin", "chunked", "least-loaded"] = Field(
        default="chunked", description="How samples are split across engines (verl: chunked by DP rank)"
    )


class HybridSwitchOptions(Strict):
    """The switch of shared GPUs between training and generation (costs/transition.py, docs/long-context.md)."""

    reshard: Literal["3d-hybrid-engine", "hybridflow-v", "naive"] = Field(
        default="3d-hybrid-engine", description="Train->generate weight reshard method (HybridFlow Table 2)"
    )
    switch_overhead_s: float = Field(
        default=0.295, ge=0,
        description="Fixed host cost of each train->generate switch (Python gc and CUDA cache emptying; verl "
        "measured 295 ms of gc, docs/sources.md §4); the weight gather, engine load, wake-up and graph capture "
        "are priced on top from the model and hardware (docs/long-context.md)",
    )
    engine_sleep_level: Literal[1, 2] = Field(
        default=1,
        description="Engine sleep mode between generations: 1 backs its weights up in host memory (PCIe both "
        "ways; verl's call), 2 drops them (docs/sources.md §12)",
    )


class AsyncBatchOptions(Strict):
    """The asynchronous trainer's batch and AReaL's admission bound (fully-async, verl-v1).

    A spec using these also has `staleness_threshold` (a field, or None where the schedule has no verl
    fully_async rule): `eta` is the staleness knob in effect.
    """

    consumer_batch_size: int | None = Field(
        default=None, gt=0, le=MAX_PROMPTS_PER_STEP,
        description="AReaL: prompt groups per trainer step (default algorithm.prompts_per_step; with verl's "
        "require_batches / ppo_mini_batch_size: their product)",
    )
    max_head_offpolicyness: float | None = Field(
        default=4, ge=0, le=MAX_STALENESS_STEPS,
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
    trigger_parameter_sync_step: int = Field(
        default=1, gt=0, le=MAX_STEPS,
        description="Trainer steps between weight syncs (verl)"
    )
    require_batches: int | None = Field(
        default=None, gt=0, le=MAX_EPOCHS,
        description="verl: ppo_mini_batch_size batches the trainer takes per step, each one optimizer update: "
        "a step consumes require_batches x ppo_mini_batch_size groups and makes require_batches x epochs "
        "updates (algorithm.mini_batches then only sizes a mini-batch when ppo_mini_batch_size is unset)",
    )
    ppo_mini_batch_size: int | None = Field(
        default=None, gt=0, le=MAX_PROMPTS_PER_STEP,
        description="verl actor.ppo_mini_batch_size in prompts (x rollout.n samples); default "
        "algorithm.prompts_per_step / algorithm.mini_batches",
    )
    resplit: ResplitSpec | None = Field(
        default=None, description="Re-plan the trainer/rollout split during the run (Libra-style; null: fixed)"
    )

    def batch_knob_conflict(self) -> str | None:
        """Why consumer_batch_size contradicts verl's require_batches / ppo_mini_batch_size (None: it does not)."""
        verl_batch = self.require_batches is not None or self.ppo_mini_batch_size is not None
        if not verl_batch or self.consumer_batch_size is None:
            return None
        want = (self.require_batches or 1) * (self.ppo_mini_batch_size or 0)
        if self.consumer_batch_size == want:
            return None
        return ("AReaL's consumer_batch_size and verl's require_batches / ppo_mini_batch_size both set the prompt "
                "groups per trainer step" + (f" and disagree ({self.consumer_batch_size} vs {want})" if want else "")
                + "; set one")

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
