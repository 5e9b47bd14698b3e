"""The README tells the truth: every `rlsim ...` command and option it shows exists, and every output
file it names is one the code writes (or a file in the repository)."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from rlsim.tools.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
FILE_NAME = re.compile(r"[\w.<>*-]+\.(?:png|svg|pdf|csv|json|html|parquet)\b")


def readme_commands() -> list[str]:
    """Each `rlsim ...` invocation in the README's code blocks and inline code (comments cut)."""
    found = []
    for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", README, flags=re.S):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            for part in re.split(r"&&|;|\|", line.split(" #")[0]):
                part = part.strip()
                if part.startswith("rlsim "):
                    found.append(part)
    found += [c for c in re.findall(r"`(rlsim [a-z][a-z-]*(?: [^`]*)?)`", README)]
    return found


def _click():
    return typer.main.get_command(app)


def _options(command) -> set[str]:
    names = set()
    for param in command.params:
        names.update(getattr(param, "opts", []))
        names.update(getattr(param, "secondary_opts", []))
    return names


def test_readme_shows_commands():
    assert len(readme_commands()) >= 15


def test_every_readme_command_and_option_exists():
    group = _click()
    problems = []
    for line in readme_commands():
        words = line.split()
        name = words[1]
        if words[1:3] == ["plot", "sweep"]:  # main() rewrites the spaced spelling
            name = "plot-sweep"
        if name.startswith("-") or name.isupper():
            continue
        command = group.commands.get(name)
        if command is None:
            problems.append(f"{line}: no command {name!r}")
            continue
        known = _options(command) | {"--help"}
        for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", line):
            if flag not in known:
                problems.append(f"{line}: {name} has no option {flag}")
    assert not problems, "\n".join(problems)


def _written_names() -> set[str]:
    """File names the code writes: plot stems in any format, and every file-name literal in rlsim/."""
    from rlsim.tools.report.plots import PLOTS

    names = {f"{stem}.{fmt}" for stem, _ in PLOTS.values() for fmt in ("png", "svg", "pdf")}
    for path in (ROOT / "rlsim").rglob("*.py"):
        names.update(FILE_NAME.findall(path.read_text()))
    return names


def test_every_file_name_in_the_readme_is_written_or_exists():
    written = _written_names()
    problems = []
    for name in sorted(set(re.findall(r"`([^`\s]*?" + FILE_NAME.pattern + r")`", README))):
        base = Path(name).name
        if "<" in base or "*" in base:
            continue  # a pattern such as points/<id>.json
        if base in written or (ROOT / name).exists() or any(ROOT.rglob(base)):
            continue
        problems.append(name)
    assert not problems, f"README names files the code does not write: {problems}"


def _resolves(schema: dict, path: list[str], defs: dict) -> bool:
    """Whether a dotted --set path exists in the scenario JSON schema (refs, unions and maps followed)."""
    node = schema
    if "$ref" in node:
        return _resolves(defs[node["$ref"].rsplit("/", 1)[-1]], path, defs)
    if not path:
        return True
    for key in ("anyOf", "oneOf", "allOf"):
        if key in node:
            return any(_resolves(option, path, defs) for option in node[key])
    head, rest = path[0], path[1:]
    if head in node.get("properties", {}):
        return _resolves(node["properties"][head], rest, defs)
    extra = node.get("additionalProperties")
    return isinstance(extra, dict) and _resolves(extra, rest, defs)


def test_verl_table_paths_exist():
    from rlsim.sim.scenario.schema import Scenario

    section = README.split("#### For verl users", 1)[1].split("\n#", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| ") and "---" not in r and "verl config key" not in r]
    assert len(rows) >= 10
    schema = Scenario.model_json_schema()
    bad = []
    for row in rows:
        rlsim_cell = row.split("|")[2]
        for path in re.findall(r"`([a-z_.]+)`", rlsim_cell):
            if path.count(".") and not _resolves(schema, path.split("."), schema.get("$defs", {})):
                bad.append(path)
    same = next(r for r in rows if "<same name>" in r)  # fully_async knobs: schedule.<same name>
    names = re.findall(r"`([a-z_]+)`", same.split("|")[1])
    bad += [n for n in names if not _resolves(schema, ["schedule", n], schema.get("$defs", {}))]
    assert not bad, bad
