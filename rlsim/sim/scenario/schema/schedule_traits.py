"""What a schedule is, as one typed record (`ScheduleTraits`), and its option groups asked for by type.

Every schedule spec (schema/schedule.py) declares its traits on `TaggedSpec`; `spec.traits` gathers them, so a
check or a tool asks the spec instead of matching the kind's name. `spec.options(Group)` hands out the spec's
option group `Group` (schema/schedule_options.py): the spec itself where it offers the group, else what the
group means for a schedule without it (`ABSENT_OPTIONS`, declared once here), so no caller restates a default
with `getattr(spec, "knob", default)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeVar

from rlsim.sim.scenario.schema.base import Strict
from rlsim.sim.scenario.schema.schedule_options import (
    AsyncRolloutOptions,
    HybridSwitchOptions,
    SyncDispatchOptions,
    TrainingOptions,
    WeightSyncOptions,
)
from rlsim.sim.staleness import VERSIONS, Staleness


@dataclass(frozen=True)
class ScheduleTraits:
    """A schedule's static traits (each documented on `TaggedSpec`)."""

    trains: bool
    replaces_failed: bool
    synchronous: bool
    overlaps_training: bool
    batch_at_once: bool
    head_start_steps: int
    staleness_bound: Staleness | None
    token_staleness: bool


# What an option group means for a schedule that does not offer it.
ABSENT_OPTIONS = {
    TrainingOptions: TrainingOptions(),  # no trainer options: every weight trained, log-probs recomputed
    WeightSyncOptions: WeightSyncOptions(),
    SyncDispatchOptions: SyncDispatchOptions(),
    AsyncRolloutOptions: AsyncRolloutOptions(),  # no group-affinity routing
    # No switch options: the schedule's GPUs switch only when re-split, with no fixed host cost per switch.
    HybridSwitchOptions: HybridSwitchOptions(switch_overhead_s=0.0),
}

Group = TypeVar("Group")


def options_of(spec, group: type[Group]) -> Group:
    """`spec` as option group `group`, or the group's meaning for a schedule without it."""
    if isinstance(spec, group):
        return spec
    return ABSENT_OPTIONS[group]


class TaggedSpec(Strict):
    """The tag first: a spec's `kind` leads its option groups' fields (the schema, scenario.resolved.yaml).

    Every spec declares its schedule's static traits; the checks and the tools (run, sweep, plan) ask the
    spec instead of matching the kind's name:

    - `trains`: an RL schedule (generation-only pushes batches through the engines and stops there);
    - `replaces_failed`: a failed sample is dropped and relaunched, never trained (the asynchronous
      rollout loops);
    - `synchronous`: generation and training never overlap (no head start, nothing off-policy);
    - `overlaps_training`: the rollout engines generate while the trainer trains, so they need GPUs of their
      own and no other role may share them (placement checks);
    - `batch_at_once`: each step's batch is generated at once and waited for (aggregate mode subsamples its
      tail); the asynchronous loops keep groups in flight instead;
    - `head_start_steps`: trainer steps' worth of batches generation may finish before the trainer takes
      its first one; measuring steps before they are drained rates the pipeline's fill, so run, sweep and
      plan warm up 1 + this many steps;
    - `staleness_bound`: the off-policy bound in its unit (rlsim.sim.staleness): 0 versions for a synchronous
      schedule, None where nothing bounds it;
    - `token_staleness`: sequences carry tokens of several versions, so steps report staleness per token.

    `traits` gathers them in one record (schema/schedule_traits.py); `options(Group)` hands out an option group.
    """

    kind: str

    trains: ClassVar[bool] = True
    replaces_failed: ClassVar[bool] = False
    synchronous: ClassVar[bool] = False
    overlaps_training: ClassVar[bool] = False
    batch_at_once: ClassVar[bool] = False

    @property
    def head_start_steps(self) -> int:
        return 0

    @property
    def token_staleness(self) -> bool:
        return False

    @property
    def traits(self) -> ScheduleTraits:
        return ScheduleTraits(
            trains=self.trains, replaces_failed=self.replaces_failed, synchronous=self.synchronous,
            overlaps_training=self.overlaps_training, batch_at_once=self.batch_at_once,
            head_start_steps=self.head_start_steps, staleness_bound=self.staleness_bound,
            token_staleness=self.token_staleness)

    def optimizer_updates(self, algo) -> int:
        """Optimizer updates per trainer step, epochs included: algorithm.mini_batches an epoch."""
        return algo.mini_batches * algo.epochs

    def options(self, group: type[Group]) -> Group:
        """This schedule's option group `group` (the spec itself), or what it means where the schedule has none."""
        return options_of(self, group)

    @property
    def staleness_bound(self) -> Staleness | None:
        return Staleness(0, VERSIONS) if self.synchronous else None
