"""Issue 17's repros, each a test: no hang, no traceback, no NaN, hostile files refused, a sturdy sweep store.

Runs that used to hang are run in-process under a wall-clock alarm (tests/test_fuzz.py `alarm`), so a
regression fails the test instead of blocking the suite.
"""

from __future__ import annotations

import copy
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_fuzz import alarm  # tests/ is on sys.path (pytest's default import mode)
from typer.testing import CliRunner

from rlsim.sim.hardware import load_profile_file
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario, parse_scenario, read_yaml
from rlsim.sim.simulate import simulate
from rlsim.tools.cli import app

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
QUICKSTART = SCENARIOS / "quickstart.yaml"
TOOL_BASE = SCENARIOS / "agentic" / "tool-latency-base.yaml"
SOKOBAN = SCENARIOS / "roll" / "agentic-sokoban.yaml"
ROLL_RLVR = SCENARIOS / "roll" / "rlvr-qwen2.5-7b-async.yaml"
runner = CliRunner()


def refused(path: Path, overrides: list[str], seconds: float = 20.0) -> list[str]:
    """The problem lines of a scenario that must be refused (a hang or a run fails the test)."""
    with alarm(seconds), pytest.raises(ScenarioError) as info:
        simulate(load_scenario(path, overrides))
    return info.value.lines()


def cli(*args: str):
    res = runner.invoke(app, list(args))
    assert "Traceback" not in res.output, res.output
    return res


# ---------------------------------------------------------------- 1. hangs refused at validation


def test_agent_context_below_prompt_is_refused_not_relaunched_forever():
    lines = refused(TOOL_BASE, ["workload.agent.max_context_tokens=100", "schedule.max_head_offpolicyness=1"])
    assert lines == [
        f"{TOOL_BASE}: workload.agent.max_context_tokens: must be > the longest prompt (600 tokens), got 100: a "
        "trajectory whose prompt fills its context never generates, and the run could never finish"
    ]
    assert refused(SOKOBAN, ["workload.agent.max_context_tokens=1"])[0].startswith(
        f"{SOKOBAN}: workload.agent.max_context_tokens: must be > the longest prompt"
    )
    # One token more than the longest prompt leaves room to generate: valid.
    load_scenario(TOOL_BASE, ["workload.agent.max_context_tokens=601"])


def test_dynamic_sampling_that_filters_every_group_is_refused():
    lines = refused(ROLL_RLVR, ["schedule.dynamic_sampling=true", "schedule.filter_prob=1.0"])
    assert len(lines) == 1 and "schedule.filter_prob: must be < 1 with dynamic_sampling, got 1" in lines[0]
    load_scenario(ROLL_RLVR, ["schedule.filter_prob=1.0"])  # without dynamic sampling it filters nothing


@pytest.mark.parametrize(("path", "tool"), [(TOOL_BASE, "env"), (SOKOBAN, "game_step")])
def test_a_tool_that_always_fails_is_refused_where_failed_trajectories_are_replaced(path, tool):
    lines = refused(path, [f"environments.tools.{tool}.failure_prob=1.0"])
    assert len(lines) == 1 and f"environments.tools.{tool}.failure_prob: failure_prob 1 fails every call" in lines[0]
    timeout = refused(path, [f"environments.tools.{tool}.latency={{kind: fixed, value: 2}}",
                             f"environments.tools.{tool}.timeout_s=1"])
    assert f"environments.tools.{tool}.timeout_s: timeout_s 1 cuts off every attempt" in timeout[0]


def test_tools_that_almost_never_succeed_over_many_turns_are_refused():
    sandbox = SCENARIOS / "roll" / "swe-sandbox.yaml"  # 10 to 60 turns, 2 attempts per call
    lines = refused(sandbox, ["environments.tools.sandbox.failure_prob=0.999"])
    assert lines[0].startswith(f"{sandbox}: workload.agent.turns: every trajectory makes at least 9 tool calls")
    load_scenario(sandbox, ["environments.tools.sandbox.failure_prob=0.5"])


