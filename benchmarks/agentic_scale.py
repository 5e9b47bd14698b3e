"""Agentic fully-async event cost (issue 17 item 7): simulated seconds per wall second at 128 and 1,024 GPUs.

Two cases, both the shipped ASearcher-7B scenario (scenarios/agentic/asearcher-7b.yaml): as shipped
(96 rollout + 32 training H800), and scaled by overrides to 1,024 GPUs (768 + 256), with 8x the prompt
groups per step, rollouts in flight and tool-pool slots, so that every engine and tool sees the same
load as in the shipped run. Prints per case the medians over repeats of wall time, process CPU time,
sim-s per wall-s and per CPU-s, events and microseconds of wall time per event.

    python benchmarks/agentic_scale.py [--repeats 3] [--steps 2] [--case 128|1024] [--mode exact|aggregate]
        [--engines K]   (aggregate: rollout engines simulated at least, default the schedule's; prints peak memory)
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

from rlsim.sim.paths import shipped_dir
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.simulate import simulate

SCENARIO = shipped_dir("scenarios") / "agentic" / "asearcher-7b.yaml"
SCALE_1024 = [  # 8x the shipped 128 GPUs, every per-GPU load kept
    "cluster.pools.gen.nodes=96", "cluster.pools.train.nodes=32",
    "algorithm.prompts_per_step=1024", "schedule.consumer_batch_size=1024", "schedule.max_concurrent_rollouts=1024",
    "environments.pools.search_clients.concurrency=2560", "environments.pools.page_readers.concurrency=1280",
]


def case_overrides(case: str, steps: int | None, mode: str = "exact", engines: int | None = None) -> list[str]:
    overrides = list(SCALE_1024) if case == "1024" else []
    overrides.append(f"simulation.mode={mode}")
    if engines is not None:
        overrides.append(f"simulation.engines={engines}")
    if steps is not None:
        overrides.append(f"steps={steps}")
    return overrides


def measure(case: str, steps: int | None, repeats: int, mode: str = "exact", engines: int | None = None) -> dict:
    scn = load_scenario(SCENARIO, case_overrides(case, steps, mode, engines))
    walls, cpus, res = [], [], None
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        res = simulate(scn)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    sim, events = res.meta["simulated_time_s"], res.meta["events"]
    gpus = res.summary["num_gpus"]
    return {"case": f"{gpus} GPUs", "steps": len(res.steps), "sim_s": sim, "events": events, "wall_s": wall,
            "cpu_s": cpu, "sim_per_wall": sim / wall, "sim_per_cpu": sim / cpu, "us_per_event": wall / events * 1e6,
            "throughput": res.summary["throughput_tokens_per_s"], "step_time_s": res.summary["step_time_s"],
            "idle": res.summary["gpu_idle_fraction"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=None, help="measured steps (default: the scenario's, 5)")
    ap.add_argument("--case", choices=["128", "1024", "both"], default="both")
    ap.add_argument("--mode", choices=["exact", "aggregate"], default="exact")
    ap.add_argument("--engines", type=int, default=None,
                    help="aggregate mode: rollout engines simulated at least (default: the schedule's, 8 async)")
    args = ap.parse_args()
    cases = ["128", "1024"] if args.case == "both" else [args.case]
    steps = {"128": args.steps, "1024": args.steps if args.steps is not None else 2}
    rows = [measure(c, steps[c], args.repeats, args.mode, args.engines) for c in cases]
    print(f"medians of {args.repeats} runs, {args.mode} mode")
    header = (f"{'case':<10} {'steps':>5} {'sim s':>8} {'events':>9} {'wall s':>7} {'cpu s':>7} {'sim/wall':>9} "
              f"{'sim/cpu':>8} {'us/event':>9} {'tokens/s':>10} {'step s':>7} {'idle':>6}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['case']:<10} {r['steps']:>5} {r['sim_s']:>8.0f} {r['events']:>9} {r['wall_s']:>7.1f} "
              f"{r['cpu_s']:>7.1f} {r['sim_per_wall']:>9.1f} {r['sim_per_cpu']:>8.1f} {r['us_per_event']:>9.1f} "
              f"{r['throughput']:>10.0f} {r['step_time_s']:>7.1f} {r['idle']:>6.3f}")
    for r in rows:
        print(f"sim_s_per_wall_s_{r['case'].split()[0]}_gpus: {r['sim_per_wall']:.1f}")
    print(f"peak memory (max RSS): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
