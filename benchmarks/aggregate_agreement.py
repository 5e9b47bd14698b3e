"""Aggregate vs exact mode: how far the aggregate mode's answers are from the exact simulation's.

Runs shipped scenarios as shipped and scaled x8 by overrides (every pool's nodes, the prompts per step,
the asynchronous batch and concurrency caps and the tool pools' concurrency x8: the same load per GPU),
each in both modes (asynchronous ones warmed up to steady state, as `rlsim run` does: measured right after
one warm-up step, the pipeline's fill sets the step times, and it fills differently at 1/f of the
concurrency), and prints per case, each a mean over seeds, the relative differences of throughput and
mean step time, the largest difference of idle per pool (points), the relative difference of mean
staleness and of the synchronous step's generation phase (the slowest engine: `timing_s/gen` or
`timing_s/generate_async`), with the CPU seconds of each mode, and whether the case is within the
acceptance tolerances (TOLERANCE: throughput and step time 2%, idle 2 points, staleness 5%, the
synchronous tail 5%). A case the aggregate
mode does not cover says why and is skipped; the last line counts the covered cases within tolerance.

    python benchmarks/aggregate_agreement.py [--steps 3] [--seeds 1] [--scale 1 8] [--engines K] [--max-engines M]
        [scenario paths ...]   (default: every shipped run scenario but scenarios/scale, which are x8 scale-ups
        of shipped ones; --engines: simulation.engines, default the schedule family's)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from rlsim.sim import aggregate
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.scenario.placement import resolve_scenario
from rlsim.sim.simulate import simulate
from rlsim.tools.sweep.steady_state import steady_scenario

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_hashes import run_scenarios  # noqa: E402  (every shipped run scenario)

TOLERANCE = {"throughput": 0.02, "step": 0.02, "idle": 0.02, "staleness": 0.05, "tail": 0.05}
TAIL_COLUMNS = ("timing_s/gen", "timing_s/generate_async")


def scale_overrides(path, factor: int) -> list[str]:
    """Overrides multiplying a scenario's size by `factor` at the same load per GPU."""
    if factor == 1:
        return []
    scn = load_scenario(path)
    out = [f"cluster.pools.{name}.nodes={pool.nodes * factor}" for name, pool in scn.cluster.pools.items()]
    out.append(f"algorithm.prompts_per_step={scn.algorithm.prompts_per_step * factor}")
    for name in aggregate.BATCH_KNOBS:
        value = getattr(scn.schedule, name, None)
        if value is not None:
            out.append(f"schedule.{name}={value * factor}")
    for role_name, role in scn.roles.items():
        if role.gpus is not None:
            out.append(f"roles.{role_name}.gpus={role.gpus * factor}")
        if role.gpu_offset:
            out.append(f"roles.{role_name}.gpu_offset={role.gpu_offset * factor}")
    for name, pool in scn.environments.pools.items():
        out.append(f"environments.pools.{name}.concurrency={pool.concurrency * factor}")
    return out


def figures(res) -> dict:
    s, steps = res.summary, res.measured_steps
    tail = next((c for c in TAIL_COLUMNS if c in steps.columns), None)
    return {"throughput": s["throughput_tokens_per_s"], "step": s["step_time_s"],
            "idle": s.get("idle_fraction_by_pool", {}), "staleness": s.get("staleness_mean", 0.0),
            "tail": float(steps[tail].mean()) if tail else None}


