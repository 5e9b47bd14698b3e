"""`rlsim plan`: search placement, parallelism and asynchrony for a scenario within a space, and recommend.

space (what may vary) -> candidates (scenario mappings, checked in memory) -> bounds and successive
halving on a sweep backend -> plan.csv, Pareto front, ready-to-run YAMLs and explanations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlsim.tools.plan.candidates import Candidate, enumerate_candidates
from rlsim.tools.plan.search import Progress, SearchResult, run_search
from rlsim.tools.plan.space import Objective, Space, load_space, parse_space

__all__ = ["Candidate", "PlanOutcome", "Space", "enumerate_candidates", "load_space", "make_plan", "parse_space",
           "run_search"]


@dataclass
class PlanOutcome:
    result: SearchResult
    paths: dict[str, Path]
    objective: str
    enumerate_s: float


def make_plan(scenario: str | Path, space: Space, out: Path, objective: Objective = "throughput",
              overrides: tuple[str, ...] = (), backend: str = "serial", workers: int | None = None,
              seed: int | None = None, max_gpus: int | None = None, budget: float | None = None,
              progress: Progress | None = None, on_backend_ready: Callable[[], None] | None = None,
              prune: bool = True, ray_address: str | None = None, flag: str = "--ray") -> PlanOutcome:
    """Plan around the scenario file: every problem of the inputs raises ScenarioError before anything runs.

    Every simulation is recorded under `out/points/` as it finishes; a rerun of the same plan reads them
    back (a plan killed at any instant resumes). `prune=False`: no bounds, no screen (`--exact`)."""
    import time

    from rlsim.sim.api import apply_overrides, load_scenario, read_yaml
    from rlsim.tools.plan.report import write_plan
    from rlsim.tools.sweep.runner import make_backend
    from rlsim.tools.sweep.store import ResultStore

    path = Path(scenario)
    base_scn = load_scenario(path, overrides)  # the scenario itself must be valid
    base = apply_overrides(read_yaml(path), overrides, str(path))
    c = space.constraints
    max_gpus = max_gpus if max_gpus is not None else c.max_gpus
    budget = budget if budget is not None else c.budget_usd_per_hour
    start = time.process_time()
    cands = enumerate_candidates(base, space, path.resolve().parent, max_gpus, budget)
    enumerate_s = time.process_time() - start
    opened = make_backend(backend, workers, ray_address, flag)  # a bad backend or address: before `out` is made
    store = ResultStore(out)
    with opened:
        result = run_search(cands, objective, c, space.search, backend, workers,
                            base_scn.seed if seed is None else seed, path.resolve().parent, progress, on_backend_ready,
                            prune=prune, store=store, opened=opened)
    result.cpu_s += enumerate_s
    paths = write_plan(result, Path(out), objective, base_scn.steps, space.search.top_k)
    return PlanOutcome(result, paths, objective, enumerate_s)
