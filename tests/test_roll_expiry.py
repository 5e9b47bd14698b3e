"""ROLL's group expiry: a group started before `current version - ceil(alpha)` is never trained.

Finished expired groups are dropped from the buffer and running ones are aborted; both are reported
to the run collector as discarded with the reason, and their decoded tokens count as discarded.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml

from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.scenario.loader import parse_scenario
from rlsim.sim.schedules import build_schedule

ROOT = Path(__file__).resolve().parent.parent
BASE = yaml.safe_load((ROOT / "scenarios/roll/rlvr-qwen2.5-7b-async.yaml").read_text())


def run(alpha: float, sigma: float = 1.6):
    data = copy.deepcopy(BASE)
    data["steps"], data["warmup_steps"] = 4, 0
    data["algorithm"]["prompts_per_step"] = 8
    data["workload"]["response_length"]["sigma"] = sigma  # a long tail: some groups outlive their window
    data["schedule"]["async_generation_ratio"] = alpha
    data["schedule"]["max_additional_running_prompts"] = 8
    # Dynamic sampling runs extra groups ahead; those still running when the window moves expire.
    data["schedule"]["dynamic_sampling"] = True
    data["schedule"]["filter_prob"] = 0.3
    scn = parse_scenario(data, source="test")
    env = SimEnvironment(scn.seed)
    sched = build_schedule(scn, env)
    env.run(until=env.process(sched.run()))
    return sched, env.collector


@pytest.mark.parametrize("alpha", [0, 0.5, 1])
def test_expired_groups_are_never_trained_and_are_reported_discarded(alpha):
    sched, collector = run(alpha)
    expired = [s for s in sched.samples_all if s.reason == "expired"]
    assert sched.expired_groups > 0 and expired, "groups run ahead by dynamic sampling should expire"
    for s in sched.samples_all:
        if s.trained_version is not None:  # the bound every trained group keeps
            assert s.group.start_version >= s.trained_version - math.ceil(alpha)
    for s in expired:
        rec = collector.samples[s.sid]
        assert rec.fate == "discarded" and rec.reason == "expired" and rec.trained_version is None


def test_expiry_discards_tokens_and_accounting_still_closes():
    sched, collector = run(0)
    totals = sched.token_accounting()
    assert totals["tokens_discarded"] > 0
    assert totals["tokens_generated"] == (totals["tokens_trained"] + totals["tokens_discarded"]
                                          + totals["tokens_in_flight"])
    assert totals["tokens_in_flight"] >= 0
