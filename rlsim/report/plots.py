"""Matplotlib figures from result tables. Functions take DataFrames and return Figures; callers save."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

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
    "sync": "#8C8C8C",
    "switch": "#CCB974",
}


def phase_color(phase: str) -> str:
    return PHASE_COLORS.get(phase, "#64B5CD")


def gantt(timeline: pd.DataFrame, steps: pd.DataFrame | None = None, max_lanes: int = 48) -> Figure:
    """One lane per GPU group (engine or trainer), bars coloured by phase, dashed lines at step ends."""
    groups = list(dict.fromkeys(timeline.sort_values(["pool", "gpu_group"])["gpu_group"]))
    shown = groups[:max_lanes]
    fig, ax = plt.subplots(figsize=(11, 0.28 * len(shown) + 1.6))
    lane = {g: i for i, g in enumerate(shown)}
    for phase, rows in timeline[timeline["gpu_group"].isin(shown)].groupby("phase"):
        spans = list(zip(rows["start_s"], rows["end_s"] - rows["start_s"], strict=True))
        for g, (s, w) in zip(rows["gpu_group"], spans, strict=True):
            ax.broken_barh([(s, w)], (lane[g] - 0.4, 0.8), facecolors=phase_color(phase))
    if steps is not None:
        for end in steps["end_s"]:
            ax.axvline(end, color="black", lw=0.6, ls="--", alpha=0.6)
    ax.set_yticks(range(len(shown)), shown, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (s)")
    title = "GPU activity by group"
    if len(groups) > len(shown):
        title += f" (first {len(shown)} of {len(groups)} groups)"
    ax.set_title(title)
    phases = sorted(timeline["phase"].unique())
    ax.legend(handles=[Patch(color=phase_color(p), label=p) for p in phases], loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


def step_breakdown(steps: pd.DataFrame) -> Figure:
    """Stacked bars of the verl timing columns per step (gen, reward, old_log_prob, ...)."""
    cols = [c for c in steps.columns if c.startswith("timing_s/") and c != "timing_s/step"]
    fig, ax = plt.subplots(figsize=(8, 4))
    bottom = pd.Series(0.0, index=steps.index)
    for c in cols:
        vals = steps[c].fillna(0.0)
        ax.bar(steps["step"], vals, bottom=bottom, label=c.removeprefix("timing_s/"))
        bottom += vals
    ax.set_xlabel("RL step")
    ax.set_ylabel("seconds")
    ax.set_title("Step time breakdown")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def save_default_plots(result, out_dir: Path) -> list[Path]:
    out = Path(out_dir)
    paths = []
    figs = {"gantt.png": gantt(result.timeline, result.steps), "step_breakdown.png": step_breakdown(result.steps)}
    for name, fig in figs.items():
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
