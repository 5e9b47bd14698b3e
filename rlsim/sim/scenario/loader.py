"""Reading, overriding, validating and dumping scenarios (docs/sources.md, Design notes: Outputs and Bad input).

Every way a scenario can be wrong ends up as a `Problem(dotted.path, short message)` inside one
`ScenarioError`, so the CLI prints one line per problem and exits 2, without a traceback. YAML is
read with `yaml.safe_load` semantics only, within limits (rlsim/sim/yaml_input.py): nothing in a scenario
is ever constructed or evaluated.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rlsim.sim.scenario.calibration import apply_calibration
from rlsim.sim.scenario.errors import Problem, ScenarioError
from rlsim.sim.scenario.messages import (  # noqa: F401 - validation_problems and format_loc are used from here
    Loc,
    _dedupe,
    _override_problem,
    _show,
    format_loc,
    validation_problems,
)
from rlsim.sim.scenario.placement import resolve_scenario
from rlsim.sim.scenario.schema import Scenario
from rlsim.sim.yaml_input import YamlInputError, parse_yaml, read_text_bounded

# ---------------------------------------------------------------- public API


def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """Read a scenario YAML file, apply `--set` overrides, validate and check it.

    Relative paths inside the scenario (empirical length CSVs, hardware profile YAMLs) are resolved
    against the scenario file's directory, so a scenario works from any working directory.
    """
    source = str(path)
    data = read_yaml(path)
    return parse_scenario(data, source=source, overrides=overrides, base_dir=Path(path).resolve().parent)


def parse_scenario(
    data: Any,
    source: str = "<scenario>",
    overrides: Sequence[str] = (),
    base_dir: Path | None = None,
) -> Scenario:
    """Validate an already-parsed scenario mapping; raise ScenarioError listing every problem.

    Order: overrides (syntax problems are collected, the rest still applied), then pydantic
    validation, then the semantic checks (only on a scenario that validated); returns the scenario with
    its placement resolved (`rlsim.sim.scenario.placement.resolve_scenario`).
    """
    if not isinstance(data, Mapping):
        raise ScenarioError(source, [Problem("", f"expected a mapping at the top level, got {_show(data)}")])
    data, problems, anchors = _apply_overrides(dict(data), overrides)
    data, calibration_problems = apply_calibration(data, base_dir)  # a `calibration:` overlay, file or block
    problems += calibration_problems
    if base_dir is not None:
        _resolve_relative_paths(data, Path(base_dir))
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        problems += validation_problems(exc, data, anchors, root=Scenario)
        raise ScenarioError(source, _dedupe(problems)) from None
    scenario, checked = resolve_scenario(scenario)  # semantic checks, then the placement applied once
    problems += checked
    if problems:
        raise ScenarioError(source, _dedupe(problems))
    return scenario


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str], source: str = "<scenario>") -> dict:
    """Return a deep copy of `data` with Hydra-style `dotted.path=value` overrides applied.

    Values are parsed with `yaml.safe_load`, so `4`, `h20`, `[1, 2]` and `{kind: fixed, value: 10}`
    become an int, a string, a list and a mapping. Raises ScenarioError for malformed overrides.
    """
    result, problems, _ = _apply_overrides(dict(data), overrides)
    if problems:
        raise ScenarioError(source, problems)
    return result


def dump_scenario(scenario: Scenario) -> str:
    """The fully resolved scenario as YAML (written as `scenario.resolved.yaml`); parses back equal."""
    data = scenario.model_dump(mode="json", exclude_none=False)
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True, width=110)


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file with safe_load semantics; any failure becomes a ScenarioError with one line.

    The file is read once, bounded (rlsim/sim/yaml_input.py: size, aliases, nesting, integer limits; no
    FIFO or device). Duplicate keys are refused: YAML keeps the last one silently, which hides typos
    as well as an unknown key would.
    """
    source = str(path)
    try:
        data, node = parse_yaml(read_text_bounded(path))
    except FileNotFoundError:
        raise ScenarioError(source, [Problem("", "file not found")]) from None
    except YamlInputError as exc:
        raise ScenarioError(source, [Problem("", exc.message)]) from None
    duplicates = _duplicate_keys(node)
    if duplicates:
        raise ScenarioError(source, duplicates)
    if data is None:
        raise ScenarioError(source, [Problem("", "empty file, expected a scenario mapping")])
    if not isinstance(data, dict):
        raise ScenarioError(source, [Problem("", f"expected a mapping at the top level, got {_show(data)}")])
    return data


# ---------------------------------------------------------------- YAML helpers


