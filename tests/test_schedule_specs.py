"""Each schedule's spec takes only the knobs its schedule reads: another schedule's knob is refused in one line.

The specs are composed of shared option groups (rlsim/sim/scenario/schema/schedule_options.py); a knob
that used to be accepted and ignored (switch_overhead_s on a schedule whose GPUs never switch, verl
fully_async's staleness_threshold on verl V1) is an unknown key, with the schedules that do take it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.scenario.schema import (
    FullyAsyncSpec,
    GenerationOnlySpec,
    HybridFlowSpec,
    OneStepOffSpec,
    RollSpec,
    VerlV1Spec,
)

ROOT = Path(__file__).resolve().parents[1] / "scenarios"
SCENARIO = {
    "hybridflow": ROOT / "quickstart.yaml",
    "fully-async": ROOT / "async/areal-7b-h800.yaml",
    "verl-v1": ROOT / "async/verl-v1-colocate-async.yaml",
    "roll": ROOT / "roll/rlvr-qwen2.5-7b-async.yaml",
    "generation-only": ROOT / "hybridflow/verl-generation-flat.yaml",
}

# (schedule, knob, value, the schedules named as taking it)
IGNORED = [
    ("fully-async", "switch_overhead_s", "1", "hybridflow, verl-v1"),
    ("fully-async", "reshard", "naive", "hybridflow, verl-v1"),
    ("fully-async", "dispatch", "least-loaded", "generation-only, hybridflow, one-step-off"),
    ("roll", "switch_overhead_s", "1", "hybridflow, verl-v1"),
    ("roll", "dispatch", "least-loaded", "generation-only, hybridflow, one-step-off"),
    ("verl-v1", "staleness_threshold", "0.5", "fully-async"),
    ("verl-v1", "partial_rollout", "true", "fully-async"),
    ("verl-v1", "in_flight_weight_updates", "true", "fully-async"),
    ("verl-v1", "max_trajectory_age_steps", "2", "fully-async"),
    ("verl-v1", "dispatch", "least-loaded", "generation-only, hybridflow, one-step-off"),
    ("generation-only", "recompute_logprob", "false", "hybridflow, one-step-off, fully-async, roll, verl-v1"),
]


@pytest.mark.parametrize(("kind", "knob", "value", "takers"), IGNORED)
def test_a_knob_the_schedule_does_not_use_is_refused_in_one_line(kind, knob, value, takers):
    assert load_scenario(SCENARIO[kind]).schedule.kind == kind
    with pytest.raises(ScenarioError) as err:
        load_scenario(SCENARIO[kind], [f"schedule.{knob}={value}"])
    lines = err.value.lines()
    assert len(lines) == 1, lines
    verb = "uses" if "," not in takers else "use"
    assert lines[0].endswith(f"schedule.{knob}: unknown key for {kind} (only {takers} {verb} it)"), lines


def test_a_misspelt_knob_is_matched_against_the_chosen_schedules_keys_only():
    """partial_rolout on verl-v1: fully-async's partial_rollout is not offered (verl-v1 has no such knob)."""
    with pytest.raises(ScenarioError) as err:
        load_scenario(SCENARIO["verl-v1"], ["schedule.partial_rolout=true"])
    assert err.value.lines()[-1].endswith("schedule.partial_rolout: unknown key")
    with pytest.raises(ScenarioError) as err:
        load_scenario(SCENARIO["verl-v1"], ["schedule.max_off_policy_treshold=1"])
    assert err.value.lines()[-1].endswith("unknown key: did you mean max_off_policy_threshold?")


def test_the_switch_knobs_belong_to_the_schedules_whose_gpus_switch():
    """Only hybridflow and verl-v1 move GPUs between training and generation (rl_base.transition_setup)."""
    switch = {"reshard", "switch_overhead_s", "engine_sleep_level"}
    for spec in (HybridFlowSpec, VerlV1Spec):
        assert switch <= set(spec.model_fields)
    for spec in (GenerationOnlySpec, OneStepOffSpec, FullyAsyncSpec, RollSpec):
        assert not switch & set(spec.model_fields), spec.__name__
    # Defaults kept: hybridflow prices verl's 295 ms of gc per switch; verl-v1 adds nothing on top.
    assert HybridFlowSpec.model_fields["switch_overhead_s"].default == 0.295
    assert VerlV1Spec.model_fields["switch_overhead_s"].default == 0.0


def test_verl_v1_keeps_areals_admission_bound_under_its_own_name():
    scn = load_scenario(SCENARIO["verl-v1"], ["schedule.max_off_policy_threshold=2"])
    assert (scn.schedule.eta, scn.schedule.drop_stale, scn.schedule.verl_rule) == (2, True, False)
    assert scn.schedule.interrupt == "keep"
