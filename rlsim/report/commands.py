"""`rlsim plot` and `rlsim compare`, and the lazy progress bar used while simulating.

Registered on the typer app at the end of rlsim/cli.py. Bad input follows the CLI's rule: one line
`what: why` on stderr, exit code 2, no traceback.
"""

from __future__ import annotations

import threading
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

console = Console()
err = Console(stderr=True)


class LazyProgress:
    """A `simulate(progress=...)` callback that shows a transient rich bar only if the run lasts > delay_s.

    A timer thread starts the bar (so a long first step still shows one); short runs print nothing.
    """

    def __init__(self, label: str, console: Console | None = None, delay_s: float = 2.0):
        self.label = label
        self.console = console or err
        self.delay_s = delay_s
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._task = None
        self._done, self._total = 0, None
        self._closed = False
        self._timer = threading.Timer(delay_s, self._start)
        self._timer.daemon = True

    def __enter__(self) -> LazyProgress:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        with self._lock:
            if self._closed or self._progress is not None:
                return
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("steps"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.label, total=self._total, completed=self._done)

    def __call__(self, done: int, total: int) -> None:
        with self._lock:
            self._done, self._total = done, total
            if self._progress is not None:
                self._progress.update(self._task, completed=done, total=total)

    @property
    def shown(self) -> bool:
        return self._progress is not None

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._closed = True
            if self._progress is not None:
                self._progress.stop()


def simulate_with_progress(scenario, seed: int | None = None, delay_s: float = 2.0):
    """`simulate()` with a progress bar on stderr that appears only for runs longer than delay_s."""
    from rlsim.simulate import simulate

    with LazyProgress(f"simulating {scenario.name}", delay_s=delay_s) as bar:
        return simulate(scenario, seed=seed, progress=bar)


def print_summary(result, title: str | None = None) -> None:
    """The run's summary as a two-column rich table (rows from report.output.summary_rows)."""
    from rlsim.report.output import summary_rows

    table = Table(title=title or f"rlsim: {result.scenario.name}", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    for k, v in summary_rows(result):
        table.add_row(k, v, style="dim" if k.startswith("  ") else None)
    console.print(table)


# ---------------------------------------------------------------- rlsim plot


class PlotKind(StrEnum):
    gantt = "gantt"
    breakdown = "breakdown"
    idle = "idle"
    staleness = "staleness"
    tail = "tail"
    engines = "engines"
    all = "all"


class PlotFormat(StrEnum):
    png = "png"
    svg = "svg"


def plot_command(
    run_dir: Annotated[Path, typer.Argument(help="Results folder written by `rlsim run` (has summary.json)")],
    kind: Annotated[PlotKind, typer.Option("--kind", "-k", help="Which plot")] = PlotKind.all,
    fmt: Annotated[PlotFormat, typer.Option("--format", "-f", help="Image format")] = PlotFormat.png,
    out: Annotated[Path | None, typer.Option(help="Folder for the images (default: RUN_DIR)")] = None,
) -> None:
    """Draw plots from a results folder: Gantt, step breakdown, idle, staleness, long tail, engines."""
    from rlsim.report.output import load_run
    from rlsim.report.plots import save_plots

    try:
        _, tables = load_run(run_dir)
    except (FileNotFoundError, ValueError, KeyError) as exc:
        err.print(f"{exc}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    kinds = None if kind is PlotKind.all else [kind.value]
    for path in save_plots(tables, out or run_dir, kinds, fmt.value):
        console.print(f"wrote {path}", markup=False, highlight=False)


# ---------------------------------------------------------------- rlsim compare


def _load_or_run(item: str, overrides: list[str] | None, seed: int | None):
    """A results folder (with summary.json) is read; anything else is a scenario to simulate."""
    from rlsim.report.compare import RunSummary
    from rlsim.report.output import load_run

    path = Path(item)
    if path.is_dir():
        summary, tables = load_run(path)
        return RunSummary(tables.name or path.name, summary, tables.steps, str(path)), None
    from rlsim.cli import _load

    scn = _load(item, overrides)
    result = simulate_with_progress(scn, seed=seed)
    return RunSummary(scn.name, result.summary, result.steps, item), result


def compare_command(
    inputs: Annotated[
        list[str], typer.Argument(help="Scenario YAMLs (or shipped names) and/or results folders")
    ],
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", "-s", help="Override applied to every scenario: dotted.path=value (repeatable)"
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Override every scenario's seed")] = None,
    out: Annotated[
        Path, typer.Option(help="Folder for compare.csv, compare.png and each run's results")
    ] = Path("runs/compare"),
    plots: Annotated[bool, typer.Option(help="Write compare.png")] = True,
) -> None:
    """Run (or load) several scenarios and show them side by side: throughput, step time, idle, cost."""
    import matplotlib.pyplot as plt

    from rlsim.report.compare import (
        compare_chart,
        comparison_table,
        display_label,
        format_value,
        unique_labels,
    )
    from rlsim.report.output import write_results

    runs, results = [], []
    for item in inputs:
        try:
            run, result = _load_or_run(item, set_, seed)
        except (FileNotFoundError, ValueError) as exc:
            err.print(f"{item}: {exc}", markup=False, highlight=False)
            raise typer.Exit(2) from None
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

    table = comparison_table(runs)
    table.to_csv(out / "compare.csv")
    view = Table(title="rlsim compare")
    view.add_column("metric", style="bold", no_wrap=True)
    for label in table.index:
        view.add_column(label, justify="right", overflow="fold")
    for col in table.columns:
        label = display_label(col)
        view.add_row(
            label, *(format_value(col, v) for v in table[col]), style="dim" if label[0] == " " else None
        )
    console.print(view)
    written = [out / "compare.csv"]
    if plots:
        fig = compare_chart(table)
        fig.savefig(out / "compare.png", dpi=110)
        plt.close(fig)
        written.append(out / "compare.png")
    console.print(f"wrote {', '.join(str(p) for p in written)}", markup=False, highlight=False)


def _safe(label: str) -> str:
    """A folder name from a run label."""
    keep = "".join(c if c.isalnum() or c in "-_." else "_" for c in label).strip("_")
    return keep or "run"
