"""`rlsim calibrate`: fit a hardware profile's efficiencies to measured timings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlsim.tools.cli.common import QuietOption, SetOption, console, fail, resolve_scenario_path


def calibrate(
    measurements: Annotated[Path | None, typer.Argument(
        help="CSV of measured timings (hardware_profiles/measurements/); omit with --from-log")] = None,
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
    """Fit a hardware profile to measured timings, or (--from-log) a scenario's factors to a run's logs."""
    if from_log is not None:
        if measurements is not None or profile is not None or params is not None:
            fail(["calibrate: --from-log fits a scenario; MEASUREMENTS, --profile and --params belong to CSV mode"])
        if scenario is None:
            fail(["calibrate: --from-log needs --scenario (the scenario of the logged run)"])
        _from_log(from_log, log_format, scenario, set_, out, sim_steps)
        return
    if measurements is None or profile is None:
        fail(["calibrate: give MEASUREMENTS.csv and --profile, or --from-log LOG --scenario SCENARIO"])
    from rlsim.sim.api import load_profile
    from rlsim.tools import calibration as cal
    from rlsim.tools.cli.progress import item_bar

    try:
        rows = cal.read_measurements(measurements)
        start = load_profile(profile)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        fail([f"{measurements}: {exc}"])
    chosen = cal.DEFAULT_PARAMS if params is None else tuple(p.strip() for p in params.split(",") if p.strip())
    bad = [p for p in chosen if p not in cal.FITTABLE]
    if bad:
        fail([f"--params: cannot fit {', '.join(bad)} (fittable: {', '.join(cal.FITTABLE)})"])
    with item_bar(quiet) as bar:
        bar.begin(f"fitting {len(chosen)} parameters to {len(rows)} rows", total=None, unit="")
        result = cal.fit(rows, start, chosen)
    typer.echo(cal.format_report(result))  # plain text: a table must not be re-wrapped
    if out is not None:
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
    try:
        logged = read_log(log, fmt)
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
