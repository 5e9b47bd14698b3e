"""Warm-up that covers an asynchronous schedule's head start, so a plan compares layouts at steady state.

While the trainer waits for its first batch, generation runs ahead by up to `head_start_batches`
batches; the next steps train on that backlog faster than generation refills it, so measuring them
rates a generation-bound layout at its trainer's speed. On AReaL's 1.5B cluster (docs/sources.md §9),
ten steps measured after one warm-up step put 64+64 H800 ahead of 96+32; measured after the head
start, 96+32 leads by 10-19% (docs/planning.md, "Planning a cluster").
"""

from __future__ import annotations

from pydantic import TypeAdapter, ValidationError

from rlsim.sim.api import ScheduleSpec

_SCHEDULE = TypeAdapter(ScheduleSpec)


def head_start_batches(schedule: dict) -> int:
    """Batches generation may finish ahead of the trainer, as the schedule's spec declares it
    (`head_start_steps`); 0 for synchronous schedules or a bad mapping."""
    try:
        spec = _SCHEDULE.validate_python(schedule)
    except ValidationError:
        return 0  # the scenario checks report it
    return spec.head_start_steps


def steady_state_warmup(schedule: dict, warmup_steps: int) -> int:
    """The first step plus one step per batch of head start, or the scenario's own warm-up if longer."""
    return _warmup(head_start_batches(schedule), warmup_steps)


def _warmup(ahead: int, warmup_steps: int) -> int:
    return max(warmup_steps, 1 + ahead) if ahead else warmup_steps


def _explicit_warmup(overrides) -> int | None:
    """The warm-up the user gave on the command line or in a sweep (`warmup_steps=N`), if any (last wins)."""
    value = None
    for item in overrides or ():
        key, sep, raw = str(item).partition("=")
        if sep and key.strip() == "warmup_steps":
            try:
                value = int(raw.strip())
            except ValueError:
                return None  # the loader reports it
    return value


def too_short(need: int, warmup: int, kind: str) -> str:
    return (f"warning: {kind} needs {need} warm-up steps to reach steady staleness and in-flight counts; "
            f"warmup_steps={warmup} measures the fill of the pipeline (set warmup_steps={need})")


def steady_scenario(scn, overrides=()):
    """(scenario, note): an asynchronous scenario warmed up to steady state, unless the command line gave
    warmup_steps (then honoured, with a warning when too short). The note is one line, or ''."""
    need = _warmup(scn.schedule.head_start_steps, 0)
    if not need:
        return scn, ""
    explicit = _explicit_warmup(overrides)
    if explicit is not None:
        return scn, too_short(need, explicit, scn.schedule.kind) if explicit < need else ""
    if scn.warmup_steps >= need:
        return scn, ""
    note = (f"note: {scn.schedule.kind}: warming up {need} steps (not {scn.warmup_steps}) so the measured steps "
            f"are steady state (--set warmup_steps=N to choose)")
    return scn.model_copy(update={"warmup_steps": need}), note


def steady_overrides(base: dict, overrides: tuple[str, ...],
                     source: str = "<sweep>") -> tuple[tuple[str, ...], str, int]:
    """A sweep point's overrides plus `warmup_steps=N` for steady state (or a warning if the point sets it
    shorter), and the steps it needs; unchanged for synchronous schedules and points the overrides cannot build."""
    from rlsim.sim.api import ScenarioError, apply_overrides

    try:
        data = apply_overrides(base, overrides, source)
    except ScenarioError:
        return overrides, "", 0  # the point reports it
    schedule = data.get("schedule") if isinstance(data, dict) else None
    if not isinstance(schedule, dict):
        return overrides, "", 0
    need = steady_state_warmup(schedule, 0)
    explicit = _explicit_warmup(overrides)
    if not need:
        return overrides, "", 0
    if explicit is not None:
        return overrides, too_short(need, explicit, str(schedule.get("kind"))) if explicit < need else "", need
    have = data.get("warmup_steps") or 0
    if isinstance(have, int) and have >= need:
        return overrides, "", need
    return (*overrides, f"warmup_steps={need}"), "", need
