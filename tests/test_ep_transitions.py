"""Expert parallelism in the colocated train -> generate transition, in host offload and in an eager engine's
kernel launches: worked numbers for Qwen3-30B-A3B (docs/operators.md, "Expert parallelism"), ep 1 unchanged, and
the shipped MoE scenario."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rlsim.sim.costs.engine_kinds import engine_overheads
from rlsim.sim.costs.generation import PrefillCost, decode_coefficients, kernels_per_layer
from rlsim.sim.costs.memory import training_memory_per_gpu
from rlsim.sim.costs.moe import expert_params
from rlsim.sim.costs.offload import offload_bytes_per_gpu, offload_time
from rlsim.sim.costs.resharding import (
    expert_reshard_bytes_per_gpu,
    expert_reshard_time,
    reshard_bytes_per_gpu,
    reshard_time,
)
from rlsim.sim.costs.transition import TransitionSetup, megatron_gather_time, to_generate
from rlsim.sim.hardware import load_profile
from rlsim.sim.model_shapes import ModelShape, resolve_preset
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.simulate import simulate

QWEN = ModelShape(**resolve_preset("qwen3-30b-a3b"))
H100 = load_profile("h100-sxm")
E = expert_params(QWEN) * QWEN.weight_bytes  # 48 layers x 3 x 2048 x 768 x 128 experts x 2 bytes = 57.98 GB
D = QWEN.weight_bytes_total - E  # 3.08 GB: attention, router, embeddings, norms
MOE = Path(__file__).resolve().parents[1] / "scenarios" / "sync" / "moe-qwen3-30b-a3b-ep.yaml"
GB = 1e9


def test_expert_bytes_of_qwen3_30b_a3b():
    assert E == pytest.approx(57.982e9, rel=1e-4) and D == pytest.approx(3.0818e9, rel=1e-4)


@pytest.mark.parametrize(("train", "gen", "share"), [
    # (train tp, pp, ep), (engine tp, ep): the share of all expert bytes each GPU receives
    ((1, 1, 8), (8, 8), 0.0),            # same ep over the same GPUs: nothing moves
    ((2, 1, 8), (8, 8), 0.0),            # ep 8 over tp 2 x dp 8: still whole experts, 16 per GPU
    ((1, 1, 8), (4, 4), 1 / 4 - 1 / 8),  # the engine needs 32 experts, 16 are local
    ((1, 1, 8), (8, 1), 1 / 8 - 1 / 64),  # TP-sliced engine: a 1/8 slice of every expert; 1/8 of 16 is local
    ((1, 1, 8), (8, 2), 1 / 8 - 1 / 8 * 1 / 4),  # 64 experts split 4 ways; 1/4 of the 16 local ones is held
    ((1, 2, 8), (8, 8), 1 / 8 - 1 / 16),  # pp 2: the stage holds half the layers of its 16 experts
    ((8, 1, 1), (8, 8), 1 / 8 - 1 / 64),  # TP-sliced training into an EP engine: the mirror case
    ((8, 1, 8), (8, 8), 0.0),            # ep = tp in training too (expert tensor split 1)
    ((4, 1, 2), (8, 8), 1 / 8 - 1 / 16),  # training holds half of each of 64 experts: half of its 16 is local
])
def test_3d_hybrid_engine_moves_the_missing_share_of_the_experts(train, gen, share):
    (ttp, tpp, tep), (gtp, gep) = train, gen
    moved = expert_reshard_bytes_per_gpu("3d-hybrid-engine", E, ttp, tpp, 16 // (ttp * tpp), tep, gtp, gep)
    assert moved == pytest.approx(share * E, abs=1.0)


@pytest.mark.parametrize(("tp", "pp", "gen_tp"), [(1, 1, 4), (4, 1, 2), (8, 1, 8), (8, 2, 4), (2, 1, 8)])
def test_without_ep_the_experts_follow_table_2(tp, pp, gen_tp):
    """ep 1 on both sides: the expert formula is HybridFlow's Table 2 on the expert bytes."""
    dp = 16 // (tp * pp)
    for method in ("3d-hybrid-engine", "hybridflow-v", "naive"):
        assert expert_reshard_bytes_per_gpu(method, E, tp, pp, dp, 1, gen_tp, 1) == pytest.approx(
            reshard_bytes_per_gpu(method, E, tp, pp, dp, gen_tp), rel=1e-12, abs=1.0)