def _duplicate_keys(node: yaml.Node | None, loc: Loc = (), seen_nodes: set[int] | None = None) -> list[Problem]:
    """Walk the composed node tree (no object is constructed) looking for repeated mapping keys.

    A node reached again through an alias is walked once: its problems are reported where it is defined.
    """
    problems: list[Problem] = []
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:
        return problems
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            line = key_node.start_mark.line + 1
            if key in seen and key != "<<":  # `<<` is YAML's merge key, repeatable
                where = f"twice on line {line}" if seen[key] == line else f"lines {seen[key]} and {line}"
                problems.append(Problem(format_loc((*loc, key)), f"duplicate key ({where})"))
            else:
                seen[key] = line
            problems += _duplicate_keys(value_node, (*loc, key), seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            problems += _duplicate_keys(item, (*loc, i), seen_nodes)
    return problems


# ---------------------------------------------------------------- overrides


def _apply_overrides(
    data: dict, overrides: Sequence[str]
) -> tuple[dict, list[Problem], list[tuple[str, Loc]]]:
    """Apply overrides to a deep copy; return (data, problems, anchors).

    An anchor is (override, location of the shallowest key the override created, or of the value it
    replaced): unknown keys found at or under an anchor are blamed on that override, not the file.
    """
    data = copy.deepcopy(data)
    problems: list[Problem] = []
    anchors: list[tuple[str, Loc]] = []
    for override in overrides:
        key, sep, raw_value = str(override).partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(_override_problem(override, "expected dotted.path=value"))
            continue
        parts = key.split(".")
        if any(not p.strip() for p in parts):
            problems.append(_override_problem(override, f"empty element in path {key!r}"))
            continue
        parts = [p.strip() for p in parts]
        try:
            # As in Hydra, `key=` sets an empty string; `key=null` sets null.
            value = parse_yaml(raw_value)[0] if raw_value.strip() else ""
        except YamlInputError as exc:
            problems.append(_override_problem(override, f"cannot parse value: {exc.message}"))
            continue
        problem, anchor = _set_path(data, parts, value)
        if problem:
            problems.append(_override_problem(override, problem))
        else:
            anchors.append((override, anchor))
    return data, problems, anchors


def _set_path(data: dict, parts: list[str], value: Any) -> tuple[str | None, Loc]:
    """Set data[p0][p1]... = value, creating absent mappings; return (problem, anchor)."""
    node: Any = data
    anchor: Loc | None = None
    for i, part in enumerate(parts):
        here: Loc = tuple(parts[: i + 1])
        key: str | int = part
        if isinstance(node, list):
            if not re.fullmatch(r"-?\d+", part) or not -len(node) <= int(part) < len(node):
                return f"{format_loc(here[:-1])} is a list of {len(node)}, {part!r} is not an index", ()
            key = int(part)
        elif not isinstance(node, dict):
            return f"{format_loc(here[:-1])} is {_show(node)}, not a mapping", ()
        if i == len(parts) - 1:
            node[key] = value
            return None, anchor or here
        child = node[key] if isinstance(node, list) else node.get(key)
        if child is None:  # absent, or null in the file (e.g. `engine: null` from a dump)
            child = node[key] = {}
            anchor = anchor or here
        node = child
    return None, anchor or tuple(parts)


# ---------------------------------------------------------------- paths relative to the scenario file


def _resolve_relative_paths(data: dict, base_dir: Path) -> None:
    """Make file references absolute in place, so the Scenario (and its dump) works from anywhere.

    Empirical distributions (`kind: empirical`, `path: lengths.csv`) anywhere in the tree, and pool
    hardware given as a YAML file path, and the workload's length trace.
    """
    _resolve_empirical(data, base_dir)
    workload = data.get("workload")
    trace = workload.get("length_trace") if isinstance(workload, dict) else None
    if isinstance(trace, dict) and isinstance(trace.get("path"), str):
        trace["path"] = _absolute(trace["path"], base_dir)
    cluster = data.get("cluster")
    pools = cluster.get("pools") if isinstance(cluster, dict) else None
    if isinstance(pools, dict):
        for pool in pools.values():
            hw = pool.get("hardware") if isinstance(pool, dict) else None
            if isinstance(hw, str) and hw.endswith((".yaml", ".yml")):
                pool["hardware"] = _absolute(hw, base_dir)


def _resolve_empirical(node: Any, base_dir: Path) -> None:
    if isinstance(node, dict):
        if node.get("kind") == "empirical" and isinstance(node.get("path"), str):
            node["path"] = _absolute(node["path"], base_dir)
        for value in node.values():
            _resolve_empirical(value, base_dir)
    elif isinstance(node, list):
        for value in node:
            _resolve_empirical(value, base_dir)


def _absolute(path: str, base_dir: Path) -> str:
    if "\0" in path:  # not a file name: the reader of that field refuses it in one line
        return path
    p = Path(path).expanduser()
    return str(p if p.is_absolute() else (base_dir / p).resolve())
