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
