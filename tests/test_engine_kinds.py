"""Engine kinds: each named kind's constants, and the published small-batch steps they were fitted to."""

from __future__ import annotations

import pytest

from rlsim.sim.costs.engine_kinds import ENGINE_KINDS, engine_overheads
from rlsim.sim.costs.generation import decode_step_time
from rlsim.sim.hardware import load_profile
from rlsim.sim.model_shapes import ModelShape, resolve_preset
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.simulate import simulate

H100 = load_profile("h100-sxm")
LLAMA3_8B = ModelShape(**resolve_preset("llama-3-8b"))


def test_every_constant_of_every_kind_is_cited():
    for kind in ENGINE_KINDS.values():
        for field in ("step_overhead_ms", "allreduce_latency_us"):
            assert field in kind.sources, (kind.name, field)
        if kind.host_per_seq_us:
            assert "host_per_seq_us" in kind.sources, kind.name
        if kind.attention_eta_mem is not None:
            assert "attention_eta_mem" in kind.sources, kind.name
        if kind.weight_eta_mem is not None:
            assert "weight_eta_mem" in kind.sources, kind.name


def test_generic_and_trtllm_use_the_profiles_calibrated_step():
    for name in ("generic", "trtllm"):
        o = engine_overheads(name, H100)
        assert o.step_s == pytest.approx(H100.decode_fixed_overhead_s)
        assert o.allreduce_latency_s is None


def test_sglang_fit_reproduces_its_batch1_step_with_and_without_cuda_graphs():
    """SGLang PR #1401 (docs/sources.md §9): 7.06 ms with CUDA graph (sets the constants), 9.28 ms without
    (predicted: 12 kernel launches per layer at Frontier's per-kernel cost explain all but ~9% of it)."""
    graph = decode_step_time(LLAMA3_8B, H100, 1, 1, 512, overheads=engine_overheads("sglang-0.4", H100))
    eager = decode_step_time(LLAMA3_8B, H100, 1, 1, 512,
                             overheads=engine_overheads("sglang-0.4", H100, cuda_graphs=False))
    assert graph == pytest.approx(7.06e-3, rel=0.01)
    assert eager == pytest.approx(9.28e-3, rel=0.10)


def test_sglang_two_point_fit_is_rerun_from_its_two_published_steps():
    """Llama-3-8B on H100 (7.06 ms) and Qwen2-7B on A30 (19.24 ms), docs/sources.md §9: solving
    floor / eta + c + attention for both gives the kind's weight efficiency and per-step cost."""
    from rlsim.sim.costs.engine_kinds import SGLANG_STEP_MS, SGLANG_WEIGHT_ETA
    from rlsim.sim.costs.generation import attention_seconds_per_context_token, linear_layers_time

    a30 = load_profile("a30")
    qwen2_7b = ModelShape(**resolve_preset("qwen2.5-7b"))
    parts = []
    for model, hw, published in ((LLAMA3_8B, H100, 7.06e-3), (qwen2_7b, a30, 19.24e-3)):
        fixed = model.layers * hw.layer_fixed_s  # the operator fit's fixed kernel time per layer (h100 only)
        floor = linear_layers_time(model, hw, 1, 1, eta_mem=1.0) - fixed
        attention = attention_seconds_per_context_token(model, hw, 1, ENGINE_KINDS["sglang-0.4"].attention_eta_mem)
        parts.append((floor, published - attention * 512 - fixed))
    (f1, t1), (f2, t2) = parts
    eta = (f2 - f1) / (t2 - t1)
    assert eta == pytest.approx(SGLANG_WEIGHT_ETA, rel=1e-3)
    assert (t1 - f1 / eta) * 1e3 == pytest.approx(SGLANG_STEP_MS, rel=1e-3)
    # With the operator fit's fixed kernel time per layer, almost no per-step cost is left: the two points
    # need only 0.07 ms beyond their kernels (it was 1.98 ms before the per-layer fixed time was priced).
    assert 0.0 <= SGLANG_STEP_MS < 0.5


def test_vllm_06_fit_reproduces_lambdas_tpot():
    o = engine_overheads("vllm-0.6", H100)
    assert decode_step_time(LLAMA3_8B, H100, 1, 10, 10_000, overheads=o) == pytest.approx(7.50e-3, rel=0.01)


def test_scenario_values_override_the_kind():
    o = engine_overheads("vllm-0.3", H100, step_overhead_ms=1.0, host_per_seq_us=0.0, allreduce_latency_us=3.0)
    assert (o.step_s, o.host_per_seq_s, o.allreduce_latency_s) == pytest.approx((1e-3, 0.0, 3e-6))


def test_old_vllm_is_slower_per_sequence_than_a_modern_engine():
    """The same batch generates slower on vllm-0.3 (Python scheduler per sequence) than on vllm-v1."""
    times = {}
    for kind in ("vllm-0.3", "vllm-v1"):
        scn = load_scenario("scenarios/quickstart.yaml", [f"roles.rollout.engine.kind={kind}", "steps=1",
                                                         "algorithm.prompts_per_step=32"])
        times[kind] = simulate(scn).steps["timing_s/gen"].iloc[0]
    assert times["vllm-0.3"] > 1.5 * times["vllm-v1"]


def test_unknown_kind_is_a_one_line_error(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "rlsim.tools.cli", "validate", "scenarios/quickstart.yaml", "--set",
                           "roles.rollout.engine.kind=vllm-9"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "roles.rollout.engine.kind" in proc.stderr and "Traceback" not in proc.stderr
