"""`rlsim calibrate`: fit a hardware profile's efficiencies to measured timings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlsim.cli.common import QuietOption, console, fail


def calibrate(
    measurements: Annotated[Path, typer.Argument(help="CSV of measured timings (hardware_profiles/measurements/)")],
    profile: Annotated[str, typer.Option(help="Starting hardware profile (name or YAML path)")],
    out: Annotated[Path | None, typer.Option(help="Write the fitted profile here")] = None,
    params: Annotated[str | None, typer.Option(
        help="Comma-separated parameters to fit (default: all the rows inform); hold the others at the profile's"
    )] = None,
    quiet: QuietOption = False,
) -> None:
    """Fit decode efficiencies, fixed overhead, prefill efficiency and MFU to measurements."""
    from rlsim import calibration as cal
    from rlsim.cli.progress import item_bar
    from rlsim.hardware import load_profile

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
