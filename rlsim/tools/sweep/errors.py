"""The sweep's one error type (its own module: the grid and the store both raise it)."""

from __future__ import annotations

from collections.abc import Sequence

from rlsim.sim.api import ScenarioError


class SweepError(ScenarioError):
    """Bad sweep input: carries ready-made lines (`source: where: what`), possibly from several files."""

    def __init__(self, lines: Sequence[str]):
        self._lines = list(dict.fromkeys(lines))
        self.source = ""
        self.problems = []
        Exception.__init__(self, "\n".join(self._lines))

    def lines(self) -> list[str]:
        return list(self._lines)
