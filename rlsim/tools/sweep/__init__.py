"""Sweeps: grids of scenario variants run serially, on local processes or on Ray, into a resumable store.

    plan = plan_sweep("scenarios/quickstart.yaml", grid=["algorithm.samples_per_prompt=4,8"], seeds=2)
    outcome = run_sweep(plan, "runs/qs-sweep", backend="local")
    outcome.table  # one row per point: point, point_id, replicate, seed, swept keys, summary keys, error
"""

from rlsim.tools.sweep.grid import Point, SweepError, SweepPlan, SweepSpec, derive_seeds, plan_sweep
from rlsim.tools.sweep.plot import pareto_front, plot_pareto, plot_sweep
from rlsim.tools.sweep.runner import PointTask, SweepInterrupted, SweepOutcome, run_point, run_points, run_sweep
from rlsim.tools.sweep.store import ResultStore, load_results

__all__ = [
    "Point",
    "PointTask",
    "ResultStore",
    "SweepError",
    "SweepInterrupted",
    "SweepOutcome",
    "SweepPlan",
    "SweepSpec",
    "derive_seeds",
    "load_results",
    "pareto_front",
    "plan_sweep",
    "plot_pareto",
    "plot_sweep",
    "run_point",
    "run_points",
    "run_sweep",
]
