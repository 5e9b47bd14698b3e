"""`rlsim calibrate ops DIR --gpu NAME`: fit, score and write ops_fit.csv (ops_fit has the models).

Besides the dense operators it fits, where the folder has them:
- collectives: per (kind, group size, devices per node), t = latency + size / bandwidth, in closed form
  on relative error (the all-reduce's bandwidth is the bus-free figure size / (t - latency));
- the per-kernel launch and host cost: Frontier profiles some operators twice, timed with CUDA events
  around the host call (`linear_op.csv`) and kernel-only (`linear_op_kernel_only.csv`); the median
  difference over single-kernel operators (norms, rope, activation, embedding) at <= 256 tokens.

A folder need not hold every file: a fit whose rows are missing is skipped with a note naming them, and
rows holding nan, inf or a number out of range are left out and counted (ops_data); the report says so
in its "note:" lines.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlsim.tools.calibration import ops_data
from rlsim.tools.calibration.ops_fit import DenseFit, error_stats, fit_dense
from rlsim.tools.calibration.ops_moe import moe_summary

# The hardware profile whose datasheet peak and bandwidth each profiled GPU's efficiencies refer to.
GPU_PROFILES = {"a100": "a100-80gb", "h100": "h100-sxm", "h800": "h800", "a800": "a800"}
# Streaming multiprocessors and L2 cache bytes of each profiled GPU (NVIDIA A100 and H100 datasheets / whitepapers:
# A100 108 SMs, 40 MB L2; H100 SXM 132 SMs, 50 MB L2; A800 and H800 are the same dies, NVIDIA A800 80GB SXM
# datasheet): the GEMMs' wave size and the memory-bound operators' on-chip knee.
GPU_CHIPS = {"a100": (108, 40e6), "a800": (108, 40e6), "h100": (132, 50e6), "h800": (132, 50e6)}
_SINGLE_KERNEL_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "emb")
CSV_COLUMNS = ("gpu", "model", "tp", "op", "tokens", "measured_ms", "predicted_ms", "held_out")
MLP_GEMMS = ("mlp_up_proj", "mlp_down_proj")  # the GEMMs whose weight streaming sets decode_eta_mem


@dataclass(frozen=True)
class CollectiveFit:
    kind: str
    topology: str
    workers: int
    per_node: int
    latency_us: float
    bandwidth_gb_per_s: float


@dataclass(frozen=True)
class OpsResult:
    gpu: str
    held_out_models: tuple[str, ...]
    dense: DenseFit
    collectives: list[CollectiveFit]
    launch_us: float | None
    held_median: float
    held_p90: float
    held_rows: int
    train_median: float
    train_p90: float
    small_ops_us: float  # per layer at decode sizes (<= 64 tokens), training models' median rows
    moe_lines: tuple[str, ...] = ()  # the grouped-GEMM and routing fits of an expert-parallel moe.csv (ops_moe)
    notes: tuple[str, ...] = ()  # rows left out, fits skipped for want of rows
    train_rows: int = 0  # training rows measured at >= 10 us (scored)
    small_ops_eta_mem: float | None = None  # the layer's memory-bound operators' HBM share at training sizes

    def profile_values(self) -> dict[str, float]:
        """What a hardware profile takes from this fit (docs/operators.md says what each one means); a value
        whose operators the folder lacks is left out (`missing_values` names them)."""
        g = self.dense.gemm
        out = {}
        mlp = [o for o in MLP_GEMMS if o in g]
        if len(mlp) == len(MLP_GEMMS):
            out["decode_eta_mem"] = round(float(np.mean([g[o].eta_mem for o in mlp])), 3)
        if g:
            out["decode_eta_compute"] = round(float(np.median([self.dense.eta_compute(o, 512.0) for o in g])), 3)
            out["prefill_eta_compute"] = round(float(np.median([self.dense.eta_compute(o, 4096.0) for o in g])), 3)
            out["gemm_fixed_us"] = round(float(np.median([c.t0_s for c in g.values()])) * 1e6, 2)
        out["layer_small_ops_us"] = round(self.small_ops_us, 1)
        if self.small_ops_eta_mem is not None:
            out["small_ops_eta_mem"] = round(self.small_ops_eta_mem, 3)
        if self.launch_us is not None:
            out["kernel_launch_us"] = round(self.launch_us, 2)
        out.update(self.p2p_latencies())
        return out

    def missing_values(self) -> list[str]:
        """Notes for the profile values the folder has no rows for."""
        g, out = self.dense.gemm, []
        if any(o not in g for o in MLP_GEMMS):
            out.append(f"decode_eta_mem skipped: no {' / '.join(o for o in MLP_GEMMS if o not in g)} rows "
                       "(the MLP GEMMs' weight streaming)")
        if not g:
            out.append(f"decode_eta_compute, prefill_eta_compute and gemm_fixed_us skipped: no GEMM rows "
                       f"({', '.join(ops_data.GEMM_OPS)})")
        return out

    def p2p_latencies(self) -> dict[str, float]:
        """Point-to-point send/recv latency between two GPUs of a node and of two nodes (an expert-parallel
        all-to-all's fixed cost, docs/operators.md), where the folder has send_recv rows."""
        out = {}
        for field, per_node in (("p2p_latency_us", 2), ("p2p_latency_inter_node_us", 1)):
            fit = next((c for c in self.collectives if c.kind == "send_recv" and c.workers == 2
                        and c.per_node == per_node), None)
            if fit is not None:
                out[field] = round(float(fit.latency_us), 1)
        return out


def fit_collectives(rows: ops_data.CollectiveRows) -> tuple[list[CollectiveFit], np.ndarray]:
    """One latency + bandwidth line per group; returns the fits and each row's predicted ms."""
    fits, pred = [], np.full(len(rows), np.nan)
    groups = sorted({(str(k), str(t), int(w), int(p)) for k, t, w, p in
                     zip(rows.kind, rows.topology, rows.workers, rows.per_node, strict=True)})
    for kind, topo, workers, per_node in groups:
        m = (rows.kind == kind) & (rows.topology == topo) & (rows.workers == workers) & (rows.per_node == per_node)
        y, size = rows.measured_ms[m] * 1e-3, rows.size[m]
        a = np.column_stack([np.ones_like(y), size]) / y[:, None]
        (lat, inv_bw), *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
        lat, inv_bw = max(lat, 0.0), max(inv_bw, 1e-15)
        pred[m] = (lat + size * inv_bw) * 1e3
        fits.append(CollectiveFit(kind, topo, workers, per_node, lat * 1e6, 1.0 / inv_bw / 1e9))
    return fits, pred


def launch_cost_us(root: Path, gpu: str, notes: list[str] | None = None) -> float | None:
    """Median (host-timed - kernel-only) per single-kernel operator at <= 256 tokens, microseconds."""
    diffs = []
    columns = ("num_tokens", "num_tensor_parallel_workers", *(f"time_stats.{o}.median" for o in _SINGLE_KERNEL_OPS))
    for path in sorted((root / "compute" / gpu).rglob("linear_op_kernel_only.csv")):
        if not path.with_name("linear_op.csv").exists():
            if notes is not None:
                notes.append(f"{path}: no linear_op.csv beside it (host-timed rows): no launch cost from it")
            continue
        host_rows = ops_data.read_table(path.with_name("linear_op.csv"), columns, notes=notes)
        kern_rows = ops_data.read_table(path, columns, notes=notes)
        key = ("num_tokens", "num_tensor_parallel_workers")
        host = {tuple(host_rows[k][i] for k in key): i for i in range(len(host_rows["num_tokens"]))}
        for j in range(len(kern_rows["num_tokens"])):
            pair = tuple(kern_rows[k][j] for k in key)
            if pair in host and pair[0] <= 256:
                i = host[pair]
                diffs += [(host_rows[f"time_stats.{o}.median"][i] - kern_rows[f"time_stats.{o}.median"][j]) * 1e3
                          for o in _SINGLE_KERNEL_OPS]
    return float(np.median(diffs)) if diffs else None


def run_ops(root: Path, gpu: str, held_out: tuple[str, ...], peak_flops: float, hbm_bytes_per_s: float,
            out: Path | None) -> OpsResult:
    """Fit `gpu`'s operators under `root` with `held_out` models left out; write OUT/ops_fit.csv."""
    notes: list[str] = []
    rows = ops_data.read_dense(root, gpu, notes)
    unknown = [m for m in held_out if m not in set(rows.model)]
    if unknown:
        raise ops_data.OpsDataError(f"--hold-out-models: no rows for {', '.join(unknown)} "
                                    f"(models: {', '.join(sorted(set(rows.model)))})")
    held = np.isin(rows.model, held_out)
    if held.all():
        raise ops_data.OpsDataError("--hold-out-models: every model is held out, nothing left to fit on")
    sms, cache_bytes = GPU_CHIPS[gpu]
    dense = fit_dense(rows.subset(~held), peak_flops, hbm_bytes_per_s, sms, cache_bytes)
    pred = dense.predict(rows)
    coll_rows = ops_data.read_collectives(root, gpu, notes)
    coll_fits, coll_pred = ([], None) if coll_rows is None else fit_collectives(coll_rows)
    hm, hp, hn = error_stats(rows.measured_ms[held], pred[held])
    tm, tp90, tn = error_stats(rows.measured_ms[~held], pred[~held])
    if out is not None:
        _write_csv(out / "ops_fit.csv", gpu, rows, pred, held, coll_rows, coll_pred)
    launch = launch_cost_us(root, gpu, notes)
    moe = moe_summary(root, gpu, peak_flops, hbm_bytes_per_s, notes)
    return OpsResult(gpu, held_out, dense, coll_fits, launch, hm, hp, hn, tm, tp90,
                     _small_ops_us(rows.subset(~held)), moe, tuple(dict.fromkeys(notes)), tn,
                     _small_ops_eta(rows.subset(~held), dense))


def _small_ops_us(rows: ops_data.DenseRows) -> float:
    """Sum over a layer's memory-bound operators of their median time at decode sizes (<= 64 tokens)."""
    small = [op for op in ops_data.MEMORY_OPS if op != "emb"]  # the embedding runs once per step, not per layer
    return float(sum(np.median(rows.measured_ms[(rows.op == op) & (rows.tokens <= 64)]) * 1e3
                     for op in small if ((rows.op == op) & (rows.tokens <= 64)).any()))


def _small_ops_eta(rows: ops_data.DenseRows, dense: DenseFit) -> float | None:
    """HBM share at which one layer's memory-bound operators move their bytes above the on-chip knee (training
    micro-batch sizes): sum(bytes) / sum(bytes / eta_op) over the two norms, rope, activation and the two residual
    adds of each training model's layer at TP 1 and its largest token count, the median over the models."""
    ops = {op: (2.0 if op == "add" else 1.0) for op in ops_data.MEMORY_OPS if op != "emb"}
    per_model = []
    for model in sorted(set(rows.model)):
        mine = rows.subset((rows.model == model) & (rows.tp == 1))
        bytes_, seconds = 0.0, 0.0
        for op, count in ops.items():
            at = (mine.op == op)
            if not at.any() or op not in dense.memory:
                break
            tokens = mine.tokens[at].max()
            elements = float(mine.elements[at & (mine.tokens == tokens)][0]) / tokens * count
            bytes_ += elements
            seconds += elements / dense.memory[op].eta
        else:
            per_model.append(bytes_ / seconds)
    return float(np.median(per_model)) if per_model else None


def _write_csv(path: Path, gpu, rows, pred, held, coll_rows, coll_pred) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for i in range(len(rows)):
            w.writerow((gpu, rows.model[i], int(rows.tp[i]), rows.op[i], int(rows.tokens[i]),
                        f"{rows.measured_ms[i]:.6g}", f"{pred[i]:.6g}", bool(held[i])))
        if coll_rows is not None:
            for i in range(len(coll_rows)):
                op = f"{coll_rows.kind[i]}_n{int(coll_rows.workers[i])}_per_node{int(coll_rows.per_node[i])}"
                w.writerow((gpu, coll_rows.topology[i], int(coll_rows.workers[i]), op, int(coll_rows.size[i]),
                            f"{coll_rows.measured_ms[i]:.6g}", f"{coll_pred[i]:.6g}", False))


def _errors(median: float, p90: float, rows: int) -> str:
    if not rows:
        return "no rows measured at >= 10 us"
    return f"median |error| {median:.1%}, p90 {p90:.1%} over {rows} rows measured at >= 10 us"


def format_result(r: OpsResult) -> str:
    held = ("none (no rows held out; --hold-out-models M1,M2 scores models left out of the fit)"
            if not r.held_out_models else _errors(r.held_median, r.held_p90, r.held_rows))
    lines = [f"operator fit on {r.gpu}: held-out {', '.join(r.held_out_models) or '(none)'}",
             f"  held-out models: {held}",
             f"  training models: {_errors(r.train_median, r.train_p90, r.train_rows)}"]
    for op, c in r.dense.gemm.items():
        etas = "/".join(f"{r.dense.eta_compute(op, t):.2f}" for t in (1.0, 64.0, 512.0, 4096.0))
        lines.append(f"  {op:26s} eta_mem {c.eta_mem:.3f}  eta_compute 1/64/512/4096 tokens {etas}  "
                     f"wave exponent {c.beta:.2f}  fixed {c.t0_s * 1e6:.1f} us")
    for op, c in r.dense.memory.items():
        lines.append(f"  {op:26s} eta_mem {c.eta:.3f} (on chip {c.eta_cache:.3f} below {c.knee_bytes / 1e6:.0f} MB)"
                     f"  fixed {c.t0_s * 1e6:.1f} us")
    for c in r.collectives:
        lines.append(f"  {c.kind} {c.topology} n={c.workers} per_node={c.per_node}: "
                     f"latency {c.latency_us:.1f} us, bandwidth {c.bandwidth_gb_per_s:.0f} GB/s")
    if r.launch_us is not None:
        lines.append(f"  kernel launch + host per operator: {r.launch_us:.1f} us")
    lines.append("  hardware profile values: " + ", ".join(f"{k} {v}" for k, v in r.profile_values().items()))
    lines.extend(r.moe_lines)
    lines.extend(f"  note: {n}" for n in (*r.missing_values(), *r.notes))
    return "\n".join(lines)
