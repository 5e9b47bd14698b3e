"""Pydantic errors -> one short line each: `dotted.path: what is wrong` (plus "did you mean ...?").

Shared by the scenario loader, the `calibration:` block and hardware-profile files, so that every
field is worded the same way: "must be <= 10, got 10.5", "unknown key: did you mean sigma?", never
pydantic's own text or a link to its docs.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from rlsim.sim.model_shapes import preset_names
from rlsim.sim.scenario.errors import Problem
from rlsim.sim.suggest import did_you_mean

Loc = tuple[str | int, ...]


def _override_problem(override: str, message: str) -> Problem:
    return Problem(f"--set {override}", message)


def model_problems(exc: ValidationError, raw: Any, at: Loc = (), root: type[BaseModel] | None = None) -> list[Problem]:
    """One Problem per error of a model validated on its own (`root`: a `calibration:` block at `at`, a
    hardware profile): the same wording as every scenario field, paths prefixed with `at`."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = clean_loc(tuple(err["loc"]), raw)
        message = _message(err, root) + _suggestion(loc, err, root)
        problems.append(Problem(format_loc((*at, *loc)), message))
    return _dedupe(problems)

def format_loc(loc: Loc) -> str:
    """('roles', 'rollout', 'parallel', 'tp') -> 'roles.rollout.parallel.tp'; list indices as [i]."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def clean_loc(loc: Loc, raw: Any) -> Loc:
    """Drop what pydantic inserts into `loc` that the user never wrote.

    A tagged union adds the tag (`workload.response_length.lognormal.sigma`): an element that is not
    a key of the current input mapping but equals its `kind` is dropped. `[key]` (a dict key failed
    validation) is dropped too: the path already ends at the key.
    """
    out: list[str | int] = []
    node: Any = raw
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(node, Mapping):
            if part in node:
                node = node[part]
                part = str(part)  # a mapping key, even if YAML read it as a number: models.1, not models[1]
            elif node.get("kind") == part:
                continue
            else:
                node = None
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
        out.append(part)
    return tuple(out)


def validation_problems(
    exc: ValidationError, raw: Any, anchors: Sequence[tuple[str, Loc]] = (), root: type[BaseModel] | None = None
) -> list[Problem]:
    """One short Problem per pydantic error; unknown keys created by an override name the override.

    `root`: the model validated (the loader passes Scenario): where a misspelt key's known neighbours and a
    union's tags are looked up (none: no suggestions).

    Errors inside an unknown key (an unknown role's missing fields) are dropped: the key is the problem.
    """
    errors = [(clean_loc(tuple(err["loc"]), raw), err) for err in exc.errors(include_url=False)]
    unknown = {loc for loc, err in errors if _is_unknown_key(err)}
    problems = []
    for loc, err in errors:
        if any(loc[: len(u)] == u and len(loc) > len(u) for u in unknown):
            continue
        message = _message(err, root) + _suggestion(loc, err, root)
        blamed = next(
            (ov for ov, anchor in anchors if _is_unknown_key(err) and loc[: len(anchor)] == anchor), None
        )
        if blamed is not None:
            problems.append(_override_problem(blamed, f"{format_loc(loc)}: {message}"))
        else:
            problems.append(Problem(format_loc(loc), message))
    return problems


def _suggestion(loc: Loc, err: Mapping[str, Any], root: type[BaseModel] | None = None) -> str:
    """': did you mean X?' for a misspelt key or choice (rlsim/sim/suggest.py), else ''."""
    kind = err["type"]
    if kind == "extra_forbidden" and loc:
        models, _ = _models_at(tuple(err["loc"])[:-1], root)
        if models:  # the tagged member the input chose (schedule.kind: fully-async): its own keys only
            return did_you_mean(str(loc[-1]), [name for m in models for name in m.model_fields])
        return did_you_mean(str(loc[-1]), _known_keys(loc[:-1], root))
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", "")))
        word = loc[-1] if "[key]" in err["loc"] and loc else err.get("input")
        return did_you_mean(str(word), choices) if isinstance(word, str) else ""
    if kind == "union_tag_invalid":
        raw = err.get("input")
        disc = str((err.get("ctx") or {}).get("discriminator", "kind")).strip("'")
        tag = raw.get(disc) if isinstance(raw, Mapping) else None
        tags = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected_tags", "")))
        return did_you_mean(tag, tags) if isinstance(tag, str) else ""
    return ""


def _known_keys(loc: Loc, root: type[BaseModel] | None = None) -> list[str]:
    """The field names a mapping at `loc` accepts (every member's, under a union), found in the schema."""
    if root is None:
        return []
    anns: list[Any] = [root]
    for part in loc:
        anns = _step([m for ann in anns for m in _members(ann)], part)
    return [name for model in _models(anns) for name in model.model_fields]


def _step(members: list[Any], part: str | int) -> list[Any]:
    """The annotations one key (or list index) further down from these types."""
    nxt: list[Any] = []
    for member in members:
        if isinstance(member, type) and issubclass(member, BaseModel):
            if str(part) in member.model_fields:
                nxt.append(member.model_fields[str(part)].annotation)
        elif typing.get_origin(member) is dict:
            nxt.append(typing.get_args(member)[1])
        elif typing.get_origin(member) is list and isinstance(part, int):
            nxt.append(typing.get_args(member)[0])
    return nxt


def _models(anns: list[Any]) -> list[type[BaseModel]]:
    return [m for ann in anns for m in _members(ann) if isinstance(m, type) and issubclass(m, BaseModel)]


def _models_at(raw_loc: Loc, root: type[BaseModel] | None) -> tuple[list[type[BaseModel]], tuple[str, list]]:
    """The models a mapping at pydantic's `raw_loc` validates as, narrowed to a tagged union's chosen member.

    pydantic writes the tag into the loc (`schedule`, `fully-async`, ...): there the union's members are
    narrowed to the one whose `kind` is the tag. Returns (models, (tag, the union's other members)); the
    tag is "" and the list empty where no tag was met ([] models: the path left the schema).
    """
    anns: list[Any] = [root] if root is not None else []
    tagged: tuple[str, list] = ("", [])
    for part in raw_loc:
        models = _models(anns)
        chosen = [m for m in models if "kind" in m.model_fields
                  and part in typing.get_args(m.model_fields["kind"].annotation)]
        if chosen and not any(str(part) in m.model_fields for m in models):
            tagged, anns = (str(part), [m for m in models if m not in chosen]), chosen
        else:
            anns = _step([m for ann in anns for m in _members(ann)], part)
    return (_models(anns), tagged) if tagged[0] else ([], ("", []))


def _elsewhere(raw_loc: Loc, root: type[BaseModel] | None) -> str:
    """' for fully-async (only hybridflow, verl-v1 use it)' when other members of the tagged union take the key."""
    if not raw_loc:
        return ""
    models, (tag, others) = _models_at(raw_loc[:-1], root)
    takers = [t for m in others if str(raw_loc[-1]) in m.model_fields
              for t in typing.get_args(m.model_fields["kind"].annotation)]
    if not models or not takers:
        return ""
    return f" for {tag} (only {', '.join(takers)} use{'s' if len(takers) == 1 else ''} it)"


def _members(ann: Any) -> list[Any]:
    """A type's alternatives: the members of a Union (inside Annotated / Optional), else itself."""
    ann = _unwrap(ann)
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(ann) for m in _members(arg)]
    return [ann]


def _is_unknown_key(err: Mapping[str, Any]) -> bool:
    return err["type"] == "extra_forbidden" or (err["type"] == "literal_error" and "[key]" in err["loc"])


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML, kept short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    return repr(value)


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _quoted_list(text: str) -> str:
    """Pydantic's "'a', 'b' or 'c'" -> "a, b, c"."""
    items = re.findall(r"'([^']*)'", text)
    return ", ".join(items) if items else text


_COMPARISONS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
_EXPECTED = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
    "dict": "a mapping",
    "model": "a mapping",
    "model_attributes": "a mapping",
    "list": "a list",
}


