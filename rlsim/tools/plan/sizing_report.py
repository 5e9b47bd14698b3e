"""The inverse sizing's answer: one table that fits 80 columns, sizing.csv-style rows, a figure, a paragraph.

Rows per GPU type: the answer (#1) and its runner-up layouts on the same cluster. The recommendation
names the cheapest type per million tokens and the binding resource: memory when the next smaller
cluster could not hold the model, else the phase that takes most of the answer's critical path
(generation, training, or weight sync and switching).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from rlsim.tools.plan.search import Evaluation
from rlsim.tools.plan.sizing import SEED_REPLICATES as SEEDS
from rlsim.tools.plan.sizing import UNKNOWN_MODEL_ERROR_PCT, SizeTry, Sizing, Target, short_layout

RUNNERS_UP = 2
RESOURCE = {"generate": "generation", "judge": "generation", "env": "generation", "train": "training",
            "forward": "training", "sync": "sync", "switch": "sync"}


def binding_resource(sizing: Sizing) -> tuple[str, str]:
    """(resource, why) for the answer of one GPU type."""
    answer = sizing.answer
    if answer is None:
        return "", ""
    smaller = sizing.tries[-2] if len(sizing.tries) > 1 else None
    if smaller is not None and smaller.memory_bound:
        return "memory", f"{smaller.gpus} GPU{'s' if smaller.gpus > 1 else ''} cannot hold the job"
    s = answer.ranking[0].summary
    shares = {k.removeprefix("critical_path_share_by_phase."): float(v) for k, v in s.items()
              if k.startswith("critical_path_share_by_phase.") and v == v}
    shares.pop("idle", None)
    totals: dict[str, float] = {}
    for phase, share in shares.items():
        res = RESOURCE.get(phase, phase)
        totals[res] = totals.get(res, 0.0) + share
    if not totals:
        return "", ""
    res, share = max(totals.items(), key=lambda kv: kv[1])
    return res, f"{share:.0%} of the step's critical path"


def rows(sizings: list[Sizing]) -> list[dict]:
    """One row per ranked layout of each answer (answer first), one per type without an answer."""
    out = []
    for sz in sizings:
        ans = sz.answer
        if ans is None:
            last = sz.tries[-1] if sz.tries else None
            out.append({"gpu_type": sz.hardware, "rank": None, "gpus": None, "layout": "",
                        "reason": f"not reached with up to {sz.most} GPUs"
                        + (f" ({last.gpus}: {last.why_not})" if last else "")})
            continue
        for rank, e in enumerate(ranked_layouts(ans), 1):
            out.append(_row(sz, ans, rank, e))
    return out


def ranked_layouts(ans: SizeTry) -> list[Evaluation]:
    """The answer and its runner-ups: the best evaluation of each other layout (placement, pools, schedule and
    its settings), so runner-ups differ in more than a parallelism degree."""
    seen, out = set(), []
    for e in ans.ranking:
        k = ans.candidates[e.candidate].knobs
        key = (k["layout"], k["gen_gpus"], k["schedule"], k["schedule_set"])
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out[:1 + RUNNERS_UP]


def _row(sz: Sizing, ans: SizeTry, rank: int, e: Evaluation) -> dict:
    c = ans.candidates[e.candidate]
    s = e.summary
    row = {"gpu_type": sz.hardware, "rank": rank, "gpus": ans.gpus, "layout": short_layout(c), "label": c.label,
           "step_time_s": s["step_time_s"], "throughput_tokens_per_s": s["throughput_tokens_per_s"],
           "cost_per_million_tokens_usd": s.get("cost_per_million_tokens_usd"),
           "price_usd_per_hour": c.price_usd_per_hour, "staleness_mean": s.get("staleness_mean", 0.0),
           "gpu_idle_pct": 100 * s["gpu_idle_fraction"], "measured_steps": e.steps, "reason": ""}
    if rank == 1 and sz.band:
        for k, v in sz.band.items():
            row[f"band_{k}"] = v
    if rank == 1 and (v := sz.verdict) is not None:
        row |= {"margin_pct": v.margin_pct, "smaller_gpus": v.smaller_gpus, "smaller_short_pct": v.smaller_short_pct,
                "band_pct": v.band_pct, "band_seed_pct": v.seed_pct, "band_model_error_pct": v.model_pct,
                "coin_toss": v.coin_toss}
    return row


def sizing_table(sizings: list[Sizing]) -> pd.DataFrame:
    """plan.csv of a sizing: the ranked rows, then every size tried and why it fell short."""
    tried = [{"gpu_type": sz.hardware, "rank": None, "gpus": t.gpus, "layout": "", "reason": t.why_not,
              "candidates": len(t.candidates)} for sz in sizings for t in sz.tries if not t.ranking]
    return pd.DataFrame(rows(sizings) + tried)


def band_pct(row: dict) -> str:
    """The one band of an answer (seed spread and model error combined), else the seed spread alone."""
    if row.get("band_pct") is not None:  # "+?": the model's error is unknown here (no validated regime nearby)
        return _pct(row["band_pct"]) + ("+?" if row.get("band_model_error_pct") is None else "")
    half, mean = row.get("band_throughput_tokens_per_s_ci95"), row.get("band_throughput_tokens_per_s")
    return "" if half is None or not mean else f"{100 * half / mean:.1f}%"


def verdict_lines(sizings: list[Sizing], target: Target) -> list[str]:
    """Per answer: its margin over the target, the nearest smaller size's shortfall, the band with its parts
    named, and a coin-toss flag where the smaller size falls short by less than the band."""
    out = []
    for sz in sizings:
        v = sz.verdict
        if v is None:
            continue
        line = f"{sz.hardware}: {sz.answer.gpus} GPUs, margin {v.margin_pct:+.1f}% over {target.text}"
        if v.smaller_gpus is not None:
            fewer = f"{v.smaller_gpus} GPU{'s' if v.smaller_gpus > 1 else ''}"
            line += (f"; {fewer}: {v.smaller_why}" if v.smaller_short_pct is None
                     else f"; {fewer} fall{'s' if v.smaller_gpus == 1 else ''} {v.smaller_short_pct:.1f}% short")
        out.append(line + ".")
        seed = (f"seed spread {_pct(v.seed_pct)} (95%, {SEEDS} seeds)" if v.seed_pct is not None
                else "seed spread not measured")
        model = (f"model error {_pct(v.model_pct)} (RMS of the {v.model_rows} validated rows like this job: "
                 f"{v.model_regime})" if v.model_pct is not None else
                 "model error unknown: no validated regime nearby, so size with margin")
        out.append(f"  band ± {_pct(v.band_pct)} = {seed} with {model}")
        if v.coin_toss:
            within = ("the band" if v.model_pct is not None else
                      f"{UNKNOWN_MODEL_ERROR_PCT:.0f}% (the model's error here is unknown)")
            out.append(f"  COIN TOSS: {v.smaller_gpus} GPUs fall short by less than {within}, so either size may "
                       "be the answer; a calibration run on your cluster (rlsim calibrate --from-log LOG "
                       "--scenario JOB) would settle it")
    return out


def text_rows(sizings: list[Sizing]) -> list[tuple[str, ...]]:
    """Cells of the printed table: GPU, #, GPUs, layout, step s, tokens/s, ±, $/M tokens."""
    out = []
    for r in rows(sizings):
        if r["rank"] is None:
            out.append((r["gpu_type"], "-", "-", r["reason"], "", "", "", ""))
            continue
        cost = r["cost_per_million_tokens_usd"]
        out.append((r["gpu_type"] if r["rank"] == 1 else "", str(r["rank"]), str(r["gpus"]), r["layout"],
                    f"{r['step_time_s']:.1f}", f"{r['throughput_tokens_per_s']:,.0f}", band_pct(r),
                    "-" if cost is None else f"{cost:.3f}"))
    return out


