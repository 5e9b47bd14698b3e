"""The plan's evidence: plan.csv, the Pareto front, ready-to-run YAMLs of the top candidates and why they win.

Explanations are read off each recommendation's own summary: the phase that keeps GPUs busiest, the
step's longest timing (the critical path of a synchronous step), the pool that idles most and what it
waits for, and how much better the runner-up would have to be to take first place.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import yaml

from rlsim.tools.plan.candidates import Candidate
from rlsim.tools.plan.search import Evaluation, SearchResult

METRICS = ("throughput_tokens_per_s", "cost_per_million_tokens_usd", "step_time_s", "staleness_mean",
           "staleness_max", "gpu_idle_fraction")


def latest(result: SearchResult) -> dict[int, Evaluation]:
    """Each evaluated candidate's evaluation at the highest rung it reached."""
    out: dict[int, Evaluation] = {}
    for e in result.evaluations:
        if e.candidate not in out or e.rung >= out[e.candidate].rung:
            out[e.candidate] = e
    return out


def plan_table(result: SearchResult) -> pd.DataFrame:
    """One row per evaluation, then one per candidate never simulated (with why)."""
    rank = {e.candidate: i + 1 for i, e in enumerate(result.ranking)}
    final_rung = max((e.rung for e in result.evaluations), default=0)
    rows = []
    for e in result.evaluations:
        c = result.candidates[e.candidate]
        status = "error" if e.error else ("violates" if e.violations else "evaluated")
        row = _base_row(c, status, "; ".join(e.violations) or (e.error or ""))
        row.update(rung=e.rung, steps=e.steps, objective=e.objective,
                   rank=rank.get(e.candidate) if e.rung == final_rung else None)
        row.update(e.summary or {})
        rows.append(row)
    screened = {e.candidate: e for e in result.screen}
    for c in result.candidates:
        if c.status != "feasible":
            row = _base_row(c, c.status, c.reason)
            e = screened.get(c.index) if c.status == "screened" else None
            if e is not None:  # its screen's figures (aggregate mode, rung -1)
                row.update(rung=e.rung, steps=e.steps, objective=e.objective)
                row.update(e.summary or {})
            rows.append(row)
    table = pd.DataFrame(rows)
    first = [k for k in ("candidate", "label", "status", "reason", "rung", "steps", "rank", "objective", *METRICS)
             if k in table.columns]
    return table[first + [k for k in table.columns if k not in first]]


def _base_row(c: Candidate, status: str, reason: str) -> dict:
    bound = {f"bound_{k}": v for k, v in c.bound.items()}
    return {"candidate": c.index, "label": c.label, "status": status, "reason": reason, **c.knobs,
            "price_usd_per_hour": c.price_usd_per_hour, **bound}


def _share(summary: dict, prefix: str) -> dict[str, float]:
    return {k.removeprefix(prefix): float(v) for k, v in summary.items()
            if k.startswith(prefix) and v is not None and not math.isnan(float(v))}


def _bottleneck(summary: dict) -> tuple[list[tuple[str, float]], str]:
    """Phases by their share of the step's critical path (what a step waits for), idle left out;
    GPU-time shares where a record has no critical path."""
    phases = _share(summary, "critical_path_share_by_phase.")
    if phases:
        phases.pop("idle", None)
        return sorted(phases.items(), key=lambda kv: -kv[1]), "of the critical path"
    return sorted(_share(summary, "busy_fraction_by_phase.").items(), key=lambda kv: -kv[1]), "of GPU time"


def _pool_roles(c: Candidate) -> dict[str, list[str]]:
    roles: dict[str, list[str]] = {}
    for name, role in c.data["roles"].items():
        roles.setdefault(role["pool"], []).append(name)
    return roles


