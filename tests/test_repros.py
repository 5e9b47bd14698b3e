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
    # verl V1 separate_async generates on its own GPUs while the trainer trains (its spec says so): the same refusal
    # (was an OverbookedPool internal error)
    refused_in_one_line("run", "async/verl-v1-separate-async-lending", "--set",
                        "roles.reference={pool: gen, model: qwen}", "--set", "steps=1",
                        must="roles.reference.pool: verl-v1 generates while it trains")


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


# ---------------------------------------------------------------- 16: agents on engines that sleep


def pool_peaks(timeline: pd.DataFrame) -> dict[str, int]:
    """The most GPUs of each pool busy at one instant (a row ending where another starts does not overlap it)."""
    peaks = {}
    for pool, rows in timeline.groupby("pool"):
        rows = list(rows.itertuples())
        edges = sorted([(r.end_s, -r.gpus) for r in rows] + [(r.start_s, r.gpus) for r in rows])
        busy = peak = 0
        for _, delta in edges:
            busy += delta
            peak = max(peak, busy)
        peaks[pool] = peak
    return peaks


@pytest.mark.parametrize("mode", ["separate_async", "colocate_async"])
def test_16_an_agent_turn_back_from_a_tool_never_goes_to_a_sleeping_engine(tmp_path, mode):
    """verl V1 lending / colocate_async with a multi-turn agent: the lent engines sleep while the trainer trains,
    and a trajectory whose tool call returns then goes to an awake engine or waits for one; it once went to its
    sleeping engine, which generated on the trainer's GPUs (OverbookedPool)."""
    sets = [] if mode == "separate_async" else ["--set", "schedule.trainer_mode=colocate_async", "--set",
                                                "roles.rollout.pool=train", "--set",
                                                "schedule.hybrid_rollout.enable_switch=false"]
    out = tmp_path / "out"
    rlsim("run", REPROS / "16-verl-v1-lending-agent-double-books-gpus.yaml", *sets, "--no-plots", "--out", out, "-q",
          codes=(0,))
    timeline = pd.read_csv(out / "timeline.csv")
    peaks = pool_peaks(timeline)
    sizes = {"train": 4, "gen": 2}
    assert all(peaks[pool] <= sizes[pool] for pool in peaks), peaks
    assert peaks["train"] == 4  # the trainer's GPUs did generate (lent), and trained
    trajectories = pd.read_csv(out / "trajectories.csv")
    assert (trajectories["outcome"] == "completed").sum() >= 2 * 4 * 2  # two steps of 4 prompts x 2 samples
    summary = json.loads((out / "summary.json").read_text())
    assert all(0 <= v <= 1 for v in summary["idle_fraction_by_pool"].values())
    finite_files(out)


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


# ---------------------------------------------------------------- 17, 18: tail re-sharding

TAIL_SMALL = ("--set", "steps=1", "--set", "warmup_steps=0", "--set", "algorithm.prompts_per_step=16", "--no-plots")


def test_17_tail_resharding_on_a_gpu_without_nvlink_moves_the_kv_over_pcie(tmp_path):
    from rlsim.sim.engine.environment import SimEnvironment
    from rlsim.sim.engine.request import Request
    from rlsim.sim.schedules import build_schedule

    rlsim("run", "sync/tail-reshard", "--set", "cluster.pools.main.hardware=l40s", *TAIL_SMALL,
          "--out", tmp_path / "o", "-q", codes=(0,))
    finite_files(tmp_path / "o")
    for gpu, link in (("l40s", "pcie_gb_per_s"), ("h100-sxm", "nvlink_gb_per_s")):
        scn = load_scenario(ROOT / "scenarios" / "sync" / "tail-reshard.yaml", [f"cluster.pools.main.hardware={gpu}"])
        tail = build_schedule(scn, SimEnvironment(scn.seed)).tail
        assert (tail.hw.nvlink_gb_per_s == 0) == (gpu == "l40s")
        kv = 1000 * tail.model.kv_bytes_per_token / len(tail.wide)  # one running sequence of 1,000 tokens
        move = tail.move_cost([Request(0, 1000, 10)]) - tail.spec.restart_s
        assert move == pytest.approx(kv / (getattr(tail.hw, link) * 1e9)), gpu


