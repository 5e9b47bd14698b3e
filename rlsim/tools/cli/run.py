"""`rlsim run`, `rlsim validate`, `rlsim schema`: simulate one scenario, check one, print the schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from rlsim.tools.cli.common import QuietOption, ScenarioArg, SetOption, console, fail, load


def print_summary(result, title: str | None = None, stats=None) -> None:
    """The run's summary as a two-column rich table (rows from report.output.summary_rows)."""
    from rich.table import Table

    from rlsim.tools.report.output import summary_rows

    seeds = f"\nmean ± 95% interval over {int(stats['n'].max())} seeds" if stats is not None else ""
    table = Table(title=(title or f"rlsim: {result.scenario.name}") + seeds, show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    for k, v in summary_rows(result, stats):
        table.add_row(k, v, style="dim" if k.startswith("  ") else None)
    console.print(table)


def check_run_dir(out_dir: Path, scn, force: bool) -> None:
    """Refuse to overwrite a results folder that holds a different run (other scenario, --set or seed)."""
    from rlsim.sim.api import dump_scenario

    existing = out_dir / "scenario.resolved.yaml"
    if force or not existing.is_file():
        return
    if existing.read_text() != dump_scenario(scn):
        fail([f"{out_dir}: holds a different run (its scenario.resolved.yaml differs); "
              "give --out DIR or --force to overwrite"])


def run(
    scenario: ScenarioArg,
    set_: SetOption = None,
    seed: Annotated[int | None, typer.Option(help="Override the scenario's seed")] = None,
    seeds: Annotated[int, typer.Option(
        help="Replicates: K runs with seeds from SeedSequence(seed).spawn(K); the table shows mean ± 95% interval"
    )] = 1,
    out: Annotated[Path | None, typer.Option(help="Results folder (default runs/<scenario name>)")] = None,
    force: Annotated[bool, typer.Option(help="Overwrite a results folder that holds a different run")] = False,
    plots: Annotated[bool, typer.Option(
        help="Also draw the PNG plots (off by default: they cost more than the simulation; `rlsim plot DIR` "
        "draws them later)"
    )] = False,
    mode: Annotated[str | None, typer.Option(
        help="exact (every engine) or aggregate (a share of identical rollout engines, faster; "
        "same as --set simulation.mode=...)"
    )] = None,
    steps: Annotated[int | None, typer.Option(
        help="Measured RL steps (same as --set steps=N): a whole-run projection, e.g. --steps 500 --mode aggregate; "
        "from 20 steps on the results folder holds step_series.png (step time, staleness, idle per step)"
    )] = None,
    quiet: QuietOption = False,
) -> None:
    """Simulate a scenario, print a summary table and write the results folder.

    With --seeds K the folder holds the first replicate's results plus seeds.csv (every replicate's
    summary) and summary_ci.csv (mean and 95% interval of each metric).
    """
    import pandas as pd

    from rlsim.tools.cli.progress import LazyBar, simulate_with_progress, wants_progress
    from rlsim.tools.report.output import prepare_out_dir, run_metrics, write_results
    from rlsim.tools.report.uncertainty import mean_interval
    from rlsim.tools.sweep.grid import derive_seeds

    if seeds < 1:
        fail([f"--seeds: expected an integer >= 1, got {seeds}"])
    if seed is not None and not 0 <= seed < 2**63:
        fail([f"--seed: expected an integer from 0 to 2^63 - 1, got {seed}"])
    scn = load(scenario, _option_overrides(set_, mode, steps), quiet=quiet)
    if seed is not None:
        scn = scn.model_copy(update={"seed": seed})
    seed_list = [scn.seed] if seeds == 1 else derive_seeds(scn.seed, seeds)
    out_dir = out or Path("runs") / scn.name
    check_run_dir(out_dir, scn.model_copy(update={"seed": seed_list[0]}), force)
    if (problem := prepare_out_dir(out_dir)) is not None:
        fail([f"--out {out_dir}: {problem}"])
    results = []
    with LazyBar(enabled=wants_progress(quiet)) as bar:
        for i, s in enumerate(seed_list):
            label = f"simulating {scn.name}" + (f" (seed {i + 1}/{seeds})" if seeds > 1 else "")
            results.append(simulate_with_progress(scn, seed=s, bar=bar, label=label))
    written = write_results(results[0], out_dir, plots=plots, series=True)
    stats = None
    if seeds > 1:
        replicates = pd.DataFrame([run_metrics(r) for r in results], index=pd.Index(seed_list, name="seed"))
        stats = mean_interval(replicates)
        replicates.to_csv(out_dir / "seeds.csv")
        stats.to_csv(out_dir / "summary_ci.csv", index_label="metric")
        written += [out_dir / "seeds.csv", out_dir / "summary_ci.csv"]
    print_summary(results[0], stats=stats)
    from rlsim.sim.api import describe_mode

    if (line := describe_mode(results[0].meta)) is not None:
        console.print(line, highlight=False, soft_wrap=True)
    if scn.calibration is not None:  # a `calibration:` overlay: its ± band (the one band) on the predicted figures
        from rlsim.tools.calibration.log_report import band_lines
        from rlsim.tools.report.validation_band import coverage_notes, scenario_regime

        lines = band_lines(results[0].summary, scn.calibration)
        lines += [f"outside what is covered: {n}" for n in coverage_notes(scenario_regime(scn))]
    elif stats is not None:  # several seeds: their spread and the model's error, one band with both parts
        lines = _seeded_band_lines(stats, scn, len(seed_list))
    else:
        from rlsim.tools.report.validation_band import band_lines as validation_band_lines

        lines = validation_band_lines(results[0].summary, scn)
    console.print("\n".join(lines), highlight=False, soft_wrap=True)
    names = ", ".join(p.name for p in written)
    console.print(f"results in {out_dir}/ ({names})", highlight=False, soft_wrap=True)


def _option_overrides(set_: list[str] | None, mode: str | None, steps: int | None) -> list[str] | None:
    """--mode and --steps as the --set overrides they stand for (after the user's own)."""
    if mode is not None and mode not in ("exact", "aggregate"):
        fail([f"--mode: expected exact or aggregate, got {mode!r}"])
    if mode is not None:
        set_ = [*(set_ or []), f"simulation.mode={mode}"]
    if steps is not None:
        if steps < 1:
            fail([f"--steps: expected an integer >= 1, got {steps}"])
        set_ = [*(set_ or []), f"steps={steps}"]
    return set_


def _seeded_band_lines(stats, scn, seeds: int) -> list[str]:
    """One band for a run over several seeds, its parts named: the seeds' spread (95% interval of throughput,
    % of its mean) and the model's error where this job sits (the validation band), root sum of squares."""
    import math

    from rlsim.tools.report.validation_band import band, coverage_notes, scenario_regime

    regime = scenario_regime(scn)
    model = band(regime)
    mean, half = (float(stats.loc["throughput_tokens_per_s", k]) for k in ("mean", "ci95"))
    seed_pct = 100 * half / mean if mean and math.isfinite(half) else 0.0
    model_pct = model.pct if model is not None else 0.0
    total = math.hypot(seed_pct, model_pct)
    from rlsim.tools.report.validation_band import nearest_miss

    model_text = (f"model error {model_pct:.0f}% (RMS of the {model.rows} validated rows like this job: "
                  f"{model.regime}; docs/validation.md)" if model is not None else
                  f"model error unknown: no validated regime nearby ({nearest_miss(regime)})")
    lines = [f"band ± {total:.1f}% = seed spread {seed_pct:.1f}% (95%, {seeds} seeds) with {model_text}"]
    for key, label, unit in (("step_time_s", "step time", "s"), ("throughput_tokens_per_s", "throughput", "tok/s")):
        value = float(stats.loc[key, "mean"])
        lines.append(f"  {label} {value:,.1f} {unit} ± {value * total / 100:,.1f}")
    return lines + [f"outside what is covered: {n}" for n in coverage_notes(regime)]


def validate(scenario: ScenarioArg, set_: SetOption = None) -> None:
    """Check a scenario (schema, references, parallelism, memory) without simulating."""
    from rich.table import Table

    from rlsim.sim.api import placement_rows

    scn = load(scenario, set_)
    console.print(f"{scenario}: ok ({scn.name}: {sum(p.gpus for p in scn.cluster.pools.values())} GPUs)")
    rows = placement_rows(scn)
    table = Table(title="placement")
    for col in rows[0]:
        table.add_column(col, no_wrap=col != "takes turns with")
    for row in rows:
        table.add_row(*row.values())
    console.print(table)


def schema() -> None:
    """Print the scenario JSON schema (for editor completion and validation)."""
    from rlsim.sim.api import Scenario

    sys.stdout.write(json.dumps(Scenario.model_json_schema(), indent=2) + "\n")