def explain(c: Candidate, e: Evaluation) -> list[str]:
    """The bottleneck phase, the step's longest part, the idlest pool and why it idles."""
    s = e.summary
    phases, basis = _bottleneck(s)
    lines = []
    if phases:
        top, share = phases[0]
        rest = ", ".join(f"{p} {v:.0%}" for p, v in phases[1:4])
        lines.append(f"bottleneck phase: {top} ({share:.0%} {basis}{'; ' + rest if rest else ''})")
    parts = sorted(((k, v) for k, v in e.timing.items() if k != "step"), key=lambda kv: -kv[1])
    if parts and "step" in e.timing:
        rest = ", ".join(f"{k} {v:.1f} s" for k, v in parts[1:4])
        lines.append(f"longest part of a {e.timing['step']:.1f} s step: {parts[0][0]} {parts[0][1]:.1f} s"
                     + (f" ({rest})" if rest else ""))
    lines += _useful(s)
    lines += expert_parallel(c)
    idle = _share(s, "idle_fraction_by_pool.")
    if idle:
        pool, frac = max(idle.items(), key=lambda kv: (kv[1], kv[0]))
        roles = _pool_roles(c).get(pool, [])
        if frac < 0.01:
            lines.append("no pool idles more than 1% of the time: every GPU is busy in some phase")
        else:
            lines.append(f"idlest pool: {pool} ({'+'.join(roles) or 'no roles'}) idles {frac:.0%}: "
                         f"{_why_idle(roles, phases[0][0] if phases else '')}")
    return lines


def _ep_sizes(c: Candidate) -> dict[str, int]:
    """Each role's expert-parallel degree as the candidate's scenario mapping sets it (roles at ep 1 left out)."""
    roles = c.data.get("roles") or {}
    parallel = {name: role.get("parallel") for name, role in roles.items() if isinstance(role, dict)}
    sizes = {name: p.get("ep", 1) for name, p in parallel.items() if isinstance(p, dict)}
    return {name: ep for name, ep in sizes.items() if isinstance(ep, int) and ep > 1}


def expert_parallel(c: Candidate) -> list[str]:
    """Where a candidate shards an MoE model's experts (ep > 1): over whose GPUs and how many experts each holds
    (roles laid out alike, e.g. an actor and its reference, share one clause)."""
    clauses: dict[str, list[str]] = {}
    for name, ep in _ep_sizes(c).items():
        role = c.scenario.roles[name]
        experts, tp = c.scenario.models[role.model].num_experts, role.parallel.tp
        if role.engine is not None:
            split = "whole experts" if ep == tp else f"each split over {tp // ep} GPUs"
            text = f"ep {ep} of each engine's tp {tp} ({experts // ep} experts per GPU, {split})"
        else:
            layout = c.scenario.layout(name)
            text = (f"ep {ep} over tp x dp = {layout.stage_ranks} ranks (1/{layout.expert_group} of the experts "
                    f"per GPU, expert data parallel {layout.expert_dp})")
        clauses.setdefault(text, []).append(name)
    if not clauses:
        return []
    return ["expert parallel: " + "; ".join(f"{' and '.join(names)} {text}" for text, names in clauses.items())]


def _useful(s: dict) -> list[str]:
    """Busy is not useful: the pool with the largest thin-tail share, and MFU / MBU of each pool's phases."""
    out = []
    tail = _share(s, "tail_share_by_pool.")
    if tail:
        pool, frac = max(tail.items(), key=lambda kv: (kv[1], kv[0]))
        if frac >= 0.01:
            out.append(f"busy but thin: {pool} spends {frac:.0%} of its busy time decoding fewer than a quarter "
                       "of its engines' batch")
    mfu, mbu = _share(s, "mfu_by_phase."), _share(s, "mbu_by_phase.")
    if mfu:
        parts = [f"{k} {v:.0%}" + (f" (MBU {mbu[k]:.0%})" if k in mbu else "") for k, v in sorted(mfu.items())]
        out.append("MFU: " + ", ".join(parts))
    return out


def _why_idle(roles: list[str], bottleneck: str) -> str:
    if "rollout" in roles and "actor" not in roles:
        if bottleneck == "generate":
            return "engines that finish their share early wait for the longest responses"
        return "generation outpaces training; the engines wait for the trainer and its weights"
    if "actor" in roles and "rollout" not in roles:
        return "the trainer waits for generation" if bottleneck == "generate" else "the trainer waits for its inputs"
    if "rollout" in roles:
        return "during generation GPUs whose engines finished wait for the long tail of the batch"
    return f"{'+'.join(roles)} run only in their own phases and wait for the rest of the step"


