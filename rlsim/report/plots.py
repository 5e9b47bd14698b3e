"""Matplotlib figures from result tables. Functions take DataFrames and return Figures; callers save.

Every function also works on the tables read back from a run folder (`rlsim plot RUN_DIR`), so it
only relies on the contract columns (timeline, steps) and on samples.csv / engine_stats.csv when
present, and draws a readable "no data" panel rather than failing when a table is empty.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

PHASE_COLORS = {
    "generate": "#4C72B0",
    "reward": "#DD8452",
    "forward": "#55A868",
    "old_log_prob": "#55A868",
    "ref": "#8172B3",
    "values": "#937860",
    "train": "#C44E52",
    "update_actor": "#C44E52",
    "update_critic": "#DA8BC3",
    "sync": "#222222",
    "switch": "#CCB974",
    "env": "#64B5CD",
    "offload": "#CCB974",
    "onload": "#B8A94F",
}
# verl timing columns (steps.csv) to the ledger phase whose colour they share.
TIMING_PHASE = {
    "gen": "generate",
    "reward": "reward",
    "old_log_prob": "old_log_prob",
    "ref": "ref",
    "values": "values",
    "update_critic": "update_critic",
    "update_actor": "update_actor",
    "update_weights": "sync",
    "switch": "switch",
}
IDLE_COLOR = "#E6E6E6"
_FALLBACK = ["#64B5CD", "#A1C9F4", "#FFB482", "#8DE5A1", "#D0BBFF", "#DEBB9B", "#FAB0E4", "#B9F2F0"]


def phase_color(phase: str) -> str:
    """Fixed colour per phase so every plot (and every run) uses the same legend."""
    if phase in PHASE_COLORS:
        return PHASE_COLORS[phase]
    return _FALLBACK[sum(map(ord, phase)) % len(_FALLBACK)]


def phase_order(phases) -> list[str]:
    """Phases in pipeline order (generate, reward, forward passes, train, sync...), unknown ones last."""
    known = list(PHASE_COLORS)
    return sorted(set(phases), key=lambda p: (known.index(p) if p in known else len(known), p))


def timing_color(column: str) -> str:
    name = column.removeprefix("timing_s/")
    return phase_color(TIMING_PHASE.get(name, name))


def time_unit(t_max: float) -> tuple[float, str]:
    """Seconds for short runs, minutes or hours for long ones: axis numbers stay readable."""
    if t_max > 3 * 3600:
        return 3600.0, "h"
    if t_max > 20 * 60:
        return 60.0, "min"
    return 1.0, "s"


def _timing_columns(steps: pd.DataFrame) -> list[str]:
    return [c for c in steps.columns if c.startswith("timing_s/") and c != "timing_s/step"]


def _measured(steps: pd.DataFrame) -> pd.DataFrame:
    if "warmup" in steps:
        m = steps[~steps["warmup"].astype(bool)]
        return m if not m.empty else steps
    return steps


def _empty(title: str, message: str, figsize: tuple[float, float] = (8, 3)) -> Figure:
    fig, ax = plt.subplots(figsize=figsize)
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="#555555")
    ax.set_axis_off()
    ax.set_title(title)
    return fig


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
    plot would hold the final batch size until the next step starts.
    """
    if engine_stats is None or engine_stats.empty or timeline is None or timeline.empty:
        return engine_stats
    engines = engine_stats.drop_duplicates("engine").set_index("engine")
    ends = timeline[timeline["gpu_group"].isin(engines.index)][["gpu_group", "end_s"]]
    extra = pd.DataFrame(
        {
            "engine": ends["gpu_group"].to_numpy(),
            "pool": engines.loc[ends["gpu_group"], "pool"].to_numpy(),
            "time_s": ends["end_s"].to_numpy(),
            "running": 0,
            "kv_tokens": np.nan,
            "kv_capacity_tokens": engines.loc[ends["gpu_group"], "kv_capacity_tokens"].to_numpy(),
        }
    )
    both = pd.concat([extra, engine_stats[extra.columns]], ignore_index=True)
    both = both.sort_values(["engine", "time_s"], kind="stable").reset_index(drop=True)
    both["kv_tokens"] = both.groupby("engine")["kv_tokens"].ffill().fillna(0.0)
    return both


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
        return _empty(title or "GPU activity", "no busy intervals recorded")
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


