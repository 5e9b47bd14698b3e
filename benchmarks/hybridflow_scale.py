"""Wall time to simulate 10 PPO steps of Llama-70B colocated on 128 A100s (HybridFlow setup).

Uses the configuration the placement reproduction picks for that point (training tp8 x pp4, t_g=8).

    python benchmarks/hybridflow_scale.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from rlsim.sim.scenario.loader import parse_scenario
from rlsim.sim.simulate import simulate
from rlsim.tools.reproduce.hybridflow_placement import base_scenario, configure


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    data = configure(base_scenario("70b"), 128, "colocate", pp=4, offload="none", gen_tp=8, steps=10)
    scn = parse_scenario(data, source="benchmark")
    walls, res = [], None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        res = simulate(scn)
        walls.append(time.perf_counter() - t0)
    wall = statistics.median(walls)
    print(f"{'scenario':<34} {'steps':>5} {'sim s':>9} {'events':>7} {'wall s':>7} {'sim s / wall s':>14}")
    sim = res.meta["simulated_time_s"]
    print(f"{scn.name:<34} {len(res.steps):>5} {sim:>9.1f} {res.meta['events']:>7} {wall:>7.3f} {sim / wall:>14,.0f}")
    print(f"wall_s_10_steps_70b_128gpu: {wall:.3f}")


if __name__ == "__main__":
    main()
