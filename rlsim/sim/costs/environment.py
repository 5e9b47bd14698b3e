"""Environment (tool / sandbox / search API) costs: retry backoff, attempt outcomes, the worst case of a call.

Pure functions, so the SimPy side (rlsim/sim/engine/tools.py) only decides *when* things happen. The
latency of an attempt is drawn by the scenario's latency distribution itself (`sampler()` of the
*Seconds classes in rlsim/sim/scenario/schema/environments.py, through rlsim/sim/sampling.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Outcome = Literal["ok", "failed", "timeout"]


def attempt_outcome(latency_s: float, failed: bool, timeout_s: float | None) -> tuple[Outcome, float]:
    """(outcome, seconds the attempt holds its slot): a timeout cuts the attempt off at timeout_s.

    A timed-out attempt never gets to report its own failure, so the timeout wins over `failed`.
    """
    if timeout_s is not None and latency_s > timeout_s:
        return "timeout", timeout_s
    return ("failed" if failed else "ok"), latency_s


def backoff_delay(backoff_s: Sequence[float], attempt: int) -> float:
    """Wait after the `attempt`-th failed attempt (k >= 1 waits backoff_s[k-1], the last value repeating).

    ASearcher's search tool retries after 1, 2, 4 s; an empty list retries at once, attempt 0 waits 0.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    if attempt == 0 or not backoff_s:
        return 0.0
    return float(backoff_s[min(attempt, len(backoff_s)) - 1])
