"""The fuzzing campaign's reproducers (tests/repros/, one file per defect; README there), replayed.

Each command of a reproducer runs here as its `rlsim` equivalent and must end within a minute with
exit 0 or 2, no traceback, one line per problem, finite outputs and no pool busier than its size.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from rlsim.sim.hardware import profiles_dir
from rlsim.sim.results.ledger import GpuLedger, OverbookedPool
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.scenario.schema.lengths import _cap_threshold
from rlsim.sim.simulate import simulate
from rlsim.tools.cli import app

REPROS = Path(__file__).parent / "repros"
ROOT = Path(__file__).parent.parent
LOGS = Path(__file__).parent / "fixtures" / "logs"
LIMIT_S = 60.0
runner = CliRunner()


def rlsim(*args: str, codes=(0, 2)):
    """Run `rlsim ARGS` in-process: exit code in `codes`, no traceback, under a minute; the result."""
    start = time.monotonic()
    res = runner.invoke(app, [str(a) for a in args])
    elapsed = time.monotonic() - start
    text = res.stdout + res.stderr
    assert res.exit_code in codes, (res.exit_code, text[-2000:], repr(res.exception))
    assert "Traceback" not in text and not (res.exception and not isinstance(res.exception, SystemExit)), text
    assert elapsed < LIMIT_S, f"{args}: {elapsed:.0f} s"
    return res


def problem_lines(res) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.strip()]


def refused_in_one_line(*args: str, must: str = "") -> str:
    res = rlsim(*args, codes=(2,))
    lines = problem_lines(res)
    assert len(lines) == 1, lines
    assert must in lines[0], lines[0]
    assert "pydantic" not in lines[0] and "http" not in lines[0].split("--ray-address")[-1].replace("http://", "")
    return lines[0]


def finite_files(folder: Path) -> None:
    """Every number in the JSON and CSV files of a results folder is finite; no pool busier than its size."""
    def refuse(constant: str):
        raise AssertionError(f"{constant} in a JSON output of {folder}")

    for path in folder.rglob("*.json"):
        json.loads(path.read_text(), parse_constant=refuse)
    for path in folder.rglob("*.csv"):
        numbers = pd.read_csv(path).select_dtypes("number")
        assert numbers.map(lambda v: math.isfinite(v) or v != v).all().all(), path  # NaN: an empty cell
        assert not numbers.isin([math.inf, -math.inf]).any().any(), path


# ---------------------------------------------------------------- 01: a pool booked twice


def test_01_reference_on_the_rollout_pool_of_an_async_schedule_is_refused():
    line = refused_in_one_line("validate", REPROS / "01-reference-on-rollout-pool-double-books-gpus.yaml",
                               must="roles.reference.pool: one-step-off generates while it trains")
    assert "'train'" in line
    refused_in_one_line("run", "roll/rlvr-qwen2.5-7b-async", "--set", "roles.reference.pool=gen", "--set", "steps=1",
                        must="roles.reference.pool: roll generates while it trains")


def test_01_moved_to_the_training_pool_it_runs_and_no_pool_is_busier_than_its_size(tmp_path):
    res = rlsim("run", REPROS / "01-reference-on-rollout-pool-double-books-gpus.yaml", "--set",
                "roles.reference.pool=train", "--out", tmp_path / "out", "-q", codes=(0,))
    assert res.exit_code == 0
    timeline = pd.read_csv(tmp_path / "out" / "timeline.csv")
    sizes = {"train": 12, "gen": 4}
    for pool, rows in timeline.groupby("pool"):
        edges = sorted([(r.end_s, -r.gpus) for r in rows.itertuples()] + [(r.start_s, r.gpus)
                                                                            for r in rows.itertuples()])
        busy = peak = 0
        for _, delta in edges:
            busy += delta
            peak = max(peak, busy)
        assert peak <= sizes[pool], (pool, peak)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert all(0 <= v <= 1 for v in summary["idle_fraction_by_pool"].values())
    finite_files(tmp_path / "out")


def test_the_ledger_refuses_any_double_booking_by_construction():
    ledger = GpuLedger()
    ledger.add_pool("gen", 4)
    ledger.add_group("e0", "gen", 2)
    ledger.add_group("e1", "gen", 2)
    ledger.add_group("ref", "gen", 4)
    ledger.record("e0", "rollout", "generate", 0.0, 10.0, 0, 0)
    ledger.record("e1", "rollout", "generate", 0.0, 10.0, 0, 0)
    ledger.record("ref", "reference", "ref", 10.0, 12.0, 0, 0)  # hands over exactly at t=10: fine
    assert len(ledger.to_frame()) == 3
    ledger.record("ref", "reference", "ref", 5.0, 6.0, 0, 0)  # while both engines generate: 8 GPUs of 4
    with pytest.raises(OverbookedPool, match="pool 'gen' has 8 GPUs busy at t=5 s but holds 4"):
        ledger.to_frame()


# ---------------------------------------------------------------- 02, 03, 06, 14: calibrate --from-log


def test_02_calibrate_out_into_a_missing_folder_creates_it_first(tmp_path):
    out = tmp_path / "no-such-folder" / "cal.yaml"
    rlsim("calibrate", "--from-log", LOGS / "verl-metrics.jsonl", "--scenario", "quickstart", "--sim-steps", "1",
          "--out", out, codes=(0,))
    assert "calibration" in yaml.safe_load(out.read_text())


def test_02_calibrate_out_that_is_a_folder_is_refused_before_the_fit(tmp_path):
    refused_in_one_line("calibrate", "--from-log", LOGS / "verl-metrics.jsonl", "--scenario", "quickstart",
                        "--out", tmp_path, must="is a folder")


def test_03_a_ragged_log_row_is_skipped_with_a_count_and_a_warning():
    res = rlsim("calibrate", "--from-log", REPROS / "03-log-ragged-row.csv", "--scenario", "quickstart",
                "--sim-steps", "1", codes=(0,))
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "skipped 1 row(s)" in warnings[0] and "line 3" in warnings[0]


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo"])
def test_06_a_device_or_fifo_as_the_log_is_refused_at_once(tmp_path, kind):
    if kind == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        path = tmp_path / "log.fifo"
        os.mkfifo(path)
    else:
        path = Path(kind)
        if not path.exists():
            pytest.skip("no /dev/zero here")
    start = time.monotonic()
    refused_in_one_line("calibrate", "--from-log", path, "--scenario", "quickstart", must="not a regular file")
    assert time.monotonic() - start < 10


def test_14_a_log_field_over_128_kib_is_one_line(tmp_path):
    log = tmp_path / "big.csv"
    log.write_text("step,time/step_total,time/step_generate\n0,412.5,301.2\n1,405.0," + "x" * 200_000 + "\n")
    refused_in_one_line("calibrate", "--from-log", log, "--scenario", "quickstart", must="line 3")


def test_a_nul_byte_in_a_log_is_one_line(tmp_path):
    log = tmp_path / "nul.csv"
    log.write_bytes(b"step,time/step_total\n0,41\x002.5\n")
    refused_in_one_line("calibrate", "--from-log", log, "--scenario", "quickstart", must="line 2: a NUL byte")


# ---------------------------------------------------------------- 04, 05, 13: plan spaces and importers


def test_04_a_plan_space_naming_an_unknown_gpu_lists_the_known_profiles(tmp_path):
    refused_in_one_line("plan", "async/verl-dapo-7b-h20-one-step-off", "--space",
                        REPROS / "04-plan-space-unknown-hardware.yaml", "--backend", "serial", "--out", tmp_path / "o",
                        must="mixes[0].generation.hardware: unknown hardware profile 'h20x': did you mean h20? "
                        "(known: a100-80gb")
    assert not (tmp_path / "o").exists()


def test_05a_roll_defaults_that_are_not_a_list_is_one_line():
    refused_in_one_line("import", "roll", REPROS / "05a-import-roll-defaults-true.yaml",
                        must="defaults: expected a list of config names (Hydra's defaults list), got true")


def test_05b_roll_custom_envs_that_is_not_a_mapping_is_named():
    res = rlsim("import", "roll", REPROS / "05b-import-roll-custom-envs-scalar.yaml", codes=(2,))
    lines = problem_lines(res)
    assert any("custom_envs: expected a mapping of environment name -> settings, got 1.5" in ln for ln in lines)


def test_13_a_misspelt_verl_key_is_unknown_with_a_guess_and_tp_is_listed_as_assumed(tmp_path):
    out = tmp_path / "s.yaml"
    res = rlsim("import", "verl", REPROS / "13-import-verl-typo-key-silently-ignored.yaml", "--out", out, codes=(0,))
    assert ("unknown key actor_rollout_ref.rollout.tensor_model_paralel_size: did you mean "
            "actor_rollout_ref.rollout.tensor_model_parallel_size?") in res.stdout
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size (absent) -> roles.rollout.parallel.tp: 1" in res.stdout
    ignored = res.stdout.split("ignored (")[1].split("unknown (")[0]
    assert "tensor_model_paralel_size" not in ignored


# ---------------------------------------------------------------- 07-12: scenario files


def test_07_a_nul_byte_in_yaml_is_one_line():
    refused_in_one_line("validate", REPROS / "07-nul-byte.yaml",
                        must="invalid YAML at line 3: character #x0000 is not allowed")


def test_08_calibration_block_problems_are_worded_like_every_field():
    res = rlsim("validate", REPROS / "08-calibration-block-raw-pydantic-messages.yaml", codes=(2,))
    lines = problem_lines(res)
    assert len(lines) == 3, lines
    text = "\n".join(lines)
    assert "calibration.factors.train_mfux: unknown key" in text and "did you mean train_mfu?" in text
    assert "calibration.response_length.sigma: must be <= 10, got 10.5" in text
    assert "calibration.band_pct: must be >= 0, got -1" in text
    assert "Input should" not in text and "[key]" not in text


def test_09_a_bad_hardware_profile_is_worded_like_every_field(tmp_path):
    text = (profiles_dir() / "h100-sxm.yaml").read_text()
    bad = tmp_path / "bad-h100.yaml"
    bad.write_text("\n".join("bf16_tflops: .inf" if ln.startswith("bf16_tflops:") else ln for ln in text.splitlines()))
    scenario = tmp_path / "s.yaml"
    scenario.write_text((REPROS / "09-bad-hardware-profile.yaml").read_text().replace("bad-h100.yaml", str(bad)))
    line = refused_in_one_line("validate", scenario, must="bf16_tflops: must be a finite number, got inf")
    assert "errors.pydantic.dev" not in line and "validation error" not in line


@pytest.mark.parametrize("override, where", [
    (None, "cluster.pools.gen.nic_gbit_per_s: must be >= 0.1, got 5e-324"),
    ("schedule.weight_sync.bucket_mb=5.0e-324", "schedule.weight_sync.bucket_mb: must be >= 0.001"),
    ("models.qwen.kv_bytes=5.0e-324", "models.qwen.kv_bytes: must be >= 0.125"),
    ("cluster.pools.train.profile_overrides={train_mfu: 1.0e-300}", "profile_overrides.train_mfu: 1e-300 is too small"),
    ("algorithm.rule_reward_s_per_sample=5.0e-324", "algorithm.rule_reward_s_per_sample: 4.94066e-324 is too small"),
])
def test_10_denormals_and_absurd_physical_quantities_are_refused_naming_the_field(tmp_path, override, where):
    sets = [] if override is None else ["--set", "cluster.pools.gen.nic_gbit_per_s=null", "--set", override]
    refused_in_one_line("run", REPROS / "10-denormal-nic-bandwidth-inf-nan.yaml", *sets, "--out", tmp_path / "o",
                        must=where)


def test_10_a_result_that_would_not_be_finite_is_refused_before_anything_is_written():
    """Past validation (a scenario built in Python skips it), the run itself refuses a non-finite result."""
    scn = load_scenario(REPROS / "10-denormal-nic-bandwidth-inf-nan.yaml",
                        ["cluster.pools.gen.nic_gbit_per_s=null"])
    pools = dict(scn.cluster.pools)
    pools["gen"] = pools["gen"].model_copy(update={"nic_gbit_per_s": 5e-324})  # unvalidated
    broken = scn.model_copy(update={"cluster": scn.cluster.model_copy(update={"pools": pools})})
    with pytest.raises(ScenarioError) as caught:
        simulate(broken)
    assert len(caught.value.lines()) == 1 and "the simulation produced" in caught.value.lines()[0]


def test_11_a_tiny_truncated_fraction_is_refused_and_the_inverse_cdf_never_crashes(tmp_path):
    refused_in_one_line("run", REPROS / "11-tiny-truncated-fraction.yaml", "--out", tmp_path / "o",
                        must="workload.response_length.truncated_fraction: 1e-17 is too small")
    assert math.isfinite(_cap_threshold(7.0, 7.0, 0.8, 0.0, 1e-17))  # 1 - f rounds to 1.0: handled
    res = rlsim("run", REPROS / "11-tiny-truncated-fraction.yaml", "--set",
                "workload.response_length.truncated_fraction=1.0e-12", "--out", tmp_path / "ok", "-q", codes=(0,))
    assert res.exit_code == 0
    finite_files(tmp_path / "ok")


def test_12_a_nul_byte_in_a_csv_path_is_one_line():
    refused_in_one_line("validate", REPROS / "12-nul-byte-in-csv-path.yaml",
                        must="workload.prompt_length.path: 'lengths.csv\\x00' holds a NUL byte")


# ---------------------------------------------------------------- 15: Ray addresses


@pytest.mark.parametrize("address, must", [
    ("not-an-address", "not a Ray address: expected HOST:PORT"),
    ("http://127.0.0.1:1", "an HTTP URL is the dashboard / job-submission address"),
    ("127.0.0.1:6399", "cannot reach a Ray cluster: nothing listening at 127.0.0.1:6399"),
    ("ray://no-such-host.invalid:10001", "cannot reach a Ray cluster"),
])
def test_15_a_wrong_ray_address_is_one_line_within_30_s(tmp_path, address, must):
    pytest.importorskip("ray")
    start = time.monotonic()
    res = rlsim("sweep", ROOT / "scenarios" / "sweeps" / "quickstart-tp-batch.yaml", "--backend", "ray",
                "--ray-address", address, "--out", tmp_path / "o", "--no-progress", codes=(2,))
    assert time.monotonic() - start < 30
    lines = problem_lines(res)
    assert len(lines) == 1 and must in lines[0], lines


def test_15_token_authentication_is_named_as_the_cause():
    from rlsim.tools.sweep.ray_address import init_error_line

    class AuthenticationError(Exception):
        pass

    line = init_error_line("10.0.0.1:6379", AuthenticationError(
        "Token authentication is enabled but no authentication token was found. Ensure that ..."))
    assert "token authentication" in line and "RAY_AUTH_TOKEN" in line and "\n" not in line


def test_every_reproducer_is_covered_here():
    """A reproducer added to tests/repros/ without its replay here fails this test."""
    here = Path(__file__).read_text()
    numbers = {p.name[:2] for p in REPROS.iterdir() if p.name[:2].isdigit()}
    assert numbers and all(f"test_{n}" in here for n in numbers), sorted(n for n in numbers if f"test_{n}" not in here)
