"""Scenario section `schedule`: one spec per schedule family."""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails

from rlsim.sim.limits import (  # sane upper bounds, shared with the file readers
    MAX_PROMPTS_PER_STEP,
    MAX_SAMPLES_PER_PROMPT,
    MAX_STALENESS_STEPS,
    MAX_STEPS,
)
from rlsim.sim.scenario.schema.algorithm import AlgorithmSpec
from rlsim.sim.scenario.schema.schedule_options import (
    AsyncBatchOptions,
    AsyncRolloutOptions,
    ElasticSpec,
    HybridSwitchOptions,
    ReplayBufferSpec,
    SwitchSpec,
    SyncDispatchOptions,
    TailReshardSpec,
    TrainingOptions,
    WeightSyncOptions,
)
from rlsim.sim.scenario.schema.schedule_traits import TaggedSpec
from rlsim.sim.staleness import TRAINER_STEPS, VERSIONS, Staleness

# ---------------------------------------------------------------- schedule

# The words verl, ROLL and AReaL users use for a schedule or a placement, and rlsim's name for each
# (matched after lower-casing and turning `_` and spaces into `-`). A GRPO/DAPO job has no critic or
# reward model to split off, so `split` there means what verl users mean by it: rollout on GPUs of its
# own, the trainer on the rest (`disaggregated`); see rlsim/sim/scenario/placement.py.
SCHEDULE_ALIASES = {
    "sync": "hybridflow", "synchronous": "hybridflow", "hybrid-flow": "hybridflow", "verl": "hybridflow",
    "on-policy": "hybridflow", "ray-trainer": "hybridflow",
    "one-step-off-policy": "one-step-off", "one-step-off-async": "one-step-off", "one-off": "one-step-off",
    "fully-async-policy": "fully-async", "async": "fully-async", "asynchronous": "fully-async",
    "areal": "fully-async", "decoupled": "fully-async", "decoupled-ppo": "fully-async",
    "roll-async": "roll", "async-generation": "roll",
}
PLACEMENT_ALIASES = {
    "colocated": "colocate", "hybrid": "colocate", "hybrid-engine": "colocate", "shared": "colocate",
    "collocate": "colocate", "collocated": "colocate",
    "split-placement": "split",
    "separate": "standalone", "separated": "standalone",
    "disaggregate": "disaggregated", "decoupled": "disaggregated", "disagg": "disaggregated",
    "standalone-rollout": "disaggregated", "rollout-apart": "disaggregated",
}


def canonical_name(value, aliases: dict[str, str]):
    """rlsim's name for a user's spelling (`fully_async` -> `fully-async`); other values unchanged."""
    if not isinstance(value, str):
        return value
    key = value.strip().lower().replace("_", "-").replace(" ", "-")
    return aliases.get(key, key)


def _canonical_kind(value):
    if isinstance(value, dict) and "kind" in value:
        return {**value, "kind": canonical_name(value["kind"], SCHEDULE_ALIASES)}
    return value



# AReaL with eta unbounded: in flight at most 4 x consumer_batch_size (schedules/fully_async.py EtaAdmission).
UNBOUNDED_HEAD_START_STEPS = 4


class GenerationOnlySpec(SyncDispatchOptions, TaggedSpec):
    """Each step pushes one batch of prompts through the rollout engines; no training."""

    kind: Literal["generation-only"]

    trains: ClassVar[bool] = False
    synchronous: ClassVar[bool] = True
    batch_at_once: ClassVar[bool] = True


