"""The tornado chart of `rlsim sensitivity`: one bar per input, its low and high side, per metric.

Takes the table of `rlsim.tools.sensitivity.build_table` (also as read back from sensitivity.csv) and
returns a matplotlib Figure; the caller saves it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LOW_COLOR = "#4C72B0"  # input at its low value
HIGH_COLOR = "#DD8452"  # input at its high value

_AXIS_LABELS = {
    "throughput_tokens_per_s": ("throughput", "tokens/s", 1.0),
    "throughput_tokens_per_s_per_gpu": ("throughput per GPU", "tokens/s", 1.0),
    "samples_per_s": ("samples/s", "samples/s", 1.0),
    "gpu_idle_fraction": ("GPU idle", "% of GPU time", 100.0),
    "step_time_s": ("step time", "s", 1.0),
    "staleness_mean": ("mean staleness", "policy versions", 1.0),
    "cost_per_million_tokens_usd": ("cost", "USD per 1M tokens", 1.0),
}


def _axis(metric: str) -> tuple[str, str, float]:
    return _AXIS_LABELS.get(metric, (metric, "", 1.0))


def _value(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    v = float(v)
    if abs(v) >= 1e4:
        return f"{v:,.0f}"
    if v != 0 and abs(v) < 1e-3:
        return f"{v:.3g}"
    return f"{v:.4g}"


def input_tick_label(row: pd.Series) -> str:
    """`gen.train_mfu  0.48 / 0.72` (low / high value of the input, with its unit)."""
    unit = row.get("unit")
    unit = f" {unit}" if isinstance(unit, str) and unit and unit != "fraction" else ""
    return f"{row['label']}  {_value(row['low_value'])} / {_value(row['high_value'])}{unit}"


def plot_tornado(table: pd.DataFrame, metrics: Sequence[str], title: str = "sensitivity") -> Figure:
    """One panel per metric, inputs in the table's order (largest swing of the first metric on top)."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter

    n = max(len(table), 1)
    fig = Figure(figsize=(6.0 * len(metrics) + 3.2, 1.6 + 0.38 * n), layout="constrained")
    axes = fig.subplots(1, len(metrics), sharey=True, squeeze=False)[0]
    ys = list(range(len(table)))[::-1]  # first row at the top
    for ax, metric in zip(axes, metrics, strict=True):
        name, unit, scale = _axis(metric)
        if table.empty:
            ax.text(0.5, 0.5, "no inputs varied", ha="center", va="center", transform=ax.transAxes)
            continue
        base = float(table[f"{metric}_base"].iloc[0]) * scale
        for y, (_, row) in zip(ys, table.iterrows(), strict=True):
            if row[f"{metric}_low"] * scale == base == row[f"{metric}_high"] * scale:
                ax.text(base, y, " no change", va="center", ha="left", fontsize=7, color="#777777")
                continue
            for side, color in (("low", LOW_COLOR), ("high", HIGH_COLOR)):
                value = row[f"{metric}_{side}"]
                if value is None or math.isnan(value):
                    ax.text(base, y, " failed", va="center", ha="left", fontsize=8, color="#C44E52")
                    continue
                # Low side in the upper half of the row, high side in the lower: both show when they point the same way.
                ax.barh(y if side == "low" else y - 0.38, float(value) * scale - base, left=base, height=0.38,
                        align="edge", color=color)
        ax.axvline(base, color="black", linewidth=1.0)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}" if abs(x) >= 1e4 else f"{x:g}"))
        ax.annotate(
            f"base {_value(base)}{' ' + unit if unit else ''}", xy=(base, 1.0), xycoords=("data", "axes fraction"),
            xytext=(3, 3), textcoords="offset points", fontsize=8, va="bottom",
        )
        ax.set_xlabel(f"{name} ({unit})" if unit else name)
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(name, fontsize=10, loc="left")
    axes[0].set_yticks(ys)
    axes[0].set_yticklabels([input_tick_label(row) for _, row in table.iterrows()], fontsize=8)
    axes[0].set_ylabel("input  (low / high value)")
    if not table.empty:
        axes[0].set_ylim(-0.8, len(table) - 0.2)
    fig.legend(
        handles=[Patch(color=LOW_COLOR, label="input at its low value"),
                 Patch(color=HIGH_COLOR, label="input at its high value")],
        loc="outside lower center", ncols=2, fontsize=8, frameon=False,
    )
    fig.suptitle(title, fontsize=11)
    return fig
