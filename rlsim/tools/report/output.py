"""The results folder of the output contract, reading it back, and the terminal summary rows.

The contract is summarised in docs/sources.md, Design notes: Outputs.
"""

from __future__ import annotations

import json
import math
import platform
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from rlsim import __version__
from rlsim.sim.api import dump_scenario
from rlsim.tools.report.formats import show
from rlsim.tools.report.uncertainty import flat_metrics

if TYPE_CHECKING:
    from rlsim.sim.api import Result

CONTRACT_FILES = ["scenario.resolved.yaml", "summary.json", "steps.csv", "timeline.csv", "trace.json"]


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def have_parquet() -> bool:
    """Parquet is written only when pyarrow is importable; it is not a dependency."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def derived_costs(summary: dict) -> dict:
    """Cost per measured step, from the summary's cost_usd (absent when some pool has no price)."""
    out = {}
    if summary.get("cost_usd") is not None and summary.get("steps"):
        out["cost_per_step_usd"] = summary["cost_usd"] / summary["steps"]
    return out


def full_summary(result: Result) -> dict:
    """The summary as written to summary.json: metrics' keys plus derived cost keys it may lack."""
    summary = dict(result.summary)
    for k, v in derived_costs(summary).items():
        summary.setdefault(k, v)
    return summary


def prepare_out_dir(out_dir: Path) -> str | None:
    """Create the results folder and prove it writable; the problem as one line, or None.

    Checked before simulating, so an unusable --out (an existing file, a path under a file, a
    read-only folder) costs nothing and never ends in a traceback after a long run.
    """
    import tempfile

    out = Path(out_dir)
    blocker = next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), None)
    if blocker == out:
        return "is a file, not a folder"
    if blocker is not None:
        return f"is under {blocker}, which is a file, not a folder"
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        return f"cannot write there: {exc.strerror or exc}"
    return None


SERIES_MIN_STEPS = 20  # from this many steps on, the results folder holds step_series.png even without plots


def write_results(result: Result, out_dir: Path, plots: bool = True, series: bool = False) -> list[Path]:
    """Write the contract files (+ meta.json, samples.csv, engine_stats.csv, Parquet, PNG plots).

    `series` without `plots`: step_series.png alone, for a run of at least SERIES_MIN_STEPS steps."""
    from rlsim.tools.report.trace import to_chrome_trace, write_trace

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def put(name: str, text: str) -> None:
        path = out / name
        path.write_text(text)
        written.append(path)

    def table(name: str, df: pd.DataFrame) -> None:
        df.to_csv(out / name, index=False)
        written.append(out / name)

    put("summary.json", json.dumps(_jsonable(full_summary(result)), indent=2, sort_keys=True) + "\n")
    put("scenario.resolved.yaml", dump_scenario(result.scenario))
    meta = {
        "rlsim_version": __version__,
        "python": platform.python_version(),
        "scenario": result.scenario.name,
        **result.meta,
    }
    put("meta.json", json.dumps(_jsonable(meta), indent=2) + "\n")
    table("steps.csv", result.steps)
    table("timeline.csv", result.timeline)
    samples = getattr(result, "samples", None)
    if samples is not None:
        table("samples.csv", samples)
    for name in ("tools", "trajectories"):  # agentic runs: per-tool statistics, one row per trajectory
        frame = getattr(result, name, None)
        if frame is not None:
            table(f"{name}.csv", frame)
    if not result.engine_stats.empty:
        table("engine_stats.csv", result.engine_stats)
    if have_parquet():
        result.timeline.to_parquet(out / "timeline.parquet", index=False)
        written.append(out / "timeline.parquet")
    written.append(write_trace(to_chrome_trace(result), out / "trace.json"))
    if plots:
        from rlsim.tools.report.plots import save_default_plots

        written += save_default_plots(result, out)
    elif series and len(result.steps) >= SERIES_MIN_STEPS:  # a whole-run projection: its per-step series is the answer
        from rlsim.tools.report.plots import RunTables, save_plots

        written += save_plots(RunTables.from_result(result), out, ["series"])
    return written


def _read_table(folder: Path, stem: str) -> pd.DataFrame:
    csv, parquet = folder / f"{stem}.csv", folder / f"{stem}.parquet"
    if csv.is_file():
        return pd.read_csv(csv)
    if parquet.is_file():
        return pd.read_parquet(parquet)
    return pd.DataFrame()


def load_run(folder: Path):
    """Read a results folder back: (summary dict, RunTables) for plots and comparisons."""
    from rlsim.tools.report.tables import RunTables, engine_seq_limits

    folder = Path(folder)
    summary_path = folder / "summary.json"
    if not summary_path.is_file():
        raise FileNotFoundError(f"{folder}: not a results folder (no summary.json)")
    summary = json.loads(summary_path.read_text())
    steps = _read_table(folder, "steps")
    if "warmup" in steps:
        steps["warmup"] = steps["warmup"].astype(bool)
    meta_path = folder / "meta.json"
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    except (OSError, ValueError):
        meta = {}
    tables = RunTables(
        steps=steps,
        timeline=_read_table(folder, "timeline"),
        engine_stats=_read_table(folder, "engine_stats"),
        samples=_read_table(folder, "samples"),
        max_num_seqs=engine_seq_limits(meta),
        name=folder.name,
    )
    scenario_path = folder / "scenario.resolved.yaml"
    if scenario_path.is_file():
        from rlsim.sim.api import ScenarioError, load_scenario

        try:
            scn = load_scenario(scenario_path)
        except (ScenarioError, OSError, ValueError):
            scn = None  # written by another rlsim version: plots fall back to what the tables say
        if scn is not None:
            tables.pool_gpus = {n: p.gpus for n, p in scn.cluster.pools.items()}
            tables.name = scn.name
    return summary, tables


