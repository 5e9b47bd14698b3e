"""The Gantt chart of a run: one lane per GPU group or engine, a bar per busy interval, engine load below.

Split from plots.py (the largest figure); `time_unit`, lane order and closed engine samples are shared
with the engine-load plot.
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from rlsim.tools.report.style import empty_figure, phase_color, phase_order  # noqa: E402


def time_unit(t_max: float) -> tuple[float, str]:
    """Seconds for short runs, minutes or hours for long ones: axis numbers stay readable."""
    if t_max > 3 * 3600:
        return 3600.0, "h"
    if t_max > 20 * 60:
        return 60.0, "min"
    return 1.0, "s"


def _group_order(timeline: pd.DataFrame, engine_stats: pd.DataFrame | None = None) -> list[tuple[str, str]]:
    """(pool, group) lanes: pools in order of first use, non-engine groups (trainers) before engines."""
    pairs = list(dict.fromkeys(zip(timeline["pool"], timeline["gpu_group"], strict=True)))
    if engine_stats is not None and not engine_stats.empty:
        pairs += [
            p
            for p in dict.fromkeys(zip(engine_stats["pool"], engine_stats["engine"], strict=True))
            if p not in pairs
        ]
    pool_rank = {p: i for i, p in enumerate(dict.fromkeys(p for p, _ in pairs))}
    engines = set(engine_stats["engine"]) if engine_stats is not None and not engine_stats.empty else set()

    def key(pg: tuple[str, str]):
        pool, group = pg
        prefix, _, num = group.rpartition("-")
        natural = (prefix, int(num)) if num.isdigit() else (group, -1)
        return (pool_rank[pool], group in engines, natural)

    return sorted(pairs, key=key)


def closed_engine_stats(engine_stats: pd.DataFrame, timeline: pd.DataFrame | None = None) -> pd.DataFrame:
    """Engine samples plus `running = 0` at the end of each of the engine's busy intervals.

    Engines sample at batch changes but not when the last sequences leave, so without this a step
    plot would hold the final batch size until the next step starts. An engine whose pool also trains
    (colocated: the hybrid engine sleeps and frees its KV cache while the GPUs train) holds no KV after
    its busy interval either; an engine on GPUs of its own keeps its last KV use until its next sample.
    """
    if engine_stats is None or engine_stats.empty or timeline is None or timeline.empty:
        return engine_stats
    engines = engine_stats.drop_duplicates("engine").set_index("engine")
    ends = timeline[timeline["gpu_group"].isin(engines.index)][["gpu_group", "end_s"]]
    training = set(timeline.loc[timeline["phase"].isin(("train", "forward")), "pool"])
    pools = engines.loc[ends["gpu_group"], "pool"].to_numpy()
    extra = pd.DataFrame(
        {
            "engine": ends["gpu_group"].to_numpy(),
            "pool": pools,
            "time_s": ends["end_s"].to_numpy(),
            "running": 0,
            "kv_tokens": np.where(np.isin(pools, list(training)), 0.0, np.nan),
            "kv_capacity_tokens": engines.loc[ends["gpu_group"], "kv_capacity_tokens"].to_numpy(),
        }
    )
    both = pd.concat([extra, engine_stats[extra.columns]], ignore_index=True)
    both = both.sort_values(["engine", "time_s"], kind="stable").reset_index(drop=True)
    both["kv_tokens"] = both.groupby("engine")["kv_tokens"].ffill().fillna(0.0)
    return both


# size: one figure drawn top to bottom (lanes, bars, counters, step marks, legend); split, its parts
# would pass a dozen shared locals
def gantt(
    timeline: pd.DataFrame,
    steps: pd.DataFrame | None = None,
    engine_stats: pd.DataFrame | None = None,
    max_num_seqs: int | Mapping[str, int] | None = None,
    max_lanes: int = 64,
    title: str | None = None,
) -> Figure:
    """GPU activity: one lane per GPU group (engine or trainer), bars coloured by phase.

    Dashed lines mark step ends (warm-up shaded), dark ticks mark weight syncs. With `engine_stats`,
    an engine's bar is filled up to its running batch / max_num_seqs, so the long tail (a few
    sequences keeping a whole engine busy) shows as a thin sliver at the end of each step.
    """
    if timeline.empty:
        return empty_figure(title or "GPU activity", "no busy intervals recorded")
    lanes_all = _group_order(timeline, engine_stats)
    lanes = lanes_all[:max_lanes]
    shown = {g for _, g in lanes}
    lane = {g: i for i, (_, g) in enumerate(lanes)}
    t_end = float(timeline["end_s"].max())
    if steps is not None and not steps.empty:
        t_end = max(t_end, float(steps["end_s"].max()))
    scale, unit = time_unit(t_end)

    fig, ax = plt.subplots(figsize=(12, 0.34 * len(lanes) + 2.0))
    tl = timeline[timeline["gpu_group"].isin(shown)]
    occupancy = engine_stats is not None and not engine_stats.empty
    engines = set(engine_stats["engine"]) if occupancy else set()
    for (phase, g), rows in tl.groupby(["phase", "gpu_group"]):
        spans = list(zip(rows["start_s"] / scale, (rows["end_s"] - rows["start_s"]) / scale, strict=True))
        faded = phase == "generate" and g in engines  # the fill below shows the batch
        ax.broken_barh(
            spans,
            (lane[g] - 0.4, 0.8),
            facecolors=phase_color(str(phase)),
            alpha=0.3 if faded else 1.0,
            linewidth=0,
        )
    caps = []
    if occupancy:
        stats = closed_engine_stats(engine_stats[engine_stats["engine"].isin(shown)], tl)
        for eng, st in stats.groupby("engine"):
            cap = max_num_seqs.get(str(eng)) if isinstance(max_num_seqs, Mapping) else max_num_seqs
            cap = cap or max(int(engine_stats["running"].max()), 1)
            caps.append(cap)
            frac = np.clip(st["running"].to_numpy() / cap, 0, 1)
            base = lane[eng] + 0.4
            ax.fill_between(
                st["time_s"].to_numpy() / scale,
                base,
                base - 0.8 * frac,
                step="post",
                color=phase_color("generate"),
                linewidth=0,
                rasterized=len(stats) > 20_000,  # keep SVGs of long runs small
            )

    if steps is not None and not steps.empty:
        top = blended_transform_factory(ax.transData, ax.transAxes)
        if "warmup" in steps and steps["warmup"].astype(bool).any():
            w = steps[steps["warmup"].astype(bool)]
            ax.axvspan(
                w["start_s"].min() / scale, w["end_s"].max() / scale, color="#999999", alpha=0.12, lw=0
            )
            ax.text(
                w["start_s"].min() / scale,
                1.005,
                "warm-up",
                transform=top,
                fontsize=7,
                color="#555555",
                va="bottom",
            )
        for end in steps["end_s"]:
            ax.axvline(end / scale, color="black", lw=0.7, ls="--", alpha=0.55)
        every = max(1, int(np.ceil(len(steps) / 16)))
        for i, r in enumerate(steps.itertuples(index=False)):
            if i % every == 0 and not (getattr(r, "warmup", False)):
                ax.text(
                    (r.start_s + r.end_s) / 2 / scale,
                    1.005,
                    f"step {r.step}",
                    transform=top,
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    color="#333333",
                )
    syncs = tl[tl["phase"] == "sync"]
    if not syncs.empty:  # one mark per weight update on the top edge (the sync bars are in the lanes)
        starts = np.unique(np.round(syncs["start_s"].to_numpy() / scale, 6))
        ax.plot(
            starts,
            np.ones_like(starts),
            ls="",
            marker="v",
            color=phase_color("sync"),
            ms=5,
            zorder=5,
            clip_on=False,
            transform=blended_transform_factory(ax.transData, ax.transAxes),
        )

    labels = [g for _, g in lanes]
    ax.set_yticks(range(len(lanes)), labels, fontsize=8 if len(lanes) <= 24 else 6)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlim(0, t_end / scale * 1.01)
    pools = list(dict.fromkeys(p for p, _ in lanes))
    if len(pools) > 1:
        right = blended_transform_factory(ax.transAxes, ax.transData)
        for pool in pools:
            idx = [i for i, (p, _) in enumerate(lanes) if p == pool]
            if idx[0] > 0:
                ax.axhline(idx[0] - 0.5, color="#444444", lw=0.8)
            ax.text(
                1.005,
                (idx[0] + idx[-1]) / 2,
                f"pool {pool}",
                transform=right,
                rotation=-90,
                ha="left",
                va="center",
                fontsize=8,
            )
    ax.set_xlabel(f"simulated time ({unit})")
    ax.set_ylabel("GPU group")
    name = title or "GPU activity by group"
    if len(lanes_all) > len(lanes):
        name += f" (first {len(lanes)} of {len(lanes_all)} groups)"
    ax.set_title(name, pad=14)

    phases = phase_order(tl["phase"].unique())
    handles = []
    for p in phases:
        if p == "generate" and occupancy:
            handles.append(Patch(facecolor=phase_color(p), alpha=0.3, label="generate (engine busy)"))
            cap = f" ({caps[0]})" if caps and len(set(caps)) == 1 else ""
            handles.append(Patch(color=phase_color(p), label=f"decoding batch / max_num_seqs{cap}"))
        else:
            handles.append(Patch(color=phase_color(p), label=p))
    if steps is not None and not steps.empty:
        handles.append(Line2D([], [], color="black", ls="--", lw=0.8, label="step end"))
    if not syncs.empty:
        handles.append(Line2D([], [], color=phase_color("sync"), marker="v", ls="", label="weight sync"))
    height = fig.get_figheight()
    rows_needed = int(np.ceil(len(handles) / 8))
    fig.legend(
        handles=handles,
        loc="lower center",
        ncol=min(len(handles), 8),
        fontsize=8,
        frameon=False,
        borderaxespad=0.2,
    )
    fig.tight_layout(rect=(0, 0.22 * rows_needed / height, 1, 1))
    return fig


