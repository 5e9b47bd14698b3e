"""The results folder of DESIGN.md's output contract, and the terminal summary table."""

from __future__ import annotations

import json
import math
from pathlib import Path

from rlsim import __version__
from rlsim.scenario.loader import dump_scenario
from rlsim.simulate import Result


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value


def write_results(result: Result, out_dir: Path, plots: bool = True) -> list[Path]:
    """Write summary.json, steps.csv, timeline.csv, scenario.resolved.yaml, meta.json (+ PNG plots)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def put(name: str, text: str) -> None:
        path = out / name
        path.write_text(text)
        written.append(path)

    put("summary.json", json.dumps(_jsonable(result.summary), indent=2, sort_keys=True) + "\n")
    put("scenario.resolved.yaml", dump_scenario(result.scenario))
    put("meta.json", json.dumps(_jsonable({"rlsim_version": __version__, **result.meta}), indent=2) + "\n")
    result.steps.to_csv(out / "steps.csv", index=False)
    result.timeline.to_csv(out / "timeline.csv", index=False)
    written += [out / "steps.csv", out / "timeline.csv"]
    if not result.engine_stats.empty:
        result.engine_stats.to_csv(out / "engine_stats.csv", index=False)
        written.append(out / "engine_stats.csv")
    if plots:
        from rlsim.report.plots import save_default_plots

        written += save_default_plots(result, out)
    return written


def summary_rows(result: Result) -> list[tuple[str, str]]:
    """Human-readable (metric, value) rows for the terminal."""
    s = result.summary
    rows = [
        ("scenario", result.scenario.name),
        ("GPUs", f"{s['num_gpus']}"),
        ("measured steps", f"{s['steps']}"),
        ("step time", f"{s['step_time_s']:.2f} s"),
        ("throughput", f"{s['throughput_tokens_per_s']:,.0f} tok/s ({s['throughput_tokens_per_s_per_gpu']:,.1f} /GPU)"),
        ("samples/s", f"{s['samples_per_s']:.2f}"),
        ("mean response", f"{s['response_length_mean']:,.0f} tokens"),
        ("GPU idle", f"{s['gpu_idle_fraction']:.1%}"),
    ]
    for pool, idle in s["idle_fraction_by_pool"].items():
        rows.append((f"  idle: {pool}", f"{idle:.1%}"))
    for phase, frac in s["busy_fraction_by_phase"].items():
        rows.append((f"  busy: {phase}", f"{frac:.1%}"))
    rows.append(("staleness mean / max", f"{s['staleness_mean']:.2f} / {s['staleness_max']:.0f}"))
    if "cost_per_million_tokens_usd" in s:
        rows.append(("cost", f"${s['cost_usd']:,.2f} (${s['cost_per_million_tokens_usd']:.3f} per M tokens)"))
    rows.append(("simulated / wall", f"{result.meta['simulated_time_s']:,.1f} s / {result.meta['wall_time_s']:.2f} s"))
    return rows
