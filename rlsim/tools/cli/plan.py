"""`rlsim plan SCENARIO --space SPACE.yaml`: which GPUs, placement, parallelism and schedule, with evidence.

Exit codes: 0 a plan was made; 1 no candidate met the constraints (plan.csv says why); 2 bad input.
"""

from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from rlsim.sim.api import ScenarioError
from rlsim.tools.cli.common import BackendName, QuietOption, SetOption, console, err, fail, resolve_scenario_path


class ObjectiveName(StrEnum):
    throughput = "throughput"
    cost = "cost"
    time_to_steps = "time-to-steps"


class _BarProgress:
    """The search's progress (points simulated of those planned; the total shrinks as bounds prune)."""

    def __init__(self, bar):
        self.bar, self.total, self.done = bar, 0, 0

    def add(self, n: int) -> None:
        self.total += n
        self.bar.update(self.done, self.total)

    def advance(self) -> None:
        self.done += 1
        self.bar.update(self.done, self.total)


def plan(
    scenario: Annotated[str, typer.Argument(help="Scenario YAML (models, algorithm, workload), or a shipped name")],
    space: Annotated[Path, typer.Option("--space", help="Space YAML: what may vary (scenarios/plan/*.yaml)")],
    budget_usd_per_hour: Annotated[float | None, typer.Option(help="Most $ per hour a cluster may cost")] = None,
    max_gpus: Annotated[int | None, typer.Option(help="Most GPUs a cluster may have")] = None,
    objective: Annotated[ObjectiveName, typer.Option(help="What to maximise", case_sensitive=False)] =
    ObjectiveName.throughput,
    backend: Annotated[BackendName, typer.Option(help="Where candidates run", case_sensitive=False)] =
    BackendName.local,
    workers: Annotated[int | None, typer.Option(help="Worker processes (default: all cores)")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of every simulation and of the sampler")] = None,
    out: Annotated[Path | None, typer.Option(help="Plan folder (default runs/<scenario name>-plan)")] = None,
    set_: SetOption = None,
    quiet: QuietOption = False,
) -> None:
    """Search GPU types and counts, placements, parallelism and schedules; recommend the best, with evidence."""
    from rlsim.tools.cli.progress import item_bar
    from rlsim.tools.plan import load_space, make_plan
    from rlsim.tools.plan.report import recommendations

    for name, value in (("--workers", workers), ("--max-gpus", max_gpus)):
        if value is not None and value < 1:
            fail([f"{name}: expected an integer >= 1, got {value}"])
    if budget_usd_per_hour is not None and budget_usd_per_hour <= 0:
        fail([f"--budget-usd-per-hour: expected a number > 0, got {budget_usd_per_hour}"])
    if seed is not None and seed < 0:
        fail([f"--seed: expected an integer >= 0, got {seed}"])
    path = resolve_scenario_path(scenario)
    start = time.perf_counter()
    bar = item_bar(quiet)
    progress = _BarProgress(bar)
    bar.begin("plan", unit="points")
    try:
        spec = load_space(space)
        out_dir = out or Path("runs") / f"{path.stem}-plan"
        outcome = make_plan(path, spec, out_dir, objective.value, tuple(set_ or ()), backend.value, workers, seed,
                            max_gpus, budget_usd_per_hour, progress, on_backend_ready=bar.__enter__)
    except ScenarioError as exc:
        bar.close()
        fail(exc.lines())
    finally:
        bar.close()
    result = outcome.result
    _print_recommendations(recommendations(result, objective.value, spec.search.top_k))
    counts = _status_counts(result)
    console.print(
        f"{len(result.candidates)} candidates ({counts}); {len(result.evaluations)} simulations, sampler "
        f"{result.sampler}; {time.perf_counter() - start:.1f} s wall, {result.cpu_s:.1f} CPU-s; "
        f"wrote {out_dir}/ (plan.csv, pareto.png, plan.md, recommendations/)",
        highlight=False, soft_wrap=True,
    )
    if not result.ranking:
        err.print("no candidate met the constraints: see the reasons in plan.csv", highlight=False)
        raise typer.Exit(1)


def _status_counts(result) -> str:
    from collections import Counter

    counts = Counter(c.status for c in result.candidates)
    evaluated = len({e.candidate for e in result.evaluations})
    parts = [f"{evaluated} simulated"] + [f"{n} {s}" for s, n in sorted(counts.items()) if s != "feasible"]
    return ", ".join(parts)


def _print_recommendations(recs) -> None:
    from rich import box
    from rich.table import Table

    table = Table(title="rlsim plan: recommendations", box=box.SIMPLE_HEAD)
    for col in ("#", "candidate", "tokens/s", "$/M tokens", "staleness", "idle"):
        table.add_column(col, justify="left" if col == "candidate" else "right")
    for i, (c, e, _) in enumerate(recs, 1):
        s = e.summary
        cost = s.get("cost_per_million_tokens_usd")
        table.add_row(str(i), c.label, f"{s['throughput_tokens_per_s']:,.0f}", "-" if cost is None else f"{cost:.3f}",
                      f"{s.get('staleness_mean', 0):.2f}", f"{s['gpu_idle_fraction']:.0%}")
    console.print(table)
    for i, (c, _, why) in enumerate(recs, 1):
        console.print(f"{i}. {c.label}", highlight=False, soft_wrap=True)
        for line in why:
            console.print(f"   - {line}", highlight=False, soft_wrap=True)
