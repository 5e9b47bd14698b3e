"""Hash every output table of every shipped run scenario: the bit-identity check for a speed-up.

A change meant to be pure speed must leave every result bit for bit. Run this before and after it and
diff the two JSON files (steps are capped at 2 so that every shipped scenario runs in seconds):

    python benchmarks/result_hashes.py before.json      # on the old commit (e.g. a git worktree)
    python benchmarks/result_hashes.py after.json
    diff before.json after.json && echo identical

`--kernel reference` runs them on the reference kernel (SimPy's public API only): the same file comes out.
The committed tests/golden/result_hashes.json is this script's output; tests/test_golden.py checks it.

Hashed: the summary, the steps, timeline, engine-stats, samples, tools and trajectories tables, and the
number of events the run took. Beside the hashes, a few headline numbers of the summary (`HEADLINE`, four
significant digits) make a regenerated file's diff say what moved and by how much.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import pandas as pd

from rlsim.sim.paths import shipped_dir
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.simulate import simulate

TABLES = ("steps", "timeline", "engine_stats", "samples", "tools", "trajectories")
HEADLINE = ("step_time_s", "throughput_tokens_per_s", "gpu_idle_fraction", "staleness_mean")


def run_scenarios() -> list[Path]:
    """The shipped run scenarios (not the sweep files nor the plan spaces)."""
    root = shipped_dir("scenarios")
    return [p for p in sorted(root.glob("*/*.yaml")) if p.parent.name not in ("plan", "sweeps")]


def result_hashes(path: Path, kernel: str | None = None) -> dict:
    scenario = load_scenario(path, [])
    if scenario.steps > 2:
        scenario = load_scenario(path, ["steps=2", f"warmup_steps={min(scenario.warmup_steps, 1)}"])
    return hash_result(simulate(scenario, kernel=kernel))


def hash_result(result) -> dict:
    """The hashes of one run's output tables and its event count."""
    hashes = {"summary": _sha(json.dumps(result.summary, sort_keys=True, default=str).encode())}
    for name in TABLES:
        table = getattr(result, name, None)
        if isinstance(table, pd.DataFrame):
            hashes[name] = _sha(pd.util.hash_pandas_object(table, index=True).values.tobytes())
    hashes["events"] = result.meta["events"]
    for key in HEADLINE:
        value = result.summary.get(key)
        if isinstance(value, int | float):
            hashes[key] = float(f"{value:.4g}")
    return hashes


def _sha(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="JSON file to write")
    parser.add_argument("--kernel", choices=("fast", "reference"), default=None, help="default: $RLSIM_KERNEL or fast")
    args = parser.parse_args()
    root = shipped_dir("scenarios")
    hashes = {str(p.relative_to(root)): result_hashes(p, args.kernel) for p in run_scenarios()}
    args.out.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    print(f"{len(hashes)} scenarios hashed into {args.out}")


if __name__ == "__main__":
    main()
