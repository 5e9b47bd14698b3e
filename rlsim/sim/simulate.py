"""`simulate(scenario) -> Result`: build the schedule, run the event loop, collect the tables.

The data path: scenario (placement resolved once, `rlsim.sim.scenario.placement`) -> schedule phases
(`rlsim.sim.schedules`) -> engines and cost functions -> run collector and GPU ledger on the environment
-> `Result`. `Result` is built from the collector and the ledger alone, never from schedule internals.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import pandas as pd

from rlsim.sim import aggregate
from rlsim.sim.engine.environment import ReferenceEnvironment, SimEnvironment, kernel_choice
from rlsim.sim.engine.gc_tuning import fewer_collections
from rlsim.sim.results.collector import MFU_PREFIX, SAMPLE_COLUMNS, TRAJECTORY_COLUMNS, RunCollector
from rlsim.sim.results.lifecycle import WASTED_OUTCOMES
from rlsim.sim.results.metrics import summarize
from rlsim.sim.scenario.schema import Scenario
from rlsim.sim.schedules import build_schedule
from rlsim.sim.schedules.base import SimulationStalled

__all__ = ["Result", "SimulationStalled", "simulate", "SAMPLE_COLUMNS"]


@dataclass
class Result:
    scenario: Scenario  # as resolved: the placement applied, the pools the summary and plots use
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


def _engine_stats(engines) -> pd.DataFrame:
    """One row per batch change of each engine, built by columns (a large run records millions of rows)."""
    columns = ["engine", "pool", "time_s", "running", "kv_tokens", "kv_capacity_tokens"]
    recorded = [e for e in engines if e.stats_columns is not None and e.stats_columns[0]]
    if not recorded:
        return pd.DataFrame([], columns=columns)
    rows = [len(e.stats_columns[0]) for e in recorded]

    def per_engine(values: list) -> np.ndarray:
        return np.repeat(np.array(values, dtype=object if isinstance(values[0], str) else None), rows)

    data = {"engine": per_engine([e.name for e in recorded]), "pool": per_engine([e.pool for e in recorded])}
    for name, i, dtype in (("time_s", 0, np.float64), ("running", 1, np.int64), ("kv_tokens", 2, np.int64)):
        # one typed pass over every engine's column: np.array would first look at every value to find the dtype
        data[name] = np.fromiter(chain.from_iterable(e.stats_columns[i] for e in recorded), dtype, sum(rows))
    data["kv_capacity_tokens"] = per_engine([e.kv_capacity for e in recorded])
    return pd.DataFrame(data, columns=columns)


def _resolved(scenario: Scenario) -> Scenario:
    """A scenario built in Python rather than loaded: apply its placement here (load_scenario already did)."""
    if not scenario.schedule.trains or scenario.schedule.placement == "custom":
        return scenario
    from rlsim.sim.scenario.errors import ScenarioError
    from rlsim.sim.scenario.placement import resolve_scenario

    resolved, problems = resolve_scenario(scenario)
    if problems:
        raise ScenarioError("<scenario>", problems)
    return resolved


def simulate(
    scenario: Scenario,
    seed: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    kernel: str | None = None,
) -> Result:
    """Run one scenario. Same scenario and seed give identical results, bit for bit.

    `progress(steps_done, total_steps)` is called each time an RL step completes (for progress bars).
    Raises SimulationStalled when no step can complete (the run would never end).
    `kernel`: "fast" (default) or "reference" (SimPy's public API only, same results; default: $RLSIM_KERNEL).
    """
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    scenario = _resolved(scenario)
    wall0 = time.perf_counter()
    env_class = ReferenceEnvironment if kernel_choice(kernel) == "reference" else SimEnvironment
    env = env_class(scenario.seed)
    plan, fallback = aggregate.plan(scenario) if scenario.simulation.mode == "aggregate" else (None, "")
    if plan is not None:  # a share of the rollout engines with the same share of the load (rlsim/sim/aggregate.py)
        env.load_scale = plan.factor
        schedule = build_schedule(plan.reduced, env)
        aggregate.attach(schedule, plan)
    else:
        schedule = build_schedule(scenario, env)
    total = scenario.warmup_steps + scenario.steps
    if progress is not None:
        env.collector.on_step = lambda done: progress(done, total)
    done = env.process(schedule.run())
    with fewer_collections():  # the loop and the tables allocate millions of objects
        env.run(until=done)
        collector: RunCollector = env.collector
        for engine in collector.engines:
            engine.close()
        result = _result(scenario, env, collector, wall0, plan.factor if plan is not None else 1)
    result.meta.update(aggregate.meta(plan, fallback, scenario.simulation.mode))
    return result


def _result(scenario: Scenario, env: SimEnvironment, collector: RunCollector, wall0: float, scale: int = 1) -> Result:
    """`scale` > 1: an aggregate run of 1/scale of the load, its counts scaled back (rlsim/sim/aggregate.py)."""
    steps = pd.DataFrame(collector.step_rows)
    timing = [c for c in steps.columns if c.startswith("timing_s/")]
    steps[timing] = steps[timing].fillna(0.0)  # a phase a step did not run (no weight sync this step) took 0 s
    mfu = [c for c in steps.columns if c.startswith(MFU_PREFIX)]
    steps[mfu] = steps[mfu].fillna(0.0)  # nor achieved any share of peak in it
    if scale > 1:
        steps = aggregate.scale_steps(steps, scale)
    timeline = env.ledger.to_frame()
    summary = summarize(scenario, steps, timeline, collector.staleness_values())
    summary.update(aggregate.scale_counts(collector.token_totals, scale) if scale > 1 else collector.token_totals)
    counts = collector.trajectory_counts()
    summary.update(aggregate.scale_counts(counts, scale) if scale > 1 else counts)
    samples = pd.DataFrame(collector.sample_rows(), columns=SAMPLE_COLUMNS)
    tools = collector.tool_runner.stats_frame().reset_index() if collector.tool_runner is not None else None
    if scale > 1:
        tools = aggregate.scale_tools(tools, scale)
    trajs = pd.DataFrame(collector.trajectory_rows, columns=TRAJECTORY_COLUMNS) if collector.trajectory_rows else None
    if trajs is not None:
        summary.update(_waste(trajs, timeline))
    summary.update(_efficiency(scenario, steps, timeline, collector.engines, samples))
    _require_finite(scenario, summary, steps)
    meta = {
        "seed": scenario.seed,
        "events": env.events_processed,
        "wall_time_s": time.perf_counter() - wall0,
        "simulated_time_s": env.now,
        # each engine's batch limit, as the engine holds it (lent and wide engines included): report plots read it
        "max_num_seqs": {e.name: e.max_num_seqs for e in collector.engines},
    }
    return Result(scenario, summary, steps, timeline, _engine_stats(collector.engines), meta, samples, tools, trajs)


def non_finite(values: dict, at: str = "") -> list[str]:
    """Dotted keys of a (nested) mapping whose number is NaN or infinite."""
    bad = []
    for key, value in values.items():
        if isinstance(value, dict):
            bad += non_finite(value, f"{at}{key}.")
        elif isinstance(value, float) and not math.isfinite(value):
            bad.append(f"{at}{key}")
    return bad


def _require_finite(scenario: Scenario, summary: dict, steps: pd.DataFrame) -> None:
    """No result leaves with inf or NaN in it: one line naming the scenario and the first such number."""
    bad = non_finite(summary)
    numeric = steps.select_dtypes("number")
    if not bad and numeric.size and not np.isfinite(numeric.to_numpy(float)).all():
        bad = [f"steps.{c}" for c in numeric.columns if not np.isfinite(numeric[c].to_numpy(float)).all()]
    if bad:
        from rlsim.sim.scenario.errors import Problem, ScenarioError

        raise ScenarioError(f"scenario {scenario.name!r}", [Problem(bad[0], (
            f"the simulation produced {summary.get(bad[0], 'inf or NaN')} ({len(bad)} number(s) in all): an input "
            "is beyond what can be simulated (look at its extreme bandwidths, sizes, efficiencies and lengths)"))])


def _efficiency(scenario: Scenario, steps: pd.DataFrame, timeline: pd.DataFrame, engines, samples) -> dict:
    """Tail share and MFU/MBU of RL runs (rlsim/sim/results/efficiency.py); none for generation-only runs."""
    from rlsim.sim.results.efficiency import efficiency
    from rlsim.sim.results.metrics import measured_window

    if not scenario.schedule.trains or steps.empty:
        return {}
    return efficiency(scenario, steps, timeline, _engine_stats(engines), samples, *measured_window(steps))


def _waste(trajs: pd.DataFrame, timeline: pd.DataFrame) -> dict:
    """GPU time spent on discarded work, attributed in proportion to the tokens each trajectory decoded."""
    gen = timeline[timeline["phase"] == "generate"]
    gen_gpu_s = float(((gen["end_s"] - gen["start_s"]) * gen["gpus"]).sum())
    decoded = float(trajs["generated_tokens"].sum())
    wasted = float(trajs.loc[trajs["outcome"].isin(WASTED_OUTCOMES), "generated_tokens"].sum())
    share = wasted / decoded if decoded else 0.0
    return {"wasted_generation_fraction": share, "wasted_generation_gpu_s": share * gen_gpu_s}
