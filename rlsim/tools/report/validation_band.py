"""The model-error band `rlsim run` prints on step time and throughput, from the validated rows that resemble the job.

`validation_residuals.csv` (next to this module) holds one row per predicted row of `rlsim reproduce
validation` that is an absolute time or rate, with its regime: GPU, model size (B parameters), context
(prompt + response cap, tokens), schedule family, engine family and batch regime, and its signed error. Each
row is a cross-validated residual: no constant was fitted to its publication. `python -m
rlsim.tools.reproduce.validation` rewrites this file (as `rlsim reproduce validation --out DIR` writes
DIR/validation_residuals.csv); a slow test checks that the shipped file agrees with the current table.

A residual resembles a job when it is near on every axis a miss depends on: the same engine family (its host
work differs by engine), the same batch regime (a few sequences per engine, where host time and fixed kernel
costs dominate, or many), a model within 4x in size, a context within 4x, and the same schedule (a serving
benchmark stands for a generation-only job). The band is the root mean square of the resembling rows' errors
(bias and spread together), applied to step time and throughput alike, and it names those rows. With fewer
than `MIN_ROWS` resembling rows there is no band: the job lies where nothing was validated, and the output says
so instead of quoting the error of rows that do not resemble it. Coverage notes say, one line per reason, where
the job lies outside what the measured operator profiles cover.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

RESIDUALS_CSV = Path(__file__).with_name("validation_residuals.csv")
RESIDUAL_COLUMNS = ["name", "source", "gpu", "params_b", "context", "family", "engine", "batch", "error_pct"]
MIN_ROWS = 2
# The most a predicted row may miss by (validation's per-row tolerance and max target): also the margin a plan
# flags where no validated row resembles the job and the model's own error is unknown.
ROW_TOLERANCE_PCT = 25.0
SIZE_RATIO = 4.0  # a model within 4x in size resembles
CONTEXT_RATIO = 4.0  # a context within 4x resembles
SMALL_BATCH = 16  # running sequences per engine at or below which a step is "small" (host-bound, fixed costs)
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
    engine: str = "generic"  # engine family: vllm, sglang, trtllm or generic (no engine named: any resembles)
    batch: str = "large"  # "small" (<= SMALL_BATCH running sequences per engine) or "large"


@dataclass(frozen=True)
class Band:
    pct: float  # ± half-width, percent
    rows: int
    regime: str  # the resembling rows, by name
    names: tuple[str, ...] = ()


def engine_family(kind: str) -> str:
    """`vllm-v1-async` -> `vllm`: the engine family an engine kind belongs to."""
    return kind.split("-")[0]


def batch_regime(running_per_engine: float) -> str:
    return "small" if running_per_engine <= SMALL_BATCH else "large"


def load_residuals(path: Path = RESIDUALS_CSV) -> pd.DataFrame:
    return pd.read_csv(path)


def _same_schedule(row_family: str, family: str) -> bool:
    return row_family == family or (row_family == "serving" and family == "generation-only")


def _differences(r, regime: Regime) -> list[str]:
    """The axes on which residual row `r` does not resemble `regime` (empty: it resembles)."""
    out = []
    if regime.engine != "generic" and getattr(r, "engine", regime.engine) != regime.engine:
        out.append(f"engine {r.engine}")
    if getattr(r, "batch", regime.batch) != regime.batch:
        out.append(f"{r.batch} batch")
    if abs(math.log(max(r.params_b, 1e-3) / max(regime.params_b, 1e-3))) > math.log(SIZE_RATIO):
        out.append(f"{r.params_b:g}B model")
    if abs(math.log(max(r.context, 1) / max(regime.context, 1))) > math.log(CONTEXT_RATIO):
        out.append(f"{int(r.context):,}-token context")
    if not _same_schedule(r.family, regime.family):
        out.append(f"{r.family} schedule")
    return out


def _bandable(residuals: pd.DataFrame) -> pd.DataFrame:
    return residuals[~residuals["family"].isin(COMPONENT_FAMILIES)]


def band(regime: Regime, residuals: pd.DataFrame | None = None) -> Band | None:
    """RMS error of the residual rows that resemble `regime` on every axis; None with fewer than MIN_ROWS."""
    res = _bandable(load_residuals() if residuals is None else residuals)
    near = res[[not _differences(r, regime) for r in res.itertuples()]]
    if len(near) < MIN_ROWS:
        return None
    rms = float(math.sqrt((near["error_pct"] ** 2).mean()))
    names = tuple(near["name"])
    shown = "; ".join(names[:3]) + (f"; and {len(names) - 3} more" if len(names) > 3 else "")
    return Band(rms, len(near), shown, names)


def nearest_miss(regime: Regime, residuals: pd.DataFrame | None = None) -> str:
    """Where no band exists: the row differing on fewest axes, and how it differs (for the 'none nearby' line)."""
    res = _bandable(load_residuals() if residuals is None else residuals)
    if res.empty:
        return "no validated rows"
    best = min(res.itertuples(), key=lambda r: len(_differences(r, regime)))
    return f"nearest: {best.name}, which differs in {', '.join(_differences(best, regime)) or 'nothing'}"


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
    """The regime of a scenario: the rollout role's GPU, model, TP, engine and sequences per engine; the longest
    prompt + response the workload produces (the scenario checks' `max_sequence_tokens`); schedule kind."""
    from rlsim.sim.api import max_sequence_tokens

    roles = scn.roles
    name = next((n for n in ("rollout", "actor") if n in roles), next(iter(roles)))
    role = roles[name]
    model = scn.models[role.model]
    pool = scn.cluster.pools[role.pool]
    context = int(max_sequence_tokens(scn))
    engine = getattr(role, "engine", None)
    kind = engine.kind if engine is not None else "generic"
    engines = max(1, scn.engine_count(name))
    samples = scn.algorithm.prompts_per_step * scn.algorithm.samples_per_prompt
    per_engine = min(samples / engines, engine.max_num_seqs if engine is not None else samples)
    return Regime(gpu=Path(str(pool.hardware)).stem, params_b=model.params / 1e9, context=context,
                  family=scn.schedule.kind, tp=role.parallel.tp, moe=model.num_experts > 0,
                  ep=max(r.parallel.ep for r in roles.values()), engine=engine_family(kind),
                  batch=batch_regime(per_engine))


def describe(regime: Regime) -> str:
    return (f"{regime.engine} engine, {regime.batch} batch, {regime.params_b:.1f}B model, "
            f"{regime.context:,}-token context, {regime.family}")


def band_lines(summary: dict, scn) -> list[str]:
    """What `rlsim run` prints under the summary: the model-error band (or that none applies) and coverage notes."""
    regime = scenario_regime(scn)
    res = load_residuals()
    b = band(regime, res)
    if b is not None:
        lines = [f"model error ± {b.pct:.0f}% (RMS of the {b.rows} validated rows like this job, {describe(regime)}: "
                 f"{b.regime}; docs/validation.md)"]
        for key, label, unit in (("step_time_s", "step time", "s"), ("throughput_tokens_per_s", "throughput", "tok/s")):
            value = summary.get(key)
            if isinstance(value, int | float):
                lines.append(f"  {label} {value:,.1f} {unit} ± {value * b.pct / 100:,.1f}")
    else:
        lines = [f"model error: no validated regime nearby ({describe(regime)}; {nearest_miss(regime, res)}): "
                 "size with margin and calibrate on a run of your own (docs/validation.md)"]
    lines += [f"outside what is covered: {n}" for n in coverage_notes(regime, res)]
    return lines