def test_the_synchronous_schedule_trains_nothing_when_every_trajectory_fails():
    scn = load_scenario(TOOL_BASE, ["environments.tools.env.failure_prob=1.0", "steps=1", "warmup_steps=0",
                                    "schedule={kind: hybridflow, placement: custom}"])
    with alarm(20):
        result = simulate(scn)
    assert result.summary["trajectories_failed"] == result.summary["trajectories_launched"] > 0
    assert result.summary["tokens"] == 0 and result.summary["response_length_mean"] == 0
    assert all(math.isfinite(v) for v in result.summary.values() if isinstance(v, float))


# ---------------------------------------------------------------- 2. CSV inputs


CSV_TARGETS = {  # override prefix -> (column the distribution reads, key to blame for a bad value)
    "workload.agent.turns": "length",
    "workload.agent.tokens_per_turn": "length",
    "environments.tools.env.observation_tokens": "length",
    "environments.tools.env.latency": "seconds",
    "workload.prompt_length": "length",
}
CSV_CASES = {
    "missing": (None, "path: file not found: {csv}"),
    "empty": ("", "column: no column '{col}' in {csv} (columns: none)"),
    "header only": ("{col}\n", "path: no rows in {csv}"),
    "ragged": ("{col},other\n3,1\n4\n", "path: {csv} line 3: 1 fields, the header has 2"),
    "wrong column": ("x\n3\n", "column: no column '{col}' in {csv} (columns: x)"),
    "bad value": ("{col}\n3\nabc\n", "column: {csv} line 3: expected"),
    "directory": ("<dir>", "path: {csv}: not a regular file, expected a CSV file"),
}


@pytest.mark.parametrize("case", list(CSV_CASES))
@pytest.mark.parametrize("target", list(CSV_TARGETS))
def test_csv_inputs_are_checked_once_with_one_line(tmp_path, target, case):
    col = CSV_TARGETS[target]
    content, message = CSV_CASES[case]
    csv = tmp_path / "in.csv"
    if content == "<dir>":
        csv.mkdir()
    elif content is not None:
        csv.write_text(content.format(col=col))
    lines = refused(TOOL_BASE, [f"{target}={{kind: empirical, path: {csv}, column: {col}}}"])
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{TOOL_BASE}: {target}.{message.format(csv=csv, col=col)}"), lines[0]


def test_a_bom_and_crlf_csv_validates_and_samples_the_same_values(tmp_path):
    csv = tmp_path / "turns.csv"
    csv.write_bytes(b"\xef\xbb\xbflength\r\n2\r\n3\r\n")
    lat = tmp_path / "lat.csv"
    lat.write_bytes(b"\xef\xbb\xbfseconds,x\r\n0.5,1\r\n1.5,1\r\n")
    scn = load_scenario(TOOL_BASE, [f"workload.agent.turns={{kind: empirical, path: {csv}}}",
                                    f"environments.tools.env.latency={{kind: empirical, path: {lat}}}",
                                    "steps=1", "warmup_steps=0", "algorithm.prompts_per_step=4"])
    with alarm(20):
        result = simulate(scn)
    assert set(result.trajectories["turns_planned"]) <= {2, 3}
    tools = result.tools.set_index("tool")
    assert tools.loc["env", "latency_p50_s"] >= 0.5


def test_turns_beyond_the_documented_128_are_refused(tmp_path):
    lines = refused(TOOL_BASE, ["workload.agent.turns={kind: uniform, min: 2, max: 129}"])
    assert lines == [f"{TOOL_BASE}: workload.agent.turns: up to 129 turns per trajectory; at most 128 are supported"]
    load_scenario(TOOL_BASE, ["workload.agent.turns={kind: uniform, min: 2, max: 128}"])


