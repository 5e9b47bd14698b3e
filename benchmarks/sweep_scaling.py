"""Sweep scaling benchmark (issue 7): a 200-point sweep, serial vs the local process pool.

The quickstart scenario over prompts_per_step x samples_per_prompt (20 combinations) x 10 seeds, about
50 ms a point. Each backend writes a fresh result store; the tables must come out identical. Prints
median wall times over repeats and, last, `speedup: X` = median serial wall / median pool wall
(target >= 1.7 on 2 cores). Runs alternate backends so load from other processes hits both; the
`others` column is the CPU (in cores) other processes on the machine used during each run (Linux),
so a pool run that shared its second core with someone else is visible as such.

    python benchmarks/sweep_scaling.py [--repeats 3] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

from rlsim.sim.paths import shipped_dir
from rlsim.tools.sweep import plan_sweep, run_sweep

GRID = ["algorithm.prompts_per_step=64,96,128,160,192", "algorithm.samples_per_prompt=4,6,8,10"]
SEEDS = 10


def _busy_cpu_s() -> float | None:
    """CPU seconds the whole machine has been busy (all processes), from /proc/stat; None elsewhere."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def timed_sweep(backend: str, workers: int | None) -> tuple[float, float | None, int, bytes]:
    """Plan and run the sweep into a fresh store, as `rlsim sweep` does.

    Returns (wall s, cores used by other processes meanwhile, points, results.csv).
    """
    with tempfile.TemporaryDirectory() as out:
        busy0, own0, start = _busy_cpu_s(), _own_cpu_s(), time.perf_counter()
        plan = plan_sweep(shipped_dir("scenarios") / "quickstart.yaml", grid=GRID, seeds=SEEDS)
        outcome = run_sweep(plan, out, backend=backend, workers=workers)
        wall = time.perf_counter() - start
        busy1, own1 = _busy_cpu_s(), _own_cpu_s()
        others = None if busy0 is None or busy1 is None else max(0.0, (busy1 - busy0 - (own1 - own0)) / wall)
        assert outcome.ran == len(plan.points) and outcome.failed == 0
        return wall, others, outcome.ran, (Path(out) / "results.csv").read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    args = parser.parse_args()

    runs: dict[str, list[tuple[float, float | None]]] = {"serial": [], "local": []}
    tables: dict[str, bytes] = {}
    points = 0
    for i in range(args.repeats):  # interleaved, alternating order: load bursts elsewhere hit both
        for backend in list(runs)[:: 1 if i % 2 == 0 else -1]:
            wall, others, points, table = timed_sweep(backend, args.workers)
            runs[backend].append((wall, others))
            tables[backend] = table
    assert tables["serial"] == tables["local"], "serial and process pool tables differ"

    print(f"{'backend':<20} {'points':>6} {'wall s':>7} {'points/s':>9}   runs: wall s (others' cores)")
    medians = {}
    for backend, samples in runs.items():
        medians[backend] = statistics.median(w for w, _ in samples)
        label = backend if backend == "serial" else f"local ({args.workers} workers)"
        detail = ", ".join(f"{w:.2f}" + ("" if o is None else f" ({o:.1f})") for w, o in samples)
        rate = points / medians[backend]
        print(f"{label:<20} {points:>6} {medians[backend]:>7.2f} {rate:>9.1f}   {detail}")
    best = min(w for w, _ in runs["serial"]) / min(w for w, _ in runs["local"])
    print(f"speedup of the best runs: {best:.2f} (the least disturbed by other load on the machine)")
    print(f"speedup: {medians['serial'] / medians['local']:.2f}")


if __name__ == "__main__":
    main()
