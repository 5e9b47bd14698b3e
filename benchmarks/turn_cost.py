"""Cost of one agentic generation turn on the shipped ASearcher-7B scenario, for one or more source trees.

Issue 17 measures its event-cost target per generation turn (the unit the event loop pays for), against
the commit where it was filed. Check out each commit in its own worktree (`git worktree add /tmp/old
f01189e`) and give the trees; each is imported from a fresh process with that tree first on `sys.path`.

Timed (default): CPU time of `simulate()` (min of `--runs` per sample), the trees alternated `--rounds`
times; prints each sample, then per tree the median and range, and the median and range of the
per-round ratio first tree / each other tree. This machine's timing drifts by 20% between phases, so
only alternated medians mean anything.

    python benchmarks/turn_cost.py /tmp/old . [--rounds 8] [--runs 3]

Instructions (`--instructions`, needs valgrind): `cachegrind --cache-sim=no` on `simulate()` with
`steps=1`, minus the same process without the call, divided by the run's generation turns. Deterministic
to ~0.1% with the hash seed fixed and OpenBLAS on one thread (valgrind counts its idle workers spinning);
`.pyc` files are compiled first so that no run pays for compiling.

    python benchmarks/turn_cost.py /tmp/old . --instructions
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

# Run in the child process: load the tree's own shipped scenario, simulate, print what the parent parses.
CHILD = """
import sys, time
root, mode, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, root)
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.simulate import simulate
scn = load_scenario(f"{root}/scenarios/agentic/asearcher-7b.yaml", ["steps=1"] if mode != "timed" else [])
if mode != "nosim":
    times = []
    for _ in range(runs):
        start = time.process_time()
        result = simulate(scn)
        times.append(time.process_time() - start)
    print("TURNS", int(result.trajectories["turns"].sum()), "CPU", min(times))
"""


def _env() -> dict:
    return {**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"}


def _child(root: Path, mode: str, runs: int = 1, valgrind: bool = False) -> tuple[int, float, int]:
    """(turns, min CPU seconds, instructions or 0) of one child process."""
    cmd = [sys.executable, "-c", CHILD, str(root), mode, str(runs)]
    if valgrind:
        cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, env=_env(), check=True)
    text = out.stdout + out.stderr
    turns = re.search(r"TURNS (\d+) CPU ([\d.]+)", text)
    refs = re.search(r"I\s+refs:\s+([\d,]+)", text)
    return (int(turns.group(1)) if turns else 0, float(turns.group(2)) if turns else 0.0,
            int(refs.group(1).replace(",", "")) if refs else 0)


def instructions(roots: list[Path]) -> None:
    if shutil.which("valgrind") is None:
        sys.exit("turn_cost.py --instructions needs valgrind on PATH")
    for root in roots:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "rlsim")], check=True)
        _, _, base = _child(root, "nosim", valgrind=True)
        turns, _, total = _child(root, "steps1", valgrind=True)
        print(f"{root}: {(total - base) / turns:,.0f} instructions per generation turn ({turns:,} turns, steps=1)")


def timed(roots: list[Path], rounds: int, runs: int) -> None:
    per_turn: list[list[float]] = [[] for _ in roots]  # by position: the same tree may be given twice
    for _ in range(rounds):
        for root, samples in zip(roots, per_turn, strict=True):
            turns, cpu, _ = _child(root, "timed", runs)
            samples.append(cpu / turns * 1e6)
            print(f"{root}: {samples[-1]:.1f} us per turn ({turns:,} turns, min of {runs})", flush=True)
    for i, (root, v) in enumerate(zip(roots, per_turn, strict=True)):
        print(f"{root}: median {statistics.median(v):.1f} us per turn, {min(v):.1f}-{max(v):.1f}")
        if i:
            ratios = [a / b for a, b in zip(per_turn[0], v, strict=True)]
            print(f"  {roots[0]} / {root}: median {statistics.median(ratios):.2f}x, "
                  f"{min(ratios):.2f}-{max(ratios):.2f}x over {rounds} rounds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="+", type=Path, help="source trees (repository roots), the baseline first")
    ap.add_argument("--instructions", action="store_true", help="count instructions under valgrind instead")
    ap.add_argument("--rounds", type=int, default=8, help="alternations (timed)")
    ap.add_argument("--runs", type=int, default=3, help="simulate() runs per sample, the minimum kept (timed)")
    args = ap.parse_args()
    roots = [t.resolve() for t in args.trees]
    if args.instructions:
        instructions(roots)
    else:
        timed(roots, args.rounds, args.runs)


if __name__ == "__main__":
    main()