def test_hidden_smaller_than_heads_is_one_line_not_a_division_by_zero():
    res = cli("validate", str(QUICKSTART), "--set", "models.policy.hidden=4")
    assert res.exit_code == 2
    assert res.output.strip() == (f"{QUICKSTART}: models.policy: hidden (4) must be >= heads (28): the head size is "
                                  "hidden // heads (or give head_dim)")


# ---------------------------------------------------------------- 2. command line


def test_negative_seed_is_bad_input(tmp_path):
    res = cli("run", str(QUICKSTART), "--seed", "-1", "--out", str(tmp_path / "o"))
    assert res.exit_code == 2 and res.output.strip() == "--seed: expected an integer from 0 to 2^63 - 1, got -1"


def test_unusable_out_is_one_line_before_simulating(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    res = cli("run", str(QUICKSTART), "--out", str(afile))
    assert res.exit_code == 2 and res.output.strip() == f"--out {afile}: is a file, not a folder"
    res = cli("run", str(QUICKSTART), "--out", str(afile / "sub"))
    assert res.exit_code == 2 and res.output.strip() == f"--out {afile / 'sub'}: is under {afile}, which is a file, " \
        "not a folder"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_out_is_one_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        res = cli("run", str(QUICKSTART), "--out", str(locked / "run"))
    finally:
        locked.chmod(0o700)
    assert res.exit_code == 2 and res.output.strip().startswith(f"--out {locked / 'run'}: cannot write there: ")


def test_out_that_cannot_be_created_is_one_line():
    res = cli("run", str(QUICKSTART), "--out", "/proc/rlsim-cannot-exist")
    assert res.exit_code == 2 and res.output.strip().startswith("--out /proc/rlsim-cannot-exist: cannot write there")


@pytest.mark.parametrize("name", ["../../escape", "/etc/x", "a/b", ".hidden", "..", ""])
def test_a_scenario_name_cannot_place_output_outside_runs(name):
    data = read_yaml(QUICKSTART)
    data["name"] = name
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, "s.yaml")
    assert info.value.lines()[0].startswith("s.yaml: name: must be a plain name")


# ---------------------------------------------------------------- 3. no inf or NaN


@pytest.mark.parametrize(("override", "where"), [
    ("workload.agent.tool_mix.env=.nan", "workload.agent.tool_mix.env"),
    ("environments.tools.env.latency.median=.inf", "environments.tools.env.latency.median"),
    ("environments.tools.env.backoff_s=[1, .nan]", "environments.tools.env.backoff_s[1]"),
    ("cluster.pools.gen.profile_overrides={decode_eta_mem: .nan}",
     "cluster.pools.gen.profile_overrides.decode_eta_mem"),
    ("schedule.max_head_offpolicyness=.inf", "schedule.max_head_offpolicyness"),
])
def test_every_float_is_finite(override, where):
    lines = refused(TOOL_BASE, [override])
    assert any(line.startswith(f"{TOOL_BASE}: {where}: must be a finite number") for line in lines), lines


def test_hardware_profiles_are_finite(tmp_path):
    text = (ROOT / "hardware_profiles" / "h100-sxm.yaml").read_text()
    bad = tmp_path / "nan.yaml"
    bad.write_text(text.replace("hbm_tb_per_s:", "hbm_tb_per_s: .nan #", 1))
    with pytest.raises(ValueError, match="finite"):
        load_profile_file(bad)
    res = cli("validate", str(QUICKSTART), "--set", f"cluster.pools.gen.hardware={bad}")
    assert res.exit_code == 2 and "cluster.pools.gen.hardware: invalid hardware profile" in res.output


def test_no_weight_sync_is_zero_seconds_not_nan():
    scn = load_scenario(SCENARIOS / "async" / "areal-1.5b-h800.yaml",
                        ["schedule.trigger_parameter_sync_step=2", "steps=2", "algorithm.prompts_per_step=16"])
    with alarm(30):
        steps = simulate(scn).steps
    sync = steps["timing_s/sync_rollout_weights"]
    assert not sync.isna().any() and (sync == 0).sum() >= 1 and (sync > 0).sum() >= 1


