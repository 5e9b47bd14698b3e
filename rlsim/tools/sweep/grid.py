"""Sweep expansion: `--grid` Cartesian products, `--zip` paired lists, seed replicates, sweep files.

A sweep is planned completely before anything runs: every point's overrides are applied and the
scenario validated, so a typo in a key (or a malformed `--grid`) stops the sweep with one line per
problem instead of failing 200 times later; so does a problem every point has. Problems that only
some points have (a value that does not fit in memory, an invalid parallelism) are not fatal: those
points run, fail and get an error row, because finding the infeasible corner of a grid is often the
point of the sweep.

Seeds: without `--seeds` every point runs the scenario's own seed, so a point reproduces
`rlsim run --set ...` exactly. With `--seeds K`, replicate r runs the seed
`SeedSequence(scenario_seed).spawn(K)[r]`, the same for every grid point (common random numbers:
differences between points come from the knobs, not from the noise) and independent of the grid's
order, its size and K (raising K later reuses the replicates already stored).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rlsim.sim.api import Problem, ScenarioError, parse_scenario, read_yaml
from rlsim.sim.inputs import did_you_mean
from rlsim.tools.sweep.errors import SweepError

SWEEP_FILE_KEYS = ("scenario", "grid", "zip", "seeds", "set")
_CLOSERS = {"[": "]", "{": "}", "(": ")"}


# ---------------------------------------------------------------- values


def format_value(value: Any) -> str:
    """A value as override text that `yaml.safe_load` reads back equal (`1e-05` needs `1.0e-05`)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, sort_keys=False)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def display_value(value: Any) -> Any:
    """A parsed value as a table cell: scalars as they are, lists and mappings as their YAML text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return format_value(value)


def split_values(text: str) -> list[str]:
    """Split `v1,v2,...` on the commas outside brackets and quotes: `[1,2],{a: 1, b: 2}` is two values."""
    items: list[str] = []
    stack: list[str] = []
    quote: str | None = None
    current = ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in _CLOSERS:
            stack.append(_CLOSERS[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        elif ch == "," and not stack:
            items.append(current.strip())
            current = ""
            continue
        current += ch
    items.append(current.strip())
    return items


def parse_axis(option: str, flag: str) -> tuple[str, list[str]]:
    """`key=v1,v2` -> (key, canonical value texts); raises SweepError naming the option."""
    key, sep, raw = option.partition("=")
    key = key.strip()
    where = f"{flag} {option}"
    if not sep or not key:
        raise SweepError([f"{where}: expected {flag} dotted.path=v1,v2,..."])
    if any(not part.strip() for part in key.split(".")):
        raise SweepError([f"{where}: empty element in path {key!r}"])
    texts = split_values(raw)
    if not raw.strip() or any(not t for t in texts):
        raise SweepError([f"{where}: empty value (expected {flag} {key}=v1,v2,...)"])
    values = []
    for text in texts:
        try:
            values.append(format_value(yaml.safe_load(text)))
        except yaml.YAMLError as exc:
            raise SweepError([f"{where}: cannot parse value {text!r}: {str(exc).splitlines()[0]}"]) from None
    return key, values


# ---------------------------------------------------------------- the sweep description


@dataclass
class SweepSpec:
    """What to sweep, from the command line and/or a sweep YAML file (CLI entries win per key)."""

    scenario: Path
    grid: dict[str, list[str]] = field(default_factory=dict)
    zip: dict[str, list[str]] = field(default_factory=dict)
    seeds: int | None = None
    set: list[str] = field(default_factory=list)
    source: str = ""  # the sweep file, when there is one (for messages)

    @property
    def params(self) -> list[str]:
        return [*self.grid, *self.zip]


@dataclass(frozen=True)
class Point:
    """One simulation of the sweep. `overrides` are the swept ones; the sweep's `set` comes first."""

    index: int
    point_id: str
    combo: int
    replicate: int
    seed: int
    overrides: tuple[str, ...]
    params: dict[str, Any]


