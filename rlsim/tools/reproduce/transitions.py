"""The cost of moving weights from training to generation, and the complexity each strategy buys.

- `transition-cost` (F2): per-step train->generate transition time for 3D-HybridEngine,
  HybridFlow-V and naive (DeepSpeed-Chat) resharding on colocated GPUs, and a bucketed NIC broadcast from
  one sender to a disaggregated rollout pool (costs/weight_sync.py), for Llama 7B-70B on 16-128 A100s
  (HybridFlow's testbed, docs/sources.md sections 4-5). Pure cost functions: no simulation needed.
- `complexity` (F9): per strategy, the weight copies each GPU holds, the bytes moved per step to
  refresh the rollout weights, and the memory headroom the extra copies take.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from pydantic import TypeAdapter

from rlsim.sim.api import ModelShape, ScheduleSpec, StalenessUnit, load_profile, resolve_preset
from rlsim.sim.costs import SyncSetup, reshard_bytes_per_gpu, reshard_redundant_bytes_per_gpu, reshard_time, sync_time
from rlsim.tools.report.style import legend_outside, save_figure

MODELS = {"7b": 2, "13b": 4, "34b": 8, "70b": 8}  # model -> generation TP (HybridFlow-style choice)
GPUS = (16, 32, 64, 128)
TESTBED_NIC_GBIT = 25.0  # 200 Gb/s per 8-GPU node (docs/sources.md §5), as in scenarios/hybridflow/


def transition_table() -> pd.DataFrame:
    hw = load_profile("a100-80gb").model_copy(update={"nic_gbit_per_s": TESTBED_NIC_GBIT})
    rows = []
    for name, gen_tp in MODELS.items():
        model = ModelShape(**resolve_preset(f"llama-{name}"))
        m = model.weight_bytes_total
        for gpus in GPUS:
            tp, pp = 8, 1
            dp = gpus // (tp * pp)
            for method in ("3d-hybrid-engine", "hybridflow-v", "naive"):
                rows.append({
                    "model": f"llama-{name}", "gpus": gpus, "method": method,
                    "bytes_per_gpu": reshard_bytes_per_gpu(method, m, tp, pp, dp, gen_tp),
                    "seconds": reshard_time(method, m, hw, tp, pp, dp, gen_tp, 1, 8),
                })
            half = gpus // 2  # disaggregated: half the GPUs train, half generate, weights over the NICs
            rows.append({
                "model": f"llama-{name}", "gpus": gpus, "method": "disaggregated-broadcast",
                "bytes_per_gpu": m,
                "seconds": sync_time(SyncSetup(m, model.weight_tensors, hw, hw, half, gen_tp, half, half // 8)),
            })
    return pd.DataFrame(rows)


def plot_transitions(tab: pd.DataFrame):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(tab["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(4 * len(models), 3.4))
    for ax, model in zip(axes, models, strict=True):
        for method, rows in tab[tab["model"] == model].groupby("method", sort=False):
            ax.plot(rows["gpus"], rows["seconds"], marker="o", label=method)
        ax.set_yscale("log")
        ax.set_title(model)
        ax.set_xlabel("GPUs (A100, 25 Gb/s per GPU between nodes)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("train -> generate transition (s per step)")
    legend_outside(axes[-1], fontsize=7)
    fig.tight_layout()
    return fig


def _versions_behind(schedule: dict) -> int:
    """The staleness bound a schedule's spec declares, in weight versions (the table's unit)."""
    bound = TypeAdapter(ScheduleSpec).validate_python(schedule).staleness_bound
    if bound is None or bound.unit is not StalenessUnit.VERSIONS or not float(bound.amount).is_integer():
        raise ValueError(f"{schedule}: no whole bound in weight versions ({bound})")
    return int(bound.amount)


def complexity_table(model_name: str = "llama-7b", gpus: int = 64, gen_tp: int = 2) -> pd.DataFrame:
    """What each strategy holds and moves, for one model on `gpus` A100s (training tp 8).

    generation_replicas: full generation copies of the actor in the cluster; redundant_gb_per_gpu:
    memory a GPU spends on generation weights next to its training state (HybridFlow Table 2) or, on
    a rollout-only GPU, on weights that never train; sync_gb_per_step: bytes moved to refresh the
    rollout weights; staleness_bound: policy versions a trained sample may lag, as each strategy's schedule
    spec declares it (`staleness_bound`).
    """
    model = ModelShape(**resolve_preset(model_name))
    m = model.weight_bytes_total
    tp = 8
    dp = gpus // tp
    rows = []
    for method in ("3d-hybrid-engine", "hybridflow-v", "naive"):
        rows.append({"strategy": f"colocated sync, {method}", "generation_replicas": gpus // gen_tp,
                     "redundant_gb_per_gpu": reshard_redundant_bytes_per_gpu(method, m, tp, 1, gen_tp) / 1e9,
                     "sync_gb_per_step": reshard_bytes_per_gpu(method, m, tp, 1, dp, gen_tp) * gpus / 1e9,
                     "gpus_generating": gpus, "staleness_bound": _versions_behind({"kind": "hybridflow"})})
    half = gpus // 2
    for strategy, schedule in (("split sync (NIC broadcast)", {"kind": "hybridflow", "placement": "disaggregated"}),
                               ("one-step-off", {"kind": "one-step-off"}),
                               ("fully async, eta=4", {"kind": "fully-async", "max_head_offpolicyness": 4})):
        rows.append({"strategy": strategy, "generation_replicas": half // gen_tp,
                     "redundant_gb_per_gpu": m / gen_tp / 1e9, "sync_gb_per_step": m * half / 1e9,
                     "gpus_generating": half, "staleness_bound": _versions_behind(schedule)})
    return pd.DataFrame(rows)


def plot_complexity(comp: pd.DataFrame):
    """F9: per strategy, what it holds and moves — the costs the papers argue about but rarely state."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = (("generation_replicas", "generation replicas"), ("redundant_gb_per_gpu", "redundant weights (GB/GPU)"),
               ("sync_gb_per_step", "weight traffic (GB/step)"), ("staleness_bound", "staleness bound (versions)"))
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.8))
    y = range(len(comp))
    for ax, (col, label) in zip(axes, metrics, strict=True):
        ax.barh(list(y), comp[col], color="tab:blue")
        ax.set_yticks(list(y), comp["strategy"] if ax is axes[0] else [""] * len(comp), fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(label)
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle("F9: what each strategy holds and moves (Llama-7B, 64 A100, training tp 8, t_g 2)")
    fig.tight_layout()
    return fig


def report(out: Path) -> str:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tab = transition_table()
    tab.to_csv(out / "table.csv", index=False)
    save_figure(plot_transitions(tab), out / "transition_cost.png")
    comp = complexity_table()
    comp.to_csv(out / "complexity.csv", index=False)
    save_figure(plot_complexity(comp), out / "complexity.png")
    lines = ["Train -> generate transition (s per step) at 128 GPUs:"]
    for r in tab[tab["gpus"] == 128].itertuples():
        lines.append(f"  {r.model:<10} {r.method:<24} {r.bytes_per_gpu / 1e9:7.2f} GB/GPU  {r.seconds:7.3f} s")
    lines.append("Complexity (Llama-7B, 64 A100):")
    for r in comp.itertuples():
        lines.append(f"  {r.strategy:<36} replicas {r.generation_replicas:3d}  redundant {r.redundant_gb_per_gpu:5.2f} "
                     f"GB/GPU  sync {r.sync_gb_per_step:7.1f} GB/step  staleness <= {r.staleness_bound}")
    return "\n".join(lines)
