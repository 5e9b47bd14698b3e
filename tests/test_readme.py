"""The README and the docs tell the truth: every `rlsim ...` command and option they show exists, every
output file they name is one the code writes (or a file in the repository), every link resolves, and
the README stays a front page (short, the Quickstart CI runs, no development history)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main

from rlsim.tools.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = {p.relative_to(ROOT).as_posix(): p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}
PAGES = {"README.md": README, **DOCS}
FILE_NAME = re.compile(r"[\w.<>*-]+\.(?:png|svg|pdf|csv|json|html|parquet)\b")
# Development history has no place in user documentation (the agent's "turns" are a domain word).
HISTORY = re.compile(r"\bturn [0-9]|issue [0-9]+|issue-[0-9]", re.IGNORECASE)
# Pages the README and the docs index link to that are written on other branches: a link to one is
# checked once the page exists.


def commands(text: str) -> list[str]:
    """Each `rlsim ...` invocation in a page's code blocks and inline code (comments cut)."""
    found = []
    for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, flags=re.S):
        block = block.replace("\\\n", " ")
        for line in block.splitlines():
            for part in re.split(r"&&|;|\|", line.split(" #")[0]):
                part = part.strip()
                if part.startswith("rlsim "):
                    found.append(part)
    found += [c for c in re.findall(r"`(rlsim [a-z][a-z-]*(?: [^`]*)?)`", text)]
    return found


def all_commands() -> list[str]:
    return [c for text in PAGES.values() for c in commands(text)]


def _click():
    return typer.main.get_command(app)


def _options(command) -> set[str]:
    names = set()
    for param in command.params:
        names.update(getattr(param, "opts", []))
        names.update(getattr(param, "secondary_opts", []))
    return names


def test_readme_and_docs_show_commands():
    assert len(commands(README)) >= 8  # the three jobs, importing and calibrating
    assert len(all_commands()) >= 40


def test_readme_is_a_front_page():
    assert len(README.splitlines()) <= 250
    for job in ("rlsim plan ", "rlsim reproduce ", "rlsim sweep "):
        assert job in README, job
    assert "docs/validation.md" in README


def test_quickstart_is_the_two_lines_ci_runs():
    """.ci/run takes the first bash block after "## Quickstart": two lines, the second runs pytest."""
    section = README.split("\n## Quickstart\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) == 2
    assert "rlsim run scenarios/quickstart.yaml" in lines[0] and "pytest" in lines[1]


@pytest.mark.parametrize("page", sorted(PAGES))
def test_no_development_history(page):
    hits = [line.strip() for line in PAGES[page].splitlines() if HISTORY.search(line)]
    assert not hits, f"{page}: {hits}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(text: str) -> set[str]:
    body = re.sub(r"```.*?```", "", text, flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", body, flags=re.M)}


def test_links_resolve():
    problems = []
    for page, text in PAGES.items():
        base = (ROOT / page).parent
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web link
            path, _, anchor = target.partition("#")
            file = (base / path).resolve() if path else ROOT / page
            if not file.exists():
                problems.append(f"{page}: {target}: no such file")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
                problems.append(f"{page}: {target}: no such heading")
    assert not problems, "\n".join(problems)


def test_every_readme_command_and_option_exists():
    group = _click()
    problems = []
    for line in all_commands():
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
        options = line.split(" -- ")[0]  # after `--` the words are arguments (slime's own flags), not options
        for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", options):
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


def test_every_file_name_in_the_readme_and_docs_is_written_or_exists():
    written = _written_names()
    problems = []
    text = "\n".join(PAGES.values())
    for name in sorted(set(re.findall(r"`([^`\s]*?" + FILE_NAME.pattern + r")`", text))):
        base = Path(name).name
        if "<" in base or "*" in base:
            continue  # a pattern such as points/<id>.json
        if base in written or (ROOT / name).exists() or any(ROOT.rglob(base)):
            continue
        problems.append(name)
    assert not problems, f"README or docs name files the code does not write: {problems}"


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

    section = DOCS["docs/scenarios.md"].split("## For verl users", 1)[1].split("\n#", 1)[0]
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
