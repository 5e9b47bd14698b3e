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


def save_figure(fig: Figure, path: Path | str, fmt: str | None = None, close: bool = True) -> Path:
    """Write the figure (PNG at PNG_DPI; vector formats as vectors) and return the path written."""
    target = figure_path(path, fmt)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=PNG_DPI if target.suffix == ".png" else None, bbox_inches="tight")
    if close:
        plt.close(fig)
    return target
