"""Warm-up that covers an asynchronous schedule's head start, so a plan compares layouts at steady state.

While the trainer waits for its first batch, generation runs ahead by up to `head_start_batches`
batches; the next steps train on that backlog faster than generation refills it, so measuring them
rates a generation-bound layout at its trainer's speed. On AReaL's 1.5B cluster (docs/sources.md §9),
ten steps measured after one warm-up step put 64+64 H800 ahead of 96+32; measured after the head
start, 96+32 leads by 10-19% (docs/planning.md, "Planning a cluster").
"""

from __future__ import annotations

import math

from pydantic import TypeAdapter, ValidationError

from rlsim.sim.scenario.schema import FullyAsyncSpec, OneStepOffSpec, RollSpec, ScheduleSpec

_SCHEDULE = TypeAdapter(ScheduleSpec)
# AReaL with eta unbounded: in flight at most 4 x consumer_batch_size (FullyAsyncSpec.max_concurrent_rollouts).
UNBOUNDED_AREAL_BATCHES = 4


def head_start_batches(schedule: dict) -> int:
    """Batches generation may finish ahead of the trainer; 0 for synchronous schedules or a bad mapping.

    AReaL admits up to (eta + version + 1) x B (docs/sources.md §7): eta + 1 batches ahead at version 0;
    verl fully_async (1 + staleness_threshold) syncs' worth; one-step-off one; ROLL ceil(alpha) (§8).
    """
    try:
        spec = _SCHEDULE.validate_python(schedule)
    except ValidationError:
        return 0  # the scenario checks report it
    if isinstance(spec, OneStepOffSpec):
        return 1
    if isinstance(spec, RollSpec):
        return math.ceil(spec.async_generation_ratio)
    if isinstance(spec, FullyAsyncSpec):
        if spec.verl_rule:
            return math.ceil(1 + spec.staleness_threshold) * spec.trigger_parameter_sync_step
        return UNBOUNDED_AREAL_BATCHES if spec.eta is None else math.floor(spec.eta) + 1
    return 0


def steady_state_warmup(schedule: dict, warmup_steps: int) -> int:
    """The first step plus one step per batch of head start, or the scenario's own warm-up if longer."""
    ahead = head_start_batches(schedule)
    return max(warmup_steps, 1 + ahead) if ahead else warmup_steps
