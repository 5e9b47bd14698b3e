"""Measured per-operator profiles (Vidur's and Frontier's CSV layouts) read into flat numpy tables.

A profile folder holds `compute/<gpu>/<org>/<model>/{mlp,linear_op}.csv` (the dense layer's operators
by token count and TP degree, Vidur's `time_stats.<op>.median` columns plus the model's shape),
optionally `moe.csv` (gating, shuffle, grouped expert GEMMs) and `attention.csv` (prefill/decode
kernels by batch and KV length), and `network/<gpu>_*/{all_reduce,send_recv}.csv` (collective times
by message size and group). Times are milliseconds per call on one GPU of the TP group.
The head size is n_embd / n_head unless a `head_dim` column gives it: neither layout carries one, so the
copy of a model whose head size differs (Qwen3-30B-A3B: 128, not 2048 / 32) adds the column.
Only the median columns are read, so a copy trimmed to them (hardware_profiles/operators/) reads alike.

Every file is read once, bounded (regular files of at most `MAX_OPS_CSV_BYTES`: a FIFO or /dev/zero is
refused from its metadata). A row holding a number that is not finite (a failed measurement written as
`nan`), out of range (a denormal such as 5e-324, or above 1e15) or a zero or negative shape (`n_head: 0`)
is left out, and counted in a note naming the file.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import numpy as np

from rlsim.sim.costs import layer_memory_elements
from rlsim.sim.inputs import MIN_MAGNITUDE, YamlInputError, read_text_bounded

# The dense layer's operators as Vidur names them, and what each one is.
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
MEMORY_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add", "emb")
DENSE_OPS = GEMM_OPS + MEMORY_OPS
# The largest measured operator file shipped or in the profilers' repos (Frontier's A800 Qwen3-30B-A3B moe.csv)
# is 4 MB; four times that bounds a read (a 60 MB file would take minutes to parse and fit).
MAX_OPS_CSV_BYTES = 16_000_000
# The largest number of the profiles (Vidur's, Frontier's) is a 2^31-byte all-reduce message (2.1e9); a value
# above this, or a non-zero one below MIN_MAGNITUDE (a denormal: its reciprocal overflows), is not a measurement.
MAX_OPS_VALUE = 1e15
NOT_A_MEASUREMENT = "nan, inf or a number out of range"


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


def _plausible(*values: float) -> bool:
    """Finite, and 0 or of a magnitude a measurement can have (MIN_MAGNITUDE .. MAX_OPS_VALUE)."""
    return all(math.isfinite(v) and (v == 0 or MIN_MAGNITUDE <= abs(v) <= MAX_OPS_VALUE) for v in values)


def _usable(*values: float) -> bool:
    """Plausible and positive: a shape, size or count a row can be priced with."""
    return all(v > 0 for v in values) and _plausible(*values)


def _shape(row: dict) -> dict | None:
    """The layer shape of a row; None where a shape value is not a finite positive number (the row is left out)."""
    h = _num(row, "n_embd")
    heads, kv = _num(row, "n_head"), _num(row, "n_kv_head")
    ffn = _num(row, "n_expanded_embd")
    if None in (h, heads, kv, ffn):
        raise OpsDataError("missing shape columns n_embd/n_head/n_kv_head/n_expanded_embd")
    head_dim = _num(row, "head_dim")
    if not _usable(h, heads, kv, ffn, *(() if head_dim is None else (head_dim,))):
        return None
    gated = str(row.get("use_gated_mlp", "True")).strip().lower() == "true"
    return {"h": h, "heads": heads, "kv": kv, "ffn": ffn, "gated": gated, "d": head_dim or h / heads}


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
    return _read_csv_with_header(path)[1]


def _read_csv_with_header(path: Path) -> tuple[list[str], list[dict]]:
    """(header, rows) of an operator CSV, read once through the bounded reader every input file uses."""
    try:
        text = read_text_bounded(path, MAX_OPS_CSV_BYTES, "an operator profile CSV")
    except FileNotFoundError:
        raise OpsDataError(f"{path}: file not found") from None
    except YamlInputError as exc:
        raise OpsDataError(f"{path}: {exc.message}") from None
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        rows = list(reader)
        return list(reader.fieldnames or []), rows
    except csv.Error as exc:
        raise OpsDataError(f"{path}: cannot read line {reader.line_num}: {exc}") from None


def read_header(path: Path) -> list[str]:
    """The column names of an operator CSV (bounded read, as every file)."""
    return _read_csv_with_header(path)[0]


def dropped_note(path: Path, lines: list[int], what: str = NOT_A_MEASUREMENT) -> list[str]:
    """The note for rows left out of `path` (none if none were)."""
    if not lines:
        return []
    shown = ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")
    return [f"{path}: left out {len(lines)} row(s) holding {what} (line {shown})"]


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


def read_dense(root: Path, gpu: str, notes: list[str] | None = None) -> DenseRows:
    """Every dense-layer operator row of `gpu` under `root` (rows with no median are skipped; rows holding nan,
    inf or a zero shape are left out, each file's count appended to `notes`)."""
    cols: dict[str, list] = {f: [] for f in DenseRows.__dataclass_fields__}
    for model, path in dense_files(root, gpu):
        dropped: list[int] = []
        for line, row in enumerate(_read_csv(path), start=2):
            if str(row.get("profile_method", "")).upper() == "KERNEL_ONLY":
                continue
            try:
                s = _shape(row)
            except OpsDataError as exc:
                raise OpsDataError(f"{path}: {exc}") from None
            tp, tokens = _num(row, "num_tensor_parallel_workers") or 1.0, _num(row, "num_tokens")
            if tokens is None:
                raise OpsDataError(f"{path}: a row without num_tokens")
            if s is None or not _usable(tp, tokens):
                dropped.append(line)
                continue
            for op in DENSE_OPS:
                t = _num(row, f"time_stats.{op}.median")
                if t is not None and not _plausible(t):
                    if not dropped or dropped[-1] != line:
                        dropped.append(line)
                    continue
                if t is None or t <= 0:
                    continue
                n, k, el = dense_geometry(op, s, tp, tokens)
                for f, v in zip(DenseRows.__dataclass_fields__, (model, op, tp, tokens, t, n, k, el), strict=True):
                    cols[f].append(v)
        if notes is not None:
            notes += dropped_note(path, dropped, f"{NOT_A_MEASUREMENT} or a zero shape")
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


def read_collectives(root: Path, gpu: str, notes: list[str] | None = None) -> CollectiveRows | None:
    """All-reduce and send/recv rows of `root`/network/<gpu>_*/ (None when the folder has none; rows holding
    nan or inf are left out, counted in `notes`)."""
    cols: dict[str, list] = {f: [] for f in CollectiveRows.__dataclass_fields__}
    for folder in sorted((root / "network").glob(f"{gpu}_*")):
        for kind in ("all_reduce", "send_recv"):
            path = folder / f"{kind}.csv"
            if not path.exists():
                continue
            dropped: list[int] = []
            for line, row in enumerate(_read_csv(path), start=2):
                t, size = _num(row, f"time_stats.{kind}.median"), _num(row, "size")
                workers, per_node = _num(row, "num_workers"), _num(row, "devices_per_node")
                if None in (t, size, workers, per_node):
                    continue
                if not _plausible(t, size, workers, per_node):
                    dropped.append(line)
                    continue
                if t <= 0:
                    continue
                for f, v in zip(CollectiveRows.__dataclass_fields__, (kind, folder.name, workers, per_node, size, t),
                                strict=True):
                    cols[f].append(v)
            if notes is not None:
                notes += dropped_note(path, dropped)
    if not cols["kind"]:
        return None
    return CollectiveRows(**{f: np.asarray(v) for f, v in cols.items()})


def read_table(path: Path, columns: tuple[str, ...], where: dict[str, str] | None = None,
               notes: list[str] | None = None) -> dict[str, np.ndarray]:
    """Named numeric columns of a CSV (rows missing any of them dropped), for MoE and attention profiles;
    `where` keeps only the rows whose named text columns hold the given values. Rows holding nan, inf or a
    number out of range in one of the columns are left out (counted in `notes`), and so are rows with a
    time (`time_stats.*`) <= 0."""
    rows = [(line, r) for line, r in enumerate(_read_csv(path), start=2)
            if not where or all(r.get(k) == v for k, v in where.items())]
    times = [i for i, c in enumerate(columns) if c.startswith("time_stats.")]
    keep, dropped = [], []
    for line, r in rows:
        values = [_num(r, c) for c in columns]
        if None in values:
            continue
        if not _plausible(*values):
            dropped.append(line)
        elif all(values[i] > 0 for i in times):
            keep.append(values)
    if notes is not None:
        notes += dropped_note(path, dropped)
    arr = np.asarray(keep, dtype=float).reshape(-1, len(columns))
    return {c: arr[:, i] for i, c in enumerate(columns)}
