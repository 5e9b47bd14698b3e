"""Reporting: results folder, Chrome trace, plots, comparison, cost, and the `run`/`plot`/`compare` CLI."""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from golden_hashes import golden_in_tests, hash_result  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from rlsim.sim.scenario.loader import parse_scenario  # noqa: E402
from rlsim.sim.simulate import SAMPLE_COLUMNS, simulate  # noqa: E402
from rlsim.tools.cli import app  # noqa: E402
from rlsim.tools.report.compare import RunSummary, compare_chart, comparison_table, unique_labels  # noqa: E402
from rlsim.tools.report.output import CONTRACT_FILES, load_run, summary_rows, write_results  # noqa: E402
from rlsim.tools.report.plots import (  # noqa: E402
    PLOTS,
    RunTables,
    busy_by_pool,
    closed_engine_stats,
    engine_load,
    gantt,
    idle_by_pool,
    idle_by_step,
    long_tail,
    sample_staleness,
    staleness_hist,
    step_breakdown,
    step_series,
)
from rlsim.tools.report.trace import chrome_trace, to_chrome_trace  # noqa: E402

TINY: dict[str, Any] = {
    "name": "tiny-golden",
    "seed": 7,
    "steps": 2,
    "warmup_steps": 1,
    "cluster": {
        "pools": {
            "gen": {"hardware": "h100-sxm", "nodes": 1, "gpus_per_node": 2, "price_usd_per_gpu_hour": 2.0}
        }
    },
    "models": {"policy": {"preset": "qwen2.5-0.5b"}},
    "roles": {
        "rollout": {"pool": "gen", "model": "policy", "parallel": {"tp": 1}, "engine": {"max_num_seqs": 8}}
    },
    "algorithm": {"kind": "generate", "prompts_per_step": 4, "samples_per_prompt": 4},
    "workload": {
        "prompt_length": {"kind": "uniform", "min": 64, "max": 256},
        "response_length": {"kind": "lognormal", "mean": 300, "sigma": 0.8, "max": 1024},
    },
    "schedule": {"kind": "generation-only"},
}


def tiny(**changes: Any) -> dict:
    data = copy.deepcopy(TINY)
    data.update(changes)
    return data


@pytest.fixture(scope="module")
def result():
    return simulate(parse_scenario(TINY))


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def synthetic_rl() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A two-pool RL-like timeline (engines + trainer, forward/train/sync) for what schedules will add."""
    rows, steps, t = [], [], 0.0
    for k in range(3):
        gen, train = 10.0 + k, 4.0
        for e in range(3):
            rows.append(("rollout", f"rollout-{e}", "rollout", "generate", k, k, t, t + gen - e, 2))
            rows.append(
                (
                    "rollout",
                    f"rollout-{e}",
                    "rollout",
                    "sync",
                    k,
                    k + 1,
                    t + gen + train,
                    t + gen + train + 1,
                    2,
                )
            )
        rows.append(("train", "actor-0", "actor", "forward", k, k, t + gen, t + gen + 1, 4))
        rows.append(("train", "actor-0", "actor", "train", k, k, t + gen + 1, t + gen + train, 4))
        rows.append(("train", "actor-0", "actor", "sync", k, k, t + gen + train, t + gen + train + 1, 4))
        end = t + gen + train + 1
        steps.append(
            {
                "step": k,
                "warmup": k == 0,
                "start_s": t,
                "end_s": end,
                "timing_s/gen": gen,
                "timing_s/update_actor": train,
                "timing_s/update_weights": 1.0,
                "timing_s/step": end - t,
                "policy_version": k + 1,
                "staleness/mean": 0.0,
                "staleness/max": 0,
            }
        )
        t = end
    cols = ["pool", "gpu_group", "role", "phase", "step", "policy_version", "start_s", "end_s", "gpus"]
    return pd.DataFrame(rows, columns=cols), pd.DataFrame(steps)


# ---------------------------------------------------------------- golden summary and relations


def test_golden_summary(result):
    """Every table of TINY's run, hashed, is what it was (tests/golden/test_scenarios.json); a few plain facts."""
    assert hash_result(result) == golden_in_tests()["report/tiny"]
    assert result.summary["num_gpus"] == 2 and result.summary["steps"] == 2


