"""What every importer shares: the used / ignored / assumed bookkeeping and one-line problems.

An import must account for every key of the framework config: each flattened leaf ends up either
*used* (with the scenario field it became) or *ignored* (with why), and every value rlsim had to
invent is *assumed* (with the `--set` that replaces it). `Ledger` enforces that bookkeeping.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rlsim.sim.api import Problem, ScenarioError

_ABSENT = object()


class ImportProblem(ScenarioError):
    """A config rlsim cannot import: one line per problem, `file: dotted.key: what is wrong`."""

    def __init__(self, source: str, where: str = "", message: str = "", problems: list[Problem] | None = None):
        super().__init__(source, problems if problems is not None else [Problem(where, message)])

    @classmethod
    def many(cls, source: str, pairs: Iterable[tuple[str, str]]) -> ImportProblem:
        return cls(source, problems=[Problem(where, message) for where, message in pairs])


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted leaf keys of a nested mapping; lists and empty mappings are leaves."""
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data} if prefix else {}


@dataclass(frozen=True)
class Assumption:
    what: str
    value: Any
    flag: str


@dataclass
class Ledger:
    """Tracks each input leaf as used (-> scenario field) or ignored (-> reason), plus the assumptions."""

    source: str
    leaves: dict[str, Any]
    used: dict[str, str] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)
    assumed: list[Assumption] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    framework: str | None = None  # whose vocabulary judges unknown keys (rlsim/tools/importers/vocabulary.py)
    unknown: dict[str, str] = field(default_factory=dict)  # key -> ": did you mean X?" or ""
    absent: dict[str, tuple[str, Any]] = field(default_factory=dict)  # key read, not in the config -> (target, value)

    @classmethod
    def of(cls, source: str, config: dict, framework: str | None = None) -> Ledger:
        return cls(source, flatten(config), framework=framework)

    def has(self, key: str) -> bool:
        return key in self.leaves

    def peek(self, key: str, default: Any = None) -> Any:
        """A leaf's value without marking it."""
        return self.leaves.get(key, default)

    def use(self, key: str, target: str, default: Any = None) -> Any:
        """Read a leaf that sets `target` in the scenario (`default` when the config lacks it)."""
        if key not in self.leaves:
            if default is not None and key not in self.absent:
                self.absent[key] = (target, default)
            return default
        self.ignored.pop(key, None)
        self.used[key] = f"{self.used[key]}; {target}" if key in self.used and target not in self.used[key] \
            else target
        return self.leaves[key]

    def under(self, prefix: str) -> list[str]:
        dotted = prefix + "."
        return [k for k in self.leaves if k == prefix or k.startswith(dotted)]

    def ignore(self, prefix: str, reason: str) -> None:
        """Every leaf at or under `prefix` not already used or ignored is ignored for `reason`."""
        for key in self.under(prefix):
            if key not in self.used and key not in self.ignored:
                self.ignored[key] = reason

    def ignore_matching(self, test, reason: str) -> None:
        for key in self.leaves:
            if key not in self.used and key not in self.ignored and test(key):
                self.ignored[key] = reason

    def assume(self, what: str, value: Any, flag: str) -> None:
        self.assumed.append(Assumption(what, value, flag))

    def error(self, key: str, message: str) -> None:
        self.problems.append(Problem(key, message))

    def raise_problems(self) -> None:
        if self.problems:
            raise ImportProblem(self.source, problems=self.problems)

    def finish(self, reason: str) -> None:
        """Whatever is left: ignored for `reason` (so every leaf is in exactly one list: used, ignored or
        unknown). Keys that are not the framework's own are set apart as unknown (a typo must not pass for
        a knob rlsim does not model), and every key read but absent is listed as assumed with its value."""
        self.ignore_matching(lambda _key: True, reason)
        if self.framework is not None:
            from rlsim.tools.importers.vocabulary import vocabulary

            vocab = vocabulary(self.framework)
            for key in list(self.ignored):
                verdict = vocab.check(key)
                if verdict is not None:
                    self.unknown[key] = verdict
                    del self.ignored[key]
        for key, (target, value) in self.absent.items():
            self.assume(f"{key} (absent) -> {target}", value, f"+{key}=V")

    def int_value(self, key: str, target: str, minimum: int = 1, default: Any = None) -> int | None:
        """An integer leaf >= minimum; a problem line otherwise."""
        value = self.use(key, target, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.error(key, f"expected an integer >= {minimum}, got {value!r}")
            return None
        return value

    def fraction(self, key: str, target: str, default: Any = None) -> float | None:
        value = self.use(key, target, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            self.error(key, f"expected a fraction in (0, 1], got {value!r}")
            return None
        return float(value)

    def flag(self, key: str, target: str, default: Any = None) -> bool | None:
        value = self.use(key, target, default)
        if value is None:
            return None
        if not isinstance(value, bool):
            self.error(key, f"expected true or false, got {value!r}")
            return None
        return value


def key_segment(*names: str) -> Callable[[str], bool]:
    """A rule test for `Ledger.ignore_matching`: a dotted key with any of these segments."""
    wanted = set(names)
    return lambda key: bool(wanted.intersection(key.split(".")))


def key_prefix(*prefixes: str) -> Callable[[str], bool]:
    """A dotted key equal to, or under, one of these prefixes."""
    return lambda key: any(key == p or key.startswith(p + ".") for p in prefixes)


def key_leaf(*names: str) -> Callable[[str], bool]:
    """A dotted key whose last segment is one of these names."""
    wanted = set(names)
    return lambda key: key.split(".")[-1] in wanted


def any_of(*tests: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda key: any(test(key) for test in tests)


def compress(keys: Iterable[str], all_keys: Iterable[str]) -> list[str]:
    """Shortest prefixes (`a.b.*`) covering exactly `keys` among `all_keys`: readable, still complete."""
    inside = set(keys)
    mixed: set[str] = set()  # prefixes with at least one leaf outside `keys`
    for key in all_keys:
        if key not in inside:
            parts = key.split(".")
            mixed.update(".".join(parts[:n]) for n in range(1, len(parts)))
    chosen: set[str] = set()
    for key in inside:
        parts = key.split(".")
        prefix = next((".".join(parts[:n]) for n in range(1, len(parts)) if ".".join(parts[:n]) not in mixed), None)
        chosen.add(f"{prefix}.*" if prefix else key)
    return sorted(chosen)


def pool_shape(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, gpus_per_node) of a pool of `gpus` GPUs on nodes of `gpus_per_node` (a partial node: fewer)."""
    if gpus % gpus_per_node == 0:
        return gpus // gpus_per_node, gpus_per_node
    if gpus < gpus_per_node:
        return 1, gpus
    per = math.gcd(gpus, gpus_per_node)
    return gpus // per, per


def show(value: Any) -> str:
    """A value as it would be typed on a command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
