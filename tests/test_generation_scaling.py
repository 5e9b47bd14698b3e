"""AReaL's generation-scaling reproduction (docs/sources.md §9): the fitted length sigma and the predictions.

The blog gives no response lengths, so the scenario's lognormal sigma is fitted to the 8- and 128-GPU
points (marked fitted in `reproduce validation`); the points between are predictions. The fit is re-run
here: moving sigma by one grid step either way must not lower the squared error of the two fitted points.
"""

from __future__ import annotations

import pytest
import yaml

from rlsim.sim.paths import shipped_dir
from rlsim.tools.reproduce.generation_scaling import AREAL_FITTED_GPUS, areal_scaling_table

SCENARIO = shipped_dir("scenarios") / "async" / "areal-1.5b-generation-scaling.yaml"
SIGMA = yaml.safe_load(SCENARIO.read_text())["workload"]["response_length"]["sigma"]


def _sse(sigma: float) -> float:
    table = areal_scaling_table([f"workload.response_length.sigma={sigma}"], AREAL_FITTED_GPUS)
    return float((table["error_pct"] ** 2).sum())


@pytest.mark.slow
def test_shipped_sigma_is_the_least_squares_fit_on_the_grid():
    best = _sse(SIGMA)
    assert best < _sse(round(SIGMA - 0.05, 2))
    assert best < _sse(round(SIGMA + 0.05, 2))


@pytest.mark.slow
def test_saturation_is_visible_and_fitted_points_are_marked():
    table = areal_scaling_table()
    assert list(table.loc[table["status"] == "fitted", "gpus"]) == list(AREAL_FITTED_GPUS)
    per_gpu = table["simulated_k_tokens_per_s_per_gpu"].tolist()
    assert all(a > b for a, b in zip(per_gpu[:-1], per_gpu[1:], strict=True))  # every doubling loses per-GPU throughput
    total = (table["simulated_k_tokens_per_s_per_gpu"] * table["gpus"]).tolist()
    # 64 -> 128 GPUs: the cluster total barely moves (published 1.03x); 1.31x on the operator-fitted h800
    # profile (its cheaper per-step cost lets 128 GPUs gain more), 1.3 before it
    assert total[-1] / total[-2] < 1.35
    assert (table["error_pct"].abs() <= 20.0).all()  # NaN fails this too