class HybridFlowSpec(TrainingOptions, WeightSyncOptions, SyncDispatchOptions, HybridSwitchOptions, TaggedSpec):
    """verl / HybridFlow synchronous RL: one step is generate -> forwards -> updates -> weights.

    `placement` is a shortcut that carves one hardware pool into resource pools (verl's
    resource_pool_spec): `colocate` puts every role on all its GPUs; `split` puts actor, rollout and
    reference on one part and critic and reward on the other (NeMo-Aligner style); `standalone`
    gives the actor (with its rollout engines), critic, reference and reward a part each (OpenRLHF
    style). `custom` uses the roles' own `pool` fields: roles on one pool time-share it.
    """

    kind: Literal["hybridflow"]

    synchronous: ClassVar[bool] = True
    batch_at_once: ClassVar[bool] = True
    placement: Literal["colocate", "split", "standalone", "disaggregated", "custom"] = Field(
        default="colocate", description="colocate | split | standalone | disaggregated (rollout apart from the "
        "trainer) | custom; verl/ROLL/AReaL spellings (hybrid, colocated, decoupled, ...) are accepted",
    )
    pool: str | None = Field(default=None, description="Hardware pool the shortcut carves (default: the only pool)")
    placement_gpus: dict[str, int] | None = Field(
        default=None,
        description="GPUs per colocated set, keyed by its first role (split: actor, critic; standalone: actor, "
        "critic, reference, reward); default: an even split",
    )
    judge_scoring: Literal["batch", "sample"] = Field(
        default="batch",
        description="LLM judge: `batch` scores the whole batch after generation (verl); `sample` scores each "
        "response as soon as it finishes, on judge GPUs apart from the rollout's (ROLL's sample-level scheduling)",
    )
    tail_reshard: TailReshardSpec | None = Field(
        default=None, description="Re-shard the rollout to wider engines for the long tail (null: never)"
    )

    @field_validator("placement", mode="before")
    @classmethod
    def _placement_alias(cls, value):
        return canonical_name(value, PLACEMENT_ALIASES)


class OneStepOffSpec(TrainingOptions, WeightSyncOptions, SyncDispatchOptions, TaggedSpec):
    """verl one-step-off: generation of step k+1 overlaps training of step k on disjoint pools.

    The rollout role must sit on its own pool (placement is always `custom`). Weights reach the
    engines by a bucketed NCCL broadcast after every update (`timing_s/sync_rollout_weights`).
    """

    kind: Literal["one-step-off"]
    placement: Literal["custom"] = "custom"

    overlaps_training: ClassVar[bool] = True
    batch_at_once: ClassVar[bool] = True

    @property
    def head_start_steps(self) -> int:
        return 1  # generation of step k + 1 overlaps training of step k

    @property
    def staleness_bound(self) -> Staleness:
        return Staleness(1, VERSIONS)


