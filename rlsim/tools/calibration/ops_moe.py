"""MoE layer fit (Frontier's `moe.csv`): what an MoE layer costs beyond reading its touched experts.

At T tokens with top-k routing over E experts, T*k/E tokens reach each expert on average and
E * (1 - (1 - k/E)^T) experts are touched. The grouped expert GEMM is priced as
t = T0 + touched * expert_bytes / (BW * eta_e): a fixed cost T0 of the grouped kernel(s) plus each touched
expert's weights streamed at efficiency eta_e; fitted by linear least squares on relative error over
the rows at <= 256 tokens (where the weight read dominates). Gating (router linear), top-k routing and
the token shuffle are per-layer costs, taken as their medians at <= 64 tokens. `fit_moe` reads only the
rows at TP 1 and expert parallelism 1.

`fit_grouped_gemm` fits the grouped GEMM of one device across expert and tensor parallelism (every row of
the file): t = t0 [+ c * touched] + hypot(read / (BW * eta_mem), flops / (peak * eta_compute)), read = the
touched experts' weights on the device, flops = its routed token copies x 2 x 3 x hidden x ffn / tp. Each
row is a kernel shape: E / ep experts of width ffn / tp and `total_routed_tokens` copies (read as E / ep
whole experts, EP 8 TP 8 at 4,096 tokens would run 309 GFLOP in 0.54 ms, 1.8x the A800's peak).
The per-expert term c is optional: fitted, it comes out at 0.07 us and changes no error (docs/operators.md,
"MoE layers"), so the profiles carry the form without it.
`fit_routing` fits gating + top-k + shuffle as a fixed plus a per-token term.
A fit whose rows the file lacks (a GPU profiled at EP 1/2/4 only, a header-only file) raises `MissingRows`
naming them; `moe_summary` prints that as the fit's line ("skipped: ...") and goes on with the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlsim.sim.costs import grouped_gemm_work, touched_fraction
from rlsim.tools.calibration.ops_data import OpsDataError, read_header, read_table

_PARTS = ("moe_gating_linear", "moe_gating_routing_topk", "moe_shuffling")


class MissingRows(OpsDataError):
    """A fit the file has not the rows for (the message names them)."""


@dataclass(frozen=True)
class MoeFit:
    grouped_gemm_fixed_us: float
    expert_eta_mem: float
    gating_routing_shuffle_us: float
    rows: int
    median_error: float

    @property
    def layer_fixed_us(self) -> float:
        """An MoE layer's fixed cost beyond its expert weight reads: grouped-GEMM T0 + gating + routing + shuffle."""
        return self.grouped_gemm_fixed_us + self.gating_routing_shuffle_us


BF16_BYTES = 2.0  # Frontier's MoE rows run bf16 weights


def touched_experts(tokens, experts, top_k):
    """Experts a batch of `tokens` touches: the simulator's rule (costs/moe.py `touched_fraction`) x experts."""
    return experts * touched_fraction(tokens, experts, top_k)


def fit_moe(path: Path, hbm_bytes_per_s: float) -> MoeFit:
    cols = ("num_tokens", "num_experts", "router_topk", "hidden_dim", "expert_hidden_dim",
            "time_stats.moe_grouped_gemm.median")
    t = read_table(path, (*cols, "num_tensor_parallel_workers", "expert_parallel_size"))
    single = (t["num_tensor_parallel_workers"] == 1) & (t["expert_parallel_size"] == 1)
    t = {c: v[single] for c, v in t.items()}
    sel = t["num_tokens"] <= 256
    tokens, e, k = t["num_tokens"][sel], t["num_experts"][sel], t["router_topk"][sel]
    y = t["time_stats.moe_grouped_gemm.median"][sel] * 1e-3
    read, _ = grouped_gemm_work(touched_experts(tokens, e, k), tokens * k, t["hidden_dim"][sel],
                                t["expert_hidden_dim"][sel], BF16_BYTES)
    x = read / hbm_bytes_per_s
    a = np.column_stack([np.ones_like(y), x]) / y[:, None]
    (t0, inv_eta), *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
    pred = t0 + inv_eta * x
    parts = 0.0
    for name in _PARTS:
        p = read_table(path, ("num_tokens", f"time_stats.{name}.median", "num_tensor_parallel_workers",
                              "expert_parallel_size"))
        small = (p["num_tokens"] <= 64) & (p["num_tensor_parallel_workers"] == 1) & (p["expert_parallel_size"] == 1)
        if small.any():
            parts += float(np.median(p[f"time_stats.{name}.median"][small])) * 1e3
    return MoeFit(float(t0) * 1e6, float(1.0 / inv_eta), parts, int(sel.sum()),
                  float(np.median(np.abs(pred / y - 1.0))))