def test_summary_agrees_with_the_other_tables(result):
    """The summary, computed from the step rows, agrees with what the samples table and the GPU
    timeline say independently (cross-table checks, not the formulas restated)."""
    s, steps, samples, tl = result.summary, result.steps, result.samples, result.timeline
    measured = steps[~steps["warmup"]]
    trained = samples[samples["step"].isin(measured["step"]) & samples["fate"].isin(["trained", "finished"])]
    assert s["tokens"] == (trained["prompt_tokens"] + trained["response_tokens"]).sum()
    assert s["samples_per_s"] * s["simulated_seconds"] == pytest.approx(len(trained))
    # Busy GPU-seconds straight from the timeline, clipped to the measured window by hand.
    t0, t1 = measured["start_s"].min(), measured["end_s"].max()
    busy = ((tl["end_s"].clip(t0, t1) - tl["start_s"].clip(t0, t1)) * tl["gpus"]).sum()
    assert 1 - s["gpu_idle_fraction"] == pytest.approx(busy / (s["num_gpus"] * (t1 - t0)))
    assert sum(s["busy_fraction_by_phase"].values()) == pytest.approx(1 - s["gpu_idle_fraction"])
    # The pool's own price (2 $/GPU-h) overrides the hardware profile's indicative one.
    assert s["cost_usd"] == pytest.approx(2 * 2.0 * (t1 - t0) / 3600)


def test_same_seed_same_tables(result):
    again = simulate(parse_scenario(TINY))
    assert again.summary == result.summary
    pd.testing.assert_frame_equal(again.timeline, result.timeline)
    pd.testing.assert_frame_equal(again.samples, result.samples)


def test_samples_table(result):
    samples = result.samples
    assert list(samples.columns) == SAMPLE_COLUMNS
    assert len(samples) == 3 * 16
    assert samples["sample_id"].is_unique
    assert (samples["finished_s"] >= samples["admitted_s"]).all()
    assert (samples["admitted_s"] >= samples["arrival_s"]).all()
    per_step = samples.groupby("step")["response_tokens"].sum()
    assert per_step.tolist() == result.steps["response_tokens"].tolist()
    assert (samples["oldest_version"] == 0).all() and (samples["newest_version"] == 0).all()


def test_progress_callback_called_per_step():
    calls = []
    simulate(parse_scenario(TINY), progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]


# ---------------------------------------------------------------- results folder


def test_write_results_writes_every_contract_file(result, tmp_path):
    written = write_results(result, tmp_path)
    names = {p.name for p in written}
    for name in [*CONTRACT_FILES, "meta.json", "samples.csv", "engine_stats.csv", "gantt.png"]:
        assert name in names and (tmp_path / name).is_file(), name
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in (
        "step_time_s",
        "throughput_tokens_per_s",
        "throughput_tokens_per_s_per_gpu",
        "samples_per_s",
        "gpu_idle_fraction",
        "idle_fraction_by_pool",
        "busy_fraction_by_phase",
        "staleness_mean",
        "staleness_max",
        "num_gpus",
        "steps",
        "cost_per_million_tokens_usd",
        "cost_per_step_usd",
    ):
        assert key in summary, key
    assert summary["cost_per_step_usd"] == pytest.approx(summary["cost_usd"] / summary["steps"])
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert {"rlsim_version", "seed", "wall_time_s", "events", "simulated_time_s"} <= set(meta)
    assert meta["seed"] == 7 and meta["events"] > 0
    timeline = pd.read_csv(tmp_path / "timeline.csv")
    assert list(timeline.columns)[:8] == [
        "pool",
        "gpu_group",
        "role",
        "phase",
        "step",
        "policy_version",
        "start_s",
        "end_s",
    ]
    steps = pd.read_csv(tmp_path / "steps.csv")
    assert {"timing_s/gen", "timing_s/step", "response_length/mean", "response_length/max"} <= set(
        steps.columns
    )


