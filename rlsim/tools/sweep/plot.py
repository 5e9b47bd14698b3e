"""Trade-off plots of a sweep table: a metric against a knob (lines per hue) and Pareto fronts.

Functions take the results table (`load_results(DIR)` or `run_sweep(...).table`) and return a
matplotlib Figure; callers save. Error rows are left out. Replicates (seeds) are averaged, with
their standard deviation as error bars, so a noisy point does not pass for a trend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from rlsim.tools.report.style import label_column, legend_outside

if TYPE_CHECKING:  # matplotlib loads only when a plot is drawn: `rlsim` starts faster
    from matplotlib.figure import Figure

_LOWER_IS_BETTER = ("time", "idle", "staleness", "cost", "gpu_hours", "latency", "wait")


def higher_is_better(metric: str) -> bool:
    """Guess a metric's direction from its name: times, idle fractions, staleness and costs go down."""
    return not any(word in metric for word in _LOWER_IS_BETTER)


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["error"].isna()] if "error" in df.columns else df


def _require(df: pd.DataFrame, *columns: str | None) -> None:
    missing = [c for c in columns if c is not None and c not in df.columns]
    if missing:
        raise KeyError(
            f"no column {', '.join(missing)} in the sweep table (columns: {', '.join(df.columns)})"
        )


def _numeric(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def _short(key: str) -> str:
    """`roles.rollout.parallel.tp` -> `tp`: legends and titles stay readable; axes keep the full key."""
    return key.rsplit(".", 1)[-1]


def _readable_axes(ax, x: str | None, y: str) -> None:
    """Fractions (idle, shares) in %, as every table shows them; at most six x ticks so labels never overlap."""
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    from rlsim.tools.report.formats import metric_kind

    if x is not None:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6))
        if metric_kind(x) == "fraction":
            ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    if metric_kind(y) == "fraction":
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))


def _label(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def mean_over_seeds(df: pd.DataFrame, params: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per combination of the swept keys: numeric columns averaged over replicates."""
    params = [p for p in (params if params is not None else df.attrs.get("params", [])) if p in df.columns]
    df = ok_rows(df)
    if not params or "replicate" not in df.columns or df["replicate"].nunique() <= 1:
        return df.reset_index(drop=True)
    numeric = [
        c for c in df.columns if c not in params and _numeric(df[c]) and c not in ("point", "replicate")
    ]
    out = df.groupby(params, sort=False, dropna=False)[numeric].mean().reset_index()
    out.attrs["params"] = list(params)
    return out


def plot_sweep(
    df: pd.DataFrame, x: str, y: str, hue: str | None = None, kind: str = "line", ax=None
) -> Figure:
    """`y` against `x`, one line (or colour, for kind="scatter") per value of `hue`.

    Lines average the rows sharing (hue, x): seeds, and any other swept key, which the title then
    names; error bars are the standard deviation over those rows.
    """
    _require(df, x, y, hue)
    data = ok_rows(df)
    if ax is None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(7, 4.5), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    categorical = not _numeric(data[x])
    order = list(dict.fromkeys(data[x].tolist()))
    groups = data.groupby(hue, sort=True, dropna=False) if hue else [(None, data)]
    for value, group in groups:
        label = f"{_short(hue)}={_label(value)}" if hue else None
        xs = group[x].map(order.index) if categorical else group[x]
        if kind == "scatter":
            ax.scatter(xs, group[y], label=label, alpha=0.8)
            continue
        stats = group.assign(_x=xs).groupby("_x", sort=True)[y].agg(["mean", "std", "count"])
        yerr = stats["std"].fillna(0.0) if (stats["count"] > 1).any() else None
        ax.errorbar(stats.index, stats["mean"], yerr=yerr, marker="o", capsize=3, label=label)
    if categorical:
        ax.set_xticks(range(len(order)), [_label(v) for v in order], rotation=30 if len(order) > 4 else 0)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    _readable_axes(ax, None if categorical else x, y)
    averaged = []
    if kind != "scatter":
        if "replicate" in data.columns and data["replicate"].nunique() > 1:
            averaged.append("seeds")
        averaged += [
            p for p in df.attrs.get("params", []) if p not in (x, hue) and p in data and data[p].nunique() > 1
        ]
    title = f"{_short(y)} vs {_short(x)}"
    ax.set_title(
        title + (f"\nmean over {', '.join(map(_short, averaged))}" if averaged else ""), fontsize="medium"
    )
    if hue:
        legend_outside(ax, fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def pareto_front(
    df: pd.DataFrame, x: str, y: str, maximize: tuple[bool, bool] = (True, False)
) -> pd.DataFrame:
    """The rows no other row beats on both `x` and `y` (at least as good on both, better on one); sorted by x.

    Error rows and rows with NaN in x or y are left out. Exact ties are all kept. O(n log n).
    """
    _require(df, x, y)
    data = ok_rows(df).dropna(subset=[x, y])
    sx = data[x].to_numpy(dtype=float) * (1.0 if maximize[0] else -1.0)
    sy = data[y].to_numpy(dtype=float) * (1.0 if maximize[1] else -1.0)
    order = np.lexsort((-sy, -sx))  # best x first, then best y
    keep: list[int] = []
    best_y = -np.inf
    leader: tuple[float, float] | None = None
    for i in order:
        if sy[i] > best_y:
            keep.append(i)
            best_y, leader = sy[i], (sx[i], sy[i])
        elif sy[i] == best_y and leader == (sx[i], sy[i]):  # an exact copy of the front point
            keep.append(i)
    return data.iloc[sorted(keep, key=lambda i: (data[x].iloc[i], data[y].iloc[i]))]


def plot_pareto(
    df: pd.DataFrame,
    x: str,
    y: str,
    maximize: tuple[bool, bool] = (True, False),
    hue: str | None = None,
    annotate: Sequence[str] | None = None,
    ax=None,
) -> Figure:
    """Every point, with the Pareto front drawn as a staircase and its points labelled by `annotate` keys."""
    _require(df, x, y, hue)
    data = ok_rows(df)
    front = pareto_front(data, x, y, maximize)
    if ax is None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(7, 4.5), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    groups = data.groupby(hue, sort=True, dropna=False) if hue else [(None, data)]
    for value, group in groups:
        ax.scatter(group[x], group[y], alpha=0.6, label=f"{_short(hue)}={_label(value)}" if hue else "points")
    ax.step(front[x], front[y], where="pre" if maximize[0] else "post", color="black", lw=1.2)
    ax.scatter(
        front[x],
        front[y],
        s=80,
        facecolors="none",
        edgecolors="black",
        linewidths=1.5,
        label=f"Pareto front ({len(front)})",
    )
    keys = [
        k for k in (annotate if annotate is not None else df.attrs.get("params", [])) if k in front.columns
    ]
    if keys and len(front) <= 15:  # a column of labels beside the axes: they never collide on the data
        label_column(ax, [(row[x], row[y], ", ".join(f"{_short(k)}={_label(row[k])}" for k in keys))
                          for _, row in front.iterrows()], x_axes=1.04)
    arrows = ("higher" if maximize[0] else "lower", "higher" if maximize[1] else "lower")
    ax.set_xlabel(f"{x} ({arrows[0]} is better)")
    ax.set_ylabel(f"{y} ({arrows[1]} is better)")
    _readable_axes(ax, x, y)
    ax.set_title(f"Pareto front: {_short(y)} vs {_short(x)}", fontsize="medium")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(0.0, -0.18), ncol=3, frameon=False)
    ax.grid(alpha=0.3)
    return fig
