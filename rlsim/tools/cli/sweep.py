"""`rlsim sweep` and `rlsim plot-sweep`: run a grid of scenario variants, plot its results.

Exit codes: 0 every point ran; 1 some points failed (error rows) or a worker died (re-run to
finish); 2 bad input (one line per problem, nothing run); 130 Ctrl-C (re-run to finish).
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rlsim.sim.api import ScenarioError
from rlsim.tools.cli.common import BackendName, QuietOption, console, err, fail, resolve_scenario_path
from rlsim.tools.cli.reproduce import FigureFormat

if TYPE_CHECKING:  # (rich's tables and bars are imported where used: `rlsim --help` stays fast)
    import pandas as pd
    from rich.table import Table

SUMMARY_COLUMNS = {  # headline metrics of the end-of-sweep table, with short headers (units in the cells)
    "step_time_s": "step\ntime",
    "throughput_tokens_per_s": "tokens\n/s",
    "gpu_idle_fraction": "GPU\nidle",
    "staleness_mean": "stale-\nness",
    "cost_per_million_tokens_usd": "$ per M\ntokens",
}
MAX_ROWS = 30


class Better(StrEnum):
    auto = "auto"
    higher = "higher"
    lower = "lower"


class RichProgress:
    """The sweep's progress bar (on stderr): points done of those left to run, failures, ETA."""

    def __init__(self, enabled: bool = True):
        from rich.progress import Progress

        from rlsim.tools.cli.progress import bar_columns

        self.failed = 0
        self._bar = Progress(*bar_columns("failed"), console=err, disable=not enabled)
        self._task = None

    def start(self, total: int, skipped: int) -> None:
        self._bar.start()
        label = "points" if not skipped else f"points ({skipped} already done)"
        self._task = self._bar.add_task(label, total=total, failed="")

    def advance(self, record: dict) -> None:
        if record.get("error"):
            self.failed += 1
        self._bar.update(self._task, advance=1, failed=f"[red]{self.failed} failed" if self.failed else "")

    def stop(self) -> None:
        self._bar.stop()


