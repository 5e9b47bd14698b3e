"""Reproductions of published trade-offs: each writes table.csv (+ findings) and a PNG, returns a report."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def _hybridflow_placement(out: Path) -> str:
    from rlsim.reproduce.hybridflow_placement import report

    return report(out)


REPRODUCTIONS: dict[str, Callable[[Path], str]] = {
    "hybridflow-placement": _hybridflow_placement,
}