def _pct(value: float) -> str:
    return f"{value:.0f}%" if value >= 10 else f"{value:.1f}%"


def recommendation(sizings: list[Sizing], target: Target) -> str:
    """One paragraph: the cheapest type that reaches the target, the others, and the binding resource."""
    done = [sz for sz in sizings if sz.answer is not None]
    missed = [sz for sz in sizings if sz.answer is None]
    if not done:
        return (f"No GPU type reaches {target.text} within its limit ("
                + "; ".join(f"{sz.hardware} up to {sz.most} GPUs" for sz in missed) + "): raise MAX or relax "
                "the target.")

    def cost(sz: Sizing) -> float:
        v = sz.answer.ranking[0].summary.get("cost_per_million_tokens_usd")
        return float("inf") if v is None else float(v)

    done.sort(key=lambda sz: (cost(sz), sz.answer.gpus))
    best = done[0]
    parts = [f"For {target.text}, the cheapest is {_answer_text(best)}."]
    parts += [f"{sz.hardware} needs {_answer_text(sz, short=True)}." for sz in
              done[1:]]
    parts += [f"{sz.hardware} does not reach it with up to {sz.most} GPUs." for sz in missed]
    for sz in done:
        res, why = binding_resource(sz)
        if res:
            parts.append(f"On {sz.hardware} the binding resource is {res} ({why}); "
                         f"{_smaller_text(sz)}")
    return " ".join(parts)


