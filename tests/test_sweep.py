"""Sweeps: expansion, seeds, identical tables on all backends, resume after kills, failing points, Pareto."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure
from typer.testing import CliRunner

from rlsim.tools.cli import app
from rlsim.tools.sweep import (
    SweepError,
    derive_seeds,
    load_results,
    pareto_front,
    plan_sweep,
    plot_pareto,
    plot_sweep,
    run_point,
    run_sweep,
)
from rlsim.tools.sweep.grid import combinations, format_value, parse_axis, split_values
from rlsim.tools.sweep.runner import PointTask, flatten_summary, tasks_for
from rlsim.tools.sweep.store import ResultStore

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
SMALL = ["algorithm.prompts_per_step=16"]
GRID = ["algorithm.samples_per_prompt=4,8", "roles.rollout.parallel.tp=1,2"]
cli = CliRunner()


def small_plan(**kw):
    kw.setdefault("grid", GRID)
    kw.setdefault("seeds", 2)
    kw.setdefault("sets", SMALL)
    return plan_sweep(QUICKSTART, **kw)


# ---------------------------------------------------------------- expansion and seeds


def test_split_values_respects_brackets_and_quotes():
    assert split_values("1, 2,3") == ["1", "2", "3"]
    assert split_values("[1,2],{a: 1, b: 2}") == ["[1,2]", "{a: 1, b: 2}"]
    assert split_values("'a,b',c") == ["'a,b'", "c"]


def test_parse_axis_canonical_values_and_errors():
    # Values read as --set reads them (YAML): `02` is 2, `1e-05` stays a string as in YAML 1.1.
    assert parse_axis("a.b=1, 02,x,1.5e-05,1e-05,[1,2]", "--grid") == (
        "a.b",
        ["1", "2", "x", "1.5e-05", "1e-05", "[1, 2]"],
    )
    for bad in ("a.b", "=1,2", "a..b=1", "a.b=", "a.b=1,,2", "a.b=[1"):
        with pytest.raises(SweepError) as exc:
            parse_axis(bad, "--grid")
        assert len(exc.value.lines()) == 1 and exc.value.lines()[0].startswith(f"--grid {bad}:")


@pytest.mark.parametrize(
    "value", [1, 1.5, 1e-05, 3e20, "h20", "1", "yes", True, None, [1, "a"], {"kind": "fixed"}]
)
def test_format_value_round_trips(value):
    assert yaml.safe_load(format_value(value)) == value


def test_grid_is_cartesian_and_zip_pairs():
    plan = small_plan(
        grid=["algorithm.samples_per_prompt=4,8"],
        zip_=["roles.rollout.parallel.tp=1,2", "roles.rollout.engine.gpu_memory_utilization=0.4,0.6"],
        seeds=None,
    )
    spp, tp, mem = (
        "algorithm.samples_per_prompt",
        "roles.rollout.parallel.tp",
        "roles.rollout.engine.gpu_memory_utilization",
    )
    assert combinations(plan.spec) == [
        (f"{spp}=4", f"{tp}=1", f"{mem}=0.4"),
        (f"{spp}=4", f"{tp}=2", f"{mem}=0.6"),
        (f"{spp}=8", f"{tp}=1", f"{mem}=0.4"),
        (f"{spp}=8", f"{tp}=2", f"{mem}=0.6"),
    ]
    assert [p.index for p in plan.points] == [0, 1, 2, 3]
    assert plan.points[1].params == {
        "algorithm.samples_per_prompt": 4,
        "roles.rollout.parallel.tp": 2,
        "roles.rollout.engine.gpu_memory_utilization": 0.6,
    }


def test_zip_lengths_must_match_and_keys_once():
    with pytest.raises(SweepError) as exc:
        small_plan(zip_=["algorithm.samples_per_prompt=4,8", "roles.rollout.parallel.tp=1"], grid=[])
    assert exc.value.lines() == [
        "--zip: the zipped lists must have the same length, got "
        "algorithm.samples_per_prompt (2), roles.rollout.parallel.tp (1)"
    ]
    with pytest.raises(SweepError) as exc:
        small_plan(grid=["steps=1,2"], zip_=["steps=3,4"])
    assert "steps is swept twice" in exc.value.lines()[0]


def test_seeds_derive_from_scenario_seed_common_across_points():
    plain = small_plan(seeds=None)
    assert {p.seed for p in plain.points} == {0}  # no --seeds: the scenario's own seed, as `rlsim run`
    plan = small_plan(seeds=3)
    expected = [int(c.generate_state(1, dtype=np.uint32)[0]) for c in np.random.SeedSequence(0).spawn(3)]
    assert derive_seeds(0, 3) == expected
    assert derive_seeds(0, 5)[:3] == expected  # raising K keeps the earlier replicates
    assert len(plan.points) == 4 * 3
    for combo in range(4):
        assert [p.seed for p in plan.points if p.combo == combo] == expected
    # The base seed is the point's own scenario seed: sweeping `seed` gives other streams.
    seeded = small_plan(grid=["seed=0,7"], seeds=2)
    assert [p.seed for p in seeded.points] == derive_seeds(0, 2) + derive_seeds(7, 2)


def test_point_ids_stable_and_independent_of_grid_order():
    a = small_plan()
    b = small_plan(grid=["algorithm.samples_per_prompt=2,4,8", "roles.rollout.parallel.tp=1,2"], seeds=3)
    assert {p.point_id for p in a.points} < {p.point_id for p in b.points}
    assert [p.point_id for p in a.points] == [p.point_id for p in small_plan().points]
    assert len({p.point_id for p in b.points}) == len(b.points)


def test_sweep_file_and_command_line_merge(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "scenario": os.path.relpath(QUICKSTART, tmp_path),
                "grid": {"algorithm.samples_per_prompt": [4, 8]},
                "zip": {
                    "roles.rollout.parallel.tp": [1, 2],
                    "roles.rollout.engine.gpu_memory_utilization": [0.4, 0.6],
                },
                "seeds": 2,
                "set": SMALL,
            }
        )
    )
    plan = plan_sweep(sweep)
    assert plan.spec.scenario.resolve() == QUICKSTART and len(plan.points) == 8
    plan = plan_sweep(sweep, grid=["algorithm.samples_per_prompt=2,4,6"], seeds=1)
    assert len(plan.points) == 6 and plan.spec.grid["algorithm.samples_per_prompt"] == ["2", "4", "6"]
    sweep.write_text("scenario: quickstart\ngrid: {seed: [1, 2]}\n")  # a shipped scenario's name works too
    assert plan_sweep(sweep).spec.scenario.resolve() == QUICKSTART
    sweep.write_text("scenario: x.yaml\ngrd: {a: [1]}\nseeds: 0\n")
    with pytest.raises(SweepError) as exc:
        plan_sweep(sweep)
    assert exc.value.lines() == [
        f"{sweep}: grd: unknown key (expected one of scenario, grid, zip, seeds, set): did you mean grid?",
        f"{sweep}: seeds: expected an integer >= 1, got 0",
    ]


def test_bad_input_exit_2_one_line_each_nothing_run(tmp_path):
    out = tmp_path / "out"
    res = cli.invoke(
        app,
        [
            "sweep",
            str(QUICKSTART),
            "--grid",
            "algorithm.samples_per_promptt=4,8",
            "--grid",
            "roles.rollout.paralel.tp=1,2",
            "--set",
            "steps=0",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert lines == [
        f"{QUICKSTART}: steps: must be > 0, got 0",
        f"{QUICKSTART}: --grid roles.rollout.paralel.tp: roles.rollout.paralel: unknown key: did you mean parallel?",
        f"{QUICKSTART}: --grid algorithm.samples_per_promptt: algorithm.samples_per_promptt: unknown key: did you mean "
        "samples_per_prompt?",
    ]
    res = cli.invoke(
        app,
        ["sweep", str(QUICKSTART), "--grid", "steps", "--zip", "a=1,2", "--zip", "b=1", "--out", str(out)],
    )
    assert res.exit_code == 2
    assert [ln for ln in res.output.splitlines() if ln.strip()] == [
        "--grid steps: expected --grid dotted.path=v1,v2,...",
        "--zip: the zipped lists must have the same length, got a (2), b (1)",
    ]
    assert "Traceback" not in res.output and not out.exists()


def test_only_problems_every_point_has_are_fatal():
    # The scenario may be invalid on its own if every point fixes it (a template)...
    plan = plan_sweep(
        QUICKSTART, grid=["roles.rollout.parallel.tp=1,2"], sets=["roles.rollout.parallel.tp=3"]
    )
    assert len(plan.points) == 2
    # ...but a problem all points share is bad input, as for `rlsim run`; a problem some have is an error row.
    with pytest.raises(SweepError) as exc:
        plan_sweep(QUICKSTART, grid=["roles.rollout.parallel.tp=3"])
    assert exc.value.lines() == [
        f"{QUICKSTART}: roles.rollout.parallel.tp: must divide gpus_per_node (8), got 3"
    ]
    assert len(plan_sweep(QUICKSTART, grid=["roles.rollout.parallel.tp=3,2"]).points) == 2


# ---------------------------------------------------------------- run_point and backends


def test_run_point_is_picklable_and_matches_rlsim_run():
    from rlsim import load_scenario, simulate

    plan = small_plan(seeds=None)
    task = tasks_for(plan)[3]
    assert pickle.loads(pickle.dumps(task)) == task and pickle.loads(pickle.dumps(run_point)) is run_point
    record = run_point(task)
    expected = simulate(load_scenario(QUICKSTART, list(task.overrides))).summary
    assert record["error"] is None and record["overrides"] == list(task.overrides)
    assert record["summary"] == flatten_summary(expected)
    assert record["summary"]["idle_fraction_by_pool.gen"] == expected["idle_fraction_by_pool"]["gen"]
    assert "busy_fraction_by_phase.generate" in record["summary"]
    assert (
        record["steps"]["timing_s/step"]
        == simulate(load_scenario(QUICKSTART, list(task.overrides))).steps["timing_s/step"].tolist()
    )


@pytest.fixture(scope="module")
def serial_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("serial")
    outcome = run_sweep(small_plan(), out, backend="serial")
    return out, outcome


def test_serial_table_shape(serial_sweep):
    out, outcome = serial_sweep
    df = load_results(out)
    assert outcome.ran == outcome.total == len(df) == 8 and outcome.failed == 0
    assert list(df.columns[:6]) == [
        "point",
        "point_id",
        "replicate",
        "seed",
        "algorithm.samples_per_prompt",
        "roles.rollout.parallel.tp",
    ]
    assert df.columns[-1] == "error" and df["error"].isna().all()
    assert list(df["point"]) == list(range(8)) and df.attrs["params"] == [
        "algorithm.samples_per_prompt",
        "roles.rollout.parallel.tp",
    ]
    assert len(list((out / "points").glob("*.json"))) == 8
    steps = ResultStore(out).steps(df["point_id"][0])
    assert len(steps) == 3 and "timing_s/gen" in steps.columns


def test_process_pool_gives_the_identical_table(serial_sweep, tmp_path):
    out, _ = serial_sweep
    outcome = run_sweep(small_plan(), tmp_path, backend="local", workers=2)
    assert outcome.ran == 8
    assert (tmp_path / "results.csv").read_bytes() == (out / "results.csv").read_bytes()


def test_rerun_skips_done_points_and_grows(serial_sweep, tmp_path):
    out, _ = serial_sweep
    for f in (out / "points").glob("*.json"):
        (tmp_path / "points").mkdir(exist_ok=True)
        (tmp_path / "points" / f.name).write_bytes(f.read_bytes())
    again = run_sweep(small_plan(), tmp_path, backend="serial")
    assert (again.skipped, again.ran) == (8, 0)
    assert (tmp_path / "results.csv").read_bytes() == (out / "results.csv").read_bytes()
    victim = again.table["point_id"][5]
    (tmp_path / "points" / f"{victim}.json").write_text('{"point_id": "trunc')  # unreadable: runs again
    assert run_sweep(small_plan(), tmp_path, backend="serial").ran == 1
    grown = run_sweep(small_plan(seeds=3), tmp_path, backend="serial")  # one more replicate per combination
    assert (grown.total, grown.skipped, grown.ran) == (12, 8, 4)


def _explode_on_point_2(task: PointTask) -> dict:
    if task.index == 2:
        raise RuntimeError("boom")
    return run_point(task)


def test_failing_points_are_isolated_reported_and_retried(tmp_path, monkeypatch):
    # tp=3 validates as a value but is infeasible on 8-GPU nodes: those points fail, the others run.
    res = cli.invoke(
        app,
        [
            "sweep",
            str(QUICKSTART),
            "--set",
            SMALL[0],
            "--grid",
            "roles.rollout.parallel.tp=1,3,2",
            "--backend",
            "serial",
            "--out",
            str(tmp_path),
            "--no-progress",
        ],
    )
    assert res.exit_code == 1, res.output
    assert "failed: " in res.output and "must divide gpus_per_node (8), got 3" in res.output
    df = load_results(tmp_path)
    assert list(df["roles.rollout.parallel.tp"]) == [1, 3, 2]
    assert df["error"].notna().tolist() == [False, True, False]
    assert (
        df.loc[1, "error"] == f"{QUICKSTART}: roles.rollout.parallel.tp: must divide gpus_per_node (8), got 3"
    )
    assert df.loc[[0, 2], "throughput_tokens_per_s"].notna().all()
    record = json.loads((tmp_path / "points" / f"{df.loc[1, 'point_id']}.json").read_text())
    assert record["error"] and record["overrides"] == [SMALL[0], "roles.rollout.parallel.tp=3"]
    # Failed points are retried on the next run, done ones are not.
    plan = plan_sweep(QUICKSTART, grid=["roles.rollout.parallel.tp=1,3,2"], sets=SMALL)
    assert (lambda o: (o.skipped, o.ran, o.failed))(run_sweep(plan, tmp_path, backend="serial")) == (2, 1, 1)

    # An exception raised while simulating is a record too, with its traceback in the point file.
    def broken(scenario, seed=None):
        raise ValueError("no engine fits")

    monkeypatch.setattr(sys.modules["rlsim.sim.api"], "simulate", broken)  # what the runner calls
    record = run_point(tasks_for(plan)[0])
    assert record["error"] == "ValueError: no engine fits" and "Traceback" in record["traceback"]
    monkeypatch.undo()
    # A point function that raises (the worker, not the point) is an error row too, and the sweep goes on.
    outcome = run_sweep(small_plan(), tmp_path / "flaky", backend="serial", point_fn=_explode_on_point_2)
    assert outcome.table["error"].notna().tolist() == [i == 2 for i in range(8)]
    assert outcome.table.loc[2, "error"] == "RuntimeError: boom"


def test_ray_backend_without_ray_is_bad_input(tmp_path, monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    res = cli.invoke(
        app, ["sweep", str(QUICKSTART), "--grid", GRID[0], "--backend", "ray", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2
    assert res.output.strip().endswith("--backend ray: Ray is not installed (pip install 'rlsim[ray]')")
    assert not (tmp_path / "o").exists()


def test_store_writes_atomically_and_cleans_dead_tmp(tmp_path):
    store = ResultStore(tmp_path)
    dead = 2**22 + 12345  # above the default pid_max: no such process
    (store.points_dir / f".abc.json.{dead}.tmp").write_text("half")
    (store.points_dir / f".abd.json.{os.getpid()}.tmp").write_text("ours, in progress")
    ResultStore(tmp_path)
    assert sorted(p.name for p in store.points_dir.iterdir()) == [f".abd.json.{os.getpid()}.tmp"]
    store.write_point({"point_id": "abc", "summary": {"x": 1.0}, "error": None})
    assert store.read_point("abc")["summary"] == {"x": 1.0} and store.completed(["abc", "zzz"]) == {"abc"}


# ---------------------------------------------------------------- interruptions


LONG_SWEEP = [
    "--grid",
    "algorithm.samples_per_prompt=4,6,8,10",
    "--seeds",
    "10",
    "--set",
    "algorithm.prompts_per_step=64",
]


def _start_sweep(out: Path, backend: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "rlsim.tools.cli",
        "sweep",
        str(QUICKSTART),
        *LONG_SWEEP,
        "--backend",
        backend,
        "--workers",
        "2",
        "--out",
        str(out),
        "--no-progress",
    ]
    # A shell that starts pytest in the background makes it ignore SIGINT, and children inherit that;
    # the sweep must see Ctrl-C as a terminal would deliver it.
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for_points(proc: subprocess.Popen, out: Path, k: int) -> list[Path]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = list((out / "points").glob("*.json")) if (out / "points").is_dir() else []
        if len(found) >= k:
            return found
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    proc.kill()
    pytest.fail("the sweep stored no points in time")


def _resume_and_check(out: Path, backend: str, stored_before: int) -> None:
    plan = plan_sweep(QUICKSTART, grid=[LONG_SWEEP[1]], seeds=10, sets=[LONG_SWEEP[-1]])
    outcome = run_sweep(plan, out, backend=backend, workers=2)
    assert outcome.skipped == stored_before and outcome.ran == len(plan.points) - stored_before
    df = pd.read_csv(out / "results.csv")
    assert list(df["point"]) == list(range(40)) and df["error"].isna().all()
    assert sorted(df["point_id"]) == sorted(p.point_id for p in plan.points)  # every point exactly once
    assert sorted(p.stem for p in (out / "points").iterdir()) == sorted(df["point_id"])  # no leftovers


@pytest.mark.slow
def test_killed_sweep_resumes_every_point_exactly_once(tmp_path):
    proc = _start_sweep(tmp_path, "serial")
    _wait_for_points(proc, tmp_path, 3)
    proc.kill()  # SIGKILL: no handler runs, possibly mid-write
    proc.communicate()
    stored = len(list((tmp_path / "points").glob("*.json")))
    assert 3 <= stored < 40
    _resume_and_check(tmp_path, "serial", stored)


@pytest.mark.slow
def test_killed_worker_stops_cleanly_then_resumes(tmp_path):
    proc = _start_sweep(tmp_path, "local")
    found = _wait_for_points(proc, tmp_path, 2)
    worker = json.loads(found[0].read_text())["pid"]
    assert worker != proc.pid
    os.kill(worker, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stderr
    assert "a worker process died" in stderr and "Traceback" not in stderr
    df = pd.read_csv(tmp_path / "results.csv")  # consistent: the stored points, all good
    stored = len(list((tmp_path / "points").glob("*.json")))
    assert len(df) == stored < 40 and df["error"].isna().all()
    _resume_and_check(tmp_path, "local", stored)


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_then_resumes(tmp_path):
    proc = _start_sweep(tmp_path, "local")
    _wait_for_points(proc, tmp_path, 3)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    stored = len(list((tmp_path / "points").glob("*.json")))
    assert len(pd.read_csv(tmp_path / "results.csv")) == stored < 40
    _resume_and_check(tmp_path, "local", stored)


# ---------------------------------------------------------------- Pareto fronts and plots


def _brute_front(xs, ys, maximize):
    sx = [v if maximize[0] else -v for v in xs]
    sy = [v if maximize[1] else -v for v in ys]
    return {
        i
        for i in range(len(xs))
        if not any(
            sx[j] >= sx[i] and sy[j] >= sy[i] and (sx[j] > sx[i] or sy[j] > sy[i]) for j in range(len(xs))
        )
    }


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=30),
    st.tuples(st.booleans(), st.booleans()),
)
def test_pareto_front_matches_brute_force(points, maximize):
    df = pd.DataFrame(points, columns=["x", "y"])
    front = pareto_front(df, "x", "y", maximize)
    assert set(front.index) == _brute_front(df["x"].tolist(), df["y"].tolist(), maximize)
    assert list(front["x"]) == sorted(front["x"])


def test_pareto_front_throughput_vs_staleness():
    df = pd.DataFrame(
        {
            "throughput": [10, 20, 30, 25, 30, 5, np.nan],
            "staleness": [0, 1, 2, 3, 2, 0, 0],
            "error": [None, None, None, None, None, None, None],
        }
    )
    front = pareto_front(df, "throughput", "staleness")  # more throughput, less staleness
    assert list(front.index) == [0, 1, 2, 4]  # 3 is beaten by 2, 5 by 0, the NaN row is left out
    df.loc[0, "error"] = "failed"
    assert list(pareto_front(df, "throughput", "staleness").index) == [5, 1, 2, 4]


def test_plots_and_plot_sweep_command(serial_sweep, tmp_path):
    out, _ = serial_sweep
    df = load_results(out)
    fig = plot_sweep(
        df, "algorithm.samples_per_prompt", "throughput_tokens_per_s", hue="roles.rollout.parallel.tp"
    )
    assert isinstance(fig, Figure) and len(fig.axes[0].get_legend().get_texts()) == 2
    assert "mean over seeds" in fig.axes[0].get_title()
    fig = plot_pareto(df, "throughput_tokens_per_s", "gpu_idle_fraction", maximize=(True, False))
    assert isinstance(fig, Figure)
    with pytest.raises(KeyError):
        plot_sweep(df, "nope", "throughput_tokens_per_s")
    png = tmp_path / "t.png"
    res = cli.invoke(
        app,
        [
            "plot-sweep",
            str(out),
            "--x",
            "algorithm.samples_per_prompt",
            "--y",
            "throughput_tokens_per_s",
            "--hue",
            "roles.rollout.parallel.tp",
            "--out",
            str(png),
        ],
    )
    assert res.exit_code == 0, res.output
    assert png.read_bytes()[:4] == b"\x89PNG"
    res = cli.invoke(
        app,
        [
            "plot-sweep",
            str(out),
            "--x",
            "throughput_tokens_per_s",
            "--y",
            "gpu_idle_fraction",
            "--pareto",
            "--out",
            str(tmp_path / "p.png"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "Pareto front" in res.output and (tmp_path / "p.png").exists()
    res = cli.invoke(app, ["plot-sweep", str(out), "--x", "nope", "--y", "throughput_tokens_per_s"])
    assert res.exit_code == 2 and f"{out}: no column 'nope' in results.csv" in res.output


# ---------------------------------------------------------------- Ray (last: it leaves threads behind)


@pytest.mark.slow
def test_ray_gives_the_identical_table(serial_sweep, tmp_path):
    pytest.importorskip("ray")
    import ray

    out, _ = serial_sweep
    outcome = run_sweep(small_plan(), tmp_path, backend="ray", workers=2)
    assert outcome.ran == 8 and not ray.is_initialized()  # the local Ray it started is shut down
    assert (tmp_path / "results.csv").read_bytes() == (out / "results.csv").read_bytes()
