"""Mean and 95% interval of summary metrics over seed replicates (Student's t, two-sided).

Replicates of one scenario differ only in the seed, so each summary metric is a sample of K
independent runs; the interval is mean ± t(0.975, K−1) · s / √K. Intervals need K ≥ 2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

# Two-sided 95% Student t quantiles t(0.975, df) for df = 1..30 (standard table values).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)


def t975(df: int) -> float:
    """t(0.975, df); beyond the table, 1.96 plus the large-df correction 2.4/df (error < 0.1%)."""
    if df < 1:
        raise ValueError(f"need at least 2 replicates for an interval, got df={df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df


def flat_metrics(summary: Mapping, prefix: str = "") -> dict[str, float]:
    """Numeric summary values, nested dicts flattened as `idle_fraction_by_pool/<pool>`."""
    out: dict[str, float] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_metrics(value, f"{name}/"))
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int | float) and math.isfinite(value):
            out[name] = float(value)
    return out


def mean_interval(replicates: pd.DataFrame) -> pd.DataFrame:
    """Per metric: n, mean, std, half-width of the 95% interval (NaN when n < 2), low, high."""
    n = replicates.notna().sum()
    mean, std = replicates.mean(), replicates.std(ddof=1)
    half = pd.Series(
        [t975(int(k) - 1) * s / math.sqrt(k) if k >= 2 else math.nan for k, s in zip(n, std, strict=True)],
        index=replicates.columns,
    )
    return pd.DataFrame({"n": n, "mean": mean, "std": std, "ci95": half, "low": mean - half, "high": mean + half})