def test_load_run_round_trip(result, tmp_path):
    write_results(result, tmp_path, plots=False)
    summary, tables = load_run(tmp_path)
    assert summary["step_time_s"] == pytest.approx(result.summary["step_time_s"])
    assert tables.pool_gpus == {"gen": 2}
    assert tables.max_num_seqs == {"rollout-0": 8, "rollout-1": 8}
    assert len(tables.samples) == len(result.samples)
    assert tables.steps["warmup"].dtype == bool


def test_summary_rows_mention_cost_and_phases(result):
    rows = dict(summary_rows(result))
    assert "  gen" in rows and "  per step" in rows and "  per million tokens" in rows
    assert rows["GPU-hours"]


# ---------------------------------------------------------------- Chrome / Perfetto trace


def check_trace(trace: dict) -> None:
    """Structural validity as ui.perfetto.dev / chrome://tracing need it."""
    assert set(trace) >= {"traceEvents", "displayTimeUnit"}
    events = trace["traceEvents"]
    assert json.loads(json.dumps(trace, allow_nan=False)) == trace
    named_pids = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    named_tids = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    by_thread: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            for key in ("ph", "ts", "dur", "pid", "tid", "name"):
                assert key in e, (key, e)
            assert e["dur"] >= 0
            assert e["pid"] in named_pids and (e["pid"], e["tid"]) in named_tids
            by_thread[(e["pid"], e["tid"])].append(e)
        elif e["ph"] == "C":
            assert {"ts", "pid", "name", "args"} <= set(e) and e["pid"] in named_pids
    for slices in by_thread.values():
        ts = [e["ts"] for e in slices]
        assert ts == sorted(ts), "timestamps not monotone on a thread"
        for a, b in zip(slices, slices[1:], strict=False):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-6, "slices overlap on one thread"


def test_trace_of_a_run_is_valid(result):
    trace = to_chrome_trace(result)
    check_trace(trace)
    events = trace["traceEvents"]
    procs = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert "pool gen" in procs
    assert {"rollout-0", "rollout-1"} <= threads
    slices = [e for e in events if e["ph"] == "X" and e["cat"] == "generate"]
    assert len(slices) == len(result.timeline)
    assert {"step", "policy_version", "gpus"} <= set(slices[0]["args"])
    # Microseconds: the last slice ends at the run's end.
    assert max(e["ts"] + e["dur"] for e in slices) == pytest.approx(result.timeline["end_s"].max() * 1e6)
    assert sum(e["args"]["samples_finished"] for e in slices) == len(result.samples)
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert {"rollout-0 batch", "rollout-0 KV %"} <= counters
    steps = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    assert [e["name"] for e in steps] == ["step 0 (warm-up)", "step 1", "step 2"]


def test_trace_overlapping_intervals_go_to_extra_threads():
    tl, steps = synthetic_rl()
    extra = tl.iloc[[0]].assign(phase="reward", start_s=1.0, end_s=3.0)  # overlaps rollout-0's generate
    trace = chrome_trace(pd.concat([tl, extra], ignore_index=True), steps)
    check_trace(trace)
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert "rollout-0 (overlap 1)" in threads and "actor-0" in threads


# ---------------------------------------------------------------- plots


def ytick_labels(fig: Figure, ax_index: int = 0) -> list[str]:
    return [t.get_text() for t in fig.axes[ax_index].get_yticklabels()]


def test_gantt_has_one_lane_per_group(result):
    fig = gantt(result.timeline, result.steps, result.engine_stats, 8)
    assert isinstance(fig, Figure)
    assert ytick_labels(fig) == ["rollout-0", "rollout-1"]


def test_gantt_rl_timeline_lanes_and_legend():
    tl, steps = synthetic_rl()
    fig = gantt(tl, steps)
    assert ytick_labels(fig) == ["rollout-0", "rollout-1", "rollout-2", "actor-0"]
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"generate", "forward", "train", "sync", "step end", "weight sync"} <= legend


