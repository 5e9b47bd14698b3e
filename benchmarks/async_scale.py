"""Wall time to simulate 100 fully-asynchronous steps of the AReaL 1.5B scenario (819,200 samples).

    python benchmarks/async_scale.py [--steps 100]
"""

from __future__ import annotations

import argparse
import time

from rlsim.sim.paths import shipped_dir
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.simulate import simulate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args()
    scn = load_scenario(shipped_dir("scenarios") / "async" / "areal-1.5b-h800.yaml",
                        [f"steps={args.steps}", "warmup_steps=0"])
    t0 = time.perf_counter()
    res = simulate(scn)
    wall = time.perf_counter() - t0
    sim = res.meta["simulated_time_s"]
    samples = int(res.steps["samples"].sum())
    print(f"{'scenario':<18} {'steps':>5} {'samples':>8} {'sim s':>9} {'events':>9} {'wall s':>7} {'sim s/wall s':>12}")
    print(f"{scn.name:<18} {len(res.steps):>5} {samples:>8} {sim:>9.0f} {res.meta['events']:>9} {wall:>7.1f} "
          f"{sim / wall:>12,.0f}")
    print(f"wall_s_{args.steps}_async_steps: {wall:.1f}")


if __name__ == "__main__":
    main()