class FullyAsyncSpec(TrainingOptions, WeightSyncOptions, AsyncRolloutOptions, AsyncBatchOptions, TaggedSpec):
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
    interrupt: Literal["keep", "recompute", "abort-resume", "abort-discard", "drain"] = Field(
        default="recompute",
        description="At a weight update in-flight sequences keep their KV (keep), drop it and re-prefill with the "
        "new weights (recompute, AReaL's interruptible generation), are aborted and resumed from their partial "
        "output (abort-resume, verl partial_rollout), are aborted and restarted from scratch (abort-discard), or "
        "run to completion before the weights load while nothing new is admitted (drain, AReaL's "
        "non-interruptible baseline; verl partial_rollout: false). Default with staleness_threshold: abort-resume",
    )
    staleness_threshold: float | None = Field(
        default=None, ge=0, le=MAX_STALENESS_STEPS,
        description="verl fully_async: a FRACTION; the rollouter may start (1 + staleness_threshold) x "
        "trigger_parameter_sync_step x require_batches x ppo_mini_batch_size prompt groups per weight version. "
        "Setting it selects verl's admission rule instead of AReaL's",
    )
    partial_rollout: bool | None = Field(
        default=None,
        description="verl: true = in-flight generations are interrupted at a sync and resumed after it "
        "(interrupt: abort-resume); false = the sync waits for them to finish (interrupt: drain)",
    )
    in_flight_weight_updates: bool = Field(
        default=False,
        description="NeMo-RL / PipelineRL: new weights are pushed into the running engines without draining; "
        "sequences keep their KV and continue under the new policy (interrupt: keep), so one sequence carries "
        "tokens of several versions. Steps then also report staleness per token",
    )
    max_trajectory_age_steps: int | None = Field(
        default=None, ge=0, le=MAX_STALENESS_STEPS,
        description="NeMo-RL: trajectories whose oldest token is more than this many TRAINER STEPS behind the "
        "trainer are not trained on; admission is bounded the same way, in trainer steps (sets drop_stale: true). "
        "Must be >= trigger_parameter_sync_step - 1: a fresh sample is that old when the trainer takes it",
    )
    sampler: Literal["weight-fifo", "ready-first", "in-order"] | None = Field(
        default=None,
        description="NeMo-RL's staleness sampler: the order a trainer step takes finished prompt groups in. "
        "weight-fifo: generated by the oldest weights first (AReaL's order, the default under its rule); "
        "ready-first: in finish order (verl's queue, the default under staleness_threshold); in-order: in the "
        "order their prompts were dispatched. NeMo-RL's Windowed is the age window itself: "
        "max_trajectory_age_steps",
    )
    abort_stale: bool = Field(
        default=False,
        description="NeMo-RL's early abort: a group still generating whose oldest token is already past the "
        "staleness bound (max_trajectory_age_steps, or drop_stale's max_head_offpolicyness) is aborted when the "
        "trainer looks, instead of finishing only to be dropped; new prompts replace it",
    )
    elastic: ElasticSpec | None = Field(
        default=None,
        description="verl fully_async's dynamic resource scheduling (async_training.use_dynamic_resource_"
        "scheduling): rollout replicas on the trainer's GPUs join generation at a weight push and leave it once "
        "deactivate_ratio of a version's groups are queued (null: the trainer's GPUs only train)",
    )

    replaces_failed: ClassVar[bool] = True
    overlaps_training: ClassVar[bool] = True

    @property
    def token_staleness(self) -> bool:
        return self.in_flight_weight_updates

    @property
    def staleness_bound(self) -> Staleness | None:
        """NeMo-RL's age bound counts trainer steps; AReaL's eta weight versions; verl's fraction is no bound
        on age (None), nor is an unbounded eta."""
        if self.verl_rule:
            return None
        if self.max_trajectory_age_steps is not None:
            return Staleness(self.max_trajectory_age_steps, TRAINER_STEPS)
        if self.max_head_offpolicyness is None:
            return None
        return Staleness(self.max_head_offpolicyness, VERSIONS)

    @property
    def head_start_steps(self) -> int:
        """AReaL admits up to (eta + version + 1) x B (docs/sources.md §7): eta + 1 versions of k trainer steps
        ahead at the start (4 trainer steps with eta unbounded); verl fully_async (1 + staleness_threshold)
        syncs' worth."""
        if self.verl_rule:
            return math.ceil(1 + self.staleness_threshold) * self.trigger_parameter_sync_step
        bound = self.staleness_bound
        return UNBOUNDED_HEAD_START_STEPS if bound is None else bound.batches_ahead(self.trigger_parameter_sync_step)

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
        if (conflict := self.batch_knob_conflict()) is not None:
            _knob_error("consumer_batch_size", self.consumer_batch_size, conflict)
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
        _check_drop_stale(self)
        return self

    @model_validator(mode="after")
    def _nemo_rl_knobs(self) -> FullyAsyncSpec:
        """NeMo-RL's names: in-flight updates keep the KV; the trajectory age bound is AReaL's eta plus a drop."""
        given = self.model_fields_set
        if self.in_flight_weight_updates:
            if "interrupt" in given and self.interrupt != "keep" or self.partial_rollout is not None:
                _knob_error("in_flight_weight_updates", True, "in-flight weight updates keep every sequence running "
                            f"(interrupt: keep); interrupt / partial_rollout say {self.interrupt!r}: set one")
            self.interrupt = "keep"
        k = self.max_trajectory_age_steps
        if k is not None:
            if self.staleness_threshold is not None or "max_head_offpolicyness" in given \
                    and self.max_head_offpolicyness != k:
                _knob_error("max_trajectory_age_steps", k, "NeMo-RL's max_trajectory_age_steps sets the staleness "
                            "bound itself; leave max_head_offpolicyness and staleness_threshold unset")
            sync = self.trigger_parameter_sync_step
            if k < sync - 1:
                _knob_error("max_trajectory_age_steps", k, f"{k} (trainer steps) is below trigger_parameter_sync_step "
                            f"- 1 = {sync - 1}: weights move every {sync} trainer steps, so at the step before a push "
                            f"even the freshest samples are {sync - 1} steps old, all are dropped and the push never "
                            f"comes (the run could never finish); set max_trajectory_age_steps >= {sync - 1} or "
                            f"trigger_parameter_sync_step <= {k + 1}")
            self.max_head_offpolicyness, self.drop_stale = float(k), True
        if self.abort_stale and not self.drop_stale:
            _knob_error("abort_stale", True, "abort_stale aborts what drop_stale would drop: it needs "
                        "max_trajectory_age_steps, or drop_stale with max_head_offpolicyness")
        if self.elastic is not None and self.resplit is not None:
            _knob_error("elastic", True, "elastic replicas and re-splitting both move the trainer's GPUs into "
                        "generation; set one (elastic: null or resplit: null)")
        return self

    @property
    def verl_rule(self) -> bool:
        """verl fully_async's admission rule (staleness_threshold set) instead of AReaL's."""
        return self.staleness_threshold is not None


