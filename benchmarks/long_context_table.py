"""What each long-context mechanism adds to the training side of one RL step (docs/long-context.md).

The case: Qwen2.5-7B GRPO on 8 H100 (one node), verl FSDP (dp 8), 64 prompts x 8 samples per step
with sequences (prompt + response) of mean 1k, 8k and 32k tokens (lognormal, sigma 0.5, seed 0,
clipped to 4x the mean), 4 PPO mini-batches, one epoch, forward passes for the old log-probs and
the reference, and the colocated train -> generate -> train transition (vLLM v1, TP2).

Each row adds one mechanism on top of the rows above it, so the rows sum to the full model.

    PYTHONPATH=. python benchmarks/long_context_table.py            # the 1k / 8k / 32k table
    PYTHONPATH=. python benchmarks/long_context_table.py --areal    # AReaL Fig. 5c, by mechanism (~5 min)
    PYTHONPATH=. python benchmarks/long_context_table.py --transition  # the colocated transition, 7B to 70B
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import replace

import numpy as np

from rlsim.sim.costs import long_context as lc
from rlsim.sim.costs.training import forward_pass_time, rank_busy, train_pass_time, update_plan
from rlsim.sim.costs.transition import TransitionSetup, to_generate, to_train
from rlsim.sim.hardware import load_profile
from rlsim.sim.model_shapes import ModelShape, resolve_preset

SEQUENCES = 64 * 8
# The operator-priced passes (costs/training_ops.py) before any mechanism term: linear layers, memory-bound
# operators, attention at FA2's efficiency, per-micro-batch and per-optimizer-step fixed costs.
BASE_ROW = "operators: GEMMs, memory-bound ops, attention (FA2), fixed costs"
LENGTHS = (1024, 8192, 32768)
DP, MINI_BATCHES = 8, 4


def _lengths(mean: int, seed: int = 0) -> np.ndarray:
    n = SEQUENCES
    sigma = 0.5
    mu = np.log(mean) - sigma**2 / 2
    return np.clip(np.random.default_rng(seed).lognormal(mu, sigma, n), 64, 4 * mean).astype(np.int64)


def _ideal_update(model, hw, lens, budget, opts) -> float:
    """update_actor as if every optimizer step's work were spread evenly over the ranks (no imbalance)."""
    total = 0.0
    for step in update_plan(len(lens), MINI_BATCHES, 1, DP, lens, True, "batch"):
        busy = [sum(rank_busy(True, hw.train_mfu, model, hw, lens[idx], 1, 1, budget, opts)) for idx in step]
        total += float(np.mean(busy))
    return total


def training_side(model, hw, lens, opts, *, scope="batch", clip=True, ideal=False) -> float:
    budget = max(16384, int(lens.max()))
    fwd_opts = [replace(opts, entropy=opts.logits is not None), opts]  # old log-prob (with entropy), ref
    fwd = sum(forward_pass_time(model, hw, lens, 1, 1, DP, budget, True, o) for o in fwd_opts)
    if ideal:
        return fwd + _ideal_update(model, hw, lens, budget, opts)
    upd = train_pass_time(model, hw, lens, 1, 1, DP, budget, MINI_BATCHES, 1, opts=opts, balance_scope=scope,
                          clip_grad_norm=clip, grad_bytes=4.0)
    return fwd + upd


def transition_seconds(model, hw) -> dict[str, float]:
    setup = TransitionSetup(
        model=model, hw=hw, sharding="fsdp", train_tp=1, train_pp=1, train_dp=DP, gen_tp=2, gpus_per_node=8,
        reshard="3d-hybrid-engine", engine_kind="vllm-v1", cuda_graphs=True, max_num_seqs=256,
        kv_pool_bytes_per_gpu=0.5 * hw.hbm_bytes - model.weight_bytes_total / 2 - 1e9, sleep_level=1, host_s=0.295,
    )
    parts = dict(to_generate(setup).items())
    for k, v in to_train(setup).items():
        parts[k] += v
    return parts


TRANSITION_CASES = (  # (label, preset, sharding, train tp, train dp, gen tp, GPUs per node)
    ("Qwen2.5-7B, FSDP on 8 GPUs -> TP2", "qwen2.5-7b", "fsdp", 1, 8, 2, 8),
    ("Qwen2.5-32B, FSDP on 16 GPUs (2 nodes) -> TP4", "qwen2.5-32b", "fsdp", 1, 16, 4, 8),
    ("Llama-3-70B, FSDP on 16 GPUs (2 nodes) -> TP8", "llama-3-70b", "fsdp", 1, 16, 8, 8),
    ("Llama-3-70B, Megatron TP8 x DP2 -> TP8", "llama-3-70b", "megatron", 8, 2, 8, 8),
)


