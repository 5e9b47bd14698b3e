"""MoE layer fit (Frontier's `moe.csv`): what an MoE layer costs beyond reading its touched experts.

At T tokens with top-k routing over E experts, T*k/E tokens reach each expert on average and
E * (1 - (1 - k/E)^T) experts are touched. The grouped expert GEMM is priced as
t = T0 + touched * expert_bytes / (BW * eta_e): a fixed cost T0 of the grouped kernel(s) plus each touched
expert's weights streamed at efficiency eta_e; fitted by linear least squares on relative error over
the rows at <= 256 tokens (where the weight read dominates). Gating (router linear), top-k routing and
the token shuffle are per-layer costs, taken as their medians at <= 64 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlsim.tools.calibration.ops_data import read_table

_PARTS = ("moe_gating_linear", "moe_gating_routing_topk", "moe_shuffling")


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


def touched_experts(tokens, experts: float, top_k: float):
    return experts * (1.0 - (1.0 - top_k / experts) ** np.maximum(tokens, 1.0))


def fit_moe(path: Path, hbm_bytes_per_s: float) -> MoeFit:
    cols = ("num_tokens", "num_experts", "router_topk", "hidden_dim", "expert_hidden_dim",
            "time_stats.moe_grouped_gemm.median")
    t = read_table(path, cols)
    sel = t["num_tokens"] <= 256
    tokens, e, k = t["num_tokens"][sel], t["num_experts"][sel], t["router_topk"][sel]
    expert_bytes = 3.0 * t["hidden_dim"][sel] * t["expert_hidden_dim"][sel] * 2.0  # gate, up, down in bf16
    y = t["time_stats.moe_grouped_gemm.median"][sel] * 1e-3
    x = touched_experts(tokens, e, k) * expert_bytes / hbm_bytes_per_s
    a = np.column_stack([np.ones_like(y), x]) / y[:, None]
    (t0, inv_eta), *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
    pred = t0 + inv_eta * x
    parts = 0.0
    for name in _PARTS:
        p = read_table(path, ("num_tokens", f"time_stats.{name}.median"))
        small = p["num_tokens"] <= 64
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
