"""Steady state by default: run, sweep and compare of asynchronous scenarios warm up past the head start."""

from __future__ import annotations

from typer.testing import CliRunner

from rlsim.sim.paths import shipped_dir
from rlsim.sim.scenario.loader import load_scenario
from rlsim.tools.cli import app
from rlsim.tools.sweep.grid import plan_sweep
from rlsim.tools.sweep.runner import run_points, tasks_for
from rlsim.tools.sweep.steady_state import steady_scenario

AREAL = shipped_dir("scenarios") / "async" / "areal-1.5b-h800.yaml"
SMALL = ["steps=2", "algorithm.prompts_per_step=32"]
ETAS = (1, 2, 4, 8)


def _eta_sweep(extra: list[str]):
    return plan_sweep(AREAL, [f"schedule.max_head_offpolicyness={','.join(map(str, ETAS))}"], [], 1, SMALL + extra)


def test_sweep_over_eta_warms_up_and_mean_staleness_grows_with_the_bound():
    plan = _eta_sweep([])
    assert plan.warnings() == []
    tasks = tasks_for(plan)
    assert [t.overrides[-1] for t in tasks] == [f"warmup_steps={eta + 2}" for eta in ETAS]  # 1 + (eta + 1) batches
    stale = [r["summary"]["staleness_mean"] for r in run_points(tasks)]
    # the bound binds at every eta here (generation outruns the trainer): more room, staler samples
    assert all(b > a + 0.5 for a, b in zip(stale, stale[1:], strict=False)), stale
    assert stale[-1] > 4  # at eta 8 the measured samples are far more than the 1.5 a 2-step cold run shows


def test_a_warmup_the_sweep_sets_too_short_is_honoured_with_one_warning_line_naming_the_steps():
    plan = _eta_sweep(["warmup_steps=1"])
    tasks = tasks_for(plan)
    assert all([o for o in t.overrides if o.startswith("warmup_steps=")] == ["warmup_steps=1"] for t in tasks)
    lines = plan.warnings()
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "needs 10 warm-up steps" in lines[0] and "warmup_steps=10" in lines[0]  # the most any point needs


def test_run_warms_up_by_default_and_warns_on_a_short_explicit_warmup():
    scn, note = steady_scenario(load_scenario(AREAL))
    assert scn.warmup_steps == 6 and "warming up 6 steps (not 1)" in note  # eta 4
    scn, note = steady_scenario(load_scenario(AREAL, ["warmup_steps=2"]), ["warmup_steps=2"])
    assert scn.warmup_steps == 2 and note.startswith("warning:") and "needs 6" in note
    sync = load_scenario(shipped_dir("scenarios") / "quickstart.yaml")
    assert steady_scenario(sync) == (sync, "")


def test_cli_run_says_it_warmed_up(tmp_path):
    res = CliRunner().invoke(app, ["run", str(AREAL), "--set", "steps=1", "--set", "algorithm.prompts_per_step=16",
                                   "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert "warming up 6 steps" in res.output and "(+6 warm-up)" in res.output
    quiet = CliRunner().invoke(app, ["run", str(AREAL), "--set", "steps=1", "--set", "algorithm.prompts_per_step=16",
                                     "--out", str(tmp_path / "r"), "-q"])
    assert quiet.exit_code == 0 and "warming up" not in quiet.output and "(+6 warm-up)" in quiet.output
    # --quiet hides notes and progress, never a warning: a short explicit warm-up still says it measures the fill.
    short = CliRunner().invoke(app, ["run", str(AREAL), "--set", "steps=1", "--set", "algorithm.prompts_per_step=16",
                                     "--set", "warmup_steps=1", "--out", str(tmp_path / "s"), "-q"])
    assert short.exit_code == 0 and "measures the fill of the pipeline" in short.output


def test_verl_v1_is_warmed_up_to_its_head_start():
    """verl V1 declares its head start like AReaL's rule (eta + 1 versions of parameter_sync_step steps): the tools'
    own copy of the rule returned 0 for it, so `rlsim run`, sweep and plan never warmed it up."""
    scn = load_scenario(shipped_dir("scenarios") / "async" / "verl-v1-separate-async-lending.yaml")
    assert scn.schedule.head_start_steps == 2  # max_off_policy_threshold 1, a push every step
    warmed, note = steady_scenario(scn)
    assert warmed.warmup_steps == 3 and "verl-v1: warming up 3 steps" in note
    four = load_scenario(shipped_dir("scenarios") / "async" / "verl-v1-separate-async-lending.yaml",
                         ["schedule.parameter_sync_step=4"])
    assert steady_scenario(four)[0].warmup_steps == 9
