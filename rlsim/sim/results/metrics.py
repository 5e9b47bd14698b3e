"""From the step rows and the GPU ledger to the contract's summary (docs/sources.md, Design notes: Outputs).

Glossary (all SI units; the measured window runs from the start of the first measured step to the
end of the last step, warm-up steps excluded):

- step_time_s: mean of `timing_s/step` over measured steps.
- throughput_tokens_per_s: (prompt + response) tokens of measured steps / window length
  (HybridFlow's metric). throughput_tokens_per_s_per_gpu divides by num_gpus (verl perf/throughput).
- samples_per_s: samples of measured steps / window length.
- gpu_idle_fraction: 1 - busy GPU-seconds / (num_gpus x window), whole cluster; a GPU no role uses
  is idle all the time. idle_fraction_by_pool: the same per pool.
- busy_fraction_by_phase: GPU-seconds per phase / (num_gpus x window); sums to 1 - gpu_idle_fraction.
- critical_path_share_by_phase: share of the window's wall time attributed to one phase per instant
  (trainer phases first, then sync/switch, then generation; `idle` when no GPU works); sums to 1.
  Per-step `timing_s/*` columns overlap in asynchronous schedules; this share never does.
- staleness_mean / staleness_max: over trained samples, trainer version - oldest policy version of
  the sample's tokens (0 for synchronous schedules).
- gpu_hours, cost_usd, cost_per_million_tokens_usd: where every pool has a price per GPU-hour.
- train_mfu: the actor update's achieved share of its GPUs' peak BF16 FLOP/s over measured steps: the
  per-step `mfu/update_actor` weighted by `timing_s/update_actor` (6N per trained token plus causal
  attention, x epochs). A result of the operator-priced update, not a profile input.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlsim.sim.hardware import load_profile
from rlsim.sim.results.collector import CUMULATIVE, column_kind
from rlsim.sim.scenario.schema import Scenario


def measured_window(steps: pd.DataFrame) -> tuple[float, float]:
    measured = steps[~steps["warmup"]]
    return float(measured["start_s"].min()), float(measured["end_s"].max())


def clip_to_window(timeline: pd.DataFrame, t0: float, t1: float) -> pd.DataFrame:
    start = timeline["start_s"].clip(lower=t0, upper=t1)
    end = timeline["end_s"].clip(lower=t0, upper=t1)
    out = timeline.assign(start_s=start, end_s=end)
    out["gpu_seconds"] = (out["end_s"] - out["start_s"]) * out["gpus"]
    return out[out["gpu_seconds"] > 0]


# Which phase an instant belongs to when several run at once: the trainer's work first (it is what a
# step waits for in every schedule), then weight movement, then generation and scoring.
CRITICAL_PATH_ORDER = ("train", "forward", "sync", "switch", "generate", "judge")


def critical_path_share(timeline: pd.DataFrame, t0: float, t1: float) -> dict[str, float]:
    """Each instant of [t0, t1] attributed to one phase (CRITICAL_PATH_ORDER; `idle` when nothing runs).

    Unlike busy_fraction_by_phase (GPU-seconds, phases overlap across pools) these shares sum to 1.
    """
    window = t1 - t0
    if window <= 0:
        return {}
    start_all, end_all = timeline["start_s"].to_numpy(), timeline["end_s"].to_numpy()
    inside = (end_all > t0) & (start_all < t1)
    starts, ends = np.clip(start_all[inside], t0, t1), np.clip(end_all[inside], t0, t1)
    phase_of = timeline["phase"].to_numpy()[inside]
    edges = np.unique(np.concatenate([[t0, t1], starts, ends]))
    lengths = np.diff(edges)
    owner = np.full(len(lengths), -1)
    present = set(phase_of.tolist())
    phases = list(CRITICAL_PATH_ORDER) + sorted(present - set(CRITICAL_PATH_ORDER))
    for rank in range(len(phases) - 1, -1, -1):  # lowest priority first: higher ones overwrite
        if phases[rank] not in present:
            continue
        mask = phase_of == phases[rank]
        cover = np.zeros(len(edges))
        np.add.at(cover, np.searchsorted(edges, starts[mask]), 1)
        np.add.at(cover, np.searchsorted(edges, ends[mask]), -1)
        owner[np.cumsum(cover)[:-1] > 0] = rank
    shares = {ph: float(lengths[owner == i].sum()) / window for i, ph in enumerate(phases) if (owner == i).any()}
    shares["idle"] = float(lengths[owner == -1].sum()) / window
    return shares


def pool_prices(scn: Scenario) -> dict[str, float | None]:
    prices = {}
    for name, pool in scn.cluster.pools.items():
        price = pool.price_usd_per_gpu_hour
        if price is None:
            price = load_profile(pool.hardware).price_usd_per_gpu_hour
        prices[name] = price
    return prices


def _idle_share(busy_gpu_s: float, capacity_gpu_s: float) -> float:
    """1 - busy / capacity. A fully busy pool sums its intervals to capacity only up to float rounding:
    that noise below zero reads 0 (a table would print "-0%"); a real overcount stays visible."""
    idle = 1.0 - busy_gpu_s / capacity_gpu_s
    return 0.0 if -1e-9 < idle < 0.0 else idle


def summarize(
    scn: Scenario, steps: pd.DataFrame, timeline: pd.DataFrame, staleness: list[int] | None = None
) -> dict:
    """The contract's summary. `staleness`: per trained sample (all steps, warm-up first), if the
    schedule tracks it; percentiles come from it, synchronous schedules have none (all zero)."""
    pool_gpus = {name: pool.gpus for name, pool in scn.cluster.pools.items()}
    num_gpus = sum(pool_gpus.values())
    measured = steps[~steps["warmup"]]
    t0, t1 = measured_window(steps)
    window = t1 - t0
    busy = clip_to_window(timeline, t0, t1)
    capacity = num_gpus * window

    tokens = float(measured["tokens"].sum())
    samples = float(measured["samples"].sum())
    by_pool = busy.groupby("pool")["gpu_seconds"].sum()
    by_phase = busy.groupby("phase")["gpu_seconds"].sum()
    idle_by_pool = {p: _idle_share(float(by_pool.get(p, 0.0)), g * window) for p, g in pool_gpus.items()}

    stale_mean = measured["staleness/mean"] * measured["samples"]
    summary = {
        "step_time_s": float(measured["timing_s/step"].mean()),
        "throughput_tokens_per_s": tokens / window,
        "throughput_tokens_per_s_per_gpu": tokens / window / num_gpus,
        "samples_per_s": samples / window,
        "gpu_idle_fraction": _idle_share(float(busy["gpu_seconds"].sum()), capacity),
        "idle_fraction_by_pool": idle_by_pool,
        "busy_fraction_by_phase": {ph: float(v) / capacity for ph, v in sorted(by_phase.items())},
        "critical_path_share_by_phase": critical_path_share(timeline, t0, t1),
        "staleness_mean": float(stale_mean.sum() / samples) if samples else 0.0,
        "staleness_max": float(measured["staleness/max"].max()),
        "num_gpus": num_gpus,
        "steps": len(measured),
        "simulated_seconds": window,
        "tokens": tokens,
        "response_length_mean": float(  # 0 when no sample was trained (every trajectory failed)
            np.average(measured["response_length/mean"], weights=measured["samples"]) if samples else 0.0
        ),
        "gpu_hours": capacity / 3600.0,
    }
    measured_samples = int(measured["samples"].sum())
    values = np.asarray(staleness[-measured_samples:] if staleness and measured_samples else [0], dtype=float)
    summary["staleness_p50"] = float(np.percentile(values, 50))
    summary["staleness_p90"] = float(np.percentile(values, 90))
    if "mfu/update_actor" in measured:
        seconds = measured["timing_s/update_actor"]
        if float(seconds.sum()) > 0:
            summary["train_mfu"] = float((measured["mfu/update_actor"] * seconds).sum() / seconds.sum())
    if "timing_s/wait_rollout" in measured:
        summary["trainer_idle_ratio"] = float(measured["timing_s/wait_rollout"].sum()) / window
    rollout_pool = scn.roles["rollout"].pool if "rollout" in scn.roles else None
    if rollout_pool is not None and "actor" in scn.roles and scn.roles["actor"].pool != rollout_pool:
        summary["rollout_idle_ratio"] = idle_by_pool[rollout_pool]
    for key in ("samples/multi_version", "samples/dropped_stale"):
        if key in measured:  # each column says once whether it is per step or a running total
            column = measured[key]
            summary[key.replace("/", "_")] = float(column.iloc[-1] if column_kind(key) == CUMULATIVE else column.sum())
    calibration = getattr(scn, "calibration", None)
    if calibration is not None:  # fitted on a real run's logs: every predicted figure carries its ± band
        summary["calibration_band_pct"] = float(calibration.band_pct)
    prices = pool_prices(scn)
    if all(p is not None for p in prices.values()):
        cost = sum(pool_gpus[p] * prices[p] for p in pool_gpus) * window / 3600.0
        summary["cost_usd"] = cost
        summary["cost_per_step_usd"] = cost / len(measured)
        if tokens:  # no token trained (every trajectory failed): no per-token cost, rather than NaN
            summary["cost_per_million_tokens_usd"] = cost / (tokens / 1e6)
    return summary
