"""`rlsim plan` speed: evaluated points per CPU-second and time to the final plan.

    python benchmarks/plan_speed.py            # HybridFlow's 15 placements, Llama-7B on 16 A100 (serial)
    python benchmarks/plan_speed.py --grid     # + every (model, GPUs) of the reproduction: same winners?
    python benchmarks/plan_speed.py --qwen     # + the README's Qwen2.5-32B H100-vs-H20 question (local, 2 workers)
    python benchmarks/plan_speed.py --screen   # + the 7B GRPO sizing over four GPU types: pruned vs --exact
    python benchmarks/plan_speed.py --scale    # + a 36-candidate plan at 1,024 GPUs: pruned vs --exact

--screen and --scale print one table: CPU-seconds (this process and its workers) and wall seconds of the pruned
and the exact run, what each pruning tier did, and whether the answers agree; with the load average, since
wall time on a shared machine says little. `--backend serial|local` (default local), `--workers N` (default 2).
"""

from __future__ import annotations

import argparse
import os
import resource
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


# The sizing of issue 40's acceptance: Qwen2.5-7B GRPO, 512 prompts x 16 responses up to 8k, over four GPU types.
SIZING_SETS = ("algorithm.prompts_per_step=512", "algorithm.samples_per_prompt=16", "algorithm.mini_batches=16",
               "workload.response_length.mean=2500", "workload.response_length.sigma=0.9",
               "workload.response_length.max=8192")
SIZING_GPUS = (("h100-sxm", 64), ("h20", 128), ("b200", 64), ("h200", 64))
# A 1,024-GPU plan: the same job with 4x the prompts (2,048 x 16 a step) on 1,024 H100, 36 candidates: colocated,
# and disaggregated at 50% and 75% generation (synchronous, one-step-off, fully async at staleness 1 and 2), each
# with generation TP 1, 2, 4 and 8.
SCALE_SETS = ("algorithm.prompts_per_step=2048", *SIZING_SETS[1:])
SCALE_SPACE = {
    "gpus": [{"hardware": "h100-sxm", "counts": [1024]}],
    "generation_fraction": [0.5, 0.75],
    "schedules": [{"kind": "hybridflow", "layouts": ["colocate", "disaggregated"]}, {"kind": "one-step-off"},
                  {"kind": "fully-async", "set": {"max_head_offpolicyness": [1, 2]}}],
    "parallel": {"generation_tp": [1, 2, 4, 8], "training": [{"tp": 1}]},
}


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (a local pool's workers, once shut down)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _timed(fn):
    cpu0, wall0 = _cpu(), time.perf_counter()
    out = fn()
    return out, _cpu() - cpu0, time.perf_counter() - wall0


def sizing_answers(prune: bool, backend: str, workers: int, out: Path):
    """{GPU type: (GPUs, layout)} of the acceptance sizing, and its pruning."""
    from rlsim.tools.plan.screen import Pruning
    from rlsim.tools.plan.sizing import parse_target, size_cluster

    sizings = size_cluster(shipped_dir("scenarios") / "quickstart.yaml", parse_target("tokens_per_s=50000"),
                           list(SIZING_GPUS), overrides=SIZING_SETS, backend=backend, workers=workers, prune=prune,
                           out=out)
    pruning = Pruning(enabled=prune)
    answers = {}
    for sz in sizings:
        pruning.add(sz.pruning)
        a = sz.answer
        answers[sz.hardware] = (a.gpus, a.candidates[a.ranking[0].candidate].label) if a else (None, "")
    return answers, pruning


def scale_answer(prune: bool, backend: str, workers: int, out: Path):
    """(winner label, its throughput, candidates) of the 1,024-GPU plan, and its pruning."""
    outcome = make_plan(shipped_dir("scenarios") / "quickstart.yaml", parse_space(SCALE_SPACE), out,
                        overrides=SCALE_SETS, backend=backend, workers=workers, prune=prune)
    r = outcome.result
    best = r.ranking[0]
    return (r.candidates[best.candidate].label, best.summary["throughput_tokens_per_s"], len(r.candidates)), \
        r.pruning


def compare(name: str, run, backend: str, workers: int) -> None:
    """Pruned, then exact: a table of CPU-s, wall, the pruning and whether the answers agree."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for prune in (True, False):
            (answer, pruning), cpu, wall = _timed(lambda p=prune: run(p, backend, workers, Path(tmp) / str(p)))
            rows.append((answer, pruning, cpu, wall))
    load = os.getloadavg()
    print(f"{name} (backend {backend}, {workers} workers; load average {load[0]:.1f} / {load[1]:.1f} / "
          f"{load[2]:.1f} on {os.cpu_count()} cores)")
    print(f"  {'mode':<8} {'CPU-s':>8} {'wall s':>8}  pruning")
    for (_, pruning, cpu, wall), mode in zip(rows, ("pruned", "exact"), strict=True):
        print(f"  {mode:<8} {cpu:8.1f} {wall:8.1f}  {pruning.line()}")
    (pruned, *_), (exact, *_) = rows
    print(f"  answers agree: {'yes' if pruned == exact else 'NO'}")
    for label, answer in (("pruned", pruned), ("exact", exact)):
        print(f"  {label}: {answer}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", action="store_true", help="the whole 4-model grid vs the reproduction")
    parser.add_argument("--qwen", action="store_true", help="the Qwen2.5-32B example (local backend)")
    parser.add_argument("--screen", action="store_true", help="the 7B GRPO sizing over four GPU types: pruned vs exact")
    parser.add_argument("--scale", action="store_true", help="a 36-candidate 1,024-GPU plan: pruned vs exact")
    parser.add_argument("--backend", default="local", choices=("serial", "local"))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.screen:
        compare("sizing: Qwen2.5-7B GRPO 512x16 to 50,000 tokens/s on H100, H20, B200, H200", sizing_answers,
                args.backend, args.workers)
    if args.scale:
        compare("plan: Qwen2.5-7B GRPO 2,048x16 on 1,024 H100, 36 candidates", scale_answer, args.backend,
                args.workers)
    if args.screen or args.scale:
        return
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
