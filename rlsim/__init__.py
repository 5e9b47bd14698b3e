"""rlsim: a discrete-event simulator of RL fine-tuning clusters for LLMs.

Python API mirrors the CLI: `load_scenario(path, overrides=[...])`, `simulate(scenario) -> Result`
with `.summary` (dict), `.steps` and `.timeline` (DataFrames).

The names are re-exported lazily (PEP 562): `import rlsim` loads no simulator, and importing a tool
module loads only what that tool uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = ["Result", "ScenarioError", "__version__", "load_scenario", "simulate"]

if TYPE_CHECKING:
    from rlsim.sim.api import Result, ScenarioError, load_scenario, simulate


def __getattr__(name: str):
    if name in ("Result", "ScenarioError", "load_scenario", "simulate"):
        from rlsim.sim import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rlsim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
