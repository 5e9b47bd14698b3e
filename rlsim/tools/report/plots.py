"""Matplotlib figures from result tables. Functions take DataFrames and return Figures; callers save.

Every function also works on the tables read back from a run folder (`rlsim plot RUN_DIR`), so it
only relies on the contract columns (timeline, steps) and on samples.csv / engine_stats.csv when
present, and draws a readable "no data" panel rather than failing when a table is empty.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from rlsim.tools.report.gantt import closed_engine_stats, gantt, time_unit  # noqa: E402
from rlsim.tools.report.style import (  # noqa: E402
    IDLE_COLOR,
    PHASE_COLORS,
    TIMING_PHASE,
    apply_style,
    empty_figure,
    legend_outside,
    phase_color,
    phase_order,
    save_figure,
    timing_color,
)
from rlsim.tools.report.tables import RunTables, engine_seq_limits  # noqa: E402

__all__ = [  # re-exported: callers and tests import these from here
    "IDLE_COLOR", "PHASE_COLORS", "TIMING_PHASE", "RunTables", "closed_engine_stats", "engine_seq_limits", "gantt",
    "phase_color", "phase_order", "time_unit", "timing_color",
]


def _timing_columns(steps: pd.DataFrame) -> list[str]:
    """The phases of a step: `timing_s/<phase>`, not `timing_s/<phase>/<part>` (the parts of another phase, e.g. the
    hybrid engine's transition/wake, /gather, ... inside update_weights), which would count twice in a stack."""
    return [c for c in steps.columns if c.startswith("timing_s/") and c != "timing_s/step"
            and "/" not in c.removeprefix("timing_s/")]


def _measured(steps: pd.DataFrame) -> pd.DataFrame:
    if "warmup" in steps:
        m = steps[~steps["warmup"].astype(bool)]
        return m if not m.empty else steps
    return steps


def step_breakdown(steps: pd.DataFrame) -> Figure:
    """verl timing columns per step, stacked when they add up to the step and side by side when they
    overlap (asynchronous schedules); a black tick marks `timing_s/step`."""
    cols = _timing_columns(steps)
    if steps.empty or not cols:
        return empty_figure("Step time breakdown", "no step timings")
    fig, ax = plt.subplots(figsize=(max(6.0, min(14.0, 3 + 0.35 * len(steps))), 4.2))
    bottom = np.zeros(len(steps))
    x = steps["step"].to_numpy()
    warm = steps["warmup"].astype(bool).to_numpy() if "warmup" in steps else np.zeros(len(steps), bool)
    shown = [c for c in cols if steps[c].fillna(0.0).any()]
    total = steps[shown].fillna(0.0).sum(axis=1).to_numpy(dtype=float)
    # Phases that run at the same time (asynchronous schedules) are drawn side by side, never stacked:
    # a stack would claim a step longer than it was.
    overlap = "timing_s/step" in steps and bool((total > 1.01 * steps["timing_s/step"].to_numpy()).any())
    width = 0.8 / len(shown) if overlap and shown else 0.75
    for i, c in enumerate(shown):
        vals = steps[c].fillna(0.0).to_numpy(dtype=float)
        xs = x - 0.4 + width * (i + 0.5) if overlap else x
        bars = ax.bar(xs, vals, bottom=None if overlap else bottom, color=timing_color(c),
                      label=c.removeprefix("timing_s/"), width=width)
        for b, w in zip(bars, warm, strict=True):
            if w:
                b.set_alpha(0.4)
        if not overlap:
            bottom += vals
    if "timing_s/step" in steps:
        ax.scatter(x, steps["timing_s/step"], marker="_", s=300, color="black", zorder=5, label="step time")
    ax.set_xlabel("RL step" + (" (faded: warm-up)" if warm.any() else ""))
    ax.set_ylabel("seconds")
    ax.set_xticks(x if len(x) <= 30 else x[:: int(np.ceil(len(x) / 30))])
    measured = _measured(steps)
    title = "Step time breakdown" + (" (phases overlap: side by side)" if overlap else "")
    if "timing_s/step" in steps:
        title += f", mean step {measured['timing_s/step'].mean():.1f} s"
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def busy_by_pool(
    timeline: pd.DataFrame, steps: pd.DataFrame, pool_gpus: Mapping[str, int] | None = None
) -> pd.DataFrame:
    """Fraction of each pool's GPU-time per phase, plus `idle`, over the measured window (as metrics.py)."""
    from rlsim.sim.api import clip_to_window, measured_window

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
        return empty_figure("GPU time by pool", "no measured steps")
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
            legend_outside(ax, fontsize=8)
            fig.tight_layout()
            return fig
        return empty_figure(title, "no per-sample data")
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
        return empty_figure(title, "no per-sample data")
    start = steps.set_index("step")["start_s"]
    s = samples.assign(rel=samples["finished_s"] - samples["step"].map(start)).dropna(subset=["rel"])
    if s.empty:
        return empty_figure(title, "no finished samples")
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
        if len(step_ids) > 1:  # under the axes: right of them sit the twin axis' ticks and label
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=len(step_ids), fontsize=8,
                      markerscale=2.5, frameon=False)
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