@dataclass
class SweepPlan:
    spec: SweepSpec
    base: dict  # the scenario YAML mapping as read
    source: str  # the scenario path, as messages name it
    base_dir: Path
    scenario_hash: str
    points: list[Point]

    @property
    def name(self) -> str:
        return str(self.base.get("name") or Path(self.source).stem)

    def full_overrides(self, point: Point) -> tuple[str, ...]:
        """The point's overrides; an asynchronous point also warms up to steady state unless it sets warmup_steps."""
        from rlsim.tools.sweep.steady_state import steady_overrides

        return steady_overrides(self.base, (*self.spec.set, *point.overrides), self.source)[0]

    def warnings(self) -> list[str]:
        """At most one line: a warm-up the sweep set too short for steady state, with the most steps a point
        needs."""
        from rlsim.tools.sweep.steady_state import steady_overrides

        notes = [steady_overrides(self.base, (*self.spec.set, *p.overrides), self.source) for p in self.points]
        short = [(need, note) for _, note, need in notes if note]
        return [max(short)[1]] if short else []


def is_sweep_file(data: Any) -> bool:
    """A sweep file names a scenario; a scenario file never has a top-level `scenario` key."""
    return isinstance(data, Mapping) and "scenario" in data and "cluster" not in data


def read_sweep_file(path: Path, data: Mapping[str, Any]) -> SweepSpec:
    """`{scenario: path, grid: {key: [..]}, zip: {key: [..]}, seeds: K, set: [..]}`; paths relative to it."""
    src = str(path)
    lines = [
        f"{src}: {k}: unknown key (expected one of {', '.join(SWEEP_FILE_KEYS)}){did_you_mean(str(k), SWEEP_FILE_KEYS)}"
        for k in data
        if k not in SWEEP_FILE_KEYS
    ]
    scenario = data.get("scenario")
    if not isinstance(scenario, str) or not scenario.strip():
        lines.append(f"{src}: scenario: expected the path of a scenario YAML file")
        scenario = ""
    axes: dict[str, dict[str, list[str]]] = {}
    for section in ("grid", "zip"):
        raw = data.get(section) or {}
        axes[section] = {}
        if not isinstance(raw, Mapping):
            lines.append(f"{src}: {section}: expected a mapping of dotted.path: [values]")
            continue
        for key, values in raw.items():
            if not isinstance(values, list) or not values:
                lines.append(f"{src}: {section}.{key}: expected a non-empty list of values")
                continue
            axes[section][str(key)] = [format_value(v) for v in values]
    seeds = data.get("seeds")
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1):
        lines.append(f"{src}: seeds: expected an integer >= 1, got {seeds!r}")
        seeds = None
    sets = data.get("set") or []
    if isinstance(sets, Mapping):  # `set: {a.b: 1}` reads naturally too
        sets = [f"{k}={format_value(v)}" for k, v in sets.items()]
    if not isinstance(sets, list) or not all(isinstance(s, str) for s in sets):
        lines.append(f"{src}: set: expected a list of dotted.path=value strings")
        sets = []
    if lines:
        raise SweepError(lines)
    return SweepSpec(_scenario_path(path, scenario), axes["grid"], axes["zip"], seeds, list(sets), source=src)


def _scenario_path(sweep_file: Path, scenario: str) -> Path:
    """Relative to the sweep file; else the name of a shipped scenario (`quickstart`)."""
    from rlsim.sim.api import shipped_dir

    path = Path(scenario).expanduser()
    if path.is_absolute():
        return path
    if (sweep_file.parent / path).exists():
        return sweep_file.parent / path
    for candidate in (shipped_dir("scenarios") / path, shipped_dir("scenarios") / f"{scenario}.yaml"):
        if candidate.is_file():
            return candidate
    return sweep_file.parent / path  # the loader reports it missing


