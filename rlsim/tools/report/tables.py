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
            max_num_seqs=engine_seq_limits(scn, result.engine_stats),
            name=scn.name,
        )


def engine_seq_limits(scenario, engine_stats: pd.DataFrame) -> dict[str, int] | None:
    """max_num_seqs per engine, matching engine names `<role>-<i>` to the scenario's roles."""
    if engine_stats is None or engine_stats.empty:
        return None
    limits = {}
    for eng in dict.fromkeys(engine_stats["engine"]):
        engine = getattr(scenario.roles.get(str(eng).rpartition("-")[0]), "engine", None)
        if engine is not None and getattr(engine, "max_num_seqs", None):
            limits[str(eng)] = int(engine.max_num_seqs)
    return limits or None
