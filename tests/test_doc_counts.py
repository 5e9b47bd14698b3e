"""Counts in the docs are computed or dropped: a count of tests or shipped scenarios goes stale with the next
change (docs/architecture.md once said 1,011 tests, docs/benchmarks.md 22 shipped scenarios of 39), so the docs
quote none; the counts they do quote are checked against the code here (and the validation figures in
tests/test_validation.py, slow)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
WORDS = ("one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen twenty").split()
# A number (digits or a word) and up to two more words before "tests" or "scenarios" (not a path: tests/...).
DRIFTING = re.compile(rf"\b(\d[\d,]*|{'|'.join(WORDS)})\s+(?:[\w-]+\s+){{0,2}}(tests|scenarios)\b(?!/)", re.I)


def _text(path: Path) -> str:
    return " ".join(path.read_text().split())


def test_the_docs_quote_no_count_of_tests_or_scenarios():
    found = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p in PAGES for m in DRIFTING.finditer(_text(p))]
    assert found == []


def test_the_guard_sees_a_count():
    assert DRIFTING.search("measured 49-53 s wall (1,011 tests, two quiet cores)")
    assert DRIFTING.search("It runs the 22 shipped run scenarios with steps capped at 2")
    assert not DRIFTING.search("pytest -q -n 0 tests/test_costs.py")


def test_the_plots_the_metrics_page_names_are_the_ones_a_run_draws():
    from rlsim.tools.report.plots import PLOTS

    page = _text(ROOT / "docs" / "metrics.md")
    listed = re.search(r"the plots \(([^)]*)\)", page)
    assert listed, "docs/metrics.md names the plots a run draws"
    assert set(re.findall(r"`([\w]+)\.png`", listed.group(1))) == {stem for stem, _ in PLOTS.values()}


def test_the_main_names_rlsim_re_exports_are_as_many_as_the_page_says():
    import rlsim

    names = [n for n in rlsim.__all__ if n != "__version__"]
    assert f"re-exports the {WORDS[len(names) - 1]} main names" in _text(ROOT / "docs" / "architecture.md")
