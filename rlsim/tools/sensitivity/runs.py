"""Running a sensitivity study: the simulations, the ranked table, the files and the terminal table."""


from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rlsim.sim.api import Problem, Scenario, ScenarioError, parse_scenario, read_yaml
from rlsim.tools.sensitivity.inputs import (
    DEFAULT_PCT,
    METRICS,
    Input,
    SensitivityError,
    SensitivityResult,
    _is_number,
    default_inputs,
    format_number,
    metric_unit,
    parse_vary,
)


@dataclass
class Prepared:
    """A validated scenario, what to vary, and the run tasks (index 0: the base)."""

    scenario: Scenario
    data: dict
    source: str
    base_dir: str
    sets: tuple[str, ...]
    seed: int
    inputs: list[Input]
    skipped: list[str]
    pct: float | None = None  # ± % of the default inputs; None when they came from --vary


def prepare(
    path: str | Path, sets: Sequence[str] = (), vary: Sequence[str] = (), seed: int | None = None,
    pct: float = DEFAULT_PCT,
) -> Prepared:
    """Load and validate the scenario, discover or parse the inputs; each `--vary` side is validated too.

    Raises ScenarioError (bad scenario or --set) or SensitivityError (bad --vary): exit code 2.
    """
    source = str(path)
    data = read_yaml(path)
    base_dir = Path(path).resolve().parent
    scn = parse_scenario(data, source, list(sets), base_dir)
    if vary:
        problems: list[Problem] = []
        inputs = []
        for spec in vary:
            try:
                inputs.append(parse_vary(scn, spec))
            except SensitivityError as exc:
                problems += exc.problems
        seen: set[str] = set()
        for inp in inputs:
            if inp.key in seen:
                problems.append(Problem(inp.key, "given twice"))
            seen.add(inp.key)
            for side, value, side_sets in (("low", inp.low, inp.low_sets), ("high", inp.high, inp.high_sets)):
                try:
                    parse_scenario(data, source, [*sets, *side_sets], base_dir)
                except ScenarioError as exc:
                    problems += [
                        Problem(inp.key, f"{side} value {format_number(value)} is invalid: {p.path}: {p.message}")
                        for p in exc.problems
                    ]
        if problems:
            raise SensitivityError("--vary", list(dict.fromkeys(problems)))
        skipped: list[str] = []
    else:
        inputs, skipped = default_inputs(scn, pct)
    return Prepared(
        scn, data, source, str(base_dir), tuple(sets), scn.seed if seed is None else seed, inputs, skipped,
        None if vary else pct,
    )


def tasks(prep: Prepared) -> list:
    """PointTasks: the base, then each input's low and high side (index 2i+1, 2i+2)."""
    from rlsim.tools.sweep.runner import PointTask

    out = [PointTask(0, "base", prep.data, prep.source, prep.base_dir, prep.sets, prep.seed)]
    for i, inp in enumerate(prep.inputs):
        for j, (side, side_sets) in enumerate((("low", inp.low_sets), ("high", inp.high_sets))):
            out.append(PointTask(
                2 * i + 1 + j, f"{i}-{side}", prep.data, prep.source, prep.base_dir, (*prep.sets, *side_sets),
                _seed(side_sets, prep.seed),
            ))
    return out


def _seed(side_sets: Sequence[str], seed: int) -> int:
    """`--vary seed=lo:hi` (run-to-run noise as a yardstick) sets the run's seed, which wins over the scenario's."""
    for line in side_sets:
        key, _, value = line.partition("=")
        if key == "seed":
            return int(value)
    return seed


class RunFailed(RuntimeError):
    """The base scenario itself could not be simulated."""


def run_sensitivity(
    prep: Prepared,
    metric: str = METRICS[0],
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
    on_pool_ready: Callable[[], None] | None = None,
) -> SensitivityResult:
    """Simulate base and both sides of every input; the table sorted by the swing of `metric`.

    The base runs first in this process: a scenario that cannot be simulated, or a `metric` that is
    not in its summary, stops everything before a pool starts (RunFailed / SensitivityError).
    `on_pool_ready` is called once workers exist (start a progress bar's thread only then).
    """
    from rlsim.tools.sweep.runner import LocalBackend, SerialBackend, run_point

    all_tasks = tasks(prep)
    total = len(all_tasks)
    base = run_point(all_tasks[0])
    if base.get("error"):
        raise RunFailed(f"the base scenario failed: {base['error']}")
    summary = base["summary"]
    if not _is_number(summary.get(metric)):
        known = ", ".join(k for k, v in summary.items() if _is_number(v))
        raise SensitivityError("--metric", [Problem(metric, f"not a number in the summary; known: {known}")])
    records = {0: base}
    backend = SerialBackend() if jobs <= 1 or total <= 2 else LocalBackend(jobs)
    with backend as runner:
        if on_pool_ready is not None:
            on_pool_ready()
        if progress is not None:
            progress(1, total)
        for task, record in runner.run(run_point, all_tasks[1:]):
            records[task.index] = record
            if progress is not None:
                progress(len(records), total)
    metrics = tuple(dict.fromkeys((metric, *METRICS)))
    table = build_table(prep.inputs, records, metrics, metric)
    return SensitivityResult(
        Path(prep.source).stem if prep.scenario.name == "scenario" else prep.scenario.name,
        metric, metrics, prep.inputs, summary, table, prep.skipped, prep.pct,
    )


def _pct(value: float, base: float) -> float:
    if not (math.isfinite(value) and math.isfinite(base)) or base == 0:
        return 0.0 if value == base else float("nan")
    return (value - base) / abs(base) * 100.0


