"""Fit per-GPU efficiency curves to measured operators (`rlsim calibrate ops DIR --gpu NAME`).

Every dense-layer operator row (ops_data.read_dense) is priced by one of two forms:

- a GEMM of M tokens x N outputs x K inputs (per GPU): a smooth roofline
  t = (t_c^q + t_m^q)^(1/q) + t0, with t_c = 2MNK / (P * eta_c(M, N) * u(M, N)^beta) and
  t_m = 2(NK + MK + MN) / (BW * eta_m).
  u(M, N) is the wave quantization: the output is cut into tiles, each SM computes one tile at a time, so
  a GEMM runs in whole waves of `sms` tiles and its last wave may leave SMs idle. u is the share of the
  SM-time the best of a few cuBLAS-like tilings (64x128 ... 256x128, a tile's efficiency scaling with its
  arithmetic intensity) spends on useful work: it drops in steps where one more row of tiles starts a new
  wave. eta_c(M, N) is what remains, the efficiency of full waves: a surface over log2(tokens) (knots every
  octave to 256 tokens, every quarter octave above, where kernel selection changes) and log2(N) (knots
  every octave, 1,024 to 65,536 outputs), kept smooth by second-difference penalties along both. Time is
  linear in K at fixed (M, N), as measured (the reduction dimension changes neither the tiling nor, much,
  the kernel). eta_m is the weight-streaming efficiency, t0 the kernel's fixed cost. One surface per
  operator kind (QKV, O, up, down), fitted on the training models only.
- a memory-bound operator (norms, rope, activation, residual add, embedding) moving B = 2E bytes:
  t = t0 + B/BW * (f/eta + (1 - f)/eta_cache), f = 1 / (1 + (B_knee / B)^p). Below the knee (about the
  L2 cache's size) the operands stay on chip and run at eta_cache of the HBM bandwidth; above it they
  stream from HBM at eta. That is the norms' knee: flat at small token counts, linear above.

Fitting is nonlinear least squares on log(predicted / measured) (relative error), soft-L1 loss.
P and BW are the hardware profile's BF16 peak and HBM bandwidth, so every eta is a share of the
datasheet. Collectives (ops_collectives) and MoE/attention/launch rows (ops_extra) are fitted beside.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from scipy.optimize._numdiff import group_columns
from scipy.sparse import csr_matrix, find, lil_matrix

from rlsim.tools.calibration.ops_data import GEMM_OPS, MEMORY_OPS, DenseRows

# log2(tokens) and log2(N) of the eta_c(M, N) surface's knots: 1 ... 4096 tokens, 1024 ... 65536 outputs.
KNOTS_M = np.concatenate([np.arange(0.0, 8.0), np.arange(8.0, 12.0 + 1e-9, 0.25)])
KNOTS_N = np.arange(10.0, 17.0)
_NM, _NN = len(KNOTS_M), len(KNOTS_N)
_NS = _NM * _NN
# Output tilings a GEMM library picks from (rows x columns of the output per thread block).
TILES = ((64, 128), (128, 128), (128, 256), (256, 128))
_SMOOTH = 0.3  # weight of the second-difference penalties on the eta_c surface (in logit units)
_SMALL_ROW_WEIGHT = 0.3  # rows under 10 us still inform the fit, at lower weight (the clock resolves 1 us)
SCORED_MS = 0.01
_STRIDE = 5  # GEMM fits use every fifth training row (the token grid is dense; the fit stays fast)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def wave_utilisation(m, n, sms: int):
    """Share of SM-time doing useful work for an M x N output cut into the best of `TILES` and run in whole
    waves of `sms` tiles (1: every wave full; a tile's speed scales with its arithmetic intensity)."""
    best = None
    for tm, tn in TILES:
        speed = (tm * tn / (tm + tn)) / (128 * 256 / 384)
        cost = np.ceil(np.ceil(m / tm) * np.ceil(n / tn) / sms) * tm * tn / speed
        best = cost if best is None else np.minimum(best, cost)
    return np.minimum(m * n / sms / best, 1.0)


def _corners(tokens, n):
    """Bilinear interpolation on the surface: the 4 knot indices (flat) and weights of each (M, N)."""
    lm, ln = np.log2(np.maximum(tokens, 1.0)), np.log2(np.maximum(n, 1.0))
    i = np.clip(np.searchsorted(KNOTS_M, lm) - 1, 0, _NM - 2)
    j = np.clip(np.searchsorted(KNOTS_N, ln) - 1, 0, _NN - 2)
    fi = np.clip((lm - KNOTS_M[i]) / (KNOTS_M[i + 1] - KNOTS_M[i]), 0.0, 1.0)
    fj = np.clip((ln - KNOTS_N[j]) / (KNOTS_N[j + 1] - KNOTS_N[j]), 0.0, 1.0)
    idx = [i * _NN + j, (i + 1) * _NN + j, i * _NN + j + 1, (i + 1) * _NN + j + 1]
    w = [(1 - fi) * (1 - fj), fi * (1 - fj), (1 - fi) * fj, fi * fj]
    return idx, w


@dataclass(frozen=True)
class GemmCurve:
    """A GEMM kind's fitted efficiency: the full-wave eta_c(M, N) surface, wave exponent, memory side."""

    eta_surface: tuple[float, ...]  # eta_c at KNOTS_M x KNOTS_N, row-major
    beta: float  # exponent of the wave utilisation (1: a partial wave costs a full one)
    eta_mem: float
    t0_s: float
    q: float

    def eta_full_waves(self, tokens, n):
        idx, w = _corners(np.asarray(tokens, dtype=float), np.asarray(n, dtype=float))
        s = np.asarray(self.eta_surface)
        return sum(s[i] * wi for i, wi in zip(idx, w, strict=True))

    def eta_compute(self, tokens, n, sms: int):
        """Achieved share of peak of the GEMM's compute at (tokens, N): full-wave efficiency x wave utilisation."""
        return self.eta_full_waves(tokens, n) * wave_utilisation(tokens, n, sms) ** self.beta

    def time_ms(self, m, n, k, peak: float, bw: float, sms: int):
        tc = 2.0 * m * n * k / (peak * self.eta_compute(m, n, sms))
        tm = 2.0 * (n * k + m * k + m * n) / (bw * self.eta_mem)
        return ((tc**self.q + tm**self.q) ** (1.0 / self.q) + self.t0_s) * 1e3


def _gemm_from(x) -> GemmCurve:
    return GemmCurve(tuple(float(v) for v in _sigmoid(x[:_NS])), float(_sigmoid(x[_NS])),
                     float(_sigmoid(x[_NS + 1])), float(np.exp(x[_NS + 2])), float(np.exp(x[_NS + 3])))


@dataclass(frozen=True)
class MemoryCurve:
    """A memory-bound operator: fixed cost, then its bytes at the on-chip (below the knee) or HBM efficiency."""

    eta: float  # share of HBM bandwidth once the operands no longer fit on chip
    eta_cache: float  # the same below the knee (operands served from L2, which may beat HBM: can pass 1)
    t0_s: float
    knee_bytes: float
    p: float  # sharpness of the knee

    def time_ms(self, elements, bw: float):
        b = 2.0 * np.asarray(elements, dtype=float)
        f = 1.0 / (1.0 + (self.knee_bytes / np.maximum(b, 1.0)) ** self.p)
        return (self.t0_s + b / bw * (f / self.eta + (1.0 - f) / self.eta_cache)) * 1e3


@dataclass(frozen=True)
class DenseFit:
    """Fitted curves of one GPU: one per GEMM kind and one per memory-bound operator."""

    peak_flops: float
    hbm_bytes_per_s: float
    sms: int
    gemm: dict[str, GemmCurve]
    memory: dict[str, MemoryCurve]
    shapes: dict[str, tuple[float, ...]]  # each GEMM kind's output widths N in the training rows

    def eta_compute(self, op: str, tokens: float) -> float:
        """A GEMM kind's achieved share of peak at `tokens`: the median over its training shapes (N)."""
        return float(np.median(self.gemm[op].eta_compute(tokens, np.asarray(self.shapes[op]), self.sms)))

    def predict(self, rows: DenseRows) -> np.ndarray:
        out = np.full(len(rows), np.nan)
        for op, curve in self.gemm.items():
            m = rows.op == op
            out[m] = curve.time_ms(rows.tokens[m], rows.n[m], rows.k[m], self.peak_flops, self.hbm_bytes_per_s,
                                   self.sms)
        for op, curve in self.memory.items():
            m = rows.op == op
            out[m] = curve.time_ms(rows.elements[m], self.hbm_bytes_per_s)
        return out


def _weights(measured: np.ndarray) -> np.ndarray:
    return np.where(measured >= SCORED_MS, 1.0, _SMALL_ROW_WEIGHT)


def _surface_penalty() -> tuple[np.ndarray, np.ndarray]:
    """Second differences of the surface along M and along N: (matrix rows x surface, their knot indices)."""
    grid = np.arange(_NS).reshape(_NM, _NN)
    along_m = [grid[i:i + 3, j] for i in range(_NM - 2) for j in range(_NN)]
    along_n = [grid[i, j:j + 3] for i in range(_NM) for j in range(_NN - 2)]
    idx = np.asarray(along_m + along_n)
    d = np.zeros((len(idx), _NS))
    for r, cols in enumerate(idx):
        d[r, cols] = (1.0, -2.0, 1.0)
    return d, idx


def _gemm_sparsity(m, n, pen_idx) -> lil_matrix:
    """Which parameters each residual depends on (its 4 surface corners and the globals; a penalty its 3 knots):
    finite differences then take a few grouped evaluations per Jacobian instead of one per parameter."""
    rows = len(m)
    s = lil_matrix((rows + len(pen_idx), _NS + 4), dtype=int)
    for col in _corners(m, n)[0]:
        s[np.arange(rows), col] = 1
    s[:rows, _NS:] = 1
    for r, cols in enumerate(pen_idx):
        s[rows + r, cols] = 1
    return s


class _GroupedDifferences:
    """The Jacobian of `fun` by forward differences over groups of columns that share no row of `sparsity` (what
    least_squares does with jac="2-point" and jac_sparsity, the same steps and the same operations, so the same
    matrix), with the pattern's indices found once rather than per call, and the residual at the current point
    taken from the last call of `residuals` rather than computed again."""

    _STEP = np.finfo(np.float64).eps ** 0.5  # scipy's relative step for 2-point differences

    def __init__(self, fun, sparsity: lil_matrix):
        self.fun = fun
        self.shape = sparsity.shape
        groups = group_columns(sparsity)
        structure = sparsity.tocsc()
        self.masks, rows, cols = [], [], []
        for group in range(np.max(groups) + 1):
            mask = np.equal(group, groups)
            (members,) = np.nonzero(mask)
            i, j, _ = find(structure[:, members])
            self.masks.append(mask)
            rows.append(i)
            cols.append(members[j])
        self.parts = list(zip(rows, cols, strict=True))
        self.rows, self.cols = np.hstack(rows), np.hstack(cols)
        self.last: tuple[bytes, np.ndarray] | None = None

    def residuals(self, x):
        f = self.fun(x)
        self.last = (x.tobytes(), f)
        return f

    def __call__(self, x):
        f0 = self.last[1] if self.last is not None and self.last[0] == x.tobytes() else self.fun(x)
        h = self._STEP * ((x >= 0).astype(float) * 2 - 1) * np.maximum(1.0, np.abs(x))
        fractions = []
        for mask, (i, j) in zip(self.masks, self.parts, strict=True):
            moved = x + h * mask
            df = self.fun(moved) - f0
            fractions.append(df[i] / (moved - x)[j])
        return csr_matrix((np.hstack(fractions), (self.rows, self.cols)), shape=self.shape)


_FITTED: OrderedDict[tuple, GemmCurve] = OrderedDict()  # the last few GEMM fits by their rows (each takes seconds)
_FITTED_MAX = 16


def _fit_gemm(rows: DenseRows, peak: float, bw: float, sms: int) -> GemmCurve:
    """A GEMM kind's curve; the same rows on the same GPU again (another hold-out of other kinds, a rerun in one
    process) take the curve already fitted, which is deterministic."""
    keep = np.arange(len(rows)) % _STRIDE == 0  # every few rows: the token grid is dense, the fit stays seconds
    r = rows.subset(keep)
    key = (r.tokens.tobytes(), r.n.tobytes(), r.k.tobytes(), r.measured_ms.tobytes(), peak, bw, sms)
    if key in _FITTED:
        _FITTED.move_to_end(key)
        return _FITTED[key]
    curve = _FITTED[key] = _fit_gemm_rows(r, peak, bw, sms)
    if len(_FITTED) > _FITTED_MAX:
        _FITTED.popitem(last=False)
    return curve


def _fit_gemm_rows(r: DenseRows, peak: float, bw: float, sms: int) -> GemmCurve:
    m, n, k, y, w = r.tokens, r.n, r.k, r.measured_ms, _weights(r.measured_ms)
    pen, pen_idx = _surface_penalty()
    # GemmCurve.time_ms with what does not depend on the parameters computed once (the same operations in the
    # same order, so the same numbers): the surface corners, the wave utilisation, the FLOPs and bytes.
    idx, wts = _corners(m, n)
    util = wave_utilisation(m, n, sms)
    flops, moved = 2.0 * m * n * k, 2.0 * (n * k + m * k + m * n)

    def residuals(x):
        with np.errstate(over="ignore", divide="ignore"):  # trial steps may overflow; least_squares backs off
            s = _sigmoid(x[:_NS])
            beta, eta_mem = float(_sigmoid(x[_NS])), float(_sigmoid(x[_NS + 1]))
            t0, q = float(np.exp(x[_NS + 2])), float(np.exp(x[_NS + 3]))
            eta = sum(s[i] * wi for i, wi in zip(idx, wts, strict=True)) * util**beta
            tc, tm = flops / (peak * eta), moved / (bw * eta_mem)
            t = ((tc**q + tm**q) ** (1.0 / q) + t0) * 1e3
        return np.concatenate([w * np.log(t / y), _SMOOTH * (pen @ x[:_NS])])

    x0 = np.concatenate([np.full(_NS, 0.5), [0.0, 1.5, np.log(5e-6), np.log(2.0)]])
    jac = _GroupedDifferences(residuals, _gemm_sparsity(m, n, pen_idx))
    fit = least_squares(jac.residuals, x0, jac=jac, loss="soft_l1", f_scale=0.05, max_nfev=100, tr_solver="lsmr")
    return _gemm_from(fit.x)


def _fit_memory(rows: DenseRows, bw: float, cache_bytes: float) -> MemoryCurve:
    """Five parameters on relative error; the knee within a factor 8 of the L2 cache's size (the on-chip efficiency
    may pass 1: L2 serves more bytes per second than HBM)."""
    y, w = rows.measured_ms, _weights(rows.measured_ms)

    def curve(x) -> MemoryCurve:
        return MemoryCurve(float(_sigmoid(x[1])), float(np.exp(x[2])), float(np.exp(x[0])),
                           float(cache_bytes * np.exp(x[3])), float(np.exp(x[4])))

    def residuals(x):
        with np.errstate(over="ignore", divide="ignore"):
            return w * np.log(curve(x).time_ms(rows.elements, bw) / y)

    lo = [-np.inf, -np.inf, np.log(0.05), -np.log(8.0), np.log(0.5)]
    hi = [np.inf, np.inf, np.log(10.0), np.log(8.0), np.log(20.0)]
    x0 = np.array([np.log(2e-6), 0.0, np.log(0.7), 0.0, np.log(2.0)])
    return curve(least_squares(residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.05, max_nfev=200).x)


def fit_dense(rows: DenseRows, peak_flops: float, hbm_bytes_per_s: float, sms: int, cache_bytes: float) -> DenseFit:
    """Fit every operator kind present in `rows` (pass the training models' rows only) on a GPU with `sms`
    streaming multiprocessors and an L2 cache of `cache_bytes`."""
    gemm = {op: _fit_gemm(rows.subset(rows.op == op), peak_flops, hbm_bytes_per_s, sms)
            for op in GEMM_OPS if (rows.op == op).any()}
    memory = {op: _fit_memory(rows.subset(rows.op == op), hbm_bytes_per_s, cache_bytes)
              for op in MEMORY_OPS if (rows.op == op).any()}
    shapes = {op: tuple(float(v) for v in np.unique(rows.n[rows.op == op])) for op in gemm}
    return DenseFit(peak_flops, hbm_bytes_per_s, sms, gemm, memory, shapes)


def error_stats(measured: np.ndarray, predicted: np.ndarray) -> tuple[float, float, int]:
    """(median, p90) of |predicted/measured - 1| over rows measured at >= 10 us, and how many rows (rows of an
    operator kind the training rows lack have no prediction and are not scored)."""
    sel = (measured >= SCORED_MS) & np.isfinite(predicted)
    if not sel.any():
        return float("nan"), float("nan"), 0
    err = np.abs(predicted[sel] / measured[sel] - 1.0)
    return float(np.median(err)), float(np.percentile(err, 90)), int(sel.sum())
