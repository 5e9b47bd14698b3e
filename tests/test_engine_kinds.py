"""Engine kinds: each named kind's constants, derived from measured operators, and the published small-batch
steps they predict (docs/sources.md §9; none of them sets a constant)."""

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


def test_sglang_predicts_its_batch1_step_with_and_without_cuda_graphs():
    """SGLang PR #1401 (docs/sources.md §9): 7.06 ms with CUDA graph, 9.28 ms without. Predicted from the
    operator-fitted kernels: -8% and -14% today (the eager run pays host work beyond kernel launches)."""
    graph = decode_step_time(LLAMA3_8B, H100, 1, 1, 512, overheads=engine_overheads("sglang-0.4", H100))
    eager = decode_step_time(LLAMA3_8B, H100, 1, 1, 512,
                             overheads=engine_overheads("sglang-0.4", H100, cuda_graphs=False))
    assert graph == pytest.approx(7.06e-3, rel=0.12)
    assert eager == pytest.approx(9.28e-3, rel=0.20)


def test_no_cuda_graphs_adds_exactly_the_kernel_launches():
    """What a step without CUDA graphs adds is layers x kernels per layer x the operator fit's launch cost
    (Frontier's host-timed minus kernel-only times), nothing fitted to a graph/no-graph difference."""
    from rlsim.sim.costs.generation import kernels_per_layer

    for kind in ENGINE_KINDS:
        for tp in (1, 4):
            graph = decode_step_time(LLAMA3_8B, H100, tp, 8, 4096, overheads=engine_overheads(kind, H100))
            eager = decode_step_time(LLAMA3_8B, H100, tp, 8, 4096,
                                     overheads=engine_overheads(kind, H100, cuda_graphs=False))
            launches = LLAMA3_8B.layers * kernels_per_layer(tp) * H100.kernel_launch_us * 1e-6
            assert eager - graph == pytest.approx(launches, rel=1e-9), (kind, tp)


def test_a_profile_without_launch_cost_takes_the_operator_fits():
    from rlsim.sim.costs.engine_kinds import FALLBACK_KERNEL_LAUNCH_US

    assert FALLBACK_KERNEL_LAUNCH_US == load_profile("h800").kernel_launch_us  # where it was measured
    bare = H100.model_copy(update={"kernel_launch_us": None})
    o = engine_overheads("vllm-v1", bare, cuda_graphs=False)
    assert o.launch_per_kernel_s == pytest.approx(FALLBACK_KERNEL_LAUNCH_US * 1e-6)
    assert o.step_s == engine_overheads("vllm-v1", bare).step_s


def test_every_shipped_step_cost_is_the_operator_derived_one():
    """decode_fixed_overhead_ms of every shipped profile equals graph_step_overhead_ms of its own operator
    fields (LM-head GEMM fixed time + one layer's small ops + one graph launch): it cannot drift into a fit."""
    from rlsim.sim.costs.engine_kinds import graph_step_overhead_ms
    from rlsim.sim.hardware import available_profiles

    for name in available_profiles():
        hw = load_profile(name)
        expected = (hw.gemm_fixed_us + hw.layer_small_ops_us + hw.kernel_launch_us) * 1e-3
        assert graph_step_overhead_ms(hw) == pytest.approx(expected)
        assert hw.decode_fixed_overhead_ms == pytest.approx(expected, rel=1e-3), name
        assert hw.sources["decode_fixed_overhead_ms"].startswith("derived: graph_step_overhead_ms"), name
    with pytest.raises(ValueError, match="no operator fit"):
        graph_step_overhead_ms(H100.model_copy(update={"gemm_fixed_us": None}))


def test_profiles_without_an_operator_fit_copy_the_nearest_fitted_gpus_kernel_times():
    """A profile whose kernel fixed times say "as <profile>'s operator fit" carries that profile's values."""
    from rlsim.sim.hardware import available_profiles

    fields = ("gemm_fixed_us", "layer_small_ops_us", "kernel_launch_us", "moe_layer_fixed_us")
    copies = 0
    for name in available_profiles():
        hw = load_profile(name)
        for f in fields:
            src = hw.sources[f]
            if src.startswith("assumed: as "):
                base = load_profile(src.removeprefix("assumed: as ").split("'")[0])
                assert getattr(hw, f) == getattr(base, f), (name, f)
                copies += 1
    assert copies >= 6 * len(fields)


def test_modern_engines_take_the_profiles_kernels_not_a_fitted_engine_constant():
    """vLLM 0.6 / V1, SGLang and TensorRT-LLM replay CUDA graphs and hide host work: their per-step cost and
    weight-streaming efficiency are the hardware profile's (operator-derived), not fitted per engine."""
    for name in ("generic", "vllm-0.6", "vllm-v1", "sglang-0.4", "trtllm"):
        kind = ENGINE_KINDS[name]
        assert kind.step_overhead_ms is None and kind.weight_eta_mem is None, name
        assert engine_overheads(name, H100).step_s == pytest.approx(H100.decode_fixed_overhead_s)
        assert not kind.sources["step_overhead_ms"].startswith("fitted"), name


def test_vllm_06_predicts_lambdas_tpot():
    """Lambda Labs, vLLM v0.6, Llama-3-8B on one H100 at 10 concurrent prompts: 7.50 ms (-6% today)."""
    o = engine_overheads("vllm-0.6", H100)
    assert decode_step_time(LLAMA3_8B, H100, 1, 10, 10_000, overheads=o) == pytest.approx(7.50e-3, rel=0.10)


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