def build_table(inputs: Sequence[Input], records: dict[int, dict], metrics: Sequence[str], metric: str) -> pd.DataFrame:
    """One row per input: values, metrics at low/base/high, % change each way; sorted by swing of `metric`."""
    base = records[0]["summary"]
    rows = []
    for i, inp in enumerate(inputs):
        low, high = records[2 * i + 1], records[2 * i + 2]
        row: dict[str, Any] = {
            "input": inp.key, "label": inp.label, "unit": inp.unit,
            "base_value": inp.base, "low_value": inp.low, "high_value": inp.high,
        }
        for m in metrics:
            at_low = _metric(low, m)
            at_high = _metric(high, m)
            row[f"{m}_low"], row[f"{m}_base"], row[f"{m}_high"] = at_low, float(base[m]), at_high
            row[f"{m}_low_pct"] = _pct(at_low, float(base[m]))
            row[f"{m}_high_pct"] = _pct(at_high, float(base[m]))
        row["swing"] = abs(row[f"{metric}_high"] - row[f"{metric}_low"])
        row["swing_pct"] = _pct(row[f"{metric}_base"] + row["swing"], row[f"{metric}_base"])
        row["note"] = inp.note
        row["error"] = "; ".join(filter(None, (
            f"low: {low['error']}" if low.get("error") else "", f"high: {high['error']}" if high.get("error") else "",
        ))) or None
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table = table.sort_values("swing", ascending=False, na_position="last", kind="stable")
    return table.reset_index(drop=True)


def _metric(record: dict, metric: str) -> float:
    summary = record.get("summary") or {}
    value = summary.get(metric)
    return float(value) if _is_number(value) else float("nan")


def write_outputs(result: SensitivityResult, out: Path, plot: bool = True) -> list[Path]:
    """DIR/sensitivity.csv and DIR/tornado.png."""
    out.mkdir(parents=True, exist_ok=True)
    csv = out / "sensitivity.csv"
    result.table.to_csv(csv, index=False)
    written = [csv]
    if plot:
        from rlsim.tools.report.sensitivity_plot import plot_tornado

        vary = f"inputs ±{result.pct:g}%" if result.pct is not None else "inputs from --vary"
        fig = plot_tornado(result.table, result.metrics, title=f"rlsim sensitivity: {result.scenario} ({vary})")
        png = out / "tornado.png"
        fig.savefig(png, dpi=150)
        import matplotlib.pyplot as plt

        plt.close(fig)
        written.append(png)
    return written


# ---------------------------------------------------------------- the printed table


def results_table(result: SensitivityResult, max_rows: int = 40, width: int = 80):
    """Rich tables no wider than `width`: the ranking metric (input, low / high value, the metric at low and
    high, % each way), then the other metrics at low / high, two per table. Cells wrap, never crop."""
    from rich import box
    from rich.console import Group
    from rich.table import Table

    m = result.metric
    others = [x for x in result.metrics if x != m]
    bases = "; ".join(
        f"{x} {_fmt_metric(x, result.base_summary[x])}{_unit_suffix(x)}" for x in result.metrics
    )
    rows = result.table.head(max_rows)
    table = Table(title=f"rlsim sensitivity: {result.scenario} (base: {bases}); {_short_metric(m)} at each input's "
                  "low and high value", box=box.SIMPLE_HEAD, width=width)
    table.add_column("input", overflow="fold", ratio=3)
    table.add_column("low / high", justify="right", overflow="fold", ratio=2)
    for header in ("at low", "at high", "low %", "high %"):
        table.add_column(header, justify="right", no_wrap=True)
    for _, row in rows.iterrows():
        unit_in = f" {row['unit']}" if row["unit"] and row["unit"] != "fraction" else ""
        table.add_row(
            row["label"] + (" *" if row["note"] else ""),
            f"{format_number(row['low_value'])} / {format_number(row['high_value'])}{unit_in}",
            _fmt_metric(m, row[f"{m}_low"]), _fmt_metric(m, row[f"{m}_high"]),
            _signed(row[f"{m}_low_pct"]), _signed(row[f"{m}_high_pct"]),
        )
    notes = [f"* {r['label']}: {r['note']}" for _, r in result.table.iterrows() if r["note"]]
    if len(result.table) > max_rows:
        notes.append(f"... {len(result.table) - max_rows} more rows in sensitivity.csv")
    table.caption = "\n".join(notes) or None
    table.caption_justify = "left"
    parts = [table]
    for i in range(0, len(others), 2):
        more = Table(title="other metrics at low / high", box=box.SIMPLE_HEAD, width=width)
        more.add_column("input", overflow="fold", ratio=3)
        for other in others[i:i + 2]:
            more.add_column(_short_metric(other), justify="right", overflow="fold", ratio=2)
        for _, row in rows.iterrows():
            more.add_row(row["label"], *[f"{_fmt_metric(o, row[f'{o}_low'])} / {_fmt_metric(o, row[f'{o}_high'])}"
                                         for o in others[i:i + 2]])
        parts.append(more)
    return Group(*parts)


def _is_fraction(metric: str) -> bool:
    return metric.endswith(("_fraction", "_ratio"))


def _fmt_metric(metric: str, value: float) -> str:
    if value is None or math.isnan(value):
        return "[red]failed[/red]"
    return f"{value * 100:.2f}%" if _is_fraction(metric) else format_number(value)


def _unit_suffix(metric: str) -> str:
    unit = metric_unit(metric)
    return "" if not unit or _is_fraction(metric) else f" {unit}"


def _short_metric(metric: str) -> str:
    return {"throughput_tokens_per_s": "tokens/s", "gpu_idle_fraction": "idle"}.get(metric, metric)


def _signed(value: float) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:+.1f}%"