def _message(err: Mapping[str, Any], root: type[BaseModel] | None = None) -> str:
    kind: str = err["type"]
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    got = _show(err.get("input"))
    if kind == "extra_forbidden":
        return "unknown key" + _elsewhere(tuple(err["loc"]), root)
    if kind == "missing":
        return "required"
    if kind == "finite_number":
        return f"must be a finite number, got {got}"
    if kind in _COMPARISONS:
        bound = next(iter(ctx.values()), "?")
        return f"must be {_COMPARISONS[kind]} {_num(bound)}, got {got}"
    if kind == "literal_error":
        expected = _quoted_list(str(ctx.get("expected", "")))
        if "[key]" in err["loc"]:
            return f"unknown key (expected one of {expected})"
        return f"must be one of {expected}, got {got}"
    if kind == "union_tag_invalid":
        disc = str(ctx.get("discriminator", "kind")).strip("'")
        tags = _quoted_list(str(ctx.get("expected_tags", "")))
        raw = err.get("input")
        tag = _show(raw.get(disc)) if isinstance(raw, Mapping) else repr(ctx.get("tag"))
        return f"{disc} must be one of {tags}, got {tag}"
    if kind == "union_tag_not_found":
        disc = str(ctx.get("discriminator", "kind")).strip("'")
        tags = _expected_tags(tuple(err["loc"]), disc, root)
        return f"{disc} required" + (f" (one of {', '.join(tags)})" if tags else "")
    if kind == "too_short":
        n = ctx.get("min_length", 1)
        return "must not be empty" if n == 1 else f"must have at least {n} entries"
    if kind in ("value_error", "assertion_error"):
        text = str(ctx.get("error", err.get("msg", "")))
        if text.startswith("unknown model preset"):
            text += f" (known: {', '.join(preset_names())})"
        return text
    for prefix, expected in _EXPECTED.items():
        if kind.startswith(prefix + "_"):
            return f"expected {expected}, got {got}"
    msg = str(err.get("msg", kind))
    return msg[:1].lower() + msg[1:]


def _expected_tags(loc: Loc, disc: str, root: type[BaseModel] | None = None) -> list[str]:
    """The tags a discriminated union at `loc` accepts, found by walking the schema (best effort)."""
    if root is None:
        return []
    ann: Any = root
    try:
        for part in loc:
            ann = _unwrap(ann)
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                ann = ann.model_fields[str(part)].annotation
            elif typing.get_origin(ann) is dict:
                ann = typing.get_args(ann)[1]
            elif typing.get_origin(ann) is list:
                ann = typing.get_args(ann)[0]
            else:
                return []
        tags: list[str] = []
        for member in typing.get_args(_unwrap(ann)):
            if isinstance(member, type) and issubclass(member, BaseModel) and disc in member.model_fields:
                tags += [str(t) for t in typing.get_args(member.model_fields[disc].annotation)]
        return tags
    except (KeyError, TypeError):
        return []


def _unwrap(ann: Any) -> Any:
    """The type inside Annotated[...] and Optional[...] wrappers."""
    while True:
        args = typing.get_args(ann)
        if typing.get_origin(ann) is typing.Annotated:
            ann = args[0]
        elif typing.get_origin(ann) is typing.Union and len(args) == 2 and type(None) in args:
            ann = args[0] if args[1] is type(None) else args[1]
        else:
            return ann


def _dedupe(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))
