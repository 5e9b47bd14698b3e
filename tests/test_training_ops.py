"""Training priced from the operator fit per micro-batch (rlsim/sim/costs/training_ops.py, docs/operators.md
"Training from operators"): the same fitted curves as generation, MFU a result reported per step, and no
system-fitted efficiency priced together with a mechanism term its fit did not include."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from rlsim.sim.api import load_scenario
from rlsim.sim.costs.generation import linear_layers_time, linear_roofline
from rlsim.sim.costs.long_context import PLAIN, PassOptions
from rlsim.sim.costs.training import optimizer_step_time, pass_model_flops, train_pass_time
from rlsim.sim.costs.training_ops import (
    MICRO_BATCH_FIXED_S,
    OPTIMIZER_STEP_FIXED_S,
    layer_memory_elements,
    micro_batch_forward,
    rank_parts_ops,
)
from rlsim.sim.hardware import load_profile
from rlsim.sim.model_shapes import PRESETS, ModelShape
from rlsim.sim.paths import shipped_dir
from rlsim.sim.simulate import simulate
from rlsim.tools.reproduce import provenance

H100 = load_profile("h100-sxm")
QWEN7B = ModelShape(**PRESETS["qwen2.5-7b"])
VERL = PassOptions(attention=True, logits="fused", recompute="full")  # verl's defaults with long_context_costs on
ROOT = Path(__file__).resolve().parents[1]


def _mfu(lens, budget, opts=PLAIN, hw=H100, model=QWEN7B, tp=1) -> float:
    """Achieved MFU of one rank's update pass over `lens` (no optimizer step), the way steps.csv reports it."""
    lens = np.asarray(lens, dtype=np.float64)
    seconds = sum(rank_parts_ops(model, hw, lens, tp, 1, True, opts, budget).values())
    return pass_model_flops(model, lens, True) / (seconds * tp * hw.peak_flops)


@pytest.mark.parametrize("opts", [PLAIN, VERL])
def test_a_one_sequence_micro_batch_runs_at_a_lower_mfu_than_a_packed_32k_one(opts):
    one = _mfu([1024], 1024)  # micro_batch_size_per_gpu 1: a 1k-token micro-batch
    packed = _mfu([1024] * 32, 32768)  # the same sequences packed into one 32k-token micro-batch
    assert one < 0.85 * packed
    # Short micro-batches run their GEMMs below the large-token share of peak and pay the fixed costs more often.
    assert H100.gemm_eta_compute(1024) < H100.gemm_eta_compute(32768) == H100.prefill_eta_compute
    assert 0.2 < one < packed < 0.75  # shares of peak, not an input MFU


