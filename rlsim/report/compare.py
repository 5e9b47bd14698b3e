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
from rlsim.report.plots import IDLE_COLOR, timing_color  # noqa: E402

HEAD = [
    "num_gpus", "steps", "step_time_s",
]
MIDDLE = [
    "throughput_tokens_per_s", "throughput_tokens_per_s_per_gpu", "samples_per_s", "response_length_mean",
    "gpu_idle_fraction",
]
TAIL = [
    "staleness_mean", "staleness_max", "gpu_hours", "cost_usd", "cost_per_step_usd", "cost_per_million_tokens_usd",
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
    out = [f"{lab} ({fb})" if list(labels).count(lab) > 1 else lab for lab, fb in zip(labels, fallbacks, strict=True)]
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


def _bars(ax, labels: list[str], values: np.ndarray, fmt: str, color: str) -> None:
    x = np.arange(len(labels))
    finite = np.nan_to_num(values, nan=0.0)
    ax.bar(x, finite, color=color, width=0.6)
    top = float(np.nanmax(values)) if np.isfinite(values).any() else 1.0
    for xi, v in zip(x, values, strict=True):
        text = "n/a" if not np.isfinite(v) else fmt.format(v)
        ax.text(xi, (0 if not np.isfinite(v) else v) + 0.01 * top, text, ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, top * 1.18 if top > 0 else 1)
    ax.set_xticks(x, labels, rotation=20 if max(map(len, labels)) > 12 else 0, ha="right" if
                  max(map(len, labels)) > 12 else "center", fontsize=8)


def compare_chart(table: pd.DataFrame) -> Figure:
    """Grouped bars: throughput, step-time breakdown, idle fraction by pool, cost per million tokens."""
    labels = list(table.index)
    fig, axes = plt.subplots(2, 2, figsize=(max(9.0, 2.2 * len(labels) + 5), 7.5))
    (a_thr, a_step), (a_idle, a_cost) = axes
    _bars(a_thr, labels, table["throughput_tokens_per_s"].to_numpy(), "{:,.0f}", "#4C72B0")
    a_thr.set_title("Throughput (tokens/s, higher is better)")

    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    for col in [c for c in table.columns if c.startswith("timing_s/")]:
        vals = table[col].fillna(0.0).to_numpy()
        if vals.any():
            a_step.bar(x, vals, bottom=bottom, width=0.6, color=timing_color(col), label=col.removeprefix("timing_s/"))
            bottom += vals
    a_step.scatter(x, table["step_time_s"], marker="_", s=400, color="black", zorder=5, label="step time")
    a_step.set_xticks(x, labels, rotation=20 if max(map(len, labels)) > 12 else 0,
                      ha="right" if max(map(len, labels)) > 12 else "center", fontsize=8)
    a_step.set_ylabel("seconds")
    a_step.set_title("Mean step time by phase (lower is better)")
    a_step.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)

    idle_cols = ["gpu_idle_fraction"] + [c for c in table.columns if c.startswith("idle/")]
    width = 0.8 / len(idle_cols)
    greys = plt.get_cmap("Greys")(np.linspace(0.75, 0.35, len(idle_cols)))
    for i, col in enumerate(idle_cols):
        vals = table[col].to_numpy()
        a_idle.bar(x - 0.4 + width * (i + 0.5), np.nan_to_num(vals), width=width, color=greys[i],
                   label="cluster" if col == "gpu_idle_fraction" else f"pool {col.removeprefix('idle/')}",
                   edgecolor=IDLE_COLOR)
    a_idle.set_xticks(x, labels, rotation=20 if max(map(len, labels)) > 12 else 0,
                      ha="right" if max(map(len, labels)) > 12 else "center", fontsize=8)
    a_idle.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    top = np.nanmax(table[idle_cols].to_numpy()) if np.isfinite(table[idle_cols].to_numpy()).any() else 0
    a_idle.set_ylim(0, max(0.05, float(top) * 1.2))
    a_idle.set_title("GPU idle fraction (lower is better)")
    a_idle.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)

    _bars(a_cost, labels, table["cost_per_million_tokens_usd"].to_numpy(), "${:,.3f}", "#55A868")
    a_cost.set_ylabel("USD")
    a_cost.set_title("Cost per million trained tokens (lower is better)")
    fig.tight_layout()
    return fig