def _fmt(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    return str(value)


def _short_names(columns: list[str]) -> list[str]:
    """Last element of each dotted key, unless two keys share it."""
    short = [c.rsplit(".", 1)[-1] for c in columns]
    return [s if short.count(s) == 1 else c for s, c in zip(short, columns, strict=True)]


def results_table(df: pd.DataFrame, params: list[str], title: str) -> Table:
    """One row per combination (seeds averaged): the swept keys and the headline metrics; failures last."""
    from rich import box
    from rich.table import Table

    from rlsim.tools.report.formats import show
    from rlsim.tools.sweep.plot import mean_over_seeds
    from rlsim.tools.sweep.store import param_column

    params = [param_column(p, df.columns) for p in params]
    ok = mean_over_seeds(df, params).to_dict("records")
    failed = df[df["error"].notna()].drop_duplicates(subset=params or None).to_dict("records")
    metrics = [c for c in SUMMARY_COLUMNS if c in df.columns and df[c].notna().any()]
    table = Table(title=title, box=box.SIMPLE_HEAD)
    for name in _short_names(params):
        header = name.replace("_", "_\n") if len(name) > 10 else name
        table.add_column(header, justify="right", no_wrap=True, max_width=18)
    for header in (SUMMARY_COLUMNS[name] for name in metrics):
        table.add_column(header, justify="right", no_wrap=True, min_width=max(map(len, header.split("\n"))))
    rows = [[_fmt(r.get(c)) for c in params] + [show(c, r.get(c)) for c in metrics] for r in ok]
    rows += [
        [_fmt(r.get(c)) for c in params] + ["[red]failed[/red]"] + [""] * (len(metrics) - 1) for r in failed
    ]
    for cells in rows[:MAX_ROWS]:
        table.add_row(*cells[: len(params) + len(metrics)])
    if len(rows) > MAX_ROWS:
        table.caption = f"... {len(rows) - MAX_ROWS} more rows in results.csv"
    return table


# size: a typer command's option list is most of its length
def sweep(
    target: Annotated[
        str, typer.Argument(help="Scenario YAML (or a shipped scenario's name), or a sweep YAML")
    ],
    grid: Annotated[
        list[str] | None, typer.Option("--grid", "-g", help="dotted.path=v1,v2,...: a grid axis (repeatable)")
    ] = None,
    zip_: Annotated[
        list[str] | None,
        typer.Option(
            "--zip", "-z", help="dotted.path=v1,v2,...: lists zipped together, same length (repeatable)"
        ),
    ] = None,
    seeds: Annotated[
        int | None,
        typer.Option(help="Replicates per point, seeds derived from the scenario seed (SeedSequence)"),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Result store (default runs/<scenario name>-sweep)")
    ] = None,
    backend: Annotated[
        BackendName, typer.Option(help="Where points run", case_sensitive=False)
    ] = BackendName.local,
    workers: Annotated[int | None, typer.Option(help="Worker processes (default: all cores)")] = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="Ray cluster to join (default: start a local Ray)")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", "-s", help="Fixed override for every point: dotted.path=value"),
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar (on a terminal)")] = True,
    quiet: QuietOption = False,
) -> None:
    """Simulate a grid of scenario variants; resumable: re-running a sweep only runs what is missing."""
    from rlsim.tools.sweep.grid import plan_sweep
    from rlsim.tools.sweep.runner import SweepInterrupted, run_sweep

    if workers is not None and workers < 1:
        fail([f"--workers: expected an integer >= 1, got {workers}"])
    try:
        plan = plan_sweep(resolve_scenario_path(target), grid or [], zip_ or [], seeds, set_ or [])
    except ScenarioError as exc:
        fail(exc.lines())
    for line in plan.warnings():  # a warm-up set too short for an asynchronous schedule's steady state
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    out_dir = out or Path("runs") / f"{plan.name}-sweep"
    where = "" if backend is BackendName.serial else f", {workers or 'all'} workers"
    console.print(
        f"sweep {plan.name}: {len(plan.points)} points, backend {backend.value}{where} -> {out_dir}/",
        highlight=False,
    )
    from rlsim.tools.cli.progress import wants_progress

    bar = RichProgress(enabled=progress and wants_progress(quiet))
    try:
        outcome = run_sweep(plan, out_dir, backend.value, workers, ray_address, progress=bar)
    except KeyboardInterrupt:
        bar.stop()
        fail(
            [f"interrupted: the finished points are stored in {out_dir}/; re-run the same command to finish"],
            code=130,
        )
    except SweepInterrupted as exc:
        bar.stop()
        fail([f"{out_dir}: {exc}"], code=1)
    except ScenarioError as exc:  # e.g. --backend ray without Ray installed
        bar.stop()
        fail(exc.lines())
    except ConnectionError as exc:  # ray.init(address=...) found no cluster
        bar.stop()
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        fail([f"--ray-address {ray_address or '$RAY_ADDRESS'}: cannot reach a Ray cluster: {reason}"])
    bar.stop()
    console.print(results_table(outcome.table, plan.spec.params, f"rlsim sweep: {plan.name}"))
    console.print(
        f"{outcome.total} points: {outcome.ran} run now, {outcome.skipped} already done, "
        f"{outcome.failed} failed; "
        f"results in {out_dir}/results.csv",
        highlight=False,
    )
    if outcome.failed:
        for message in outcome.table["error"].dropna().unique()[:5]:
            err.print(f"failed: {message}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def plot_sweep(
    directory: Annotated[Path, typer.Argument(help="A sweep's result folder (holds results.csv)")],
    x: Annotated[str, typer.Option(help="Column on the x axis (a swept key or a metric)")],
    y: Annotated[str, typer.Option(help="Metric on the y axis")],
    hue: Annotated[str | None, typer.Option(help="Column to colour / split lines by")] = None,
    pareto: Annotated[bool, typer.Option(help="Scatter x vs y and mark the Pareto front")] = False,
    kind: Annotated[str, typer.Option(help="line (mean and std over repeats) or scatter")] = "line",
    x_better: Annotated[
        Better, typer.Option(help="Pareto direction of x (auto: from the name)")
    ] = Better.auto,
    y_better: Annotated[
        Better, typer.Option(help="Pareto direction of y (auto: from the name)")
    ] = Better.auto,
    out: Annotated[Path | None, typer.Option(help="Figure to write (default DIR/<y>_vs_<x>.<format>)")] = None,
    fmt: Annotated[FigureFormat, typer.Option("--format", "-f", help="Figure format")] = FigureFormat.png,
) -> None:
    """Plot a sweep's results: a metric against a knob, or a Pareto front of two metrics."""
    from rlsim.tools.report.formats import show
    from rlsim.tools.report.style import save_figure
    from rlsim.tools.sweep.plot import higher_is_better, mean_over_seeds, pareto_front, plot_pareto, plot_sweep
    from rlsim.tools.sweep.store import load_results

    try:
        df = load_results(directory)
    except (OSError, ValueError) as exc:
        fail([f"{directory}: cannot read results.csv ({exc.__class__.__name__}: {exc})"])
    missing = [c for c in (x, y, hue) if c is not None and c not in df.columns]
    if missing:
        fail(
            [f"{directory}: no column {c!r} in results.csv" for c in missing]
            + [f"{directory}: columns are {', '.join(df.columns)}"]
        )
    if kind not in ("line", "scatter"):
        fail([f"--kind: must be line or scatter, got {kind!r}"])
    if not pareto:
        fig = plot_sweep(df, x, y, hue=hue, kind=kind)
    else:
        maximize = tuple(
            higher_is_better(c) if b is Better.auto else b is Better.higher
            for c, b in ((x, x_better), (y, y_better))
        )
        data = mean_over_seeds(df)
        fig = plot_pareto(data, x, y, maximize=maximize, hue=hue)
        front = pareto_front(data, x, y, maximize=maximize)
        from rich.table import Table

        table = Table(title=f"Pareto front ({len(front)} of {len(data)})")
        cols = [c for c in (*df.attrs.get("params", []), x, y) if c in front.columns]
        cols = list(dict.fromkeys(cols))
        for name in _short_names(cols):
            table.add_column(name, justify="right")
        metrics = {x, y}
        for _, row in front.iterrows():
            table.add_row(*[show(c, row[c]) if c in metrics else _fmt(row[c]) for c in cols])
        console.print(table)
    target = out or Path(directory) / f"{_slug(y)}_vs_{_slug(x)}{'_pareto' if pareto else ''}.{fmt.value}"
    console.print(f"wrote {save_figure(fig, target, fmt=None if out else fmt.value)}", highlight=False)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
