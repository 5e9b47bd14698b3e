"""`rlsim` command line: run, validate, schema, profiles, presets, calibrate.

Bad input never shows a traceback: every problem is one line `file: dotted.path: what is wrong`
on stderr and the exit code is 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from rlsim.paths import shipped_dir
from rlsim.scenario.errors import ScenarioError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Discrete-event simulator of RL fine-tuning clusters (HybridFlow/verl, ROLL, AReaL schedules).",
)
console = Console()
err = Console(stderr=True)

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a scenario value: dotted.path=value (repeatable)"),
]


def _fail(lines: list[str]) -> None:
    for line in lines:
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def resolve_scenario_path(name: str) -> Path:
    """A path, or the name of a shipped scenario (`quickstart`, `hybridflow/ppo-7b-colocate`)."""
    path = Path(name)
    if path.exists():
        return path
    shipped = shipped_dir("scenarios")
    for candidate in (shipped / name, shipped / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    return path  # the loader reports it missing


def _load(scenario: str, overrides: list[str] | None):
    from rlsim.scenario.loader import load_scenario

    try:
        return load_scenario(resolve_scenario_path(scenario), overrides or [])
    except ScenarioError as exc:
        _fail(exc.lines())


@app.command()
def run(
    scenario: Annotated[str, typer.Argument(help="Scenario YAML (or the name of a shipped one)")],
    set_: SetOption = None,
    seed: Annotated[int | None, typer.Option(help="Override the scenario's seed")] = None,
    out: Annotated[Path | None, typer.Option(help="Results folder (default runs/<scenario name>)")] = None,
    plots: Annotated[bool, typer.Option(help="Write PNG plots")] = True,
) -> None:
    """Simulate a scenario, print a summary table and write the results folder."""
    from rlsim.report.commands import print_summary, simulate_with_progress
    from rlsim.report.output import write_results

    scn = _load(scenario, set_)
    result = simulate_with_progress(scn, seed=seed)
    out_dir = out or Path("runs") / scn.name
    write_results(result, out_dir, plots=plots)
    print_summary(result)
    console.print(f"results in {out_dir}/ (summary.json, steps.csv, timeline.csv, samples.csv, trace.json, gantt.png)")


@app.command()
def validate(
    scenario: Annotated[str, typer.Argument(help="Scenario YAML")],
    set_: SetOption = None,
) -> None:
    """Check a scenario (schema, references, parallelism, memory) without simulating."""
    from rlsim.schedules.placement import placement_rows

    scn = _load(scenario, set_)
    console.print(f"{scenario}: ok ({scn.name}: {sum(p.gpus for p in scn.cluster.pools.values())} GPUs)")
    rows = placement_rows(scn)
    table = Table(title="placement")
    for col in rows[0]:
        table.add_column(col, no_wrap=col != "takes turns with")
    for row in rows:
        table.add_row(*row.values())
    console.print(table)


@app.command()
def schema() -> None:
    """Print the scenario JSON schema (for editor completion and validation)."""
    from rlsim.scenario.schema import Scenario

    sys.stdout.write(json.dumps(Scenario.model_json_schema(), indent=2) + "\n")


@app.command()
def profiles() -> None:
    """List the shipped hardware profiles."""
    from rlsim.hardware import available_profiles, load_profile

    table = Table(title="hardware profiles")
    table.add_column("name", no_wrap=True)
    for col in ("BF16 TFLOP/s", "HBM GB", "HBM TB/s", "NVLink GB/s", "NIC Gb/s", "$/GPU-h"):
        table.add_column(col, justify="right")
    for name in available_profiles():
        p = load_profile(name)
        price = "-" if p.price_usd_per_gpu_hour is None else f"{p.price_usd_per_gpu_hour:.2f}"
        table.add_row(
            name, f"{p.bf16_tflops:g}", f"{p.hbm_gb:g}", f"{p.hbm_tb_per_s:g}", f"{p.nvlink_gb_per_s:g}",
            f"{p.nic_gbit_per_s:g}", price,
        )
    console.print(table)


@app.command()
def presets() -> None:
    """List the model presets with their parameter counts."""
    from rlsim.model_shapes import ModelShape, preset_names, resolve_preset

    table = Table(title="model presets")
    table.add_column("name", no_wrap=True)
    for col in ("params (B)", "active (B)", "layers", "hidden", "kv heads", "KV KB/token"):
        table.add_column(col, justify="right")
    for name in preset_names():
        m = ModelShape(**resolve_preset(name))
        table.add_row(
            name, f"{m.params / 1e9:.2f}", f"{m.active_params / 1e9:.2f}", str(m.layers), str(m.hidden),
            str(m.kv_heads), f"{m.kv_bytes_per_token / 1024:.0f}",
        )
    console.print(table)


@app.command()
def calibrate(
    measurements: Annotated[Path, typer.Argument(help="CSV of measured timings (hardware_profiles/measurements/)")],
    profile: Annotated[str, typer.Option(help="Starting hardware profile (name or YAML path)")],
    out: Annotated[Path | None, typer.Option(help="Write the fitted profile here")] = None,
    params: Annotated[str | None, typer.Option(
        help="Comma-separated parameters to fit (default: all the rows inform); hold the others at the profile's"
    )] = None,
) -> None:
    """Fit decode efficiencies, fixed overhead, prefill efficiency and MFU to measurements."""
    from rlsim import calibrate as cal
    from rlsim.hardware import load_profile

    try:
        rows = cal.read_measurements(measurements)
        start = load_profile(profile)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        _fail([f"{measurements}: {exc}"])
    chosen = cal.DEFAULT_PARAMS if params is None else tuple(p.strip() for p in params.split(",") if p.strip())
    bad = [p for p in chosen if p not in cal.FITTABLE]
    if bad:
        _fail([f"--params: cannot fit {', '.join(bad)} (fittable: {', '.join(cal.FITTABLE)})"])
    result = cal.fit(rows, start, chosen)
    typer.echo(cal.format_report(result))  # plain text: a table must not be re-wrapped
    if out is not None:
        cal.write_profile(result.profile, out)
        console.print(f"wrote {out}")


@app.command()
def reproduce(
    name: Annotated[str, typer.Argument(
        help="What to reproduce: all, hybridflow-placement, areal-staleness, verl-one-step-off, "
        "agentic-latency, transition-cost, generation-tp, async-scaling, long-tail, batch-group, "
        "areal-generation-scaling, verl-generation-flat, validation"
    )],
    out: Annotated[Path, typer.Option(help="Output folder")] = Path("reproduce"),
) -> None:
    """Regenerate a published trade-off from shipped scenarios: DIR/<name>/table.csv and a PNG."""
    from rlsim.reproduce import REPRODUCTIONS

    names = list(REPRODUCTIONS) if name == "all" else [name]
    unknown = [n for n in names if n not in REPRODUCTIONS]
    if unknown:
        _fail([f"reproduce: unknown name {unknown[0]!r} (known: all, {', '.join(REPRODUCTIONS)})"])
    for n in names:
        target = out / n if name == "all" else out
        typer.echo(REPRODUCTIONS[n](target))
        console.print(f"wrote {target}/")


@app.command()
def sensitivity(
    scenario: Annotated[str, typer.Argument(help="Scenario YAML (or the name of a shipped one)")],
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
) -> None:
    """How far to trust a number: move each input down and up, rank inputs by how much the metric moves.

    Writes DIR/sensitivity.csv (sorted by swing) and DIR/tornado.png; 2 x inputs + 1 simulations.
    """
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rlsim import sensitivity as sens

    if jobs < 1:
        _fail([f"--jobs: expected an integer >= 1, got {jobs}"])
    if not 0 < pct < 100:
        _fail([f"--pct: must be > 0 and < 100, got {pct:g}"])
    start = time.perf_counter()
    try:
        prep = sens.prepare(resolve_scenario_path(scenario), set_ or [], vary or [], seed, pct)
    except ScenarioError as exc:
        _fail(exc.lines())
    if not prep.inputs:
        _fail([f"{scenario}: nothing to vary (give --vary dotted.path=±P%)"])
    bar = Progress(
        TextColumn("[bold]sensitivity runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, transient=True, disable=not err.is_terminal,
    )
    task = bar.add_task("runs", total=2 * len(prep.inputs) + 1)
    try:
        result = sens.run_sensitivity(
            prep, metric, jobs, progress=lambda done, total: bar.update(task, completed=done),
            on_pool_ready=bar.start,
        )
    except ScenarioError as exc:  # --metric not in the summary
        bar.stop()
        _fail(exc.lines())
    except sens.RunFailed as exc:
        bar.stop()
        err.print(f"{scenario}: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    bar.stop()
    out_dir = out or Path("runs") / f"{result.scenario}-sensitivity"
    written = sens.write_outputs(result, out_dir, plot=plots)
    # Piped or in a file, a table must not be squeezed to 80 columns.
    wide = console if console.is_terminal else Console(width=max(console.width, 160))
    wide.print(sens.results_table(result))
    for line in prep.skipped:
        console.print(f"not varied: {line}", highlight=False, markup=False, soft_wrap=True)
    runs = 2 * len(prep.inputs) + 1
    console.print(
        f"{len(prep.inputs)} inputs, {runs} runs in {time.perf_counter() - start:.1f} s; "
        f"wrote {', '.join(str(p) for p in written)}",
        highlight=False,
    )
    failed = result.table["error"].dropna()
    if len(failed):
        for key, message in zip(result.table.loc[failed.index, "input"], failed, strict=True):
            err.print(f"failed: {key}: {message}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


from rlsim.report.commands import compare_command, plot_command  # noqa: E402

app.command("plot")(plot_command)
app.command("compare")(compare_command)

# --- commands defined in other modules
from rlsim.sweep.commands import plot_sweep_command, sweep_command  # noqa: E402

app.command("sweep")(sweep_command)
app.command("plot-sweep")(plot_sweep_command)


def main() -> None:
    # `rlsim plot sweep DIR ...` (the spelling) is `rlsim plot-sweep DIR ...`.
    if sys.argv[1:3] == ["plot", "sweep"]:
        sys.argv[1:3] = ["plot-sweep"]
    app()


if __name__ == "__main__":
    main()
