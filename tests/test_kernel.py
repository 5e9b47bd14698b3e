"""The fast kernel (rlsim/sim/engine/kernel.py, SimPy's internals) and the reference kernel
(rlsim/sim/engine/reference.py, SimPy's public API only) give bit-identical results: every output table
and the event count of the shipped run scenarios (steps capped at 2)."""

from __future__ import annotations

import pytest
from golden_hashes import golden, result_hashes, scenario_path

from rlsim.sim.engine.environment import ReferenceEnvironment, SimEnvironment, kernel_choice

GOLDEN = golden()
# Quick runs of each kind: synchronous, generation-only, ROLL, and a fully-async multi-turn agent (tools).
QUICK = ["hybridflow/ppo-llama-7b.yaml", "async/areal-1.5b-generation-scaling.yaml", "roll/rlvr-qwen2.5-7b-async.yaml",
         "agentic/tool-latency-base.yaml"]


@pytest.mark.parametrize("name", QUICK)
def test_both_kernels_give_the_same_results(name):
    fast, reference = result_hashes(scenario_path(name), "fast"), result_hashes(scenario_path(name), "reference")
    assert reference == fast


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_reference_kernel_gives_the_golden_results(name):
    """With tests/test_golden.py (the fast kernel): both kernels give the committed results."""
    assert result_hashes(scenario_path(name), "reference") == GOLDEN[name]


def test_kernel_choice(monkeypatch):
    monkeypatch.delenv("RLSIM_KERNEL", raising=False)
    assert kernel_choice() == "fast"
    monkeypatch.setenv("RLSIM_KERNEL", "reference")
    assert kernel_choice() == "reference" and kernel_choice("fast") == "fast"
    with pytest.raises(ValueError, match="RLSIM_KERNEL"):
        kernel_choice("turbo")


def _waits(env):
    """A process waiting on a long timeout, redirected at t=1 to end at t=1.5 (then to an urgent event)."""
    log = []

    def sleeper():
        value = yield env.timeout(10.0)
        log.append((env.now, value))
        yield env.timeout(10.0)
        log.append(env.now)

    proc = env.process(sleeper())

    def redirector():
        yield env.timeout(1.0)
        env.redirect(proc, proc.target, 0.5)

    env.process(redirector())
    env.run(until=3.0)
    return log, env.now, env.events_processed


@pytest.mark.parametrize("kernel", [SimEnvironment, ReferenceEnvironment])
def test_redirect_moves_the_wait_and_leaves_the_old_event_unheard(kernel):
    log, now, events = _waits(kernel(0))
    assert log == [(1.5, None)] and now == 3.0
    assert (log, now, events) == _waits(SimEnvironment(0))


@pytest.mark.parametrize("kernel", [SimEnvironment, ReferenceEnvironment])
def test_redirect_to_now_is_urgent(kernel):
    """delay None: the process resumes now, before an event scheduled earlier for the same time."""
    env, order = kernel(0), []

    def waiter():
        yield env.timeout(5.0)
        order.append("redirected")

    proc = env.process(waiter())

    def other():
        yield env.timeout(1.0)
        env.timeout(0).callbacks.append(lambda _e: order.append("normal"))
        env.redirect(proc, proc.target, None)

    env.process(other())
    env.run()
    assert order == ["redirected", "normal"]
