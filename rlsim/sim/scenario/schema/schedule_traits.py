"""What a schedule is, as one typed record (`ScheduleTraits`), and its option groups asked for by type.

Every schedule spec declares its traits (schema/schedule.py, `_Tagged`); `spec.traits` gathers them, so a
check or a tool asks the spec instead of matching the kind's name. `spec.options(Group)` hands out the spec's
option group `Group` (schema/schedule_options.py): the spec itself where it offers the group, else what the
group means for a schedule without it (`ABSENT_OPTIONS`, declared once here), so no caller restates a default
with `getattr(spec, "knob", default)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from rlsim.sim.scenario.schema.schedule_options import (
    AsyncRolloutOptions,
    HybridSwitchOptions,
    SyncDispatchOptions,
    TrainingOptions,
    WeightSyncOptions,
)
from rlsim.sim.staleness import Staleness


@dataclass(frozen=True)
class ScheduleTraits:
    """A schedule's static traits (each documented on `_Tagged` in schema/schedule.py)."""

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
