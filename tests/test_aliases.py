"""The words users use: verl's, ROLL's and AReaL's names for schedules and placements are accepted as aliases."""

from __future__ import annotations

import pytest

from rlsim.sim.paths import shipped_dir
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario, read_yaml
from rlsim.tools.plan import enumerate_candidates, parse_space

SCENARIOS = shipped_dir("scenarios")
GRPO = SCENARIOS / "hybridflow" / "grpo-qwen2.5-7b-h100.yaml"
PPO = SCENARIOS / "hybridflow" / "ppo-llama-7b.yaml"


@pytest.mark.parametrize(("spelling", "kind"), [("sync", "hybridflow"), ("one_step_off", "one-step-off"),
                                                ("fully_async", "fully-async"), ("AReaL", "fully-async"),
                                                ("decoupled", "fully-async")])
def test_schedule_kind_aliases(spelling, kind):
    scn = load_scenario(SCENARIOS / "async" / "areal-1.5b-h800.yaml", (f"schedule.kind={spelling}",)) \
        if kind == "fully-async" else None
    if scn is None:
        path = GRPO if kind == "hybridflow" else SCENARIOS / "async" / "verl-dapo-7b-h20-one-step-off.yaml"
        scn = load_scenario(path, (f"schedule.kind={spelling}",))
    assert scn.schedule.kind == kind


def test_unknown_kind_is_still_refused():
    with pytest.raises(ScenarioError):
        load_scenario(GRPO, ("schedule.kind=sometimes",))


def _pools_of(scn, *roles):
    return {r: (scn.roles[r].pool, scn.role_gpu_range(r)) for r in roles}


@pytest.mark.parametrize("spelling", ["hybrid", "colocated", "Hybrid_Engine"])
def test_colocate_spellings(spelling):
    scn = load_scenario(GRPO, (f"schedule.placement={spelling}",))
    assert scn.roles_share_gpus("rollout", "actor")


@pytest.mark.parametrize("spelling", ["split", "disaggregated", "decoupled"])
def test_split_on_grpo_puts_rollout_apart_never_colocated(spelling):
    scn = load_scenario(GRPO, (f"schedule.placement={spelling}",))
    assert not scn.roles_share_gpus("rollout", "actor")
    assert scn.roles_share_gpus("actor", "reference")
    assert scn.role_gpus("rollout") == scn.role_gpus("actor") == 8  # 16 GPUs split evenly


def test_split_on_ppo_keeps_hybridflows_meaning_and_disaggregated_moves_only_rollout():
    split = load_scenario(PPO, ("schedule.placement=split",))
    assert split.roles_share_gpus("rollout", "actor") and not split.roles_share_gpus("actor", "critic")
    disagg = load_scenario(PPO, ("schedule.placement=disaggregated",))
    assert not disagg.roles_share_gpus("rollout", "actor") and disagg.roles_share_gpus("actor", "critic")


def test_plan_space_split_on_grpo_means_disaggregated():
    base = read_yaml(GRPO)
    space = parse_space({"gpus": [{"hardware": "h100-sxm", "counts": [16]}],
                         "schedules": [{"kind": "sync", "layouts": ["split"]},
                                       {"kind": "one_step_off", "layouts": ["split"]}]})
    cands = enumerate_candidates(base, space)
    assert [c.knobs["layout"] for c in cands] == ["disaggregated", "disaggregated"]
    assert [c.knobs["schedule"] for c in cands] == ["hybridflow", "one-step-off"]
    assert all(c.scenario is not None and not c.scenario.roles_share_gpus("rollout", "actor") for c in cands)
