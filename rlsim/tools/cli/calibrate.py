"""`rlsim calibrate`: fit a hardware profile's efficiencies to measured timings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlsim.tools.cli.common import QuietOption, SetOption, console, fail, resolve_scenario_path


def calibrate(
    measurements: Annotated[Path | None, typer.Argument(
        help="CSV of measured timings (hardware_profiles/measurements/); omit with --from-log; "
             "or `ops` to fit operator profiles (then DIR)")] = None,
    ops_dir: Annotated[Path | None, typer.Argument(
        help="With `ops`: a folder of measured operator profiles (e.g. hardware_profiles/operators/vidur)")] = None,
    gpu: Annotated[str | None, typer.Option(help="With `ops`: the GPU folder to fit (a100, h100, a800, h800)")] = None,
    hold_out_models: Annotated[str | None, typer.Option(
        help="With `ops`: comma-separated models left out of the fit and scored")] = None,
    profile: Annotated[str | None, typer.Option(help="Starting hardware profile (name or YAML path)")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Write the fitted profile (CSV mode) or the calibration overlay (--from-log) here")] = None,
    params: Annotated[str | None, typer.Option(
        help="Comma-separated parameters to fit (default: all the rows inform); hold the others at the profile's"
    )] = None,
    from_log: Annotated[Path | None, typer.Option(
        "--from-log", help="A run's metrics log (verl console lines, JSON lines or CSV): fit a scenario to it")] = None,
    log_format: Annotated[str | None, typer.Option(
        "--format", help="Log format: verl, roll, areal or csv (default: told from the keys)")] = None,
    scenario: Annotated[str | None, typer.Option(help="With --from-log: the scenario of the logged run")] = None,
    set_: SetOption = None,
    sim_steps: Annotated[int, typer.Option(min=1, max=50, help="With --from-log: steps per fit simulation")] = 2,
    quiet: QuietOption = False,
) -> None:
    """Fit a hardware profile to measured timings, (--from-log) a scenario's factors to a run's logs, or
    (`calibrate ops DIR --gpu NAME`) per-operator efficiency curves to measured operator profiles."""
    if measurements is not None and str(measurements) == "ops":
        _ops(ops_dir, gpu, hold_out_models, out)
        return
    if ops_dir is not None or gpu is not None or hold_out_models is not None:
        fail(["calibrate: DIR, --gpu and --hold-out-models belong to `rlsim calibrate ops DIR --gpu NAME`"])
    if from_log is not None:
        if measurements is not None or profile is not None or params is not None:
            fail(["calibrate: --from-log fits a scenario; MEASUREMENTS, --profile and --params belong to CSV mode"])
        if scenario is None:
            fail(["calibrate: --from-log needs --scenario (the scenario of the logged run)"])
        _from_log(from_log, log_format, scenario, set_, out, sim_steps)
        return
    if measurements is None or profile is None:
        fail(["calibrate: give MEASUREMENTS.csv and --profile, or --from-log LOG --scenario SCENARIO"])
    from pydantic import ValidationError

    from rlsim.sim.api import load_profile
    from rlsim.tools import calibration as cal
    from rlsim.tools.cli.progress import item_bar

    try:
        rows = cal.read_measurements(measurements)
        start = load_profile(profile)
    except ValidationError as exc:  # a profile file with a bad number: worded like every scenario field
        from rlsim.sim.api import HardwareProfile
        from rlsim.sim.inputs import model_problems

        fail([f"--profile {profile}: {p.path}: {p.message}" for p in model_problems(exc, None, root=HardwareProfile)])
    except KeyError as exc:
        fail([f"--profile {profile}: {exc.args[0]}"])
    except cal.MeasurementError as exc:  # names the file and line itself
        fail([" ".join(str(exc).split())])
    except (ValueError, FileNotFoundError) as exc:
        fail([f"{measurements}: {' '.join(str(exc).split())}"])
    chosen = cal.DEFAULT_PARAMS if params is None else tuple(p.strip() for p in params.split(",") if p.strip())
    bad = [p for p in chosen if p not in cal.FITTABLE]
    if bad:
        fail([f"--params: cannot fit {', '.join(bad)} (fittable: {', '.join(cal.FITTABLE)})"])
    with item_bar(quiet) as bar:
        bar.begin(f"fitting {len(chosen)} parameters to {len(rows)} rows", total=None, unit="")
        result = cal.fit(rows, start, chosen)
    typer.echo(cal.format_report(result))  # plain text: a table must not be re-wrapped
    if out is not None:
        _out_folder(out)
        cal.write_profile(result.profile, out)
        console.print(f"wrote {out}")


def _from_log(log: Path, fmt: str | None, scenario: str, overrides: list[str] | None, out: Path | None,
              sim_steps: int) -> None:
    """`rlsim calibrate --from-log`: read the log, fit the scenario, print the table, write the overlay."""
    from rlsim.sim.api import ScenarioError, read_yaml
    from rlsim.tools.calibration.log_fit import fit_log
    from rlsim.tools.calibration.log_report import format_fit, overlay_block, write_overlay
    from rlsim.tools.calibration.logs import LogError, read_log

    path = resolve_scenario_path(scenario)
    _out_folder(out)
    try:
        logged = read_log(log, fmt)
        for warning in logged.warnings:
            typer.echo(f"warning: {warning}", err=True)
        data = read_yaml(path)
        warmup = 1 if data.get("warmup_steps") else 0  # one warm-up step keeps an async pipeline's fill out
        sim = [*(overrides or []), f"steps={sim_steps}", f"warmup_steps={warmup}"]
        result = fit_log(data, str(path), path.resolve().parent, logged, sim)
    except LogError as exc:
        fail([str(exc)])
    except ScenarioError as exc:
        fail(exc.lines())
    except ValueError as exc:
        fail([f"{log}: {exc}"])
    name = str(data.get("name", path.stem))
    typer.echo(format_fit(result, logged, name))
    if out is not None:
        write_overlay(overlay_block(result, logged, name), out)
        console.print(f"wrote {out} (apply with: rlsim run SCENARIO --set calibration={out})", highlight=False)


def _out_folder(out: Path | None) -> None:
    """Create --out's folder before any fit runs (as run, sweep, plan and import do): a fit is never lost."""
    if out is None:
        return
    if out.is_dir():
        fail([f"--out {out}: is a folder, expected a file name"])
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail([f"--out {out}: cannot create its folder: {exc.strerror or exc}"])