def print_transitions() -> None:
    """The colocated transition by part, train -> generate -> train, on H100 (vLLM v1, sleep level 1)."""
    hw = load_profile("h100-sxm")
    names = ("wake", "gather", "load", "graphs", "host", "sleep")
    print("| case | " + " | ".join(names) + " | total s |")
    print("|---|" + "---:|" * (len(names) + 1))
    for label, preset, sharding, tp, dp, gen_tp, gpn in TRANSITION_CASES:
        model = ModelShape(**resolve_preset(preset))
        kv = 0.5 * hw.hbm_bytes - model.weight_bytes_total / gen_tp - 1e9
        setup = TransitionSetup(
            model=model, hw=hw, sharding=sharding, train_tp=tp, train_pp=1, train_dp=dp, gen_tp=gen_tp,
            gpus_per_node=gpn, reshard="3d-hybrid-engine", engine_kind="vllm-v1", cuda_graphs=True,
            max_num_seqs=256, kv_pool_bytes_per_gpu=kv, sleep_level=1, host_s=0.295,
        )
        parts = {k: a + b for (k, a), (_, b) in zip(to_generate(setup).items(), to_train(setup).items(), strict=True)}
        print(f"| {label} | " + " | ".join(f"{parts[n]:.2f}" for n in names) + f" | {sum(parts.values()):.2f} |")


def table() -> list[tuple[str, list[float]]]:
    model, hw = ModelShape(**resolve_preset("qwen2.5-7b")), load_profile("h100-sxm")
    full = lc.PassOptions(attention=True, logits="fused", recompute="full")
    steps = [
        (BASE_ROW, lc.PLAIN, dict(scope="batch", clip=False, ideal=True)),
        ("log-probs + entropy over 152k vocab", replace(full, recompute="none"), dict(clip=False, ideal=True)),
        ("activation recompute (full)", full, dict(clip=False, ideal=True)),
        ("DP-rank imbalance (slowest rank)", full, dict(clip=False)),
        ("clip_grad_norm (optimizer step)", full, dict(clip=True)),
    ]
    rows, prev = [], None
    for name, opts, kw in steps:
        vals = [training_side(model, hw, _lengths(n), opts, **kw) for n in LENGTHS]
        rows.append((name, vals if prev is None else [v - p for v, p in zip(vals, prev, strict=True)]))
        prev = vals
    trans = transition_seconds(model, hw)
    rows.append(("colocated transition (wake, gather, load, host, sleep)", [sum(trans.values())] * len(LENGTHS)))
    return rows


def print_table() -> None:
    rows = table()
    base = rows[0][1]
    head = " | ".join(f"{n // 1024}k: s | %" for n in LENGTHS)
    print(f"| mechanism | {head} |")
    print("|---|" + "---:|---:|" * len(LENGTHS))
    for name, vals in rows:
        cells = " | ".join(f"{v:.2f} | {'' if name == BASE_ROW else f'{100 * v / b:+.1f}%'}"
                           for v, b in zip(vals, base, strict=True))
        print(f"| {name} | {cells} |")
    totals = [sum(v[i] for _, v in rows) for i in range(len(LENGTHS))]
    print("| **total (training side + transition)** | " + " | ".join(
        f"**{t:.1f}** | **{100 * (t / b - 1):+.1f}%**" for t, b in zip(totals, base, strict=True)) + " |")


@contextlib.contextmanager
def _plain_passes():
    """Long-context costs on, but every pass priced without its mechanism terms: rank imbalance and clip alone."""
    from rlsim.sim.scenario.schema import TrainSpec

    real = TrainSpec.pass_options
    TrainSpec.pass_options = lambda self, phase, role: lc.PLAIN
    try:
        yield
    finally:
        TrainSpec.pass_options = real


def areal() -> None:
    """AReaL Fig. 5c at eta = 0 (published 128.7k tokens/s), adding one mechanism at a time."""
    from rlsim.sim.paths import shipped_dir
    from rlsim.sim.scenario.loader import load_scenario
    from rlsim.sim.simulate import simulate

    path = shipped_dir("scenarios") / "async" / "areal-1.5b-fig5c.yaml"
    plain = ["roles.actor.train.long_context_costs=false"]
    no_recompute = ["roles.actor.train.activation_recompute=none"]
    runs = [
        ("operators only (long_context_costs: false)", plain, ()),
        ("+ DP-rank imbalance per mini-batch, clip_grad_norm", [], (_plain_passes,)),
        ("+ log-probs over the vocabulary (fp32)", no_recompute, ()),
        ("+ activation recompute (full)", [], ()),
    ]
    print("| eta | mechanism | step s | old_log_prob + update_actor s | tok/s | x published |")
    print("|---|---|---:|---:|---:|---:|")
    for eta, published in ((0, 128.7e3), (None, 396.8e3)):
        # At eta = inf only the operators alone and the full model (the trainer sets the pace there).
        for name, overrides, patches in runs if eta == 0 else (runs[0], runs[-1]):
            with contextlib.ExitStack() as stack:
                for patch in patches:
                    stack.enter_context(patch())
                eta_set = f"schedule.max_head_offpolicyness={'null' if eta is None else eta}"
                res = simulate(load_scenario(path, [eta_set, *overrides]))
            s, steps = res.summary, res.steps
            train = float(steps["timing_s/update_actor"].mean() + steps["timing_s/old_log_prob"].mean())
            tps = s["throughput_tokens_per_s"]
            print(f"| {'inf' if eta is None else eta} | {name} | {s['step_time_s']:.0f} | {train:.0f} | "
                  f"{tps / 1e3:.1f}k | {tps / published:.2f} |", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--areal", action="store_true", help="AReaL Fig. 5c (eta = 0 and inf) by mechanism")
    ap.add_argument("--transition", action="store_true", help="the colocated transition by part, 7B to 70B")
    args = ap.parse_args()
    (areal if args.areal else print_transitions if args.transition else print_table)()
