"""The plan's Pareto front: throughput vs $ per million tokens, staleness as colour.

Labels of the front's points sit in a column to the right of the axes, in the order of the points'
heights and evenly spaced, each joined to its point by a thin line: they cannot overlap, however
close the points are.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from rlsim.tools.plan.search import Evaluation, SearchResult
from rlsim.tools.report.style import label_column
from rlsim.tools.sweep.plot import pareto_front

X, Y, HUE = "cost_per_million_tokens_usd", "throughput_tokens_per_s", "staleness_mean"
MAX_LABELS = 14


def points(result: SearchResult, latest: dict[int, Evaluation]) -> pd.DataFrame:
    rank = {e.candidate: i + 1 for i, e in enumerate(result.ranking)}
    rows = []
    for cid, e in sorted(latest.items()):
        if e.summary is None or X not in e.summary:
            continue
        rows.append({"candidate": cid, "label": result.candidates[cid].label, X: e.summary[X], Y: e.summary[Y],
                     HUE: e.summary.get(HUE, 0.0), "ok": e.ok, "rank": rank.get(cid), "error": None})
    return pd.DataFrame(rows, columns=["candidate", "label", X, Y, HUE, "ok", "rank", "error"])


def plot_plan_pareto(result: SearchResult, latest: dict[int, Evaluation], top_k: int) -> Figure:
    data = points(result, latest)
    fig = Figure(figsize=(12, 6))
    ax = fig.add_axes((0.07, 0.24, 0.5, 0.68))
    if data.empty:
        ax.text(0.5, 0.5, "no candidate with a price was simulated", ha="center", transform=ax.transAxes)
        return fig
    bad = data[~data["ok"]]
    ax.scatter(bad[X], bad[Y] / 1e3, marker="x", color="0.6", label="violates a constraint")
    good = data[data["ok"]]
    art = ax.scatter(good[X], good[Y] / 1e3, c=good[HUE], cmap="viridis", s=28, label="candidates",
                     vmin=0, vmax=max(1.0, float(data[HUE].max())))
    bar = fig.colorbar(art, cax=fig.add_axes((0.07, 0.07, 0.5, 0.025)), orientation="horizontal")
    bar.set_label("staleness (mean policy versions behind)")
    front = pareto_front(good, X, Y, maximize=(False, True))
    ax.step(front[X], front[Y] / 1e3, where="post", color="black", lw=1.0)
    ax.scatter(front[X], front[Y] / 1e3, s=90, facecolors="none", edgecolors="black", label=f"Pareto front "
               f"({len(front)})")
    top = good[good["rank"].notna() & (good["rank"] <= top_k)]
    ax.scatter(top[X], top[Y] / 1e3, s=180, marker="*", color="crimson", label=f"top {top_k}", zorder=3)
    labelled = pd.concat([top, front]).drop_duplicates("candidate").sort_values(Y).head(MAX_LABELS)
    _label_column(ax, labelled)
    ax.set_xlabel("$ per million tokens (lower is better)")
    ax.set_ylabel("throughput, k tokens/s (higher is better)")
    ax.set_title(f"rlsim plan: {len(data)} simulated candidates", fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(0.0, -0.16), ncol=3, frameon=False)
    return fig


def _label_column(ax, rows: pd.DataFrame) -> None:
    points = [(r[X], r[Y] / 1e3, (f"#{int(r['rank'])} " if pd.notna(r["rank"]) else "") + str(r["label"]))
              for _, r in rows.iterrows()]
    label_column(ax, points)
