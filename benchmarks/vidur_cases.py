"""Whole-process `rlsim run` on four Vidur-shaped serving cases (issue 17: start-up and output speed).

Each case is N requests of P prompt / D decode tokens on one A100-80GB with Llama-7B (Vidur's
default model and GPU), simulated by `rlsim run CASE.yaml --no-plots` in a fresh process, so the
time includes interpreter start-up, imports, validation, the simulation and writing the results
folder. Prints the median wall time over repeats, the in-process simulate() time, and the ratio to
Vidur's 17.6 s for the 1024 x 1024/1024 case (measured by the project's reviewer, issue 17; target:
>= 20x, i.e. <= 0.9 s on 2 cores).

    python benchmarks/vidur_cases.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

CASES = ((1024, 1024, 1024), (1024, 512, 2048), (4096, 1024, 1024), (256, 4096, 512))
VIDUR_1024_S = 17.6  # Vidur's own event loop on the 1024 x 1024/1024 case (issue 17)


def scenario(n: int, prompt: int, decode: int) -> dict:
    return {
        "name": f"vidur-{n}x{prompt}-{decode}",
        "seed": 0,
        "steps": 1,
        "cluster": {"pools": {"gen": {"hardware": "a100-80gb", "nodes": 1, "gpus_per_node": 1}}},
        "models": {"policy": {"preset": "llama-7b"}},
        "roles": {"rollout": {"pool": "gen", "model": "policy", "parallel": {"tp": 1},
                              "engine": {"gpu_memory_utilization": 0.9, "max_num_seqs": 128}}},
        "algorithm": {"kind": "generate", "prompts_per_step": n, "samples_per_prompt": 1},
        "workload": {"prompt_length": {"kind": "fixed", "value": prompt},
                     "response_length": {"kind": "fixed", "value": decode}},
        "schedule": {"kind": "generation-only"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rlsim = [sys.executable, "-m", "rlsim.tools.cli"]
    print(f"{'case':<24}{'rlsim run (s)':>15}{'simulate() (s)':>16}{'events':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for n, p, d in CASES:
            path = Path(tmp) / f"{n}-{p}-{d}.yaml"
            path.write_text(yaml.safe_dump(scenario(n, p, d)))
            walls = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                subprocess.run([*rlsim, "run", str(path), "--out", str(Path(tmp) / "out"), "--force", "-q"],
                               check=True, stdout=subprocess.DEVNULL)
                walls.append(time.perf_counter() - t0)
            from rlsim.sim.scenario.loader import load_scenario
            from rlsim.sim.simulate import simulate

            sims = []
            for _ in range(args.repeats):
                res = simulate(load_scenario(path))
                sims.append(res.meta["wall_time_s"])
            wall = statistics.median(walls)
            print(f"{n}x{p}/{d:<14}{wall:>15.2f}{statistics.median(sims):>16.3f}{res.meta['events']:>9}")
            if (n, p, d) == CASES[0]:
                first = wall
    print(f"vs Vidur on 1024 x 1024/1024: {VIDUR_1024_S / first:.1f}x faster (target >= 20x, <= 0.9 s)")


if __name__ == "__main__":
    main()
