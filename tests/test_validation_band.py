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
     "error_pct": -30.0},
    {"name": "b", "source": "s1", "gpu": "h800", "params_b": 8.0, "context": 3000, "family": "hybridflow",
     "error_pct": 40.0},
    {"name": "c", "source": "s2", "gpu": "a100-80gb", "params_b": 8.0, "context": 1000, "family": "serving",
     "error_pct": 5.0},
    {"name": "d", "source": "s3", "gpu": "h100-sxm", "params_b": 70.0, "context": 5000, "family": "serving",
     "error_pct": 2.0},
])


def test_band_is_the_rms_of_the_nearest_regime():
    b = band(Regime("h800", 7.0, 4000, "hybridflow"), RES)
    # a and b are nearest (same GPU and family), c next: the three nearest rows make the band.
    assert b.rows == 3
    assert b.pct == pytest.approx(math.sqrt((30**2 + 40**2 + 5**2) / 3))
    assert "h800" in b.regime
    serving = band(Regime("h100-sxm", 70.0, 5000, "serving"), RES)
    # d, c, then a and b together: rows at the same distance are one regime, never split.
    assert serving.rows == 4 and serving.pct == pytest.approx(math.sqrt((2**2 + 5**2 + 30**2 + 40**2) / 4))
    assert band(Regime("h800", 7.0, 4000, "hybridflow"), RES.iloc[:0]) is None


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
    lines = band_lines({"step_time_s": 100.0, "throughput_tokens_per_s": 1000.0}, scn)
    assert lines[0].startswith("validation band ± ")
    assert any(ln.startswith("  step time 100.0 s ± ") for ln in lines)
    assert any(ln.startswith("  throughput 1,000.0 tok/s ± ") for ln in lines)


def test_component_residuals_do_not_make_the_band():
    ops = pd.DataFrame([{"name": "op", "source": "s9", "gpu": "h800", "params_b": 7.0, "context": 4000,
                         "family": "operator", "error_pct": 500.0}])
    b = band(Regime("h800", 7.0, 4000, "hybridflow"), pd.concat([RES, ops], ignore_index=True))
    assert b.pct == pytest.approx(math.sqrt((30**2 + 40**2 + 5**2) / 3))
    assert band(Regime("h800", 7.0, 4000, "hybridflow"), ops) is None
