"""Agentic RL: tool latency against throughput and GPU idle time, sync vs ROLL async vs fully async.

The same multi-turn workload (scenarios/agentic/tool-latency-base.yaml) under three schedules:

- `sync`: verl/HybridFlow synchronous, everything colocated on the 16 GPUs: a step generates every
  trajectory (GPUs wait on tool calls between turns), then trains;
- `roll-async`: ROLL with async_generation_ratio 1 and 2 redundant episodes per group, rollout on
  12 GPUs and training on 4;
- `fully-async`: AReaL/ASearcher with max_head_offpolicyness 4 on the same 12 + 4 GPUs.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import yaml

from rlsim.sim.api import parse_scenario, shipped_dir, simulate
from rlsim.tools.report.style import legend_outside, save_figure

LATENCIES = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0)
SCHEDULES = ("sync", "roll-async", "fully-async")


def base() -> dict:
    return yaml.safe_load((shipped_dir("scenarios") / "agentic" / "tool-latency-base.yaml").read_text())


def variant(schedule: str, latency_median_s: float) -> dict:
    data = copy.deepcopy(base())
    data["environments"]["tools"]["env"]["latency"]["median"] = latency_median_s
    if schedule == "sync":
        data["cluster"]["pools"] = {"main": {"hardware": "h100-sxm", "nodes": 2, "gpus_per_node": 8}}
        for role in data["roles"].values():
            role["pool"] = "main"
        data["roles"]["rollout"]["engine"]["gpu_memory_utilization"] = 0.5
        data["schedule"] = {"kind": "hybridflow", "placement": "colocate"}
    elif schedule == "roll-async":
        data["schedule"] = {"kind": "roll", "async_generation_ratio": 1, "group_size_redundancy": 2}
    return data


def table() -> pd.DataFrame:
    rows = []
    for latency in LATENCIES:
        for schedule in SCHEDULES:
            res = simulate(parse_scenario(variant(schedule, latency), source=f"agentic-latency/{schedule}"))
            s = res.summary
            rows.append({"tool_latency_median_s": latency, "schedule": schedule,
                         "throughput_tokens_per_s": s["throughput_tokens_per_s"],
                         "gpu_idle_fraction": s["gpu_idle_fraction"], "step_time_s": s["step_time_s"],
                         "staleness_mean": s["staleness_mean"]})
    return pd.DataFrame(rows)


def plot(tab: pd.DataFrame):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for schedule, rows in tab.groupby("schedule", sort=False):
        a.plot(rows["tool_latency_median_s"], rows["throughput_tokens_per_s"] / 1e3, marker="o", label=schedule)
        b.plot(rows["tool_latency_median_s"], 100 * rows["gpu_idle_fraction"], marker="o", label=schedule)
    for ax in (a, b):
        ax.set_xscale("log")
        ax.set_xlabel("tool latency, median (s)")
        ax.grid(alpha=0.3)
    a.set_ylabel("throughput (k tokens/s)")
    b.set_ylabel("GPU idle (%)")
    legend_outside(b, fontsize=8)
    fig.suptitle("Agentic RL: tool latency vs throughput and GPU idle (16 H100, Qwen2.5-7B)")
    fig.tight_layout()
    return fig


def report(out: Path) -> str:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tab = table()
    tab[["tool_latency_median_s", "schedule", "throughput_tokens_per_s", "gpu_idle_fraction"]].to_csv(
        out / "table.csv", index=False
    )
    save_figure(plot(tab), out / "latency_vs_idle.png")
    lines = ["Agentic tool latency (median s): GPU idle % / throughput k tok/s"]
    for latency, rows in tab.groupby("tool_latency_median_s"):
        cells = [f"{r.schedule} {100 * r.gpu_idle_fraction:4.1f}% / {r.throughput_tokens_per_s / 1e3:6.1f}"
                 for r in rows.itertuples()]
        lines.append(f"  {latency:>5}: " + ", ".join(cells))
    return "\n".join(lines)
