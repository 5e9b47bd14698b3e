"""Side-by-side comparison of runs: one row per run with an identical set of columns, and a bar chart.

The column set is the union over the runs (a pool or phase one run lacks is NaN there), in a fixed
order, so `compare.csv` from different invocations lines up and "which cluster is cheaper for this
job" is one table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from rlsim.tools.report.output import derived_costs, phase_means  # noqa: E402
from rlsim.tools.report.style import apply_style, legend_outside, timing_color  # noqa: E402

HEAD = [
    "num_gpus",
    "steps",
    "step_time_s",
]
MIDDLE = [
    "throughput_tokens_per_s",
    "throughput_tokens_per_s_per_gpu",
    "samples_per_s",
    "response_length_mean",
    "gpu_idle_fraction",
]
TAIL = [
    "staleness_mean",
    "staleness_max",
    "gpu_hours",
    "cost_usd",
    "cost_per_step_usd",
    "cost_per_million_tokens_usd",
]


@dataclass
class RunSummary:
    """What a comparison needs from one run: a label, its summary dict and its step table."""

    label: str
    summary: dict
    steps: pd.DataFrame
    source: str = ""
    stats: pd.DataFrame | None = None  # uncertainty.mean_interval over seed replicates (run_metrics keys)


def unique_labels(labels: Sequence[str], fallbacks: Sequence[str]) -> list[str]:
    """Scenario names, disambiguated by file name and then by position when two runs share one."""
    out = [
        f"{lab} ({fb})" if list(labels).count(lab) > 1 else lab
        for lab, fb in zip(labels, fallbacks, strict=True)
    ]
    seen: dict[str, int] = {}
    for i, lab in enumerate(out):
        seen[lab] = seen.get(lab, 0) + 1
        if seen[lab] > 1:
            out[i] = f"{lab} #{seen[lab]}"
    return out


_NESTED = {"idle_fraction_by_pool/": "idle/", "busy_fraction_by_phase/": "busy/", "timing_s/": "timing_s/"}


def _column(key: str) -> str:
    """A run_metrics key as a comparison column (`idle_fraction_by_pool/gen` -> `idle/gen`)."""
    for prefix, short in _NESTED.items():
        if key.startswith(prefix):
            return short + key.removeprefix(prefix)
    return key


def _row(run: RunSummary) -> tuple[dict, dict]:
    """(values, 95% half-widths) of one run by comparison column."""
    if run.stats is not None:
        values = {_column(k): v for k, v in run.stats["mean"].items()}
        return values, {_column(k): v for k, v in run.stats["ci95"].dropna().items()}
    s = {**run.summary, **{k: v for k, v in derived_costs(run.summary).items() if k not in run.summary}}
    row = {k: s.get(k, np.nan) for k in HEAD + MIDDLE + TAIL}
    for phase, mean in phase_means(run.steps).items() if not run.steps.empty else []:
        row[f"timing_s/{phase}"] = mean
    for pool, idle in (s.get("idle_fraction_by_pool") or {}).items():
        row[f"idle/{pool}"] = idle
    for phase, frac in (s.get("busy_fraction_by_phase") or {}).items():
        row[f"busy/{phase}"] = frac
    return row, _band(s)


BANDED = ("step_time_s", "throughput_tokens_per_s", "throughput_tokens_per_s_per_gpu", "samples_per_s")


def _band(summary: dict) -> dict:
    """A calibrated run's ± band (`calibration:` overlay) on its predicted figures, as half-widths."""
    band = summary.get("calibration_band_pct")
    if not band:
        return {}
    return {k: summary[k] * band / 100 for k in BANDED if isinstance(summary.get(k), int | float)}


def _ordered(rows: list[dict], labels: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows, index=pd.Index(labels, name="run"))

    def group(prefix: str) -> list[str]:
        return sorted(c for c in df.columns if c.startswith(prefix))

    order = HEAD + group("timing_s/") + MIDDLE + group("idle/") + group("busy/") + TAIL
    return df.reindex(columns=order).astype(float)


