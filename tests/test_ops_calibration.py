"""`rlsim calibrate ops`: the operator fit re-run on the shipped profile copies, the hardware profiles' values
checked against it, and the 70B TP8 decode step checked against the sum of its measured operators."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rlsim.sim.costs.engine_kinds import engine_overheads
from rlsim.sim.costs.generation import DecodeCoefficients, decode_coefficients, kernels_per_layer
from rlsim.sim.hardware import load_profile
from rlsim.sim.model_shapes import ModelShape, resolve_preset
from rlsim.tools.calibration import ops_data
from rlsim.tools.calibration.ops_run import CSV_COLUMNS, GPU_PROFILES, run_ops
from rlsim.tools.cli import app

OPS = Path(__file__).resolve().parent.parent / "hardware_profiles" / "operators"
HELD = ("Llama-2-70b-hf", "Qwen-72B")


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    out = {}
    for gpu in ("a100", "h100"):
        hw = load_profile(GPU_PROFILES[gpu])
        out[gpu] = run_ops(OPS / "vidur", gpu, HELD, hw.peak_flops, hw.hbm_bytes_per_s,
                           tmp_path_factory.mktemp(gpu))
    return out


@pytest.mark.slow
def test_held_out_error(fits):
    # both GPUs meet the target on the held-out 70B/72B models: <= 5% median, <= 15% p90 |error| (rows >= 10 us)
    a, h = fits["a100"], fits["h100"]
    assert a.held_rows > 10000 and h.held_rows > 10000
    assert a.held_median <= 0.05 and a.held_p90 <= 0.15
    assert h.held_median <= 0.05 and h.held_p90 <= 0.15
    # and generalise: the held-out models are predicted about as well as the training ones
    for r in (a, h):
        assert r.held_median < r.train_median + 0.01 and r.held_p90 < r.train_p90 + 0.02


@pytest.mark.slow
def test_layer_norm_knee_and_wave_steps(fits):
    """The two structures the fit models: a memory-bound operator runs faster per byte while its operands fit
    on chip, and a GEMM's time steps up where one more row of tiles opens a new wave."""
    h = fits["h100"].dense
    norm = h.memory["input_layernorm"]
    small, large = 2 * 256 * 8192, 2 * 4096 * 8192  # elements of a 70B norm at 256 and 4,096 tokens
    per_byte = [float(norm.time_ms(e, h.hbm_bytes_per_s) - norm.t0_s * 1e3) / e for e in (small, large)]
    assert per_byte[1] > 1.3 * per_byte[0]
    down = h.gemm["mlp_down_proj"]
    t = {m: float(down.time_ms(m, 8192.0, 28672.0, h.peak_flops, h.hbm_bytes_per_s, h.sms)) for m in (512, 528)}
    assert t[528] > 1.15 * t[512] * 528 / 512  # a second, nearly empty wave at 528 tokens (measured: 2.8x)


def test_wave_utilisation():
    from rlsim.tools.calibration.ops_fit import wave_utilisation

    # 512 x 8192 is 128 tiles of 128 x 256: one full wave on 132 SMs; 528 tokens need a second, nearly empty one
    assert wave_utilisation(512.0, 8192.0, 132) == pytest.approx(128 / 132)
    assert wave_utilisation(528.0, 8192.0, 132) == pytest.approx(0.5, abs=0.01)
    m = np.arange(1.0, 4097.0)
    u = wave_utilisation(m, 8192.0, 132)
    assert ((u > 0) & (u <= 1)).all() and u[-1] > 0.95  # large GEMMs run in many waves: the last matters little


@pytest.mark.slow
@pytest.mark.parametrize("profile, gpu", [("a100-80gb", "a100"), ("h100-sxm", "h100"), ("h800", "h100")])
def test_shipped_values_come_from_the_fit(fits, profile, gpu):
    hw = load_profile(profile)
    for name, value in fits[gpu].profile_values().items():
        assert getattr(hw, name) == pytest.approx(value, rel=0.02, abs=0.05), name
        assert "calibrate ops" in hw.sources[name]
    ar = next(c for c in fits[gpu].collectives if c.kind == "all_reduce" and c.workers == 8 and c.per_node == 8)
    assert hw.collective_latency_us * 14 == pytest.approx(ar.latency_us, rel=0.03)


