"""Prefill/decode-disaggregated rollout against mixed engines on the same GPUs (docs/rollout-quantisation.md).

The case: scenarios/sync/grpo-pd-disagg.yaml (Qwen2.5-7B GRPO on one 8xH100 node, 128 prompts x 8 samples, four
TP2 vLLM engines) over prompt lengths (fixed) and mean response lengths (lognormal, sigma 0.8, clipped at 4x the
mean). Per cell, the generation phase of the one step after warm-up (`timing_s/gen`): the four engines mixed, and
split 1 prefill : 3 decode with the KV over NVLink, over RDMA and over PCIe. Ratio: mixed over the split on NVLink
(above 1: the split wins).

    PYTHONPATH=. python benchmarks/pd_disagg_sweep.py            # the table (about a minute)
    PYTHONPATH=. python benchmarks/pd_disagg_sweep.py --split 2:2
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios/sync/grpo-pd-disagg.yaml"
PROMPTS = (512, 2048, 8192)
RESPONSES = (256, 1024, 4096)


def gen_seconds(prompt: int, response: int, pd: str | None) -> float:
    """Generation seconds of the step after warm-up, with `pd` the disaggregation mapping (None: mixed engines)."""
    overrides = [
        "steps=2", "warmup_steps=1",
        f"workload.prompt_length={{kind: fixed, value: {prompt}}}",
        f"workload.response_length={{kind: lognormal, mean: {response}, sigma: 0.8, max: {4 * response}}}",
        f"roles.rollout.engine.disaggregation={pd or 'null'}",
        "roles.rollout.engine.max_num_batched_tokens=16384",  # room for the longest prompt in one chunk
    ]
    steps = simulate(load_scenario(SCENARIO, overrides)).steps
    return float(steps.loc[~steps["warmup"], "timing_s/gen"].mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="1:3", help="prefill:decode engines (of the four)")
    args = ap.parse_args()
    p, d = (int(x) for x in args.split.split(":"))
    links = ("nvlink", "rdma", "pcie")
    print(f"generation seconds per step, mixed (4 engines) vs split {p}:{d}")
    print(f"{'prompt':>7} {'response':>9} {'mixed':>8} " + " ".join(f"{k:>8}" for k in links) + f" {'mixed/nvl':>10}")
    for prompt in PROMPTS:
        for response in RESPONSES:
            mixed = gen_seconds(prompt, response, None)
            split = [gen_seconds(prompt, response, f"{{prefill_engines: {p}, decode_engines: {d}, kv_link: {k}}}")
                     for k in links]
            print(f"{prompt:>7} {response:>9} {mixed:>8.1f} " + " ".join(f"{s:>8.1f}" for s in split)
                  + f" {mixed / split[0]:>10.2f}")


if __name__ == "__main__":
    main()
