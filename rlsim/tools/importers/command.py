"""`rlsim import verl|roll|areal|nemo-rl|slime CONFIG [overrides ...]`: a framework config -> a scenario YAML.

Prints the three lists (keys used -> scenario field, keys ignored and why, values assumed with the
flag that sets each). With `--out` the scenario goes to that file and the lists to stdout; without,
the scenario goes to stdout and the lists to stderr, so `rlsim import verl cfg.yaml > s.yaml` works.
Bad input: one line per problem on stderr, exit 2.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from rlsim.sim.api import ScenarioError


class Framework(StrEnum):
    verl = "verl"
    roll = "roll"
    areal = "areal"
    nemo_rl = "nemo-rl"
    slime = "slime"


def run_import(framework: str, config: Path, overrides: list[str], *, model_config: Path | None = None,
               hardware: str | None = None, sets: list[str] = (), config_dirs: list[Path] = ()):
    """The import itself (no printing): an `Imported`, or ScenarioError with one problem per line."""
    from rlsim.tools.importers.areal import import_areal
    from rlsim.tools.importers.nemo_rl import import_nemo_rl
    from rlsim.tools.importers.roll import import_roll
    from rlsim.tools.importers.slime import import_slime
    from rlsim.tools.importers.verl import import_verl

    importer = {"verl": import_verl, "roll": import_roll, "areal": import_areal, "nemo-rl": import_nemo_rl,
                "slime": import_slime}[framework]
    if not config.is_file():
        from rlsim.tools.importers.common import ImportProblem

        raise ImportProblem(str(config), "", "file not found" if not config.exists() else "not a file")
    return importer(config, list(overrides), model_config=model_config, gpu=hardware, sets=list(sets),
                    config_dirs=list(config_dirs))


def import_command(
    framework: Annotated[Framework, typer.Argument(help="Which framework wrote the config")],
    config: Annotated[Path, typer.Argument(
        help="The framework's YAML config (shipped, recipe or dumped by a run); slime: its launch script")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Hydra-style overrides as the framework takes them: a.b=v, +a.b=v, ++a.b=v, ~a.b "
                     "(slime: extra command-line flags, --flag value)"),
    ] = None,
    model_config: Annotated[
        Path | None, typer.Option("--model-config", help="Hugging Face config.json (or its folder) of the policy")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the scenario here (default: stdout)")] = None,
    hardware: Annotated[
        str | None, typer.Option("--hardware", help="Hardware profile of every pool (default: assumed h100-sxm)")
    ] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option("--set", "-s", help="Override a value of the imported scenario: dotted.path=value (repeatable)"),
    ] = None,
    config_dirs: Annotated[
        list[Path] | None,
        typer.Option("--config-dir", help="Folder to find the config's Hydra defaults in (e.g. verl/trainer/config)"),
    ] = None,
) -> None:
    """Import a verl, ROLL, AReaL, NeMo-RL or slime config as an rlsim scenario, listing every key used, ignored or
    assumed."""
    from rlsim.tools.importers.draft import report_lines

    try:
        imported = run_import(framework.value, config, overrides or [], model_config=model_config,
                              hardware=hardware, sets=sets or [], config_dirs=config_dirs or [])
    except ScenarioError as exc:
        for line in exc.lines():
            typer.echo(line, err=True)
        raise typer.Exit(2) from None
    report = "\n".join(report_lines(imported.ledger))
    if out is None:
        typer.echo(report, err=True)
        sys.stdout.write(imported.text)
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(imported.text, encoding="utf-8")
    except OSError as exc:
        typer.echo(f"{out}: cannot write: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(report)
    typer.echo(f"wrote {out} (run it: rlsim run {out})")
