"""Scenarios: the pydantic schema, YAML loading with `--set` overrides, checks and the resolved dump."""

from rlsim.sim.scenario.checks import check_scenario
from rlsim.sim.scenario.errors import Problem, ScenarioError
from rlsim.sim.scenario.loader import apply_overrides, dump_scenario, load_scenario, parse_scenario
from rlsim.sim.scenario.schema import Scenario

__all__ = [
    "Problem",
    "Scenario",
    "ScenarioError",
    "apply_overrides",
    "check_scenario",
    "dump_scenario",
    "load_scenario",
    "parse_scenario",
]
