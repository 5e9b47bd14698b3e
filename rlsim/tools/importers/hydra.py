"""A small Hydra/OmegaConf subset: compose a `defaults:` list, apply dotted overrides, resolve `${...}`.

verl writes its trainer configs for Hydra (a primary YAML whose `defaults:` list pulls in sub-configs
such as `actor/dp_actor.yaml`, `${oc.select:...}` interpolations). Importing one must not need
verl, hydra or omegaconf installed, so this module implements exactly what those configs use:
config groups with `group@package: option`, relative groups (`../engine@fsdp_config`), `override`,
`_self_`, `# @package _global_`, choices interpolated into option names (`${model_engine}_actor`),
absolute / relative interpolations and `oc.select` / `oc.env`. YAML is read with safe_load only.
"""

from __future__ import annotations

import copy
import os
import posixpath
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from rlsim.sim.inputs import YamlInputError, parse_yaml, read_text_bounded
from rlsim.tools.importers.common import ImportProblem

_MISSING = "???"


def deep_merge(base: dict, top: dict) -> dict:
    """OmegaConf merge: mappings merge key by key, anything else (lists too) is replaced by `top`."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def read_config(path: Path) -> tuple[dict, str | None]:
    """A config file's mapping and its `# @package` header (None when absent); bounded safe_load."""
    try:
        text = read_text_bounded(path)
        data, _ = parse_yaml(text)
    except FileNotFoundError:
        raise ImportProblem(str(path), "", "file not found") from None
    except YamlInputError as exc:
        raise ImportProblem(str(path), "", exc.message) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ImportProblem(str(path), "", f"expected a mapping at the top level, got {type(data).__name__}")
    header = re.search(r"^#\s*@package\s+(\S+)", text, re.MULTILINE)
    return data, header.group(1) if header else None


class Composer:
    """Composes a primary config from its directory plus search directories (verl's config folder)."""

    def __init__(self, primary: Path, search: list[Path]):
        self.primary = primary
        self.search = [primary.parent, *search]
        self.choices: dict[str, str] = {}

    def find(self, group: str, name: str, where: str) -> Path:
        name = name.removesuffix(".yaml")
        rel = posixpath.join(group, name) if group else name
        for root in self.search:
            path = root / f"{rel}.yaml"
            if path.is_file():
                return path
        dirs = ", ".join(str(d) for d in self.search)
        raise ImportProblem(str(self.primary), where, f"config {rel!r} not found in {dirs} (give --config-dir)")

    def collect(self) -> dict[str, str]:
        """The config group choices of the defaults tree (`model_engine: dp`, ...)."""
        data, _ = read_config(self.primary)
        self.choices = {}
        self._collect_choices(data, "", top=True)
        return dict(self.choices)

    def compose(self, group_overrides: dict[str, str]) -> dict:
        """The merged config; `group_overrides` replace choices as `model_engine=megatron` on Hydra's command line."""
        data, _ = read_config(self.primary)
        self.collect()
        self.choices.update(group_overrides)
        return self._compose(data, "", "", self.primary.name)

    def _defaults(self, data: dict, where: str) -> list:
        """A config's `defaults:` list (Hydra's form); anything else is one line, never a TypeError."""
        defaults = data.get("defaults") or []
        if not isinstance(defaults, list):
            shown = "a mapping" if isinstance(defaults, dict) else str(defaults).lower() if isinstance(defaults, bool) \
                else repr(defaults)
            raise ImportProblem(str(self.primary), "defaults", f"expected a list of config names (Hydra's "
                                f"defaults list), got {shown}" + (f" (in {where})" if where else ""))
        return defaults

    def _collect_choices(self, data: dict, group: str, top: bool = False) -> None:
        """First pass (as Hydra): group choices, `override` entries win over plain ones."""
        for entry in self._defaults(data, group):
            if isinstance(entry, str) and entry != "_self_" and top:
                full = posixpath.normpath(posixpath.join(group, entry.partition("@")[0]))
                sub, _ = read_config(self.find(posixpath.dirname(full), posixpath.basename(full), "defaults"))
                self._collect_choices(sub, posixpath.dirname(full), top=True)
            elif isinstance(entry, dict):
                for key, option in entry.items():
                    key = str(key)
                    forced = key.startswith("override ")
                    name = key.removeprefix("override ").split("@")[0].strip()
                    if name == group or "/" in name or name.startswith("."):
                        continue
                    if forced or name not in self.choices:
                        self.choices[name] = str(option) if option is not None else ""

    def _option(self, option: Any, where: str) -> str | None:
        if option is None:
            return None
        text = str(option)
        for ref in re.findall(r"\$\{([^}]+)\}", text):
            if ref not in self.choices:
                raise ImportProblem(str(self.primary), where, f"unknown config group {ref!r} in {text!r}")
            text = text.replace("${" + ref + "}", self.choices[ref])
        return text

    def _compose(self, data: dict, group: str, package: str, where: str) -> dict:
        """Merge a config's defaults and its own content (`_self_`, implicitly last) at `package`."""
        defaults = self._defaults(data, group)
        own = {k: v for k, v in data.items() if k != "defaults"}
        if "_self_" not in defaults:
            defaults = [*defaults, "_self_"]
        result: dict = {}
        for entry in defaults:
            if entry == "_self_":
                result = deep_merge(result, _at(own, package))
                continue
            if isinstance(entry, str):  # a config by path, `name` or `../dir/name@package`
                name, _, pkg = entry.partition("@")
                full = posixpath.normpath(posixpath.join(group, name))
                sub_group, option = posixpath.dirname(full), posixpath.basename(full)
                sub_pkg = package if pkg in ("", "_here_") else _join(package, pkg)
            elif isinstance(entry, dict) and len(entry) == 1:
                (key, raw), = entry.items()
                if str(key).startswith("override "):
                    continue  # already applied to the choices
                name, _, pkg = str(key).strip().partition("@")
                # Group paths are relative to the containing config's group; a leading / makes them absolute.
                sub_group = name[1:] if name.startswith("/") else posixpath.normpath(posixpath.join(group, name))
                option = self._option(raw if pkg else self.choices.get(sub_group, raw), where)
                if not option:
                    continue
                sub_pkg = _join(package, pkg) if pkg else _join(package, sub_group.replace("/", "."))
                if pkg == "_here_":
                    sub_pkg = package
                elif pkg.startswith("_global_"):
                    sub_pkg = pkg.removeprefix("_global_").lstrip(".")
            else:
                raise ImportProblem(str(self.primary), where, f"defaults: cannot read entry {entry!r}")
            path = self.find(sub_group, option, f"{where}: defaults")
            sub, header = read_config(path)
            if header == "_global_":
                sub_pkg = ""
            result = deep_merge(result, self._compose(sub, sub_group, sub_pkg, str(path)))
        return result


