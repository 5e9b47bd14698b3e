"""Decode-attention fit (Frontier's `attention*.csv`): what one layer's attention costs beyond its KV read.

A batched decode step runs, in every layer, one paged-attention kernel over all running sequences and one
kernel that writes the new tokens' K and V into the cache. Their time is t = T0 + kv_bytes / BW: a fixed
cost T0 of the kernel plus the KV cache it reads. T0 and 1/BW are fitted by linear least squares on
relative error over the decode rows that read at most 64 MB of KV (where the fixed cost is visible);
the KV write is taken as its median (it moves one token per sequence: fixed cost only). rlsim prices
the KV read itself with the engine's attention efficiency (`costs/generation.py`); the profile takes the
fixed part, `attention_fixed_us` = T0 + the KV write, once per layer and decode step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlsim.tools.calibration.ops_data import read_table

_COLUMNS = ("n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "batch_size", "kv_cache_size",
            "time_stats.attn_decode.median", "time_stats.attn_kv_cache_save.median")
_MAX_KV_BYTES = 64e6


@dataclass(frozen=True)
class AttentionFit:
    decode_fixed_us: float
    kv_write_us: float
    kv_bytes_per_s: float
    rows: int
    median_error: float

    @property
    def layer_fixed_us(self) -> float:
        """A layer's decode-attention time that does not grow with the KV cache: kernel T0 + the KV write."""
        return self.decode_fixed_us + self.kv_write_us


def decode_kv_bytes(t: dict) -> np.ndarray:
    """KV bytes one GPU reads in a decode row: batch x context x (K, V) x local KV heads x head dim x 2 B."""
    d_head = t["n_embd"] / t["n_q_head"]
    kv_heads = np.maximum(t["n_kv_head"] / t["num_tensor_parallel_workers"], 1.0)
    return t["batch_size"] * t["kv_cache_size"] * 2.0 * kv_heads * d_head * 2.0


def fit_decode_attention(path: Path) -> AttentionFit:
    t = read_table(path, _COLUMNS)
    kv = decode_kv_bytes(t)
    sel = kv <= _MAX_KV_BYTES
    y = t["time_stats.attn_decode.median"][sel] * 1e-3
    a = np.column_stack([np.ones_like(y), kv[sel]]) / y[:, None]
    (t0, inv_bw), *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
    pred = t0 + inv_bw * kv[sel]
    write_us = float(np.median(t["time_stats.attn_kv_cache_save.median"])) * 1e3
    return AttentionFit(float(t0) * 1e6, write_us, float(1.0 / inv_bw), int(sel.sum()),
                        float(np.median(np.abs(pred / y - 1.0))))
