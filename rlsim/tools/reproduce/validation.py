"""Every published number rlsim models, against rlsim, and the qualitative findings.

`rlsim reproduce validation --out DIR` writes DIR/table.csv (name, source, cite, quantity, status,
published, simulated, error_pct, tolerance_pct, within, regression_guard_pct, and the regime: gpu,
params_b, context, family), DIR/findings.csv (name, source, expected, simulated, passed) and
DIR/validation_residuals.csv (the predicted absolute rows: the residuals of `rlsim run`'s ± band).
`source` is a publication key of rlsim/tools/reproduce/provenance.py; `status` is derived there:
`predicted` only if no constant in the project was fitted to any number of that publication (leave
one source out), else `fitted`. `quantity` is `absolute` (seconds, tokens/s) or `ratio` (of two
published numbers). The headline median and max |error| are over predicted rows only. Published
bounds ("mostly < 300 ms", "flat") are findings, scored pass/fail, never as a point error.

`REGRESSION_GUARD_PCT` pins each predicted row family's |error| where it stands today (a test fails
if any row drifts past it); the targets (median 8%, max 25%) are reported apart: a guard is not a pass.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rlsim.sim.api import load_profile, load_scenario, shipped_dir, simulate
from rlsim.tools.calibration.measurements import predict, read_measurements
from rlsim.tools.report.validation_band import RESIDUAL_COLUMNS, ROW_TOLERANCE_PCT, batch_regime
from rlsim.tools.reproduce.provenance import UNMODELLED, is_predicted, scope_of

MEDIAN_TARGET_PCT = 8.0  # over predicted rows
MAX_TARGET_PCT = ROW_TOLERANCE_PCT  # over predicted rows; also each row's tolerance
TARGET_PCT = MAX_TARGET_PCT
# |error| a predicted row may reach before tests/test_validation.py fails: today's miss plus a margin,
# per family (name prefix). Lower these as the model improves; never raise one to hide a regression.
# Measured today (`rlsim reproduce validation`): the verl issues' steps miss by far (docs/validation.md says why).
# Rows outside the model's scope (provenance.UNMODELLED) are listed with their errors but not guarded: rlsim
# makes no claim on them. A row that turns predicted gets a guard at its first predicted miss plus a margin.
REGRESSION_GUARD_PCT = {
    "Frontier Llama-2-7B H800 linear layers, 128 tokens": 7.0,
    "Frontier": 25.0,
    # Set when the setup was corrected to the issue's own run (Qwen2.5-0.5B on 4 GH200, SGLang; §15): every
    # phase comes out 2-6x too fast (docs/validation.md says what that points at).
    "verl #1208 Qwen2.5-0.5B 4xGH200 timing_s/gen": 88.0,
    "verl #1208 Qwen2.5-0.5B 4xGH200 timing_s/step": 80.0,
    "verl #1208 Qwen2.5-0.5B 4xGH200 timing_s": 68.0,
    "verl #1208 Qwen2.5-0.5B 4xGH200 ref / old_log_prob": 27.0,
    "verl #1208 Qwen2.5-0.5B 4xGH200 update_actor / old_log_prob": 38.0,
    "verl #1208 Qwen2.5-0.5B 4xGH200 gen / step": 33.0,
    "SGLang blog": 46.0,
    "verl generation phase with / without vLLM CUDA graphs": 12.0,
    # The ratio rows keep the guards they had before the sync paths landed (the 3B one lowered from 360).
    "verl PR #116 same process / NCCL, Qwen2.5-3B": 20.0,
    "verl PR #116 same process / NCCL, Qwen2.5-7B": 40.0,
    "verl PR #116": 28.0,
    # Predicted since the engines' per-step costs come from measured operators (docs/operators.md).
    "NIM Llama-3.3-70B": 15.0,
    "SGLang Llama-3-8B batch 1": 12.0,
    "SGLang Qwen2-7B A30": 16.0,
    "vLLM v0.6 Llama-3-8B TPOT": 10.0,
    # Set when the sync paths landed (off: one NCCL call per tensor; on: 2 GB buckets from one sender after the
    # gather across trainer nodes). The 7B rows run as 4 + 4 ranks on one node, their sync over NVLink
    # (docs/validation.md); lowered from 3,500 when that landed.
    "verl checkpoint engine Qwen2.5-7B": 410.0,
    "verl checkpoint engine": 125.0,
    "InferSim": 65.0,
    # Set when the Fig. 5c scenario took the staleness ablation's own 8,192-token cap (docs/sources.md, Validation
    # setups); under the 27,648-token cap these ratios missed by -11% to -41% (guard 42). Training is priced from
    # the operator fit, nothing is fitted to the AReaL paper; rlsim's synchronous eta=0 run is too fast, and more
    # so with shorter answers (docs/long-context.md, AReaL Fig. 5c).
    "AReaL 1.5B 8k-cap throughput eta=1 ": 36.0,
    "AReaL 1.5B 8k-cap throughput eta=": 58.0,
}

# Rows past their guard since a mechanism landed, recorded as known misses (tests/test_validation.py holds each as a
# strict xfail) instead of raising the guard: name prefix -> why. Remove a row once it is back within its guard.
KNOWN_PAST_GUARD = {
    # Priced one NCCL call per tensor (costs/weight_sync.py per-tensor-nccl, SGLang #13824's cross-node 1.65 ms per
    # call scaled to one node): the 7B and Llama-3-8B syncs come out 49% and 62% slower than published, and the
    # Llama same-process / NCCL ratio 35% low. verl's in-node per-call cost would settle it (docs/validation.md).
    "verl PR #116 Qwen2.5-7B NCCL": "one-tensor-per-call NCCL sync priced 49% slow",
    "verl PR #116 Llama-3-8B NCCL": "one-tensor-per-call NCCL sync priced 62% slow",
    "verl PR #116 same process / NCCL, Llama-3-8B": "ratio 35% low through the NCCL column",
}


def known_past_guard(name: str) -> bool:
    return any(name.startswith(prefix) for prefix in KNOWN_PAST_GUARD)


def _guard(name: str) -> float:
    for prefix, pct in REGRESSION_GUARD_PCT.items():
        if name.startswith(prefix):
            return pct
    return TARGET_PCT


def nim_rows() -> list[dict]:
    """NIM ITL vs concurrency (docs/sources.md §2): predicted from the operator-fitted H100 profile."""
    path = shipped_dir("hardware_profiles") / "measurements" / "nim_llama33_70b_fp8_h100.csv"
    profile = load_profile("h100-sxm")
    rows = []
    for m in read_measurements(path):
        sim = predict(m, profile)
        rows.append({"name": f"NIM Llama-3.3-70B FP8 TP2 ITL at concurrency {m.batch} (s)",
                     "source": "nvidia-nim-llama33-70b", "cite": "docs/sources.md §2", "quantity": "absolute",
                     "published": m.seconds, "simulated": sim, "batch": batch_regime(m.batch)})
    return rows


def hybridflow_rows() -> tuple[list[dict], pd.DataFrame]:
    from rlsim.tools.reproduce.hybridflow_placement import actor_share_row, findings, generation_tp_rows, run_grid

    tp = generation_tp_rows()
    rows = [{"name": r.name.replace(" (fitted)", ""), "source": "hybridflow", "cite": "docs/sources.md §5",
             "quantity": "ratio", "published": r.published, "simulated": r.simulated} for r in tp.itertuples()]
    grid = run_grid()
    share = actor_share_row(grid)
    rows.append({"name": share["name"], "source": "hybridflow", "cite": "docs/sources.md §5", "quantity": "ratio",
                 "published": share["published"], "simulated": share["simulated"]})
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
    from rlsim.sim.costs import linear_layers_time

    rows = []
    a100, h800 = load_profile("a100-80gb"), load_profile("h800")
    l3 = ModelShape(**resolve_preset("llama-3-8b"))
    for tokens, ms in ((128, 0.412), (256, 0.609), (2048, 4.43)):
        rows.append({"name": f"Vidur Llama-3-8B A100 linear layers, {tokens} tokens / 1 token",
                     "source": "vidur", "cite": "docs/sources.md §2", "quantity": "ratio", "published": ms / 0.303,
                     "simulated": linear_layers_time(l3, a100, 1, tokens) / linear_layers_time(l3, a100, 1, 1)})
    l2 = ModelShape(**resolve_preset("llama-2-7b"))
    rows.append({"name": "Frontier Llama-2-7B H800 linear layers, 128 tokens / 1 token", "source": "frontier",
                 "cite": "docs/sources.md §9", "quantity": "ratio", "published": 7.6 / 7.1,
                 "simulated": linear_layers_time(l2, h800, 1, 128) / linear_layers_time(l2, h800, 1, 1)})
    # Absolute time: tests the h800 profile's decode_eta_mem (H100's 0.69, from Vidur's per-operator profile
    # of this same model on H100) against Frontier's per-op timing of the 32 layers on H800 (same HBM3 at
    # 3.35 TB/s), which leaves out the embedding and LM head (their share of the weights is removed). The two
    # profiles disagree (69% vs 54% of peak): a data conflict no datasheet mechanism separates.
    layers_share = 1.0 - l2.vocab * l2.hidden * (1 if l2.tied_embeddings else 2) / l2.params
    rows.append({"name": "Frontier Llama-2-7B H800 linear layers at 1 token, all 32 layers (s)", "source": "frontier",
                 "cite": "docs/sources.md §9", "quantity": "absolute", "published": 7.1e-3,
                 "simulated": linear_layers_time(l2, h800, 1, 1) * layers_share})
    return rows


def small_batch_decode_rows() -> list[dict]:
    """Small-batch decode step times (SGLang PR #1401, SGLang on A30, Lambda Labs vLLM): predicted from operators."""
    from rlsim.sim.api import ModelShape, resolve_preset
    from rlsim.sim.costs import decode_step_time, engine_overheads

    h100, a30 = load_profile("h100-sxm"), load_profile("a30")
    l3 = ModelShape(**resolve_preset("llama-3-8b"))
    q7 = ModelShape(**resolve_preset("qwen2.5-7b"))  # Qwen2-7B has Qwen2.5-7B's shape
    sglang, vllm = engine_overheads("sglang-0.4", h100), engine_overheads("vllm-0.6", h100)
    sglang_eager = engine_overheads("sglang-0.4", h100, cuda_graphs=False)

    def row(name: str, source: str, published: float, simulated: float) -> dict:
        return {"name": f"{name} (s)", "source": source, "cite": "docs/sources.md §9", "quantity": "absolute",
                "published": published, "simulated": simulated}

    return [
        row("SGLang Qwen2-7B A30 batch 1 decode step", "sglang-a30-qwen2", 19.24e-3,
            decode_step_time(q7, a30, 1, 1, 512, overheads=engine_overheads("sglang-0.4", a30))),
        row("SGLang Llama-3-8B batch 1 decode step, flashinfer, CUDA graph", "sglang-pr1401", 7.35e-3,
            decode_step_time(l3, h100, 1, 1, 512, overheads=sglang)),
        row("SGLang Llama-3-8B batch 1 decode step, flashinfer, no CUDA graph", "sglang-pr1401", 8.23e-3,
            decode_step_time(l3, h100, 1, 1, 512, overheads=sglang_eager)),
        row("SGLang Llama-3-8B batch 1 decode step, CUDA graph", "sglang-pr1401", 7.06e-3,
            decode_step_time(l3, h100, 1, 1, 512, overheads=sglang)),
        row("SGLang Llama-3-8B batch 1 decode step, no CUDA graph", "sglang-pr1401", 9.28e-3,
            decode_step_time(l3, h100, 1, 1, 512, overheads=sglang_eager)),
        row("vLLM v0.6 Llama-3-8B TPOT at 10 concurrent", "lambda-vllm-2024-09", 7.50e-3,
            decode_step_time(l3, h100, 1, 10, 10_000, overheads=vllm)),
    ]


def areal_scaling_rows() -> list[dict]:
    from rlsim.tools.reproduce.generation_scaling import areal_scaling_table

    return [{"name": f"AReaL 1.5B generation per GPU, {int(r.gpus)} GPUs (k tok/s)", "source": "areal-blog-v0.3",
             "cite": "docs/sources.md §9", "quantity": "absolute",
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
        distserve_intercept_finding(),
    ])


def distserve_intercept_finding() -> dict:
    """DistServe fits decode steps as a + b·Σctx + c·B; a came out at 7-20 ms for OPT-13B on A100 (§2).

    rlsim's intercept: its decode step on one A100 (generic engine, no framework overhead) extrapolated
    to no sequence and no context, 2·t(B=1) - t(B=2) at one token of context each. OPT-13B's shape from its
    config.json (40 layers, hidden 5120, 40 heads, vocabulary 50,272, tied embeddings); its plain MLP of
    20,480 is entered as the gated MLP of the same parameter count (FFN 13,653).
    """
    from rlsim.sim.api import ModelShape
    from rlsim.sim.costs import decode_step_time, engine_overheads

    a100 = load_profile("a100-80gb")
    opt = ModelShape(layers=40, hidden=5120, heads=40, kv_heads=40, ffn=13653, vocab=50272, tied_embeddings=True)
    over = engine_overheads("generic", a100)
    ms = 1e3 * (2 * decode_step_time(opt, a100, 1, 1, 1, overheads=over)
                - decode_step_time(opt, a100, 1, 2, 2, overheads=over))
    return {"name": "DistServe decode-step intercept, OPT-13B on one A100 (ms)", "source": "docs/sources.md §2",
            "expected": "7-20", "simulated": f"{ms:.1f}", "passed": 7.0 <= ms <= 20.0}


def verl_rows() -> list[dict]:
    """verl's one-step-off doc: the FSDP2 and Megatron tables (constants of the H20 profile come from them)."""
    from rlsim.tools.reproduce.async_rl import verl_table

    rows = []
    for backend, label in (("fsdp2", ""), ("megatron", " Megatron")):
        for r in verl_table(backend).itertuples():
            if r.column == "timing_s/wait_prev_gen":
                continue  # a wait, not a cost: reported in the reproduction table, not as an error here
            ratio = r.mode == "speedup"
            rows.append({"name": f"verl{label} {r.mode} {r.column}" + ("" if ratio else " (s)"),
                         "source": "verl-one-step-off", "cite": "docs/sources.md §6",
                         "quantity": "ratio" if ratio else "absolute",
                         "published": r.published_s, "simulated": r.simulated_s,
                         "family": "one-step-off" if r.mode == "one-step-off" else "hybridflow",
                         "context": 20992 if backend == "fsdp2" else 10240})
    return rows


def areal_rows(steps: int | None = None) -> list[dict]:
    from rlsim.tools.reproduce.async_rl import areal_staleness_table

    rows = []
    for r in areal_staleness_table(steps).itertuples():
        if r.eta == 0:
            continue  # the normalisation point
        rows.append({"name": f"AReaL 1.5B 8k-cap throughput eta={r.eta} / eta=0", "source": "areal-paper",
                     "cite": "docs/sources.md §7", "quantity": "ratio",
                     "published": r.published_normalised, "simulated": r.normalised})
    return rows


COLUMNS = ["name", "source", "cite", "quantity", "status", "scope", "published", "simulated", "error_pct",
           "tolerance_pct", "within", "regression_guard_pct", "gpu", "params_b", "context", "family", "engine", "batch"]
# Each publication's setup as a regime (GPU profile, model size in B, prompt + response cap in tokens, schedule
# kind or what was measured, engine family, batch regime: "small" at <= 16 running sequences per engine, else
# "large", the default): the model-error band of `rlsim run` takes the residuals of the rows that resemble a
# scenario (rlsim/tools/report/validation_band.py). A row may carry its own values (a different model,
# schedule or concurrency in the same publication).
REGIMES: dict[str, dict] = {
    "nvidia-nim-llama33-70b": {"gpu": "h100-sxm", "params_b": 70.6, "context": 5500, "family": "serving",
                               "engine": "trtllm"},
    "sglang-a30-qwen2": {"gpu": "a30", "params_b": 7.6, "context": 512, "family": "serving", "engine": "sglang",
                         "batch": "small"},
    "sglang-pr1401": {"gpu": "h100-sxm", "params_b": 8.0, "context": 512, "family": "serving", "engine": "sglang",
                      "batch": "small"},
    "lambda-vllm-2024-09": {"gpu": "h100-sxm", "params_b": 8.0, "context": 1000, "family": "serving",
                            "engine": "vllm", "batch": "small"},
    "sglang-blog": {"gpu": "a100-80gb", "params_b": 8.0, "context": 1000, "family": "serving", "engine": "sglang"},
    "vidur": {"gpu": "a100-80gb", "params_b": 8.0, "context": 1, "family": "operator"},
    "frontier": {"gpu": "h800", "params_b": 6.7, "context": 1, "family": "operator"},
    "hybridflow": {"gpu": "a100-80gb", "params_b": 7.0, "context": 2048, "family": "hybridflow", "engine": "vllm"},
    "verl-one-step-off": {"gpu": "h20", "params_b": 7.6, "context": 20992, "family": "hybridflow", "engine": "vllm"},
    "areal-paper": {"gpu": "h800", "params_b": 1.8, "context": 9216, "family": "fully-async", "engine": "sglang"},
    "areal-blog-v0.3": {"gpu": "h800", "params_b": 1.8, "context": 17408, "family": "generation-only",
                        "engine": "sglang"},
    "verl-issue-7203": {"gpu": "h800", "params_b": 8.2, "context": 3072, "family": "hybridflow", "engine": "vllm"},
    "verl-issue-1208": {"gpu": "gh200", "params_b": 0.5, "context": 2048, "family": "hybridflow", "engine": "sglang"},
    "verl-docs-rollout": {"gpu": "h100-sxm", "params_b": 7.6, "context": 6144, "family": "hybridflow",
                          "engine": "vllm"},
    "verl-pr116": {"gpu": "l40s", "params_b": 7.6, "context": 0, "family": "weight-sync"},
    "verl-checkpoint-engine": {"gpu": "h100-sxm", "params_b": 7.6, "context": 0, "family": "weight-sync"},
    "infersim": {"gpu": "h20", "params_b": 8.2, "context": 2000, "family": "serving", "engine": "sglang"},
    "vllm-v0.6-blog": {"gpu": "h100-sxm", "params_b": 8.0, "context": 512, "family": "serving", "engine": "vllm"},
}


def score(rows: list[dict]) -> pd.DataFrame:
    """Rows -> the table: status from the provenance registry, signed error, tolerance and guard."""
    table = pd.DataFrame([{**REGIMES.get(r["source"], {}), **r} for r in rows])
    for col in ("gpu", "params_b", "context", "family", "engine"):
        if col not in table:
            table[col] = None
    table["batch"] = table["batch"].fillna("large") if "batch" in table else "large"
    table["status"] = table["source"].map(lambda src: "predicted" if is_predicted(src) else "fitted")
    # `scope` in: an unmodelled feature of this row's setup (provenance.UNMODELLED); out: the row's feature
    # from its publication or itself, "" when the model covers the setup.
    own = table["scope"] if "scope" in table else pd.Series([None] * len(table))
    table["scope"] = [scope_of(src, f if isinstance(f, str) and f else None)
                      for src, f in zip(table["source"], own, strict=True)]
    table["error_pct"] = 100.0 * (table["simulated"] - table["published"]) / table["published"].abs()
    table["tolerance_pct"] = TARGET_PCT
    table["within"] = table["error_pct"].abs() <= TARGET_PCT
    table["regression_guard_pct"] = [_guard(n) if st == "predicted" else float("nan")
                                     for n, st in zip(table["name"], table["status"], strict=True)]
    return table[COLUMNS]


def validation_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    from rlsim.tools.reproduce.validation_rows import published_breakdown_rows

    hf_rows, found = hybridflow_rows()
    table = score([*nim_rows(), *small_batch_decode_rows(), *decode_shape_rows(), *hf_rows, *verl_rows(),
                   *areal_rows(), *areal_scaling_rows(), *published_breakdown_rows()])
    found = pd.concat([found.astype({"simulated": str}), bound_findings()], ignore_index=True)
    return table, found


def plot_errors(table: pd.DataFrame):
    """Error of each validation row (predicted and fitted apart), with the target band."""
    import matplotlib.pyplot as plt

    rows = table.sort_values(["status", "error_pct"])
    fig, ax = plt.subplots(figsize=(7, 0.22 * len(rows) + 1.5))
    colors = ["#DD8452" if sc else "#4C72B0" if s == "predicted" else "0.7"
              for s, sc in zip(rows["status"], rows["scope"], strict=True)]
    ax.barh(range(len(rows)), rows["error_pct"], color=colors)
    ax.set_yticks(range(len(rows)), [str(n)[:60] for n in rows["name"]], fontsize=6)
    for edge in (-TARGET_PCT, TARGET_PCT):
        ax.axvline(edge, color="crimson", lw=0.8, ls="--")
    ax.set_xlabel(f"rlsim vs published (%); dashed: ±{TARGET_PCT:.0f}% target; grey: fitted; orange: out of scope")
    ax.set_title("Validation against published figures")
    fig.tight_layout()
    return fig


def in_scope_predicted(table: pd.DataFrame) -> pd.DataFrame:
    """Predicted rows whose setup the model covers: what the headline figures and the ± band read."""
    return table[(table["status"] == "predicted") & (table["scope"] == "")]


def summary(table: pd.DataFrame) -> dict:
    """Counts and |error| figures over the predicted rows in scope (what the acceptance targets read)."""
    pred = in_scope_predicted(table)
    err = pred["error_pct"].abs()
    n_abs = int((pred["quantity"] == "absolute").sum())
    return {"rows": len(table), "predicted": len(pred), "predicted_absolute": n_abs,
            "out_of_scope": int((table["scope"] != "").sum()),
            "median_abs_error_pct": float(err.median()), "max_abs_error_pct": float(err.max())}


def residuals(table: pd.DataFrame) -> pd.DataFrame:
    """Predicted absolute rows in scope with their regime: the shipped rlsim/tools/report/validation_residuals.csv."""
    pred = in_scope_predicted(table)
    rows = pred[(pred["quantity"] == "absolute") & pred["gpu"].notna()]
    return rows[RESIDUAL_COLUMNS].round({"error_pct": 2})


def report(out: Path) -> str:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table, found = validation_tables()
    table.to_csv(out / "table.csv", index=False)
    residuals(table).to_csv(out / "validation_residuals.csv", index=False)
    found.to_csv(out / "findings.csv", index=False)
    from rlsim.tools.report.style import save_figure

    save_figure(plot_errors(table), out / "errors.png")
    return "\n".join(report_lines(table, found))


def report_lines(table: pd.DataFrame, found: pd.DataFrame) -> list[str]:
    """The printed report: the summary line, then predicted, fitted and out-of-scope rows, then the findings."""
    pred = in_scope_predicted(table)
    err = pred["error_pct"].abs()
    n_abs = int((pred["quantity"] == "absolute").sum())
    outside = table[table["scope"] != ""]
    n_fitted = int(((table["status"] == "fitted") & (table["scope"] == "")).sum())
    lines = [f"validation: {len(pred)} predicted rows ({n_abs} absolute): median |error| {err.median():.1f}% "
             f"(target {MEDIAN_TARGET_PCT:.0f}%), max {err.max():.1f}% (target {MAX_TARGET_PCT:.0f}%), "
             f"{int(pred['within'].sum())}/{len(pred)} within {TARGET_PCT:.0f}%; "
             f"bounds and findings {int(found['passed'].sum())}/{len(found)} hold; "
             f"{n_fitted} fitted rows and {len(outside)} rows outside the model's scope listed apart; "
             f"wrote errors.png"]
    lines.append("predicted:")
    lines += [f"  {r.error_pct:+7.1f}%  {r.quantity:<8}  {r.name}  [{r.source}]" for r in pred.itertuples()]
    lines.append("fitted (a constant was fitted to the same publication; not counted):")
    lines += [f"  {r.error_pct:+7.1f}%  {r.quantity:<8}  {r.name}  [{r.source}]"
              for r in table[(table["status"] == "fitted") & (table["scope"] == "")].itertuples()]
    lines.append("outside the model's scope (the setup has something rlsim does not model; not counted):")
    lines += [f"  {key}: {UNMODELLED[key]}" for key in dict.fromkeys(outside["scope"])]
    lines += [f"  {r.error_pct:+7.1f}%  {r.quantity:<8}  {r.name}  [{r.source}; {r.scope}]"
              for r in outside.itertuples()]
    lines.append("bounds and findings:")
    lines += [f"  {'pass' if r.passed else 'FAIL'}  {r.name}: expected {r.expected}, got {r.simulated}"
              for r in found.itertuples()]
    return lines


if __name__ == "__main__":  # python -m rlsim.tools.reproduce.validation: refresh the shipped residuals of `rlsim run`
    from rlsim.tools.report.validation_band import RESIDUALS_CSV

    residuals(validation_tables()[0]).to_csv(RESIDUALS_CSV, index=False)
    print(f"wrote {RESIDUALS_CSV}")