def _ops(root: Path | None, gpu: str | None, hold_out: str | None, out: Path | None) -> None:
    """`rlsim calibrate ops DIR --gpu NAME [--hold-out-models M1,M2] [--out OUT]`."""
    from rlsim.sim.api import load_profile
    from rlsim.tools.calibration.ops_data import OpsDataError
    from rlsim.tools.calibration.ops_run import GPU_PROFILES, format_result, run_ops

    if root is None or gpu is None:
        fail(["calibrate ops: give DIR and --gpu NAME (e.g. rlsim calibrate ops hardware_profiles/operators/vidur "
              "--gpu h100)"])
    if not root.is_dir():
        fail([f"calibrate ops: {root}: not a folder"])
    if gpu not in GPU_PROFILES:
        fail([f"calibrate ops: --gpu {gpu}: unknown (known: {', '.join(GPU_PROFILES)})"])
    hw = load_profile(GPU_PROFILES[gpu])
    held = tuple(m.strip() for m in (hold_out or "").split(",") if m.strip())
    try:
        result = run_ops(root, gpu, held, hw.peak_flops, hw.hbm_bytes_per_s, out)
    except OpsDataError as exc:
        fail([f"calibrate ops: {exc}"])
    typer.echo(format_result(result))
    if out is not None:
        console.print(f"wrote {out / 'ops_fit.csv'}", highlight=False)