def build_spec(
    target: Path,
    grid: Sequence[str] = (),
    zip_: Sequence[str] = (),
    seeds: int | None = None,
    sets: Sequence[str] = (),
) -> tuple[SweepSpec, dict]:
    """Read TARGET (a scenario or a sweep file), merge the command-line axes; return (spec, scenario data)."""
    data = read_yaml(target)
    if is_sweep_file(data):
        spec = read_sweep_file(target, data)
        data = read_yaml(spec.scenario)
    else:
        spec = SweepSpec(Path(target))
    lines: list[str] = []
    cli: dict[str, dict[str, list[str]]] = {"grid": {}, "zip": {}}
    for flag, section, options in (("--grid", "grid", grid), ("--zip", "zip", zip_)):
        for option in options:
            try:
                key, values = parse_axis(option, flag)
            except SweepError as exc:
                lines += exc.lines()
                continue
            if key in cli["grid"] or key in cli["zip"]:
                lines.append(f"{flag} {option}: {key} is swept twice")
                continue
            cli[section][key] = values
    for section in ("grid", "zip"):  # a key on the command line replaces the file's, in either section
        for key in cli[section]:
            spec.grid.pop(key, None)
            spec.zip.pop(key, None)
    spec.grid.update(cli["grid"])
    spec.zip.update(cli["zip"])
    both = set(spec.grid) & set(spec.zip)
    lines += [f"{spec.source or target}: {key}: in both grid and zip" for key in both]
    lengths = {key: len(values) for key, values in spec.zip.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{k} ({n})" for k, n in lengths.items())
        lines.append(f"--zip: the zipped lists must have the same length, got {shown}")
    if seeds is not None:
        if seeds < 1:
            lines.append(f"--seeds: expected an integer >= 1, got {seeds}")
        spec.seeds = seeds
    spec.set = [*spec.set, *sets]
    if lines:
        raise SweepError(lines)
    return spec, data


# ---------------------------------------------------------------- expansion


def derive_seeds(base_seed: int, count: int) -> list[int]:
    """Replicate r's seed: `SeedSequence(base_seed).spawn(count)[r]` as a uint32; independent of count."""
    children = np.random.SeedSequence(base_seed).spawn(count)
    return [int(child.generate_state(1, dtype=np.uint32)[0]) for child in children]


def combinations(spec: SweepSpec) -> list[tuple[str, ...]]:
    """The override combinations in sweep order: grid axes in key order, the zip group last (fastest)."""
    axes: list[list[tuple[str, ...]]] = [
        [(f"{key}={value}",) for value in values] for key, values in spec.grid.items()
    ]
    if spec.zip:
        columns = [[f"{key}={value}" for value in values] for key, values in spec.zip.items()]
        axes.append([tuple(row) for row in zip(*columns, strict=True)])
    return [tuple(itertools.chain.from_iterable(parts)) for parts in itertools.product(*axes)]


def scenario_hash(data: Mapping[str, Any]) -> str:
    """A short hash of the scenario mapping: points of an edited scenario are new points."""
    text = json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _flag_of(spec: SweepSpec, override: str) -> str:
    key = override.partition("=")[0].strip()
    if key in spec.grid:
        return f"--grid {key}"
    if key in spec.zip:
        return f"--zip {key}"
    return f"--set {override}"


def _problems(spec: SweepSpec, base: dict, source: str, base_dir: Path, combo: Sequence[str]):
    """Validate one combination: (its seed or None, structural problem lines, other problem lines).

    Structural problems come from an override's key (unknown path, malformed): they hit every value.
    """
    try:
        return parse_scenario(base, source, (*spec.set, *combo), base_dir).seed, [], []
    except ScenarioError as exc:
        structural = [
            Problem(_flag_of(spec, p.path[6:]), p.message).line(source)
            for p in exc.problems
            if p.path.startswith("--set ")
        ]
        other = [p.line(source) for p in exc.problems if not p.path.startswith("--set ")]
        return None, structural, other


def plan_sweep(
    target: str | Path,
    grid: Sequence[str] = (),
    zip_: Sequence[str] = (),
    seeds: int | None = None,
    sets: Sequence[str] = (),
) -> SweepPlan:
    """Read, merge, validate and expand a sweep; raises SweepError before anything runs."""
    from rlsim.tools.sweep.store import point_id

    spec, base = build_spec(Path(target), grid, zip_, seeds, sets)
    source = str(spec.scenario)
    base_dir = spec.scenario.resolve().parent
    shash = scenario_hash(base)
    points: list[Point] = []
    structural: list[str] = []
    common: list[str] | None = None  # problems every combination has: the scenario's, not a value's
    for combo_index, combo in enumerate(combinations(spec)):
        own_seed, bad_keys, other = _problems(spec, base, source, base_dir, combo)
        structural += bad_keys
        common = other if common is None else [line for line in common if line in set(other)]
        if (
            own_seed is None
        ):  # an invalid point runs, fails and gets an error row; its seed only has to be stable
            raw = base.get("seed", 0)
            own_seed = raw if isinstance(raw, int) and raw >= 0 else 0
        seeds_here = [own_seed] if spec.seeds is None else derive_seeds(own_seed, spec.seeds)
        params = {o.partition("=")[0]: display_value(yaml.safe_load(o.partition("=")[2])) for o in combo}
        for replicate, seed in enumerate(seeds_here):
            pid = point_id(shash, (*spec.set, *combo), seed)
            points.append(Point(len(points), pid, combo_index, replicate, seed, combo, params))
    if structural or common:
        raise SweepError([*(common or []), *structural])
    return SweepPlan(spec, base, source, base_dir, shash, points)
