"""Expert parallelism (parallel.ep): the all-to-all's cost, where EP runs, what each GPU reads and holds,
validation in one line per problem, and the importers' mapping of the frameworks' EP sizes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rlsim.sim.costs.collectives import alltoall_time
from rlsim.sim.costs.generation import PrefillCost, decode_coefficients, linear_layers_time
from rlsim.sim.costs.memory import training_memory_per_gpu
from rlsim.sim.costs.moe import (
    ep_alltoall_time,
    ep_read_and_flops,
    expert_params,
    max_normal_quantile,
    read_imbalance,
    token_imbalance,
)
from rlsim.sim.costs.training import train_pass_time
from rlsim.sim.hardware import load_profile
from rlsim.sim.model_shapes import ModelShape, resolve_preset
from rlsim.tools.cli import app

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
H100 = load_profile("h100-sxm")
MOE = ModelShape(**resolve_preset("qwen3-30b-a3b"))
runner = CliRunner()


def test_alltoall_worked_number():
    """1 MB per GPU over 8 H100s of a node: 7.6 us send/recv latency + 7/8 MB at 450 GB/s = 9.544 us.
    Over 16 GPUs on two nodes the half bound for the other node crosses a 400 Gb/s NIC (50 GB/s):
    19.1 us + 0.5 MB / 50 GB/s = 29.1 us (NVLink's 7/16 MB in parallel is faster)."""
    assert alltoall_time(1e6, 8, 450e9, 7.6e-6) == pytest.approx(7.6e-6 + 1e6 * 7 / 8 / 450e9, rel=1e-12)
    assert ep_alltoall_time(H100, 1e6, 8, 8) == pytest.approx(9.5444e-6, rel=1e-4)
    assert ep_alltoall_time(H100, 1e6, 16, 8) == pytest.approx(29.1e-6, rel=1e-9)
    assert ep_alltoall_time(H100, 1e6, 1, 8) == 0.0 and alltoall_time(0.0, 8, 450e9, 1e-6) == 0.0


def test_p2p_latency_comes_from_the_send_recv_fit():
    """The shipped H100 and A100 values are the calibrate-ops fits of Vidur's send_recv.csv rows; a profile
    without them falls back to documented ratios of the all-reduce latency."""
    from rlsim.tools.calibration import ops_data
    from rlsim.tools.calibration.ops_run import fit_collectives

    for profile, gpu in (("h100-sxm", "h100"), ("a100-80gb", "a100")):
        fits, _ = fit_collectives(ops_data.read_collectives(ROOT / "hardware_profiles/operators/vidur", gpu))
        by_node = {c.per_node: c.latency_us for c in fits if c.kind == "send_recv" and c.workers == 2}
        hw = load_profile(profile)
        assert hw.p2p_latency_us == pytest.approx(by_node[2], abs=0.05)
        assert hw.p2p_latency_inter_node_us == pytest.approx(by_node[1], abs=0.05)
        assert hw.p2p_latency_inter_node_us > hw.p2p_latency_us  # a NIC hop is slower than NVLink
    bare = H100.model_copy(update={"p2p_latency_us": None, "p2p_latency_inter_node_us": None})
    assert bare.p2p_latency_s() == pytest.approx(4.0 * H100.collective_latency_s)
    assert bare.p2p_latency_s(inter_node=True) == pytest.approx(10.0 * H100.collective_latency_s)


def test_ep_on_a_node_is_cheaper_than_across_nodes():
    """The same ep = 8 on one 8-GPU node vs spread over two 4-GPU nodes: decode, prefill and training."""
    on = decode_coefficients(MOE, H100, 8, 64, ep=8, gpus_per_node=8).step_time(64 * 2000)
    across = decode_coefficients(MOE, H100, 8, 64, ep=8, gpus_per_node=4).step_time(64 * 2000)
    assert across > on * 1.05
    assert PrefillCost(MOE, H100, 8, ep=8, gpus_per_node=4).time(4096, 4096**2) > \
        PrefillCost(MOE, H100, 8, ep=8, gpus_per_node=8).time(4096, 4096**2)
    lens = np.full(64, 2048)
    train = {g: train_pass_time(MOE, H100, lens, 1, 1, 8, 16384, 1, 1, gpus_per_node=g, ep=8) for g in (8, 4)}
    assert train[4] > train[8] > 0


# The dense-roofline pricing of the experts (a profile without the fitted grouped GEMM, tests/test_moe_gemm.py).
ROOFLINE = H100.model_copy(
    update=dict.fromkeys(("moe_gemm_eta_mem", "moe_gemm_eta_compute", "moe_routing_per_token_us")))


def test_ep_adds_alltoalls_to_a_decode_step():
    """ep = tp = 8: each MoE layer adds dispatch + combine; ep = 1 stays the TP-sliced step, bit for bit.
    With the fitted grouped GEMM (a roofline of each GPU's bytes and FLOPs, no per-expert cost) 16 whole
    experts a GPU read and multiply what 128 eighths do, so ep 8 still only adds its all-to-alls."""
    plain = decode_coefficients(MOE, ROOFLINE, 8, 128)
    assert decode_coefficients(MOE, ROOFLINE, 8, 128, ep=1).intercept == plain.intercept
    ep = decode_coefficients(MOE, ROOFLINE, 8, 128, ep=8)
    a2a = 2 * MOE.layers * ep_alltoall_time(H100, 128 / 8 * 8 * MOE.hidden * 2.0, 8, 8)
    assert ep.intercept - plain.intercept >= a2a * 0.999  # plus the busiest rank's extra experts
    assert ep.slope == plain.slope and ep.fixed == plain.fixed
    fitted = {e: decode_coefficients(MOE, H100, 8, 128, ep=e).intercept for e in (1, 8)}
    assert fitted[8] > fitted[1]  # (less the gating of 1/8 of the tokens per GPU)


def test_decode_with_ep_eq_tp_reads_an_eighth_of_the_experts_per_gpu():
    """At a batch that touches every expert each of 8 GPUs reads exactly its 16 of the 128 experts
    (1/8 of the expert bytes), the same as TP slicing; at batch 1 the busiest rank reads more than the mean."""
    experts = expert_params(MOE) * MOE.weight_bytes
    dense = MOE.weight_bytes_total - experts
    read, _ = ep_read_and_flops(MOE, 4096, 8)
    assert (read - dense) / 8 == pytest.approx(experts / 8, rel=1e-9)
    assert linear_layers_time(MOE, ROOFLINE, 8, 4096, ep=8) == pytest.approx(
        linear_layers_time(MOE, ROOFLINE, 8, 4096), rel=0.01)
    assert read_imbalance(MOE, 1, 8) > 1.5  # one token's 8 experts land unevenly on 8 ranks
    assert 1.0 <= token_imbalance(MOE, 4096, 8) < 1.1  # many tokens even out
    assert max_normal_quantile(2) == pytest.approx(0.5642, abs=0.03)  # exact E[max of 2 normals] = 1/sqrt(pi)
    assert max_normal_quantile(8) == pytest.approx(1.4236, abs=0.02)


def test_training_memory_per_gpu_falls_with_ep():
    """Megatron (distributed optimizer, params and grads replicated over DP): tp = 1, dp = 8; the experts'
    weights and grads are split ep ways, the optimizer state (already over all 8 ranks) stays the same."""
    mems = [training_memory_per_gpu(MOE, H100, 1, 1, 8, 8192, shard_grads=False, ep=ep) for ep in (1, 2, 4, 8)]
    totals = [m.total for m in mems]
    assert all(a > b for a, b in zip(totals, totals[1:], strict=False))
    assert mems[0].optimizer == pytest.approx(mems[3].optimizer, rel=1e-9)
    experts = expert_params(MOE)
    assert mems[0].weights - mems[3].weights == pytest.approx(2.0 * experts * (1 - 1 / 8), rel=1e-9)
    dense = training_memory_per_gpu(ModelShape(**resolve_preset("qwen2.5-7b")), H100, 1, 1, 8, 8192, ep=8)
    assert dense == training_memory_per_gpu(ModelShape(**resolve_preset("qwen2.5-7b")), H100, 1, 1, 8, 8192)


MOE_SETS = ["--set", "models.policy.preset=qwen3-30b-a3b", "--set", "cluster.pools.gen.nodes=2"]


@pytest.mark.parametrize(("sets", "line"), [
    (["--set", "roles.rollout.parallel.ep=2"],
     "roles.rollout.parallel.ep: 2 needs an MoE model, but model 'policy' is dense (num_experts 0)"),
    ([*MOE_SETS, "--set", "roles.rollout.parallel.ep=4"],
     "roles.rollout.parallel.ep: must divide the engine's tp (2): experts are sharded over the engine's GPUs, got 4"),
    ([*MOE_SETS, "--set", "roles.actor.parallel.ep=32"],
     "roles.actor.parallel.ep: must divide tp × dp (16): experts are sharded over the data- and tensor-parallel "
     "ranks, got 32"),
    ([*MOE_SETS, "--set", "models.policy.num_experts=100", "--set", "roles.actor.parallel.ep=8"],
     "roles.actor.parallel.ep: must divide the model's num_experts (100), got 8"),
])
def test_bad_ep_exits_2_with_one_line(sets, line):
    res = runner.invoke(app, ["validate", str(QUICKSTART), *sets])
    assert res.exit_code == 2, res.output
    assert f"{QUICKSTART}: {line}" in res.output.splitlines()
    assert "Traceback" not in res.output


def test_an_ep_scenario_runs_and_prices_ep(tmp_path):
    """Quickstart on Qwen3-30B-A3B: rollout ep = tp = 2 pays its all-to-alls (a slower step); the result
    otherwise comes out like any run."""
    common = [*MOE_SETS, "--set", "steps=1", "--set", "algorithm.prompts_per_step=8", "--no-plots"]
    times = {}
    for ep in (1, 2):
        out = tmp_path / f"ep{ep}"
        res = runner.invoke(app, ["run", str(QUICKSTART), *common, "--set", f"roles.rollout.parallel.ep={ep}",
                                  "--out", str(out)])
        assert res.exit_code == 0, res.output
        times[ep] = json.loads((out / "summary.json").read_text())["step_time_s"]
    assert times[2] > times[1]


@settings(max_examples=60, deadline=None)
@given(tp_log=st.integers(0, 3), ep_log=st.integers(0, 3), b1=st.integers(1, 2048), b2=st.integers(1, 2048),
       gpn=st.sampled_from([4, 8]), ctx=st.integers(1, 8192))
def test_step_time_positive_and_non_decreasing_in_tokens(tp_log, ep_log, b1, b2, gpn, ctx):
    tp, ep = 2**tp_log, 2 ** min(ep_log, tp_log)  # any valid engine ep: a divisor of tp
    lo, hi = sorted((b1, b2))
    step = {b: decode_coefficients(MOE, H100, tp, b, ep=ep, gpus_per_node=gpn).step_time(b * ctx) for b in (lo, hi)}
    assert 0 < step[lo] <= step[hi]
    pre = PrefillCost(MOE, H100, tp, ep=ep, gpus_per_node=gpn)
    assert 0 < pre.time(lo, lo * ctx) <= pre.time(hi, hi * ctx) or lo == hi


def test_verl_import_maps_expert_parallel_sizes():
    """verl's Megatron expert_model_parallel_size and its rollout's expert_parallel_size become parallel.ep."""
    from import_helpers import assert_complete, fetch_wheel

    from rlsim.tools.importers.command import run_import

    config = fetch_wheel("verl", "0.9.1") / "verl" / "trainer" / "config" / "ppo_megatron_trainer.yaml"
    imported = run_import("verl", config, [
        "actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.actor.megatron.expert_model_parallel_size=8",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=4", "actor_rollout_ref.rollout.expert_parallel_size=4",
        "trainer.nnodes=2", "actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B", "algorithm.adv_estimator=grpo"])
    roles = imported.scenario.roles
    assert roles["actor"].parallel.ep == 8 and roles["rollout"].parallel.ep == 4
    assert imported.ledger.used["actor_rollout_ref.actor.megatron.expert_model_parallel_size"]
    assert_complete(imported.ledger)


@pytest.mark.parametrize(("framework", "config", "override", "roles"), [
    ("areal", "areal/gsm8k_grpo.yaml", "actor.backend=megatron:d2t2e4", ("actor", "reference")),
    ("roll", "roll/rlvr/rlvr_config.yaml", "actor_train.strategy_args.strategy_config.expert_model_parallel_size=4",
     ("actor",)),
])
def test_areal_and_roll_expert_sizes_become_parallel_ep(framework, config, override, roles):
    """AReaL's allocation dimension `e` and ROLL's Megatron expert_model_parallel_size reach parallel.ep:
    on these dense fixtures the imported scenario is refused for it, one line per role, naming the field."""
    from rlsim.tools.importers.command import run_import

    with pytest.raises(Exception) as err:
        run_import(framework, ROOT / "tests" / "fixtures" / "import" / config, [override])
    for role in roles:
        assert f"roles.{role}.parallel.ep: 4 needs an MoE model, but model 'policy' is dense" in str(err.value)


def test_training_and_forward_passes_pay_their_alltoalls():
    """A forward-only pass pays exactly 2 all-to-alls per MoE layer and micro-batch: 8 ranks x 8 sequences of
    2,048 tokens, one 16,384-token micro-batch each, tp 1: 512 MiB per GPU per all-to-all, 1.04 ms on NVLink.
    An update pays 4, or 6 when full recompute re-runs the forward."""
    from rlsim.sim.costs.long_context import PassOptions
    from rlsim.sim.costs.moe import TrainingEP
    from rlsim.sim.costs.training import forward_pass_time

    lens = np.full(64, 2048)
    size = 16384 * MOE.experts_per_token * MOE.hidden * 2.0
    one = ep_alltoall_time(H100, size, 8, 8)
    assert one == pytest.approx(7.6e-6 + size * 7 / 8 / 450e9, rel=1e-12) and 1.0e-3 < one < 1.1e-3
    fwd = {ep: forward_pass_time(MOE, H100, lens, 1, 1, 8, 16384, ep=ep, gpus_per_node=8) for ep in (1, 8)}
    assert fwd[8] - fwd[1] == pytest.approx(2 * MOE.layers * one, rel=1e-9)
    moe = TrainingEP(MOE, H100, 8, 1, 1, 8)
    rank = np.full(8, 2048)
    assert moe.pass_time(rank, 1, True, "full") == pytest.approx(3 * moe.pass_time(rank, 1, False, "none"))
    assert moe.pass_time(rank, 1, True, "selective") == pytest.approx(2 * moe.pass_time(rank, 1, False, "none"))
    full = PassOptions(recompute="full")
    assert forward_pass_time(MOE, H100, lens, 1, 1, 8, 16384, opts=full, ep=8) == pytest.approx(fwd[8], rel=1e-12)


def test_validate_shows_the_expert_layout():
    from rlsim.sim.scenario.loader import load_scenario
    from rlsim.sim.scenario.placement import placement_rows

    scn = load_scenario(QUICKSTART, ["models.policy.preset=qwen3-30b-a3b", "cluster.pools.gen.nodes=2",
                                     "roles.rollout.parallel.ep=2", "roles.actor.parallel.ep=8"])
    rows = {r["role"]: r["layout"] for r in placement_rows(scn)}
    assert rows["actor"] == "tp 1 x pp 1 x dp 16, experts over ep 8"
    assert rows["rollout"] == "8 engines x tp 2, experts over ep 2"
    assert rows["reference"] == "tp 1 x pp 1 x dp 16"