def _check_drop_stale(spec: AsyncBatchOptions) -> None:
    if spec.drop_stale and spec.max_head_offpolicyness is None:
        _knob_error("drop_stale", True, "drop_stale drops samples older than max_head_offpolicyness versions; "
                    "it needs that bound set (not null, and not verl's staleness_threshold)")


def _knob_error(field: str, value, message: str):
    """Raise a validation error located at `schedule.<field>` (one line: dotted path + what is wrong)."""
    from pydantic_core import PydanticCustomError

    err = PydanticCustomError("value_error", "{error}", {"error": message})
    raise ValidationError.from_exception_data("FullyAsyncSpec", [InitErrorDetails(type=err, loc=(field,), input=value)])


class VerlV1Spec(
    TrainingOptions, WeightSyncOptions, HybridSwitchOptions, AsyncRolloutOptions, AsyncBatchOptions, TaggedSpec
):
    """verl's V1 trainer (docs/advance/v1_async_trainer.md): asynchronous modes on one budget.

    `colocate_async`: generation and training share the actor's GPUs (the rollout role on them) and take
    turns asynchronously: the engines generate until a batch is sampleable, in-flight sequences are
    paused and resumed after the update (partial rollout), the first batch is a warm-up generated before
    any training. `separate_async`: the trainer's GPUs plus standalone rollout GPUs (the rollout role on
    its own pool), as fully-async; with `hybrid_rollout.enable_switch`, trainer GPUs that would wait join generation
    when the decision rule says it pays. verl's knob names: `parameter_sync_step` (trainer steps per
    weight push), `max_off_policy_threshold` (versions), `recompute_logprob` (decoupled PPO on/off).
    It shares fully-async's batch and AReaL admission knobs (AsyncBatchOptions) but not verl fully_async's
    rule (staleness_threshold, partial_rollout) nor NeMo-RL's names: its sequences are always paused and
    resumed with their output (interrupt: keep).
    """

    kind: Literal["verl-v1"]
    placement: Literal["custom"] = "custom"
    trainer_mode: Literal["colocate_async", "separate_async"] = "separate_async"
    parameter_sync_step: int | None = Field(
        default=None, gt=0, le=MAX_STEPS, description="verl V1: trainer steps between weight pushes"
    )
    max_off_policy_threshold: float | None = Field(
        default=None, ge=0, le=MAX_STALENESS_STEPS,
        description="verl V1: the off-policy bound in weight versions (AReaL's eta rule; a sample older than this "
        "many versions is dropped)",
    )
    hybrid_rollout: SwitchSpec = Field(default_factory=SwitchSpec, description="separate_async: GPU lending")
    replay_buffer: ReplayBufferSpec | None = Field(
        default=None,
        description="verl V1's replay buffer: failed, stale (spanning more than max_off_policy_threshold versions) "
        "and DAPO-filtered groups are evicted when the trainer looks and replaced by fresh prompts (null: "
        "rlsim's drop of samples older than max_off_policy_threshold versions, nothing refilled but their slots)",
    )
    interrupt: Literal["keep"] = Field(
        default="keep", description="Partial rollout: paused sequences keep their output and continue"
    )
    switch_overhead_s: float = Field(
        default=0.0, ge=0,
        description="Fixed host cost of each switch between training and generation on the trainer's GPUs "
        "(colocate_async, lending), on top of the modelled transition (default 0; hybridflow's is 0.295)",
    )

    # verl V1 has no verl fully_async staleness_threshold: AReaL's eta rule (max_off_policy_threshold) only.
    staleness_threshold: ClassVar[None] = None
    verl_rule: ClassVar[bool] = False
    # Nor NeMo-RL's early abort and samplers: AReaL's oldest-first order (schedules/fully_async.py).
    abort_stale: ClassVar[bool] = False
    sampler: ClassVar[None] = None
    replaces_failed: ClassVar[bool] = True

    @property
    def overlaps_training(self) -> bool:
        """separate_async generates on GPUs of its own while the trainer trains; colocate_async takes turns."""
        return self.trainer_mode == "separate_async"

    @property
    def staleness_bound(self) -> Staleness | None:
        """max_off_policy_threshold (AReaL's eta) counts weight versions, parameter_sync_step trainer steps each.
        Under verl's replay buffer it is the versions a group may span: a trained group is at most one less
        behind."""
        if self.replay_buffer is not None:
            span = self.max_off_policy_threshold
            return None if span is None else Staleness(int(span) - 1, VERSIONS)
        return None if self.max_head_offpolicyness is None else Staleness(self.max_head_offpolicyness, VERSIONS)

    @property
    def admission_bound(self) -> Staleness | None:
        """The bound admission applies: verl's prefetch window under its replay buffer, else the staleness bound."""
        if self.replay_buffer is not None:
            return Staleness(self.replay_buffer.num_warmup_batches, VERSIONS)
        return self.staleness_bound

    @property
    def head_start_steps(self) -> int:
        """As AReaL's rule: eta + 1 versions of parameter_sync_step trainer steps ahead at the start."""
        bound = self.admission_bound
        return UNBOUNDED_HEAD_START_STEPS if bound is None else bound.batches_ahead(self.trigger_parameter_sync_step)

    @model_validator(mode="after")
    def _verl_v1_names(self) -> VerlV1Spec:
        if (conflict := self.batch_knob_conflict()) is not None:
            _knob_error("consumer_batch_size", self.consumer_batch_size, conflict)
        _check_drop_stale(self)
        if self.parameter_sync_step is not None:
            self.trigger_parameter_sync_step = self.parameter_sync_step
        if self.max_off_policy_threshold is not None:  # verl's max_off_policy_strategy: drop
            self.max_head_offpolicyness, self.drop_stale = self.max_off_policy_threshold, True
        if self.resplit is not None and (self.trainer_mode == "colocate_async" or self.hybrid_rollout.enable_switch):
            _knob_error("resplit", True, "re-splitting moves trainer GPUs into generation for good; it does not "
                        "combine with colocate_async or lending (hybrid_rollout.enable_switch)")
        if self.replay_buffer is not None and self.max_off_policy_threshold is not None \
                and self.max_off_policy_threshold != int(self.max_off_policy_threshold):
            _knob_error("max_off_policy_threshold", self.max_off_policy_threshold, "verl's replay buffer counts the "
                        "weight versions a group spans: a whole number (at least 1)")
        if self.replay_buffer is not None and self.max_off_policy_threshold == 0:
            _knob_error("max_off_policy_threshold", 0, "a group spans at least 1 weight version, so 0 would evict "
                        "every group and the run could never finish; set it to 1 or more (or null)")
        if self.trainer_mode == "colocate_async" and self.hybrid_rollout.enable_switch:
            _knob_error("hybrid_rollout", True, "colocate_async already runs generation on the trainer's GPUs: lending "
                        "(switch) is a separate_async option")
        return self


