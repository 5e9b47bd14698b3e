"""GpuLedger: who is busy when. One row per busy interval of a GPU group, labelled by phase.

A pool's GPUs can be booked at most once at any instant: `to_frame` refuses (OverbookedPool, an
internal error) a timeline in which more GPUs of a pool are busy at once than the pool has, so no
metric derived from it can count a GPU twice.

Every utilisation metric (idle fraction per pool, busy fraction per phase) and the timeline/trace
exports are derived from these rows, so they cannot disagree with each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

TIMELINE_COLUMNS = ["pool", "gpu_group", "role", "phase", "step", "policy_version", "start_s", "end_s", "gpus"]


class OverbookedPool(RuntimeError):
    """A schedule booked more GPUs of a pool at one instant than the pool has (a bug, never bad input)."""


@dataclass(frozen=True)
class GpuGroup:
    name: str
    pool: str
    gpus: int


class GpuLedger:
    def __init__(self) -> None:
        self.groups: dict[str, GpuGroup] = {}
        self.pool_gpus: dict[str, int] = {}
        self._rows: list[tuple] = []

    def add_pool(self, pool: str, gpus: int) -> None:
        self.pool_gpus[pool] = gpus

    def add_group(self, name: str, pool: str, gpus: int) -> GpuGroup:
        if name in self.groups:
            raise ValueError(f"GPU group {name!r} registered twice")
        group = GpuGroup(name, pool, gpus)
        self.groups[name] = group
        return group

    def record(
        self, group: str, role: str, phase: str, start_s: float, end_s: float, step: int, policy_version: int
    ) -> None:
        """Add one busy interval; empty intervals are dropped."""
        if end_s < start_s:
            raise ValueError(f"interval ends before it starts on {group}: {start_s} > {end_s}")
        if end_s == start_s:
            return
        g = self.groups[group]
        self._rows.append((g.pool, group, role, phase, step, policy_version, start_s, end_s, g.gpus))

    def __len__(self) -> int:
        return len(self._rows)

    def to_frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self._rows, columns=TIMELINE_COLUMNS)
        self.check_capacity(df)
        return df.sort_values(["start_s", "gpu_group"], kind="stable").reset_index(drop=True)

    def check_capacity(self, df: pd.DataFrame) -> None:
        """Raise OverbookedPool if any pool has more GPUs busy at one instant than it holds."""
        for pool, rows in df.groupby("pool", sort=False):
            size = self.pool_gpus.get(pool)
            if size is None:
                continue
            starts, ends = rows["start_s"].to_numpy(float), rows["end_s"].to_numpy(float)
            # An interval that ends where another starts does not overlap it (ends sort first); a
            # rounding error of a few ulps at a hand-over is not a double booking either.
            with np.errstate(invalid="ignore"):  # inf - inf: a non-finite run, refused after this
                ends = ends - 1e-9 * np.maximum(1.0, np.abs(ends))
            times = np.concatenate([ends, starts])
            deltas = np.concatenate([-rows["gpus"].to_numpy(), rows["gpus"].to_numpy()])
            order = np.lexsort((deltas, times))
            busy = np.cumsum(deltas[order])
            worst = int(np.argmax(busy))
            if busy[worst] > size:
                raise OverbookedPool(f"internal error: pool {pool!r} has {int(busy[worst])} GPUs busy at "
                                     f"t={times[order][worst]:.6g} s but holds {size}: a schedule booked "
                                     "GPUs twice")
