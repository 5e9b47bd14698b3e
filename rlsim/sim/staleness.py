"""How far a sample's policy lags the trainer's, with its unit: weight versions or trainer steps.

The two differ as soon as weights move less often than every trainer step (`trigger_parameter_sync_step`,
verl V1's `parameter_sync_step` = k): k trainer steps make one weight version. AReaL's eta, verl V1's
`max_off_policy_threshold` and ROLL's alpha count weight versions (pushes of new weights to the engines);
NeMo-RL's `max_trajectory_age_steps` counts trainer steps. A bound and the age it is compared with are
both a `Staleness`, and comparing two of different units raises instead of answering.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


class StalenessUnit(Enum):
    VERSIONS = "weight versions"  # pushes of new weights to the rollout engines
    TRAINER_STEPS = "trainer steps"  # optimizer steps of the trainer (k of them per version)


VERSIONS, TRAINER_STEPS = StalenessUnit.VERSIONS, StalenessUnit.TRAINER_STEPS


@dataclass(frozen=True)
class Staleness:
    """An amount of staleness in one unit: a sample's age, or the bound it must stay within."""

    amount: float
    unit: StalenessUnit

    def _same_unit(self, other: Staleness) -> None:
        if not isinstance(other, Staleness) or other.unit is not self.unit:
            theirs = other.unit.value if isinstance(other, Staleness) else type(other).__name__
            raise TypeError(f"staleness in {self.unit.value} compared with staleness in {theirs}")

    def exceeds(self, bound: Staleness) -> bool:
        """Whether this age is beyond `bound` (same unit, or TypeError)."""
        self._same_unit(bound)
        return self.amount > bound.amount

    def batches_ahead(self, sync_every: int) -> int:
        """Trainer steps' worth of batches generation may finish ahead of the trainer at the start, under an
        admission bound of this size: eta + 1 versions of k steps each, or B + 1 trainer steps."""
        whole = math.floor(self.amount) + 1
        return whole * sync_every if self.unit is VERSIONS else whole

    def describe(self) -> str:
        return f"{self.amount:g} {self.unit.value}"
