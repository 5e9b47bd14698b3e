"""Reading what users type, the simulator's way: a small surface beside the API (rlsim.sim.api).

The tools (importers, calibration, the CLI) read files and names users give them with the same rules the
scenario loader uses, so a bad input reads the same wherever it is given. Loaded lazily (PEP 562).

- Misspellings: `did_you_mean` (a suggestion line for a misspelt key or value), `closest`.
- Problems: `model_problems` (a pydantic error as one `Problem` per field).
- Bounded reads: `read_text_bounded`, `parse_yaml` (`YamlInputError`), `MAX_CSV_BYTES` (the bound on a read).
- Bounds on numbers: `MAX_NUMBER`, `MIN_MAGNITUDE` (a smaller non-zero number is a typo), `MAX_NODES`,
  `MAX_GPUS_PER_NODE` (a cluster).
- Spellings: `canonical_profile` / `unknown_profile_message` (a GPU name as users type it: `NVIDIA H100` ->
  h100-sxm), `canonical_name` with `SCHEDULE_ALIASES` / `PLACEMENT_ALIASES` (verl's, ROLL's, AReaL's words).
"""

from __future__ import annotations

from rlsim._lazy import lazy_exports

_WHERE = {
    "did_you_mean": "rlsim.sim.suggest",
    "closest": "rlsim.sim.suggest",
    "model_problems": "rlsim.sim.scenario.messages",
    "YamlInputError": "rlsim.sim.yaml_input",
    "parse_yaml": "rlsim.sim.yaml_input",
    "read_text_bounded": "rlsim.sim.yaml_input",
    "MAX_CSV_BYTES": "rlsim.sim.limits",
    "MAX_NUMBER": "rlsim.sim.limits",
    "MIN_MAGNITUDE": "rlsim.sim.limits",
    "MAX_NODES": "rlsim.sim.limits",
    "MAX_GPUS_PER_NODE": "rlsim.sim.limits",
    "canonical_profile": "rlsim.sim.hardware",
    "unknown_profile_message": "rlsim.sim.hardware",
    "canonical_name": "rlsim.sim.scenario.schema.schedule",
    "SCHEDULE_ALIASES": "rlsim.sim.scenario.schema.schedule",
    "PLACEMENT_ALIASES": "rlsim.sim.scenario.schema.schedule",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
