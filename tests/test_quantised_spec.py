"""Quantised rollout (FP8 / MXFP8 / NVFP4 weights, FP8 KV) and speculative decoding (MTP / EAGLE) in the
inference engines: what each format changes, the quantising refit, and the speculative step's closed form
(docs/rollout-quantisation.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rlsim.sim.costs.generation import decode_coefficients, decode_step_time, prefill_time
from rlsim.sim.costs.quantisation import KV_BYTES, QUANTISE_HBM_ETA, WEIGHT_BYTES, engine_shape, quantise_time
from rlsim.sim.costs.speculative import acceptance_at, per_token_coefficients, tokens_per_step, verify_coefficients
from rlsim.sim.costs.transition import to_generate, to_train
from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.hardware import load_profile
from rlsim.sim.model_shapes import ModelShape, resolve_preset
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.scenario.schema import EngineSpec, SpeculativeSpec
from rlsim.sim.schedules import build_schedule
from rlsim.sim.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
FP8 = "scenarios/sync/grpo-fp8-rollout.yaml"
SPEC = "scenarios/sync/grpo-speculative.yaml"
ONE_STEP_OFF = "scenarios/async/verl-dapo-7b-h20-one-step-off.yaml"
LLAMA8 = ModelShape(**resolve_preset("llama-3-8b"))
H100, B200, A100 = load_profile("h100-sxm"), load_profile("b200"), load_profile("a100-80gb")


def _gen_s(path: str, *sets: str) -> float:
    res = simulate(load_scenario(ROOT / path, ["steps=2", "warmup_steps=1", *sets]))
    return float(res.steps.loc[~res.steps["warmup"], "timing_s/gen"].sum())


# ------------------------------------------------------------------ formats


def test_format_bytes_count_their_block_scales():
    assert WEIGHT_BYTES["fp8"] == pytest.approx(1.0 + 4 / 16384)  # one FP32 scale per 128 x 128 block
    assert WEIGHT_BYTES["mxfp8"] == 1.03125  # one E8M0 byte per 32 elements
    assert WEIGHT_BYTES["nvfp4"] == 0.5625  # one E4M3 byte per 16 four-bit elements
    view = engine_shape(LLAMA8, "nvfp4", "fp8")
    assert view.weight_bytes_total == pytest.approx(LLAMA8.params * 0.5625)
    assert view.kv_bytes_per_token == pytest.approx(LLAMA8.kv_bytes_per_token / 2)
    assert engine_shape(LLAMA8, None, None) is LLAMA8 and engine_shape(LLAMA8, "bf16", "bf16") is LLAMA8
    assert KV_BYTES["fp8"] == 1.0


def test_gemm_peak_per_format_from_the_datasheet():
    """FP8 and MXFP8 on FP8 tensor cores; NVFP4 on FP4 ones (Blackwell); without them weight-only at BF16."""
    peak = {f: H100.peak_flops_for(b) / 1e12 for f, b in WEIGHT_BYTES.items()}
    assert peak == {"bf16": 989, "fp8": 1979, "mxfp8": 1979, "nvfp4": 989}  # Hopper: no FP4 tensor cores
    assert B200.peak_flops_for(WEIGHT_BYTES["nvfp4"]) == 9000e12
    assert B200.peak_flops_for(WEIGHT_BYTES["mxfp8"]) == 4500e12
    assert A100.peak_flops_for(WEIGHT_BYTES["fp8"]) == A100.peak_flops  # Ampere: no FP8 tensor cores


def test_decode_reads_fewer_bytes_and_prefill_runs_at_the_format_peak():
    steps = {f: decode_step_time(engine_shape(LLAMA8, f, None), H100, 1, 1, 1000.0) for f in WEIGHT_BYTES}
    assert steps["nvfp4"] < steps["fp8"] < steps["mxfp8"] < steps["bf16"]
    # A batch-1 step saves exactly the weight bytes not read (its kernels' fixed times stay).
    saved = (LLAMA8.weight_bytes_total - engine_shape(LLAMA8, "fp8", None).weight_bytes_total) / (
        H100.hbm_bytes_per_s * H100.decode_eta_mem)
    assert steps["bf16"] - steps["fp8"] == pytest.approx(saved, rel=0.01)
    prefills = {f: prefill_time(engine_shape(LLAMA8, f, None), H100, 1, 8192) for f in WEIGHT_BYTES}
    assert prefills["fp8"] == pytest.approx(prefills["bf16"] / 2, rel=0.02)  # compute bound at twice the peak
    assert prefills["nvfp4"] == pytest.approx(prefills["bf16"], rel=0.02)  # Hopper: dequantised into BF16 GEMMs
    on_b200 = {f: prefill_time(engine_shape(LLAMA8, f, None), B200, 1, 8192) for f in ("fp8", "nvfp4")}
    assert on_b200["nvfp4"] == pytest.approx(on_b200["fp8"] / 2, rel=0.02)


def test_fp8_kv_halves_the_attention_read_and_grows_capacity():
    q = engine_shape(LLAMA8, None, "fp8")
    slope = decode_coefficients(LLAMA8, H100, 1, 64).slope
    assert decode_coefficients(q, H100, 1, 64).slope == pytest.approx(slope / 2)
    eng = EngineSpec(gpu_memory_utilization=0.5)
    base = eng.kv_capacity(LLAMA8, H100, 1)
    assert eng.kv_capacity(q, H100, 1) == pytest.approx(2 * base)
    fp8w = engine_shape(LLAMA8, "fp8", None)
    freed = LLAMA8.weight_bytes_total - fp8w.weight_bytes_total
    assert eng.kv_capacity(fp8w, H100, 1) == pytest.approx(base + freed / LLAMA8.kv_bytes_per_token)


# ------------------------------------------------------------------ the quantising refit


def test_quantise_pass_is_a_memory_bound_read_and_write():
    t = quantise_time(LLAMA8, WEIGHT_BYTES["fp8"], H100, 2)
    assert t == pytest.approx(LLAMA8.params * (2 + WEIGHT_BYTES["fp8"]) / (2 * 3.35e12 * QUANTISE_HBM_ETA))
    assert quantise_time(LLAMA8, 2.0, H100, 2) == 0.0


def test_disaggregated_sync_moves_quantised_bytes_after_a_quantise_pass():
    def sched(*sets):
        scn = load_scenario(ROOT / ONE_STEP_OFF, list(sets))
        return build_schedule(scn, SimEnvironment(scn.seed)), scn

    plain, scn = sched()
    quant, _ = sched("roles.rollout.engine.quantization.weights=fp8")
    model = scn.models[scn.roles["actor"].model]
    assert plain.sync_bytes() == model.weight_bytes_total and plain.costs.sync_quantise_time() == 0.0
    assert quant.sync_bytes() == pytest.approx(model.params * WEIGHT_BYTES["fp8"])
    actor = scn.roles["actor"]
    expected = quantise_time(model, WEIGHT_BYTES["fp8"], load_profile("h20"), actor.parallel.tp * actor.parallel.pp)
    assert quant.costs.sync_quantise_time() == pytest.approx(expected) and expected > 0
    # Half the bytes on the wire; the pass is paid on top.
    moved = quant.weight_sync_time() - expected
    assert moved == pytest.approx(plain.weight_sync_time() / 2, rel=0.05)


def test_colocated_refit_quantises_the_engine_shard_and_swaps_quantised_bytes():
    scn = load_scenario(ROOT / FP8, [])
    sched = build_schedule(scn, SimEnvironment(scn.seed))
    setup = sched.transition_setup()
    assert setup.engine is not None and setup.engine.weight_bytes == WEIGHT_BYTES["fp8"]
    bf16 = load_scenario(ROOT / FP8, ["roles.rollout.engine.quantization=null"])
    plain = build_schedule(bf16, SimEnvironment(bf16.seed)).transition_setup()
    assert plain.engine is None
    q_up, p_up = to_generate(setup), to_generate(plain)
    assert q_up.load - p_up.load == pytest.approx(quantise_time(setup.model, WEIGHT_BYTES["fp8"], setup.hw, 1))
    assert q_up.gather == p_up.gather  # the trainer's BF16 shards are what is gathered
    assert to_train(setup).sleep == pytest.approx(to_train(plain).sleep * WEIGHT_BYTES["fp8"] / 2)


def test_fp8_rollout_scenario_generates_faster_and_fp8_kv_faster_still():
    bf16 = _gen_s(FP8, "roles.rollout.engine.quantization=null")
    fp8 = _gen_s(FP8)
    kv8 = _gen_s(FP8, "roles.rollout.engine.quantization.kv_cache=fp8")
    assert kv8 < fp8 < 0.85 * bf16


def test_bad_format_is_one_line_with_its_path():
    with pytest.raises(ScenarioError) as err:
        load_scenario(ROOT / FP8, ["roles.rollout.engine.quantization.weights=int3"])
    text = str(err.value)
    assert "roles.rollout.engine.quantization.weights" in text and "Traceback" not in text
    with pytest.raises(ScenarioError, match="roles.rollout.engine.quantization.kv"):
        load_scenario(ROOT / FP8, ["roles.rollout.engine.quantization.kv=fp8"])  # unknown key


# ------------------------------------------------------------------ speculative decoding


def test_tokens_per_step_is_the_geometric_sum():
    assert tokens_per_step(0.0, 3) == 1.0
    assert tokens_per_step(1.0, 3) == 4.0
    assert tokens_per_step(0.7, 3) == pytest.approx(1 + 0.7 + 0.49 + 0.343)


def test_acceptance_falls_with_position_and_draft_lag():
    assert acceptance_at(0.8, 0.02, 0.1, 0, 0) == 0.8
    assert acceptance_at(0.8, 0.02, 0.1, 5000, 0) == pytest.approx(0.7)
    assert acceptance_at(0.8, 0.02, 0.1, 5000, 3) == pytest.approx(0.4)
    assert acceptance_at(0.8, 0.02, 0.1, 50_000, 3) == 0.0
    frozen = SpeculativeSpec(k=3, draft_cost=0.1, acceptance=0.8, draft_refresh_versions=None)
    every2 = SpeculativeSpec(k=3, draft_cost=0.1, acceptance=0.8, draft_refresh_versions=2)
    assert [frozen.drift(v) for v in range(4)] == [0, 1, 2, 3]
    assert [every2.drift(v) for v in range(4)] == [0, 1, 0, 1]


def test_speculative_step_per_token():
    """Verification over k + 1 tokens plus k drafts, divided by the tokens a step yields: still affine in S."""
    o = EngineSpec().overheads(H100)
    plain = decode_coefficients(LLAMA8, H100, 1, 32, overheads=o)
    verify = verify_coefficients(LLAMA8, H100, 1, 32, 3, o, plain)
    assert verify.intercept > plain.intercept and verify.fixed == plain.fixed and verify.batch == 32
    per_token = per_token_coefficients(plain, verify, 3, 0.1, 2.5)
    s = 32 * 2000.0
    assert per_token.step_time(s) == pytest.approx((verify.step_time(s) + 0.3 * plain.step_time(s)) / 2.5)
    # A memory-bound step verifies 4 tokens for about the price of one: at 2.5 tokens a step it wins.
    assert per_token.step_time(s) < 0.6 * plain.step_time(s)
    nothing = per_token_coefficients(plain, verify, 3, 0.1, tokens_per_step(0.0, 3))
    assert nothing.step_time(s) > plain.step_time(s)


def test_an_overlapped_hosts_floor_is_paid_once_per_speculative_step():
    floored = replace(decode_coefficients(LLAMA8, H100, 1, 32), host_floor=1.0)  # a host slower than any GPU step
    verify = replace(floored, intercept=2 * floored.intercept)
    per_token = per_token_coefficients(floored, verify, 3, 0.1, 2.5)
    assert per_token.step_time(32 * 2000.0) == pytest.approx(1.0 / 2.5)
    assert per_token.steps_time(0.0, 10) == pytest.approx(10 / 2.5)


def test_speculation_shortens_the_long_tail_and_costs_more_when_nothing_is_accepted():
    base = _gen_s(SPEC, "roles.rollout.engine.speculative=null")
    spec = _gen_s(SPEC)
    zero = _gen_s(SPEC, "roles.rollout.engine.speculative.acceptance=0")
    assert spec < 0.7 * base
    assert zero > base


def test_speculation_keeps_one_event_per_batch_change():
    def events(*sets):
        return simulate(load_scenario(ROOT / SPEC, ["steps=1", "warmup_steps=0", *sets])).meta["events"]

    assert events() == events("roles.rollout.engine.speculative=null")


def test_a_frozen_draft_slows_as_the_policy_drifts():
    drift = ["roles.rollout.engine.speculative.acceptance_drop_per_version=0.3", "steps=3", "warmup_steps=0"]

    def gen(refresh):
        res = simulate(load_scenario(ROOT / SPEC, [*drift, f"roles.rollout.engine.speculative.draft_refresh_versions="
                                                            f"{refresh}"]))
        return res.steps["timing_s/gen"].to_numpy()

    co_trained, frozen = gen(1), gen("null")
    assert frozen[0] == co_trained[0]  # version 0: the draft is the policy's own
    assert frozen[2] > co_trained[2] * 1.2


# ------------------------------------------------------------------ import mapping


def test_verl_fp8_rollout_and_mtp_map_to_the_engine():
    pytest.importorskip("typer")
    from import_helpers import assert_complete, fetch_wheel

    from rlsim.tools.importers.command import run_import

    config = fetch_wheel("verl", "0.9.1") / "verl" / "trainer" / "config" / "ppo_trainer.yaml"
    on = ["actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.rollout.quantization=fp8",
          "actor_rollout_ref.model.mtp.enable=true", "actor_rollout_ref.model.mtp.enable_rollout=true",
          "actor_rollout_ref.model.mtp.enable_train=true"]
    imported = run_import("verl", config, on)
    engine = imported.scenario.roles["rollout"].engine
    assert engine.quantization.weights == "fp8"
    assert engine.speculative.k == 3 and engine.speculative.draft_refresh_versions == 1  # SGLang's num_steps
    assert "actor_rollout_ref.model.mtp.speculative_num_steps" in imported.ledger.used
    assert any("MTP acceptance" in a.what for a in imported.ledger.assumed)
    assert_complete(imported.ledger)
    off = run_import("verl", config, [])
    assert off.scenario.roles["rollout"].engine.quantization is None
    assert off.scenario.roles["rollout"].engine.speculative is None
    assert "actor_rollout_ref.model.mtp.enable" in off.ledger.ignored


def test_the_memory_check_counts_the_engines_format():
    """Llama-3-70B does not fit one engine of 2 H100s at half their memory in BF16; in NVFP4 it does."""
    flat = "scenarios/hybridflow/verl-generation-flat.yaml"
    big = ["models.policy.preset=llama-3-70b", "steps=1", "algorithm.prompts_per_step=2"]
    with pytest.raises(ScenarioError, match="roles.rollout.parallel.tp: model does not fit"):
        load_scenario(ROOT / flat, big)
    scn = load_scenario(ROOT / flat, [*big, "roles.rollout.engine.quantization.weights=nvfp4"])
    eng = scn.roles["rollout"].engine
    assert eng.kv_capacity(eng.shape(scn.models["policy"]), H100, 2) > 16384 + 1024


def test_a_draft_takes_its_share_of_the_kv_memory():
    eng = EngineSpec(gpu_memory_utilization=0.5)
    spec = EngineSpec(gpu_memory_utilization=0.5, speculative={"k": 3, "draft_cost": 0.1, "acceptance": 0.7})
    free = 0.5 * H100.hbm_bytes - 1e9 - 1.1 * LLAMA8.weight_bytes_total
    assert spec.kv_capacity(LLAMA8, H100, 1) == pytest.approx(free / (1.1 * LLAMA8.kv_bytes_per_token))
    assert spec.kv_capacity(LLAMA8, H100, 1) < eng.kv_capacity(LLAMA8, H100, 1)


@pytest.mark.parametrize("path", [FP8, SPEC])
def test_the_plan_bound_stays_below_the_simulated_step(path):
    from rlsim.tools.plan.bounds import step_lower_bound, step_work

    scn = load_scenario(ROOT / path, ["steps=2", "warmup_steps=1"])
    bound = step_lower_bound(scn, step_work(scn, 0))
    res = simulate(scn)
    assert 0 < bound["step_s"] <= res.summary["step_time_s"]
    assert bound["generation_s"] <= float(res.steps.loc[~res.steps["warmup"], "timing_s/gen"].min())