def test_18_tail_resharding_is_checked_on_the_resolved_placement(tmp_path):
    split = ("run", "quickstart", *TAIL_SMALL, "--set", "schedule.tail_reshard={}", "--set", "schedule.placement=split")
    refused_in_one_line(*split, "--set", "roles.rollout.parallel.tp=4", "--out", tmp_path / "refused",
                        must="schedule.tail_reshard.factor: with placement 'split': no wide engine can be formed: "
                        "the rollout has 1 engine(s) of TP 4, fewer than the factor 2")
    assert not (tmp_path / "refused").exists()
    rlsim(*split, "--set", "roles.rollout.parallel.tp=2", "--out", tmp_path / "o", "-q", codes=(0,))  # 2 -> 1 wide
    finite_files(tmp_path / "o")


# ---------------------------------------------------------------- 19, 20, 24, 25: calibrate ops and its readers

OPS = ROOT / "hardware_profiles" / "operators"


def _ops_folder(tmp_path: Path, source: str, *parts: str) -> Path:
    """A copy of some of a shipped operator-profile folder's subfolders."""
    import shutil

    root = tmp_path / source
    for part in parts:
        shutil.copytree(OPS / source / part, root / part)
    return root


def _keep_rows(path: Path, keep) -> None:
    """Rewrite a CSV keeping its header and the rows (dicts) for which `keep` is true."""
    import csv

    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        header, rows = reader.fieldnames, [r for r in reader if keep(r)]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, header)
        writer.writeheader()
        writer.writerows(rows)


def _set_cell(path: Path, line: int, column: str, value: str) -> None:
    rows = path.read_text().splitlines()
    header = rows[0].split(",")
    cells = rows[line - 1].split(",")
    cells[header.index(column)] = value
    rows[line - 1] = ",".join(cells)
    path.write_text("\n".join(rows) + "\n")


def ops_report(root: Path, gpu: str) -> str:
    res = rlsim("calibrate", "ops", root, "--gpu", gpu, codes=(0,))
    assert "nan%" not in res.stdout and "nan " not in res.stdout, res.stdout
    return res.stdout


@pytest.mark.slow
def test_19_moe_rows_without_ep8_tp8_or_any_row_skip_those_fits_with_a_line_naming_them(tmp_path):
    root = _ops_folder(tmp_path, "frontier", "compute/a800/qwen3-a3b-30b-moe")
    moe = root / "compute/a800/qwen3-a3b-30b-moe/moe.csv"
    _keep_rows(moe, lambda r: r["expert_parallel_size"] != "8")  # a GPU profiled at EP 1/2/4
    text = ops_report(root, "a800")
    assert f"ep8 held out: skipped: {moe}: no expert_parallel_size 8 rows measured at >= 10 us" in text
    assert "tp8 held out: t0" in text and "profile values: moe_routing_per_token_us" in text
    _keep_rows(moe, lambda r: False)  # header only: an interrupted profiler
    text = ops_report(root, "a800")
    assert "tp8 held out: skipped" in text and "gating + top-k + shuffle: skipped" in text
    assert "moe_gemm_eta_mem" not in text


@pytest.mark.slow
def test_19_dense_files_without_mlp_gemm_rows_fit_the_rest_and_say_what_is_skipped(tmp_path):
    root = _ops_folder(tmp_path, "frontier", "compute/a800/qwen3-a3b-30b-moe")
    (root / "compute/a800/qwen3-a3b-30b-moe/moe.csv").unlink()
    _keep_rows(root / "compute/a800/qwen3-a3b-30b-moe/linear_op.csv",
               lambda r: r["num_tensor_parallel_workers"] != "8")
    text = ops_report(root, "a800")
    assert "note: decode_eta_mem skipped: no mlp_up_proj / mlp_down_proj rows" in text
    assert "hardware profile values: decode_eta_compute" in text


