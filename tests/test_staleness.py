"""Staleness carries its unit (rlsim/sim/staleness.py): verl V1's max_off_policy_threshold and AReaL's eta count
weight versions, NeMo-RL's max_trajectory_age_steps trainer steps; admission and the stale-sample drop compare
each in its own unit, so weights pushed every k > 1 trainer steps no longer stall or over-drop a run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlsim.sim.paths import shipped_dir
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.schedules.async_rollout import AsyncRolloutSchedule
from rlsim.sim.schedules.fully_async import DropStale
from rlsim.sim.schedules.groups import Group, Sample
from rlsim.sim.simulate import simulate
from rlsim.sim.staleness import TRAINER_STEPS, VERSIONS, Staleness

LENDING = shipped_dir("scenarios") / "async" / "verl-v1-separate-async-lending.yaml"
INFLIGHT = shipped_dir("scenarios") / "async" / "inflight-updates.yaml"


def test_ages_in_different_units_do_not_compare():
    assert Staleness(3, VERSIONS).exceeds(Staleness(2, VERSIONS))
    assert not Staleness(2, TRAINER_STEPS).exceeds(Staleness(2, TRAINER_STEPS))
    with pytest.raises(TypeError, match="staleness in trainer steps compared with staleness in weight versions"):
        Staleness(8, TRAINER_STEPS).exceeds(Staleness(2, VERSIONS))


class _Loop:
    """What DropStale reads of the rollout loop; `age` is the loop's own."""

    age = AsyncRolloutSchedule.age

    def __init__(self, policy_version: int, sync_every: int):
        self.env = SimpleNamespace(policy_version=policy_version, now=0.0)
        self.sync_steps = list(range(0, policy_version + 1, sync_every))
        self.syncs = len(self.sync_steps) - 1
        self.dropped_stale, self.accepted_groups, self.discarded = 0, 10, []

    def discard_group(self, g, reason):
        self.discarded.append(g.gid)

    def wake_rollout(self):
        pass


def _group(gid: int, version: int) -> Group:
    g = Group(gid, version, 0.0)
    g.samples.append(Sample(gid, g, 10, 10, version_tokens={version: 10}))
    return g


@pytest.mark.parametrize(("bound", "kept"), [
    (Staleness(8, VERSIONS), [0, 1, 2]),      # 8 versions: nothing here is that old (used to drop what was > 8 steps)
    (Staleness(1, VERSIONS), [1, 2]),         # 2 versions old (trainer step 0) goes, 1 version old stays
    (Staleness(0, VERSIONS), [2]),            # only the last push's weights
    (Staleness(4, TRAINER_STEPS), [2]),        # trainer steps: 9 - 4 = 5 > 4 goes
])
def test_the_drop_counts_age_in_the_bound_s_unit(bound, kept):
    loop = _Loop(policy_version=9, sync_every=4)  # pushes at trainer steps 0, 4, 8: weight version 2 now
    groups = [_group(0, 0), _group(1, 4), _group(2, 8)]
    left = DropStale(bound).screen(loop, groups)
    assert [g.gid for g in left] == kept and loop.discarded == [g.gid for g in groups if g.gid not in kept]


def test_verl_v1_with_a_push_every_4_steps_and_a_bound_of_1_version_finishes():
    """Was: 'no RL step completed ... the run cannot finish' (a bound of 1 version compared with trainer steps)."""
    scn = load_scenario(LENDING, ["schedule.parameter_sync_step=4", "schedule.max_off_policy_threshold=1",
                                  "warmup_steps=0", "steps=6", "algorithm.prompts_per_step=32"])
    steps = simulate(scn).steps
    assert len(steps) == 6 and steps["samples/dropped_stale"].max() == 0
    assert steps["staleness/max"].max() == 5  # trainer steps: a version and a step, within 1 version


def test_the_spec_declares_its_bound_with_its_unit():
    assert load_scenario(LENDING).schedule.staleness_bound == Staleness(1, VERSIONS)
    assert load_scenario(INFLIGHT).schedule.staleness_bound == Staleness(2, TRAINER_STEPS)
    areal = load_scenario(shipped_dir("scenarios") / "async" / "areal-1.5b-h800.yaml")
    assert areal.schedule.staleness_bound.unit is VERSIONS


def test_an_age_bound_below_the_sync_interval_is_refused_naming_both_knobs():
    with pytest.raises(ScenarioError) as caught:
        load_scenario(INFLIGHT, ["schedule.max_trajectory_age_steps=1", "schedule.trigger_parameter_sync_step=3"])
    lines = caught.value.lines()
    assert len(lines) == 1 and "schedule.max_trajectory_age_steps" in lines[0]
    assert "trigger_parameter_sync_step - 1 = 2" in lines[0]
    load_scenario(INFLIGHT, ["schedule.max_trajectory_age_steps=2", "schedule.trigger_parameter_sync_step=3"])


@pytest.mark.parametrize(("path", "knobs"), [
    (LENDING, ["max_off_policy_threshold=1e6"]),  # had no upper bound: 1e6 never finished
    (LENDING, ["max_head_offpolicyness=1e6"]),
    (INFLIGHT, ["max_trajectory_age_steps=17"]),
    (shipped_dir("scenarios") / "async" / "areal-1.5b-h800.yaml", ["max_head_offpolicyness=null",
                                                                   "staleness_threshold=1e6"]),
    (shipped_dir("scenarios") / "roll" / "rlvr-qwen2.5-7b-async.yaml", ["async_generation_ratio=17"]),
])
def test_every_staleness_knob_stops_at_16(path, knobs):
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path, [f"schedule.{k}" for k in knobs])
    lines = caught.value.lines()
    assert len(lines) == 1 and f"schedule.{knobs[-1].split('=')[0]}: must be <= 16, got" in lines[0], lines