def test_gantt_caps_lanes():
    tl, steps = synthetic_rl()
    fig = gantt(tl, steps, max_lanes=2)
    assert len(ytick_labels(fig)) == 2
    assert "first 2 of 4" in fig.axes[0].get_title()


def test_step_breakdown_and_idle(result):
    tl, steps = synthetic_rl()
    fig = step_breakdown(steps)
    labels = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    assert {"gen", "update_actor", "update_weights", "step time"} <= labels
    fig = idle_by_pool(tl, steps, {"rollout": 6, "train": 8})
    assert ytick_labels(fig) == ["rollout (6 GPUs)", "train (8 GPUs)"]
    assert isinstance(step_breakdown(result.steps), Figure)


def test_busy_by_pool_matches_summary(result):
    frac = busy_by_pool(result.timeline, result.steps, {"gen": 2})
    assert frac.loc["gen", "idle"] == pytest.approx(result.summary["idle_fraction_by_pool"]["gen"])
    assert frac.loc["gen", "generate"] == pytest.approx(result.summary["busy_fraction_by_phase"]["generate"])


def test_staleness_zero_and_nonzero(result):
    assert (sample_staleness(result.samples, result.steps) == 0).all()
    fig = staleness_hist(result.samples, result.steps)
    assert "max 0" in fig.axes[0].get_title()
    stale = result.samples.assign(oldest_version=-1)  # trainer version 0: one version behind
    assert (sample_staleness(stale, result.steps) == 1).all()
    assert isinstance(staleness_hist(stale, result.steps), Figure)


def test_tail_and_engines(result):
    fig = long_tail(result.samples, result.steps)
    assert fig.axes[0].get_ylabel() == "response tokens"
    fig = engine_load(result.engine_stats, result.steps, 8, result.timeline)
    assert len(fig.axes) == 2
    closed = closed_engine_stats(result.engine_stats, result.timeline)
    last = closed.sort_values("time_s").groupby("engine").tail(1)
    assert (last["running"] == 0).all()


def test_idle_by_step_is_busy_by_pool_over_each_step():
    tl, steps = synthetic_rl()
    pools = {"rollout": 6, "train": 8}
    per_step = idle_by_step(tl, steps, pools)
    for i in range(len(steps)):
        one = steps.iloc[[i]].assign(warmup=False)
        expected = busy_by_pool(tl, one, pools)["idle"]
        assert per_step.iloc[i].to_dict() == pytest.approx(expected.to_dict())
    fig = step_series(steps, tl, pools)
    assert [a.get_ylabel() for a in fig.axes] == ["step time (s)", "staleness (versions)",
                                                  "idle (% of pool GPU-time)"]
    assert isinstance(step_series(steps.iloc[0:0], tl), Figure)


