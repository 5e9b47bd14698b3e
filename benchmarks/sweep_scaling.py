"""Sweep scaling benchmark (issue 7): a 200-point sweep, serial vs the local process pool.

The quickstart scenario over prompts_per_step x samples_per_prompt (20 combinations) x 10 seeds, about
50 ms a point. Each backend writes a fresh result store; the tables must come out identical. Prints
median wall times over repeats and, last, `speedup: X` = median serial wall / median pool wall
(target >= 1.7 on 2 cores). Runs alternate backends so load from other processes hits both.

    python benchmarks/sweep_scaling.py [--repeats 3] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from rlsim.paths import shipped_dir
from rlsim.sweep import plan_sweep, run_sweep

GRID = ["algorithm.prompts_per_step=64,96,128,160,192", "algorithm.samples_per_prompt=4,6,8,10"]
SEEDS = 10


def timed_sweep(backend: str, workers: int | None) -> tuple[float, int, bytes]:
    """Plan and run the sweep into a fresh store, as `rlsim sweep` does: (wall s, points, results.csv)."""
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        plan = plan_sweep(shipped_dir("scenarios") / "quickstart.yaml", grid=GRID, seeds=SEEDS)
        outcome = run_sweep(plan, out, backend=backend, workers=workers)
        wall = time.perf_counter() - start
        assert outcome.ran == len(plan.points) and outcome.failed == 0
        return wall, outcome.ran, (Path(out) / "results.csv").read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    args = parser.parse_args()

    walls: dict[str, list[float]] = {"serial": [], "local": []}
    tables: dict[str, bytes] = {}
    points = 0
    for i in range(args.repeats):  # interleaved, alternating order: load bursts elsewhere hit both
        for backend in list(walls)[:: 1 if i % 2 == 0 else -1]:
            wall, points, table = timed_sweep(backend, args.workers)
            walls[backend].append(wall)
            tables[backend] = table
    assert tables["serial"] == tables["local"], "serial and process pool tables differ"

    print(f"{'backend':<24} {'points':>7} {'wall s':>8} {'points/s':>9}   (median of {args.repeats})")
    medians = {}
    for backend, samples in walls.items():
        medians[backend] = statistics.median(samples)
        label = backend if backend == "serial" else f"local ({args.workers} workers)"
        runs = ", ".join(f"{w:.2f}" for w in samples)
        rate = points / medians[backend]
        print(f"{label:<24} {points:>7} {medians[backend]:>8.2f} {rate:>9.1f}   [{runs}]")
    best = min(walls["serial"]) / min(walls["local"])
    print(f"speedup of the best runs: {best:.2f} (the least disturbed by other load on the machine)")
    print(f"speedup: {medians['serial'] / medians['local']:.2f}")


if __name__ == "__main__":
    main()