# size: two stacked panels (batch and KV) sharing their time axis and engine colours
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
        return empty_figure(title, "no engine statistics")
    engine_stats = closed_engine_stats(engine_stats, timeline)
    # the whole run, not only up to the engines' last sample (the last training phase comes after it)
    ends = [float(engine_stats["time_s"].max())]
    ends += [float(t["end_s"].max()) for t in (steps, timeline) if t is not None and not t.empty and "end_s" in t]
    run_end = max(ends)
    scale, unit = time_unit(run_end)
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
    ax2.set_xlim(0, run_end / scale * 1.01)
    fig.tight_layout()
    return fig


def idle_by_step(
    timeline: pd.DataFrame, steps: pd.DataFrame, pool_gpus: Mapping[str, int] | None = None
) -> pd.DataFrame:
    """Idle share of each pool's GPU-time within each step's [start_s, end_s] (rows: steps, columns: pools).

    Busy GPU-seconds before t, B(t) = sum over intervals started before t of gpus x (min(t, end) - start), from
    cumulative sums over the sorted starts and ends: one pass for any number of steps."""
    if pool_gpus is None:
        pool_gpus = timeline.drop_duplicates("gpu_group").groupby("pool")["gpus"].sum().to_dict()
    t0, t1 = steps["start_s"].to_numpy(float), steps["end_s"].to_numpy(float)
    out = {}
    for pool, size in pool_gpus.items():
        rows = timeline[timeline["pool"] == pool]
        g = rows["gpus"].to_numpy(float)

        def busy_before(t, rows=rows, g=g):
            total = np.zeros_like(t)
            for col, sign in (("start_s", 1.0), ("end_s", -1.0)):
                x = rows[col].to_numpy(float)
                order = np.argsort(x, kind="stable")
                xs, gs = x[order], g[order]
                cg, cgx = np.concatenate([[0.0], np.cumsum(gs)]), np.concatenate([[0.0], np.cumsum(gs * xs)])
                k = np.searchsorted(xs, t, side="left")
                total += sign * (cg[k] * t - cgx[k])
            return total

        window = (t1 - t0) * size
        with np.errstate(invalid="ignore", divide="ignore"):
            share = 1.0 - (busy_before(t1) - busy_before(t0)) / window
        out[pool] = np.clip(np.where(window > 0, share, np.nan), 0.0, 1.0)
    return pd.DataFrame(out, index=steps["step"].to_numpy() if "step" in steps else None)


def step_series(
    steps: pd.DataFrame, timeline: pd.DataFrame, pool_gpus: Mapping[str, int] | None = None
) -> Figure:
    """Per step over the run: step time, staleness (mean and max of the step's samples) and idle per pool."""
    if steps.empty or "timing_s/step" not in steps:
        return empty_figure("Per-step series", "no steps")
    x = steps["step"].to_numpy() if "step" in steps else np.arange(len(steps))
    fig, axes = plt.subplots(3, 1, figsize=(10, 7.5), sharex=True)
    ax = axes[0]
    ax.plot(x, steps["timing_s/step"], lw=1.0, color="#1f77b4")
    ax.set_ylabel("step time (s)")
    ax.set_title("Per-step series over the run" + (" (grey: warm-up)" if "warmup" in steps else ""))
    ax = axes[1]
    if "staleness/mean" in steps and steps["staleness/mean"].notna().any():
        ax.plot(x, steps["staleness/mean"], lw=1.0, label="mean", color="#d62728")
        if "staleness/max" in steps:
            ax.plot(x, steps["staleness/max"], lw=0.8, ls="--", label="max", color="#ff9896")
        ax.legend(fontsize=8, frameon=False, loc="upper left")
    else:
        ax.text(0.5, 0.5, "no staleness recorded", ha="center", va="center", transform=ax.transAxes, fontsize=9)
    ax.set_ylabel("staleness (versions)")
    ax = axes[2]
    idle = idle_by_step(timeline, steps, pool_gpus) if not timeline.empty else pd.DataFrame()
    for pool in idle.columns:
        ax.plot(x, 100 * idle[pool].to_numpy(), lw=1.0, label=pool)
    if len(idle.columns):
        ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_ylabel("idle (% of pool GPU-time)")
    ax.set_xlabel("RL step")
    if "warmup" in steps and steps["warmup"].astype(bool).any():
        last = x[steps["warmup"].astype(bool).to_numpy()].max()
        for a in axes:
            a.axvspan(x.min() - 0.5, last + 0.5, color="#dddddd", alpha=0.5, lw=0)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- a run's tables, and saving


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
    "series": ("step_series", lambda t: step_series(t.steps, t.timeline, t.pool_gpus)),
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
        apply_style()
        paths.append(save_figure(make(tables), out / f"{stem}.{fmt}"))
    return paths


def save_default_plots(result, out_dir: Path) -> list[Path]:
    """Every plot of a fresh result as PNG (what `rlsim run` writes into the results folder)."""
    return save_plots(RunTables.from_result(result), out_dir)
