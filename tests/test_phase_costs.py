"""PhaseCosts (rlsim/sim/costs/phase_costs.py): every phase's seconds from the scenario alone, without SimPy
(tests/test_architecture.py checks that importing it loads no SimPy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlsim.sim.costs.lora import adapter_bytes
from rlsim.sim.costs.phase_costs import PhaseCosts
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.scenario.schema import HybridSwitchOptions

ROOT = Path(__file__).resolve().parents[1] / "scenarios"
PPO = ROOT / "hybridflow/ppo-llama-7b.yaml"  # actor, critic, reference, reward on one pool
LORA = ROOT / "sync/grpo-lora.yaml"
SEQS = np.full(1024, 2048, dtype=np.int64)  # the scenario's batch: 1024 samples


def test_a_smaller_trainer_takes_longer_to_update():
    """The data-parallel size is the schedule's now (re-splitting shrinks it): half the ranks, longer passes."""
    scn = load_scenario(PPO, [])
    full = PhaseCosts(scn)
    dp = scn.layout("actor").dp
    half = PhaseCosts(scn, dp_size=lambda role: dp // 2 if role == "actor" else scn.layout(role).dp)
    assert half.phase_time("update_actor", "actor", SEQS) > 1.5 * full.phase_time("update_actor", "actor", SEQS)
    assert half.phase_time("update_critic", "critic", SEQS) == full.phase_time("update_critic", "critic", SEQS)
    assert 0 < full.phase_mfu("update_actor", "actor", SEQS, full.phase_time("update_actor", "actor", SEQS)) < 1


def test_offloaded_state_moves_once_for_the_critic_twice_for_others_never_for_the_actor():
    offload = [f"roles.{r}.train.param_offload=true" for r in ("actor", "critic", "reference")]
    costs = PhaseCosts(load_scenario(PPO, offload))
    assert costs.offload_time("critic") > 0
    assert costs.state_moves("actor") == 0.0  # the hybrid-engine switch moves the actor's state
    assert costs.state_moves("critic") == costs.offload_time("critic")
    assert costs.state_moves("reference") == 2 * costs.offload_time("reference")
    assert PhaseCosts(load_scenario(PPO, [])).state_moves("critic") == 0.0


def test_the_switchs_fixed_host_cost_adds_to_the_transition():
    costs = PhaseCosts(load_scenario(PPO, []))
    free, paid = HybridSwitchOptions(switch_overhead_s=0.0), HybridSwitchOptions(switch_overhead_s=1.5)
    up = costs.transition_parts(paid, True).total - costs.transition_parts(free, True).total
    assert up == pytest.approx(1.5)
    assert costs.transition_parts(paid, False).total > 0


def test_a_lora_sync_moves_the_adapter_only():
    scn = load_scenario(LORA, [])
    lora = scn.schedule.lora
    model = scn.models[scn.roles["actor"].model]
    full, adapter = PhaseCosts(scn), PhaseCosts(scn, lora)
    assert adapter.sync_bytes() == adapter_bytes(model, lora.rank, lora.targets) < full.sync_bytes() / 10
    assert adapter.synced_tensors() == model.layers * 2 * 7  # all-linear: seven adapted modules a layer
    assert adapter.sync_quantise_time() == 0.0
    store = PhaseCosts(scn, lora.model_copy(update={"sync": "store", "store_gb_per_s": 2.0}))
    assert store.weight_sync_time() == pytest.approx(2 * adapter.sync_bytes() / 2e9)  # written once, read once
    assert adapter.phase_time("update_actor", "actor", SEQS) < full.phase_time("update_actor", "actor", SEQS)


def test_optimizer_updates_follow_the_schedule_spec():
    """verl's require_batches sets an asynchronous trainer's updates a step; others use algorithm.mini_batches."""
    scn = load_scenario(PPO, ["algorithm.mini_batches=4"])
    assert PhaseCosts(scn).mini_batches == 4
    v1 = load_scenario(ROOT / "async/verl-v1-colocate-async.yaml", ["schedule.require_batches=3"])
    assert PhaseCosts(v1).mini_batches == 3
