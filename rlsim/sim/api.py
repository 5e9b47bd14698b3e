"""The simulator's public API: what the tools in `rlsim.tools` (and users) build on.

Every name is loaded lazily (PEP 562), on first use: importing this module costs nothing, and
`from rlsim.sim.api import Scenario` loads the scenario schema but not the engine, SimPy or pandas.

- Scenarios: `load_scenario(path, overrides)`, `parse_scenario`, `read_yaml`, `apply_overrides`,
  `dump_scenario`, `validation_problems`, `sanity_warnings` (valid but implausible values), the `Scenario`
  model; bad input raises `ScenarioError` (a list of `Problem`: file, dotted path, what is wrong);
  `did_you_mean` / `closest` for a misspelt key or value, `model_problems` (a pydantic error as
  problems), `MAX_CSV_BYTES` (the bound on a read).
- Runs: `simulate(scenario) -> Result`; `SimulationStalled` when a run stops making progress.
- Inputs: `shipped_dir` (shipped scenarios and profiles), `load_profile`, `available_profiles`,
  `HardwareProfile`, `resolve_preset`, `preset_names`, `ModelShape`.
"""

from __future__ import annotations

from importlib import import_module

_WHERE = {
    "load_scenario": "rlsim.sim.scenario.loader",
    "parse_scenario": "rlsim.sim.scenario.loader",
    "read_yaml": "rlsim.sim.scenario.loader",
    "apply_overrides": "rlsim.sim.scenario.loader",
    "dump_scenario": "rlsim.sim.scenario.loader",
    "validation_problems": "rlsim.sim.scenario.loader",
    "sanity_warnings": "rlsim.sim.scenario.sanity",
    "Scenario": "rlsim.sim.scenario.schema",
    "ScenarioError": "rlsim.sim.scenario.errors",
    "Problem": "rlsim.sim.scenario.errors",
    "did_you_mean": "rlsim.sim.suggest",
    "closest": "rlsim.sim.suggest",
    "model_problems": "rlsim.sim.scenario.messages",
    "MAX_CSV_BYTES": "rlsim.sim.limits",
    "simulate": "rlsim.sim.simulate",
    "Result": "rlsim.sim.simulate",
    "SimulationStalled": "rlsim.sim.simulate",
    "shipped_dir": "rlsim.sim.paths",
    "load_profile": "rlsim.sim.hardware",
    "available_profiles": "rlsim.sim.hardware",
    "HardwareProfile": "rlsim.sim.hardware",
    "resolve_preset": "rlsim.sim.model_shapes",
    "preset_names": "rlsim.sim.model_shapes",
    "ModelShape": "rlsim.sim.model_shapes",
}

__all__ = sorted(_WHERE)

def __getattr__(name: str):
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'rlsim.sim.api' has no attribute {name!r}")
    value = getattr(import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
