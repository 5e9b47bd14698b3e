"""`rlsim` command line: one module per command group, registered on one typer app here.

Shared pieces live in rlsim.tools.cli.common (the consoles, `fail`, `load`, `resolve_scenario_path`) and
rlsim.tools.cli.progress (progress bars). Nothing outside rlsim/tools/cli/ imports this package: the CLI calls
the library, never the other way round. Modules import heavy libraries inside command bodies, so
`rlsim --help` stays fast.
"""

from __future__ import annotations

import sys

import typer

from rlsim.tools.cli import calibrate as _calibrate
from rlsim.tools.cli import info as _info
from rlsim.tools.cli import report as _report
from rlsim.tools.cli import reproduce as _reproduce
from rlsim.tools.cli import run as _run
from rlsim.tools.cli import sensitivity as _sensitivity
from rlsim.tools.cli import sweep as _sweep

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Discrete-event simulator of RL fine-tuning clusters (HybridFlow/verl, ROLL, AReaL schedules).",
)

app.command("run")(_run.run)
app.command("validate")(_run.validate)
app.command("schema")(_run.schema)
app.command("scenarios")(_info.scenarios)
app.command("profiles")(_info.profiles)
app.command("presets")(_info.presets)
app.command("engines")(_info.engines)
app.command("calibrate")(_calibrate.calibrate)
app.command("reproduce")(_reproduce.reproduce)
app.command("sensitivity")(_sensitivity.sensitivity)
app.command("plot")(_report.plot)
app.command("compare")(_report.compare)
app.command("report")(_report.report)
app.command("sweep")(_sweep.sweep)
app.command("plot-sweep")(_sweep.plot_sweep)

# --- commands defined in other modules: one import + one registration line each, e.g.
# from rlsim.tools.cli.plan import plan  # noqa: E402
# app.command("plan")(plan)
from rlsim.tools.importers.command import import_command  # noqa: E402

app.command("import")(import_command)
from rlsim.tools.cli.plan import plan as _plan  # noqa: E402

app.command("plan")(_plan)


def main() -> None:
    # `rlsim plot sweep DIR ...` (the spelling) is `rlsim plot-sweep DIR ...`.
    if sys.argv[1:3] == ["plot", "sweep"]:
        sys.argv[1:3] = ["plot-sweep"]
    app()


if __name__ == "__main__":
    main()
