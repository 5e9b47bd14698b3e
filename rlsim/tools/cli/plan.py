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
    """The search's progress: candidates settled (bounded or screened out, or simulated through their last
    rung) of a total fixed up front, or for `--target` cluster sizes decided; so the ETA holds."""

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
    space: Annotated[Path | None, typer.Option("--space", help="Space YAML: what may vary (scenarios/plan/*.yaml); "
                                               "optional with --target")] = None,
    target: Annotated[str | None, typer.Option(
        "--target", help="Size the cluster: tokens_per_s=V, step_time_s=V or steps=N,deadline_h=H")] = None,
    gpu: Annotated[list[str] | None, typer.Option(
        "--gpu", help="With --target: a GPU type to size, TYPE[:MAX GPUs] (repeatable; default the scenario's, "
        "max 64)")] = None,
    budget_usd_per_hour: Annotated[float | None, typer.Option(help="Most $ per hour a cluster may cost")] = None,
    max_gpus: Annotated[int | None, typer.Option(help="Most GPUs a cluster may have")] = None,
    objective: Annotated[ObjectiveName, typer.Option(help="What to maximise", case_sensitive=False)] =
    ObjectiveName.throughput,
    backend: Annotated[BackendName, typer.Option(help="Where candidates run", case_sensitive=False)] =
    BackendName.local,
    workers: Annotated[int | None, typer.Option(help="Worker processes (default: all cores)")] = None,
    ray: Annotated[str | None, typer.Option(
        "--ray", help="Spread the candidate simulations over this Ray cluster (HOST:PORT or auto; implies "
        "--backend ray)")] = None,
    exact: Annotated[bool, typer.Option(
        "--exact", help="No pruning: simulate every candidate exactly (slower; the reference a pruned plan "
        "matches)")] = False,
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
    backend_name = "ray" if ray is not None else backend.value
    if target is not None:
        return _size(path, target, gpu or [], space, out, tuple(set_ or ()), backend_name, workers, seed, quiet,
                     not exact, ray)
    if gpu:
        fail(["--gpu: goes with --target (the GPU types to size)"])
    if space is None:
        fail(["--space: required unless --target is given (e.g. --target tokens_per_s=20000 --gpu h100-sxm)"])
    start = time.perf_counter()
    bar = item_bar(quiet)
    progress = _BarProgress(bar)
    bar.begin("plan", unit="points")
    try:
        spec = load_space(space)
        out_dir = out or Path("runs") / f"{path.stem}-plan"
        outcome = make_plan(path, spec, out_dir, objective.value, tuple(set_ or ()), backend_name, workers, seed,
                            max_gpus, budget_usd_per_hour, progress, on_backend_ready=bar.__enter__,
                            prune=not exact, ray_address=ray, flag="--ray" if ray is not None else "RAY_ADDRESS")
    except ScenarioError as exc:
        bar.close()
        fail(exc.lines())
    finally:
        bar.close()
    result = outcome.result
    _print_recommendations(recommendations(result, objective.value, spec.search.top_k))
    console.print(result.pruning.line(), highlight=False)
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


def _size(path: Path, target_text: str, gpus: list[str], space_path: Path | None, out: Path | None,
          overrides: tuple[str, ...], backend: str, workers: int | None, seed: int | None, quiet: bool,
          prune: bool = True, ray: str | None = None) -> None:
    """`--target`: per GPU type, the smallest cluster and its cheapest layout reaching the target."""
    from rlsim.sim.api import apply_overrides, available_profiles, read_yaml
    from rlsim.tools.cli.progress import item_bar
    from rlsim.tools.plan import load_space
    from rlsim.tools.plan.screen import Pruning
    from rlsim.tools.plan.sizing import checked_apart_from_fit, parse_gpu, parse_target, size_cluster
    from rlsim.tools.plan.sizing_report import recommendation, verdict_lines, write_sizing

    start = time.perf_counter()
    try:
        tgt = parse_target(target_text)
        known = available_profiles()
        types = [parse_gpu(g, known) for g in gpus]
        space = load_space(space_path) if space_path is not None else None
        checked_apart_from_fit(path, overrides)  # need not fit its own cluster: the sizing finds one that does
        if not types:
            pools = apply_overrides(read_yaml(path), overrides, str(path))["cluster"]["pools"]
            types = [parse_gpu(h, known) for h in dict.fromkeys(p["hardware"] for p in pools.values())]
    except ValueError as exc:
        fail([str(exc)])
    except ScenarioError as exc:
        fail(exc.lines())
    out_dir = out or Path("runs") / f"{path.stem}-sizing"
    bar = item_bar(quiet)
    bar.begin("plan", unit="sizes")
    bar.__enter__()
    try:
        sizings = size_cluster(path, tgt, types, space, overrides, backend, workers, seed, _BarProgress(bar),
                               prune, out_dir, ray, "--ray" if ray is not None else "RAY_ADDRESS")
    except ScenarioError as exc:
        bar.close()
        fail(exc.lines())
    finally:
        bar.close()
    paths = write_sizing(sizings, tgt, out_dir)
    _print_sizing(sizings, tgt)
    console.print("\n" + recommendation(sizings, tgt), highlight=False)
    console.print("\n".join(verdict_lines(sizings, tgt)), highlight=False)
    pruning = Pruning(enabled=prune)
    for sz in sizings:
        pruning.add(sz.pruning)
    console.print(pruning.line(), highlight=False)
    console.print(f"{time.perf_counter() - start:.1f} s wall; wrote {out_dir}/ (plan.csv, {paths['png'].name}, "
                  "sizing.md)", highlight=False)
    if not any(sz.answer for sz in sizings):
        raise typer.Exit(1)


def _print_sizing(sizings, tgt) -> None:
    """The answer per GPU type and its runner-up layouts, in one table no wider than 80 columns."""
    from rich import box
    from rich.table import Table

    from rlsim.tools.plan.sizing_report import text_rows

    table = Table(title=f"smallest cluster for {tgt.text}", box=box.SIMPLE_HEAD, width=min(80, console.width),
                  pad_edge=False)
    for col in ("GPU", "#", "GPUs", "layout", "step s", "tok/s", "±", "$/M tok"):
        table.add_column(col, justify="left" if col in ("GPU", "layout") else "right",
                         overflow="fold", no_wrap=col not in ("GPU", "layout"))
    for cells in text_rows(sizings):
        table.add_row(*cells)
    console.print(table)
    console.print("tg/tp: generation/training tensor parallel (data parallel over the rest); sync, 1-off, "
                  "async: HybridFlow, one-step-off, fully async (eta: staleness bound); ±: one band, seed "
                  "spread and model error combined (its parts below)", highlight=False)