def _answer_text(sz: Sizing, short: bool = False) -> str:
    ans = sz.answer
    e = ans.ranking[0]
    s = e.summary
    c = ans.candidates[e.candidate]
    cost = s.get("cost_per_million_tokens_usd")
    money = "" if cost is None else f" at ${cost:.3f} per million tokens"
    head = f"{ans.gpus} GPUs" if short else f"{sz.hardware}: {ans.gpus} GPUs"
    return f"{head}, {short_layout(c)}, {s['throughput_tokens_per_s']:,.0f} tokens/s{money}"


def _smaller_text(sz: Sizing) -> str:
    if len(sz.tries) < 2:
        return "no smaller cluster was tried."
    t = sz.tries[-2]
    return f"one size down, {t.gpus} GPU{'s' if t.gpus > 1 else ''}: {t.why_not}."


def sizing_figure(sizings: list[Sizing], target: Target) -> Figure:
    """GPUs needed and $ per million tokens per GPU type (answer and runner-ups), side by side."""
    from rlsim.tools.report.style import apply_style

    apply_style()
    fig = Figure(figsize=(10, 4.2))
    ax_gpus, ax_cost = fig.subplots(1, 2)
    names = [sz.hardware for sz in sizings]
    gpus = [sz.answer.gpus if sz.answer else 0 for sz in sizings]
    bars = ax_gpus.bar(names, gpus, color="#4C72B0")
    for bar, sz in zip(bars, sizings, strict=True):
        text = f"{sz.answer.gpus}" if sz.answer else f"> {sz.most}"
        ax_gpus.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom")
    ax_gpus.set_ylabel("GPUs needed (smallest cluster reaching the target)")
    ax_gpus.set_title(f"Target: {target.text}")
    for i, sz in enumerate(sizings):
        if sz.answer is None:
            continue
        for rank, e in enumerate(ranked_layouts(sz.answer)):
            cost = e.summary.get("cost_per_million_tokens_usd")
            if cost is None:
                continue
            err = sz.band.get("cost_per_million_tokens_usd_ci95") if rank == 0 else None
            ax_cost.errorbar(i + 0.18 * rank, cost, yerr=err, fmt="o" if rank == 0 else "x",
                             color="crimson" if rank == 0 else "0.5", capsize=3,
                             label=("answer (95% band over seeds)" if rank == 0 else "runner-up layouts")
                             if i == 0 else None)
    ax_cost.set_xticks(range(len(names)), names)
    ax_cost.set_xlim(-0.5, len(names) - 0.3)
    ax_cost.set_ylabel("$ per million tokens")
    ax_cost.set_title("Cost of the answer and its runner-ups")
    ax_cost.set_ylim(bottom=0)
    ax_cost.legend(loc="lower right")
    return fig


def write_sizing(sizings: list[Sizing], target: Target, out: Path) -> dict[str, Path]:
    """plan.csv, sizing.png and sizing.md under `out`."""
    from rlsim.tools.report.style import save_figure

    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "plan.csv", "png": out / "sizing.png", "md": out / "sizing.md"}
    sizing_table(sizings).to_csv(paths["csv"], index=False)
    paths["png"] = save_figure(sizing_figure(sizings, target), paths["png"])
    lines = [f"# rlsim plan: smallest cluster for {target.text}", "", recommendation(sizings, target), "",
             *verdict_lines(sizings, target), ""]
    paths["md"].write_text("\n".join(lines))
    return paths
