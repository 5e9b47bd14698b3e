"""Measured per-operator profiles (Vidur's and Frontier's CSV layouts) read into flat numpy tables.

A profile folder holds `compute/<gpu>/<org>/<model>/{mlp,linear_op}.csv` (the dense layer's operators
by token count and TP degree, Vidur's `time_stats.<op>.median` columns plus the model's shape),
optionally `moe.csv` (gating, shuffle, grouped expert GEMMs) and `attention.csv` (prefill/decode
kernels by batch and KV length), and `network/<gpu>_*/{all_reduce,send_recv}.csv` (collective times
by message size and group). Times are milliseconds per call on one GPU of the TP group.
The head size is n_embd / n_head unless a `head_dim` column gives it: neither layout carries one, so the
copy of a model whose head size differs (Qwen3-30B-A3B: 128, not 2048 / 32) adds the column.
Only the median columns are read, so a copy trimmed to them (hardware_profiles/operators/) reads alike.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import numpy as np

from rlsim.sim.api import layer_memory_elements

# The dense layer's operators as Vidur names them, and what each one is.
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
MEMORY_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add", "emb")
DENSE_OPS = GEMM_OPS + MEMORY_OPS


class OpsDataError(ValueError):
    """A profile folder or file that cannot be read (one line: file and what is wrong)."""


class _Columns:
    """Rows held as equal-length column arrays (a frozen dataclass of arrays, `measured_ms` among them)."""

    def __len__(self) -> int:
        return len(self.measured_ms)

    def subset(self, mask: np.ndarray) -> Self:
        """The rows where `mask` is true, as the same kind of table."""
        return type(self)(*(getattr(self, f)[mask] for f in self.__dataclass_fields__))


@dataclass(frozen=True)
class DenseRows(_Columns):
    """One row per (model, tp, tokens, operator) measurement of a dense layer's operator."""

    model: np.ndarray  # str
    op: np.ndarray  # str
    tp: np.ndarray
    tokens: np.ndarray
    measured_ms: np.ndarray
    # Per-GPU GEMM shape (M = tokens, N out, K in) for GEMMs; elements moved for memory-bound operators.
    n: np.ndarray
    k: np.ndarray
    elements: np.ndarray


def _num(row: dict, key: str) -> float | None:
    value = row.get(key, "")
    if value in ("", None):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _shape(row: dict) -> dict:
    h = _num(row, "n_embd")
    heads, kv = _num(row, "n_head"), _num(row, "n_kv_head")
    ffn = _num(row, "n_expanded_embd")
    if None in (h, heads, kv, ffn):
        raise OpsDataError("missing shape columns n_embd/n_head/n_kv_head/n_expanded_embd")
    gated = str(row.get("use_gated_mlp", "True")).strip().lower() == "true"
    return {"h": h, "heads": heads, "kv": kv, "ffn": ffn, "gated": gated, "d": _num(row, "head_dim") or h / heads}


def dense_geometry(op: str, s: dict, tp: float, tokens: float) -> tuple[float, float, float]:
    """(N, K, elements) of operator `op` of a layer of shape `s` at TP `tp` over `tokens` tokens.

    GEMMs: N and K per GPU (QKV and up are column-parallel, O and down row-parallel); memory-bound
    operators: elements read plus written (norms read and write the hidden state, the gated
    activation reads two ffn/tp halves and writes one, rope reads and writes the q and k heads).
    """
    h, d, ffn = s["h"], s["d"], s["ffn"]
    if op == "attn_pre_proj":
        return (s["heads"] + 2 * s["kv"]) * d / tp, h, 0.0
    if op == "attn_post_proj":
        return h, s["heads"] * d / tp, 0.0
    if op == "mlp_up_proj":
        return ffn * (2 if s["gated"] else 1) / tp, h, 0.0
    if op == "mlp_down_proj":
        return h, ffn / tp, 0.0
    per_token = layer_memory_elements(h, s["heads"], s["kv"], d, ffn, tp, bool(s["gated"]))
    if op in per_token:  # the simulator's own counts (training prices the same operators with them)
        return 0.0, 0.0, per_token[op] * tokens
    raise OpsDataError(f"unknown operator {op!r}")


