"""`rlsim run`, `rlsim validate`, `rlsim schema`: simulate one scenario, check one, print the schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from rlsim.cli.common import QuietOption, ScenarioArg, SetOption, console, load


def print_summary(result, title: str | None = None) -> None:
    """The run's summary as a two-column rich table (rows from report.output.summary_rows)."""
    from rich.table import Table

    from rlsim.report.output import summary_rows

    table = Table(title=title or f"rlsim: {result.scenario.name}", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    for k, v in summary_rows(result):
        table.add_row(k, v, style="dim" if k.startswith("  ") else None)
    console.print(table)


def run(
    scenario: ScenarioArg,
    set_: SetOption = None,
    seed: Annotated[int | None, typer.Option(help="Override the scenario's seed")] = None,
    out: Annotated[Path | None, typer.Option(help="Results folder (default runs/<scenario name>)")] = None,
    plots: Annotated[bool, typer.Option(help="Write PNG plots")] = True,
    quiet: QuietOption = False,
) -> None:
    """Simulate a scenario, print a summary table and write the results folder."""
    from rlsim.cli.progress import LazyBar, simulate_with_progress, wants_progress
    from rlsim.report.output import write_results

    scn = load(scenario, set_)
    with LazyBar(enabled=wants_progress(quiet)) as bar:
        result = simulate_with_progress(scn, seed=seed, bar=bar)
    out_dir = out or Path("runs") / scn.name
    written = write_results(result, out_dir, plots=plots)
    print_summary(result)
    names = ", ".join(p.name for p in written)
    console.print(f"results in {out_dir}/ ({names})", highlight=False, soft_wrap=True)


def validate(scenario: ScenarioArg, set_: SetOption = None) -> None:
    """Check a scenario (schema, references, parallelism, memory) without simulating."""
    from rich.table import Table

    from rlsim.scenario.placement import placement_rows

    scn = load(scenario, set_)
    console.print(f"{scenario}: ok ({scn.name}: {sum(p.gpus for p in scn.cluster.pools.values())} GPUs)")
    rows = placement_rows(scn)
    table = Table(title="placement")
    for col in rows[0]:
        table.add_column(col, no_wrap=col != "takes turns with")
    for row in rows:
        table.add_row(*row.values())
    console.print(table)


def schema() -> None:
    """Print the scenario JSON schema (for editor completion and validation)."""
    from rlsim.scenario.schema import Scenario

    sys.stdout.write(json.dumps(Scenario.model_json_schema(), indent=2) + "\n")


