"""`reproduce validation`: every predicted row pinned at its regression guard; fitted rows apart.

The 15% target is what the project aims for; the guard is where each row stands today plus a margin,
so any regression in a predicted number fails CI (README "Validation against published numbers").
"""

from __future__ import annotations

import pytest

from rlsim.tools.reproduce.validation import TARGET_PCT, validation_tables

pytestmark = pytest.mark.slow  # the validation table simulates every published case (about a minute of CPU)


@pytest.fixture(scope="module")
def tables():
    return validation_tables()


def test_rows_are_marked_fitted_or_predicted(tables):
    table, _ = tables
    assert set(table["status"]) == {"fitted", "predicted"}
    # Constants set from a published number are fitted: NIM (hardware), SGLang/vLLM steps (engine kinds),
    # HybridFlow's 7B t_g cut (vLLM 0.3's host cost), verl's generate_async (response mean).
    fitted = set(table.loc[table["status"] == "fitted", "name"])
    assert any(n.startswith("NIM") for n in fitted)
    assert any("A30" in n for n in fitted)  # with PR #1401 it set the sglang-0.4 kind (two-point fit)
    assert any("t_g=2" in n for n in fitted)
    assert any("generate_async" in n for n in fitted)
    assert not any("(fitted)" in n for n in table["name"])


def test_every_predicted_row_within_its_regression_guard(tables):
    table, _ = tables
    pred = table[table["status"] == "predicted"]
    assert len(pred) >= 30
    over = pred[pred["error_pct"].abs() > pred["regression_guard_pct"]]
    assert over.empty, over[["name", "error_pct", "regression_guard_pct"]].to_string()
    assert (pred["regression_guard_pct"] >= TARGET_PCT).all() or (pred["regression_guard_pct"] > 0).all()


def test_bounds_are_scored_pass_fail(tables):
    _, found = tables
    bounds = found[found["name"].str.contains("weight sync|#2751|ROLL", regex=True)]
    assert len(bounds) == 3
    assert bounds["passed"].all()
    assert found["passed"].map(lambda v: v in (True, False)).all()
    # "Roughly a third" idle (HybridFlow) is a bound too: scored pass/fail, never a point error.
    table, _ = tables
    idle = found[found["name"].str.startswith("HybridFlow GPU idle")]
    assert len(idle) == 1 and idle["expected"].iloc[0].startswith("about 1/3")
    assert not table["name"].str.startswith("HybridFlow GPU idle").any()
