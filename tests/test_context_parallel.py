"""Context parallelism on the training side (rlsim/sim/costs/context_parallel.py, docs/long-context.md): the ring and
Ulysses exchanges, static CP's micro-batches and shared weights, dynamic CP's per-micro-batch degree, the layout and
memory, validation (exit 2, one line each) and the verl / NeMo-RL / slime import mapping."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rlsim.sim.costs.context_parallel import (
    cp_bandwidth,
    cp_pass_parts,
    dynamic_group_time,
    exchange_time,
    fitting_degrees,
    pack_micro_batches,
    pick_degree,
    ring_exchange_time,
    ulysses_exchange_time,
)
from rlsim.sim.costs.layout import ContextParallel, ParallelLayout
from rlsim.sim.costs.long_context import PassOptions
from rlsim.sim.costs.training import cp_rank_busy, forward_pass_time, rank_busy, train_pass_time
from rlsim.sim.hardware import load_profile
from rlsim.sim.model_shapes import ModelShape, resolve_preset
from rlsim.sim.scenario.checks import role_training_memory
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.simulate import simulate
from rlsim.tools.cli import app
from rlsim.tools.importers.command import run_import

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "sync" / "long-context-dynamic-cp.yaml"
FIXTURES = ROOT / "tests" / "fixtures" / "import"
A = "roles.actor.parallel"
OPTS = PassOptions(attention=True, logits="fused", entropy=False, recompute="full")
runner = CliRunner()


@pytest.fixture(scope="module")
def h100():
    return load_profile("h100-sxm")


@pytest.fixture(scope="module")
def qwen7b():
    return ModelShape(**resolve_preset("qwen2.5-7b"))


# ---------------------------------------------------------------- the exchanges


def test_exchanges_grow_with_tokens_and_degree_and_vanish_at_cp_1(h100, qwen7b):
    bw = cp_bandwidth(h100, 1, 4, 8)
    for fn in (ring_exchange_time, ulysses_exchange_time):
        assert fn(qwen7b, h100, 8192, 1, 1, 1, bw) == 0.0
        assert fn(qwen7b, h100, 4096, 4, 1, 1, bw) < fn(qwen7b, h100, 8192, 4, 1, 1, bw)
    # The ring sends cp - 1 blocks per layer; the all-to-all sends (cp - 1) / cp of its buffer.
    assert ring_exchange_time(qwen7b, h100, 8192, 2, 1, 1, bw) < ring_exchange_time(qwen7b, h100, 8192, 8, 1, 1, bw)
    # A pipeline stage exchanges for its own layers only.
    assert ring_exchange_time(qwen7b, h100, 8192, 4, 1, 2, bw) == pytest.approx(
        ring_exchange_time(qwen7b, h100, 8192, 4, 1, 1, bw) / 2)


def test_a_group_that_leaves_the_node_talks_over_the_nic(h100, qwen7b):
    assert cp_bandwidth(h100, 2, 4, 8) == h100.intra_node_bytes_per_s()
    assert cp_bandwidth(h100, 2, 8, 8) == h100.nic_bytes_per_s
    slow, fast = (ring_exchange_time(qwen7b, h100, 8192, 8, 1, 1, cp_bandwidth(h100, 1, 8, g)) for g in (4, 8))
    assert slow > fast


def test_ulysses_repeats_kv_heads_up_to_cp_and_sends_more_than_the_ring_per_pass(h100, qwen7b):
    bw = cp_bandwidth(h100, 1, 4, 8)
    # Qwen2.5-7B has 4 KV heads against 28 query heads: the ring moves K and V only, Ulysses q, k, v and the output.
    assert ulysses_exchange_time(qwen7b, h100, 8192, 4, 1, 1, bw) > ring_exchange_time(qwen7b, h100, 8192, 4, 1, 1, bw)
    # Backward: the ring sends K, V and their gradients (3 forward-equivalents in all), Ulysses 2; recompute one more.
    assert exchange_time("ring", qwen7b, h100, 8192, 4, 1, 1, bw, True) == pytest.approx(
        3 * ring_exchange_time(qwen7b, h100, 8192, 4, 1, 1, bw))
    assert exchange_time("ulysses", qwen7b, h100, 8192, 4, 1, 1, bw, True, "full") == pytest.approx(
        3 * ulysses_exchange_time(qwen7b, h100, 8192, 4, 1, 1, bw))


def test_the_ring_hides_behind_attention_at_long_sequences_and_shows_at_short_ones(h100, qwen7b):
    def comm(length: int, gpn: int) -> float:
        n = 64 * 1024 // length
        tokens, sq = 64 * 1024.0, n * float(length) ** 2
        bw = cp_bandwidth(h100, 1, 8, gpn)
        return cp_pass_parts(qwen7b, h100, tokens, sq, tokens, 1, 8, "ring", bw, 1, 1, True, OPTS)["cp_comm"]

    assert comm(65536, 8) == 0.0  # one 64k sequence inside a node: the KV ring is hidden
    assert comm(1024, 1) > 0.0  # 1k sequences over the NIC: not enough attention to hide it


def test_cp_splits_the_linear_work_and_the_ring_runs_shorter_attention_blocks(h100, qwen7b):
    tokens, sq = 32768.0, 32768.0**2
    one = cp_pass_parts(qwen7b, h100, tokens, sq, tokens, 1, 1, "ring", 0.0, 1, 1, True, OPTS)
    bw = cp_bandwidth(h100, 1, 4, 8)
    ring = cp_pass_parts(qwen7b, h100, tokens, sq, tokens, 1, 4, "ring", bw, 1, 1, True, OPTS)
    uly = cp_pass_parts(qwen7b, h100, tokens, sq, tokens, 1, 4, "ulysses", bw, 1, 1, True, OPTS)
    assert ring["linear"] < one["linear"] / 3  # a quarter of the tokens per GPU (a little lower GEMM share)
    assert ring["attention"] == uly["attention"] == pytest.approx(one["attention"] / 4, rel=0.02)
    assert ring["cp_attention"] > 0.0 == uly["cp_attention"]  # FA2 at s / cp for the ring's blocks
    assert sum(ring.values()) < sum(one.values()) / 2
    assert sum(uly.values()) < sum(one.values()) / 2


# ---------------------------------------------------------------- static and dynamic CP


def test_static_cp_micro_batches_take_budget_times_cp_tokens(h100, qwen7b):
    rank = np.full(8, 8192.0)
    cp = ContextParallel(4, "ring")
    # 65,536 tokens at 4 x 8,192 per micro-batch: 2 micro-batches, a pp-2 bubble of (2 + 1) / 2 - 1 = 1/2.
    compute, bubble = cp_rank_busy(True, None, qwen7b, h100, rank, 1, 2, 8192, OPTS, cp, 8)
    assert bubble == pytest.approx(compute / 2)


def test_dynamic_cp_runs_short_micro_batches_at_1_and_long_sequences_at_the_power_of_two_they_need(h100, qwen7b):
    assert ContextParallel(12, dynamic=True).degrees() == (1, 2, 4)
    assert ContextParallel(16, dynamic=True).degrees() == (1, 2, 4, 8, 16)
    assert ContextParallel(4).degrees() == (4,)
    assert fitting_degrees(40000, 16384, (1, 2, 4, 8)) == (4, 8)
    assert fitting_degrees(10**6, 16384, (1, 2, 4)) == (4,)  # none fits: the largest (the memory check refuses)
    bins = pack_micro_batches(np.array([40000, 9000, 7000, 5000, 3000]), 16384)
    assert sorted(b.sum() for b in bins) == [8000, 16000, 40000]
    bw = cp_bandwidth(h100, 1, 8, 8)

    def cost(lens, c):
        lens = np.asarray(lens, dtype=float)
        t = float(lens.sum())
        return sum(cp_pass_parts(qwen7b, h100, t, float((lens**2).sum()), t, 1, c, "ring", bw, 1, 1, True,
                                 OPTS).values())

    short = np.array([4000.0, 4000.0, 4000.0])
    assert pick_degree({c: cost(short, c) for c in (1, 2, 4)}) == 1
    long = np.array([40000.0])
    assert pick_degree({c: cost(long, c) for c in fitting_degrees(40000, 16384, (1, 2, 4, 8))}) == 4


def test_dynamic_group_time_is_gpu_time_over_the_group_or_its_longest_micro_batch():
    assert dynamic_group_time([(1, 1.0)] * 8, 4) == pytest.approx(2.0)
    assert dynamic_group_time([(4, 5.0), (1, 1.0)], 4) == pytest.approx(5.25)
    assert dynamic_group_time([(1, 9.0), (1, 1.0)], 4) == 9.0
    assert dynamic_group_time([], 4) == 0.0


def test_dynamic_cp_beats_static_on_a_long_tailed_batch_and_short_batches_pay_no_exchange(h100, qwen7b):
    rng = np.random.default_rng(0)
    lens = np.clip(rng.lognormal(np.log(6000), 1.0, 64), 256, 34000).round()

    def update(cp):
        dp = 16 // (cp.cp if cp else 1)
        return train_pass_time(qwen7b, h100, lens, 1, 1, dp, 16384, 4, 1, opts=OPTS, cp=cp, gpus_per_node=8,
                               balance_scope="batch")

    none, static4 = update(None), update(ContextParallel(4, "ring"))
    dynamic = update(ContextParallel(16, "ring", dynamic=True))
    assert dynamic < static4 < none
    # Sequences that all fit one GPU: dynamic CP runs each micro-batch at 1, exactly the plain pass's work.
    short = np.full(16, 2000.0)
    busy = cp_rank_busy(True, None, qwen7b, h100, short, 1, 1, 16384, OPTS, ContextParallel(2, dynamic=True), 8)[0]
    plain = sum(rank_busy(True, None, qwen7b, h100, b, 1, 1, 16384, OPTS)[0]
                for b in pack_micro_batches(short, 16384))
    assert busy == pytest.approx(plain / 2)


def test_cp_ranks_share_the_gradient_all_reduce_and_the_optimizer(h100, qwen7b):
    lens = np.full(32, 4096.0)
    with_cp = train_pass_time(qwen7b, h100, lens, 1, 1, 4, 16384, 1, 1, opts=OPTS, cp=ContextParallel(4))
    # The same 16 GPUs as 16 plain data-parallel ranks pay the same gradient and optimizer costs; CP's price is
    # the exchange and the shorter per-GPU micro-batches, so it is no faster on short sequences.
    plain = train_pass_time(qwen7b, h100, lens, 1, 1, 16, 16384, 1, 1, opts=OPTS)
    assert with_cp > plain
    fwd = forward_pass_time(qwen7b, h100, lens, 1, 1, 4, 16384, opts=PassOptions(attention=True),
                            cp=ContextParallel(4, "ulysses"))
    assert 0 < fwd < with_cp


# ---------------------------------------------------------------- layout, memory, the scenario


def test_layout_counts_cp_in_rank_gpus_weight_ranks_and_refuses_what_cannot_split():
    layout = ParallelLayout(tp=2, pp=1, dp=2, cp=4, cp_kind="ulysses")
    assert (layout.rank_gpus, layout.weight_ranks, layout.gpus, layout.replica_gpus) == (8, 8, 16, 2)
    assert layout.context == ContextParallel(4, "ulysses")
    assert ParallelLayout(tp=2, dp=8).context is None
    assert "must divide evenly" in layout.context_problem(heads=28)  # 28 heads over tp x cp = 8
    assert layout.context_problem(heads=32) == ""
    assert ParallelLayout(tp=2, cp=2, cp_kind="ring").context_problem(heads=28) == ""  # the ring splits tokens
    assert "engine role" in ParallelLayout(tp=2, cp=2, engine=True).context_problem(heads=32)


def test_memory_splits_a_long_sequence_over_cp_and_shards_the_state_over_dp_x_cp(h100, qwen7b):
    scn = load_scenario(SCENARIO, [f"{A}.cp=1", f"{A}.cp_dynamic=false"])
    role = scn.roles["actor"]
    plain = role_training_memory(role, qwen7b, h100, 16, 131072)
    split = role_training_memory(role.model_copy(update={"parallel": role.parallel.model_copy(update={"cp": 4})}),
                                 qwen7b, h100, 4, 131072)
    assert split.activations == pytest.approx(plain.activations / 4)
    assert split.optimizer == pytest.approx(plain.optimizer)  # dp 4 x cp 4 = the same 16 shards


def test_shipped_scenario_dynamic_cp_trains_faster_than_static_and_none():
    def update(overrides):
        return simulate(load_scenario(SCENARIO, ["steps=2", "warmup_steps=1", *overrides])).steps[
            "timing_s/update_actor"].mean()

    dynamic = update([])
    static = update([f"{A}.cp=4", f"{A}.cp_dynamic=false"])
    none = update([f"{A}.cp=1", f"{A}.cp_dynamic=false"])
    assert dynamic < static < none


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(("overrides", "needle"), [
    ([f"{A}.cp=3"], "roles.actor.parallel: tp × pp × cp = 1 × 1 × 3 must divide the role's 16 GPUs"),
    ([f"{A}.cp=8", f"{A}.cp_dynamic=false", f"{A}.cp_kind=ulysses"],
     "roles.actor.parallel.cp: ulysses scatters the 28 attention heads over tp × cp = 8 GPUs"),
    ([f"{A}.cp=1"], "roles.actor.parallel.cp_dynamic: needs an even parallel.cp of at least 2"),
    (["roles.rollout.parallel.cp=2"], "roles.rollout.parallel.cp: must be 1 for an engine role"),
    ([f"{A}.cp=4", f"{A}.dp=2", f"{A}.cp_dynamic=false"], "roles.actor.parallel.dp: tp × pp × cp × dp"),
    (["roles.actor.train.packing=padded"], "roles.actor.parallel.cp: context parallelism (16) splits packed"),
])
def test_invalid_context_parallelism_exits_2_with_one_line(overrides, needle):
    args = ["validate", str(SCENARIO)]
    for o in overrides:
        args += ["--set", o]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output


# ---------------------------------------------------------------- import mapping


MEGATRON = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.megatron.param_offload=true",
            "actor_rollout_ref.actor.megatron.optimizer_offload=true"]


@pytest.fixture(scope="module")
def verl_config():
    from import_helpers import fetch_wheel

    return fetch_wheel("verl", "0.9.1") / "verl" / "trainer" / "config"


def test_verl_ulysses_and_megatron_context_parallel_map_to_cp(verl_config):
    fsdp = run_import("verl", verl_config / "ppo_trainer.yaml", [
        "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=4"])
    actor = fsdp.scenario.roles["actor"].parallel
    assert (actor.cp, actor.cp_kind, actor.cp_dynamic) == (4, "ulysses", False)
    assert fsdp.scenario.layout("actor").dp == 2  # 8 GPUs over cp 4
    meg = run_import("verl", verl_config / "ppo_megatron_trainer.yaml", [
        "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.actor.megatron.context_parallel_size=2", *MEGATRON])
    assert (meg.scenario.roles["actor"].parallel.cp, meg.scenario.roles["actor"].parallel.cp_kind) == (2, "ring")


def test_verl_dynamic_context_parallel_takes_the_whole_dp_x_cp_group_and_its_budget(verl_config):
    imported = run_import("verl", verl_config / "ppo_megatron_trainer.yaml", [
        "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.actor.megatron.dynamic_context_parallel=true",
        "actor_rollout_ref.actor.megatron.max_seqlen_per_dp_cp_rank=12288", "trainer.nnodes=2", *MEGATRON])
    actor = imported.scenario.roles["actor"]
    assert (actor.parallel.cp, actor.parallel.cp_dynamic) == (16, True)
    assert actor.train.ppo_max_token_len_per_gpu == 12288
    assert imported.ledger.used["actor_rollout_ref.actor.megatron.dynamic_context_parallel"]


def test_nemo_rl_and_slime_context_parallel_sizes_map_to_ring_cp():
    nemo = run_import("nemo-rl", FIXTURES / "nemo-rl" / "grpo_math_8B_megatron_fp8.yaml",
                      ["policy.megatron_cfg.context_parallel_size=2"])
    assert (nemo.scenario.roles["actor"].parallel.cp, nemo.scenario.roles["actor"].parallel.cp_kind) == (2, "ring")
    slime = run_import("slime", FIXTURES / "slime" / "run-qwen3-30B-A3B.sh", ["--context-parallel-size", "2"])
    assert slime.scenario.roles["actor"].parallel.cp == 2