def test_forward_and_backward_time_rises_with_tokens():
    tokens = [1, 8, 64, 256, 512, 700, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
    for tp in (1, 4):
        fwd = [sum(rank_parts_ops(QWEN7B, H100, np.array([t]), tp, 1, False, PLAIN, 10**9).values()) for t in tokens]
        train = [sum(rank_parts_ops(QWEN7B, H100, np.array([t]), tp, 1, True, VERL, 10**9).values()) for t in tokens]
        assert all(b > a for a, b in zip(fwd, fwd[1:], strict=False)), fwd
        assert all(b > a for a, b in zip(train, train[1:], strict=False)), train
        # Where the kernels outweigh the fixed costs, backward is about twice the forward (recompute adds one more).
        assert all(t > 3 * f for n, f, t in zip(tokens, fwd, train, strict=True) if n >= 4096)
    # Packing: the same tokens in more micro-batches cost more (each pays its fixed costs), never less.
    lens = np.full(64, 512.0)
    by_budget = [sum(rank_parts_ops(QWEN7B, H100, lens, 1, 1, True, VERL, b).values()) for b in (512, 2048, 32768)]
    assert by_budget[0] > by_budget[1] > by_budget[2]


def test_the_linear_layers_are_generations_fitted_roofline_and_backward_is_twice_the_forward():
    for tokens in (1, 64, 512, 1500, 4096, 20000):
        mb = micro_batch_forward(QWEN7B, H100, 2, 1, tokens)
        assert mb.linear == linear_roofline(QWEN7B, H100, 2, tokens, H100.gemm_eta_compute(tokens))
    # At <= 512 tokens the training forward's linear layers are exactly a decode step's (decode_eta_compute).
    assert micro_batch_forward(QWEN7B, H100, 2, 1, 256).linear == linear_layers_time(QWEN7B, H100, 2, 256)
    fwd = rank_parts_ops(QWEN7B, H100, np.array([8192]), 2, 1, False, PLAIN, 10**9)
    train = rank_parts_ops(QWEN7B, H100, np.array([8192]), 2, 1, True, PLAIN, 10**9)
    assert train["linear"] == pytest.approx(3 * fwd["linear"])  # forward + 2x backward, the same curve
    assert train["fixed"] == fwd["fixed"] == MICRO_BATCH_FIXED_S
    # A pipeline stage runs 1/pp of the layers.
    assert micro_batch_forward(QWEN7B, H100, 2, 4, 4096).linear == pytest.approx(
        micro_batch_forward(QWEN7B, H100, 2, 1, 4096).linear / 4)


def test_gemm_share_of_peak_joins_the_two_fitted_points():
    for name in ("h100-sxm", "a100-80gb", "a800", "h20"):
        hw = load_profile(name)
        assert hw.gemm_eta_compute(1) == hw.gemm_eta_compute(512) == hw.decode_eta_compute
        assert hw.gemm_eta_compute(4096) == hw.gemm_eta_compute(1e6) == hw.prefill_eta_compute
        mid = hw.gemm_eta_compute(1448.15)  # the geometric middle: half way in log tokens
        assert mid == pytest.approx((hw.decode_eta_compute + hw.prefill_eta_compute) / 2, rel=1e-4)


def test_memory_bound_elements_are_the_operator_fits_own():
    from rlsim.tools.calibration.ops_data import dense_geometry

    shape = {"h": 4096, "d": 128, "ffn": 11008, "heads": 32, "kv": 8, "gated": True}
    per_token = layer_memory_elements(4096, 32, 8, 128, 11008, 2)
    for op, elements in per_token.items():
        assert dense_geometry(op, shape, 2, 100.0) == (0.0, 0.0, 100.0 * elements), op


def test_fixed_costs_per_micro_batch_and_per_optimizer_step():
    lens = np.full(32, 1000.0)
    got = train_pass_time(QWEN7B, H100, lens, 1, 1, 1, 4000, 4, 1)  # 4 optimizer steps of 8 sequences, 2 micro each
    opt = optimizer_step_time(QWEN7B, H100, 1, 1, 1, True)
    per_step = [rank_parts_ops(QWEN7B, H100, lens[8 * k:8 * k + 8], 1, 1, True, PLAIN, 4000) for k in range(4)]
    assert all(p["fixed"] == 2 * MICRO_BATCH_FIXED_S for p in per_step)
    assert got == pytest.approx(sum(sum(p.values()) for p in per_step) + 4 * (opt + OPTIMIZER_STEP_FIXED_S), rel=1e-9)


def test_an_explicit_mfu_override_prices_every_flop_at_it():
    lens = np.full(16, 2000.0)
    hw = H100.model_copy(update={"train_mfu": 0.25})
    slow = train_pass_time(QWEN7B, hw, lens, 1, 1, 1, 10**9, 1, 1)
    fast = train_pass_time(QWEN7B, H100.model_copy(update={"train_mfu": 0.5}), lens, 1, 1, 1, 10**9, 1, 1)
    opt = slow - 2 * (slow - fast)  # t = flops / mfu + optimizer: halving the MFU doubles the first part
    assert slow - opt == pytest.approx(pass_model_flops(QWEN7B, lens, True) / (H100.peak_flops * 0.25), rel=1e-9)


# -------------------------------------------------------------------- MFU a result, per step and in the summary


@pytest.fixture(scope="module")
def quickstart():
    return simulate(load_scenario(ROOT / "scenarios" / "quickstart.yaml", ["steps=2", "warmup_steps=0"]))


def test_mfu_is_reported_per_step_and_in_the_summary(quickstart):
    res = quickstart
    steps, scn = res.steps, res.scenario
    actor = scn.roles["actor"]
    gpus = scn.role_gpus("actor")
    peak = scn.cluster.pools[actor.pool].profile().peak_flops
    assert {"mfu/update_actor", "mfu/old_log_prob"} <= set(steps.columns)
    trained = res.samples[res.samples["fate"] == "trained"]
    for _, row in steps.iterrows():
        mfu = row["mfu/update_actor"]
        assert 0.1 < mfu < 0.8
        # what it counts: 6N per trained token plus causal attention (x epochs) over the update's seconds
        mine = trained[trained["step"] == row["step"]]
        lens = (mine["prompt_tokens"] + mine["response_tokens"]).to_numpy()
        assert lens.sum() == row["tokens"]
        flops = pass_model_flops(scn.models[actor.model], lens, True) * scn.algorithm.epochs
        assert mfu == pytest.approx(flops / (row["timing_s/update_actor"] * gpus * peak), rel=1e-9)
    weights = steps["timing_s/update_actor"]
    assert res.summary["train_mfu"] == pytest.approx(float((steps["mfu/update_actor"] * weights).sum() / weights.sum()))
    assert res.summary["train_mfu"] == pytest.approx(res.summary["mfu_by_phase"]["gen/train"], rel=1e-6)


def test_the_reported_mfu_follows_the_micro_batches_not_a_profile_input():
    scn = ROOT / "scenarios" / "quickstart.yaml"
    small = ["steps=1", "warmup_steps=0"]
    big = simulate(load_scenario(scn, small)).summary["train_mfu"]
    tiny = simulate(load_scenario(scn, [*small, "roles.actor.train.ppo_max_token_len_per_gpu=1024"])).summary
    assert tiny["train_mfu"] < big


# -------------------------------------------------------------------- no system-fitted value counted twice


def test_no_profile_value_fitted_to_a_system_number_meets_a_mechanism_term():
    assert provenance.double_counted() == []


def test_the_guard_catches_an_mfu_fitted_without_the_mechanism_terms():
    """H20's old MFU: fitted to verl's sync update_actor under the plain model, then priced with every term."""
    old = provenance.FittedConstant("hardware_profiles/h20.yaml", "train_mfu", ("verl-one-step-off",),
                                    "sync FSDP2 update_actor 286 s")
    lines = provenance.double_counted((*provenance.FITTED, old))
    assert len(lines) == 1 and "h20.yaml train_mfu" in lines[0] and "recompute" in lines[0]
    complete = provenance.FittedConstant("hardware_profiles/h20.yaml", "train_mfu", ("verl-one-step-off",),
                                         "refit with every term on", includes=provenance.TRAINING_MECHANISMS)
    assert provenance.double_counted((*provenance.FITTED, complete)) == []
    operators = provenance.FittedConstant("hardware_profiles/h20.yaml", "prefill_eta_compute", ("vidur",), "ops")
    assert provenance.double_counted((operators,)) == []  # an operator fit holds no system-level term


def test_shipped_profiles_price_training_from_operators_only():
    """Scan every shipped profile: no MFU, and every training input fitted (not assumed or derived) comes from an
    operator fit, so no system-level efficiency sits beside the mechanism terms."""
    bad = []
    for path in sorted(shipped_dir("hardware_profiles").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        for key in ("train_mfu", "forward_mfu"):
            if key in data:
                bad.append(f"{path.name}: {key} set")
        for key in provenance.TRAINING_PROFILE_FIELDS:
            text = str(data.get("sources", {}).get(key, "")).lower()
            if text.startswith(("fitted", "calibrated")) and not ("calibrate ops" in text or "ops_" in text):
                bad.append(f"{path.name}: {key} fitted to something other than operators: {text[:80]}")
    assert not bad, bad
