"""One clear line per problem: `file: dotted.path: what is wrong` (docs/sources.md, Design notes: Bad input)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    path: str  # dotted path into the scenario ("" for the file as a whole)
    message: str

    def line(self, source: str) -> str:
        return f"{source}: {self.path}: {self.message}" if self.path else f"{source}: {self.message}"


class ScenarioError(Exception):
    """An invalid scenario or override; carries every problem found, not just the first."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = list(problems)
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [p.line(self.source) for p in self.problems]
