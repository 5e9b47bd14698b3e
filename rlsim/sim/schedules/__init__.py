"""One schedule per module; the registry maps `schedule.kind` to its class."""

from __future__ import annotations

from rlsim.sim.schedules.base import Schedule
from rlsim.sim.schedules.fully_async import FullyAsyncSchedule
from rlsim.sim.schedules.generation_only import GenerationOnlySchedule
from rlsim.sim.schedules.hybridflow import HybridFlowSchedule
from rlsim.sim.schedules.one_step_off import OneStepOffSchedule
from rlsim.sim.schedules.roll import RollSchedule
from rlsim.sim.schedules.verl_v1 import VerlV1Schedule

SCHEDULES: dict[str, type[Schedule]] = {
    "generation-only": GenerationOnlySchedule,
    "hybridflow": HybridFlowSchedule,
    "one-step-off": OneStepOffSchedule,
    "fully-async": FullyAsyncSchedule,
    "roll": RollSchedule,
    "verl-v1": VerlV1Schedule,
}


def build_schedule(scenario, env) -> Schedule:
    return SCHEDULES[scenario.schedule.kind](scenario, env)
