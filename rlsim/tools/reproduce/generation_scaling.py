"""Generation at scale: a fixed batch spread over more GPUs stops getting faster.

- `areal-generation-scaling` (AReaL blog v0.3, docs/sources.md §9): per-GPU generation throughput of
  a 1.5B reasoning model on H800 with a fixed batch, 8 to 128 GPUs. The blog gives no response lengths:
  the scenario's length law (16k-context stage) has its sigma fitted to the two end points (8 and 128
  GPUs, `AREAL_FITTED_GPUS`); the three points between test the engine-kind costs (SGLang), the decode
  shape and the length tail.
- `verl-generation-flat` (verl issue #2751, docs/sources.md §9): users report a fixed batch whose
  generation time stays flat from 4 to 16 nodes. Scored as a bound: 4x the nodes must cut generation
  time by less than 40% (the reports say "flat"; 0.6 leaves room for the unknown batch and lengths).

Both come from one mechanism: with few sequences per engine the step is the weight read plus the
engine's per-step cost, nearly independent of batch, and the longest response sets the end.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rlsim.sim.api import load_scenario, shipped_dir, simulate
from rlsim.tools.report.style import save_figure

# AReaL blog v0.3 figure, read from the plot (+-5%): k tokens/s per GPU at 8/16/32/64/128 GPUs.
AREAL_PER_GPU_K = {8: 16.3, 16: 14.4, 32: 12.5, 64: 9.7, 128: 5.0}
AREAL_FITTED_GPUS = (8, 128)  # set the scenario's length sigma (see its header): fitted, not validated
FLAT_NODES = (4, 8, 16)
FLAT_BOUND = 0.6  # generation time at 16 nodes / at 4 nodes must stay above this ("flat")


def areal_scaling_table(overrides: list[str] | None = None, gpu_counts: tuple[int, ...] | None = None) -> pd.DataFrame:
    """Per-GPU generation throughput at each GPU count; `overrides` apply to every point (fit checks)."""
    path = shipped_dir("scenarios") / "async" / "areal-1.5b-generation-scaling.yaml"
    rows = []
    for gpus in gpu_counts or tuple(AREAL_PER_GPU_K):
        published = AREAL_PER_GPU_K[gpus]
        res = simulate(load_scenario(path, [f"cluster.pools.gen.nodes={gpus // 8}", *(overrides or [])]))
        steps = res.steps
        gen_s = float(steps["timing_s/gen"].sum())
        tokens = float(steps["response_tokens"].sum())
        per_gpu = tokens / gen_s / gpus / 1e3
        rows.append({"gpus": gpus, "generation_s": gen_s, "response_tokens": tokens,
                     "simulated_k_tokens_per_s_per_gpu": per_gpu, "published_k_tokens_per_s_per_gpu": published,
                     "status": "fitted" if gpus in AREAL_FITTED_GPUS else "predicted",
                     "error_pct": 100.0 * (per_gpu - published) / published})
    return pd.DataFrame(rows)


def verl_flat_table() -> pd.DataFrame:
    path = shipped_dir("scenarios") / "hybridflow" / "verl-generation-flat.yaml"
    rows = []
    for nodes in FLAT_NODES:
        res = simulate(load_scenario(path, [f"cluster.pools.main.nodes={nodes}"]))
        rows.append({"nodes": nodes, "gpus": nodes * 8, "generation_s": float(res.steps["timing_s/gen"].mean())})
    table = pd.DataFrame(rows)
    table["relative_to_4_nodes"] = table["generation_s"] / table["generation_s"].iloc[0]
    return table


def _plot(table: pd.DataFrame, x: str, ys: list[tuple[str, str, str]], title: str, ylabel: str, out: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for col, label, style in ys:
        ax.plot(table[x], table[col], style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(table[x], [str(v) for v in table[x]])
    ax.set_xlabel("GPUs")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out)


def areal_report(out: Path) -> str:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table = areal_scaling_table()
    table.to_csv(out / "table.csv", index=False)
    _plot(table, "gpus", [("published_k_tokens_per_s_per_gpu", "AReaL (published)", "ks--"),
                          ("simulated_k_tokens_per_s_per_gpu", "rlsim", "o-")],
          "1.5B LRM generation on H800, fixed batch", "k tokens/s per GPU", out / "generation_scaling.png")
    err = table.loc[table["status"] == "predicted", "error_pct"].abs()
    lines = [f"areal-generation-scaling: predicted points median |error| {err.median():.1f}%, max {err.max():.1f}% "
             f"(tolerance 15%; {', '.join(map(str, AREAL_FITTED_GPUS))} GPUs set the length sigma); "
             f"wrote {out / 'table.csv'} and generation_scaling.png"]
    lines += [f"  {int(r.gpus):4d} GPUs  {r.simulated_k_tokens_per_s_per_gpu:6.2f}k vs "
              f"{r.published_k_tokens_per_s_per_gpu:5.1f}k per GPU  {r.error_pct:+6.1f}%  {r.status}"
              for r in table.itertuples()]
    return "\n".join(lines)


def verl_flat_report(out: Path) -> str:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table = verl_flat_table()
    table.to_csv(out / "table.csv", index=False)
    _plot(table, "gpus", [("generation_s", "rlsim timing_s/gen", "o-")],
          "Fixed batch, more nodes (verl issue #2751)", "generation time per step (s)", out / "generation_flat.png")
    ratio = float(table["relative_to_4_nodes"].iloc[-1])
    verdict = "holds" if ratio > FLAT_BOUND else "FAILS"
    return (f"verl-generation-flat: 16 nodes take {ratio:.2f}x the generation time of 4 nodes (bound > {FLAT_BOUND}: "
            f"{verdict}); wrote {out / 'table.csv'} and generation_flat.png")