@pytest.mark.slow
def test_20_a_nan_measurement_or_a_zero_shape_is_left_out_and_counted(tmp_path):
    root = _ops_folder(tmp_path, "vidur", "compute/h100/microsoft/phi-2", "network/h100_dgx")
    mlp, allreduce = root / "compute/h100/microsoft/phi-2/mlp.csv", root / "network/h100_dgx/all_reduce.csv"
    _set_cell(mlp, 6, "time_stats.emb.median", "nan")
    _set_cell(mlp, 7, "n_head", "0")
    _set_cell(mlp, 8, "n_embd", "inf")
    _set_cell(allreduce, 6, allreduce.read_text().split(",")[0], "nan")
    text = ops_report(root, "h100")
    assert (f"note: {mlp}: left out 3 row(s) holding nan, inf or a number out of range or a zero shape "
            "(line 6, 7, 8)") in text
    assert f"note: {allreduce}: left out 1 row(s) holding nan, inf or a number out of range (line 6)" in text


def test_24_without_held_out_models_the_report_says_none_instead_of_nan_percent():
    text = ops_report(OPS / "frontier", "h800")
    assert text.splitlines()[1].startswith("  held-out models: none (no rows held out")


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "too-large"])
def test_25_every_calibrate_reader_is_bounded_and_regular_file_only(tmp_path, kind):
    root = _ops_folder(tmp_path, "vidur", "compute/h100/microsoft/phi-2")
    mlp = root / "compute/h100/microsoft/phi-2/mlp.csv"
    mlp.unlink()
    measurements = tmp_path / "m.csv"
    if kind == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        os.mkfifo(mlp)
        os.mkfifo(measurements)
        must = "not a regular file"
    elif kind == "/dev/zero":
        if not Path(kind).exists():
            pytest.skip("no /dev/zero here")
        mlp.symlink_to(kind)
        measurements.symlink_to(kind)
        must = "not a regular file"
    else:  # sparse files: their size is refused from the metadata, nothing is read
        for path, size in ((mlp, 17_000_000), (measurements, 2_000_000)):
            with path.open("wb") as fh:
                fh.truncate(size)
        must = "more than the limit"
    start = time.monotonic()
    line = refused_in_one_line("calibrate", "ops", root, "--gpu", "h100", must=must)
    assert line.startswith(f"calibrate ops: {mlp}: ")
    line = refused_in_one_line("calibrate", measurements, "--profile", "h100-sxm", must=must)
    assert line.startswith(str(measurements))
    assert time.monotonic() - start < 10


# ---------------------------------------------------------------- 21, 27: staleness bounds


def test_21_an_age_bound_below_the_sync_interval_is_refused_naming_both_knobs(tmp_path):
    common = ("run", "async/inflight-updates", "--set", "steps=4", "--set", "algorithm.prompts_per_step=16",
              "--no-plots", "--out", tmp_path / "o")
    line = refused_in_one_line(*common, "--set", "schedule.max_trajectory_age_steps=1",
                               "--set", "schedule.trigger_parameter_sync_step=3",
                               must="schedule.max_trajectory_age_steps: 1 (trainer steps) is below "
                               "trigger_parameter_sync_step - 1 = 2")
    assert "set max_trajectory_age_steps >= 2 or trigger_parameter_sync_step <= 2" in line
    refused_in_one_line(*common, "--set", "schedule.max_trajectory_age_steps=0",
                        "--set", "schedule.trigger_parameter_sync_step=2", must="max_trajectory_age_steps")
    rlsim(*common, "--set", "schedule.max_trajectory_age_steps=2", "--set", "schedule.trigger_parameter_sync_step=3",
          "-q", codes=(0,))
    finite_files(tmp_path / "o")


def test_21_areal_s_drop_at_eta_0_with_a_push_every_2_steps_counts_versions_and_finishes(tmp_path):
    """eta counts weight versions: the last push's samples are 0 versions old, so the run goes on (it used to compare
    eta with trainer steps, drop every sample at the step before a push and stall)."""
    rlsim("run", "async/areal-1.5b-h800", "--set", "steps=4", "--set", "algorithm.prompts_per_step=16",
          "--set", "schedule.max_head_offpolicyness=0", "--set", "schedule.drop_stale=true",
          "--set", "schedule.trigger_parameter_sync_step=2", "--no-plots", "--out", tmp_path / "o", "-q", codes=(0,))
    finite_files(tmp_path / "o")