def _needs(best: Evaluation, other: Evaluation, objective: str) -> str:
    s, o = best.summary, other.summary
    if objective == "throughput":
        gain = s["throughput_tokens_per_s"] / o["throughput_tokens_per_s"] - 1
        what = (f"{gain:.1%} more throughput ({o['throughput_tokens_per_s']:,.0f} vs "
                f"{s['throughput_tokens_per_s']:,.0f} tokens/s)")
    elif objective == "cost":
        cut = 1 - s["cost_per_million_tokens_usd"] / o["cost_per_million_tokens_usd"]
        what = f"{cut:.1%} lower $ per million tokens ({o['cost_per_million_tokens_usd']:.3f} vs " \
               f"{s['cost_per_million_tokens_usd']:.3f})"
    else:
        cut = 1 - best.objective / other.objective
        what = f"{cut:.1%} less time to the steps ({-other.objective:.1f} h vs {-best.objective:.1f} h)"
    phases, basis = _bottleneck(o)
    hint = f"; e.g. its {phases[0][0]} phase ({phases[0][1]:.0%} {basis}) that much faster" if phases else ""
    return f"would need {what}{hint}"


def slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+=-]+", "_", label).strip("_")[:80]


def recommendation_yaml(c: Candidate, rank: int, steps: int, e: Evaluation, why: list[str]) -> str:
    """A scenario file `rlsim run` accepts: the candidate's mapping with the base scenario's step count."""
    data = {**c.data, "name": f"{c.data.get('name', 'plan')}-plan-{rank}", "steps": steps}
    head = [f"# rlsim plan recommendation #{rank}: {c.label}",
            f"# planned on {e.steps} measured steps: {e.summary['throughput_tokens_per_s']:,.0f} tokens/s"
            + (f", ${e.summary['cost_per_million_tokens_usd']:.3f} per million tokens"
               if "cost_per_million_tokens_usd" in e.summary else "")]
    head += [f"# {line}" for line in why]
    return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False, width=110)


def saturation_findings(result: SearchResult, elasticity: float = 0.25) -> list[str]:
    """Where more generation GPUs (all else equal) buy little throughput and idle more.

    Little: the throughput gain is less than `elasticity` times the relative growth of the cluster.
    """
    rung0 = [e for e in result.evaluations if e.rung == 0 and e.summary is not None]
    exact = {e.candidate for e in rung0}  # a screened-out candidate speaks through its screen (aggregate mode)
    rung0 += [e for e in result.screen if e.summary is not None and e.candidate not in exact]
    groups: dict[tuple, list[tuple[int, Evaluation]]] = {}
    for e in rung0:
        k = result.candidates[e.candidate].knobs
        if k["gen_gpus"] is None:
            continue
        key = tuple((n, v) for n, v in k.items() if n not in ("gen_gpus", "gpus"))
        groups.setdefault(key, []).append((k["gen_gpus"], e))
    lines = []
    for key, items in groups.items():
        items.sort(key=lambda t: t[0])
        for (g0, e0), (g1, e1) in zip(items, items[1:], strict=False):
            s0, s1 = e0.summary, e1.summary
            gain = s1["throughput_tokens_per_s"] / s0["throughput_tokens_per_s"] - 1
            grow = s1["num_gpus"] / s0["num_gpus"] - 1
            i0, i1 = s0.get("idle_fraction_by_pool.gen"), s1.get("idle_fraction_by_pool.gen")
            if gain < elasticity * grow and i0 is not None and i1 is not None and i1 > i0:
                where = ", ".join(f"{n}={v}" for n, v in key if n in ("hardware", "train_gpus", "schedule")
                                  and v not in (None, ""))
                cost = ""
                if "cost_per_million_tokens_usd" in s0 and "cost_per_million_tokens_usd" in s1:
                    ratio = s1["cost_per_million_tokens_usd"] / s0["cost_per_million_tokens_usd"]
                    cost = f", $ per million tokens {ratio - 1:+.0%}"
                lines.append(f"{where}: beyond {g0} generation GPUs more only add idle time: {g0} -> {g1} "
                             f"({grow:+.0%} GPUs) give {gain:+.1%} throughput{cost}, and the generation pool "
                             f"idles {i0:.0%} -> {i1:.0%}")
                break
    return lines