def _join(package: str, child: str) -> str:
    return f"{package}.{child}" if package and child else package or child


def _at(data: dict, package: str) -> dict:
    """Wrap `data` in the mappings of a dotted package path."""
    for part in reversed([p for p in package.split(".") if p]):
        data = {part: data}
    return data


# ---------------------------------------------------------------- overrides


def apply_hydra_overrides(data: dict, overrides: list[str], source: str) -> dict:
    """Hydra's command-line forms: `a.b=v` (key must exist), `+a.b=v` (must not), `++a.b=v`, `~a.b`."""
    data = copy.deepcopy(data)
    problems: list[tuple[str, str]] = []
    for text in overrides:
        where = f"override {text}"
        if text.startswith("~"):
            key, value, mode = text[1:].partition("=")[0], None, "delete"
        else:
            mode = "force" if text.startswith("++") else "add" if text.startswith("+") else "set"
            key, sep, raw = text.lstrip("+").partition("=")
            if not sep:
                problems.append((where, "expected key=value (or +key=value, ++key=value, ~key)"))
                continue
            try:
                value = yaml.safe_load(raw) if raw.strip() else ""
            except yaml.YAMLError:
                problems.append((where, f"cannot parse value {raw!r}"))
                continue
        parts = key.strip().split(".")
        if not all(parts):
            problems.append((where, f"empty element in key {key!r}"))
            continue
        problem = _set(data, parts, value, mode)
        if problem:
            problems.append((where, problem))
    if problems:
        raise ImportProblem.many(source, problems)
    return data


def _set(data: dict, parts: list[str], value: Any, mode: str) -> str | None:
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part) if isinstance(node, dict) else None
        if not isinstance(child, dict):
            if mode in ("set", "delete") or child is not None:
                dotted = ".".join(parts[: i + 1])
                return f"no mapping {dotted!r} in the config" + (
                    f" (to add it: +{'.'.join(parts)}=...)" if mode == "set" else "")
            node[part] = child = {}
        node = child
    last, exists = parts[-1], parts[-1] in node
    if mode == "set" and not exists:
        return f"key {'.'.join(parts)!r} is not in the config (to add it: +{'.'.join(parts)}=...)"
    if mode == "add" and exists:
        return f"key {'.'.join(parts)!r} is already in the config (to override it: ++{'.'.join(parts)}=...)"
    if mode == "delete":
        if not exists:
            return f"key {'.'.join(parts)!r} is not in the config"
        del node[last]
    else:
        node[last] = value
    return None


# ---------------------------------------------------------------- interpolation