def _read_csv(path: Path) -> list[dict]:
    try:
        with path.open(newline="") as fh:
            return list(csv.DictReader(fh))
    except (OSError, csv.Error, UnicodeDecodeError) as exc:
        raise OpsDataError(f"{path}: cannot read ({exc})") from exc


def dense_files(root: Path, gpu: str) -> list[tuple[str, Path]]:
    """(model name, csv) for every dense operator profile of `gpu` under `root`/compute/<gpu>/."""
    base = root / "compute" / gpu
    if not base.is_dir():
        raise OpsDataError(f"{root}: no compute/{gpu}/ folder (GPUs here: "
                           f"{', '.join(sorted(p.name for p in (root / 'compute').glob('*'))) or 'none'})")
    found = []
    for name in ("mlp.csv", "linear_op.csv"):
        found += [(p.parent.name, p) for p in sorted(base.rglob(name))]
    return found


def read_dense(root: Path, gpu: str) -> DenseRows:
    """Every dense-layer operator row of `gpu` under `root` (rows with no median are skipped)."""
    cols: dict[str, list] = {f: [] for f in DenseRows.__dataclass_fields__}
    for model, path in dense_files(root, gpu):
        for row in _read_csv(path):
            if str(row.get("profile_method", "")).upper() == "KERNEL_ONLY":
                continue
            try:
                s = _shape(row)
            except OpsDataError as exc:
                raise OpsDataError(f"{path}: {exc}") from None
            tp, tokens = _num(row, "num_tensor_parallel_workers") or 1.0, _num(row, "num_tokens")
            if tokens is None:
                raise OpsDataError(f"{path}: a row without num_tokens")
            for op in DENSE_OPS:
                t = _num(row, f"time_stats.{op}.median")
                if t is None or t <= 0:
                    continue
                n, k, el = dense_geometry(op, s, tp, tokens)
                for f, v in zip(DenseRows.__dataclass_fields__, (model, op, tp, tokens, t, n, k, el), strict=True):
                    cols[f].append(v)
    if not cols["op"]:
        raise OpsDataError(f"{root}: no dense operator rows for {gpu}")
    return DenseRows(**{f: np.asarray(v) for f, v in cols.items()})


@dataclass(frozen=True)
class CollectiveRows(_Columns):
    """Collective times: one row per (kind, group size, devices per node, message size)."""

    kind: np.ndarray  # "all_reduce" / "send_recv"
    topology: np.ndarray  # folder name, e.g. h100_dgx
    workers: np.ndarray
    per_node: np.ndarray
    size: np.ndarray  # bytes
    measured_ms: np.ndarray


def read_collectives(root: Path, gpu: str) -> CollectiveRows | None:
    """All-reduce and send/recv rows of `root`/network/<gpu>_*/ (None when the folder has none)."""
    cols: dict[str, list] = {f: [] for f in CollectiveRows.__dataclass_fields__}
    for folder in sorted((root / "network").glob(f"{gpu}_*")):
        for kind in ("all_reduce", "send_recv"):
            path = folder / f"{kind}.csv"
            if not path.exists():
                continue
            for row in _read_csv(path):
                t, size = _num(row, f"time_stats.{kind}.median"), _num(row, "size")
                workers, per_node = _num(row, "num_workers"), _num(row, "devices_per_node")
                if None in (t, size, workers, per_node) or t <= 0:
                    continue
                for f, v in zip(CollectiveRows.__dataclass_fields__, (kind, folder.name, workers, per_node, size, t),
                                strict=True):
                    cols[f].append(v)
    if not cols["kind"]:
        return None
    return CollectiveRows(**{f: np.asarray(v) for f, v in cols.items()})


def read_table(path: Path, columns: tuple[str, ...], where: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """Named numeric columns of a CSV (rows missing any of them dropped), for MoE and attention profiles;
    `where` keeps only the rows whose named text columns hold the given values."""
    rows = _read_csv(path)
    if where:
        rows = [r for r in rows if all(r.get(k) == v for k, v in where.items())]
    keep = [[_num(r, c) for c in columns] for r in rows]
    keep = [k for k in keep if None not in k]
    arr = np.asarray(keep, dtype=float).reshape(-1, len(columns))
    return {c: arr[:, i] for i, c in enumerate(columns)}