def test_launch_cost_from_frontier():
    us = pytest.importorskip("rlsim.tools.calibration.ops_run").launch_cost_us(OPS / "frontier", "h800")
    assert us == pytest.approx(load_profile("h800").kernel_launch_us, abs=0.01)
    assert 1.0 < us < 10.0  # a CUDA launch plus PyTorch dispatch is a few microseconds


def _fitted_allreduce_ms(gpu: str, size: float) -> float:
    rows = ops_data.read_collectives(OPS / "vidur", gpu)
    from rlsim.tools.calibration.ops_run import fit_collectives

    fit = next(c for c in fit_collectives(rows)[0]
               if c.kind == "all_reduce" and c.topology == f"{gpu}_dgx" and c.workers == 8 and c.per_node == 8)
    return (fit.latency_us * 1e-6 + size / (fit.bandwidth_gb_per_s * 1e9)) * 1e3


@pytest.mark.parametrize("gpu, profile", [("h100", "h100-sxm"), ("a100", "a100-80gb")])
def test_70b_tp8_decode_matches_its_operators(gpu, profile):
    """The GPU part of a Llama-2-70B TP8 decode step (NCCL all-reduces, no engine overheads) is within 10%
    of the sum of its measured operator rows plus two fitted all-reduces per layer, at batch 1 to 64."""
    rows = ops_data.read_dense(OPS / "vidur", gpu)
    hw, model = load_profile(profile), ModelShape(**resolve_preset("llama-2-70b"))
    for batch in (1, 2, 4, 8, 16, 32, 64):
        sel = (rows.model == "Llama-2-70b-hf") & (rows.tp == 8) & (rows.tokens == batch)
        per_op = {op: np.median(rows.measured_ms[sel & (rows.op == op)]) for op in set(rows.op[sel])}
        layer = sum(t for op, t in per_op.items() if op != "emb")
        measured = model.layers * (layer + 2 * _fitted_allreduce_ms(gpu, batch * model.hidden * 2.0)) + per_op["emb"]
        c = decode_coefficients(model, hw, 8, batch, overheads=engine_overheads("generic", hw))
        simulated = (c.intercept + c.slope * batch * 64) * 1e3  # 64 tokens of context each
        assert simulated == pytest.approx(measured, rel=0.10), (batch, simulated, measured)


def test_eager_engine_pays_every_kernel_launch_per_layer():
    hw = load_profile("h100-sxm")
    m70, m8 = ModelShape(**resolve_preset("llama-2-70b")), ModelShape(**resolve_preset("llama-3-8b"))
    for model, tp in ((m70, 8), (m8, 1)):
        graphs = decode_coefficients(model, hw, tp, 8, overheads=engine_overheads("vllm-0.6", hw))
        eager = decode_coefficients(model, hw, tp, 8, overheads=engine_overheads("vllm-0.6", hw, cuda_graphs=False))
        extra = eager.fixed - graphs.fixed
        assert extra == pytest.approx(model.layers * kernels_per_layer(tp) * hw.kernel_launch_us * 1e-6)
    # 80 layers at TP8 pay 2.9x what 32 layers at TP1 pay: eager cost grows with layers and TP collectives
    assert kernels_per_layer(8) * 80 / (kernels_per_layer(1) * 32) == pytest.approx(2.92, abs=0.01)


def test_steps_split_agrees_with_steps_time():
    c = DecodeCoefficients(intercept=0.01, slope=3e-8, fixed=0.002, batch=16)
    for budget in (0.05, 0.5, 3.0):
        n, t_n, t_next = c.steps_split(1000.0, budget, 500)
        assert t_n == c.steps_time(1000.0, n) <= budget
        assert t_next is None or t_next == c.steps_time(1000.0, n + 1) > budget