def write_plan(result: SearchResult, out: Path, objective: str, steps: int, top_k: int) -> dict[str, Path]:
    """plan.csv, pareto.png, recommendations/*.yaml and plan.md under `out`."""
    from rlsim.tools.plan.pareto_plot import plot_plan_pareto

    out.mkdir(parents=True, exist_ok=True)
    table = plan_table(result)
    paths = {"csv": out / "plan.csv", "png": out / "pareto.png", "md": out / "plan.md"}
    table.to_csv(paths["csv"], index=False)
    fig = plot_plan_pareto(result, latest(result), top_k)
    fig.savefig(paths["png"], dpi=120)
    rec_dir = out / "recommendations"
    rec_dir.mkdir(exist_ok=True)
    for old in rec_dir.glob("*.yaml"):
        old.unlink()
    md = [f"# rlsim plan ({objective})", ""]
    for i, (c, e, why) in enumerate(recommendations(result, objective, top_k), 1):
        path = rec_dir / f"{i}-{slug(c.label)}.yaml"
        path.write_text(recommendation_yaml(c, i, steps, e, why))
        paths[f"rec{i}"] = path
        md += [f"## {i}. {c.label}", "", f"`{path.name}`: " + _headline(e), ""] + [f"- {w}" for w in why] + [""]
    findings = saturation_findings(result)
    if findings:
        md += ["## Generation GPUs that only add idle time", ""] + [f"- {f}" for f in findings] + [""]
    paths["md"].write_text("\n".join(md))
    return paths


def _headline(e: Evaluation) -> str:
    s = e.summary
    cost = f", ${s['cost_per_million_tokens_usd']:.3f}/M tokens" if "cost_per_million_tokens_usd" in s else ""
    return (f"{s['throughput_tokens_per_s']:,.0f} tokens/s{cost}, step {s['step_time_s']:.1f} s, "
            f"staleness {s.get('staleness_mean', 0):.2f}, GPU idle {s['gpu_idle_fraction']:.0%} "
            f"({e.steps} step{'s' if e.steps > 1 else ''})")


def _best_other_layout(result: SearchResult, c: Candidate) -> Evaluation | None:
    """The best evaluation (at the last rung it reached) of another hardware, layout or schedule."""
    key = ("hardware", "gpus", "gen_gpus", "schedule", "layout", "sets", "schedule_set")
    mine = tuple(c.knobs[k] for k in key)
    best = None
    for cid, e in latest(result).items():
        if not e.ok or tuple(result.candidates[cid].knobs[k] for k in key) == mine:
            continue
        if best is None or (e.objective, -cid) > (best.objective, -best.candidate):
            best = e
    return best


def _without_ep(result: SearchResult, c: Candidate, e: Evaluation, objective: str, runner_up: int | None) -> list[str]:
    """When `c` uses expert parallelism: what the best candidate without it would need (unless that is the
    runner-up, already compared), or that none ran."""
    if not _ep_sizes(c):
        return []
    plain = [cand for cand in result.candidates if cand.data and not _ep_sizes(cand)]
    runs = latest(result)
    done = [runs[p.index] for p in plain if p.index in runs and runs[p.index].ok]
    if done:
        best = max(done, key=lambda r: (r.objective, -r.candidate))
        if best.candidate == runner_up:
            return []
        return [f"best without expert parallelism {result.candidates[best.candidate].label}: "
                f"{_needs(e, best, objective)}"]
    if plain:
        return [f"no candidate without expert parallelism ran to the end ({len(plain)} in the space; plan.csv says "
                "why: refused by the checks, pruned by their bound, or failing a constraint)"]
    return []


def recommendations(result: SearchResult, objective: str, top_k: int):
    """(candidate, evaluation, explanation lines) for the top_k, best first."""
    ranked = result.ranking[:top_k]
    out = []
    for i, e in enumerate(ranked):
        c = result.candidates[e.candidate]
        why = explain(c, e)
        if i == 0 and len(ranked) > 1:
            why.append(f"runner-up #2 {result.candidates[ranked[1].candidate].label}: "
                       f"{_needs(e, ranked[1], objective)}")
        if i == 0:
            other = _best_other_layout(result, c)
            if other is not None and (len(ranked) < 2 or other.candidate != ranked[1].candidate):
                why.append(f"best other layout {result.candidates[other.candidate].label}: "
                           f"{_needs(e, other, objective)}")
            why += _without_ep(result, c, e, objective, ranked[1].candidate if len(ranked) > 1 else None)
        elif i > 0:
            why.append(f"to beat #1 this one {_needs(ranked[0], e, objective)}")
        out.append((c, e, why))
    return out
