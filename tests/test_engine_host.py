"""Engine host work per step (docs/sources.md, "Engine host work per step"): each kind's h_step and h_seq against
the published row it was derived from, exposed vs overlapped, CUDA-graph padding, and the closed forms with a
host floor."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsim.sim.costs.engine_kinds import ENGINE_KINDS, engine_overheads
from rlsim.sim.costs.generation import DecodeCoefficients, decode_coefficients, decode_step_time
from rlsim.sim.hardware import load_profile
from rlsim.sim.model_shapes import ModelShape, resolve_preset

H100 = load_profile("h100-sxm")
LLAMA3_8B = ModelShape(**resolve_preset("llama-3-8b"))
TINY = ModelShape(**resolve_preset("qwen2.5-0.5b"))


def _step(kind: str, batch: int, model: ModelShape = LLAMA3_8B, ctx_per_seq: int = 512, **kw) -> float:
    return decode_step_time(model, H100, 1, batch, batch * ctx_per_seq, overheads=engine_overheads(kind, H100, **kw))


def _host_added(kind: str, batch: int) -> float:
    """What the kind's host work adds to a step over the same GPU work with no host term."""
    no_host = engine_overheads(kind, H100, host_per_seq_us=0.0, host_step_us=0.0)
    bare = decode_step_time(LLAMA3_8B, H100, 1, batch, batch * 512, overheads=no_host)
    return _step(kind, batch) - bare


def test_vllm_v0_exposes_issue_6854s_4_ms_and_6913s_output_processing():
    # #6854: ~4 ms of GPU idle per decode step at small batch (batch 1).
    assert _host_added("vllm-0.5", 1) == pytest.approx(4.0e-3, rel=0.02)
    # #6913: output processing 0.2 ms at batch 1, 3.4 ms at batch 32: the slope per running sequence.
    slope = (_host_added("vllm-0.5", 32) - _host_added("vllm-0.5", 1)) / 31
    assert slope == pytest.approx((3.4e-3 - 0.2e-3) / 31, rel=0.01)


def test_vllm_06_multi_step_pays_v0s_host_once_per_eight_steps():
    assert _host_added("vllm-0.6", 1) == pytest.approx(_host_added("vllm-0.5", 1) / 8, rel=1e-9)


def test_vllm_v1_host_step_and_per_sequence_update():
    # PR #42131: ~0.4 ms framework overhead per decode-only step (exposed without async scheduling).
    assert _host_added("vllm-v1", 1) == pytest.approx(0.4e-3, rel=0.01)
    # PR #46112: update_from_output 0.142 ms at 128 running and 0.287 ms at 256.
    assert _host_added("vllm-v1", 256) - _host_added("vllm-v1", 128) == pytest.approx(0.287e-3 - 0.142e-3, rel=0.05)
    # With async scheduling the same host work hides behind an 8B model's step (several ms on the GPU).
    assert _host_added("vllm-v1-async", 1) == 0.0


def test_sglang_overlap_hides_pr_38131s_host_step_until_it_outlasts_the_gpu():
    # PR #38131: overlap off -> on saves ~0.74 ms per batch-1 step.
    assert _step("sglang-no-overlap", 1) - _step("sglang-0.4", 1) == pytest.approx(0.74e-3, rel=0.01)
    # Where the host step outlasts the GPU's (a 0.5B model's batch-1 step is ~1.6 ms on H100; a 3 ms host), the
    # overlapped engine runs at the host's pace, and the engine without overlap pays both.
    o = engine_overheads("sglang-0.4", H100, host_step_us=3000.0)
    gpu = _step("sglang-0.4", 1, TINY, 64, host_step_us=0.0, host_per_seq_us=0.0)
    assert gpu < o.host_s(1) == pytest.approx(_step("sglang-0.4", 1, TINY, 64, host_step_us=3000.0))
    assert _step("sglang-no-overlap", 1, TINY, 64, host_step_us=3000.0) == pytest.approx(gpu + o.host_s(1))


def test_trtllm_pytorch_keeps_issue_13957s_bubble_and_pr_10273s_host_step():
    # #13957: at 64 concurrent the host step (2 ms + 28 us x 64) hides behind an 8B step; ~580 us stays exposed.
    assert _step("trtllm-pytorch", 64) - _step("trtllm", 64) == pytest.approx(580e-6, rel=1e-6)
    o = engine_overheads("trtllm-pytorch", H100)
    assert o.host_s(1536) == pytest.approx(45e-3, rel=0.01)  # PR #10273: a 45 ms host step at batch 1,536
    assert o.host_bubble_s == pytest.approx(580e-6)


def test_every_host_constant_is_cited():
    for kind in ENGINE_KINDS.values():
        for field in ("host_step_us", "host_overlap", "graph_max_batch", "host_bubble_us"):
            if getattr(kind, field):
                assert field in kind.sources, (kind.name, field)


def test_cuda_graph_batches_are_padded_up_to_a_captured_size():
    o = engine_overheads("vllm-v1", H100)
    assert [o.graph_batch(b) for b in (1, 2, 3, 5, 9, 17, 24, 512, 513)] == [1, 2, 4, 8, 16, 24, 24, 512, 513]
    lin = {b: decode_coefficients(LLAMA3_8B, H100, 1, b, overheads=o).intercept for b in (17, 24)}
    assert lin[17] == lin[24]  # batch 17 replays the batch-24 graph


def test_a_batch_above_the_largest_graph_runs_eagerly():
    from rlsim.sim.costs.generation import kernels_per_layer

    o = engine_overheads("sglang-0.4", H100)  # graphs up to 160
    inside = decode_coefficients(LLAMA3_8B, H100, 1, 160, overheads=o)
    beyond = decode_coefficients(LLAMA3_8B, H100, 1, 161, overheads=o)
    launches = LLAMA3_8B.layers * kernels_per_layer(1) * H100.kernel_launch_us * 1e-6
    assert beyond.fixed - inside.fixed == pytest.approx(launches, rel=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    a=st.floats(1e-4, 5e-2), slope=st.floats(0, 1e-6), fixed=st.floats(0, 5e-3), batch=st.integers(1, 512),
    floor=st.floats(0, 0.1), s0=st.floats(0, 1e6), n=st.integers(0, 3000), frac=st.floats(0, 1.2),
)
def test_closed_forms_with_a_host_floor_match_the_step_by_step_sum(a, slope, fixed, batch, floor, s0, n, frac):
    c = DecodeCoefficients(a, slope, fixed, batch, floor)
    brute = sum(c.step_time(s0 + i * batch) for i in range(n))
    assert math.isclose(c.steps_time(s0, n), brute, rel_tol=1e-9, abs_tol=1e-12)
    budget = frac * brute
    k, t_k, t_next = c.steps_split(s0, budget, n)
    assert t_k == c.steps_time(s0, k) and (k == 0 or t_k <= budget)
    assert t_next is None if k == n else (t_next == c.steps_time(s0, k + 1) and t_next > budget)
