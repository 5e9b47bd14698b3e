"""The simulator's public API: what the tools in `rlsim.tools` (and users) build on.

Every name is loaded lazily (PEP 562), on first use: importing this module costs nothing, and
`from rlsim.sim.api import Scenario` loads the scenario schema but not the engine, SimPy or pandas.

- Scenarios: `load_scenario(path, overrides)`, `parse_scenario`, `read_yaml`, `apply_overrides`,
  `dump_scenario`, `validation_problems`, `sanity_warnings` (valid but implausible values), the `Scenario`
  model; bad input raises `ScenarioError` (a list of `Problem`: file, dotted path, what is wrong);
  `did_you_mean` / `closest` for a misspelt key or value, `model_problems` (a pydantic error as
  problems), `MAX_CSV_BYTES` (the bound on a read), `MAX_NUMBER`, `MIN_MAGNITUDE` (a smaller non-zero number
  is a typo), `MAX_NODES`, `MAX_GPUS_PER_NODE` (the bounds on any number, a cluster).
- Runs: `simulate(scenario) -> Result`; `SimulationStalled` when a run stops making progress; `describe_mode`
  (the line saying an aggregate run ran, or fell back to exact, from `Result.meta`).
- Inputs: `shipped_dir` (shipped scenarios and profiles), `load_profile`, `available_profiles`,
  `canonical_profile` / `unknown_profile_message` (a GPU name as users type it: `NVIDIA H100` -> h100-sxm),
  `HardwareProfile`, `profile_numeric_fields`, `resolve_preset`, `preset_names`, `ModelShape`; bounded YAML
  reading (`read_text_bounded`, `parse_yaml`, `YamlInputError`).
- Scenario sections the tools build on: schedule specs and aliases, `PoolSpec`, `RoleName`, `Strict`,
  `placement_rows`, `LengthLaw` (a calibration block's length law), `profile_override_fields`;
  length and latency distributions draw their own values (`sample`, `sampler`, `minimum`, `maximum`,
  `expectation`).
- Pure costs, for pricing one operation outside a run: decode/prefill/serving, linear layers, training
  passes and FLOPs, resharding and weight broadcast, engine kinds and their overheads.
- Results: `measured_window`, `clip_to_window`.
"""

from __future__ import annotations

from rlsim._lazy import lazy_exports

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
    "MAX_NUMBER": "rlsim.sim.limits",
    "MIN_MAGNITUDE": "rlsim.sim.limits",
    "MAX_NODES": "rlsim.sim.limits",
    "MAX_GPUS_PER_NODE": "rlsim.sim.limits",
    "simulate": "rlsim.sim.simulate",
    "Result": "rlsim.sim.simulate",
    "SimulationStalled": "rlsim.sim.simulate",
    "describe_mode": "rlsim.sim.aggregate",
    "shipped_dir": "rlsim.sim.paths",
    "load_profile": "rlsim.sim.hardware",
    "available_profiles": "rlsim.sim.hardware",
    "canonical_profile": "rlsim.sim.hardware",
    "unknown_profile_message": "rlsim.sim.hardware",
    "HardwareProfile": "rlsim.sim.hardware",
    "resolve_preset": "rlsim.sim.model_shapes",
    "preset_names": "rlsim.sim.model_shapes",
    "ModelShape": "rlsim.sim.model_shapes",
    "profile_numeric_fields": "rlsim.sim.hardware",
    "YamlInputError": "rlsim.sim.yaml_input",
    "parse_yaml": "rlsim.sim.yaml_input",
    "read_text_bounded": "rlsim.sim.yaml_input",
    # scenario models and names the tools build on (the plan space, sweeps, sensitivity)
    "FullyAsyncSpec": "rlsim.sim.scenario.schema",
    "OneStepOffSpec": "rlsim.sim.scenario.schema",
    "RollSpec": "rlsim.sim.scenario.schema",
    "ScheduleSpec": "rlsim.sim.scenario.schema",
    "PoolSpec": "rlsim.sim.scenario.schema",
    "RoleName": "rlsim.sim.scenario.schema",
    "Strict": "rlsim.sim.scenario.schema",
    "profile_override_fields": "rlsim.sim.scenario.schema",
    "PLACEMENT_ALIASES": "rlsim.sim.scenario.schema.schedule",
    "SCHEDULE_ALIASES": "rlsim.sim.scenario.schema.schedule",
    "canonical_name": "rlsim.sim.scenario.schema.schedule",
    "placement_rows": "rlsim.sim.scenario.placement",
    "LengthLaw": "rlsim.sim.scenario.calibration",
    # pure cost functions (calibration, planning bounds and reproductions price single operations)
    "ENGINE_KINDS": "rlsim.sim.costs.engine_kinds",
    "engine_overheads": "rlsim.sim.costs.engine_kinds",
    "decode_step_time": "rlsim.sim.costs.generation",
    "linear_layers_time": "rlsim.sim.costs.generation",
    "layer_memory_elements": "rlsim.sim.costs.training_ops",
    "prefill_time": "rlsim.sim.costs.generation",
    "serving_itl": "rlsim.sim.costs.generation",
    "reshard_bytes_per_gpu": "rlsim.sim.costs.resharding",
    "reshard_redundant_bytes_per_gpu": "rlsim.sim.costs.resharding",
    "reshard_time": "rlsim.sim.costs.resharding",
    "SyncSetup": "rlsim.sim.costs.weight_sync",
    "sync_parts": "rlsim.sim.costs.weight_sync",
    "sync_time": "rlsim.sim.costs.weight_sync",
    "train_pass_time": "rlsim.sim.costs.training",
    "training_flops": "rlsim.sim.costs.training",
    # results
    "clip_to_window": "rlsim.sim.results.metrics",
    "measured_window": "rlsim.sim.results.metrics",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