def comparison_table(runs: Sequence[RunSummary]) -> pd.DataFrame:
    """One row per run (index: label); timing_s/*, idle/<pool>, busy/<phase> columns are unions."""
    return _ordered([_row(r)[0] for r in runs], [r.label for r in runs])


def interval_table(runs: Sequence[RunSummary]) -> pd.DataFrame | None:
    """The half-width of every comparison_table cell: the 95% interval over seed replicates, or a calibrated
    run's ± band (NaN where neither); None if no run has any."""
    if all(r.stats is None and not r.summary.get("calibration_band_pct") for r in runs):
        return None
    values = comparison_table(runs)
    widths = pd.DataFrame([_row(r)[1] for r in runs], index=values.index)
    return widths.reindex(columns=values.columns).astype(float)


LABELS = {
    "num_gpus": "GPUs",
    "steps": "measured steps",
    "step_time_s": "step time",
    "throughput_tokens_per_s": "throughput (tok/s)",
    "throughput_tokens_per_s_per_gpu": "  per GPU",
    "samples_per_s": "samples/s",
    "response_length_mean": "mean response (tok)",
    "gpu_idle_fraction": "GPU idle (cluster)",
    "staleness_mean": "staleness mean",
    "staleness_max": "staleness max",
    "gpu_hours": "GPU-hours",
    "cost_usd": "cost",
    "cost_per_step_usd": "  per step",
    "cost_per_million_tokens_usd": "  per M tokens",
}


def display_label(column: str) -> str:
    """Short terminal label for a comparison column (compare.csv keeps the summary.json names)."""
    for prefix, shown in (("timing_s/", "  "), ("idle/", "  idle: "), ("busy/", "  busy: ")):
        if column.startswith(prefix):
            return shown + column.removeprefix(prefix)
    return LABELS.get(column, column)


def format_value(column: str, value: float, ci95: float | None = None) -> str:
    """Terminal formatting by column kind (report.formats); NaN shows as '-' (a pool or phase the run lacks)."""
    from rlsim.tools.report.formats import show

    return show(column, value, ci95)


def _xticks(ax, labels: list[str]) -> None:
    long = max(map(len, labels)) > 12
    ax.set_xticks(np.arange(len(labels)), labels, rotation=20 if long else 0, ha="right" if long else "center")


def _err(ci: pd.DataFrame | None, col: str) -> np.ndarray | None:
    if ci is None or col not in ci:
        return None
    values = ci[col].to_numpy(dtype=float)
    return np.nan_to_num(values) if np.isfinite(values).any() else None


def _bars(ax, labels: list[str], values: np.ndarray, texts: list[str], color: str, yerr=None) -> None:
    """One bar per run (with its 95% interval when given) and its value above ('n/a' where it has none)."""
    x = np.arange(len(labels))
    ax.bar(x, np.nan_to_num(values, nan=0.0), color=color, width=0.6, yerr=yerr, capsize=4 if yerr is not None else 0)
    tops = np.nan_to_num(values) + (yerr if yerr is not None else 0.0)
    top = float(np.nanmax(tops)) if len(tops) else 1.0
    for xi, v, t, text in zip(x, values, tops, texts, strict=True):
        ax.text(xi, t + 0.02 * top, text if np.isfinite(v) else "n/a", ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, top * 1.3 if top > 0 else 1)
    _xticks(ax, labels)


