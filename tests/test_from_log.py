"""`rlsim calibrate --from-log`: reading framework logs, the length-law fit, the overlay, bad logs, and the
calibrate-then-predict workflow on verl's published one-step-off runs (docs/sources.md §6)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlsim.sim.paths import shipped_dir
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.simulate import simulate
from rlsim.tools.calibration.log_fit import _clipped_stats, fit_length_law, simulated_phases
from rlsim.tools.calibration.logs import LogError, read_log
from rlsim.tools.cli import app

LOGS = Path(__file__).parent / "fixtures" / "logs"
ASYNC = shipped_dir("scenarios") / "async"
runner = CliRunner()


# ------------------------------------------------------------------------------------------ reading


def test_verl_console_line_reads_the_published_sync_row():
    run = read_log(LOGS / "verl-dapo-7b-h20-sync-fsdp2.log")
    assert (run.framework, run.syntax, len(run.steps)) == ("verl", "console", 1)
    assert run.phase_means() == {"gen": 321.0, "generate": 247.0, "old_log_prob": 88.0, "update_actor": 286.0,
                                 "step": 749.0}


def test_verl_file_logger_jsonl_with_lengths():
    # Timings of verl issue #1208 (docs/sources.md §9); the clip ratio is illustrative.
    run = read_log(LOGS / "verl-metrics.jsonl", "verl")
    assert run.syntax == "jsonl"
    assert run.phase_means()["ref"] == 3.42 and run.phase_means()["adv"] == 1.17
    assert run.length_stats() == {"length_mean": 325.0, "length_clip_ratio": 0.004, "length_max": 1024.0}


def test_roll_time_metrics_and_areal_timeperf_map_to_phases():
    roll = read_log(LOGS / "roll-rlvr-metrics.csv")  # illustrative numbers in ROLL's key names
    assert roll.framework == "roll" and roll.syntax == "csv"
    assert roll.phase_means()["step"] == pytest.approx((412.5 + 405.0) / 2)
    assert roll.phase_means()["update_actor"] == pytest.approx((44.9 + 44.1) / 2)
    areal = read_log(LOGS / "areal-stats.jsonl", "areal")  # illustrative numbers in AReaL's key names
    assert set(areal.phase_means()) == {"generate", "old_log_prob", "adv", "update_actor", "weight_sync"}


def test_csv_format_means_a_csv_table(tmp_path):
    assert read_log(LOGS / "roll-rlvr-metrics.csv", "csv").framework == "roll"
    with pytest.raises(LogError, match="expects a CSV table"):
        read_log(LOGS / "verl-dapo-7b-h20-sync-fsdp2.log", "csv")


# ------------------------------------------------------------------------------------- length law


def test_length_law_meets_the_logged_clipped_mean_and_clip_ratio():
    notes: list[str] = []
    law = fit_length_law({"length_mean": 3000.0, "length_clip_ratio": 0.05, "length_max": 8192.0},
                         {"kind": "lognormal", "mean": 1000, "sigma": 1.0, "max": 8192}, notes)
    mu = math.log(law.mean) - law.sigma**2 / 2
    mean, clip = _clipped_stats(mu, law.sigma, 8192)
    assert mean == pytest.approx(3000, rel=0.01) and clip == pytest.approx(0.05, rel=0.02)
    assert law.max == 8192 and not notes


def test_length_law_without_clip_ratio_keeps_sigma():
    law = fit_length_law({"length_mean": 500.0}, {"kind": "lognormal", "mean": 900, "sigma": 0.7, "max": 4096}, [])
    assert law.sigma == 0.7
    assert _clipped_stats(math.log(law.mean) - 0.245, 0.7, 4096)[0] == pytest.approx(500, rel=0.01)


# ---------------------------------------------------------------------------------------- overlay


def _overlay(tmp_path, body: str) -> Path:
    path = tmp_path / "cal.yaml"
    path.write_text(body)
    return path


def test_overlay_lands_on_the_roles_pools_of_another_placement(tmp_path):
    cal = _overlay(tmp_path, "calibration:\n  hardware: h20\n  factors: {train_mfu: 0.5, forward_mfu: 0.45, "
                   "decode_step_overhead_ms: 4.0, switch_overhead_s: 9.0}\n  band_pct: 3.0\n")
    scn = load_scenario(ASYNC / "verl-dapo-7b-h20-one-step-off.yaml", [f"calibration={cal}"])
    assert scn.cluster.pools["train"].profile_overrides == {"train_mfu": 0.5, "forward_mfu": 0.45}
    assert scn.cluster.pools["gen"].profile_overrides == {}
    assert scn.roles["rollout"].engine.step_overhead_ms == 4.0
    assert scn.calibration.band_pct == 3.0
    assert "switch_overhead_s" not in type(scn.schedule).model_fields  # one-step-off never switches: not applied


def test_an_overlay_leaves_the_jobs_response_lengths_alone_unless_asked(tmp_path):
    """The logged job's response lengths are workload, not calibration: the target keeps its own unless the
    overlay opts in, and `rlsim run` says which way it went."""
    law = "  response_length: {mean: 1371, sigma: 0.9, max: 4096}\n"
    own = load_scenario(shipped_dir("scenarios") / "quickstart.yaml").workload.response_length
    cal = _overlay(tmp_path, "calibration:\n  factors: {train_mfu: 0.4}\n" + law + "  band_pct: 2.9\n")
    scn = load_scenario(shipped_dir("scenarios") / "quickstart.yaml", [f"calibration={cal}"])
    assert scn.workload.response_length == own and scn.cluster.pools["gen"].profile_overrides == {"train_mfu": 0.4}
    run = runner.invoke(app, ["run", "quickstart", "--set", f"calibration={cal}", "--set", "steps=1",
                              "--set", "algorithm.prompts_per_step=16", "--out", str(tmp_path / "r"), "-q",
                              "--no-plots"])
    assert run.exit_code == 0, run.output
    text = " ".join(run.output.split())
    assert "workload unchanged: the log's response lengths (lognormal mean 1371, sigma 0.9, max 4096) are not " \
           "applied" in text
    assert text.count("band ±") == 1 and "band ± 2.9%" in text and "validation band" not in text.replace(
        "uncalibrated model's validation band", "")

    opted = _overlay(tmp_path, "calibration:\n  factors: {train_mfu: 0.4}\n" + law + "  apply_response_length: true\n")
    scn = load_scenario(shipped_dir("scenarios") / "quickstart.yaml", [f"calibration={opted}"])
    assert (scn.workload.response_length.mean, scn.workload.response_length.max) == (1371, 4096)
    run = runner.invoke(app, ["run", "quickstart", "--set", f"calibration={opted}", "--set", "steps=1",
                              "--set", "algorithm.prompts_per_step=16", "--out", str(tmp_path / "r2"), "-q",
                              "--no-plots"])
    assert "workload.response_length replaced by the log's" in " ".join(run.output.split())


def test_overlay_refuses_other_hardware_and_bad_values(tmp_path):
    cal = _overlay(tmp_path, "calibration:\n  hardware: h100-sxm\n  factors: {train_mfu: 0.5}\n")
    with pytest.raises(ScenarioError, match="fitted on h100-sxm, pool 'main' is h20"):
        load_scenario(ASYNC / "verl-dapo-7b-h20-sync.yaml", [f"calibration={cal}"])
    cal = _overlay(tmp_path, "calibration:\n  factors: {train_mfu: 1.5, speed: 2}\n")
    with pytest.raises(ScenarioError) as exc:
        load_scenario(ASYNC / "verl-dapo-7b-h20-sync.yaml", [f"calibration={cal}"])
    assert "calibration.factors.speed: unknown key" in str(exc.value)


# --------------------------------------------------------------------------------------- bad logs


@pytest.mark.parametrize(
    ("name", "text", "fmt", "expected"),
    [
        ("empty.log", "", None, "empty file"),
        ("nothing.csv", "step,actor/pg_loss\n1,0.1\n", None, "no timing keys found"),
        ("ms.csv", "step,timing_ms/step,timing_ms/gen\n1,749000,321000\n", None, "milliseconds"),
        ("mixed.log", "step:1 - timing_s/step:749 - timing_s/update_actor:286000\n", None, "longer than its step"),
        ("verl.log", "step:1 - timing_s/step:749 - timing_s/gen:321\n", "roll", "use --format verl"),
        ("config.yaml", "trainer: {nnodes: 1}\nactor_rollout_ref: {rollout: {n: 16}}\ndata: {}\n", None,
         "verl config, not a metrics log"),
        ("text.csv", "step,timing_s/step\n1,fast\n", None, "expected a number"),
    ],
)
def test_bad_logs_get_one_line_and_exit_2(tmp_path, name, text, fmt, expected):
    log = tmp_path / name
    log.write_text(text)
    args = ["calibrate", "--from-log", str(log), "--scenario", str(ASYNC / "verl-dapo-7b-h20-sync.yaml")]
    result = runner.invoke(app, args + (["--format", fmt] if fmt else []))
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0] and str(log) in lines[0]
    assert "Traceback" not in result.output


def test_from_log_needs_a_scenario_and_csv_mode_still_needs_a_profile():
    result = runner.invoke(app, ["calibrate", "--from-log", str(LOGS / "verl-dapo-7b-h20-sync-fsdp2.log")])
    assert result.exit_code == 2 and "needs --scenario" in result.output
    result = runner.invoke(app, ["calibrate", "measurements.csv"])
    assert result.exit_code == 2 and "--profile" in result.output


# ------------------------------------------------------------- calibrate on sync, predict one-step-off


def _predict(scenario: str, overlay: Path) -> dict[str, float]:
    return simulated_phases(simulate(load_scenario(ASYNC / scenario, [f"calibration={overlay}"])))


def _calibrate_then_predict(tmp_path, sync_log: str, sync_scenario: str, scenario: str, log: str):
    """Fit the sync scenario to its log, run the one-step-off scenario with the overlay: % error per phase."""
    out = tmp_path / "cal.yaml"
    result = runner.invoke(app, ["calibrate", "--from-log", str(LOGS / sync_log), "--scenario",
                                 str(ASYNC / sync_scenario), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "update_actor" in result.output and "band carried into predictions" in result.output
    for phase in ("step", "gen", "generate", "old_log_prob", "update_actor"):
        assert f"{phase} " in result.output
    got = _predict(scenario, out)
    published = read_log(LOGS / log).phase_means()
    return {p: 100 * (got[p] - published[p]) / published[p] for p in ("step", "generate", "old_log_prob",
                                                                       "update_actor")}


@pytest.fixture(scope="module")
def fsdp2_errors(tmp_path_factory):
    return _calibrate_then_predict(tmp_path_factory.mktemp("fsdp2"), "verl-dapo-7b-h20-sync-fsdp2.log",
                                   "verl-dapo-7b-h20-sync.yaml", "verl-dapo-7b-h20-one-step-off.yaml",
                                   "verl-dapo-7b-h20-one-step-off-fsdp2.log")


@pytest.mark.slow
def test_calibrate_on_verl_sync_then_predict_one_step_off(fsdp2_errors):
    """docs/sources.md §6, FSDP2: fit on the sync row only, predict the one-step-off row.

    Acceptance: step within 10% of 520 s; per phase the target is 15%, which old_log_prob and
    update_actor meet. The bounds pin today's errors so a regression fails.
    """
    err = fsdp2_errors
    assert abs(err["step"]) <= 10.0
    assert abs(err["old_log_prob"]) <= 15.0


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="update_actor +19.5% since training is priced from operators: the overlay's "
                   "one train_mfu factor, fitted on the 16-GPU sync run, does not carry the rank imbalance and "
                   "recompute of the 12-GPU one-step-off trainer (docs/reproductions.md, verl one-step-off)")
def test_calibrated_one_step_off_update_actor_within_15_percent(fsdp2_errors):
    assert abs(fsdp2_errors["update_actor"]) <= 15.0


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="generation +22.8% (was +15.2% while the engines' per-step cost was fitted to "
                   "NIM): the decode overhead the fit adds to slow the 16-GPU sync tail from 177 s to verl's 247 s "
                   "also slows the throughput-bound 4-GPU batch; the missing small-batch cost is not a flat per-step "
                   "one (docs/reproductions.md, verl one-step-off)")
def test_calibrated_one_step_off_generation_within_17_percent(fsdp2_errors):
    assert abs(fsdp2_errors["generate"]) <= 17.0


@pytest.mark.slow
def test_calibrate_on_verl_megatron_sync_then_predict_one_step_off(tmp_path):
    """docs/sources.md §6, Megatron: the same workflow misses; these bounds pin today's errors.

    Today: step +11.9% (target 10%), generation -8.0%, old_log_prob +32.4%, update_actor +28.2%
    (target 15%). The trainer phases miss because verl's published passes barely move from 16 to 12
    GPUs while rlsim's follow tokens per GPU; docs/sources.md §6 "What the rows imply" shows that no
    training-path cost explains it and what measurement would.
    """
    err = _calibrate_then_predict(tmp_path, "verl-dapo-7b-h20-sync-megatron.log",
                                  "verl-dapo-7b-h20-sync-megatron.yaml", "verl-dapo-7b-h20-one-step-off-megatron.yaml",
                                  "verl-dapo-7b-h20-one-step-off-megatron.log")
    assert abs(err["step"]) <= 14.0
    assert abs(err["generate"]) <= 15.0
    assert abs(err["old_log_prob"]) <= 36.0 and abs(err["update_actor"]) <= 32.0


# ------------------------------------------------------------- the fit says when it did not fit


def test_fit_report_says_which_factor_moved_and_warns_on_residuals_and_nothing_moved():
    from rlsim.tools.calibration.log_fit import LogFit, PhaseRow, fit_residual_pct
    from rlsim.tools.calibration.log_report import fit_warnings

    rows = [PhaseRow("step", 100.0, 105.8, True), PhaseRow("generate", 50.0, 78.0, True),
            PhaseRow("update_actor", 40.0, 41.0, True)]
    assert fit_residual_pct(rows) == 5.8  # the step's residual where the log has a step time
    assert fit_residual_pct(rows[1:]) == pytest.approx(math.sqrt((56.0 ** 2 + 2.5 ** 2) / 2), abs=0.1)
    moved = LogFit({"train_mfu": 0.3, "forward_mfu": 0.5}, {"train_mfu": 0.4, "forward_mfu": 0.5}, rows, 5.8, None,
                   3, None)
    assert moved.moved("train_mfu") and not moved.moved("forward_mfu")
    lines = fit_warnings(moved)
    assert lines == ["warning: generate stays +56.0% off the log after fitting (> 15%)"]
    still = LogFit({"train_mfu": 0.4}, {"train_mfu": 0.4}, rows[:1], 5.8, None, 1, None)
    assert fit_warnings(still) == ["warning: no factor moved: the log did not change the model; the overlay only "
                                   "carries the band"]


@pytest.mark.slow  # over 2 s alone: the slow layer (CI runs it)
def test_quickstart_on_the_dapo_log_warns_that_the_factors_are_implausible(tmp_path):
    """A scenario of another job (8xH100 quickstart fitted to an H20 DAPO log): the fit closes the phases only
    with absurd factors (an MFU of a few %, a decode step cost of tens of ms), and says so; run shows the band."""
    out = tmp_path / "cal.yaml"
    res = runner.invoke(app, ["calibrate", "--from-log", str(LOGS / "verl-dapo-7b-h20-sync-fsdp2.log"), "--scenario",
                              "quickstart", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "moved" in text and "warning: train_mfu fitted to" in text and "is the log from this scenario's job" in text
    assert "warning: decode_step_overhead_ms fitted to" in text
    scn = load_scenario(shipped_dir("scenarios") / "quickstart.yaml", [f"calibration={out}"])
    assert scn.calibration.band_pct > 0
    run = runner.invoke(app, ["run", "quickstart", "--set", f"calibration={out}", "--set", "steps=1",
                              "--out", str(tmp_path / "r"), "-q", "--no-plots"])
    assert run.exit_code == 0, run.output
    assert f"± {scn.calibration.band_pct:.1f}%" in run.output


def test_a_logged_value_too_large_to_be_a_measurement_is_refused_in_one_line(tmp_path):
    """Found by the 20,000-example fuzz run: 1e308 seconds passed as finite, and its mean became inf."""
    rows = (LOGS / "roll-rlvr-metrics.csv").read_text().splitlines()
    head, first = rows[0], rows[1].split(",")
    first[2] = "1e308"
    log = tmp_path / "huge.csv"
    log.write_text("\n".join([head, ",".join(first), *rows[2:]]) + "\n")
    with pytest.raises(LogError, match="is not a plausible logged value"):
        read_log(log)


def test_a_log_in_milliseconds_under_a_week_is_refused_against_the_scenarios_own_step(tmp_path):
    """74,900 "s" a step passed the one-week check; against the scenario's simulated step it is ~90x off (refused
    past 30x: milliseconds are 1000x)."""
    log = tmp_path / "ms.log"
    log.write_text("step:10 - timing_s/gen:32100.0 - timing_s/generate_sequences:24700.0 - timing_s/old_log_prob:"
                   "8800.0 - timing_s/update_actor:28600.0 - timing_s/step:74900.0\n")
    res = runner.invoke(app, ["calibrate", "--from-log", str(log), "--scenario",
                              str(ASYNC / "verl-dapo-7b-h20-sync.yaml"), "--sim-steps", "1"])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "are these milliseconds?" in lines[0] and "divide the timings by 1000" in lines[0]
