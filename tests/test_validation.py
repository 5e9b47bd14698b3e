"""`reproduce validation`: leave-one-source-out status from the provenance registry, counts, targets, guards.

A row is `predicted` only if no constant was fitted to any number of its publication
(rlsim/tools/reproduce/provenance.py). The fast tests check the registry and the derivation; the slow
ones build the whole table (every row's simulation) and check counts, the acceptance targets and each
predicted row's regression guard.
"""

from __future__ import annotations

import pytest
import yaml

from rlsim.sim.costs.engine_kinds import ENGINE_KINDS
from rlsim.sim.paths import shipped_dir
from rlsim.tools.reproduce.provenance import FITTED, PUBLICATIONS, constant_exists, fitted_sources, is_predicted
from rlsim.tools.reproduce.validation import MAX_TARGET_PCT, MEDIAN_TARGET_PCT, score, summary, validation_tables

# ------------------------------------------------------------------ the registry (fast)


def test_every_fitted_constant_exists_and_names_known_publications():
    for c in FITTED:
        assert c.fitted_to, c
        assert set(c.fitted_to) <= set(PUBLICATIONS), c
        assert constant_exists(c), f"{c.where}: no constant {c.constant}"


def test_every_calibrated_profile_value_is_registered():
    """A profile value whose source says it was calibrated/fitted must be in FITTED (else its rows stay predicted)."""
    registered = {(c.where, c.constant) for c in FITTED}
    missing = []
    for path in sorted(shipped_dir("hardware_profiles").glob("*.yaml")):
        sources = yaml.safe_load(path.read_text()).get("sources", {})
        for key, text in sources.items():
            if str(text).lstrip().lower().startswith(("calibrated", "fitted")):
                if (f"hardware_profiles/{path.name}", key) not in registered:
                    missing.append(f"{path.name}: {key}")
    assert not missing, missing


def test_every_fitted_engine_kind_value_is_registered():
    registered = {c.constant for c in FITTED if c.where.endswith("engine_kinds.py")}
    missing = [f"{name}.{field}" for name, kind in ENGINE_KINDS.items() for field, text in kind.sources.items()
               if text.lower().startswith("fitted") and f"{name}.{field}" not in registered]
    assert not missing, missing


def test_status_is_derived_from_the_publication():
    fitted_src = sorted(fitted_sources())[0]
    free = next(k for k in PUBLICATIONS if k not in fitted_sources())
    common = {"cite": "x", "published": 2.0}
    rows = [{"name": "a", "source": fitted_src, "quantity": "absolute", "simulated": 3.0, **common},
            {"name": "b", "source": free, "quantity": "ratio", "simulated": 1.0, **common}]
    table = score(rows)
    assert list(table["status"]) == ["fitted", "predicted"]
    assert list(table["error_pct"]) == [50.0, -50.0]
    with pytest.raises(KeyError, match="unknown publication"):
        is_predicted("no-such-paper")


def test_registering_a_fit_turns_its_rows_fitted(monkeypatch):
    """Fitting any constant to a publication demotes every row of it: the status is never set by hand."""
    from rlsim.tools.reproduce import provenance

    free = next(k for k in PUBLICATIONS if k not in fitted_sources())
    row = {"name": "r", "source": free, "cite": "x", "quantity": "absolute", "published": 1.0, "simulated": 1.0}
    assert score([row])["status"].iloc[0] == "predicted"
    extra = provenance.FittedConstant("hardware_profiles/h100-sxm.yaml", "train_mfu", (free,), "test")
    monkeypatch.setattr(provenance, "FITTED", (*provenance.FITTED, extra))
    assert score([row])["status"].iloc[0] == "fitted"


# ------------------------------------------------------------------ the table (slow: every simulation)


@pytest.fixture(scope="module")
def tables():
    return validation_tables()