def step_breakdown(steps: pd.DataFrame) -> Figure:
    """Stacked verl timing columns per step; a black tick marks `timing_s/step` (phases may overlap)."""
    cols = _timing_columns(steps)
    if steps.empty or not cols:
        return _empty("Step time breakdown", "no step timings")
    fig, ax = plt.subplots(figsize=(max(6.0, min(14.0, 3 + 0.35 * len(steps))), 4.2))
    bottom = np.zeros(len(steps))
    x = steps["step"].to_numpy()
    warm = steps["warmup"].astype(bool).to_numpy() if "warmup" in steps else np.zeros(len(steps), bool)
    for c in cols:
        vals = steps[c].fillna(0.0).to_numpy(dtype=float)
        if not vals.any():
            continue
        bars = ax.bar(
            x, vals, bottom=bottom, color=timing_color(c), label=c.removeprefix("timing_s/"), width=0.75
        )
        for b, w in zip(bars, warm, strict=True):
            if w:
                b.set_alpha(0.4)
        bottom += vals
    if "timing_s/step" in steps:
        ax.scatter(x, steps["timing_s/step"], marker="_", s=300, color="black", zorder=5, label="step time")
    ax.set_xlabel("RL step" + (" (faded: warm-up)" if warm.any() else ""))
    ax.set_ylabel("seconds")
    ax.set_xticks(x if len(x) <= 30 else x[:: int(np.ceil(len(x) / 30))])
    measured = _measured(steps)
    ax.set_title(
        f"Step time breakdown (mean step {measured['timing_s/step'].mean():.1f} s)"
        if "timing_s/step" in steps
        else "Step time breakdown"
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def busy_by_pool(
    timeline: pd.DataFrame, steps: pd.DataFrame, pool_gpus: Mapping[str, int] | None = None
) -> pd.DataFrame:
    """Fraction of each pool's GPU-time per phase, plus `idle`, over the measured window (as metrics.py)."""
    from rlsim.metrics import clip_to_window, measured_window

    if pool_gpus is None:  # only GPUs that some group uses: a pool's unused GPUs are unknown here
        groups = timeline.drop_duplicates("gpu_group")
        pool_gpus = groups.groupby("pool")["gpus"].sum().to_dict()
    if steps.empty:
        return pd.DataFrame(columns=["idle"])
    t0, t1 = measured_window(steps) if "warmup" in steps else (steps["start_s"].min(), steps["end_s"].max())
    window = t1 - t0
    busy = clip_to_window(timeline, t0, t1) if window > 0 else timeline.iloc[0:0].assign(gpu_seconds=0.0)
    table = busy.pivot_table(
        index="pool", columns="phase", values="gpu_seconds", aggfunc="sum", fill_value=0.0
    )
    table = table.reindex(list(pool_gpus), fill_value=0.0)
    cap = pd.Series(pool_gpus, dtype=float) * window
    frac = table.div(cap, axis=0).fillna(0.0)
    frac["idle"] = (1.0 - frac.sum(axis=1)).clip(lower=0.0)
    return frac


def idle_by_pool(
    timeline: pd.DataFrame, steps: pd.DataFrame, pool_gpus: Mapping[str, int] | None = None
) -> Figure:
    """Horizontal bars per pool: where its GPU-time goes, idle last (grey) and labelled."""
    frac = busy_by_pool(timeline, steps, pool_gpus)
    if frac.empty:
        return _empty("GPU time by pool", "no measured steps")
    gpus = (
        dict(pool_gpus) if pool_gpus else timeline.drop_duplicates("gpu_group").groupby("pool")["gpus"].sum()
    )
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(frac) + 1.6))
    left = np.zeros(len(frac))
    y = np.arange(len(frac))
    phases = phase_order(c for c in frac.columns if c != "idle") + ["idle"]
    for ph in phases:
        vals = frac[ph].to_numpy()
        color = IDLE_COLOR if ph == "idle" else phase_color(ph)
        ax.barh(
            y,
            vals,
            left=left,
            color=color,
            label=ph,
            height=0.6,
            edgecolor="#999999" if ph == "idle" else None,
            hatch="//" if ph == "idle" else None,
        )
        left += vals
    for i, idle in enumerate(frac["idle"]):
        ax.text(1.01, i, f"idle {idle:.1%}", va="center", fontsize=9)
    ax.set_yticks(y, [f"{p} ({int(gpus[p])} GPUs)" for p in frac.index])
    ax.set_ylim(len(frac) - 0.5, -0.5)
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.set_xlabel("share of the pool's GPU-time in the measured window")
    ax.set_title("Where GPU time goes, by pool")
    ax.legend(loc="upper left", bbox_to_anchor=(1.12, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def sample_staleness(samples: pd.DataFrame, steps: pd.DataFrame) -> pd.Series:
    """Per sample: the trainer version at the sample's step - the oldest policy version of its tokens."""
    if "staleness" in samples and samples["staleness"].notna().any():
        return samples["staleness"].dropna()
    if samples.empty or "oldest_version" not in samples:
        return pd.Series(dtype=float)
    trainer = (
        steps.set_index("step")["policy_version"] if "policy_version" in steps else pd.Series(dtype=float)
    )
    trained = samples["step"].map(trainer)
    return (trained - samples["oldest_version"]).dropna().clip(lower=0)


def staleness_hist(samples: pd.DataFrame, steps: pd.DataFrame) -> Figure:
    """Histogram of per-sample staleness (policy versions behind the trainer); 0 everywhere = on-policy."""
    title = "Sample staleness"
    st = sample_staleness(samples, steps)
    if st.empty:
        if "staleness/max" in steps and not steps.empty:
            fig, ax = plt.subplots(figsize=(7, 3.8))
            ax.bar(steps["step"], steps["staleness/mean"], color=phase_color("generate"), label="mean")
            ax.scatter(steps["step"], steps["staleness/max"], color="black", marker="_", s=200, label="max")
            ax.set_xlabel("RL step")
            ax.set_ylabel("policy versions behind")
            ax.set_title(f"{title} per step (no per-sample data)")
            ax.legend(fontsize=8)
            fig.tight_layout()
            return fig
        return _empty(title, "no per-sample data")
    values = st.astype(int)
    counts = values.value_counts().sort_index()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    xs = np.arange(0, int(counts.index.max()) + 1)
    ax.bar(xs, counts.reindex(xs, fill_value=0) / len(values), color=phase_color("generate"), width=0.8)
    ax.set_xticks(xs if len(xs) <= 20 else xs[:: int(np.ceil(len(xs) / 20))])
    ax.set_xlim(-0.6, max(xs[-1], 2) + 0.6)
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0, decimals=0))
    ax.set_xlabel("staleness (trainer version - oldest policy version of the sample's tokens)")
    ax.set_ylabel("share of samples")
    ax.set_title(f"{title}: mean {values.mean():.2f}, max {values.max()} ({len(values):,} samples)")
    if values.max() == 0:
        ax.text(
            0.98,
            0.9,
            "all samples on-policy\n(synchronous schedule)",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=9,
            color="#555555",
        )
    fig.tight_layout()
    return fig


