"""The simulator's public API: the stable simulation surface the tools in `rlsim.tools` (and users) build on.

Every name is loaded lazily (PEP 562), on first use: importing this module costs nothing, and
`from rlsim.sim.api import Scenario` loads the scenario schema but not the engine, SimPy or pandas.

- Scenarios: `load_scenario(path, overrides)`, `parse_scenario`, `read_yaml`, `apply_overrides`,
  `dump_scenario`, `validation_problems`, `sanity_warnings` (valid but implausible values),
  `max_sequence_tokens` (the longest prompt + response a workload produces), the `Scenario` model; bad
  input raises `ScenarioError` (a list of `Problem`: file, dotted path, what is wrong).
- Scenario sections the tools build on: `ScheduleSpec` (each spec declares its traits: trains, synchronous,
  head start, staleness bound with its `StalenessUnit`), `PoolSpec`, `RoleName`, `Strict`, `placement_rows`,
  `LengthLaw` (a calibration block's length law), `profile_override_fields`; length and latency
  distributions draw their own values and declare their shape (`sample`, `expectation`, `shape_fields`, ...).
- Runs: `simulate(scenario) -> Result`; `SimulationStalled` when a run stops making progress; `describe_mode`
  (the line saying an aggregate run ran, or fell back to exact, from `Result.meta`).
- Hardware and models: `shipped_dir` (shipped scenarios and profiles), `load_profile`, `available_profiles`,
  `HardwareProfile`, `profile_numeric_fields`, `resolve_preset`, `preset_names`, `ModelShape`.
- Results: `measured_window`, `clip_to_window`.

Two smaller surfaces sit beside it: `rlsim.sim.costs` (pure cost functions, for pricing one operation outside
a run) and `rlsim.sim.inputs` (reading what users type: did-you-mean, bounded reads, the bounds on numbers,
name spellings). tests/test_architecture.py pins the three lists of names, so growth is a conscious change.
"""

from __future__ import annotations

from rlsim._lazy import lazy_exports

_WHERE = {
    # scenarios
    "load_scenario": "rlsim.sim.scenario.loader",
    "parse_scenario": "rlsim.sim.scenario.loader",
    "read_yaml": "rlsim.sim.scenario.loader",
    "apply_overrides": "rlsim.sim.scenario.loader",
    "dump_scenario": "rlsim.sim.scenario.loader",
    "validation_problems": "rlsim.sim.scenario.loader",
    "sanity_warnings": "rlsim.sim.scenario.sanity",
    "max_sequence_tokens": "rlsim.sim.scenario.checks",
    "Scenario": "rlsim.sim.scenario.schema",
    "ScenarioError": "rlsim.sim.scenario.errors",
    "Problem": "rlsim.sim.scenario.errors",
    # scenario sections the tools build on (the plan space, sweeps, sensitivity, calibration)
    "ScheduleSpec": "rlsim.sim.scenario.schema",
    "StalenessUnit": "rlsim.sim.staleness",
    "PoolSpec": "rlsim.sim.scenario.schema",
    "RoleName": "rlsim.sim.scenario.schema",
    "Strict": "rlsim.sim.scenario.schema",
    "profile_override_fields": "rlsim.sim.scenario.schema",
    "placement_rows": "rlsim.sim.scenario.placement",
    "LengthLaw": "rlsim.sim.scenario.calibration",
    # runs
    "simulate": "rlsim.sim.simulate",
    "Result": "rlsim.sim.simulate",
    "SimulationStalled": "rlsim.sim.simulate",
    "describe_mode": "rlsim.sim.aggregate",
    # hardware and models
    "shipped_dir": "rlsim.sim.paths",
    "load_profile": "rlsim.sim.hardware",
    "available_profiles": "rlsim.sim.hardware",
    "HardwareProfile": "rlsim.sim.hardware",
    "profile_numeric_fields": "rlsim.sim.hardware",
    "resolve_preset": "rlsim.sim.model_shapes",
    "preset_names": "rlsim.sim.model_shapes",
    "ModelShape": "rlsim.sim.model_shapes",
    # results
    "clip_to_window": "rlsim.sim.results.metrics",
    "measured_window": "rlsim.sim.results.metrics",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