@pytest.mark.slow
def test_no_row_of_a_fitted_publication_is_predicted(tables):
    table, _ = tables
    assert set(table["source"]) <= set(PUBLICATIONS)
    assert set(table["quantity"]) == {"ratio", "absolute"}
    used = {src for c in FITTED for src in c.fitted_to}
    assert not table[(table["status"] == "predicted") & table["source"].isin(used)].shape[0]
    assert (table["status"] == table["source"].map(lambda s: "predicted" if is_predicted(s) else "fitted")).all()
    # vLLM 0.3's host cost, the H20 profile and two scenarios were fitted to these: their rows are fitted.
    for src in ("hybridflow", "verl-one-step-off", "areal-blog-v0.3"):
        rows = table[table["source"] == src]
        assert len(rows) and (rows["status"] == "fitted").all(), src
    # The engines' per-step costs come from measured operators (docs/operators.md): these are predictions.
    for src in ("nvidia-nim-llama33-70b", "sglang-pr1401", "sglang-a30-qwen2", "lambda-vllm-2024-09"):
        rows = table[table["source"] == src]
        assert len(rows) and (rows["status"] == "predicted").all(), src


@pytest.mark.slow
def test_enough_absolute_predicted_rows(tables):
    table, _ = tables
    assert summary(table)["predicted_absolute"] >= 10


@pytest.mark.slow
@pytest.mark.xfail(strict=False, reason="measured 33 predicted rows (of 70): the constants fitted to HybridFlow, "
                   "verl one-step-off and AReaL must come from operator profiles first")
def test_at_least_40_predicted_rows(tables):
    table, _ = tables
    assert summary(table)["predicted"] >= 40


@pytest.mark.slow
@pytest.mark.xfail(strict=False, reason="measured median |error| 22.1% and max 434.3% over the 33 predicted rows "
                   "(verl #7203 steps 17x too fast, verl #1208 forward passes 3x too slow): the cost-model work "
                   "is meant to close these")
def test_median_and_max_error_meet_the_targets(tables):
    table, _ = tables
    s = summary(table)
    assert s["median_abs_error_pct"] <= MEDIAN_TARGET_PCT
    assert s["max_abs_error_pct"] <= MAX_TARGET_PCT


@pytest.mark.slow
def test_every_predicted_row_within_its_regression_guard(tables):
    table, _ = tables
    pred = table[table["status"] == "predicted"]
    assert pred["regression_guard_pct"].notna().all()
    over = pred[pred["error_pct"].abs() > pred["regression_guard_pct"]]
    assert over.empty, over[["name", "error_pct", "regression_guard_pct"]].to_string()


@pytest.mark.slow
def test_bounds_are_scored_pass_fail(tables):
    table, found = tables
    bounds = found[found["name"].str.contains("weight sync|#2751|ROLL", regex=True)]
    assert len(bounds) == 3
    # ROLL's rollout share is a known miss today (tests/test_agentic.py holds it as a strict xfail).
    assert bounds[~bounds["name"].str.startswith("ROLL")]["passed"].all()
    assert found["passed"].map(lambda v: v in (True, False)).all()
    # "Roughly a third" idle (HybridFlow) is a bound too: scored pass/fail, never a point error.
    idle = found[found["name"].str.startswith("HybridFlow GPU idle")]
    assert len(idle) == 1 and idle["expected"].iloc[0].startswith("about 1/3")
    assert not table["name"].str.startswith("HybridFlow GPU idle").any()


@pytest.mark.slow
def test_shipped_residuals_match_the_table(tables):
    """rlsim/tools/report/validation_residuals.csv is today's: refresh it from `reproduce validation --out`."""
    from rlsim.tools.report.validation_band import load_residuals
    from rlsim.tools.reproduce.validation import residuals

    table, _ = tables
    fresh, shipped = residuals(table).reset_index(drop=True), load_residuals()
    assert list(fresh["name"]) == list(shipped["name"])
    assert (fresh["error_pct"] - shipped["error_pct"]).abs().max() < 0.05
