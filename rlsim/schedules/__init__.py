"""One schedule per module; the registry maps `schedule.kind` to its class."""

from __future__ import annotations

from rlsim.schedules.base import Schedule
from rlsim.schedules.fully_async import FullyAsyncSchedule
from rlsim.schedules.generation_only import GenerationOnlySchedule
from rlsim.schedules.hybridflow import HybridFlowSchedule
from rlsim.schedules.one_step_off import OneStepOffSchedule
from rlsim.schedules.roll import RollSchedule

SCHEDULES: dict[str, type[Schedule]] = {
    "generation-only": GenerationOnlySchedule,
    "hybridflow": HybridFlowSchedule,
    "one-step-off": OneStepOffSchedule,
    "fully-async": FullyAsyncSchedule,
    "roll": RollSchedule,
}


def build_schedule(scenario, env) -> Schedule:
    return SCHEDULES[scenario.schedule.kind](scenario, env)
