"""GpuLedger: who is busy when. One row per busy interval of a GPU group, labelled by phase.

Every utilisation metric (idle fraction per pool, busy fraction per phase) and the timeline/trace
exports are derived from these rows, so they cannot disagree with each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

TIMELINE_COLUMNS = ["pool", "gpu_group", "role", "phase", "step", "policy_version", "start_s", "end_s", "gpus"]


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
        return df.sort_values(["start_s", "gpu_group"], kind="stable").reset_index(drop=True)