def kernel_only_layer_us(path: Path) -> float:
    """An MoE layer's GPU time beyond its expert weight reads: the kernel-only medians at <= 64 tokens of the
    gating linear, top-k routing, token shuffle and grouped GEMM of a tiny MoE (whose grouped GEMM is nearly
    all fixed cost), summed (Frontier's `moe_kernel_only.csv`)."""
    total = 0.0
    for name in (*_PARTS, "moe_grouped_gemm"):
        p = read_table(path, ("num_tokens", f"time_stats.{name}.median"))
        small = p["num_tokens"] <= 64
        total += float(np.median(p[f"time_stats.{name}.median"][small])) * 1e3
    return total


_GEMM_COLS = ("num_tokens", "num_experts_per_device", "expert_parallel_size", "num_tensor_parallel_workers",
              "hidden_dim", "expert_hidden_dim", "total_routed_tokens", "expert_utilization",
              "time_stats.moe_grouped_gemm.median")
MIN_FIT_SECONDS = 10e-6  # errors are reported over rows of at least 10 us


@dataclass(frozen=True)
class GroupedGemmFit:
    """t = fixed_us + per_expert_us x touched + hypot(read / (BW eta_mem), flops / (peak eta_compute)) per device
    (per_expert_us 0 unless fitted)."""

    fixed_us: float
    per_expert_us: float
    eta_mem: float
    eta_compute: float
    train_rows: int
    train_median: float
    held_rows: int
    held_median: float
    held_p90: float


def gemm_terms(t: dict[str, np.ndarray], peak_flops: float, hbm_bytes_per_s: float):
    """(touched experts, read seconds at full bandwidth, compute seconds at peak) of each row's device, the bytes
    and FLOPs as the simulator counts them (costs/moe.py `grouped_gemm_work`)."""
    ffn = t["expert_hidden_dim"] / t["num_tensor_parallel_workers"]  # each of the device's experts is 1/tp wide
    touched = t["num_experts_per_device"] * t["expert_utilization"]
    read, flops = grouped_gemm_work(touched, t["total_routed_tokens"], t["hidden_dim"], ffn, BF16_BYTES)
    return touched, read / hbm_bytes_per_s, flops / peak_flops


def _gemm_columns(touched, read, compute, ratio: float, per_expert: bool) -> np.ndarray:
    """Columns of (t0, [c,] 1/eta_mem) for eta_mem / eta_compute = `ratio`: hypot(R / eta_m, C / eta_c) =
    hypot(R, C ratio) / eta_m is linear in 1 / eta_m (1 / eta_c = ratio / eta_m)."""
    cols = [np.ones_like(read), *((touched,) if per_expert else ()), np.hypot(read, compute * ratio)]
    return np.column_stack(cols)


def _gemm_solve(a: np.ndarray, y: np.ndarray):
    """Least squares on relative error, coefficients clipped at 0."""
    a = a / y[:, None]
    coef, *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
    coef = np.maximum(coef, 0.0)
    return coef, float(np.sum((a @ coef - 1.0) ** 2))


def fit_grouped_gemm(path: Path, hold_out: str = "ep8", per_expert: bool = False, *, peak_flops: float,
                     hbm_bytes_per_s: float, notes: list[str] | None = None) -> GroupedGemmFit:
    """Fit the per-device grouped GEMM on every row >= 10 us except the held-out ones (`hold_out`: "ep8"
    holds out expert parallelism 8, "tp8" holds out TP 8 and trains without EP 8 too); a grid over the
    eta_mem / eta_compute ratio, linear least squares on relative error at each, the best kept. The shares
    are of `peak_flops` and `hbm_bytes_per_s`, the measured GPU's hardware profile's."""
    t = read_table(path, _GEMM_COLS, notes=notes)
    y = t["time_stats.moe_grouped_gemm.median"] * 1e-3
    touched, read, compute = gemm_terms(t, peak_flops, hbm_bytes_per_s)
    ep, tp = t["expert_parallel_size"], t["num_tensor_parallel_workers"]
    held = (ep == 8) if hold_out == "ep8" else (tp == 8)
    train = ~held & (ep != 8) & (y >= MIN_FIT_SECONDS)
    test = held & (y >= MIN_FIT_SECONDS)
    what = "expert_parallel_size 8" if hold_out == "ep8" else "num_tensor_parallel_workers 8"
    if not test.any():
        raise MissingRows(f"no {what} rows measured at >= 10 us to hold out")
    coefficients = 3 if per_expert else 2
    if train.sum() < coefficients:
        raise MissingRows(f"{int(train.sum())} training row(s) measured at >= 10 us besides the {what} ones "
                          f"(the fit needs {coefficients})")
    best = min((_gemm_solve(_gemm_columns(touched, read, compute, r, per_expert)[train], y[train]) + (r,)
                for r in np.geomspace(0.05, 20.0, 121)), key=lambda c: c[1])
    coef, _, ratio = best
    pred = _gemm_columns(touched, read, compute, ratio, per_expert) @ coef
    t0, c, inv_mem = coef[0], (coef[1] if per_expert else 0.0), coef[-1]
    if not inv_mem > 0:
        raise MissingRows("the rows leave no weight-read term (eta_mem would be infinite)")
    err = np.abs(pred / y - 1.0)
    return GroupedGemmFit(t0 * 1e6, c * 1e6, 1.0 / inv_mem, 1.0 / (ratio * inv_mem), int(train.sum()),
                          float(np.median(err[train])), int(test.sum()), float(np.median(err[test])),
                          float(np.percentile(err[test], 90)))