def test_run_with_steps_writes_the_step_series(tmp_path):
    res = CliRunner().invoke(app, ["run", "quickstart", "--steps", "20", "--set", "algorithm.prompts_per_step=4",
                                   "--out", str(tmp_path), "--quiet"])
    assert res.exit_code == 0, res.output
    assert len(pd.read_csv(tmp_path / "steps.csv").query("not warmup")) == 20
    assert (tmp_path / "step_series.png").stat().st_size > 0 and not (tmp_path / "gantt.png").exists()
    res = CliRunner().invoke(app, ["run", "quickstart", "--steps", "0", "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--steps" in res.output


def test_plots_handle_empty_tables():
    empty = pd.DataFrame()
    tl, steps = synthetic_rl()
    for fig in (
        staleness_hist(empty, steps.iloc[0:0]),
        long_tail(empty, steps),
        engine_load(empty),
        gantt(tl.iloc[0:0]),
        step_breakdown(steps[["step", "start_s", "end_s"]]),
    ):
        assert isinstance(fig, Figure)


def test_every_plot_kind_renders(result, tmp_path):
    from rlsim.tools.report.plots import save_plots

    paths = save_plots(RunTables.from_result(result), tmp_path, fmt="svg")
    assert len(paths) == len(PLOTS) and all(p.stat().st_size > 0 for p in paths)


# ---------------------------------------------------------------- comparison


def test_compare_two_scenarios_identical_columns():
    a = simulate(parse_scenario(TINY))
    b_data = tiny(name="tiny-b")
    b_data["cluster"] = {"pools": {"big": {"hardware": "h100-sxm", "nodes": 1, "gpus_per_node": 4}}}
    b_data["roles"]["rollout"]["pool"] = "big"
    b = simulate(parse_scenario(b_data))
    runs = [RunSummary("tiny-golden", a.summary, a.steps), RunSummary("tiny-b", b.summary, b.steps)]
    table = comparison_table(runs)
    assert list(table.index) == ["tiny-golden", "tiny-b"]
    assert {
        "idle/gen",
        "idle/big",
        "timing_s/gen",
        "throughput_tokens_per_s",
        "cost_per_million_tokens_usd",
        "cost_per_step_usd",
    } <= set(table.columns)
    assert table.loc["tiny-golden", "idle/big"] != table.loc["tiny-golden", "idle/big"]  # NaN: no such pool
    assert table.loc["tiny-b", "num_gpus"] == 4
    # The same runs in the other order give the same column set.
    assert list(comparison_table(runs[::-1]).columns) == list(table.columns)
    assert isinstance(compare_chart(table), Figure)


def test_unique_labels():
    assert unique_labels(["a", "a", "b"], ["x", "y", "z"]) == ["a (x)", "a (y)", "b"]
    assert unique_labels(["a", "a"], ["x", "x"]) == ["a (x)", "a (x) #2"]


# ---------------------------------------------------------------- CLI


@pytest.fixture()
def tiny_yaml(tmp_path) -> Path:
    import yaml

    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


def test_cli_run_writes_folder(tiny_yaml, tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", str(tiny_yaml), "--out", str(out)])
    assert res.exit_code == 0, res.output
    for name in [*CONTRACT_FILES, "meta.json", "samples.csv"]:
        assert (out / name).is_file(), name
    assert "throughput" in res.output


@pytest.mark.slow
def test_cli_plot_and_compare(tiny_yaml, tmp_path):
    runner = CliRunner()
    out = tmp_path / "run"
    assert runner.invoke(app, ["run", str(tiny_yaml), "--out", str(out), "--no-plots"]).exit_code == 0
    res = runner.invoke(app, ["plot", str(out), "--kind", "gantt", "--format", "svg"])
    assert res.exit_code == 0, res.output
    assert (out / "gantt.svg").is_file()
    res = runner.invoke(app, ["plot", str(out)])
    assert res.exit_code == 0, res.output
    assert {f"{stem}.png" for stem, _ in PLOTS.values()} <= {p.name for p in out.iterdir()}

    cmp_dir = tmp_path / "cmp"
    res = runner.invoke(app, ["compare", str(tiny_yaml), str(out), "--set", "seed=3", "--out", str(cmp_dir)])
    assert res.exit_code == 0, res.output
    table = pd.read_csv(cmp_dir / "compare.csv", index_col=0)
    assert len(table) == 2 and (cmp_dir / "compare.png").is_file()
    assert table.index[0] != table.index[1]


def test_cli_plot_bad_folder(tmp_path):
    res = CliRunner().invoke(app, ["plot", str(tmp_path)])
    assert res.exit_code == 2
    assert "Traceback" not in res.output


def test_step_breakdown_stacks_only_phases_that_add_up_to_the_step():
    """Overlapping phase timers (asynchronous schedules) are drawn side by side, never as a taller stack."""
    import pandas as pd

    from rlsim.tools.report.plots import step_breakdown

    base = {"step": [0, 1], "warmup": [False, False], "timing_s/step": [10.0, 10.0]}
    serial = pd.DataFrame(base | {"timing_s/gen": [6.0, 6.0], "timing_s/update_actor": [4.0, 4.0]})
    overlapping = pd.DataFrame(base | {"timing_s/generate_async": [9.0, 9.0], "timing_s/update_actor": [8.0, 8.0]})
    stacked, side = step_breakdown(serial).axes[0], step_breakdown(overlapping).axes[0]
    assert "side by side" not in stacked.get_title() and "side by side" in side.get_title()
    assert max(p.get_y() + p.get_height() for p in stacked.patches) == pytest.approx(10.0)
    assert max(p.get_y() + p.get_height() for p in side.patches) == pytest.approx(9.0)


def test_a_calibrated_run_carries_its_band_into_summary_and_compare(tmp_path):
    """Issue 13: the calibration's ± band reaches every predicted figure: summary.json, the compare table."""
    from typer.testing import CliRunner

    from rlsim.tools.cli import app

    overlay = tmp_path / "cal.yaml"
    overlay.write_text('calibration:\n  fitted_from: "a test log"\n  band_pct: 5.0\n')
    res = CliRunner().invoke(app, ["compare", "quickstart", "--set", "steps=1", "--set",
                                   "algorithm.prompts_per_step=16", "--set", f"calibration={overlay}",
                                   "--out", str(tmp_path / "cmp"), "--no-plots", "-q"])
    assert res.exit_code == 0, res.output
    assert "calibration band" in res.output
    ci = pd.read_csv(tmp_path / "cmp" / "compare_ci95.csv", index_col=0)
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv", index_col=0)
    assert ci["step_time_s"].iloc[0] == pytest.approx(0.05 * table["step_time_s"].iloc[0])
    assert ci["throughput_tokens_per_s"].iloc[0] == pytest.approx(0.05 * table["throughput_tokens_per_s"].iloc[0])


def test_idle_share_reads_rounding_as_zero_but_keeps_an_overcount():
    """A pool busy the whole window sums to its capacity only up to rounding: that reads 0, never -0%."""
    from rlsim.sim.results.metrics import _idle_share

    assert _idle_share(2.4000000000000004, 2.4) == 0.0  # 1 - 1.0000000000000002
    assert _idle_share(1.2, 2.4) == 0.5
    assert _idle_share(2.5, 2.4) < 0  # double counting would still show


def test_quickstart_summary_and_html_show_tail_share_and_mfu_mbu_per_pool(tmp_path):
    """Busy is not useful: the run summary and the HTML report put tail share and MFU / MBU beside idle."""
    from typer.testing import CliRunner

    from rlsim.tools.cli import app
    from rlsim.tools.report.html import render_report

    out = tmp_path / "q"
    res = CliRunner().invoke(app, ["run", "quickstart", "--set", "steps=1", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    idle = next(i for i, line in enumerate(lines) if "idle: gen (8 GPUs)" in line)
    assert "busy in thin tail" in lines[idle + 1] and "%" in lines[idle + 1]
    assert any("MFU / MBU: generate" in line and line.count("%") == 2 for line in lines[idle + 1:idle + 5])
    page = render_report(out)
    for key in ("tail_share_by_pool/gen", "mfu_by_phase/gen/train", "mbu_by_phase/gen/generate"):
        assert f"<td>{key}</td>" in page, key


def test_step_breakdown_stacks_phases_not_their_parts():
    """timing_s/transition/* are parts of update_weights: stacked too, the bars ran ~1 s above the step time."""
    from rlsim.tools.report.plots import step_breakdown

    steps = pd.DataFrame({"step": [0], "warmup": [False], "timing_s/step": [10.0], "timing_s/gen": [6.0],
                          "timing_s/update_weights": [4.0], "timing_s/transition/wake": [3.0],
                          "timing_s/transition/load": [1.0]})
    ax = step_breakdown(steps).axes[0]
    assert "side by side" not in ax.get_title()
    assert max(p.get_y() + p.get_height() for p in ax.patches) == pytest.approx(10.0)
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"gen", "update_weights", "step time"}


def _colocated_run_tables():
    engine_stats = pd.DataFrame({"engine": ["rollout-0"] * 3, "pool": ["gen"] * 3, "time_s": [0.0, 10.0, 40.0],
                                 "running": [64, 32, 4], "kv_tokens": [5e4, 4e4, 1e4],
                                 "kv_capacity_tokens": [1e5] * 3})
    timeline = pd.DataFrame({"pool": ["gen", "gen"], "gpu_group": ["rollout-0", "actor"],
                             "role": ["rollout", "actor"], "phase": ["generate", "train"], "step": [0, 0],
                             "policy_version": [0, 0], "start_s": [0.0, 50.0], "end_s": [50.0, 120.0],
                             "gpus": [8, 8]})
    steps = pd.DataFrame({"step": [0], "start_s": [0.0], "end_s": [120.0], "timing_s/step": [120.0]})
    return engine_stats, timeline, steps


def test_engine_plot_covers_the_whole_run_and_no_kv_is_held_while_the_gpus_train():
    from rlsim.tools.report.plots import engine_load

    engine_stats, timeline, steps = _colocated_run_tables()
    fig = engine_load(engine_stats, steps, 256, timeline)
    batch, kv = fig.axes[0], fig.axes[1]
    assert kv.get_xlim()[1] >= 120.0  # the axis stopped at the engines' last sample (40 s)
    x, y = kv.lines[0].get_data()
    assert y[-1] == 0.0 and x[-1] == pytest.approx(50.0)  # the hybrid engine sleeps: its KV cache is freed
    assert batch.lines[0].get_data()[1][-1] == 0
    # an engine on GPUs of its own keeps its KV between batches
    apart = timeline.assign(pool=["gen", "train"])
    x, y = engine_load(engine_stats, steps, 256, apart).axes[1].lines[0].get_data()
    assert y[-1] == pytest.approx(10.0)


def test_long_tail_legend_does_not_overlap_the_twin_axis():
    from rlsim.tools.report.plots import long_tail

    samples = pd.DataFrame({"step": [0, 0, 1, 1, 2, 2], "finished_s": [5.0, 9.0, 15.0, 22.0, 25.0, 31.0],
                            "response_tokens": [100, 900, 200, 1500, 300, 2000]})
    steps = pd.DataFrame({"step": [0, 1, 2], "start_s": [0.0, 10.0, 20.0]})
    fig = long_tail(samples, steps)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax, twin = fig.axes[0], fig.axes[1]
    legend = ax.get_legend().get_window_extent(renderer)
    for artist in [twin.yaxis.label, *twin.get_yticklabels()]:
        assert not legend.overlaps(artist.get_window_extent(renderer)), artist


def test_html_report_has_labelled_rows_and_a_per_step_table_that_scrolls(result, tmp_path):
    from rlsim.tools.report.html import CSS, render_report

    write_results(result, tmp_path / "run", plots=False)
    page = render_report(tmp_path / "run")
    summary = page[page.index("<h2>Summary</h2>"):page.index("<details>")]
    labels = [cell.split("</td>")[0] for cell in summary.split("<td class=label>")[1:]]
    assert labels[:4] == ["scenario", "GPUs", "measured steps", "step time (mean)"]
    assert "throughput" in labels and "GPU-hours" in labels and labels != sorted(labels)
    assert "busy_fraction_by_phase" not in summary  # raw keys only in the <details> table below
    per_step = page[page.index("<h2>Per step</h2>"):]
    assert per_step.startswith("<h2>Per step</h2><div class='scroll wide'>")
    assert ".scroll{max-height:28em;max-width:100%;overflow:auto}" in CSS
    assert ".wide td,.wide th{white-space:nowrap}" in CSS


def test_a_run_over_several_seeds_prints_one_band_with_its_parts_named(tmp_path):
    res = CliRunner().invoke(app, ["run", "quickstart", "--set", "steps=1", "--set", "algorithm.prompts_per_step=16",
                                   "--seeds", "2", "--out", str(tmp_path / "s"), "-q", "--no-plots"])
    assert res.exit_code == 0, res.output
    bands = [line for line in res.output.splitlines() if "band ±" in line]
    assert len(bands) == 1 and bands[0].startswith("band ± ")
    assert "seed spread" in bands[0] and "(95%, 2 seeds)" in bands[0] and "model error" in bands[0]
    assert "validation band" not in res.output
