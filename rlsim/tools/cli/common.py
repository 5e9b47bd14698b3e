"""What every command shares: the one stdout console, the one stderr console, the one error helper,
and turning a scenario argument (path or shipped name) into a loaded scenario.

Bad input never shows a traceback: every problem is one line `file: dotted.path: what is wrong` on
stderr and the exit code is 2.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from rlsim.sim.api import ScenarioError, shipped_dir

console = Console()
err = Console(stderr=True)

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a scenario value: dotted.path=value (repeatable)"),
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar")]
ScenarioArg = Annotated[str, typer.Argument(help="Scenario YAML, or the name of a shipped one (`rlsim scenarios`)")]


def fail(lines: list[str], code: int = 2) -> NoReturn:
    """Print one line per problem on stderr and exit (2: bad input)."""
    for line in lines:
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def shipped_scenarios() -> list[Path]:
    """Every shipped scenario YAML: sweep files (scenarios/sweeps/) and plan spaces are not scenarios."""
    root = shipped_dir("scenarios")
    return sorted(p for p in root.rglob("*.yaml")
                  if "sweeps" not in p.relative_to(root).parts[:-1] and not _is_plan_space(p))


def _is_plan_space(path: Path) -> bool:
    """A `rlsim plan` space file (scenarios/plan/*) has no cluster of its own: it varies a scenario's."""
    if "plan" not in path.parent.name:
        return False
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return False
    return not (isinstance(data, dict) and "cluster" in data)


def resolve_scenario_path(name: str) -> Path:
    """A path, or the name of a shipped scenario: `quickstart`, `async/areal-1.5b-h800`, or `areal-1.5b-h800`
    (found in any subfolder when the file name is unique)."""
    path = Path(name).expanduser()
    if path.exists():
        return path
    shipped = shipped_dir("scenarios")
    for candidate in (shipped / name, shipped / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    stem = name.removesuffix(".yaml")
    matches = [p for p in shipped.rglob(f"{stem}.yaml")] if "/" not in stem else []
    if len(matches) > 1:
        rel = ", ".join(str(m.relative_to(shipped).with_suffix("")) for m in sorted(matches))
        fail([f"{name}: more than one shipped scenario has this name ({rel}); give the folder too"])
    return matches[0] if matches else path  # the loader reports a missing file


def load(scenario: str, overrides: list[str] | None, quiet: bool = False):
    """The loaded scenario, or exit 2 with one line per problem; asynchronous schedules warm up to steady state
    (a note says so, except under --quiet; warnings always show)."""
    from rlsim.sim.api import load_scenario
    from rlsim.tools.sweep.steady_state import steady_scenario

    try:
        scn = load_scenario(resolve_scenario_path(scenario), overrides or [])
    except ScenarioError as exc:
        fail(exc.lines())
    from rlsim.sim.api import sanity_warnings

    for line in sanity_warnings(scn):  # valid, but an implausible magnitude: say so, run anyway
        err.print(f"warning: {line}", markup=False, highlight=False, soft_wrap=True)
    scn, note = steady_scenario(scn, overrides)  # asynchronous runs measure steady state by default
    if note and (not quiet or note.startswith("warning:")):  # --quiet hides notes and progress, never a warning
        err.print(note, markup=False, highlight=False, soft_wrap=True)
    return scn


class BackendName(StrEnum):
    """Where simulations run (rlsim.tools.sweep.runner.make_backend): `sweep` and `plan` take the same choices."""

    serial = "serial"
    local = "local"
    ray = "ray"
