"""The remaining trade-off figures: F3 generation TP under KV pressure, F4 sync vs one-step-off vs
fully async across cluster sizes and rollout/train ratios, F6 long tails vs GPU idle, F8 batch and
group size. Each builds scenario variants from shipped scenarios, simulates them, and returns a table.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import yaml

from rlsim.sim.api import ScenarioError, parse_scenario, shipped_dir, simulate
from rlsim.tools.report.style import legend_outside, save_figure


def _load(rel: str) -> dict:
    return yaml.safe_load((shipped_dir("scenarios") / rel).read_text())


def _run(data: dict) -> dict | None:
    try:
        return simulate(parse_scenario(data, source=data.get("name", "figure"))).summary
    except ScenarioError:
        return None  # infeasible (e.g. OOM) points are reported as missing, as the papers skip them


def _line_plot(tab: pd.DataFrame, x: str, ys: list[tuple[str, str]], hue: str, title: str, logx: bool = False):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ys), figsize=(5 * len(ys), 3.6), squeeze=False)
    axes = axes[0]
    for ax, (col, label) in zip(axes, ys, strict=True):
        for key, rows in tab.groupby(hue, sort=False):
            ax.plot(rows[x], rows[col], marker="o", label=str(key))
        ax.set_xlabel(x)
        ax.set_ylabel(label)
        if logx:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    legend_outside(axes[-1], fontsize=7, title=hue, title_fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- F3


# Engine kinds (rlsim/sim/costs/engine_kinds.py): HybridFlow's testbed engine (vLLM 0.3.1, per-sequence host
# cost fitted to its 7B t_g finding, docs/sources.md §5) beside a modern one that overlaps its scheduler.
ENGINES = {"modern engine": "vllm-v1", "vLLM 0.3.1": "vllm-0.3"}


def generation_tp_table() -> pd.DataFrame:
    """Generation latency of 1024 x 1024-token samples on 16 A100s by engine TP, memory share and engine.

    Generation only (no training roles): one batch through 16 / t_g engines. The vLLM 0.3.1 rows add
    its fitted per-sequence host overhead at verl's default memory share (0.5).
    """
    rows = []
    for model in ("llama-7b", "llama-13b"):
        for engine, kind in ENGINES.items():
            for util in (0.3, 0.5, 0.8) if kind == "vllm-v1" else (0.5,):
                for tp in (1, 2, 4, 8):
                    data = {
                        "name": f"f3-{model}-{util}-{tp}-{kind}", "steps": 1,
                        "cluster": {"pools": {"gen": {"hardware": "a100-80gb", "nodes": 2, "gpus_per_node": 8}}},
                        "models": {"policy": {"preset": model}},
                        "roles": {"rollout": {"pool": "gen", "model": "policy", "parallel": {"tp": tp},
                                              "engine": {"gpu_memory_utilization": util, "max_num_seqs": 256,
                                                         "kind": kind}}},
                        "algorithm": {"kind": "generate", "prompts_per_step": 1024, "samples_per_prompt": 1},
                        "workload": {"prompt_length": {"kind": "fixed", "value": 1024},
                                     "response_length": {"kind": "fixed", "value": 1024}},
                        "schedule": {"kind": "generation-only"},
                    }
                    s = _run(data)
                    rows.append({"model": model, "engine": engine, "gpu_memory_utilization": util, "gen_tp": tp,
                                 "generation_s": s["step_time_s"] if s else float("nan")})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- F4


def async_scaling_table() -> pd.DataFrame:
    """Throughput of sync / one-step-off / fully async on 16-64 H100s at 50/50 and 75/25 rollout splits."""
    base = _load("hybridflow/grpo-qwen2.5-7b-h100.yaml")
    rows = []
    for gpus in (16, 32, 64):
        for share in (0.5, 0.75):
            gen = int(gpus * share)
            for schedule in ("sync", "one-step-off", "fully-async"):
                data = copy.deepcopy(base)
                data.update(name=f"f4-{gpus}-{share}-{schedule}", steps=2, warmup_steps=1)
                data["algorithm"]["prompts_per_step"] = 8 * gpus  # constant work per GPU
                if schedule == "sync":
                    data["cluster"]["pools"]["main"]["nodes"] = gpus // 8
                    data["schedule"] = {"kind": "hybridflow", "placement": "colocate"}
                else:
                    data["cluster"]["pools"] = {
                        "gen": {"hardware": "h100-sxm", "nodes": gen // 8 or 1, "gpus_per_node": min(8, gen)},
                        "train": {"hardware": "h100-sxm", "nodes": (gpus - gen) // 8 or 1,
                                  "gpus_per_node": min(8, gpus - gen)},
                    }
                    data["roles"]["rollout"]["pool"] = "gen"
                    data["roles"]["rollout"]["engine"]["gpu_memory_utilization"] = 0.8
                    for role in ("actor", "reference"):
                        data["roles"][role]["pool"] = "train"
                    data["schedule"] = ({"kind": "one-step-off"} if schedule == "one-step-off" else
                                        {"kind": "fully-async", "max_head_offpolicyness": 2})
                if schedule == "sync" and share != 0.5:
                    continue  # colocated: no split to vary
                s = _run(data)
                label = schedule if schedule == "sync" else f"{schedule} ({int(share * 100)}% rollout)"
                rows.append({"gpus": gpus, "rollout_share": share if schedule != "sync" else None,
                             "schedule": label,
                             "throughput_tokens_per_s": s["throughput_tokens_per_s"] if s else float("nan"),
                             "gpu_idle_fraction": s["gpu_idle_fraction"] if s else float("nan"),
                             "staleness_mean": s["staleness_mean"] if s else float("nan")})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- F6


def long_tail_table() -> pd.DataFrame:
    """GPU idle vs the response tail (sigma of log-length, max length) for sync, partial rollout, async."""
    base = _load("agentic/tool-latency-base.yaml")
    rows = []
    for max_len in (4096, 16384):
        for sigma in (0.3, 0.7, 1.1, 1.5):
            for schedule in ("sync", "partial-rollout", "fully-async"):
                data = copy.deepcopy(base)
                data.update(name=f"f6-{max_len}-{sigma}-{schedule}", steps=3, warmup_steps=1)
                del data["workload"]["agent"]
                data["environments"] = {}
                data["algorithm"].update(prompts_per_step=64, samples_per_prompt=8)
                data["workload"]["response_length"] = {"kind": "lognormal", "mean": 1000, "sigma": sigma,
                                                       "max": max_len}
                if schedule == "sync":
                    data["schedule"] = {"kind": "hybridflow", "placement": "custom"}
                else:
                    interrupt = "abort-resume" if schedule == "partial-rollout" else "recompute"
                    data["schedule"] = {"kind": "fully-async", "max_head_offpolicyness": 1 if
                                        schedule == "partial-rollout" else 2, "interrupt": interrupt}
                s = _run(data)
                rows.append({"max_response": max_len, "sigma": sigma, "schedule": schedule,
                             "gpu_idle_fraction": s["gpu_idle_fraction"] if s else float("nan"),
                             "throughput_tokens_per_s": s["throughput_tokens_per_s"] if s else float("nan")})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- F8


def batch_group_table() -> pd.DataFrame:
    """Synchronous GRPO on 16 H100: prompts per step x samples per prompt vs throughput and idle."""
    base = _load("hybridflow/grpo-qwen2.5-7b-h100.yaml")
    rows = []
    for n in (4, 8, 16):
        for prompts in (16, 32, 64, 128):
            data = copy.deepcopy(base)
            data.update(name=f"f8-{prompts}-{n}", steps=2, warmup_steps=0)
            data["algorithm"].update(prompts_per_step=prompts, samples_per_prompt=n)
            s = _run(data)
            rows.append({"samples_per_step": prompts * n, "prompts_per_step": prompts, "samples_per_prompt": n,
                         "throughput_tokens_per_s": s["throughput_tokens_per_s"] if s else float("nan"),
                         "gpu_idle_fraction": s["gpu_idle_fraction"] if s else float("nan")})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- reports

FIGURES = {
    "generation-tp": (generation_tp_table, "gen_tp", [("generation_s", "generation latency (s)")], "model",
                      "F3: generation TP vs latency (16 A100, 1024 x 1024)"),
    "async-scaling": (async_scaling_table, "gpus", [("throughput_tokens_per_s", "tokens/s"),
                                                    ("gpu_idle_fraction", "GPU idle")], "schedule",
                      "F4: sync vs one-step-off vs fully async (GRPO 7B, H100)"),
    "long-tail": (long_tail_table, "sigma", [("gpu_idle_fraction", "GPU idle"),
                                             ("throughput_tokens_per_s", "tokens/s")], "schedule",
                  "F6: response-length tail vs GPU idle (7B, 12 + 4 H100)"),
    "batch-group": (batch_group_table, "samples_per_step", [("throughput_tokens_per_s", "tokens/s"),
                                                            ("gpu_idle_fraction", "GPU idle")],
                    "samples_per_prompt", "F8: rollout batch and group size (GRPO 7B, 16 H100 colocated)"),
}


def plot(name: str, tab: pd.DataFrame):
    """The figure `report(name, out)` saves, drawn from `tab` (the table FIGURES[name] builds)."""
    _, x, ys, hue, title = FIGURES[name]
    if name == "generation-tp":
        tab = tab.assign(model=tab["model"] + " @ " + tab["gpu_memory_utilization"].astype(str) + ", " + tab["engine"])
    if name == "long-tail":
        tab = tab.assign(schedule=tab["schedule"] + " max " + tab["max_response"].astype(str))
    return _line_plot(tab, x, ys, hue, title, logx=name == "batch-group")


def report(name: str, out: Path) -> str:
    build, *_, title = FIGURES[name]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tab = build()
    tab.to_csv(out / "table.csv", index=False)
    save_figure(plot(name, tab), out / f"{name}.png")
    return f"{title}\n" + tab.to_string(index=False, float_format=lambda v: f"{v:,.3f}")