class RollSpec(TrainingOptions, WeightSyncOptions, AsyncRolloutOptions, TaggedSpec):
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
    async_generation_ratio: float = Field(default=1.0, ge=0, le=MAX_STALENESS_STEPS,
                                          description="alpha (ROLL async_generation_ratio)")
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
    max_concurrent_rollouts: int | None = Field(
        default=None, gt=0, le=MAX_PROMPTS_PER_STEP,
        description="Groups in flight at most (rlsim's cap, named after AReaL's knob)"
    )

    # ROLL pushes weights after every step and has no verl staleness_threshold: fixed, not settable.
    trigger_parameter_sync_step: ClassVar[int] = 1
    staleness_threshold: ClassVar[None] = None
    verl_rule: ClassVar[bool] = False
    drop_stale: ClassVar[bool] = False  # ROLL expires groups by start step instead (schedules/roll.py)
    replaces_failed: ClassVar[bool] = True
    overlaps_training: ClassVar[bool] = True

    @property
    def staleness_bound(self) -> Staleness:
        """alpha in weight versions (ROLL pushes weights after every step: one version per trainer step)."""
        return Staleness(self.async_generation_ratio, VERSIONS)

    @property
    def head_start_steps(self) -> int:
        return math.ceil(self.async_generation_ratio)  # docs/sources.md §8

    def consumer_groups(self, algo: AlgorithmSpec) -> int:
        return algo.prompts_per_step

    def optimizer_updates(self, algo: AlgorithmSpec) -> int:
        return algo.mini_batches * algo.epochs

    @property
    def eta(self) -> float:
        return self.async_generation_ratio


ScheduleSpec = Annotated[
    GenerationOnlySpec | HybridFlowSpec | OneStepOffSpec | FullyAsyncSpec | RollSpec | VerlV1Spec,
    Field(discriminator="kind"),
    BeforeValidator(_canonical_kind),
]