def test_hybridflow_v_gathers_the_experts_over_the_expert_group():
    # tp 2, ep 8: max(tp, ep) = 8 GPUs share a layer's experts; each gathers the 7/8 it lacks
    assert expert_reshard_bytes_per_gpu("hybridflow-v", E, 2, 1, 8, 8, 8, 8) == pytest.approx(7 / 8 * E)


def setup(train=(1, 1, 8), gen=(4, 4), sharding="megatron") -> TransitionSetup:
    (tp, pp, ep), (gtp, gep) = train, gen
    return TransitionSetup(
        model=QWEN, hw=H100, sharding=sharding, train_tp=tp, train_pp=pp, train_dp=16 // (tp * pp), gen_tp=gtp,
        gpus_per_node=8, reshard="3d-hybrid-engine", engine_kind="vllm-v1", cuda_graphs=True, max_num_seqs=256,
        kv_pool_bytes_per_gpu=0.0, sleep_level=1, host_s=0.0, train_ep=ep, gen_ep=gep)


def test_transition_gather_worked_number():
    """Actor tp 1 ep 8 on 16 GPUs into TP4 / ep 4 engines: the dense 3.08 GB is whole on every GPU (t x p = 1,
    Table 2 moves nothing); of the experts each GPU holds 1/8 and needs 1/4: 7.25 GB over NVLink (450 GB/s,
    the all-gather ring of the 8 GPUs that share the experts), 16.1 ms."""
    gather = to_generate(setup()).gather
    assert E / 8 == pytest.approx(7.2478e9, rel=1e-4)
    assert H100.intra_node_bytes_per_s() == 450e9
    assert gather == pytest.approx(E / 8 / 450e9 + 7 * H100.collective_latency_s, rel=1e-12)
    assert gather == pytest.approx(0.01612, abs=1e-5)
    # the same ep 8 on both sides, over the same GPUs: nothing to move at all
    assert to_generate(setup(gen=(8, 8))).gather == 0.0
    # before expert parallelism was priced, t x p = 1 moved nothing either: the ep 4 engines' missing experts
    # are what this adds
    assert reshard_time("3d-hybrid-engine", QWEN.weight_bytes_total, H100, 1, 1, 16, 4) == 0.0


def test_transition_without_ep_is_unchanged_and_fsdp_ignores_ep():
    for train, gen in (((8, 1, 1), (4, 1)), ((4, 2, 1), (8, 1)), ((2, 1, 1), (2, 1))):
        s = setup(train, gen)
        assert megatron_gather_time(s) == reshard_time("3d-hybrid-engine", QWEN.weight_bytes_total, H100,
                                                       s.train_tp, s.train_pp, s.train_dp, s.gen_tp)
    # FSDP gathers every parameter from its data-parallel peers whatever the expert layout
    assert to_generate(setup(sharding="fsdp")).gather == to_generate(
        replace(setup(sharding="fsdp"), train_ep=1, gen_ep=1)).gather
    # dense part and experts add up: ep 8 training into a TP-sliced TP8 engine
    s = setup((8, 1, 8), (8, 1))
    assert megatron_gather_time(s) == pytest.approx(
        reshard_time("3d-hybrid-engine", D, H100, 8, 1, 2, 8)
        + expert_reshard_time("3d-hybrid-engine", E, H100, 8, 1, 2, 8, 8, 1), rel=1e-12)
    assert megatron_gather_time(s) > 0.0