def phase_means(steps: pd.DataFrame) -> dict[str, float]:
    """Mean of each verl timing column (timing_s/gen, ...) over measured steps."""
    measured = steps[~steps["warmup"].astype(bool)] if "warmup" in steps else steps
    cols = [c for c in steps.columns if c.startswith("timing_s/") and c != "timing_s/step"]
    return {c.removeprefix("timing_s/"): float(measured[c].fillna(0.0).mean()) for c in cols}


def run_metrics(result: Result) -> dict[str, float]:
    """The run's numeric summary, flattened (`idle_fraction_by_pool/<pool>`), plus `timing_s/<phase>` means."""
    flat = flat_metrics(full_summary(result))
    flat.update({f"timing_s/{k}": v for k, v in phase_means(result.steps).items()})
    return flat


def _useful_rows(values: dict, pool: str, val) -> list[tuple[str, str]]:
    """Beside a pool's idle share: busy time decoding a thin tail, and MFU / MBU of each of its phases."""
    rows = []
    if f"tail_share_by_pool/{pool}" in values:
        rows.append(("    busy in thin tail (<1/4 batch)", val(f"tail_share_by_pool/{pool}")))
    for key in [k for k in values if k.startswith(f"mfu_by_phase/{pool}/")]:
        phase = key.removeprefix(f"mfu_by_phase/{pool}/")
        mbu = f"mbu_by_phase/{pool}/{phase}"
        text = val(key) + (f" / {val(mbu)}" if mbu in values else "")
        rows.append((f"    MFU{' / MBU' if mbu in values else ''}: {phase}", text))
    return rows


def metric_rows(values: dict, ci: dict | None = None, pool_gpus: dict[str, int] | None = None
                ) -> list[tuple[str, str]]:
    """(label, value) rows of a run's metrics in reading order, named for people: step time and its phases,
    throughput, idle and busy shares per pool, staleness, GPU-hours, cost. `values` are run_metrics keys
    (summary.json flattened, plus timing_s/<phase> means); the terminal summary and the HTML report share them."""
    ci = ci or {}
    pool_gpus = pool_gpus or {}

    def val(key: str, suffix: str = "") -> str:
        return show(key, values.get(key), ci.get(key)) + suffix

    rows = [("step time (mean)", val("step_time_s"))]
    # Phase timers overlap in asynchronous schedules (generation runs beside training): they are shown
    # as seconds only; the critical-path shares below are the ones that add up to 100%.
    for phase in [k.removeprefix("timing_s/") for k in values if k.startswith("timing_s/")]:
        rows.append((f"  {phase}", val(f"timing_s/{phase}")))
    for key in [k for k in values if k.startswith("critical_path_share_by_phase/")]:
        label = key.removeprefix("critical_path_share_by_phase/")
        rows.append((f"  critical path: {label}", val(key)))
    rows += [
        ("throughput", val("throughput_tokens_per_s", " tok/s")),
        ("  per GPU", val("throughput_tokens_per_s_per_gpu", " tok/s")),
        ("samples/s", val("samples_per_s")),
        ("mean response", val("response_length_mean", " tokens")),
        ("GPU idle (cluster)", val("gpu_idle_fraction")),
    ]
    for key in [k for k in values if k.startswith("idle_fraction_by_pool/")]:
        pool = key.removeprefix("idle_fraction_by_pool/")
        label = f"  idle: {pool} ({pool_gpus[pool]} GPUs)" if pool in pool_gpus else f"  idle: {pool}"
        rows.append((label, val(key)))
        rows += _useful_rows(values, pool, val)
    for key in [k for k in values if k.startswith("busy_fraction_by_phase/")]:
        rows.append((f"  busy: {key.removeprefix('busy_fraction_by_phase/')}", val(key)))
    rows.append(("staleness mean / max", f"{val('staleness_mean')} / {val('staleness_max')}"))
    rows.append(("GPU-hours", val("gpu_hours")))
    if values.get("cost_usd") is not None:
        rows.append(("cost", val("cost_usd")))
        if "cost_per_step_usd" in values:
            rows.append(("  per step", val("cost_per_step_usd")))
        rows.append(("  per million tokens", val("cost_per_million_tokens_usd")))
    else:
        rows.append(("cost", "n/a (set price_usd_per_gpu_hour on every pool)"))
    return rows


def summary_rows(result: Result, stats: pd.DataFrame | None = None) -> list[tuple[str, str]]:
    """Human-readable (metric, value) rows for the terminal.

    `stats` (uncertainty.mean_interval over seed replicates, indexed by run_metrics keys) replaces
    each value by the replicates' mean and adds its 95% interval.
    """
    values = run_metrics(result)
    ci: dict[str, float] = {}
    if stats is not None:
        values.update(stats["mean"].dropna().to_dict())
        ci = stats["ci95"].dropna().to_dict()
    scn = result.scenario
    pools = scn.cluster.pools
    hw = ", ".join(f"{p.gpus}x {p.hardware}" for p in pools.values())
    warm = f" (+{scn.warmup_steps} warm-up)" if scn.warmup_steps else ""
    rows = [
        ("scenario", f"{scn.name} ({scn.schedule.kind})"),
        ("GPUs", f"{values['num_gpus']:.0f}: {hw}"),
        ("measured steps", f"{values['steps']:.0f}{warm}"),
    ]
    rows += metric_rows(values, ci, {name: p.gpus for name, p in pools.items()})
    m = result.meta
    rows.append(
        (
            "simulated / wall",
            f"{m['simulated_time_s']:,.1f} s / {m['wall_time_s']:.2f} s ({m['events']:,} events)",
        )
    )
    return rows