@dataclass(frozen=True)
class RoutingFit:
    """Gating linear + top-k routing + token shuffle of one MoE layer: fixed_us + per_token_us x tokens."""

    fixed_us: float
    per_token_us: float
    rows: int
    median_error: float
    p90_error: float


def fit_routing(path: Path, notes: list[str] | None = None) -> RoutingFit:
    """Least squares on relative error over the TP 1, EP 1 rows of the engine's fused top-k path (Frontier's
    `uniform_topk` rows force a uniform assignment on the host and are not an engine's path; its EP rows mix
    two timing set-ups, ~140 us and ~36 us at 1 token, docs/operators.md "MoE layers")."""
    t = read_table(path, ("num_tokens", "expert_parallel_size", "num_tensor_parallel_workers",
                          *(f"time_stats.{n}.median" for n in _PARTS)),
                   where={"routing_runtime_path": "standard_fused_topk"}, notes=notes)
    one = (t["expert_parallel_size"] == 1) & (t["num_tensor_parallel_workers"] == 1)
    t = {c: v[one] for c, v in t.items()}
    if len(np.unique(t["num_tokens"])) < 2:
        raise MissingRows(f"{len(t['num_tokens'])} standard_fused_topk row(s) at TP 1, EP 1 (the fit needs two "
                          "token counts)")
    y = sum(t[f"time_stats.{n}.median"] for n in _PARTS) * 1e-3
    a = np.column_stack([np.ones_like(y), t["num_tokens"]]) / y[:, None]
    (fixed, per_token), *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
    err = np.abs((fixed + per_token * t["num_tokens"]) / y - 1.0)
    return RoutingFit(float(fixed) * 1e6, float(per_token) * 1e6, int(y.size), float(np.median(err)),
                      float(np.percentile(err, 90)))


def moe_summary(root: Path, gpu: str, peak_flops: float, hbm_bytes_per_s: float,
                notes: list[str] | None = None) -> tuple[str, ...]:
    """`rlsim calibrate ops` lines for each `compute/<gpu>/**/moe.csv` with expert-parallel rows: the grouped
    GEMM fit (EP 8 and TP 8 held out in turn) and the gating/top-k/shuffle fit, with the profile values.
    A fit the file lacks the rows for is one "skipped" line naming them; rows left out go to `notes`."""
    lines = []
    for path in sorted((root / "compute" / gpu).rglob("moe.csv")):
        if "expert_parallel_size" not in read_header(path):
            continue
        lines.append(f"  MoE grouped GEMM ({path.parent.name}): t = t0 + hypot(read / eta_mem, flops / eta_compute)")
        fits: dict[str, GroupedGemmFit] = {}
        for hold in ("ep8", "tp8"):
            try:
                f = fits[hold] = fit_grouped_gemm(path, hold, peak_flops=peak_flops, hbm_bytes_per_s=hbm_bytes_per_s,
                                                  notes=notes)
            except MissingRows as exc:
                lines.append(f"    {hold} held out: skipped: {path}: {exc}")
                continue
            lines.append(f"    {hold} held out: t0 {f.fixed_us:.1f} us, eta_mem {f.eta_mem:.3f}, eta_compute "
                         f"{f.eta_compute:.3f}; training median |error| {f.train_median:.1%} ({f.train_rows} rows), "
                         f"held out {f.held_median:.1%}, p90 {f.held_p90:.1%} ({f.held_rows} rows)")
        try:
            r = fit_routing(path, notes=notes)
        except MissingRows as exc:
            r = None
            lines.append(f"    gating + top-k + shuffle: skipped: {path}: {exc}")
        else:
            lines.append(f"    gating + top-k + shuffle: {r.fixed_us:.1f} us + {r.per_token_us:.4f} us per token, "
                         f"median |error| {r.median_error:.1%}, p90 {r.p90_error:.1%} ({r.rows} rows)")
        values = []
        if "ep8" in fits:
            f = fits["ep8"]
            values += [f"moe_gemm_eta_mem {f.eta_mem:.3f}", f"moe_gemm_eta_compute {f.eta_compute:.3f}"]
        if r is not None:
            values.append(f"moe_routing_per_token_us {r.per_token_us:.4f}")
        if values:
            lines.append(f"    profile values: {', '.join(values)} (t0 and the routing's fixed part are host-timed "
                         "and not used)")
    return tuple(lines)
