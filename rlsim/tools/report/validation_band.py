"""The ± band `rlsim run` prints on step time and throughput, from validation residuals of the nearest regime.

`validation_residuals.csv` (next to this module) holds one row per predicted row of `rlsim reproduce
validation` that is an absolute time or rate, with its regime: GPU, model size (B parameters), context
(prompt + response cap, tokens), schedule family, and its signed error. Each row is a cross-validated
residual: no constant was fitted to its publication. `python -m rlsim.tools.reproduce.validation`
rewrites this file (as `rlsim reproduce validation --out DIR` writes DIR/validation_residuals.csv);
a slow test checks that the shipped file agrees with the current table.

For a scenario, each residual's distance to it is: 1 if the GPU differs, plus |log2| of the model-size
ratio, plus 0.5·|log2| of the context ratio, plus 1 if the schedule family differs. The nearest regime
is the rows at the smallest distance, widened to at least `MIN_ROWS` rows (rows of one component, an
operator or a weight sync, are left out: they are not step times or rates); the band is the root mean
square of their errors (bias and spread together), applied as ± that percentage to step time and
throughput alike. Coverage notes say plainly when the scenario lies outside what the measured
operator profiles and the validated rows cover, one line per reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

RESIDUALS_CSV = Path(__file__).with_name("validation_residuals.csv")
RESIDUAL_COLUMNS = ["name", "source", "gpu", "params_b", "context", "family", "error_pct"]
MIN_ROWS = 3
# Residuals of one component (an operator, a weight sync), not of a step or a rate: kept in the table, not banded.
COMPONENT_FAMILIES = ("operator", "weight-sync")
# What the measured operator profiles cover (shared/profiles README: Vidur A100/H100, Frontier A800/H800;
# dense models 2.7B-72B at TP 1/2/4/8; Llama-3.1-405B only as FP8 linear operators on H800).
PROFILED_GPUS = ("a100-80gb", "a800", "h100-sxm", "h800")
PROFILED_PARAMS_B = (2.7, 72.0)
PROFILED_TP = (1, 2, 4, 8)


@dataclass(frozen=True)
class Regime:
    gpu: str
    params_b: float
    context: int
    family: str
    tp: int = 1
    moe: bool = False
    ep: int = 1  # the largest expert-parallel degree of any role


@dataclass(frozen=True)
class Band:
    pct: float  # ± half-width, percent
    rows: int
    regime: str  # the nearest regime's description


def load_residuals(path: Path = RESIDUALS_CSV) -> pd.DataFrame:
    return pd.read_csv(path)


def _distance(r, regime: Regime) -> float:
    d = 0.0 if r.gpu == regime.gpu else 1.0
    d += abs(math.log2(max(r.params_b, 1e-3) / max(regime.params_b, 1e-3)))
    d += 0.5 * abs(math.log2(max(r.context, 1) / max(regime.context, 1)))
    return d + (0.0 if r.family == regime.family else 1.0)


def band(regime: Regime, residuals: pd.DataFrame | None = None) -> Band | None:
    """RMS error of the nearest regime's residuals (at least MIN_ROWS rows); None with no residuals."""
    res = load_residuals() if residuals is None else residuals
    res = res[~res["family"].isin(COMPONENT_FAMILIES)]
    if res.empty:
        return None
    dist = pd.Series([_distance(r, regime) for r in res.itertuples()], index=res.index)
    order = dist.sort_values(kind="stable")
    cut = order.iloc[min(MIN_ROWS, len(order)) - 1]
    near = res.loc[order[order <= max(cut, order.iloc[0])].index]
    rms = float(math.sqrt((near["error_pct"] ** 2).mean()))
    first = near.iloc[0]
    desc = f"{first.gpu}, {first.params_b:g}B, {int(first.context):,}-token context, {first.family}"
    return Band(rms, len(near), desc)


def coverage_notes(regime: Regime, residuals: pd.DataFrame | None = None) -> list[str]:
    """One line per way the scenario lies outside the measured profiles or the validated rows."""
    res = load_residuals() if residuals is None else residuals
    notes = []
    if regime.gpu not in PROFILED_GPUS:
        notes.append(f"GPU {regime.gpu}: no measured operator profile (profiles cover {', '.join(PROFILED_GPUS)}); "
                     "its efficiencies are assumed")
    low, high = PROFILED_PARAMS_B
    if not low <= regime.params_b <= high:
        notes.append(f"model size {regime.params_b:.1f}B: outside the profiled {low:g}B-{high:g}B dense models")
    if regime.tp not in PROFILED_TP:
        notes.append(f"TP {regime.tp}: operators were measured at TP {'/'.join(map(str, PROFILED_TP))} only")
    if regime.moe:
        notes.append("MoE model: none of the validated rows is a MoE model")
    if regime.ep > 1:
        notes.append(f"expert parallelism {regime.ep}: no validated row runs with ep > 1; its all-to-alls are "
                     "priced from send/recv latencies, not from a measured expert-parallel step")
    if not res.empty and regime.context > res["context"].max():
        longest = int(res["context"].max())
        notes.append(f"context {regime.context:,} tokens: longer than any validated row ({longest:,})")
    if not res.empty and regime.gpu not in set(res["gpu"]):
        notes.append(f"GPU {regime.gpu}: no predicted validation row on it")
    return notes


def scenario_regime(scn) -> Regime:
    """The regime of a scenario: the rollout role's GPU, model and TP; prompt + response caps; schedule kind."""
    roles = scn.roles
    role = roles.get("rollout") or roles.get("actor") or next(iter(roles.values()))
    model = scn.models[role.model]
    hw = scn.cluster.pools[role.pool].hardware
    context = int(_cap(scn.workload.prompt_length) + _cap(scn.workload.response_length))
    return Regime(gpu=Path(str(hw)).stem, params_b=model.params / 1e9, context=context, family=scn.schedule.kind,
                  tp=role.parallel.tp, moe=model.num_experts > 0,
                  ep=max(r.parallel.ep for r in roles.values()))


def _cap(length) -> float:
    for attr in ("max", "value", "mean"):
        v = getattr(length, attr, None)
        if isinstance(v, int | float):
            return float(v)
    return 0.0


def band_lines(summary: dict, scn) -> list[str]:
    """What `rlsim run` prints under the summary: the ± band and the coverage notes."""
    regime = scenario_regime(scn)
    res = load_residuals()
    b = band(regime, res)
    lines = []
    if b is not None:
        lines.append(f"validation band ± {b.pct:.0f}% (RMS error of {b.rows} predicted rows nearest this scenario: "
                     f"{b.regime}; docs/validation.md)")
        for key, label, unit in (("step_time_s", "step time", "s"), ("throughput_tokens_per_s", "throughput", "tok/s")):
            value = summary.get(key)
            if isinstance(value, int | float):
                lines.append(f"  {label} {value:,.1f} {unit} ± {value * b.pct / 100:,.1f}")
    lines += [f"outside what is covered: {n}" for n in coverage_notes(regime, res)]
    return lines