class Resolver:
    """Resolves `${path}`, `${.rel}`, `${oc.select:path,default}`, `${oc.env:VAR,default}` in place, and
    `${name:a, b}` for the custom resolvers a framework registers (`functions`, e.g. NeMo-RL's `mul`)."""

    def __init__(self, root: dict, source: str, functions: dict[str, Callable[..., Any]] | None = None):
        self.root, self.source = root, source
        self.functions = dict(functions or {})
        self.active: set[tuple[str, ...]] = set()

    def resolve_all(self) -> dict:
        self._walk(self.root, ())
        return self.root

    def _walk(self, node: Any, loc: tuple[str, ...]) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in list(items):
            here = (*loc, str(key))
            if isinstance(value, (dict, list)):
                self._walk(value, here)
            elif isinstance(value, str) and "${" in value:
                node[key] = self._value_at(here)

    def _value_at(self, loc: tuple[str, ...]) -> Any:
        found, value = _lookup(self.root, loc)
        if not (isinstance(value, str) and "${" in value):
            return value
        if loc in self.active:
            raise ImportProblem(self.source, ".".join(loc), "interpolation refers to itself")
        self.active.add(loc)
        try:
            resolved = self._text(value, loc[:-1], ".".join(loc))
        finally:
            self.active.discard(loc)
        _store(self.root, loc, resolved)
        return resolved

    def _text(self, text: str, parent: tuple[str, ...], where: str) -> Any:
        """Evaluate a string holding interpolations; a lone `${...}` keeps the referenced type."""
        pieces, i = [], 0
        while True:
            start = text.find("${", i)
            if start < 0:
                pieces.append(text[i:])
                break
            end = _closing(text, start)
            if end < 0:
                raise ImportProblem(self.source, where, f"unclosed interpolation in {text!r}")
            pieces.append(text[i:start])
            pieces.append(self._expr(text[start + 2 : end], parent, where))
            i = end + 1
        pieces = [p for p in pieces if p != ""]
        if len(pieces) == 1:
            return pieces[0]
        return "".join("null" if p is None else str(p) for p in pieces)

    def _expr(self, expr: str, parent: tuple[str, ...], where: str) -> Any:
        expr = expr.strip()
        if expr.startswith("oc.select:") or expr.startswith("oc.env:"):
            kind, _, args = expr.partition(":")
            path, sep, default = _split_top_comma(args)
            fallback = self._text(default.strip(), parent, where) if sep else None
            fallback = yaml.safe_load(fallback) if isinstance(fallback, str) and fallback else fallback
            if kind == "oc.env":
                return os.environ.get(path.strip(), fallback)
            loc = self._path(path.strip(), parent)
            found, _ = _lookup(self.root, loc)
            return self._value_at(loc) if found else fallback
        name, colon, args = expr.partition(":")
        if colon and name.strip() in self.functions:
            return self._call(name.strip(), args, parent, where)
        if re.fullmatch(r"[\w.\-]+", expr) is None:
            raise ImportProblem(self.source, where, f"cannot resolve interpolation ${{{expr}}}")
        loc = self._path(expr, parent)
        found, _ = _lookup(self.root, loc)
        if not found:
            raise ImportProblem(self.source, where, f"interpolation ${{{expr}}}: no key {'.'.join(loc)!r}")
        return self._value_at(loc)

    def _call(self, name: str, args: str, parent: tuple[str, ...], where: str) -> Any:
        """A registered resolver on its evaluated, YAML-typed arguments (`${mul:${a}, 2}`)."""
        values, rest = [], args
        while rest.strip():
            head, sep, rest = _split_top_comma(rest)
            value = self._text(head.strip(), parent, where)
            values.append(yaml.safe_load(value) if isinstance(value, str) and value else value)
            if not sep:
                break
        try:
            return self.functions[name](*values)
        except (TypeError, ValueError) as exc:
            raise ImportProblem(self.source, where, f"${{{name}:{args}}}: {exc}") from None

    @staticmethod
    def _path(path: str, parent: tuple[str, ...]) -> tuple[str, ...]:
        if not path.startswith("."):
            return tuple(path.split("."))
        ups = len(path) - len(path.lstrip(".")) - 1
        base = parent[: len(parent) - ups] if ups else parent
        return (*base, *[p for p in path.lstrip(".").split(".") if p])


def _closing(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _split_top_comma(text: str) -> tuple[str, str, str]:
    depth = 0
    for i, ch in enumerate(text):
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 0:
            return text[:i], ",", text[i + 1 :]
    return text, "", ""


def _lookup(root: Any, loc: tuple[str, ...]) -> tuple[bool, Any]:
    node = root
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def _store(root: Any, loc: tuple[str, ...], value: Any) -> None:
    node = root
    for part in loc[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(loc[-1])] = value
    else:
        node[loc[-1]] = value


def is_missing(value: Any) -> bool:
    """OmegaConf's mandatory-value marker `???`."""
    return value == _MISSING
