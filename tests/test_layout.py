"""One layout rule (rlsim/sim/costs/layout.py) for every "how many GPUs" question: memory, the reshard,
the fleet and validation read the same ParallelLayout, so they cannot disagree about a layout validation
admits."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rlsim.sim.costs.layout import ParallelLayout
from rlsim.sim.costs.memory import expert_split, training_memory_per_gpu
from rlsim.sim.costs.moe import expert_params
from rlsim.sim.costs.resharding import expert_reshard_bytes_per_gpu
from rlsim.sim.hardware import load_profile
from rlsim.sim.model_shapes import ModelShape, resolve_preset
from rlsim.sim.scenario.checks import check_roles
from rlsim.sim.scenario.loader import load_scenario
from rlsim.tools.cli import app

QWEN = ModelShape(**resolve_preset("qwen3-30b-a3b"))  # 128 experts
MOE = Path(__file__).resolve().parents[1] / "scenarios" / "sync" / "moe-qwen3-30b-a3b-ep.yaml"
runner = CliRunner()


def _actor_layout(scn, tp: int, pp: int, ep: int, gpus_per_node: int, nodes: int):
    """The MoE scenario with the actor re-laid out on a pool of `nodes` x `gpus_per_node` GPUs (unvalidated)."""
    pools = dict(scn.cluster.pools)
    pools["main"] = pools["main"].model_copy(update={"gpus_per_node": gpus_per_node, "nodes": nodes})
    roles = {"actor": scn.roles["actor"].model_copy(update={"parallel": scn.roles["actor"].parallel.model_copy(
        update={"tp": tp, "pp": pp, "ep": ep})})}
    return scn.model_copy(update={"cluster": scn.cluster.model_copy(update={"pools": pools}), "roles": roles})


def actor_problems(scn) -> list:
    return [p for p in check_roles(scn) if p.path.startswith("roles.actor")]


def test_tp6_ep4_dp2_experts_are_over_4_gpus_in_memory_and_in_the_reshard():
    """Megatron puts whole experts on ep 4 GPUs (expert tensor split 1 as 4 does not divide 6): memory used to
    price them over max(tp, ep) = 6 GPUs while the reshard gathered over 4."""
    layout = ParallelLayout(tp=6, pp=1, dp=2, ep=4)
    assert (layout.expert_tensor_split, layout.expert_group, layout.expert_dp) == (1, 4, 3)
    (_, _), (experts, copies) = expert_split(QWEN, layout)
    assert experts == pytest.approx(expert_params(QWEN) / 4) and copies == 3
    e = expert_params(QWEN) * QWEN.weight_bytes
    assert expert_reshard_bytes_per_gpu("hybridflow-v", e, 6, 1, 2, 4, 6, 6) == pytest.approx(3 / 4 * e)
    mem = training_memory_per_gpu(QWEN, load_profile("h100-sxm"), 6, 1, 2, 4096, ep=4)
    dense = (QWEN.params - expert_params(QWEN)) / 6
    assert mem.weights == pytest.approx(2.0 * (dense + expert_params(QWEN) / 4))
    scn = _actor_layout(load_scenario(MOE), 6, 1, 4, 6, 2)
    assert actor_problems(scn) == []  # validation admits this layout: memory and the reshard must agree on it


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(gpn=6, nodes=2, tp=6, pp=1, ep=4)  # whole experts over 4 GPUs, not max(tp, ep) = 6
@example(gpn=12, nodes=2, tp=6, pp=2, ep=4)
@example(gpn=8, nodes=2, tp=2, pp=1, ep=8)  # the plan space's tp 2 / ep 8
@given(gpn=st.sampled_from([1, 2, 4, 6, 8, 12, 16]), nodes=st.integers(1, 4), tp=st.sampled_from([1, 2, 3, 4, 6, 8]),
       pp=st.integers(1, 4), ep=st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128]))
def test_every_admitted_layout_has_one_expert_shard_for_memory_and_the_reshard(gpn, nodes, tp, pp, ep):
    scn = _actor_layout(load_scenario(MOE), tp, pp, ep, gpn, nodes)
    if actor_problems(scn):
        return  # validation refuses it: nothing is priced
    layout = scn.layout("actor")
    (dense, dense_dp), (experts, expert_dp) = expert_split(QWEN, layout)
    total = expert_params(QWEN)
    # Memory: each GPU holds 1/(expert group x pp) of the experts, the copies tile the role's GPUs exactly.
    assert layout.expert_group * layout.expert_dp * layout.pp == layout.gpus == scn.role_gpus("actor")
    assert experts * layout.expert_group_gpus == pytest.approx(total)
    # The reshard: hybridflow-v gathers the (n - 1)/n the GPU lacks over the n GPUs holding one copy.
    e = total * QWEN.weight_bytes
    if ep > 1:
        gathered = expert_reshard_bytes_per_gpu("hybridflow-v", e, tp, pp, layout.dp, ep, 8, 8)
        assert e - gathered == pytest.approx(experts * QWEN.weight_bytes, rel=1e-9)
        # 3D-HybridEngine into an engine of the training's own expert shard: nothing moves.
        same = ParallelLayout(tp=layout.expert_group, ep=ep, engine=True)
        if pp == 1 and not same.expert_problem():
            assert expert_reshard_bytes_per_gpu("3d-hybrid-engine", e, tp, pp, layout.dp, ep, same.tp, ep) == \
                pytest.approx(0.0, abs=1.0)


def test_an_engine_with_pipeline_stages_is_refused_in_one_line():
    res = runner.invoke(app, ["validate", "quickstart", "--set", "roles.rollout.parallel.pp=2"])
    problems = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(problems) == 1, (res.exit_code, res.output)
    assert "roles.rollout.parallel.pp: must be 1 for an engine role, got 2" in problems[0]


def test_the_fleet_and_the_memory_check_size_an_engine_alike():
    scn = load_scenario(MOE)
    layout = scn.layout("rollout")
    assert layout.engine and layout.engine_gpus == 4 and scn.role_gpus("rollout") // layout.engine_gpus == 4
    actor = scn.layout("actor")
    assert (actor.dp, actor.expert_group, actor.expert_dp) == (16, 8, 2)
