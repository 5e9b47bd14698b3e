"""`reproduce validation`: leave-one-source-out status from the provenance registry, counts, targets, guards.

A row is `predicted` only if no constant was fitted to any number of its publication
(rlsim/tools/reproduce/provenance.py). The fast tests check the registry and the derivation; the slow
ones build the whole table (every row's simulation) and check counts, the acceptance targets and each
predicted row's regression guard.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from rlsim.sim.costs.engine_kinds import ENGINE_KINDS
from rlsim.sim.paths import shipped_dir
from rlsim.tools.reproduce.provenance import (
    FITTED,
    PUBLICATIONS,
    SETUP_FEATURES,
    UNMODELLED,
    constant_exists,
    fitted_sources,
    is_predicted,
)
from rlsim.tools.reproduce.validation import (
    MAX_TARGET_PCT,
    MEDIAN_TARGET_PCT,
    in_scope_predicted,
    known_past_guard,
    report_lines,
    residuals,
    score,
    summary,
    validation_tables,
)

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


# ------------------------------------------------------------------ scope: setups with what rlsim does not model


def _rows(*specs):
    return [{"name": n, "source": src, "cite": "x", "quantity": "absolute", "published": 1.0, "simulated": sim,
             **({"scope": sc} if sc else {}), "gpu": "h100-sxm"} for n, src, sim, sc in specs]


def test_scope_comes_from_the_publication_or_the_row_and_is_counted_apart():
    free = [k for k in PUBLICATIONS if k not in fitted_sources() and k not in SETUP_FEATURES]
    table = score(_rows(("in", free[0], 1.1, None), ("vision", "verl-issue-7203", 5.0, None),
                        ("own", free[1], 3.0, "vision")))
    assert list(table["status"]) == ["predicted"] * 3  # scope does not change the status: it sets rows apart
    assert list(table["scope"]) == ["", "vision", "vision"]
    s = summary(table)
    assert (s["predicted"], s["out_of_scope"]) == (1, 2)
    assert s["median_abs_error_pct"] == pytest.approx(10.0) and s["max_abs_error_pct"] == pytest.approx(10.0)
    assert list(residuals(table)["name"]) == ["in"]  # the ± band of `rlsim run` reads in-scope rows only
    found = pd.DataFrame([{"name": "f", "source": "x", "expected": "1", "simulated": "1", "passed": True}])
    lines = report_lines(table, found)
    assert "1 predicted rows" in lines[0] and "2 rows outside the model's scope" in lines[0]
    apart = lines[lines.index(next(x for x in lines if x.startswith("outside the model's scope"))) + 1:]
    assert f"  vision: {UNMODELLED['vision']}" in apart  # each reason once, then the rows with their errors
    assert any(x.lstrip().startswith("+400.0%") and x.endswith("[verl-issue-7203; vision]") for x in apart)
    assert any(x.lstrip().startswith("+200.0%") and "own" in x for x in apart)
    assert not any("+400.0%" in x for x in lines[:lines.index(apart[0])])  # not among the predicted or fitted


def test_an_unknown_unmodelled_feature_is_refused():
    free = next(k for k in PUBLICATIONS if k not in fitted_sources())
    with pytest.raises(KeyError, match="unknown unmodelled feature"):
        score(_rows(("r", free, 1.0, "tokenizer")))


def test_every_unmodelled_feature_is_documented_and_used():
    """docs/validation.md lists what rlsim does not model; the registry names only features from that list."""
    doc = (Path(__file__).parents[1] / "docs" / "validation.md").read_text()
    for key in UNMODELLED:
        assert f"`{key}`" in doc, key
    assert {f for fs in SETUP_FEATURES.values() for f in fs} <= set(UNMODELLED)
    assert set(SETUP_FEATURES) <= set(PUBLICATIONS)


# ------------------------------------------------------------------ the validation scenarios


def test_every_validation_scenario_loads_with_the_overrides_its_rows_use():
    from rlsim.sim.api import load_scenario
    from rlsim.tools.reproduce.validation_sync import (
        VERL_CHECKPOINT_ENGINE,
        VERL_PR116_SAME_PROCESS,
        checkpoint_engine_overrides,
    )

    folder = shipped_dir("scenarios") / "validation"
    for path in sorted(folder.glob("*.yaml")):
        load_scenario(path)
    for _, preset, _ in VERL_PR116_SAME_PROCESS:
        scn = load_scenario(folder / "verl-pr116-fsdp-vllm-l20.yaml", [f"models.policy.preset={preset}"])
        assert scn.roles["rollout"].parallel.tp == 4 and scn.role_gpus("actor") == 8
    for _, preset, ranks, _, _ in VERL_CHECKPOINT_ENGINE:
        scn = load_scenario(folder / "verl-checkpoint-engine-h100.yaml", checkpoint_engine_overrides(preset, ranks))
        assert scn.role_gpus("actor") == scn.role_gpus("rollout") == ranks
        # 4 + 4 ranks share one node's NVLink; the larger runs cross the NICs
        assert scn.roles_in_one_nvlink_domain("actor", "rollout") == (ranks <= 4)


def test_pr116_same_process_rows_are_the_transition_weight_parts():
    """The rows read gather + load of the scenario's transition: the cost functions' sum, nothing added."""
    from rlsim.sim.api import ModelShape, load_profile, resolve_preset
    from rlsim.sim.costs.transition import engine_load_time, fsdp_gather_time
    from rlsim.tools.reproduce.validation_sync import pr116_same_process_rows

    rows = pr116_same_process_rows({"Qwen2.5-3B": (1.0, 1.0), "Qwen2.5-7B": (1.0, 1.0), "Llama-3-8B": (1.0, 1.0)})
    l40s = load_profile("l40s")
    for row, preset in zip(rows[::2], ("qwen2.5-3b", "qwen2.5-7b", "llama-3-8b"), strict=True):
        m = ModelShape(**resolve_preset(preset))
        expected = fsdp_gather_time(m, l40s, 8, 8) + engine_load_time(m, l40s, 4, convert_layout=False)
        assert row["simulated"] == pytest.approx(expected, rel=1e-9)
        assert row["simulated"] == pytest.approx(row["published"], rel=0.15)  # 3B +9%, 7B +5%, 8B +6% today
    assert [r["quantity"] for r in rows] == ["absolute", "ratio"] * 3


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
def test_out_of_scope_rows_are_the_multimodal_run_only(tables):
    table, _ = tables
    outside = table[table["scope"] != ""]
    assert (outside[outside["source"] == "verl-issue-7203"]["scope"] == "vision").all()
    assert len(outside[outside["source"] == "verl-issue-7203"]) == len(table[table["source"] == "verl-issue-7203"])
    # The checkpoint engine's columns (one tensor per call, and buckets) are modelled sync paths: predicted, in scope.
    ckpt = table[table["source"] == "verl-checkpoint-engine"]
    assert len(ckpt) == 9 and (ckpt["scope"] == "").all() and (ckpt["status"] == "predicted").all()
    # verl #1208 is badly predicted, not outside the scope: it stays in the predicted figures.
    assert (table[table["source"] == "verl-issue-1208"]["scope"] == "").all()
    assert summary(table)["out_of_scope"] == len(outside) == 9


@pytest.mark.slow
def test_enough_absolute_predicted_rows(tables):
    table, _ = tables
    assert summary(table)["predicted_absolute"] >= 10


@pytest.mark.slow
def test_at_least_40_predicted_rows(tables):
    table, _ = tables
    assert summary(table)["predicted"] >= 40


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="measured median |error| 28.8% and max 396.6% over the 46 predicted rows "
                   "(the checkpoint engine's 7B sync without the engine, verl #1208's 0.5B run 2-6x too fast, "
                   "AReaL's synchronous eta=0 throughput): the cost-model work is meant to close these")
def test_median_and_max_error_meet_the_targets(tables):
    table, _ = tables
    s = summary(table)
    assert s["median_abs_error_pct"] <= MEDIAN_TARGET_PCT
    assert s["max_abs_error_pct"] <= MAX_TARGET_PCT


@pytest.mark.slow
def test_every_predicted_row_within_its_regression_guard(tables):
    table, _ = tables
    pred = in_scope_predicted(table)
    assert pred["regression_guard_pct"].notna().all()
    pred = pred[~pred["name"].map(known_past_guard)]
    over = pred[pred["error_pct"].abs() > pred["regression_guard_pct"]]
    assert over.empty, over[["name", "error_pct", "regression_guard_pct"]].to_string()


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="known misses past their guard (validation.KNOWN_PAST_GUARD): PR #116's "
                   "7B and Llama-3-8B NCCL syncs +49% / +62%, the Llama same-process / NCCL ratio -35%")
def test_known_misses_are_back_within_their_guard(tables):
    table, _ = tables
    pred = in_scope_predicted(table)
    known = pred[pred["name"].map(known_past_guard)]
    assert len(known) == 3
    assert (known["error_pct"].abs() <= known["regression_guard_pct"]).all(), known[["name", "error_pct"]]


@pytest.mark.slow
def test_bounds_are_scored_pass_fail(tables):
    table, found = tables
    bounds = found[found["name"].str.contains("weight sync|#2751|ROLL", regex=True)]
    assert len(bounds) == 3
    # Known misses today: ROLL's rollout share (tests/test_agentic.py holds it as a strict xfail), and verl's
    # one-step-off 7B sync, "mostly under 300 ms" (15 GB at 50 GB/s or more: more than one sender's share of a NIC
    # in verl's own GH200 measurements; docs/validation.md, "Current figures").
    assert bounds[bounds["name"].str.contains("#2751")]["passed"].all()
    sync = bounds[bounds["name"].str.contains("weight sync")]
    assert not sync["passed"].any() and (sync["simulated"].astype(float) < 1.0).all()
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


@pytest.mark.slow
def test_the_figures_the_docs_quote_are_todays(tables):
    """docs/validation.md's current figures and the README's headline are the table's, computed here: a count
    that drifts fails this test instead of going stale unseen."""
    table, found = tables
    s = summary(table)
    pred = in_scope_predicted(table)
    fitted = int(((table["status"] == "fitted") & (table["scope"] == "")).sum())
    root = Path(__file__).resolve().parents[1]
    page = " ".join((root / "docs" / "validation.md").read_text().split())
    readme = " ".join((root / "README.md").read_text().split())
    n, n_abs = s["predicted"], s["predicted_absolute"]
    median, worst = s["median_abs_error_pct"], s["max_abs_error_pct"]
    assert (f"{s['rows']} rows: **{n} predicted** ({n_abs} absolute, {n - n_abs} ratios), {fitted} fitted and "
            f"{s['out_of_scope']} outside the model's scope") in page
    assert f"median |error| is **{median:.1f}%** and the max is **{worst:.1f}%**" in page
    assert f"{int(pred['within'].sum())} of {n} are within" in page
    assert f"{int(found['passed'].sum())} of the {len(found)} bounds and findings hold" in page
    assert (f"{n} rows qualify today ({n_abs} absolute), and they miss by a median of {median:.1f}%, at most "
            f"{worst:.0f}%") in readme
