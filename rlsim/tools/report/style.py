"""One look for every figure rlsim draws, and one way to save them (PNG ≥ 200 dpi, SVG or PDF).

Figures call `apply_style()` (idempotent rcParams) before drawing and `save_figure()` to write.
`figure_format()` scopes the format for a block of code that saves figures by `.png` names it does
not own (the reproductions): inside it, `save_figure(fig, "x.png")` writes `x.svg`, say.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

FORMATS = ("png", "svg", "pdf")
PNG_DPI = 200
_FORMAT: ContextVar[str | None] = ContextVar("rlsim_figure_format", default=None)

STYLE = {
    "figure.dpi": 100,
    "savefig.dpi": PNG_DPI,
    "savefig.bbox": "tight",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "svg.fonttype": "none",  # text stays text in SVG: searchable, small
    "pdf.fonttype": 42,
}


# Fixed colour per phase, shared by every figure and every run.
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
    """The colour of a verl timing column (`timing_s/gen`) is its ledger phase's."""
    name = column.removeprefix("timing_s/")
    return phase_color(TIMING_PHASE.get(name, name))


def apply_style() -> None:
    """Set rlsim's rcParams (fonts, grid, spines, dpi); safe to call before every figure."""
    plt.rcParams.update(STYLE)


@contextmanager
def figure_format(fmt: str) -> Iterator[None]:
    """Within the block, `save_figure` writes `fmt` whatever suffix the caller gave."""
    if fmt not in FORMATS:
        raise ValueError(f"figure format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    token = _FORMAT.set(fmt)
    try:
        yield
    finally:
        _FORMAT.reset(token)


def figure_path(path: Path | str, fmt: str | None = None) -> Path:
    """`path` with the suffix of `fmt`, else of the enclosing `figure_format`, else its own."""
    path = Path(path)
    fmt = fmt or _FORMAT.get()
    return path.with_suffix(f".{fmt}") if fmt else path


def legend_outside(ax, **kwargs) -> None:
    """A legend to the right of the axes, never over the data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **kwargs)


def label_column(ax, points: list[tuple[float, float, str]], x_axes: float = 1.06) -> None:
    """Labels for points stacked in a column right of the axes, each joined to its point by a thin line.

    Used where labels would collide on the data (Pareto fronts): one row per label, never overlapping.
    """
    n = len(points)
    order = sorted(range(n), key=lambda i: points[i][1])  # bottom to top, as the points lie
    for slot, i in enumerate(order):
        x, y, text = points[i]
        ax.annotate(text, (x, y), xytext=(x_axes, 0.02 + 0.96 * (slot + 0.5) / max(n, 1)),
                    textcoords="axes fraction", fontsize="x-small", va="center", annotation_clip=False,
                    arrowprops={"arrowstyle": "-", "color": "0.55", "lw": 0.6})


def empty_figure(title: str, message: str, figsize: tuple[float, float] = (8, 3)) -> Figure:
    """A titled panel saying why there is nothing to draw (an empty table), instead of failing."""
    fig, ax = plt.subplots(figsize=figsize)
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="#555555")
    ax.set_axis_off()
    ax.set_title(title)
    return fig


def save_figure(fig: Figure, path: Path | str, fmt: str | None = None, close: bool = True) -> Path:
    """Write the figure (PNG at PNG_DPI; vector formats as vectors) and return the path written."""
    target = figure_path(path, fmt)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=PNG_DPI if target.suffix == ".png" else None, bbox_inches="tight")
    if close:
        plt.close(fig)
    return target
