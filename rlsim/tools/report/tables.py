"""RunTables: the tables a run's figures and reports are drawn from, from a Result or a results folder."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class RunTables:
    """What the plots need, from a `Result` or read back from a run folder."""

    steps: pd.DataFrame
    timeline: pd.DataFrame
    engine_stats: pd.DataFrame = field(default_factory=pd.DataFrame)
    samples: pd.DataFrame = field(default_factory=pd.DataFrame)
    pool_gpus: dict[str, int] | None = None
    max_num_seqs: dict[str, int] | None = None
    name: str = ""

    @classmethod
    def from_result(cls, result) -> RunTables:
        scn = result.scenario
        return cls(
            steps=result.steps,
            timeline=result.timeline,
            engine_stats=result.engine_stats,
            samples=getattr(result, "samples", pd.DataFrame()),
            pool_gpus={n: p.gpus for n, p in scn.cluster.pools.items()},
            max_num_seqs=engine_seq_limits(result.meta),
            name=scn.name,
        )


def engine_seq_limits(meta: dict) -> dict[str, int] | None:
    """max_num_seqs per engine, as each engine held it (a run's `meta`, or its meta.json read back)."""
    limits = meta.get("max_num_seqs") if isinstance(meta, dict) else None
    if not isinstance(limits, dict):
        return None  # written by an rlsim that did not record them: plots go without the limit
    return {str(k): int(v) for k, v in limits.items()} or None
