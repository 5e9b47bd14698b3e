"""`rlsim plan` speed: evaluated points per CPU-second and time to the final plan.

    python benchmarks/plan_speed.py            # HybridFlow's 15 placements, Llama-7B on 16 A100 (serial)
    python benchmarks/plan_speed.py --grid     # + every (model, GPUs) of the reproduction: same winners?
    python benchmarks/plan_speed.py --qwen     # + the README's Qwen2.5-32B H100-vs-H20 question (local, 2 workers)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rlsim.sim.paths import shipped_dir
from rlsim.tools.plan import enumerate_candidates, load_space, make_plan, parse_space, run_search
from rlsim.tools.reproduce import hybridflow_placement as hf


def hybridflow_search(model: str, gpus: int, layouts: list[str]) -> tuple[str, float, float, int]:
    """(winning layout, CPU-s, wall s, simulations) of one (model, GPUs) search, serially."""
    space = parse_space({
        "gpus": [{"hardware": "a100-80gb", "counts": [gpus]}],
        "schedules": [{"kind": "hybridflow", "layouts": layouts}],
        "parallel": {"generation_tp": list(hf.GEN_TP),
                     "training": [{"tp": 8, "pp": pp, "offload": o} for pp, o in hf.TRAIN_CONFIGS]},
        "search": {"rungs": [1]},
    })
    cpu0, wall0 = time.process_time(), time.perf_counter()
    cands = enumerate_candidates(hf.base_scenario(model), space)
    result = run_search(cands, "throughput", space.constraints, space.search)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    winner = result.candidates[result.ranking[0].candidate].knobs["layout"] if result.ranking else "none"
    return winner, cpu, wall, len(result.evaluations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="store_true", help="the whole 4-model grid vs the reproduction")
    parser.add_argument("--qwen", action="store_true", help="the Qwen2.5-32B example (local backend)")
    args = parser.parse_args()
    winner, cpu, wall, n = hybridflow_search("7b", 16, ["partitions"])
    print(f"HybridFlow 15 placements, llama-7b on 16 A100: winner {winner}; {n} simulations in {cpu:.2f} CPU-s "
          f"({n / cpu:.1f} points per CPU-second), {wall:.2f} s wall to the final plan")
    if args.grid:
        expected = hf.winners(hf.run_grid())
        same = 0
        for row in expected.itertuples():
            model = row.model.removeprefix("llama-")
            got, cpu, _, n = hybridflow_search(model, int(row.gpus), list(hf.PLACEMENTS))
            same += got == row.placement
            print(f"  {row.model} {row.gpus:>3} GPUs: reproduction {row.placement:<10} plan {got:<10} "
                  f"({n} simulations, {cpu:.2f} CPU-s)")
        print(f"grid: {same}/{len(expected)} winners match")
    if args.qwen:
        root = shipped_dir("scenarios") / "plan"
        with tempfile.TemporaryDirectory() as tmp:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            outcome = make_plan(root / "qwen32b-grpo-512x16.yaml", load_space(root / "qwen32b-grpo-h100-vs-h20.yaml"),
                                Path(tmp), backend="local", workers=2)
            wall = time.perf_counter() - wall0
        r = outcome.result
        best = r.candidates[r.ranking[0].candidate].label
        print(f"Qwen2.5-32B H100 vs H20: {best}; {len(r.evaluations)} simulations, {r.cpu_s:.1f} CPU-s "
              f"({len(r.evaluations) / r.cpu_s:.2f} points per CPU-second; driver {time.process_time() - cpu0:.1f} "
              f"CPU-s), {wall:.1f} s wall to the final plan")


if __name__ == "__main__":
    main()
