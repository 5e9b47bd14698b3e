"""Asynchronous RL reproductions: AReaL's staleness sweep and verl's one-step-off speedup.

- `areal-staleness` (docs/sources.md §7, §9, AReaL Fig. 5c): effective throughput and staleness of
  the 1.5B math run on its 16-node cluster for max_head_offpolicyness eta in 0, 1, 2, 4, 8, 16 and
  unbounded.
- `verl-one-step-off` (docs/sources.md §6): step times of verl's synchronous and one-step-off
  DAPO runs on 16 H20 (FSDP2, and the Megatron rows of the same doc) and the speedup.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

from rlsim.sim.api import load_scenario, shipped_dir, simulate
from rlsim.tools.report.style import save_figure

ETAS = (0, 1, 2, 4, 8, 16, None)
# Fig. 5c on the paper's 1.5B cluster (96 SGLang + 32 Megatron GPUs, docs/sources.md §9).
AREAL_SCENARIO = "areal-1.5b-fig5c.yaml"
# AReaL Fig. 5c: effective throughput (k tokens/s) of the 1.5B math run by eta (None = unbounded).
AREAL_THROUGHPUT_K = {0: 128.7, 1: 269.3, 2: 356.6, 4: 356.6, 8: 371.7, 16: 382.4, None: 396.8}
# verl docs/advance/one_step_off.md, FSDP2 rows (seconds).
VERL_PUBLISHED = {
    "sync": {"timing_s/step": 749, "timing_s/gen": 321, "timing_s/old_log_prob": 88, "timing_s/update_actor": 286},
    "one-step-off": {"timing_s/step": 520, "timing_s/wait_prev_gen": 45, "timing_s/generate_async": 458,
                     "timing_s/old_log_prob": 108, "timing_s/update_actor": 337},
}
# The same doc's Megatron rows (max response 8,192): nothing in rlsim is fitted to these.
VERL_PUBLISHED_MEGATRON = {
    "sync": {"timing_s/step": 699, "timing_s/gen": 207, "timing_s/old_log_prob": 119, "timing_s/update_actor": 344},
    "one-step-off": {"timing_s/step": 566, "timing_s/wait_prev_gen": 59, "timing_s/generate_async": 501,
                     "timing_s/old_log_prob": 120, "timing_s/update_actor": 347},
}
# The Megatron runs differ from the FSDP2 scenarios only in the trainer backend and the response cap
# (docs/sources.md §6); Megatron's parallel layout is not in the doc (kept at the scenarios' TP1).
MEGATRON_OVERRIDES = ("roles.actor.train.sharding=megatron", "workload.response_length.max=8192")


def _scenario(name: str, overrides=()):
    return load_scenario(shipped_dir("scenarios") / "async" / name, list(overrides))


def areal_staleness_table(steps: int | None = None) -> pd.DataFrame:
    rows = []
    for eta in ETAS:
        overrides = [f"schedule.max_head_offpolicyness={'null' if eta is None else eta}"]
        if steps is not None:
            overrides.append(f"steps={steps}")
        res = simulate(_scenario(AREAL_SCENARIO, overrides))
        s = res.summary
        rows.append({"eta": "inf" if eta is None else eta, "throughput_tokens_per_s": s["throughput_tokens_per_s"],
                     "staleness_mean": s["staleness_mean"], "staleness_max": s["staleness_max"],
                     "trainer_idle_ratio": s.get("trainer_idle_ratio", 0.0), "published_k_tokens_per_s":
                     AREAL_THROUGHPUT_K[eta]})
    table = pd.DataFrame(rows)
    table["normalised"] = table["throughput_tokens_per_s"] / table["throughput_tokens_per_s"].iloc[0]
    table["published_normalised"] = table["published_k_tokens_per_s"] / AREAL_THROUGHPUT_K[0]
    table["error_pct"] = 100 * (table["normalised"] - table["published_normalised"]) / table["published_normalised"]
    return table


def plot_areal(table: pd.DataFrame):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = list(range(len(table)))
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(x, table["normalised"], marker="o", label="rlsim throughput (÷ η=0)")
    ax.plot(x, table["published_normalised"], marker="s", ls="--", label="AReaL Fig. 5c (÷ η=0)")
    ax.set_xticks(x, [str(e) for e in table["eta"]])
    ax.set_xlabel("staleness bound η (max_head_offpolicyness)")
    ax.set_ylabel("throughput relative to η=0")
    ax2 = ax.twinx()
    ax2.bar(x, table["staleness_mean"], alpha=0.25, color="gray", label="mean staleness (rlsim)")
    ax2.set_ylabel("mean staleness (versions)")
    ax.set_zorder(ax2.get_zorder() + 1)  # lines in front of the staleness bars
    ax.patch.set_visible(False)
    ax.legend(loc="upper left", fontsize=8)
    ax2.legend(loc="lower right", fontsize=8)
    ax.set_title("Speed vs stability: AReaL 1.5B, staleness bound sweep")
    fig.tight_layout()
    return fig


def areal_report(out: Path) -> str:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table = areal_staleness_table()
    table[["eta", "throughput_tokens_per_s", "staleness_mean", "staleness_max", "trainer_idle_ratio", "normalised",
           "published_normalised", "error_pct"]].to_csv(out / "table.csv", index=False)
    save_figure(plot_areal(table), out / "throughput_vs_eta.png")
    lines = ["AReaL staleness sweep (1.5B, normalised to eta=0):"]
    lines += [f"  eta={r.eta:>4}: rlsim {r.normalised:.2f}x, AReaL {r.published_normalised:.2f}x "
              f"({r.error_pct:+.0f}%), staleness mean {r.staleness_mean:.2f} max {r.staleness_max:.0f}"
              for r in table.itertuples()]
    return "\n".join(lines)


@functools.cache
def verl_measured(backend: str = "fsdp2") -> dict[str, pd.Series]:
    """Mean step timings of the shipped verl sync and one-step-off scenarios (simulated once per process).

    `backend` "megatron" runs them as the doc's Megatron rows (`MEGATRON_OVERRIDES`).
    """
    overrides = MEGATRON_OVERRIDES if backend == "megatron" else ()
    out = {}
    for mode, name in (("sync", "verl-dapo-7b-h20-sync.yaml"), ("one-step-off", "verl-dapo-7b-h20-one-step-off.yaml")):
        res = simulate(_scenario(name, overrides))
        measured = res.measured_steps.mean(numeric_only=True)
        if mode == "sync":  # verl's sync `gen` timer wraps the hybrid-engine switch (rlsim's update_weights)
            measured["timing_s/gen"] = measured["timing_s/gen"] + measured["timing_s/update_weights"]
        out[mode] = measured
    return out


def verl_table(backend: str = "fsdp2") -> pd.DataFrame:
    published_rows = VERL_PUBLISHED_MEGATRON if backend == "megatron" else VERL_PUBLISHED
    rows = []
    for mode, measured in verl_measured(backend).items():
        for col, published in published_rows[mode].items():
            sim = float(measured.get(col, float("nan")))
            rows.append({"mode": mode, "column": col, "published_s": published, "simulated_s": sim,
                         "error_pct": 100 * (sim - published) / published})
    table = pd.DataFrame(rows).astype({"published_s": float})
    step = table[table["column"] == "timing_s/step"].set_index("mode")
    speed_pub = step.loc["sync", "published_s"] / step.loc["one-step-off", "published_s"]
    speed_sim = step.loc["sync", "simulated_s"] / step.loc["one-step-off", "simulated_s"]
    table.loc[len(table)] = {"mode": "speedup", "column": "sync / one-step-off", "published_s": speed_pub,
                             "simulated_s": speed_sim, "error_pct": 100 * (speed_sim - speed_pub) / speed_pub}
    return table


def plot_verl(tables: dict[str, pd.DataFrame]):
    """Published vs simulated step parts of verl sync and one-step-off, one panel per training backend."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tables), figsize=(5.2 * len(tables), 3.8), squeeze=False)
    for ax, (backend, table) in zip(axes[0], tables.items(), strict=True):
        rows = table[table["mode"] != "speedup"]
        labels = [f"{m}\n{c.removeprefix('timing_s/')}" for m, c in zip(rows["mode"], rows["column"], strict=True)]
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], rows["published_s"], width=0.4, label="published (verl docs)", color="0.6")
        ax.bar([i + 0.2 for i in x], rows["simulated_s"], width=0.4, label="rlsim", color="#4C72B0")
        ax.set_xticks(list(x), labels, rotation=45, ha="right", fontsize=7)
        ax.set_ylabel("seconds per step")
        speed = table[table["mode"] == "speedup"].iloc[0]
        ax.set_title(f"{backend}: speedup {speed.published_s:.2f}x published, {speed.simulated_s:.2f}x rlsim")
        ax.legend(fontsize=7)
    fig.suptitle("verl one-step-off vs sync, Qwen2.5-Math-7B DAPO on 16 H20")
    fig.tight_layout()
    return fig


def verl_report(out: Path) -> str:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tables = {backend: verl_table(backend) for backend in ("fsdp2", "megatron")}
    pd.concat([t.assign(backend=b) for b, t in tables.items()]).to_csv(out / "table.csv", index=False)
    save_figure(plot_verl(tables), out / "step_parts.png")
    lines = []
    for backend, table in tables.items():
        lines.append(f"verl one-step-off vs sync (Qwen2.5-Math-7B DAPO, 16 H20, {backend}):")
        lines += [f"  {r.mode:>12} {r.column:<26} published {r.published_s:8.2f}  rlsim {r.simulated_s:8.2f}  "
                  f"({r.error_pct:+.1f}%)" for r in table.itertuples()]
    lines.append(f"wrote {out / 'table.csv'} and step_parts.png")
    return "\n".join(lines)
