"""Engine scaling benchmark (issue: foundation): simulated cost must grow with sequences, not tokens.

8,192 requests (512 prompts x 16 samples) with lognormal responses (mean 3k, max 28k) on 32
engines, then every response length x4 (and, for contrast, x2 the requests). Prints a table of
median wall times over repeats and, last, `token_scaling_ratio: X` = wall(x4 lengths) / wall(x1).
Targets: X <= 1.3 and the x1 case under 2 s on a 2-core machine.

    python benchmarks/engine_scaling.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from rlsim.sim.scenario.loader import parse_scenario
from rlsim.sim.simulate import simulate


def scenario(length_scale: int, prompts: int = 512):
    # 32 H100 GPUs, TP1 engines of Qwen2.5-7B; AReaL-like batch 512 x 16 (docs/sources.md §7).
    return parse_scenario(
        {
            "name": f"engine-scaling-x{length_scale}",
            "seed": 1,
            "steps": 1,
            "cluster": {"pools": {"gen": {"hardware": "h100-sxm", "nodes": 4, "gpus_per_node": 8}}},
            "models": {"policy": {"preset": "qwen2.5-7b"}},
            "roles": {
                "rollout": {
                    "pool": "gen",
                    "model": "policy",
                    "parallel": {"tp": 1},
                    "engine": {"gpu_memory_utilization": 0.9, "max_num_seqs": 256},
                }
            },
            "algorithm": {"kind": "generate", "prompts_per_step": prompts, "samples_per_prompt": 16},
            "workload": {
                "prompt_length": {"kind": "uniform", "min": 128, "max": 1024},
                "response_length": {
                    "kind": "lognormal", "mean": 3000 * length_scale, "sigma": 1.0, "max": 28000 * length_scale,
                },
            },
            "schedule": {"kind": "generation-only"},
        },
        source="benchmark",
    )


def measure(scn, repeats: int) -> tuple[float, object]:
    walls, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = simulate(scn)
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls), result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cases = [("x1 lengths", scenario(1)), ("x4 lengths", scenario(4)), ("x2 requests", scenario(1, prompts=1024))]
    rows = []
    for label, scn in cases:
        wall, res = measure(scn, args.repeats)
        rows.append((label, res, wall))
    header = f"{'case':<12} {'requests':>8} {'mean resp':>10} {'sim s':>9} {'events':>8} {'preempt':>8} {'wall s':>8}"
    print(header)
    print("-" * len(header))
    for label, res, wall in rows:
        s = res.steps.iloc[0]
        print(
            f"{label:<12} {int(s['samples']):>8} {s['response_length/mean']:>10.0f}"
            f" {res.meta['simulated_time_s']:>9.1f} {res.meta['events']:>8} {int(s['preemptions']):>8} {wall:>8.3f}"
        )
    print(f"x1 wall (median of {args.repeats}): {rows[0][2]:.3f} s")
    print(f"request_scaling_ratio: {rows[2][2] / rows[0][2]:.2f}")
    print(f"token_scaling_ratio: {rows[1][2] / rows[0][2]:.2f}")


if __name__ == "__main__":
    main()
