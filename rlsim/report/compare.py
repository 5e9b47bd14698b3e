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

from rlsim.report.output import derived_costs, phase_means  # noqa: E402
from rlsim.report.plots import timing_color  # noqa: E402

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


def comparison_table(runs: Sequence[RunSummary]) -> pd.DataFrame:
    """One row per run (index: label); timing_s/*, idle/<pool>, busy/<phase> columns are unions."""
    rows = []
    for run in runs:
        s = {**run.summary, **{k: v for k, v in derived_costs(run.summary).items() if k not in run.summary}}
        row = {k: s.get(k, np.nan) for k in HEAD + MIDDLE + TAIL}
        for phase, mean in phase_means(run.steps).items() if not run.steps.empty else []:
            row[f"timing_s/{phase}"] = mean
        for pool, idle in (s.get("idle_fraction_by_pool") or {}).items():
            row[f"idle/{pool}"] = idle
        for phase, frac in (s.get("busy_fraction_by_phase") or {}).items():
            row[f"busy/{phase}"] = frac
        rows.append(row)
    df = pd.DataFrame(rows, index=pd.Index([r.label for r in runs], name="run"))

    def group(prefix: str) -> list[str]:
        return sorted(c for c in df.columns if c.startswith(prefix))

    order = HEAD + group("timing_s/") + MIDDLE + group("idle/") + group("busy/") + TAIL
    return df.reindex(columns=order).astype(float)


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


def format_value(column: str, value: float) -> str:
    """Terminal formatting by column kind; NaN shows as '-' (a pool or phase the run does not have)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    if column.startswith(("idle", "busy", "gpu_idle")):
        return f"{value:.1%}"
    if column.startswith("cost"):
        return f"${value:,.3f}" if value < 100 else f"${value:,.0f}"
    if column.startswith("timing_s/") or column == "step_time_s":
        return f"{value:,.2f} s"
    if column in ("num_gpus", "steps", "staleness_max"):
        return f"{value:.0f}"
    if column.startswith("throughput") or column == "response_length_mean":
        return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"
    return f"{value:,.2f}"


def _xticks(ax, labels: list[str]) -> None:
    long = max(map(len, labels)) > 12
    ax.set_xticks(
        np.arange(len(labels)),
        labels,
        rotation=20 if long else 0,
        ha="right" if long else "center",
        fontsize=8,
    )


def _bars(ax, labels: list[str], values: np.ndarray, texts: list[str], color: str) -> None:
    """One bar per run with its value written on top ('n/a' where the run has no value)."""
    x = np.arange(len(labels))
    ax.bar(x, np.nan_to_num(values, nan=0.0), color=color, width=0.6)
    top = float(np.nanmax(values)) if np.isfinite(values).any() else 1.0
    for xi, v, text in zip(x, values, texts, strict=True):
        y = v if np.isfinite(v) else 0.0
        ax.text(xi, y + 0.01 * top, text if np.isfinite(v) else "n/a", ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, top * 1.22 if top > 0 else 1)
    _xticks(ax, labels)


def compare_chart(table: pd.DataFrame) -> Figure:
    """Grouped bars: throughput, step-time breakdown, idle fraction by pool, cost per million tokens."""
    labels = [str(i) for i in table.index]
    x = np.arange(len(labels))
    fig, axes = plt.subplots(2, 2, figsize=(max(10.0, 2.2 * len(labels) + 5), 7.5))
    (a_thr, a_step), (a_idle, a_cost) = axes

    thr, per_gpu = table["throughput_tokens_per_s"].to_numpy(), table["throughput_tokens_per_s_per_gpu"]
    texts = [f"{t:,.0f}\n({g:,.0f}/GPU)" for t, g in zip(thr, per_gpu, strict=True)]
    _bars(a_thr, labels, thr, texts, "#4C72B0")
    a_thr.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    a_thr.set_ylim(0, a_thr.get_ylim()[1] * 1.08)
    a_thr.set_title("Throughput, tokens/s (higher is better)")

    bottom = np.zeros(len(labels))
    for col in [c for c in table.columns if c.startswith("timing_s/")]:
        vals = table[col].fillna(0.0).to_numpy()
        if vals.any():
            label = col.removeprefix("timing_s/")
            a_step.bar(x, vals, bottom=bottom, width=0.6, color=timing_color(col), label=label)
            bottom += vals
    a_step.scatter(x, table["step_time_s"], marker="_", s=400, color="black", zorder=5, label="step time")
    _xticks(a_step, labels)
    a_step.set_ylabel("seconds")
    a_step.set_title("Mean step time by phase (lower is better)")
    a_step.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)

    pool_cols = [c for c in table.columns if c.startswith("idle/")]
    multi_pool = table[pool_cols].notna().sum(axis=1).max() > 1 if pool_cols else False
    idle_cols = ["gpu_idle_fraction"] + (pool_cols if multi_pool else [])
    width = 0.8 / len(idle_cols)
    greys = plt.get_cmap("Greys")(np.linspace(0.75, 0.35, len(idle_cols)))
    for i, col in enumerate(idle_cols):
        vals = table[col].to_numpy()
        xs = x - 0.4 + width * (i + 0.5)
        name = "whole cluster" if col == "gpu_idle_fraction" else f"pool {col.removeprefix('idle/')}"
        a_idle.bar(xs, np.nan_to_num(vals), width=width, color=greys[i], label=name, edgecolor="white")
        for xi, v in zip(xs, vals, strict=True):
            if np.isfinite(v):
                a_idle.text(xi, v, f"{v:.1%}", ha="center", va="bottom", fontsize=7)
    _xticks(a_idle, labels)
    a_idle.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    values = table[idle_cols].to_numpy()
    top = float(np.nanmax(values)) if np.isfinite(values).any() else 0.0
    a_idle.set_ylim(0, max(0.05, top * 1.2))
    a_idle.set_title("GPU idle fraction (lower is better)")
    if multi_pool:
        a_idle.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)

    cost = table["cost_per_million_tokens_usd"].to_numpy()
    _bars(a_cost, labels, cost, [f"${c:,.3f}" for c in cost], "#55A868")
    a_cost.set_ylabel("USD")
    a_cost.set_title("Cost per million trained tokens (lower is better)")
    fig.tight_layout()
    return fig
