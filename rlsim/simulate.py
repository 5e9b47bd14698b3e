"""`simulate(scenario) -> Result`: build the schedule, run the event loop, collect the tables."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from rlsim.engine.environment import SimEnvironment
from rlsim.metrics import summarize
from rlsim.scenario.schema import Scenario
from rlsim.schedules import build_schedule

SAMPLE_COLUMNS = [
    "sample_id", "step", "engine", "prompt_tokens", "response_tokens", "arrival_s", "admitted_s",
    "finished_s", "preemptions", "oldest_version", "newest_version", "staleness",
]


@dataclass
class Result:
    scenario: Scenario
    summary: dict
    steps: pd.DataFrame
    timeline: pd.DataFrame
    engine_stats: pd.DataFrame
    meta: dict = field(default_factory=dict)
    samples: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SAMPLE_COLUMNS))
    # Agentic runs: per-tool call statistics and one row per trajectory (turns, tokens, outcome).
    tools: pd.DataFrame | None = None
    trajectories: pd.DataFrame | None = None

    @property
    def measured_steps(self) -> pd.DataFrame:
        """The step rows the summary is computed from (warm-up steps left out)."""
        return self.steps[~self.steps["warmup"]]


def _samples(requests) -> pd.DataFrame:
    """One row per finished request (per-sample timing and policy versions: long tail, staleness)."""
    rows = [
        (
            r.rid, r.meta.get("step"), r.engine, r.prompt_tokens, r.generated, r.arrival_s, r.admitted_s,
            r.finished_s, r.preemptions, r.oldest_version, r.newest_version,
            # trainer version when trained - oldest token version (NaN: generated, not trained)
            r.meta["trained_version"] - r.oldest_version if "trained_version" in r.meta else float("nan"),
        )
        for r in requests
    ]
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)


class _ProgressRows(list):
    """The schedule's step rows, calling `progress(steps_done, total)` whenever a step is appended."""

    def __init__(self, rows, progress: Callable[[int, int], None], total: int):
        super().__init__(rows)
        self._progress = progress
        self._total = total

    def append(self, row) -> None:
        super().append(row)
        self._progress(len(self), self._total)

    def extend(self, rows) -> None:
        super().extend(rows)
        self._progress(len(self), self._total)


def _engine_stats(engines) -> pd.DataFrame:
    rows = [(e.name, e.pool, t, b, kv, e.kv_capacity) for e in engines for (t, b, kv) in (e.stats or [])]
    columns = ["engine", "pool", "time_s", "running", "kv_tokens", "kv_capacity_tokens"]
    return pd.DataFrame(rows, columns=columns)


def simulate(
    scenario: Scenario, seed: int | None = None, progress: Callable[[int, int], None] | None = None
) -> Result:
    """Run one scenario. Same scenario and seed give identical results, bit for bit.

    `progress(steps_done, total_steps)` is called each time an RL step completes (for progress bars).
    """
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    wall0 = time.perf_counter()
    env = SimEnvironment(scenario.seed)
    schedule = build_schedule(scenario, env)
    if progress is not None:
        schedule.step_rows = _ProgressRows(schedule.step_rows, progress, schedule.total_steps)
    done = env.process(schedule.run())
    env.run(until=done)
    for engine in [*schedule.engines, *getattr(schedule, "judges", [])]:
        engine.close()
    steps = pd.DataFrame(schedule.step_rows)
    timeline = env.ledger.to_frame()
    # Placement-resolved pools; per-sample staleness where the schedule tracks it.
    summary = summarize(schedule.scenario, steps, timeline, schedule.staleness_values)
    if hasattr(schedule, "token_accounting"):
        summary.update(schedule.token_accounting())
    elif hasattr(schedule, "outcome_counts"):
        summary.update(schedule.outcome_counts())
    meta = {
        "seed": scenario.seed,
        "events": env.events_processed,
        "wall_time_s": time.perf_counter() - wall0,
        "simulated_time_s": env.now,
    }
    frame = getattr(schedule, "sample_frame", None)
    samples = frame() if frame is not None else _samples(getattr(schedule, "requests_done", []))
    engines = [*schedule.engines, *getattr(schedule, "judges", [])]
    tools = schedule.tools.stats_frame().reset_index() if getattr(schedule, "tools", None) else None
    trajs = _trajectories(schedule)
    if trajs is not None:
        summary.update(_waste(trajs, timeline, summary))
    return Result(scenario, summary, steps, timeline, _engine_stats(engines), meta, samples, tools, trajs)


def _trajectories(schedule) -> pd.DataFrame | None:
    """One row per multi-turn trajectory: how far it got and how it ended."""
    samples = getattr(schedule, "samples_all", None)
    trajs = [s.trajectory for s in samples if s.trajectory is not None] if samples else list(
        getattr(schedule, "trajectories", []) or []
    )
    if not trajs:
        return None
    fates = {s.trajectory.tid: (s.fate, s.reason) for s in samples or [] if s.trajectory is not None}
    rows = []
    for t in trajs:
        fate, reason = fates.get(t.tid, (t.outcome, t.reason))
        rows.append((t.tid, t.engine, t.turns, t.turns_planned, t.tool_calls, t.prompt_tokens, t.generated,
                     t.observation_tokens, t.started_s, t.finished_s, fate or "aborted", reason or t.reason))
    return pd.DataFrame(rows, columns=["trajectory", "engine", "turns", "turns_planned", "tool_calls",
                                       "prompt_tokens", "generated_tokens", "observation_tokens", "started_s",
                                       "finished_s", "outcome", "reason"])


def _waste(trajs: pd.DataFrame, timeline: pd.DataFrame, summary: dict) -> dict:
    """GPU time spent on discarded work, attributed in proportion to the tokens each trajectory decoded."""
    gen = timeline[timeline["phase"] == "generate"]
    gen_gpu_s = float(((gen["end_s"] - gen["start_s"]) * gen["gpus"]).sum())
    decoded = float(trajs["generated_tokens"].sum())
    wasted = float(trajs.loc[trajs["outcome"].isin(["aborted", "failed", "dropped"]), "generated_tokens"].sum())
    share = wasted / decoded if decoded else 0.0
    return {"wasted_generation_fraction": share, "wasted_generation_gpu_s": share * gen_gpu_s}

