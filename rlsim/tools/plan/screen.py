"""Three tiers of pruning for `rlsim plan`: analytic bounds, an aggregate-mode screen, exact simulation of the rest.

1. Bounds (bounds.py): a candidate whose best case (peak decode, peak FLOP/s) cannot meet a constraint or
   come within SCREEN_MARGIN of the best screened so far is never simulated.
2. Screen: the rest run the first rung in the simulator's aggregate mode (a share of the identical rollout
   engines with the same share of the load, `simulation.mode: aggregate`). A candidate is kept when its
   screened objective is within SCREEN_MARGIN of the best screened candidate that meets the constraints,
   and it misses no throughput floor or deadline (the target) by more than SCREEN_MARGIN: the aggregate
   mode is within a few % of the exact one (docs/usage.md), so 10% leaves room for it and for the noise of
   one measured step. Where a candidate's cluster has too few engines to share, the aggregate run falls back
   to exact: that evaluation is the exact one and is not run again.
3. Exact: the survivors run exactly, then successive halving as without pruning (search.py).

`--exact` (prune=False) turns all three off: every feasible candidate is simulated exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlsim.tools.plan.candidates import Candidate
from rlsim.tools.plan.space import Constraints, seconds_per_step

SCREEN_MARGIN = 0.10  # keep candidates within 10% of the best screened one, or of the target
# Rollout engines an aggregate screen simulates at least (the simulator's default is 16): a screen only needs
# to be within SCREEN_MARGIN, and 2 engines keep it within ~4% (measured: docs/planning.md); 1 engine runs exactly.
SCREEN_ENGINES = 2


@dataclass
class Pruning:
    """What each tier did: candidates bounded out, screened out, and simulated exactly (one line on screen)."""

    bounded: int = 0
    screened: int = 0
    exact: int = 0
    screened_exactly: int = 0  # screen runs that fell back to exact (reused as the exact evaluation)
    enabled: bool = True
    notes: list[str] = field(default_factory=list)

    def add(self, other: Pruning) -> None:
        self.bounded += other.bounded
        self.screened += other.screened
        self.exact += other.exact
        self.screened_exactly += other.screened_exactly

    def line(self) -> str:
        if not self.enabled:
            return f"pruning off (--exact): {self.exact} candidates simulated exactly"
        return (f"pruning: {self.bounded} bounded out (analytic), {self.screened} screened out (aggregate mode, "
                f"> {SCREEN_MARGIN:.0%} behind the best or the target), {self.exact} simulated exactly")


def aggregate_data(data: dict, engines: int = SCREEN_ENGINES) -> dict:
    """A candidate's scenario mapping in the aggregate mode (a scenario already aggregate keeps its own share)."""
    sim = dict(data.get("simulation") or {})
    if sim.get("mode") != "aggregate":
        sim.update(mode="aggregate", engines=engines)
    return {**data, "simulation": sim}


def relaxed(value: float, margin: float) -> float:
    """`value` moved `margin` towards worse, for a higher-is-better objective of either sign."""
    return value * (1 - margin) if value > 0 else value * (1 + margin)


def clearly_misses(summary: dict, c: Constraints, margin: float = SCREEN_MARGIN) -> str:
    """A throughput floor or deadline the screened result misses by more than `margin` (then exact would too)."""
    floor = c.min_throughput_tokens_per_s
    if floor is not None and summary["throughput_tokens_per_s"] < floor * (1 - margin):
        return (f"screen (aggregate mode): {summary['throughput_tokens_per_s']:,.0f} tokens/s, more than "
                f"{margin:.0%} under the minimum {floor:,.0f}")
    if c.deadline_hours is not None:
        hours = c.deadline_steps * seconds_per_step(summary) / 3600.0
        if hours > c.deadline_hours * (1 + margin):
            return (f"screen (aggregate mode): {c.deadline_steps} steps take {hours:.1f} h, more than "
                    f"{margin:.0%} over the deadline {c.deadline_hours:g} h")
    return ""


def clearly_meets(summary: dict, c: Constraints, margin: float = SCREEN_MARGIN) -> bool:
    """The screened result meets every constraint with `margin` to spare (its objective is a safe incumbent)."""
    if c.min_throughput_tokens_per_s is not None and \
            summary["throughput_tokens_per_s"] < c.min_throughput_tokens_per_s * (1 + margin):
        return False
    if c.deadline_hours is not None and \
            c.deadline_steps * seconds_per_step(summary) / 3600.0 > c.deadline_hours * (1 - margin):
        return False
    return not (c.max_staleness is not None and summary.get("staleness_max", 0.0) > c.max_staleness)


def incumbent(screened: list, constraints: Constraints, k: int = 1) -> float:
    """The k-th best screened objective among results that meet the constraints (-inf: none yet).

    No margin is needed on the constraints here: a candidate screened out against an incumbent trails it by
    more than SCREEN_MARGIN, so it could meet a floor exactly only if the incumbent's screen were off by
    more than SCREEN_MARGIN less the screen's own error (a few %)."""
    values = sorted((e.objective for e in screened if e.summary is not None and not math.isnan(e.objective)
                     and clearly_meets(e.summary, constraints, 0.0)), reverse=True)
    return values[k - 1] if len(values) >= k else -math.inf


def screen_out(screened: list, cands: dict[int, Candidate], constraints: Constraints,
               margin: float = SCREEN_MARGIN) -> list[int]:
    """The candidates (ids) the screen keeps; the others are marked `screened` with the reason."""
    best = incumbent(screened, constraints)
    bar = relaxed(best, margin) if math.isfinite(best) else -math.inf
    keep = []
    for e in screened:
        c = cands[e.candidate]
        if e.summary is None:  # a failure in the aggregate mode: let the exact run say why
            keep.append(e.candidate)
            continue
        why = clearly_misses(e.summary, constraints, margin)
        if not why and e.objective < bar:
            why = (f"screen (aggregate mode): objective {e.objective:,.4g}, more than {margin:.0%} behind the "
                   f"best screened {best:,.4g}")
        if why:
            c.status, c.reason = "screened", why
        else:
            keep.append(e.candidate)
    return keep
