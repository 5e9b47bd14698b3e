"""Options an agentic workload would switch off silently are refused in one line each, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.sim.api import ScenarioError, parse_scenario, read_yaml

ROOT = Path(__file__).resolve().parents[1] / "scenarios"
AGENT = read_yaml(ROOT / "agentic" / "tool-latency-base.yaml")


def _problems(data: dict) -> list[str]:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data, "test.yaml")
    return [str(p) for p in err.value.problems]


def test_generation_only_refuses_an_agent_it_would_ignore():
    data = {**AGENT, "schedule": {"kind": "generation-only"}}
    data["roles"] = {"rollout": AGENT["roles"]["rollout"]}
    lines = _problems(data)
    assert len(lines) == 1 and "workload.agent" in lines[0] and "generation-only" in lines[0]


def test_tail_resharding_refuses_an_agent_it_would_skip():
    data = read_yaml(ROOT / "sync" / "tail-reshard.yaml")
    data["workload"]["agent"] = AGENT["workload"]["agent"]
    data["environments"] = AGENT["environments"]
    lines = _problems(data)
    assert len(lines) == 1 and "schedule.tail_reshard" in lines[0] and "agent" in lines[0]


def test_the_same_scenarios_load_without_the_conflict():
    parse_scenario(AGENT, "agent.yaml")
    tail = read_yaml(ROOT / "sync" / "tail-reshard.yaml")
    parse_scenario(tail, "tail.yaml")
    tail["workload"]["agent"] = AGENT["workload"]["agent"]
    tail["environments"] = AGENT["environments"]
    tail["schedule"].pop("tail_reshard")
    parse_scenario(tail, "tail.yaml")


@pytest.mark.parametrize(("path", "knob"), [("roll/swe-sandbox.yaml", "async_generation_ratio"),
                                            ("async/areal-1.5b-h800.yaml", "max_head_offpolicyness"),
                                            ("async/inflight-updates.yaml", "max_trajectory_age_steps")])
def test_a_staleness_bound_beyond_any_published_one_is_refused(path, knob):
    """Found by the 20,000-example fuzz run: a ratio of 1290 admitted the whole run's prompts at once and ran
    for minutes. Policies lag at most 16 versions (AReaL's ablation stops there before unbounded)."""
    data = read_yaml(ROOT / path)
    data["schedule"][knob] = 1290
    lines = _problems(data)
    assert len(lines) == 1 and f"schedule.{knob}" in lines[0] and "16" in lines[0]
    data["schedule"][knob] = 16
    parse_scenario(data, path)
