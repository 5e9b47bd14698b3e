"""The mechanisms RL systems shipped after the seed's: each one's defining behaviour, on a small run.

docs/schedules-2026.md describes each mechanism, its knobs and its scenario.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["steps=2", "warmup_steps=0", "algorithm.prompts_per_step=8"]


def run(path: str, *overrides: str, small=SMALL):
    return simulate(load_scenario(ROOT / path, [*small, *overrides]))


# ---------------------------------------------------------------- rollout log-probs, every schedule

LOGPROB_CASES = {
    "hybridflow": "scenarios/quickstart.yaml",
    "one-step-off": "scenarios/async/verl-dapo-7b-h20-one-step-off.yaml",
    "fully-async": "scenarios/async/areal-1.5b-h800.yaml",
    "roll": "scenarios/roll/rlvr-qwen2.5-7b-async.yaml",
    "agentic-roll": "scenarios/roll/agentic-sokoban.yaml",
}


@pytest.mark.parametrize("case", sorted(LOGPROB_CASES))
def test_rollout_logprobs_remove_the_old_log_prob_pass_from_the_timeline(case):
    """recompute_logprob: false: no actor forward pass (timeline) and no old_log_prob column, in every schedule."""
    with_pass = run(LOGPROB_CASES[case], "schedule.recompute_logprob=true")
    without = run(LOGPROB_CASES[case], "schedule.recompute_logprob=false")
    actor_fwd = with_pass.timeline.query("role == 'actor' and phase == 'forward'")
    assert len(actor_fwd) > 0 and "timing_s/old_log_prob" in with_pass.steps.columns, case
    assert without.timeline.query("role == 'actor' and phase == 'forward'").empty, case
    assert "timing_s/old_log_prob" not in without.steps.columns, case
    # The actor's busy time drops by exactly the pass it no longer runs (same lengths: same seed and draws).
    busy = {k: (r.timeline.query("role == 'actor'").eval("(end_s - start_s) * gpus")).sum()
            for k, r in (("with", with_pass), ("without", without))}
    fwd = (actor_fwd.end_s - actor_fwd.start_s).mul(actor_fwd.gpus).sum()
    if case in ("hybridflow", "one-step-off"):  # synchronous batches: the same samples are trained either way
        assert busy["with"] - busy["without"] == pytest.approx(fwd, rel=1e-6), case


def test_verl_import_maps_rollout_log_probs_for_the_synchronous_trainer():
    from import_helpers import fetch_wheel

    from rlsim.tools.importers.command import run_import

    cfg = fetch_wheel("verl", "0.9.1") / "verl" / "trainer" / "config" / "ppo_trainer.yaml"
    base = ["actor_rollout_ref.rollout.name=vllm"]
    assert run_import("verl", cfg, base).scenario.schedule.recompute_logprob is True  # verl's default
    imported = run_import("verl", cfg, [*base, "algorithm.rollout_correction.bypass_mode=true"])
    assert imported.scenario.schedule.kind == "hybridflow"
    assert imported.scenario.schedule.recompute_logprob is False
    assert imported.ledger.used["algorithm.rollout_correction.bypass_mode"].startswith("schedule.recompute")