def test_offload_moves_the_gpus_expert_shard():
    """Megatron (params and grads replicated over dp, optimizer sharded), tp 1 / dp 16 on 16 GPUs: at ep 8 a GPU
    holds the dense 1.54B parameters and 1/8 of the 28.99B expert parameters: bf16 weights 10.33 GB, fp32 grads
    20.66 GB, Adam states 22.90 GB (over the 16 ranks, experts over their 2 expert data-parallel ranks)."""
    dense, experts = QWEN.params - expert_params(QWEN), expert_params(QWEN)
    kw = dict(params=True, grads=True, optimizer=True, shard_optimizer=True, shard_params=False, shard_grads=False)
    at8 = offload_bytes_per_gpu(QWEN, 1, 1, 16, ep=8, **kw)
    expected = 2 * (dense + experts / 8) + 4 * (dense + experts / 8) + 12 * (dense / 16 + experts / 8 / 2)
    assert at8 == pytest.approx(expected, rel=1e-12)
    assert at8 / GB == pytest.approx(53.89, abs=0.01)
    assert offload_bytes_per_gpu(QWEN, 1, 1, 16, **kw) / GB == pytest.approx(206.09, abs=0.01)  # ep 1: all experts
    # the distributed optimizer was already split over all 16 ranks: ep does not change its share
    opt = dict(params=False, grads=False, optimizer=True)
    assert offload_bytes_per_gpu(QWEN, 1, 1, 16, ep=8, **opt) == pytest.approx(
        offload_bytes_per_gpu(QWEN, 1, 1, 16, **opt), rel=1e-9)
    # offload moves exactly what training memory holds
    mem = training_memory_per_gpu(QWEN, H100, 1, 1, 16, 4096, shard_grads=False, ep=8)
    assert at8 == pytest.approx(mem.weights + mem.grads + mem.optimizer, rel=1e-12)
    assert offload_time(QWEN, H100, 1, 1, 16, ep=8, **kw) == pytest.approx(at8 / H100.pcie_bytes_per_s)


def test_shipped_moe_scenario_transition():
    def transition(*sets: str) -> dict:
        res = simulate(load_scenario(MOE, ["steps=1", "warmup_steps=0", *sets]))
        return res.steps.iloc[-1].to_dict()

    shipped = transition()
    assert shipped["timing_s/transition/gather"] == pytest.approx(0.01612, abs=1e-5)
    same = transition("roles.rollout.parallel.tp=8", "roles.rollout.parallel.ep=8")
    assert same.get("timing_s/transition/gather", 0.0) == 0.0 and same["timing_s/transition/load"] > 0
    offload = transition("roles.actor.train.param_offload=true", "roles.actor.train.grad_offload=true")
    # out before generation and back after it: twice the 53.89 GB of the GPU's state over its PCIe link
    assert offload["timing_s/transition/offload"] == pytest.approx(2 * 53.89e9 / H100.pcie_bytes_per_s, rel=1e-3)
    assert shipped["timing_s/transition/offload"] == pytest.approx(2 * 22.90e9 / H100.pcie_bytes_per_s, rel=1e-3)


def test_an_eager_ep_engine_launches_dispatch_and_combine_every_moe_layer():
    """Without CUDA graphs every kernel is launched from the host: an MoE layer at ep > 1 adds its dispatch and
    combine (20 kernels at TP 8 instead of 18): 48 layers x 2 x the profile's launch cost per step."""
    assert (kernels_per_layer(8, moe=True), kernels_per_layer(8, moe=True, ep=8)) == (18, 20)
    assert kernels_per_layer(8, moe=False, ep=8) == kernels_per_layer(8)  # a dense model has nothing to dispatch
    eager = engine_overheads("vllm-v1", H100, False)
    extra = 48 * 2 * eager.launch_per_kernel_s
    assert extra > 0
    for cuda_graphs, added in ((False, extra), (True, 0.0)):
        o = engine_overheads("vllm-v1", H100, cuda_graphs)
        ep1, ep8 = (decode_coefficients(QWEN, H100, 8, 16, overheads=o, ep=ep).fixed for ep in (1, 8))
        assert ep8 - ep1 == pytest.approx(added, abs=1e-15)
        p1, p8 = (PrefillCost(QWEN, H100, 8, o, ep)._step_s for ep in (1, 8))
        assert p8 - p1 == pytest.approx(added, abs=1e-15)
