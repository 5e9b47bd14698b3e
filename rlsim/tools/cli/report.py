"""`rlsim plot`, `rlsim compare`, `rlsim report`: figures, side-by-side tables and a shareable HTML file.

The CLI runs the simulations; rlsim/tools/report/ only turns results and DataFrames into tables and figures.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from rlsim.tools.cli.common import QuietOption, console, fail, load
from rlsim.tools.cli.reproduce import FigureFormat


class PlotKind(StrEnum):
    gantt = "gantt"
    breakdown = "breakdown"
    idle = "idle"
    staleness = "staleness"
    tail = "tail"
    engines = "engines"
    series = "series"
    all = "all"


def plot(
    run_dir: Annotated[Path, typer.Argument(help="Results folder written by `rlsim run` (has summary.json)")],
    kind: Annotated[PlotKind, typer.Option("--kind", "-k", help="Which plot")] = PlotKind.all,
    fmt: Annotated[FigureFormat, typer.Option("--format", "-f", help="Image format")] = FigureFormat.png,
    out: Annotated[Path | None, typer.Option(help="Folder for the images (default: RUN_DIR)")] = None,
) -> None:
    """Draw plots from a results folder: Gantt, step breakdown, idle, staleness, long tail, engines."""
    from rlsim.tools.report.output import load_run
    from rlsim.tools.report.plots import save_plots

    try:
        _, tables = load_run(run_dir)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        fail([f"{exc}"])
    kinds = None if kind is PlotKind.all else [kind.value]
    for path in save_plots(tables, out or run_dir, kinds, fmt.value):
        console.print(f"wrote {path}", markup=False, highlight=False)


def _load_or_run(item: str, overrides: list[str] | None, seed: int | None, seeds: int, bar):
    """A results folder (with summary.json) is read; anything else is a scenario to simulate (seeds times)."""
    import pandas as pd

    from rlsim.tools.cli.progress import simulate_with_progress
    from rlsim.tools.report.compare import RunSummary
    from rlsim.tools.report.output import load_run, run_metrics
    from rlsim.tools.report.uncertainty import mean_interval
    from rlsim.tools.sweep.grid import derive_seeds

    path = Path(item)
    if path.is_dir():
        summary, tables = load_run(path)
        return RunSummary(tables.name or path.name, summary, tables.steps, str(path)), None
    scn = load(item, overrides)
    base = scn.seed if seed is None else seed
    seed_list = [base] if seeds == 1 else derive_seeds(base, seeds)
    results = []
    for i, s in enumerate(seed_list):
        label = f"simulating {scn.name}" + (f" (seed {i + 1}/{seeds})" if seeds > 1 else "")
        results.append(simulate_with_progress(scn, seed=s, bar=bar, label=label))
    stats = None
    if seeds > 1:
        stats = mean_interval(pd.DataFrame([run_metrics(r) for r in results]))
    first = results[0]
    return RunSummary(scn.name, first.summary, first.steps, item, stats=stats), first


def compare(
    inputs: Annotated[list[str], typer.Argument(help="Scenario YAMLs (or shipped names) and/or results folders")],
    set_: Annotated[list[str] | None, typer.Option(
        "--set", "-s", help="Override applied to every scenario: dotted.path=value (repeatable)"
    )] = None,
    seed: Annotated[int | None, typer.Option(help="Override every scenario's seed")] = None,
    seeds: Annotated[int, typer.Option(
        help="Replicates per scenario (seeds from SeedSequence(seed).spawn(K)): mean ± 95% interval"
    )] = 1,
    out: Annotated[Path, typer.Option(help="Folder for compare.csv, compare.png and each run's results")] = Path(
        "runs/compare"
    ),
    plots: Annotated[bool, typer.Option(help="Write compare.png")] = True,
    fmt: Annotated[FigureFormat, typer.Option("--format", "-f", help="Figure format")] = FigureFormat.png,
    quiet: QuietOption = False,
) -> None:
    """Run (or load) several scenarios and show them side by side: throughput, step time, idle, cost."""
    from rlsim.tools.cli.progress import LazyBar, wants_progress
    from rlsim.tools.report.compare import compare_chart, comparison_table, interval_table, unique_labels
    from rlsim.tools.report.output import write_results
    from rlsim.tools.report.style import save_figure

    if seeds < 1:
        fail([f"--seeds: expected an integer >= 1, got {seeds}"])
    runs, results = [], []
    with LazyBar(enabled=wants_progress(quiet)) as bar:
        for item in inputs:
            try:
                run, result = _load_or_run(item, set_, seed, seeds, bar)
            except (FileNotFoundError, ValueError) as exc:
                fail([f"{item}: {exc}"])
            runs.append(run)
            results.append(result)
    fallbacks = [f"{Path(i).name}/" if Path(i).is_dir() else Path(i).name for i in inputs]
    labels = unique_labels([r.label for r in runs], fallbacks)
    for run, label in zip(runs, labels, strict=True):
        run.label = label
    out.mkdir(parents=True, exist_ok=True)
    for run, result in zip(runs, results, strict=True):
        if result is not None:  # keep each simulated run, so `rlsim plot` works on it later
            write_results(result, out / _safe(run.label), plots=False)

    table, ci = comparison_table(runs), interval_table(runs)
    written = [out / "compare.csv"]
    table.to_csv(out / "compare.csv")
    if ci is not None:
        ci.to_csv(out / "compare_ci95.csv")
        written.append(out / "compare_ci95.csv")
    console.print(compare_view(table, ci, over_seeds=seeds > 1))
    if plots:
        written.append(save_figure(compare_chart(table, ci), out / f"compare.{fmt.value}"))
    console.print(f"wrote {', '.join(str(p) for p in written)}", markup=False, highlight=False, soft_wrap=True)


def compare_view(table, ci=None, over_seeds: bool = True):
    """The comparison as a rich table: one column per run, values never wrapped (headers may wrap)."""
    from rich import box
    from rich.table import Table

    from rlsim.tools.report.compare import display_label, format_value

    note = ""
    if ci is not None:
        note = "\nmean ± 95% interval over seeds" if over_seeds else "\n± the calibration band (calibrated runs)"
    view = Table(title="rlsim compare" + note,
                 box=box.SIMPLE_HEAD, pad_edge=False)
    view.add_column("metric", style="bold", no_wrap=True)
    for label in table.index:
        view.add_column(str(label), justify="right", no_wrap=False, overflow="fold")
    for col in table.columns:
        label = display_label(col)
        cells = [format_value(col, v, None if ci is None else ci.at[run, col]) for run, v in table[col].items()]
        view.add_row(label, *cells, style="dim" if label[0] == " " else None)
    return view


def _safe(label: str) -> str:
    """A folder name from a run label."""
    keep = "".join(c if c.isalnum() or c in "-_." else "_" for c in label).strip("_")
    return keep or "run"


def report(
    folder: Annotated[Path, typer.Argument(help="A results folder: run (summary.json), sweep (results.csv) or plan")],
    out: Annotated[Path | None, typer.Option(help="HTML file to write (default FOLDER/report.html)")] = None,
) -> None:
    """Write one self-contained HTML report (tables, figures, scenario, trace instructions) that opens offline."""
    from rlsim.tools.report.html import write_report

    if not folder.is_dir():
        fail([f"{folder}: no such folder"])
    try:
        path = write_report(folder, out)
    except (ValueError, FileNotFoundError, KeyError) as exc:
        fail([str(exc)])
    console.print(f"wrote {path}", markup=False, highlight=False)