def long_tail(samples: pd.DataFrame, steps: pd.DataFrame, max_points: int = 50_000) -> Figure:
    """Response length vs finish time within its step, with the share of samples done (the long tail)."""
    title = "Long tail: response length vs finish time"
    if samples.empty or "finished_s" not in samples or steps.empty:
        return _empty(title, "no per-sample data")
    start = steps.set_index("step")["start_s"]
    s = samples.assign(rel=samples["finished_s"] - samples["step"].map(start)).dropna(subset=["rel"])
    if s.empty:
        return _empty(title, "no finished samples")
    fig, ax = plt.subplots(figsize=(9, 4.5))
    shown = s.sample(max_points, random_state=0) if len(s) > max_points else s
    step_ids = sorted(s["step"].unique())
    if len(step_ids) <= 10:
        cmap = plt.get_cmap("tab10")
        for i, k in enumerate(step_ids):
            part = shown[shown["step"] == k]
            ax.scatter(
                part["rel"],
                part["response_tokens"],
                color=cmap(i),
                s=6,
                alpha=0.5,
                linewidths=0,
                rasterized=True,
                label=f"step {k}",
            )
        if len(step_ids) > 1:
            ax.legend(fontsize=8, loc="upper left", markerscale=2.5, frameon=False)
    else:
        sc = ax.scatter(
            shown["rel"],
            shown["response_tokens"],
            c=shown["step"],
            cmap="viridis",
            s=6,
            alpha=0.5,
            linewidths=0,
            rasterized=True,
        )
        cb = fig.colorbar(sc, ax=ax, pad=0.11)
        cb.set_label("RL step")
    ax.set_xlabel("finish time after the start of its step (s)")
    ax.set_ylabel("response tokens")
    ax2 = ax.twinx()
    rel = np.sort(s["rel"].to_numpy())
    ax2.plot(rel, np.arange(1, len(rel) + 1) / len(rel), color="#C44E52", lw=1.6)
    ax2.set_ylim(0, 1.02)
    ax2.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax2.set_ylabel("samples finished (all steps)", color="#C44E52")
    ax2.tick_params(axis="y", colors="#C44E52")
    p50, p90, p100 = np.quantile(rel, [0.5, 0.9, 1.0])
    for q, label in ((p50, "50%"), (p90, "90%"), (p100, "100%")):
        ax.axvline(q, color="#C44E52", lw=0.7, ls=":")
        ax.text(
            q,
            0.02,
            f" {label}: {q:.0f} s",
            transform=blended_transform_factory(ax.transData, ax.transAxes),
            ha="right" if label == "100%" else "left",
            va="bottom",
            fontsize=8,
            color="#C44E52",
        )
    ax.set_title(
        f"{title}\nhalf the samples finish by {p50:.0f} s, 90% by {p90:.0f} s, the last at {p100:.0f} s",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def engine_load(
    engine_stats: pd.DataFrame,
    steps: pd.DataFrame | None = None,
    max_num_seqs: int | Mapping[str, int] | None = None,
    timeline: pd.DataFrame | None = None,
    max_engines: int = 8,
) -> Figure:
    """Running batch and KV-cache use per engine over time (each engine its own line; many: the mean)."""
    title = "Inference engines over time"
    if engine_stats is None or engine_stats.empty:
        return _empty(title, "no engine statistics")
    engine_stats = closed_engine_stats(engine_stats, timeline)
    scale, unit = time_unit(float(engine_stats["time_s"].max()))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
    engines = list(dict.fromkeys(engine_stats["engine"]))
    many = len(engines) > max_engines
    cmap = plt.get_cmap("tab10")
    for i, (eng, st) in enumerate(engine_stats.groupby("engine", sort=False)):
        st = st.sort_values("time_s", kind="stable")
        t = st["time_s"].to_numpy() / scale
        kv = 100.0 * st["kv_tokens"].to_numpy() / st["kv_capacity_tokens"].to_numpy()
        kw = {"color": cmap(i % 10), "lw": 1.0, "rasterized": len(engine_stats) > 20_000}
        if many:
            kw.update(color="#999999", lw=0.5, alpha=0.5)
        ax1.step(t, st["running"], where="post", label=None if many else eng, **kw)
        ax2.step(t, kv, where="post", **kw)
    if many:  # mean over engines on a common grid
        grid = np.linspace(0, engine_stats["time_s"].max(), 2000)
        run_m, kv_m = np.zeros_like(grid), np.zeros_like(grid)
        for _, st in engine_stats.groupby("engine"):
            st = st.sort_values("time_s", kind="stable")
            idx = np.clip(np.searchsorted(st["time_s"].to_numpy(), grid, side="right") - 1, 0, None)
            run_m += st["running"].to_numpy()[idx]
            kv_m += (st["kv_tokens"] / st["kv_capacity_tokens"]).to_numpy()[idx]
        ax1.plot(
            grid / scale,
            run_m / len(engines),
            color=phase_color("generate"),
            lw=1.6,
            label=f"mean of {len(engines)} engines",
        )
        ax2.plot(grid / scale, 100 * kv_m / len(engines), color=phase_color("generate"), lw=1.6)
        ax1.plot([], [], color="#999999", lw=0.5, label="each engine")
    cap = None
    if isinstance(max_num_seqs, Mapping):
        caps = {max_num_seqs[e] for e in engines if e in max_num_seqs}
        cap = caps.pop() if len(caps) == 1 else None
    elif max_num_seqs:
        cap = max_num_seqs
    if cap:
        ax1.axhline(cap, color="black", ls=":", lw=0.8)
        ax1.text(
            0.995,
            cap,
            f"max_num_seqs = {cap}",
            va="bottom",
            ha="right",
            fontsize=8,
            transform=blended_transform_factory(ax1.transAxes, ax1.transData),
        )
        ax1.set_ylim(0, cap * 1.15)
    ax2.axhline(100, color="black", ls=":", lw=0.8)
    ax2.text(
        0.995,
        100,
        "KV capacity",
        va="bottom",
        ha="right",
        fontsize=8,
        transform=blended_transform_factory(ax2.transAxes, ax2.transData),
    )
    ax2.set_ylim(0, 110)
    if steps is not None and not steps.empty:
        for end in steps["end_s"]:
            for ax in (ax1, ax2):
                ax.axvline(end / scale, color="black", lw=0.6, ls="--", alpha=0.4)
    ax1.set_ylabel("running sequences")
    ax2.set_ylabel("KV cache used (%)")
    ax2.set_xlabel(f"simulated time ({unit})")
    ax1.set_title(title + ("" if steps is None or steps.empty else " (dashed: step ends)"))
    ax1.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax2.set_xlim(0, float(engine_stats["time_s"].max()) / scale * 1.01)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- a run's tables, and saving


@dataclass
class RunTables:
    """What the plots need, from a `Result` or read back from a run folder."""

    steps: pd.DataFrame
    timeline: pd.DataFrame
    engine_stats: pd.DataFrame = field(default_factory=pd.DataFrame)
    samples: pd.DataFrame = field(default_factory=pd.DataFrame)
    pool_gpus: dict[str, int] | None = None
    max_num_seqs: dict[str, int] | None = None
    name: str = ""

    @classmethod
    def from_result(cls, result) -> RunTables:
        scn = result.scenario
        return cls(
            steps=result.steps,
            timeline=result.timeline,
            engine_stats=result.engine_stats,
            samples=getattr(result, "samples", pd.DataFrame()),
            pool_gpus={n: p.gpus for n, p in scn.cluster.pools.items()},
            max_num_seqs=engine_seq_limits(scn, result.engine_stats),
            name=scn.name,
        )


def engine_seq_limits(scenario, engine_stats: pd.DataFrame) -> dict[str, int] | None:
    """max_num_seqs per engine, matching engine names `<role>-<i>` to the scenario's roles."""
    if engine_stats is None or engine_stats.empty:
        return None
    limits = {}
    for eng in dict.fromkeys(engine_stats["engine"]):
        engine = getattr(scenario.roles.get(str(eng).rpartition("-")[0]), "engine", None)
        if engine is not None and getattr(engine, "max_num_seqs", None):
            limits[str(eng)] = int(engine.max_num_seqs)
    return limits or None


PLOTS: dict[str, tuple[str, Callable[[RunTables], Figure]]] = {
    "gantt": (
        "gantt",
        lambda t: gantt(
            t.timeline,
            t.steps,
            t.engine_stats,
            t.max_num_seqs,
            title=f"GPU activity: {t.name}" if t.name else None,
        ),
    ),
    "breakdown": ("step_breakdown", lambda t: step_breakdown(t.steps)),
    "idle": ("idle_by_pool", lambda t: idle_by_pool(t.timeline, t.steps, t.pool_gpus)),
    "staleness": ("staleness", lambda t: staleness_hist(t.samples, t.steps)),
    "tail": ("long_tail", lambda t: long_tail(t.samples, t.steps)),
    "engines": ("engines", lambda t: engine_load(t.engine_stats, t.steps, t.max_num_seqs, t.timeline)),
}


def save_plots(
    tables: RunTables, out_dir: Path, kinds: list[str] | None = None, fmt: str = "png"
) -> list[Path]:
    """Render the chosen plot kinds (default all) and save them as `<name>.<fmt>` in out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for kind in kinds or list(PLOTS):
        stem, make = PLOTS[kind]
        fig = make(tables)
        path = out / f"{stem}.{fmt}"
        fig.savefig(path, dpi=110 if fmt == "png" else None)
        plt.close(fig)
        paths.append(path)
    return paths


def save_default_plots(result, out_dir: Path) -> list[Path]:
    """Every plot of a fresh result as PNG (what `rlsim run` writes into the results folder)."""
    return save_plots(RunTables.from_result(result), out_dir)
