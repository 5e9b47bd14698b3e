"""rlsim: a discrete-event simulator of RL fine-tuning clusters for LLMs.

Python API mirrors the CLI: `load_scenario(path, overrides=[...])`, `simulate(scenario) -> Result`
with `.summary` (dict), `.steps` and `.timeline` (DataFrames).
"""

__version__ = "0.1.0"

from rlsim.sim.scenario.errors import ScenarioError  # noqa: E402
from rlsim.sim.scenario.loader import load_scenario  # noqa: E402
from rlsim.sim.simulate import Result, simulate  # noqa: E402

__all__ = ["Result", "ScenarioError", "__version__", "load_scenario", "simulate"]
