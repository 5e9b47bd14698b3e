"""Sources live in the repository: every citation points at docs/sources.md, and what it cites exists."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from rlsim.sim.hardware import available_profiles, load_profile

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "docs" / "sources.md"

# Documents outside the repository that must no longer be cited (spelt in pieces so that this file does
# not match itself).
OUTSIDE_DOCS = ("REFERENCE" + ".md", "DESIGN" + ".md")

# `docs/sources.md §5`, `docs/sources.md §2, §9`, `docs/sources.md §7 and §8` -> the section numbers.
CITATION = re.compile(r"docs/sources\.md,?\s+(§\s?\d+(?:\s*(?:,|and|or|/|-|–)\s*§\s?\d+)*)")
SECTION_NUMBER = re.compile(r"§\s?(\d+)")
HEADING = re.compile(r"^## §(\d+)\b", re.MULTILINE)
# In-repo measured operators count: a value fitted to hardware_profiles/operators/ (the fit re-derives it).
PROFILE_SOURCE = re.compile(
    r"docs/sources\.md|docs/operators\.md|hardware_profiles/operators/|datasheet|assumed|calibrated",
    re.IGNORECASE,
)


def _repo_files() -> list[str]:
    """Tracked files plus new ones not yet committed (but not ignored ones)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return sorted({f for f in out.splitlines() if (ROOT / f).is_file()})


def _strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, list):
        return [s for x in obj for s in _strings(x)]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in (k, *_strings(v))]
    return []


def _text(rel: str) -> str | None:
    try:
        text = (ROOT / rel).read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None  # binary (figures)
    if rel.endswith(".ipynb"):
        text = "\n".join(_strings(json.loads(text)))  # undo any JSON escaping of "§"
    return text


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    out = {}
    for rel in _repo_files():
        text = _text(rel)
        if text is not None:
            out[rel] = text
    return out


def test_sources_document_has_every_section():
    text = SOURCES.read_text(encoding="utf-8")
    assert [int(n) for n in HEADING.findall(text)] == list(range(1, 17))
    assert "## How to cite" in text
    assert "## Design notes" in text


def test_no_file_cites_documents_outside_the_repository(texts):
    offenders = [f"{rel}: {doc}" for rel, text in texts.items() for doc in OUTSIDE_DOCS if doc in text]
    assert not offenders, "cite docs/sources.md instead:\n" + "\n".join(offenders)


def test_every_cited_section_exists(texts):
    headings = set(HEADING.findall(SOURCES.read_text(encoding="utf-8")))
    missing = []
    for rel, text in texts.items():
        for match in CITATION.finditer(text):
            for number in SECTION_NUMBER.findall(match.group(1)):
                if number not in headings:
                    missing.append(f"{rel}: {match.group(0)!r}")
    assert not missing, "cited sections missing from docs/sources.md:\n" + "\n".join(missing)


def test_citations_are_found(texts):
    """Guards the regex above: the shipped files do cite sections."""
    cited = {n for text in texts.values() for m in CITATION.finditer(text) for n in SECTION_NUMBER.findall(m.group(1))}
    assert {"1", "2", "5", "7"} <= cited


@pytest.mark.parametrize("name", available_profiles())
def test_profile_sources_are_in_the_repository_or_a_datasheet(name):
    profile = load_profile(name)
    for field, source in profile.sources.items():
        assert PROFILE_SOURCE.search(source), (
            f"{name}: sources.{field} must cite docs/sources.md, a datasheet, or say assumed/calibrated: {source!r}")
