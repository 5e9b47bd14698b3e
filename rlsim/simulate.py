"""`simulate(scenario) -> Result`: build the schedule, run the event loop, collect the tables."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pandas as pd

from rlsim.engine.environment import SimEnvironment
from rlsim.metrics import summarize
from rlsim.scenario.schema import Scenario
from rlsim.schedules import build_schedule


@dataclass
class Result:
    scenario: Scenario
    summary: dict
    steps: pd.DataFrame
    timeline: pd.DataFrame
    engine_stats: pd.DataFrame
    meta: dict = field(default_factory=dict)


def _engine_stats(engines) -> pd.DataFrame:
    rows = [(e.name, e.pool, t, b, kv, e.kv_capacity) for e in engines for (t, b, kv) in (e.stats or [])]
    return pd.DataFrame(rows, columns=["engine", "pool", "time_s", "running", "kv_tokens", "kv_capacity_tokens"])


def simulate(scenario: Scenario, seed: int | None = None) -> Result:
    """Run one scenario. Same scenario and seed give identical results, bit for bit."""
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    wall0 = time.perf_counter()
    env = SimEnvironment(scenario.seed)
    schedule = build_schedule(scenario, env)
    done = env.process(schedule.run())
    env.run(until=done)
    for engine in schedule.engines:
        engine.close()
    steps = pd.DataFrame(schedule.step_rows)
    timeline = env.ledger.to_frame()
    summary = summarize(scenario, steps, timeline)
    meta = {
        "seed": scenario.seed,
        "events": env.events_processed,
        "wall_time_s": time.perf_counter() - wall0,
        "simulated_time_s": env.now,
    }
    return Result(scenario, summary, steps, timeline, _engine_stats(schedule.engines), meta)