def test_27_verl_v1_max_off_policy_threshold_stops_at_16_as_its_areal_twin(tmp_path):
    start = time.monotonic()
    refused_in_one_line("run", "async/verl-v1-separate-async-lending", "--set", "steps=1", "--set", "warmup_steps=0",
                        "--set", "algorithm.prompts_per_step=4", "--set", "algorithm.samples_per_prompt=2",
                        "--set", "algorithm.mini_batches=2", "--set", "schedule.max_off_policy_threshold=1e6",
                        "--no-plots", "--out", tmp_path / "o", must="schedule.max_off_policy_threshold: must be <= 16")
    assert time.monotonic() - start < 10


# ---------------------------------------------------------------- 23: Ray, what answers at the address


class _Listener:
    """A loopback TCP server for one test: 'http' answers like an HTTP/1 server, 'h2' with an HTTP/2 SETTINGS
    frame as a gRPC server (a Ray GCS) does, 'silent' accepts and says nothing."""

    def __init__(self, kind: str):
        import socket
        import threading

        self.kind = kind
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):

        self.server.settimeout(10)
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        with conn:
            try:
                conn.settimeout(5)
                conn.recv(1024)
                if self.kind == "http":
                    conn.sendall(b"HTTP/1.0 400 Bad request\r\n\r\n")
                elif self.kind == "h2":
                    conn.sendall(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
                else:
                    time.sleep(3)
            except (TimeoutError, OSError):
                pass

    def close(self):
        self.server.close()


@pytest.mark.parametrize("kind, must", [
    ("http", "an HTTP server answers at 127.0.0.1:"),
    ("silent", "does not speak gRPC as a Ray GCS does"),
])
def test_23_a_port_where_no_ray_gcs_answers_is_refused_in_5_s_naming_what_answered(tmp_path, kind, must):
    pytest.importorskip("ray")
    listener = _Listener(kind)
    try:
        start = time.monotonic()
        line = refused_in_one_line("sweep", ROOT / "scenarios" / "sweeps" / "quickstart-tp-batch.yaml", "--backend",
                                   "ray", "--ray-address", f"127.0.0.1:{listener.port}", "--out", tmp_path / "o",
                                   "--no-progress", must=must)
        assert time.monotonic() - start < 5
        assert "token" not in line
    finally:
        listener.close()


def test_23_a_grpc_answer_passes_the_probe():
    from rlsim.tools.sweep.ray_address import probe

    listener = _Listener("h2")
    try:
        probe(f"127.0.0.1:{listener.port}")  # an HTTP/2 server: left to ray.init (and its token hint)
    finally:
        listener.close()


@pytest.mark.parametrize("address", ["", "  "])
def test_23_an_empty_ray_address_is_refused_not_a_local_cluster(tmp_path, address):
    pytest.importorskip("ray")
    start = time.monotonic()
    refused_in_one_line("sweep", ROOT / "scenarios" / "sweeps" / "quickstart-tp-batch.yaml", "--backend", "ray",
                        "--ray-address", address, "--out", tmp_path / "o", "--no-progress",
                        must="empty (an unset shell variable?): not a Ray address")
    assert time.monotonic() - start < 5 and not (tmp_path / "o").exists()


def test_23_rays_own_lines_while_joining_stay_off_the_terminal(tmp_path):
    """Ray's C++ and Python logging write to file descriptor 2 while ray.init runs: a failed join leaves only
    rlsim's line there (run in a child process, whose real stderr is read)."""
    import subprocess
    import sys

    code = ("import os, sys\n"
            "from rlsim.tools.sweep.errors import SweepError\n"
            "from rlsim.tools.sweep.ray_address import bounded_init\n"
            "def init():\n"
            "    os.write(2, b'gcs_client.cc:210: Failed to get cluster ID from GCS server\\n')\n"
            "    raise ConnectionError('no GCS')\n"
            "try:\n"
            "    bounded_init(init, '127.0.0.1:6391', timeout=5)\n"
            "except SweepError as exc:\n"
            "    print(exc.lines()[0], file=sys.stderr)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert lines == ["--ray-address 127.0.0.1:6391: cannot join the Ray cluster: no GCS"], run.stderr


# ---------------------------------------------------------------- 22, 26: plan --target


def test_22_a_sizing_label_names_the_training_config_that_was_simulated(tmp_path):
    res = rlsim("plan", "quickstart", "--set", "steps=1", "--set", "algorithm.prompts_per_step=16", "--backend",
                "serial", "-q", "--target", "tokens_per_s=2000", "--gpu", "h100-sxm:16", "--out", tmp_path / "p",
                codes=(0,))
    plan = pd.read_csv(tmp_path / "p" / "plan.csv")
    answer = plan[plan["rank"] == 1].iloc[0]
    assert answer["gpus"] == 2 and "tp2-pp1-optimizer" in answer["label"], answer["label"]
    assert "tp8" not in answer["label"] and "tp8" not in res.stdout


def test_22_a_training_config_capped_to_one_already_tried_is_not_tried_again():
    from rlsim.sim.api import read_yaml
    from rlsim.sim.paths import shipped_dir
    from rlsim.tools.plan.candidates import enumerate_candidates
    from rlsim.tools.plan.sizing import default_space, space_at

    base = read_yaml(shipped_dir("scenarios") / "quickstart.yaml")
    cands = enumerate_candidates(base, space_at(default_space(), "h100-sxm", 2))
    seen = [(c.knobs["layout"], c.knobs["schedule"], c.knobs["schedule_set"], c.knobs["gen_tp"], c.knobs["train"])
            for c in cands if c.knobs["layout"] == "colocate"]
    assert seen and len(seen) == len(set(seen)), seen  # tp2, tp4 -> 2, tp8 -> 2 used to be three candidates
    assert all(int(c.knobs["train"].split("-")[0][2:]) <= 2 for c in cands if c.knobs["train"] != "scenario")


@pytest.mark.parametrize("target, must", [
    ("tokens_per_s=1e12", "--target: tokens_per_s: must be <= 1e+09"),
    ("steps=1e12,deadline_h=1", "--target: steps: must be <= 1e+09"),
    ("step_time_s=1e308", "--target: step_time_s: must be <= 1e+09"),
    ("tokens_per_s=5e-324", "--target: tokens_per_s: must be >= 1e-12"),
    ("step_time_s=1e-323", "--target: step_time_s: must be >= 3.6e-09"),
    ("steps=1,deadline_h=5e-324", "--target: deadline_h: must be >= 1e-12"),
])
def test_26_a_target_out_of_range_is_one_line(tmp_path, target, must):
    refused_in_one_line("plan", "quickstart", "--set", "steps=1", "--backend", "serial", "-q", "--target", target,
                        "--gpu", "h100-sxm:16", "--out", tmp_path / "p", must=must)


@pytest.mark.parametrize("gpu", ["h100-sxm:99999999999999999999", "h100-sxm:1e20"])
def test_26_a_gpu_count_out_of_range_is_one_line(tmp_path, gpu):
    refused_in_one_line("plan", "quickstart", "--backend", "serial", "-q", "--target", "tokens_per_s=2000",
                        "--gpu", gpu, "--out", tmp_path / "p", must=f"--gpu {gpu}: MAX must be")


def test_26_an_ordinary_throughput_target_reaches_the_search():
    """100,000 tokens/s was over the 86,400 cap of a duration: a rate is not a number of seconds."""
    from rlsim.tools.plan.sizing import parse_target

    assert parse_target("tokens_per_s=100000").constraints().min_throughput_tokens_per_s == 100_000


def test_every_reproducer_is_covered_here():
    """A reproducer added to tests/repros/ without its replay here fails this test."""
    here = Path(__file__).read_text()
    numbers = {p.name[:2] for p in REPROS.iterdir() if p.name[:2].isdigit()}
    assert numbers and all(f"test_{n}" in here for n in numbers), sorted(n for n in numbers if f"test_{n}" not in here)