@pytest.mark.parametrize(("override", "message"), [
    ("cluster.pools.gen.nodes=100000", "cluster.pools.gen.nodes: must be <= 4096, got 100000"),
    ("algorithm.epochs=1000000000", "algorithm.epochs: must be <= 64, got 1000000000"),
    ("steps=1000000000", "steps: must be <= 100000, got 1000000000"),
    ("schedule.switch_overhead_s=1e18", "schedule.switch_overhead_s: must be <= 86400, got 1e+18"),
    ("algorithm.judge_output_tokens=1000000000000000000", "algorithm.judge_output_tokens: must be <= 10000000"),
])
def test_sizes_beyond_sane_bounds_are_refused_with_the_bound(override, message):
    lines = refused(QUICKSTART, [override])
    assert any(f"{QUICKSTART}: {message}" in line for line in lines), lines


# ---------------------------------------------------------------- 4. hostile files


def _bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


HOSTILE_TEXTS = {
    "alias bomb": (_bomb(), "expands to more than 100,000 values (aliases included)"),
    "self-reference": ("a: &a [1, *a]\n", "alias *a at line 1 refers to a node that contains it"),
    "deep nesting": ("[" * 50_000 + "]" * 50_000, "nested more than 64 levels deep (line 1)"),
    "huge integer": ("seed: " + "9" * 10_000 + "\n", "integer at line 1 is too large (10000 digits, at most 19)"),
    "int64 overflow": ("seed: 9223372036854775808\n", "integer at line 1 is too large (|value| must be < 2^63)"),
    "50 MB": ("a: 1\n" * 10_000_000, "file is 50,000,000 bytes, more than the limit of 1,000,000"),
}


@pytest.mark.parametrize("case", list(HOSTILE_TEXTS))
def test_hostile_yaml_is_refused_quickly_with_one_line(tmp_path, case):
    text, message = HOSTILE_TEXTS[case]
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    start = time.perf_counter()
    with alarm(10):
        res = cli("validate", str(path))
    assert time.perf_counter() - start < 5
    assert res.exit_code == 2 and res.output.strip().splitlines() == [f"{path}: {message}"]


def test_dev_zero_and_a_fifo_are_refused_without_reading(tmp_path):
    fifo = tmp_path / "scenario.yaml"
    os.mkfifo(fifo)  # no writer: reading it would block forever
    for path in (Path("/dev/zero"), fifo):
        with alarm(10):
            res = cli("validate", str(path))
        assert res.exit_code == 2
        assert res.output.strip() == f"{path}: not a regular file (a FIFO, device or socket), expected a YAML file"


def test_hostile_override_values_are_refused_too():
    res = cli("validate", str(QUICKSTART), "--set", "seed=" + "9" * 5000)
    assert res.exit_code == 2 and "--set seed=" in res.output and "integer at line 1 is too large" in res.output


