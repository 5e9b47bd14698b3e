"""Components of the asynchronous rollout loop (schedules/loop_components.py): the order the loop calls their
hooks in, as an event trace of a small run with lending and re-splitting both plugged."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.schedules import build_schedule
from rlsim.sim.schedules.lending import Lending
from rlsim.sim.schedules.loop_components import HOOKS, LoopComponent
from rlsim.sim.schedules.resplit import Resplit

ROOT = Path(__file__).resolve().parents[1] / "scenarios"
STEP_HOOKS = ("start", "before_batch", "after_batch", "sync_targets", "after_update")  # once a step at most
GENERATORS = ("start", "before_batch", "after_batch", "after_update")


class Tracer(LoopComponent):
    """Overrides every hook and changes nothing."""


for _name in HOOKS:  # every hook overridden by a copy of the no-op
    setattr(Tracer, _name, lambda self, *a, _f=getattr(LoopComponent, _name): _f(self, *a))


def traced(path: str, *sets: str, tracer: bool = True):
    """Build the schedule, wrap every plugged component's hooks to log (component, hook, step), run it."""
    scn = load_scenario(ROOT / path, ["steps=2", "warmup_steps=1", *sets])
    env = SimEnvironment(scn.seed)
    sched = build_schedule(scn, env)
    if tracer:
        sched.plug(Tracer())
    trace, calls = [], Counter()
    for comp in sched.components.plugged:
        for name in HOOKS:
            hook = getattr(comp, name)
            who = type(comp).__name__

            def log(name=name, who=who):
                if name in STEP_HOOKS:
                    trace.append((who, name, env.rl_step))
                calls[who, name] += 1

            if name in GENERATORS:
                def wrapped(*a, _hook=hook, _log=log):
                    _log()
                    return (yield from _hook(*a))
            else:
                def wrapped(*a, _hook=hook, _log=log):
                    _log()
                    return _hook(*a)
            setattr(comp, name, wrapped)
    env.run(until=env.process(sched.run()))
    return sched, trace, calls


def test_hooks_run_in_step_order_and_plug_order_with_lending_and_resplit_plugged():
    sched, trace, calls = traced("async/resplit-online.yaml")
    assert [type(c) for c in sched.components.plugged] == [Lending, Resplit, Tracer]
    assert sched.components.hooked["after_update"] == [sched.lending, sched.resplit, sched.components.plugged[2]]
    assert sched.resplit not in sched.components.hooked["before_batch"]  # only the hooks a component overrides
    start = [("Lending", "start", 0), ("Tracer", "start", 0)]
    assert trace[:2] == start
    steps = trace[2:]
    per_step = [("Lending", "before_batch"), ("Tracer", "before_batch"), ("Lending", "after_batch"),
                ("Tracer", "after_batch"), ("Lending", "sync_targets"), ("Tracer", "sync_targets"),
                ("Lending", "after_update"), ("Resplit", "after_update"), ("Tracer", "after_update")]
    total = sched.scenario.warmup_steps + sched.scenario.steps
    assert [(who, name) for who, name, _ in steps] == per_step * total  # a weight push after every step
    assert [step for *_, step in steps] == [s for s in range(total) for _ in per_step]
    assert calls["Resplit", "dp_size"] > 0 and calls["Lending", "admits"] > 0  # asked as the run goes
    assert calls["Lending", "park"] > 0  # every sample is offered to the components before an engine


@pytest.mark.slow  # two runs
def test_a_component_that_changes_nothing_leaves_the_run_as_it_was():
    with_tracer, _, _ = traced("async/verl-v1-separate-async-lending.yaml", "warmup_steps=0")
    without, _, _ = traced("async/verl-v1-separate-async-lending.yaml", "warmup_steps=0", tracer=False)
    assert with_tracer.collector.step_rows == without.collector.step_rows
    assert with_tracer.lending.lend_log == without.lending.lend_log and with_tracer.resplit is None


def test_lending_switches_inside_its_hooks():
    """verl V1 lending: the lent GPUs come back before the batch is taken, and go out after the update."""
    sched, trace, _ = traced("async/verl-v1-separate-async-lending.yaml", "steps=3", tracer=False)
    assert [type(c) for c in sched.components.plugged] == [Lending]
    lent = [r["lend"] for r in sched.lending.lend_log]
    assert any(lent)
    rows = sched.collector.step_rows
    for row, lend in zip(rows, lent, strict=True):  # each decision lends (or not) at its step's end
        assert row["lending/lent"] == int(lend)
        assert ("timing_s/switch_to_rollout" in row) == lend
    for prev, row in zip(rows, rows[1:], strict=False):  # lent GPUs return at the next step's start
        assert ("timing_s/switch_to_trainer" in row) == bool(prev["lending/lent"])
