"""`rlsim reproduce`: regenerate published trade-offs from shipped scenarios."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from rlsim.tools.cli.common import QuietOption, console, fail


class FigureFormat(StrEnum):
    png = "png"
    svg = "svg"
    pdf = "pdf"


def reproduce(
    name: Annotated[str, typer.Argument(
        help="What to reproduce: all, a README figure F1-F9, hybridflow-placement, areal-staleness, verl-one-step-off, "
        "agentic-latency, transition-cost, generation-tp, async-scaling, long-tail, batch-group, "
        "areal-generation-scaling, verl-generation-flat, validation"
    )],
    out: Annotated[Path, typer.Option(help="Output folder")] = Path("reproduce"),
    fmt: Annotated[FigureFormat, typer.Option("--format", "-f", help="Figure format")] = FigureFormat.png,
    quiet: QuietOption = False,
) -> None:
    """Regenerate a published trade-off from shipped scenarios: DIR/<name>/table.csv and a figure."""
    from rlsim.tools.cli.progress import item_bar
    from rlsim.tools.report.style import apply_style, figure_format
    from rlsim.tools.reproduce import FIGURES, REPRODUCTIONS

    name = FIGURES.get(name.upper(), name)
    names = list(REPRODUCTIONS) if name == "all" else [name]
    unknown = [n for n in names if n not in REPRODUCTIONS]
    if unknown:
        fail([f"reproduce: unknown name {unknown[0]!r} (known: all, {', '.join(REPRODUCTIONS)})"])
    apply_style()  # one look for every figure, the reproductions' included
    with item_bar(quiet) as bar, figure_format(fmt.value):
        for i, n in enumerate(names):
            bar.begin(f"reproducing {n}", total=len(names), unit="reproductions")
            bar.update(i)
            target = out / n if name == "all" else out
            report = REPRODUCTIONS[n](target)
            bar.update(i + 1)
            typer.echo(report)
            console.print(f"wrote {target}/", highlight=False)
