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

    def __reduce__(self):
        """Pickle by state, not by re-calling __init__ with `args` (the message): a sweep's or plan's process
        pool sends a worker's error back by pickle, and subclasses take other arguments than the message."""
        return _rebuilt, (type(self), self.args, dict(self.__dict__))

    def lines(self) -> list[str]:
        return [p.line(self.source) for p in self.problems]


def _rebuilt(cls: type[ScenarioError], args: tuple, state: dict) -> ScenarioError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error