def test_aliases_and_merge_keys_still_work(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text("base: &b {a: 1}\nmerged: {<<: *b, c: 2}\nagain: *b\n")
    assert read_yaml(path) == {"base": {"a": 1}, "merged": {"a": 1, "c": 2}, "again": {"a": 1}}


# ---------------------------------------------------------------- 5. sweep store


def _plan(*grid: str):
    from rlsim.tools.sweep import plan_sweep

    return plan_sweep(QUICKSTART, grid=list(grid) or ["algorithm.samples_per_prompt=2,4"],
                      sets=["algorithm.prompts_per_step=8", "steps=1"])


def test_damaged_records_are_recomputed_not_fatal(tmp_path):
    from rlsim.tools.sweep import run_sweep

    plan = _plan()
    first = run_sweep(plan, tmp_path, backend="serial")
    assert first.ran == 2
    a, b = (p.point_id for p in plan.points)
    good = json.loads((tmp_path / "points" / f"{a}.json").read_text())
    wrong = copy.deepcopy(good)
    wrong["summary"] = "not a mapping"
    (tmp_path / "points" / f"{a}.json").write_text(json.dumps(wrong))
    (tmp_path / "points" / f"{b}.json").unlink()
    (tmp_path / "points" / f"{b}.json").mkdir()  # a folder where the record should be
    (tmp_path / "points" / f"{b}.json" / "junk").write_text("x")
    again = run_sweep(plan, tmp_path, backend="serial")
    assert (again.skipped, again.ran, again.failed) == (0, 2, 0)
    assert json.loads((tmp_path / "points" / f"{a}.json").read_text())["summary"] == good["summary"]
    assert (tmp_path / "points" / f"{b}.json").is_file()


def test_two_different_sweeps_cannot_share_a_folder(tmp_path):
    from rlsim.tools.sweep import SweepError, run_sweep

    run_sweep(_plan(), tmp_path, backend="serial")
    grown = run_sweep(_plan("algorithm.samples_per_prompt=2,4,8"), tmp_path, backend="serial")  # same sweep, grown
    assert (grown.skipped, grown.ran) == (2, 1)
    with pytest.raises(SweepError) as info:
        run_sweep(_plan("roles.rollout.parallel.tp=1,2"), tmp_path, backend="serial")
    assert info.value.lines() == [f"{tmp_path}: holds a different sweep (other swept keys: {QUICKSTART}); "
                                  "give another --out or remove the folder"]
    res = cli("sweep", str(QUICKSTART), "--grid", "roles.rollout.parallel.tp=1,2", "--set",
              "algorithm.prompts_per_step=8", "--set", "steps=1", "--out", str(tmp_path), "--no-progress")
    assert res.exit_code == 2 and "holds a different sweep" in res.output


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is dead, only not yet reaped
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_killing_the_driver_stops_its_workers(tmp_path):
    cmd = [sys.executable, "-m", "rlsim.tools.cli", "sweep", str(QUICKSTART), "--grid",
           "algorithm.samples_per_prompt=4,6,8,10", "--seeds", "10", "--set", "algorithm.prompts_per_step=64",
           "--backend", "local", "--workers", "2", "--out", str(tmp_path), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    deadline = time.monotonic() + 120
    workers: set[int] = set()
    while time.monotonic() < deadline and not workers:
        for record in (tmp_path / "points").glob("*.json") if (tmp_path / "points").is_dir() else []:
            workers.add(json.loads(record.read_text())["pid"])
        time.sleep(0.05)
    assert workers and proc.poll() is None, "the sweep stored no point in time"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers)


def _raise_scenario_error(kind: str) -> None:
    """Run in a pool worker: raise one of the one-line-per-problem errors."""
    from rlsim.sim.scenario.errors import Problem
    from rlsim.tools.importers.common import ImportProblem
    from rlsim.tools.sweep.errors import SweepError

    if kind == "scenario":
        raise ScenarioError("point.yaml", [Problem("cluster.pools.gen.nodes", "must be >= 1"), Problem("", "x")])
    if kind == "sweep":
        raise SweepError(["sweep.yaml: grid.steps: empty", "sweep.yaml: backend: unknown"])
    raise ImportProblem("ppo.yaml", "actor_rollout_ref.rollout.n", "must be >= 1")


@pytest.mark.parametrize("kind", ["scenario", "sweep", "import"])
def test_scenario_errors_cross_a_process_pool_intact(kind):
    """A worker's error comes back as itself, with its lines (it once came back as BrokenProcessPool,
    or with its message split into characters): errors pickle by state, not through __init__."""
    from concurrent.futures import ProcessPoolExecutor

    with pytest.raises(ScenarioError) as local:
        _raise_scenario_error(kind)
    with ProcessPoolExecutor(max_workers=1) as pool, pytest.raises(ScenarioError) as remote:
        pool.submit(_raise_scenario_error, kind).result(timeout=60)
    assert type(remote.value) is type(local.value)
    assert remote.value.lines() == local.value.lines() and str(remote.value) == str(local.value)