def rel(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if b == 0:
        return 0.0 if a == 0 else float("inf")
    return (a - b) / b


def run(path, overrides: list[str], mode: str, seed: int) -> tuple[dict, float, dict]:
    scn = load_scenario(path, [*overrides, f"simulation.mode={mode}", f"seed={seed}"])
    scn, _ = steady_scenario(scn)  # asynchronous: warmed up past the pipeline's fill, as `rlsim run` does
    c0 = time.process_time()
    res = simulate(scn)
    return figures(res), time.process_time() - c0, res.meta


def within(out: dict) -> list[str]:
    """The figures outside their tolerance (none: the case agrees)."""
    return [k for k, tol in TOLERANCE.items() if out.get(k) is not None and abs(out[k]) > tol]


def compare(path, factor: int, steps: int, seeds: int, engines: int | None, max_engines: int | None = None
            ) -> dict | str:
    overrides = [*scale_overrides(path, factor), f"steps={steps}"]
    if engines is not None:
        overrides.append(f"simulation.engines={engines}")
    try:
        resolved, problems = resolve_scenario(load_scenario(path, overrides))
    except ScenarioError as err:  # a scale-up the scenario's own constraints refuse
        return f"does not load: {str(err).splitlines()[0]}"
    if problems:
        return f"does not resolve: {problems[0]}"
    plan, why = aggregate.plan(resolved)
    if plan is None:
        return f"not covered: {why}"
    if max_engines is not None and plan.engines > max_engines:
        return f"skipped: {plan.engines} rollout engines > --max-engines {max_engines} (the exact run's cost)"
    diffs: dict[str, list[float]] = {"throughput": [], "step": [], "staleness": [], "tail": []}
    idle: dict[str, list[float]] = {}  # per pool
    cpu = {"exact": 0.0, "aggregate": 0.0}
    for seed in range(seeds):
        exact, cpu_e, _ = run(path, overrides, "exact", seed)
        agg, cpu_a, _ = run(path, overrides, "aggregate", seed)
        cpu["exact"] += cpu_e
        cpu["aggregate"] += cpu_a
        for key in ("throughput", "step", "staleness", "tail"):
            d = rel(agg[key], exact[key])
            if d is not None:
                diffs[key].append(d)
        for pool in set(exact["idle"]) | set(agg["idle"]):
            idle.setdefault(pool, []).append(agg["idle"].get(pool, 0) - exact["idle"].get(pool, 0))
    mean = {k: float(np.mean(v)) if v else None for k, v in diffs.items()}
    # like the other figures, the mean difference over seeds (per pool; the largest in size), not the mean of each
    # seed's size: a seed's idle swings a point or two either way with which trajectories its few steps consume
    mean["idle"] = max((abs(float(np.mean(v))) for v in idle.values()), default=0.0)
    return {**mean, "factor": plan.factor, "engines": plan.engines, **cpu}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--scale", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--engines", type=int, default=None, help="simulation.engines of the aggregate runs")
    ap.add_argument("--max-engines", type=int, default=None, help="skip cases with more rollout engines")
    args = ap.parse_args()
    paths = args.paths or [p for p in run_scenarios() if p.parent.name != "scale"]  # scale/: x8 of a shipped one

    def pct(v):
        return "     -" if v is None else f"{100 * v:+6.1f}"

    header = (f"{'scenario':<44} {'x':>2} {'share':>7} {'tok/s %':>7} {'step %':>7} {'idle pt':>7} {'stale %':>7} "
              f"{'tail %':>7} {'cpu ex':>7} {'cpu agg':>7}  within")
    print(f"aggregate - exact, mean over {args.seeds} seed(s), {args.steps} measured steps")
    print(header)
    print("-" * len(header))
    passed, covered, misses = 0, 0, []
    for path in paths:
        for factor in args.scale:
            name = str(path).split("scenarios/")[-1].removesuffix(".yaml")
            out = compare(path, factor, args.steps, args.seeds, args.engines, args.max_engines)
            if isinstance(out, str):
                print(f"{name:<44} {factor:>2} {out}")
                continue
            share = f"1/{out['factor']}"
            off = within(out)
            covered += 1
            passed += not off
            if off:
                misses.append(f"{name} x{factor}: {', '.join(off)}")
            print(f"{name:<44} {factor:>2} {share:>7} {pct(out['throughput']):>7} {pct(out['step']):>7} "
                  f"{100 * out['idle']:>7.1f} {pct(out['staleness']):>7} {pct(out['tail']):>7} "
                  f"{out['exact']:>7.1f} {out['aggregate']:>7.1f}  {'yes' if not off else 'NO'}", flush=True)
    print(f"{passed} of {covered} covered cases within tolerance {TOLERANCE}")
    for line in misses:
        print(f"  outside: {line}")


if __name__ == "__main__":
    main()
