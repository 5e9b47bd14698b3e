"""Scenarios: the pydantic schema, YAML loading with `--set` overrides, checks and the resolved dump.

Re-exported lazily: importing the package loads none of these until one is used.
"""

from __future__ import annotations

from rlsim._lazy import lazy_exports

_WHERE = {
    "Problem": "rlsim.sim.scenario.errors",
    "Scenario": "rlsim.sim.scenario.schema",
    "ScenarioError": "rlsim.sim.scenario.errors",
    "apply_overrides": "rlsim.sim.scenario.loader",
    "check_scenario": "rlsim.sim.scenario.checks",
    "dump_scenario": "rlsim.sim.scenario.loader",
    "load_scenario": "rlsim.sim.scenario.loader",
    "parse_scenario": "rlsim.sim.scenario.loader",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
