"""`rlsim sensitivity`: how far to trust a number (move each input down and up, rank by swing)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlsim.sim.api import ScenarioError
from rlsim.tools.cli.common import QuietOption, ScenarioArg, SetOption, console, err, fail, resolve_scenario_path


def sensitivity(
    scenario: ScenarioArg,
    vary: Annotated[list[str] | None, typer.Option(
        "--vary",
        help="Input to vary: dotted.path=±P% or dotted.path=lo:hi, absolute (repeatable; default: every pool's "
        "calibrated constants, the engines' host overhead, the length/latency distributions)",
    )] = None,
    set_: SetOption = None,
    metric: Annotated[str, typer.Option(help="Summary metric that ranks the inputs")] = "throughput_tokens_per_s",
    pct: Annotated[float, typer.Option(help="How far the default inputs move each way, %")] = 20.0,
    seed: Annotated[int | None, typer.Option(help="Override the scenario's seed (the same for every run)")] = None,
    out: Annotated[Path | None, typer.Option(help="Output folder (default runs/<scenario name>-sensitivity)")] = None,
    jobs: Annotated[int, typer.Option(help="Worker processes (1: serial, in this process)")] = 1,
    plots: Annotated[bool, typer.Option(help="Write tornado.png")] = True,
    quiet: QuietOption = False,
) -> None:
    """How far to trust a number: move each input down and up, rank inputs by how much the metric moves.

    Writes DIR/sensitivity.csv (sorted by swing) and DIR/tornado.png; 2 x inputs + 1 simulations.
    """
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rlsim.tools import sensitivity as sens
    from rlsim.tools.cli.progress import wants_progress
    from rlsim.tools.report.output import prepare_out_dir

    if jobs < 1:
        fail([f"--jobs: expected an integer >= 1, got {jobs}"])
    if not 0 < pct < 100:
        fail([f"--pct: must be > 0 and < 100, got {pct:g}"])
    if seed is not None and not 0 <= seed < 2**63:
        fail([f"--seed: expected an integer from 0 to 2^63 - 1, got {seed}"])
    start = time.perf_counter()
    try:
        prep = sens.prepare(resolve_scenario_path(scenario), set_ or [], vary or [], seed, pct)
    except ScenarioError as exc:
        fail(exc.lines())
    if not prep.inputs:
        fail([f"{scenario}: nothing to vary (give --vary dotted.path=±P%)"])
    if out is not None and (problem := prepare_out_dir(out)) is not None:  # inputs first: no folder for a typo
        fail([f"--out {out}: {problem}"])
    bar = Progress(
        TextColumn("[bold]sensitivity runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, transient=True, disable=not wants_progress(quiet),
    )
    task = bar.add_task("runs", total=2 * len(prep.inputs) + 1)
    try:
        result = sens.run_sensitivity(
            prep, metric, jobs, progress=lambda done, total: bar.update(task, completed=done),
            on_pool_ready=bar.start,
        )
    except ScenarioError as exc:  # --metric not in the summary
        bar.stop()
        fail(exc.lines())
    except sens.RunFailed as exc:
        bar.stop()
        fail([f"{scenario}: {exc}"], code=1)
    bar.stop()
    out_dir = out or Path("runs") / f"{result.scenario}-sensitivity"
    if (problem := prepare_out_dir(out_dir)) is not None:
        fail([f"{out_dir}: {problem}"])
    written = sens.write_outputs(result, out_dir, plot=plots)
    console.print(sens.results_table(result, width=min(80, console.width)))  # fits 80 columns: wraps, never crops
    for line in prep.skipped:
        console.print(f"not varied: {line}", highlight=False, markup=False)
    runs = 2 * len(prep.inputs) + 1
    console.print(
        f"{len(prep.inputs)} inputs, {runs} runs in {time.perf_counter() - start:.1f} s; "
        f"wrote {', '.join(str(p) for p in written)}",
        highlight=False,
    )
    failed = result.table["error"].dropna()
    if len(failed):
        fail([f"failed: {key}: {message}" for key, message in
              zip(result.table.loc[failed.index, "input"], failed, strict=True)], code=1)
