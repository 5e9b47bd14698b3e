"""How a summary number is shown in a table: one formatter per kind of metric, picked by its key.

Every terminal table (run summary, compare, sweep, Pareto front) formats through `show()`, so a
metric reads the same everywhere: seconds as `12.34 s`, fractions as `24.1%`, money as `$0.123`,
rates with thousands separators, and an optional 95% interval as `± x` in the same unit.
"""

from __future__ import annotations

import math


def metric_kind(key: str) -> str:
    """seconds, fraction, usd, rate, count or number, from the summary key's name."""
    grouped = ("idle_fraction_by_pool/", "busy_fraction_by_phase/", "critical_path_share_by_phase/",
               "tail_share_by_pool/")
    name = key.rsplit("/", 1)[0] if key.startswith(grouped) else key
    if "fraction" in name or "share" in name or key.startswith(("idle/", "busy/", "mfu_by_phase", "mbu_by_phase")):
        return "fraction"
    if "usd" in name or name.startswith("cost"):
        return "usd"
    if "per_s" in name:
        return "rate"
    if name.startswith("timing_s/") or name.endswith("_s") or name.endswith("_seconds"):
        return "seconds"
    if name in ("num_gpus", "steps", "staleness_max") or name.endswith(("_count", "_tokens")):
        return "count"
    return "number"


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: float, kind: str) -> str:
    if kind == "fraction":
        return "<0.1%" if 0 < abs(value) < 5e-4 else f"{value:.1%}"
    if kind == "usd":
        return f"${value:,.0f}" if abs(value) >= 100 else f"${value:,.3f}"
    if kind == "seconds":
        return f"{value:,.0f} s" if abs(value) >= 100 else f"{value:.2f} s"
    if kind == "count":
        return f"{value:,.0f}"
    if kind == "rate":
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) >= 1e-3 else f"{value:.2e}"


def _half_width(value: float, kind: str, of: float) -> str:
    """The interval's half-width at the precision of the value it belongs to."""
    if kind in ("rate", "number", "count"):
        return f"{value:,.0f}" if abs(of) >= 100 else f"{value:.2g}"
    text = _number(value, kind)
    return text.replace("$", "") if kind == "usd" else text.removesuffix(" s").replace("<0.1%", "0.0%")


def show(key: str, value: object, ci95: object = None) -> str:
    """`value` formatted for `key`'s kind; '-' where missing; `± ci95` when given and finite."""
    if not _finite(value):
        return "-" if value is None or isinstance(value, float) else str(value)
    kind = metric_kind(key)
    text = _number(float(value), kind)
    if _finite(ci95) and ci95 != 0:
        half = _half_width(float(ci95), kind, float(value))
        text = f"{text.removesuffix(' s')} ± {half} s" if kind == "seconds" else f"{text} ± {half}"
    return text
