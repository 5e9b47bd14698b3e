"""The ± band `rlsim run` prints: nearest-regime residuals, RMS, coverage notes, the shipped CSV."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rlsim.sim.paths import shipped_dir
from rlsim.sim.scenario.loader import load_scenario
from rlsim.tools.report.validation_band import (
    RESIDUAL_COLUMNS,
    Regime,
    band,
    band_lines,
    coverage_notes,
    load_residuals,
    scenario_regime,
)

RES = pd.DataFrame([
    {"name": "a", "source": "s1", "gpu": "h800", "params_b": 8.0, "context": 3000, "family": "hybridflow",
     "engine": "vllm", "batch": "large", "error_pct": -30.0},
    {"name": "b", "source": "s1", "gpu": "h800", "params_b": 8.0, "context": 3000, "family": "hybridflow",
     "engine": "vllm", "batch": "large", "error_pct": 40.0},
    {"name": "c", "source": "s2", "gpu": "a100-80gb", "params_b": 8.0, "context": 1000, "family": "serving",
     "engine": "sglang", "batch": "small", "error_pct": 5.0},
    {"name": "d", "source": "s3", "gpu": "h100-sxm", "params_b": 70.0, "context": 5000, "family": "serving",
     "engine": "sglang", "batch": "small", "error_pct": 2.0},
    {"name": "e", "source": "s4", "gpu": "h100-sxm", "params_b": 7.0, "context": 900, "family": "serving",
     "engine": "sglang", "batch": "small", "error_pct": -9.0},
])


def test_band_is_the_rms_of_the_rows_that_resemble_the_job_on_every_axis():
    b = band(Regime("h800", 7.0, 4000, "hybridflow", engine="vllm"), RES)
    # a and b resemble (engine, batch, size, context, schedule; the GPU is not an axis): c, d, e differ.
    assert b.rows == 2 and b.names == ("a", "b")
    assert b.pct == pytest.approx(math.sqrt((30**2 + 40**2) / 2))
    serving = band(Regime("h100-sxm", 8.0, 1000, "generation-only", engine="sglang", batch="small"), RES)
    # c and e (d's model is 70B: more than 4x larger); a serving benchmark stands for a generation-only job.
    assert serving.names == ("c", "e")
    assert band(Regime("h800", 7.0, 4000, "hybridflow"), RES.iloc[:0]) is None


@pytest.mark.parametrize(("change", "axis"), [
    ({"engine": "sglang"}, "engine"), ({"batch": "small"}, "batch"), ({"params_b": 40.0}, "model"),
    ({"context": 20_000}, "context"), ({"family": "fully-async"}, "schedule"),
])
def test_a_job_unlike_the_rows_on_any_one_axis_gets_no_band(change, axis):
    from rlsim.tools.report.validation_band import nearest_miss

    regime = Regime(**{**{"gpu": "h800", "params_b": 7.0, "context": 4000, "family": "hybridflow",
                          "engine": "vllm"}, **change})
    assert band(regime, RES) is None
    assert axis in nearest_miss(regime, RES)


def test_a_generic_engine_resembles_every_engine_family():
    assert band(Regime("h800", 7.0, 4000, "hybridflow", engine="generic"), RES).names == ("a", "b")


def test_coverage_notes_one_line_per_reason():
    inside = Regime("h800", 8.0, 3000, "hybridflow", tp=2)
    assert coverage_notes(inside, RES) == []
    outside = Regime("mi300x", 235.0, 40_000, "fully-async", tp=16, moe=True, ep=8)
    notes = coverage_notes(outside, RES)
    assert len(notes) == 7
    for word in ("GPU mi300x: no measured operator profile", "model size 235.0B", "TP 16", "MoE", "context 40,000",
                 "no predicted validation row", "expert parallelism 8"):
        assert sum(word in n for n in notes) == 1, word


def test_shipped_residuals_and_run_lines():
    res = load_residuals()
    assert list(res.columns) == RESIDUAL_COLUMNS
    assert len(res) >= 10 and res["error_pct"].notna().all()
    scn = load_scenario(shipped_dir("scenarios") / "quickstart.yaml")
    regime = scenario_regime(scn)
    assert regime.params_b > 0 and regime.context > 0 and regime.ep == 1
    assert (regime.engine, regime.batch) == ("vllm", "large")
    lines = band_lines({"step_time_s": 100.0, "throughput_tokens_per_s": 1000.0}, scn)
    if band(regime, res) is None:  # no number where nothing validated resembles the job
        assert lines[0].startswith("model error: no validated regime nearby (vllm engine, large batch")
        assert "nearest: " in lines[0] and "±" not in lines[0]
    else:
        assert lines[0].startswith("model error ± ")
        assert any(ln.startswith("  step time 100.0 s ± ") for ln in lines)


def test_component_residuals_do_not_make_the_band():
    ops = pd.DataFrame([{"name": "op", "source": "s9", "gpu": "h800", "params_b": 7.0, "context": 4000,
                         "family": "operator", "error_pct": 500.0}])
    b = band(Regime("h800", 7.0, 4000, "hybridflow"), pd.concat([RES, ops], ignore_index=True))
    assert b.pct == pytest.approx(math.sqrt((30**2 + 40**2) / 2))
    assert band(Regime("h800", 7.0, 4000, "hybridflow"), ops) is None
