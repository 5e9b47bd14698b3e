"""Fit per-GPU efficiency curves to measured operators (`rlsim calibrate ops DIR --gpu NAME`).

Every dense-layer operator row (ops_data.read_dense) is priced by one of two forms:

- a GEMM of M tokens x N outputs x K inputs (per GPU): a smooth roofline
  t = (t_c^q + t_m^q)^(1/q) + t0, with t_c = 2MNK / (P * eta_c(M) * s(NK)) and
  t_m = 2(NK + MK + MN) / (BW * eta_m). eta_c(M) is a curve in log2(tokens), 13 knots from 1 to 4096
  tokens (small-token GEMMs run far below peak), kept smooth by a second-difference penalty;
  s(NK) = 1 / (1 + (w0 / NK)^a) is the shape term (a small per-GPU weight matrix, as at TP 8, fills
  fewer SMs); eta_m is the weight-streaming efficiency and t0 the kernel's fixed cost. One curve per
  operator kind (QKV, O, up, down), fitted on the training models only;
- a memory-bound operator (norms, rope, activation, residual add, embedding) moving E bf16 elements:
  t = t0 + 2E / (BW * eta), solved in closed form.

Fitting is nonlinear least squares on log(predicted / measured) (relative error), soft-L1 loss.
P and BW are the hardware profile's BF16 peak and HBM bandwidth, so every eta is a share of the
datasheet. Collectives (ops_collectives) and MoE/attention/launch rows (ops_extra) are fitted beside.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from rlsim.tools.calibration.ops_data import GEMM_OPS, MEMORY_OPS, DenseRows

KNOTS = np.arange(13.0)  # log2(tokens) of the eta_c(M) curve's knots: 1 ... 4096 tokens
_NK = len(KNOTS)
_SMOOTH = 0.3  # weight of the second-difference penalty on the eta_c knots (in logit units)
_SMALL_ROW_WEIGHT = 0.3  # rows under 10 us still inform the fit, at lower weight (the clock resolves 1 us)
SCORED_MS = 0.01
_STRIDE = 5  # GEMM fits use every fifth training row (the token grid is dense; the fit stays fast)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class GemmCurve:
    """A GEMM kind's fitted efficiency: eta_c knots (share of peak by log2 tokens), shape term, memory side."""

    eta_knots: tuple[float, ...]
    w0: float  # N*K (millions of weights per GPU) at which the shape term halves the compute efficiency
    a: float
    eta_mem: float
    t0_s: float
    q: float

    def eta_compute(self, tokens):
        return np.interp(np.log2(np.maximum(tokens, 1.0)), KNOTS, np.asarray(self.eta_knots))

    def time_ms(self, m, n, k, peak: float, bw: float):
        shape = 1.0 / (1.0 + (self.w0 / (n * k / 1e6)) ** self.a)
        tc = 2.0 * m * n * k / (peak * self.eta_compute(m) * shape)
        tm = 2.0 * (n * k + m * k + m * n) / (bw * self.eta_mem)
        return ((tc**self.q + tm**self.q) ** (1.0 / self.q) + self.t0_s) * 1e3


def _gemm_from(x) -> GemmCurve:
    return GemmCurve(tuple(float(v) for v in _sigmoid(x[:_NK])), float(np.exp(x[_NK])), float(np.exp(x[_NK + 1])),
                     float(_sigmoid(x[_NK + 2])), float(np.exp(x[_NK + 3])), float(np.exp(x[_NK + 4])))


@dataclass(frozen=True)
class MemoryCurve:
    """A memory-bound operator's fitted HBM efficiency and fixed cost: t = t0 + 2E / (BW * eta)."""

    eta: float
    t0_s: float

    def time_ms(self, elements, bw: float):
        return (self.t0_s + 2.0 * elements / (bw * self.eta)) * 1e3


@dataclass(frozen=True)
class DenseFit:
    """Fitted curves of one GPU: one per GEMM kind and one per memory-bound operator."""

    peak_flops: float
    hbm_bytes_per_s: float
    gemm: dict[str, GemmCurve]
    memory: dict[str, MemoryCurve]

    def predict(self, rows: DenseRows) -> np.ndarray:
        out = np.full(len(rows), np.nan)
        for op, curve in self.gemm.items():
            m = rows.op == op
            out[m] = curve.time_ms(rows.tokens[m], rows.n[m], rows.k[m], self.peak_flops, self.hbm_bytes_per_s)
        for op, curve in self.memory.items():
            m = rows.op == op
            out[m] = curve.time_ms(rows.elements[m], self.hbm_bytes_per_s)
        return out


def _weights(measured: np.ndarray) -> np.ndarray:
    return np.where(measured >= SCORED_MS, 1.0, _SMALL_ROW_WEIGHT)


def _fit_gemm(rows: DenseRows, peak: float, bw: float) -> GemmCurve:
    keep = np.arange(len(rows)) % _STRIDE == 0  # every few rows: the token grid is dense, the fit stays seconds
    r = rows.subset(keep)
    m, n, k, y, w = r.tokens, r.n, r.k, r.measured_ms, _weights(r.measured_ms)

    def residuals(x):
        with np.errstate(over="ignore", divide="ignore"):  # trial steps may overflow; least_squares backs off
            t = _gemm_from(x).time_ms(m, n, k, peak, bw)
        return np.concatenate([w * np.log(t / y), _SMOOTH * np.diff(x[:_NK], 2)])

    x0 = np.concatenate([np.full(_NK, 0.5), [np.log(5.0), 0.0, 1.5, np.log(5e-6), np.log(2.0)]])
    return _gemm_from(least_squares(residuals, x0, loss="soft_l1", f_scale=0.05, max_nfev=100).x)


def _fit_memory(rows: DenseRows, bw: float) -> MemoryCurve:
    """Linear in (t0, 1/eta): weighted least squares on relative error, in closed form."""
    y = rows.measured_ms * 1e-3
    w = _weights(rows.measured_ms) / y
    a = np.column_stack([np.ones_like(y), 2.0 * rows.elements / bw]) * w[:, None]
    (t0, inv_eta), *_ = np.linalg.lstsq(a, y * w, rcond=None)
    return MemoryCurve(float(1.0 / max(inv_eta, 1e-6)), float(max(t0, 0.0)))


def fit_dense(rows: DenseRows, peak_flops: float, hbm_bytes_per_s: float) -> DenseFit:
    """Fit every operator kind present in `rows` (pass the training models' rows only)."""
    gemm = {op: _fit_gemm(rows.subset(rows.op == op), peak_flops, hbm_bytes_per_s)
            for op in GEMM_OPS if (rows.op == op).any()}
    memory = {op: _fit_memory(rows.subset(rows.op == op), hbm_bytes_per_s)
              for op in MEMORY_OPS if (rows.op == op).any()}
    return DenseFit(peak_flops, hbm_bytes_per_s, gemm, memory)


def error_stats(measured: np.ndarray, predicted: np.ndarray) -> tuple[float, float, int]:
    """(median, p90) of |predicted/measured - 1| over rows measured at >= 10 us, and how many rows."""
    sel = measured >= SCORED_MS
    if not sel.any():
        return float("nan"), float("nan"), 0
    err = np.abs(predicted[sel] / measured[sel] - 1.0)
    return float(np.median(err)), float(np.percentile(err, 90)), int(sel.sum())