def _phase_panel(ax, table: pd.DataFrame, labels: list[str], ci: pd.DataFrame | None) -> None:
    """Mean time per phase side by side (phases may overlap in time, so they are never stacked)."""
    cols = [c for c in table.columns if c.startswith("timing_s/") and table[c].fillna(0.0).any()]
    x = np.arange(len(labels))
    width = 0.8 / max(1, len(cols))
    for i, col in enumerate(cols):
        ax.bar(x - 0.4 + width * (i + 0.5), table[col].fillna(0.0), width=width, color=timing_color(col),
               yerr=_err(ci, col), capsize=2, label=col.removeprefix("timing_s/"))
    ax.scatter(x, table["step_time_s"], marker="_", s=600, color="black", zorder=5, label="step time")
    tops = [table[c].fillna(0.0).to_numpy() + (_err(ci, c) if _err(ci, c) is not None else 0.0) for c in cols]
    top = float(np.nanmax([*map(np.max, tops), np.nanmax(table["step_time_s"].to_numpy(dtype=float))]))
    ax.set_ylim(0, top * 1.15 if top > 0 else 1)
    _xticks(ax, labels)
    ax.set_ylabel("seconds")
    ax.set_title("Mean time per phase and step time (lower is better)")
    legend_outside(ax)


def _idle_panel(ax, table: pd.DataFrame, labels: list[str], ci: pd.DataFrame | None) -> None:
    x = np.arange(len(labels))
    pool_cols = [c for c in table.columns if c.startswith("idle/")]
    multi_pool = table[pool_cols].notna().sum(axis=1).max() > 1 if pool_cols else False
    idle_cols = ["gpu_idle_fraction"] + (pool_cols if multi_pool else [])
    width = 0.8 / len(idle_cols)
    greys = plt.get_cmap("Greys")(np.linspace(0.75, 0.35, len(idle_cols)))
    for i, col in enumerate(idle_cols):
        vals = table[col].to_numpy()
        xs = x - 0.4 + width * (i + 0.5)
        name = "whole cluster" if col == "gpu_idle_fraction" else f"pool {col.removeprefix('idle/')}"
        a = ax.bar(xs, np.nan_to_num(vals), width=width, color=greys[i], label=name, edgecolor="white",
                   yerr=_err(ci, col), capsize=2)
        ax.bar_label(a, labels=[f"{v:.1%}" if np.isfinite(v) else "" for v in vals], fontsize=7, padding=2)
    _xticks(ax, labels)
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    values = table[idle_cols].to_numpy(dtype=float)
    errs = np.array([e if (e := _err(ci, c)) is not None else np.zeros(len(labels)) for c in idle_cols]).T
    top = float(np.nanmax(values + errs)) if np.isfinite(values).any() else 0.0
    ax.set_ylim(0, min(1.05, max(0.05, top * 1.3)))
    ax.set_title("GPU idle fraction (lower is better)")
    if multi_pool:
        legend_outside(ax)


def compare_chart(table: pd.DataFrame, ci: pd.DataFrame | None = None) -> Figure:
    """Throughput, time per phase, idle fraction by pool, cost per million tokens; 95% intervals as error bars."""
    apply_style()
    labels = [str(i) for i in table.index]
    fig, axes = plt.subplots(2, 2, figsize=(max(10.0, 2.2 * len(labels) + 5), 7.5))
    (a_thr, a_step), (a_idle, a_cost) = axes

    thr, per_gpu = table["throughput_tokens_per_s"].to_numpy(), table["throughput_tokens_per_s_per_gpu"]
    texts = [f"{t:,.0f}\n({g:,.0f}/GPU)" for t, g in zip(thr, per_gpu, strict=True)]
    _bars(a_thr, labels, thr, texts, "#4C72B0", _err(ci, "throughput_tokens_per_s"))
    a_thr.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    a_thr.set_title("Throughput, tokens/s (higher is better)")
    _phase_panel(a_step, table, labels, ci)
    _idle_panel(a_idle, table, labels, ci)
    cost = table["cost_per_million_tokens_usd"].to_numpy()
    _bars(a_cost, labels, cost, [f"${c:,.3f}" for c in cost], "#55A868", _err(ci, "cost_per_million_tokens_usd"))
    a_cost.set_ylabel("USD")
    a_cost.set_title("Cost per million trained tokens (lower is better)")
    if ci is not None:
        fig.suptitle("error bars: 95% interval over seeds", fontsize=8, x=0.99, ha="right")
    fig.tight_layout()
    return fig
