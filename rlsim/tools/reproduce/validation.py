"""Every published number a shipped scenario models, against rlsim, and the qualitative findings.

`rlsim reproduce validation --out DIR` writes DIR/table.csv (name, source, status, published,
simulated, error_pct, tolerance_pct, within) and DIR/findings.csv (name, source, expected, simulated,
passed). Each row is `fitted` (it set a constant: it cannot validate it) or `predicted` (nothing was
fitted to it). The headline median and max |error| are over predicted rows only. Published bounds
("mostly < 300 ms", "flat") are findings, scored pass/fail, never as a point error.

`REGRESSION_GUARD_PCT` pins each predicted row family's |error| where it stands today (a test fails
if any row drifts past it); the 15% target is reported apart, so a guard is not a pass.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rlsim.sim.api import load_profile, load_scenario, shipped_dir, simulate
from rlsim.tools.calibration.measurements import predict, read_measurements

TARGET_PCT = 15.0
# |error| a predicted row may reach before tests/test_validation.py fails: today's miss plus a margin,
# per family (name prefix). Lower these as the model improves; never raise one to hide a regression.
REGRESSION_GUARD_PCT = {
    "AReaL 1.5B generation per GPU": 20.0,
    "AReaL 1.5B throughput eta": 15.0,
    # The causal attention FLOP count (turn 3) took this row from -24% to -27%: the run implies more
    # tokens than the scenario's (docs/sources.md §6), and shorter passes move it further off.
    "verl Megatron sync timing_s/old_log_prob": 30.0,
    "verl": 24.0,
    "llama-13b generation latency cut": 6.0,
    "HybridFlow": 8.0,
    "Frontier Llama-2-7B H800 linear layers, 128 tokens": 7.0,
    "Frontier": 25.0,
    "SGLang": 16.0,
}


def _guard(name: str) -> float:
    for prefix, pct in REGRESSION_GUARD_PCT.items():
        if name.startswith(prefix):
            return pct
    return TARGET_PCT


def nim_rows() -> list[dict]:
    """NIM ITL vs concurrency (docs/sources.md §2): the H100 profile is fitted to these."""
    path = shipped_dir("hardware_profiles") / "measurements" / "nim_llama33_70b_fp8_h100.csv"
    profile = load_profile("h100-sxm")
    rows = []
    for m in read_measurements(path):
        sim = predict(m, profile)
        rows.append({"name": f"NIM Llama-3.3-70B FP8 TP2 ITL at concurrency {m.batch} (fitted)",
                     "source": "docs/sources.md §2", "published": m.seconds, "simulated": sim})
    return rows


def hybridflow_rows() -> tuple[list[dict], pd.DataFrame]:
    from rlsim.tools.reproduce.hybridflow_placement import actor_share_row, findings, generation_tp_rows, run_grid

    tp = generation_tp_rows()
    rows = [{"name": r.name, "source": r.source, "published": r.published, "simulated": r.simulated}
            for r in tp.itertuples()]
    grid = run_grid()
    share = actor_share_row(grid)
    rows.append({k: share[k] for k in ("name", "source", "published", "simulated")})
    split = grid[(grid["placement"] == "split") & grid["feasible"]]
    idle = float(split["gpu_idle_fraction"].mean())
    # "Roughly a third" is a published bound, not a point: it holds when the idle share is nearer 1/3 than
    # the neighbouring simple fractions 1/4 and 1/2, i.e. within [7/24, 5/12].
    low, high = (1 / 4 + 1 / 3) / 2, (1 / 3 + 1 / 2) / 2
    idle_bound = pd.DataFrame([{
        "name": "HybridFlow GPU idle with actor and critic on separate GPUs (split, mean of the grid)",
        "source": "docs/sources.md §5 (HybridFlow)", "expected": f"about 1/3 (scored {low:.3f}-{high:.3f})",
        "simulated": f"{idle:.3f}", "passed": low <= idle <= high}])
    return rows, pd.concat([findings(grid), idle_bound], ignore_index=True)


def decode_shape_rows() -> list[dict]:
    """Per-operator profiles: how the linear layers' time grows with batch (ratios to 1 token).

    The smooth-roofline form was chosen on Vidur's A100 profile (fitted); Frontier's H800 profile
    was not looked at when choosing it (predicted).
    """
    from rlsim.sim.api import ModelShape, resolve_preset
    from rlsim.sim.costs.generation import linear_layers_time

    rows = []
    a100, h800 = load_profile("a100-80gb"), load_profile("h800")
    l3 = ModelShape(**resolve_preset("llama-3-8b"))
    for tokens, ms in ((128, 0.412), (256, 0.609), (2048, 4.43)):
        rows.append({"name": f"Vidur Llama-3-8B A100 linear layers, {tokens} tokens / 1 token (fitted)",
                     "source": "docs/sources.md §2", "published": ms / 0.303,
                     "simulated": linear_layers_time(l3, a100, 1, tokens) / linear_layers_time(l3, a100, 1, 1)})
    l2 = ModelShape(**resolve_preset("llama-2-7b"))
    rows.append({"name": "Frontier Llama-2-7B H800 linear layers, 128 tokens / 1 token",
                 "source": "docs/sources.md §9", "published": 7.6 / 7.1,
                 "simulated": linear_layers_time(l2, h800, 1, 128) / linear_layers_time(l2, h800, 1, 1)})
    # Absolute time: tests the h800 profile's decode_eta_mem (H100's 0.69, from Vidur's per-operator profile
    # of this same model on H100) against Frontier's per-op timing of the 32 layers on H800 (same HBM3 at
    # 3.35 TB/s), which leaves out the embedding and LM head (their share of the weights is removed). The two
    # profiles disagree (69% vs 54% of peak): a data conflict no datasheet mechanism separates.
    layers_share = 1.0 - l2.vocab * l2.hidden * (1 if l2.tied_embeddings else 2) / l2.params
    rows.append({"name": "Frontier Llama-2-7B H800 linear layers at 1 token, all 32 layers (s)",
                 "source": "docs/sources.md §9", "published": 7.1e-3,
                 "simulated": linear_layers_time(l2, h800, 1, 1) * layers_share})
    return rows


def small_batch_decode_rows() -> list[dict]:
    """Small-batch decode step times the engine kinds were fitted to (each sets one kind's constant)."""
    from rlsim.sim.api import ModelShape, resolve_preset
    from rlsim.sim.costs.engine_kinds import engine_overheads
    from rlsim.sim.costs.generation import decode_step_time

    h100, a30 = load_profile("h100-sxm"), load_profile("a30")
    l3 = ModelShape(**resolve_preset("llama-3-8b"))
    q7 = ModelShape(**resolve_preset("qwen2.5-7b"))  # Qwen2-7B has Qwen2.5-7B's shape
    sglang, vllm = engine_overheads("sglang-0.4", h100), engine_overheads("vllm-0.6", h100)
    sglang_eager = engine_overheads("sglang-0.4", h100, cuda_graphs=False)
    return [
        {"name": "SGLang Qwen2-7B A30 batch 1 decode step (fitted)", "source": "docs/sources.md §9",
         "published": 19.24e-3,
         "simulated": decode_step_time(q7, a30, 1, 1, 512, overheads=engine_overheads("sglang-0.4", a30))},
        # The same PR's flashinfer backend: nothing was fitted to these two.
        {"name": "SGLang Llama-3-8B batch 1 decode step, flashinfer, CUDA graph", "source": "docs/sources.md §9",
         "published": 7.35e-3, "simulated": decode_step_time(l3, h100, 1, 1, 512, overheads=sglang)},
        {"name": "SGLang Llama-3-8B batch 1 decode step, flashinfer, no CUDA graph", "source": "docs/sources.md §9",
         "published": 8.23e-3, "simulated": decode_step_time(l3, h100, 1, 1, 512, overheads=sglang_eager)},
        {"name": "SGLang Llama-3-8B batch 1 decode step, CUDA graph (fitted)", "source": "docs/sources.md §9",
         "published": 7.06e-3, "simulated": decode_step_time(l3, h100, 1, 1, 512, overheads=sglang)},
        {"name": "SGLang Llama-3-8B batch 1 decode step, no CUDA graph (fitted)", "source": "docs/sources.md §9",
         "published": 9.28e-3, "simulated": decode_step_time(l3, h100, 1, 1, 512, overheads=sglang_eager)},
        {"name": "vLLM v0.6 Llama-3-8B TPOT at 10 concurrent (fitted)", "source": "docs/sources.md §9",
         "published": 7.50e-3, "simulated": decode_step_time(l3, h100, 1, 10, 10_000, overheads=vllm)},
    ]


def areal_scaling_rows() -> list[dict]:
    from rlsim.tools.reproduce.generation_scaling import areal_scaling_table

    return [{"name": f"AReaL 1.5B generation per GPU, {int(r.gpus)} GPUs (k tok/s)"
             + (" (fitted)" if r.status == "fitted" else ""), "source": "docs/sources.md §9",
             "published": r.published_k_tokens_per_s_per_gpu, "simulated": r.simulated_k_tokens_per_s_per_gpu}
            for r in areal_scaling_table().itertuples()]


def bound_findings() -> pd.DataFrame:
    """Published bounds a shipped scenario models: checked as findings, not as errors."""
    from rlsim.tools.reproduce.async_rl import verl_measured
    from rlsim.tools.reproduce.generation_scaling import FLAT_BOUND, verl_flat_table

    roll = simulate(load_scenario(shipped_dir("scenarios") / "roll" / "rlvr-qwen2.5-7b-judge.yaml"))
    steps = roll.measured_steps
    gen_share = float(steps["timing_s/gen"].sum() / steps["timing_s/step"].sum())
    sync_s = float(verl_measured()["one-step-off"]["timing_s/sync_rollout_weights"])
    flat = float(verl_flat_table()["relative_to_4_nodes"].iloc[-1])
    return pd.DataFrame([
        {"name": "ROLL RLVR: rollout share of step time (rlvr-qwen2.5-7b-judge)", "source": "docs/sources.md §8",
         "expected": "> 0.70", "simulated": f"{gen_share:.2f}", "passed": gen_share > 0.70},
        {"name": "verl one-step-off NCCL weight sync, 7B (s)", "source": "docs/sources.md §4",
         "expected": "mostly < 0.3 (scored < 0.33)", "simulated": f"{sync_s:.3f}", "passed": sync_s < 0.33},
        {"name": "verl #2751: fixed-batch generation time, 16 nodes / 4 nodes", "source": "docs/sources.md §9",
         "expected": f"flat (> {FLAT_BOUND})", "simulated": f"{flat:.2f}", "passed": flat > FLAT_BOUND},
    ])


def verl_rows() -> list[dict]:
    """verl's one-step-off doc: the FSDP2 rows (three set constants) and the Megatron rows (all predicted)."""
    from rlsim.tools.reproduce.async_rl import verl_table

    fitted = {("fsdp2", "sync", "timing_s/old_log_prob"), ("fsdp2", "sync", "timing_s/update_actor"),
              ("fsdp2", "one-step-off", "timing_s/generate_async")}
    rows = []
    for backend, label in (("fsdp2", ""), ("megatron", " Megatron")):
        for r in verl_table(backend).itertuples():
            if r.column == "timing_s/wait_prev_gen":
                continue  # a wait, not a cost: reported in the reproduction table, not as an error here
            tag = " (fitted)" if (backend, r.mode, r.column) in fitted else ""
            rows.append({"name": f"verl{label} {r.mode} {r.column}{tag}", "source": "docs/sources.md §6",
                         "published": r.published_s, "simulated": r.simulated_s})
    return rows


def areal_rows(steps: int | None = None) -> list[dict]:
    from rlsim.tools.reproduce.async_rl import areal_staleness_table

    rows = []
    for r in areal_staleness_table(steps).itertuples():
        if r.eta == 0:
            continue  # the normalisation point
        rows.append({"name": f"AReaL 1.5B throughput eta={r.eta} / eta=0", "source": "docs/sources.md §7",
                     "published": r.published_normalised, "simulated": r.normalised})
    return rows


def validation_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    hf_rows, found = hybridflow_rows()
    table = pd.DataFrame([*nim_rows(), *small_batch_decode_rows(), *decode_shape_rows(), *hf_rows, *verl_rows(),
                          *areal_rows(), *areal_scaling_rows()])
    fitted = table["name"].str.contains("(fitted)", regex=False)
    table["status"] = fitted.map({True: "fitted", False: "predicted"})
    table["name"] = table["name"].str.replace(" (fitted)", "", regex=False)
    table["error_pct"] = 100.0 * (table["simulated"] - table["published"]) / table["published"].abs()
    table["tolerance_pct"] = TARGET_PCT
    table["within"] = table["error_pct"].abs() <= TARGET_PCT
    table["regression_guard_pct"] = [_guard(n) if st == "predicted" else float("nan")
                                     for n, st in zip(table["name"], table["status"], strict=True)]
    table = table[["name", "source", "status", "published", "simulated", "error_pct", "tolerance_pct", "within",
                   "regression_guard_pct"]]
    found = pd.concat([found.astype({"simulated": str}), bound_findings()], ignore_index=True)
    return table, found


def report(out: Path) -> str:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table, found = validation_tables()
    table.to_csv(out / "table.csv", index=False)
    found.to_csv(out / "findings.csv", index=False)
    pred = table[table["status"] == "predicted"]
    err = pred["error_pct"].abs()
    lines = [f"validation: {len(pred)} predicted rows: median |error| {err.median():.1f}%, max {err.max():.1f}%, "
             f"{int(pred['within'].sum())}/{len(pred)} within {TARGET_PCT:.0f}%; "
             f"bounds and findings {int(found['passed'].sum())}/{len(found)} hold; "
             f"{len(table) - len(pred)} fitted rows listed apart"]
    lines.append("predicted:")
    lines += [f"  {r.error_pct:+7.1f}%  {r.name}" for r in pred.itertuples()]
    lines.append("fitted (set a constant; not counted):")
    lines += [f"  {r.error_pct:+7.1f}%  {r.name}" for r in table[table["status"] == "fitted"].itertuples()]
    lines.append("bounds and findings:")
    lines += [f"  {'pass' if r.passed else 'FAIL'}  {r.name}: expected {r.expected}, got {r.simulated}"
              for r in found.itertuples()]
    return "\n".join(lines)
