"""Reproductions of published trade-offs: each writes table.csv (+ findings) and a PNG, returns a report."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def _hybridflow_placement(out: Path) -> str:
    from rlsim.tools.reproduce.hybridflow_placement import report

    return report(out)


def _areal_staleness(out: Path) -> str:
    from rlsim.tools.reproduce.async_rl import areal_report

    return areal_report(out)


def _verl_one_step_off(out: Path) -> str:
    from rlsim.tools.reproduce.async_rl import verl_report

    return verl_report(out)


def _agentic_latency(out: Path) -> str:
    from rlsim.tools.reproduce.agentic import report

    return report(out)


def _areal_generation_scaling(out: Path) -> str:
    from rlsim.tools.reproduce.generation_scaling import areal_report

    return areal_report(out)


def _verl_generation_flat(out: Path) -> str:
    from rlsim.tools.reproduce.generation_scaling import verl_flat_report

    return verl_flat_report(out)


def _validation(out: Path) -> str:
    from rlsim.tools.reproduce.validation import report

    return report(out)


def _transitions(out: Path) -> str:
    from rlsim.tools.reproduce.transitions import report

    return report(out)


def _figure(name: str) -> Callable[[Path], str]:
    def run(out: Path) -> str:
        from rlsim.tools.reproduce.figures import report

        return report(name, out)

    return run


REPRODUCTIONS: dict[str, Callable[[Path], str]] = {
    "hybridflow-placement": _hybridflow_placement,
    "areal-staleness": _areal_staleness,
    "verl-one-step-off": _verl_one_step_off,
    "agentic-latency": _agentic_latency,
    "transition-cost": _transitions,
    "generation-tp": _figure("generation-tp"),
    "async-scaling": _figure("async-scaling"),
    "long-tail": _figure("long-tail"),
    "batch-group": _figure("batch-group"),
    "areal-generation-scaling": _areal_generation_scaling,
    "verl-generation-flat": _verl_generation_flat,
    "validation": _validation,
}

# The README's figure numbers (F1-F9) and the reproduction that draws each (F9, the complexity figure, is
# drawn by transition-cost beside F2).
FIGURES = {"F1": "hybridflow-placement", "F2": "transition-cost", "F3": "generation-tp", "F4": "async-scaling",
           "F5": "areal-staleness", "F6": "long-tail", "F7": "agentic-latency", "F8": "batch-group",
           "F9": "transition-cost"}