@pytest.mark.slow
def test_cli_writes_ops_fit_csv(tmp_path):
    res = CliRunner().invoke(app, ["calibrate", "ops", str(OPS / "vidur"), "--gpu", "a100",
                                   "--hold-out-models", "Llama-2-70b-hf", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "held-out models: median |error|" in res.output
    with (tmp_path / "ops_fit.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == CSV_COLUMNS
    held = [r for r in rows if r["held_out"] == "True"]
    assert held and all(r["model"] == "Llama-2-70b-hf" for r in held)


@pytest.mark.parametrize("args, message", [
    (["calibrate", "ops", "/nonexistent-dir", "--gpu", "h100"], "not a folder"),
    (["calibrate", "ops", str(OPS / "vidur"), "--gpu", "tpu"], "unknown"),
    (["calibrate", "ops", str(OPS / "vidur"), "--gpu", "h100", "--hold-out-models", "GPT-5"], "no rows for GPT-5"),
])
def test_cli_bad_input_is_one_line(args, message):
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output


def test_moe_layer_cost_from_frontier_profiles():
    from rlsim.tools.calibration.ops_moe import fit_moe, kernel_only_layer_us

    us = kernel_only_layer_us(OPS / "frontier" / "compute" / "h800" / "Qwen3-30B-A3B-tiny" / "moe_kernel_only.csv")
    for profile in ("a100-80gb", "h100-sxm", "h800"):
        assert load_profile(profile).moe_layer_fixed_us == pytest.approx(us, abs=0.1)
    # the grouped GEMM streams each touched expert's weights: a fixed cost plus a read at a plausible efficiency
    fit = fit_moe(OPS / "frontier" / "compute" / "a800" / "qwen3-a3b-30b-moe" / "moe.csv", 2.039e12)
    assert 0.3 < fit.expert_eta_mem <= 1.0 and fit.grouped_gemm_fixed_us > 0
    # an MoE decode step pays it once per layer on top of the touched experts' reads
    hw, m = load_profile("h100-sxm"), ModelShape(**resolve_preset("qwen3-30b-a3b"))
    bare = hw.model_copy(update={"moe_layer_fixed_us": None})
    o = engine_overheads("vllm-0.6", hw)
    with_moe = decode_coefficients(m, hw, 1, 4, overheads=o).intercept
    extra = with_moe - decode_coefficients(m, bare, 1, 4, overheads=o).intercept
    assert extra == pytest.approx(m.layers * hw.moe_layer_fixed_us * 1e-6)


@pytest.mark.parametrize(("csv_path", "profiles"), [
    ("h800/Llama-3.1-405B-Instruct-FP8/attention_kernel_only.csv", ("h100-sxm", "h800", "h20", "h200", "b200")),
    ("a800/meta-llama/Llama-2-7b-hf/attention.csv", ("a100-80gb", "a30", "l40s")),
])
def test_decode_attention_fixed_cost_from_frontier_profiles(csv_path, profiles):
    from rlsim.tools.calibration.ops_attention import fit_decode_attention

    fit = fit_decode_attention(OPS / "frontier" / "compute" / csv_path)
    assert fit.rows > 500 and fit.median_error < 0.2  # a fixed cost plus the KV read describes the kernel
    assert 5.0 < fit.decode_fixed_us < 20.0 and 1.0 < fit.kv_write_us < 10.0
    for profile in profiles:
        assert load_profile(profile).attention_fixed_us == pytest.approx(fit.layer_fixed_us, abs=0.01)
    # a decode step pays it once per layer, whatever the batch: the step's fixed part, not its per-token slope
    hw = load_profile(profiles[0])
    m = ModelShape(**resolve_preset("llama-3-8b"))
    bare = hw.model_copy(update={"attention_fixed_us": None})
    o = engine_overheads("vllm-0.6", hw)
    for batch in (1, 64):
        with_attn, without = decode_coefficients(m, hw, 1, batch, overheads=o), decode_coefficients(m, bare, 1, batch,
                                                                                                   overheads=o)
        assert with_attn.fixed - without.fixed == pytest.approx(m.layers * hw.attention_fixed_us * 1e-6)
        assert with_attn.slope == without.slope and with_attn.intercept == without.intercept


def test_grouped_differences_are_scipys_sparse_jacobian_exactly():
    """The GEMM fit's own Jacobian is least_squares' jac="2-point" with jac_sparsity, bit for bit (the fit's
    values must not move with the speed-up), and takes the residual at the point from the last evaluation."""
    from scipy.optimize._numdiff import approx_derivative, group_columns

    from rlsim.tools.calibration.ops_fit import _NS, _gemm_sparsity, _GroupedDifferences, _surface_penalty

    rng = np.random.default_rng(3)
    m, n = 2.0 ** rng.uniform(0, 12, 40), 2.0 ** rng.uniform(10, 16, 40)
    pen, pen_idx = _surface_penalty()
    a = rng.normal(size=(40, 4))

    def residuals(x):
        calls.append(1)
        return np.concatenate([np.sin(x[:_NS][:40] * 3) * np.exp(x[_NS:] @ a.T / 7), pen @ x[:_NS]])

    calls = []
    sparsity = _gemm_sparsity(m, n, pen_idx)
    jac = _GroupedDifferences(residuals, sparsity)
    x = rng.normal(size=_NS + 4) * 5
    f = jac.residuals(x)
    ours = jac(x)
    theirs = approx_derivative(residuals, x, method="2-point", f0=f, sparsity=(sparsity, group_columns(sparsity)))
    assert ours.shape == theirs.shape
    assert np.array_equal(ours.indptr, theirs.indptr) and np.array_equal(ours.indices, theirs.indices)
    assert ours.data.tobytes() == theirs.data.tobytes()
    groups = int(np.max(group_columns(sparsity))) + 1
    calls.clear()
    jac(x)
    assert len(calls) == groups  # f0 reused: one evaluation per group of columns
    calls.clear()
    jac(x + 1)
    assert len(calls) == groups + 1  # at another point, f0 is evaluated


def test_gemm_fit_reuses_a_fit_of_the_same_rows_and_keeps_a_few(monkeypatch):
    """The same rows on the same GPU take the curve already fitted; other rows or another GPU fit anew; the
    memory holds the last few fits only."""
    from rlsim.tools.calibration import ops_fit

    fitted = []
    monkeypatch.setattr(ops_fit, "_fit_gemm_rows", lambda r, peak, bw, sms: fitted.append(r) or object())
    monkeypatch.setattr(ops_fit, "_FITTED", type(ops_fit._FITTED)())

    def rows(scale: float) -> ops_data.DenseRows:
        t = np.arange(1.0, 21.0)
        return ops_data.DenseRows(np.full(20, "m"), np.full(20, "mlp_up_proj"), np.ones(20), t, t * scale,
                                  np.full(20, 4096.0), np.full(20, 1024.0), np.zeros(20))

    first = ops_fit._fit_gemm(rows(1.0), 1e15, 3e12, 132)
    assert ops_fit._fit_gemm(rows(1.0), 1e15, 3e12, 132) is first and len(fitted) == 1
    assert ops_fit._fit_gemm(rows(2.0), 1e15, 3e12, 132) is not first  # another measurement
    assert ops_fit._fit_gemm(rows(1.0), 1e15, 3e12, 114) is not first  # another GPU
    assert len(fitted) == 3 and len(fitted[0]) == 4  # every fifth row is fitted
    for i in range(ops_fit._FITTED_MAX + 5):
        ops_fit._fit_gemm(rows(3.0 + i), 1e15, 3e12, 132)
    assert len(ops_fit._FITTED) == ops_fit._FITTED_MAX
    assert ops_fit._fit_gemm(rows(1.0), 1e15, 3e12, 132) is not first  # forgotten: fitted again
