"""The progress watchdog: a run in which no step can complete stops with a reason instead of hanging."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.scenario.loader import load_scenario
from rlsim.schedules.fully_async import FullyAsyncSchedule
from rlsim.simulate import SimulationStalled, simulate

ROOT = Path(__file__).resolve().parents[1]


def test_a_rollout_that_never_admits_a_group_is_stopped_with_a_reason(monkeypatch):
    monkeypatch.setattr(FullyAsyncSchedule, "capacity", lambda self: 0)  # nothing ever starts
    scn = load_scenario(ROOT / "scenarios/async/areal-1.5b-h800.yaml", ["steps=1", "warmup_steps=0"])
    with pytest.raises(SimulationStalled, match="no RL step completed .* the run cannot finish"):
        simulate(scn)


def test_a_stall_after_progress_is_bounded_by_the_longest_step(monkeypatch):
    """Two steps run, then admission stops: stopped within STALL_STEPS x the longest step."""
    from rlsim.schedules.base import STALL_STEPS

    real = FullyAsyncSchedule.capacity

    def capacity(self):
        return real(self) if self.env.rl_step < 2 else 0

    monkeypatch.setattr(FullyAsyncSchedule, "capacity", capacity)
    monkeypatch.setattr(FullyAsyncSchedule, "_take_batch",
                        lambda self, _orig=FullyAsyncSchedule._take_batch: None if self.env.rl_step >= 2
                        else _orig(self))
    scn = load_scenario(ROOT / "scenarios/async/areal-1.5b-h800.yaml",
                        ["steps=4", "warmup_steps=0", "algorithm.prompts_per_step=8"])
    with pytest.raises(SimulationStalled, match="after step 2") as exc:
        simulate(scn)
    assert "bound" in str(exc.value) and STALL_STEPS > 1
