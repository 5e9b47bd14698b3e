"""The progress watchdog: a run in which no step can complete stops with a reason instead of hanging."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.schedules.fully_async import FullyAsyncSchedule
from rlsim.sim.simulate import SimulationStalled, simulate

ROOT = Path(__file__).resolve().parents[1]


def test_a_rollout_that_never_admits_a_group_is_stopped_with_a_reason(monkeypatch):
    monkeypatch.setattr(FullyAsyncSchedule, "capacity", lambda self: 0)  # nothing ever starts
    scn = load_scenario(ROOT / "scenarios/async/areal-1.5b-h800.yaml", ["steps=1", "warmup_steps=0"])
    with pytest.raises(SimulationStalled, match="no RL step completed .* the run cannot finish"):
        simulate(scn)


def test_a_stall_after_progress_is_bounded_by_the_longest_step(monkeypatch):
    """Two steps run, then admission stops: stopped within STALL_STEPS x the longest step."""
    from rlsim.sim.schedules.base import STALL_STEPS

    real = FullyAsyncSchedule.capacity

    def capacity(self):
        return real(self) if self.env.rl_step < 2 else 0

    monkeypatch.setattr(FullyAsyncSchedule, "capacity", capacity)
    monkeypatch.setattr(FullyAsyncSchedule, "take_batch",
                        lambda self, _orig=FullyAsyncSchedule.take_batch: None if self.env.rl_step >= 2
                        else _orig(self))
    scn = load_scenario(ROOT / "scenarios/async/areal-1.5b-h800.yaml",
                        ["steps=4", "warmup_steps=0", "algorithm.prompts_per_step=8"])
    with pytest.raises(SimulationStalled, match="after step 2") as exc:
        simulate(scn)
    assert "bound" in str(exc.value) and STALL_STEPS > 1


def test_the_cli_reports_a_stalled_run_in_one_line(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from rlsim.tools.cli import app

    monkeypatch.setattr(FullyAsyncSchedule, "capacity", lambda self: 0)
    res = CliRunner().invoke(app, ["run", str(ROOT / "scenarios/async/areal-1.5b-h800.yaml"), "--set", "steps=1",
                                   "--out", str(tmp_path / "out"), "-q"])
    assert res.exit_code == 1
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "the run cannot finish" in lines[0] and "Traceback" not in res.output


def test_a_legal_run_with_a_day_long_switch_is_not_stopped():
    """Regression: the first-step bound counts switches, syncs, model phases and tool calls, not only decode."""
    scn = load_scenario(ROOT / "scenarios/quickstart.yaml", ["schedule.switch_overhead_s=86400", "steps=1",
                                                             "algorithm.prompts_per_step=8"])
    assert simulate(scn).summary["step_time_s"] > 86400
