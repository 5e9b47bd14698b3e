"""Weight-sync paths (rlsim/sim/costs/weight_sync.py): each path's regime, the tensor count of the model presets,
the scenario block, the colocated switch, and the framework knobs that select a path."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rlsim.sim.api import ModelShape, load_profile, load_scenario, resolve_preset, simulate
from rlsim.sim.costs.weight_sync import (
    ALL_SENDERS_NIC_SHARE,
    DELTA_INDEX_BYTES,
    ONE_SENDER_NIC_SHARE,
    PER_TENSOR_S,
    SyncSetup,
    colocated_extra_time,
    stream_bytes_per_s,
    sync_parts,
    sync_time,
)
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.tools.importers.weight_sync import weight_sync_from_knobs

H100 = load_profile("h100-sxm")
CKPT = Path("scenarios/validation/verl-checkpoint-engine-h100.yaml")


def _setup(**kw) -> SyncSetup:
    base = dict(weight_bytes=60e9, tensors=18_867, sender=H100, receiver=H100, receivers=16, receiver_tp=8,
                trainer_gpus=8, trainer_nodes=1, sender_node_gpus=8)
    return SyncSetup(**{**base, **kw})


# ---------------------------------------------------------------- the tensor count of each preset


@pytest.mark.parametrize(("preset", "tensors"), [
    ("qwen2.5-3b", 434), ("qwen2.5-7b", 339), ("llama-3-8b", 291),  # docs/validation.md: verl PR #116's models
    ("qwen3-30b-a3b", 18_900),  # docs/sources.md §4: ≈18.9k tensors
])
def test_preset_tensor_counts_match_the_published_counts(preset, tensors):
    assert ModelShape(**resolve_preset(preset)).weight_tensors == pytest.approx(tensors, rel=0.01)


def test_moe_tensor_counts_match_the_sources_within_ten_percent():
    """A 16B MoE of ≈5.3k tensors and Qwen3-Next-80B of ≈74.5k (docs/sources.md §4), written as rlsim shapes: the
    16B MoE as 27 layers of 64 experts (Moonlight / DeepSeek-V2-Lite's layout; their MLA projections and shared
    experts are not in rlsim's shape), Qwen3-Next as 48 layers of 512 experts with q/k norms."""
    moe16 = ModelShape(layers=27, hidden=2048, heads=16, kv_heads=16, ffn=1408, vocab=102400, num_experts=64,
                       experts_per_token=6)
    next80 = ModelShape(layers=48, hidden=2048, heads=16, kv_heads=2, head_dim=256, ffn=512, vocab=151936,
                        num_experts=512, experts_per_token=10, qk_norm=True)
    assert moe16.weight_tensors == pytest.approx(5_300, rel=0.10)
    assert next80.weight_tensors == pytest.approx(74_500, rel=0.10)
    # An MoE's count is its experts': three each per layer, plus the router.
    dense = moe16.model_copy(update={"num_experts": 0, "experts_per_token": 0})
    assert moe16.weight_tensors - dense.weight_tensors == 27 * (64 * 3 + 1 - 3)


# ---------------------------------------------------------------- each path's regime


def test_per_tensor_time_grows_with_tensors_not_bytes():
    for path in ("per-tensor-nccl", "per-tensor-rpc"):
        a, b = _setup(path=path), _setup(path=path, tensors=2 * 18_867)
        assert sync_parts(a).calls == pytest.approx(18_867 * PER_TENSOR_S[path])
        assert sync_time(b) - sync_time(a) == pytest.approx(18_867 * PER_TENSOR_S[path])
    # The calls dominate an MoE's per-tensor sync: twice the tensors, nearly twice the time.
    many = _setup(path="per-tensor-nccl")
    assert sync_time(replace(many, tensors=2 * many.tensors)) / sync_time(many) > 1.8
    # A user's own per-call cost replaces the default.
    assert sync_parts(_setup(path="per-tensor-rpc", per_tensor_s=1e-3)).calls == pytest.approx(18.867)


def test_bucketed_time_is_bytes_over_the_senders_and_ignores_tensors():
    one = _setup()
    assert sync_time(replace(one, tensors=10)) == sync_time(one)  # no per-tensor term
    rate = stream_bytes_per_s(one)
    assert rate == pytest.approx(ONE_SENDER_NIC_SHARE * H100.nic_bytes_per_s)
    assert sync_parts(one).transfer == pytest.approx(60e9 / rate)
    assert sync_parts(replace(one, weight_bytes=120e9)).transfer == pytest.approx(2 * sync_parts(one).transfer)
    # senders: all -> the sending node's 8 GPUs each push their share over their own NIC.
    many = replace(one, senders="all")
    assert stream_bytes_per_s(many) == pytest.approx(8 * ALL_SENDERS_NIC_SHARE * H100.nic_bytes_per_s)
    assert sync_parts(many).transfer == pytest.approx(sync_parts(one).transfer * ONE_SENDER_NIC_SHARE
                                                      / (8 * ALL_SENDERS_NIC_SHARE))
    # Trainer GPUs on other nodes do not send (verl's multi_sender: rank 0's NVLink peers only).
    assert stream_bytes_per_s(replace(many, trainer_gpus=32, trainer_nodes=4)) == stream_bytes_per_s(many)


def test_the_nic_shares_reproduce_verl_pr7291_on_gh200():
    """Fitted (provenance.FITTED): 10.7-11 GB/s from one sender, 30-32 GB/s from the 4 GPUs of a GH200 node, each
    with a 200 Gb/s NIC."""
    gh200 = H100.model_copy(update={"nic_gbit_per_s": 200})
    s = _setup(sender=gh200, receiver=gh200, receivers=4, trainer_gpus=4, sender_node_gpus=4)
    assert stream_bytes_per_s(s) / 1e9 == pytest.approx(11.0, abs=0.3)
    assert stream_bytes_per_s(replace(s, senders="all")) / 1e9 == pytest.approx(31.0, abs=1.0)
    # Not fitted: the same runs with the trainer on two nodes of 4 (Qwen3.5-27B, about 54 GB in bf16) add the gather
    # of the other node's half through one NIC: 5.85-5.90 s from one sender and 2.60 s from the node's four (rlsim
    # +1% and +10%: its gather through one NIC takes 1.1 s, the published one about 0.8 s).
    two = replace(s, weight_bytes=54e9, trainer_gpus=8, trainer_nodes=2)
    assert sync_parts(two).gather == pytest.approx(27e9 / 25e9)
    assert sync_time(two) == pytest.approx(5.88, rel=0.05)
    assert sync_time(replace(two, senders="all")) == pytest.approx(2.60, rel=0.15)


def test_delta_time_grows_with_the_changed_bytes():
    full = _setup()
    d1, d2 = replace(full, delta_fraction=0.01), replace(full, delta_fraction=0.02)
    rate = stream_bytes_per_s(full)
    # each changed bf16 value travels with an int32 position
    assert sync_parts(d1).transfer == pytest.approx(0.01 * 60e9 * (1 + DELTA_INDEX_BYTES / 2) / rate)
    assert sync_parts(d2).transfer == pytest.approx(2 * sync_parts(d1).transfer)
    assert sync_time(d2) < 0.2 * sync_time(full)
    assert sync_parts(d1).diff > 0 and sync_parts(full).diff == 0  # the compare with the host snapshot


def test_gather_only_when_the_trainer_spans_nodes():
    one_node = _setup(trainer_gpus=8, trainer_nodes=1)
    two_nodes = _setup(trainer_gpus=16, trainer_nodes=2)
    assert sync_parts(one_node).gather == 0.0
    # the half held on the other node crosses into the sending node through one NIC
    assert sync_parts(two_nodes).gather == pytest.approx(30e9 / H100.nic_bytes_per_s)
    assert sync_parts(replace(two_nodes, trainer_nodes=4)).gather == pytest.approx(45e9 / H100.nic_bytes_per_s)


def test_staged_bounces_through_host_memory_over_pcie():
    staged, bucketed = _setup(path="staged"), _setup()
    assert sync_parts(staged).stage == pytest.approx(2 * 60e9 / H100.pcie_bytes_per_s)
    assert sync_time(staged) - sync_time(bucketed) == pytest.approx(sync_parts(staged).stage)
    # pageable host copies: a slower bounce, set by the user
    assert sync_parts(replace(staged, host_bytes_per_s=2e9)).stage == pytest.approx(60.0)


def test_same_node_uses_the_intra_node_link():
    l40s = load_profile("l40s")  # no NVLink: PCIe
    s = _setup(sender=l40s, receiver=l40s, receivers=4, receiver_tp=4, trainer_gpus=4, same_node=True)
    assert stream_bytes_per_s(s) == pytest.approx(l40s.pcie_bytes_per_s)


def test_same_node_sync_moves_over_nvlink_faster_by_the_link_ratio():
    """4 trainer GPUs -> 4 rollout GPUs of one H100 node: one sender's stream runs at NVLink's rate instead of its
    NIC share; the bytes-independent parts (pack, calls, load) do not change."""
    cross = _setup(receivers=4, receiver_tp=4, trainer_gpus=4, sender_node_gpus=4)
    same = replace(cross, same_node=True)
    ratio = H100.nvlink_bytes_per_s / (ONE_SENDER_NIC_SHARE * H100.nic_bytes_per_s)
    assert stream_bytes_per_s(same) / stream_bytes_per_s(cross) == pytest.approx(ratio)
    c, s = sync_parts(cross), sync_parts(same)
    assert c.transfer / s.transfer == pytest.approx(ratio)
    assert (s.pack, s.calls, s.load, s.gather) == (c.pack, c.calls, c.load, 0.0)


def test_gather_inside_one_nvlink_domain_uses_nvlink():
    """A trainer over two hosts of one NVLink domain (NVL72) gathers over NVLink, not through a NIC."""
    two_nodes = _setup(trainer_gpus=16, trainer_nodes=2)
    assert sync_parts(replace(two_nodes, same_node=True)).gather == pytest.approx(30e9 / H100.nvlink_bytes_per_s)


# ---------------------------------------------------------------- in a scenario


def _sync_s(overrides: list[str]) -> float:
    res = simulate(load_scenario(CKPT, overrides))
    return float(res.measured_steps["timing_s/sync_rollout_weights"].iloc[0])


def test_same_node_is_read_from_the_roles_gpu_ranges():
    """The checkpoint-engine scenario puts the trainer on GPUs 0-3 and the engines on 4-7 of one node: the sync
    moves over NVLink. The same ranks on two nodes of the pool (engines on GPUs 8-11) cross the NICs, as a sync
    between two pools does."""
    model = ModelShape(**resolve_preset("qwen2.5-7b"))
    setup = SyncSetup(model.weight_bytes_total, model.weight_tensors, H100, H100, receivers=4, receiver_tp=4,
                      trainer_gpus=4, trainer_nodes=1, sender_node_gpus=8)
    assert load_scenario(CKPT).roles_in_one_nvlink_domain("actor", "rollout")
    assert _sync_s([]) == pytest.approx(sync_time(replace(setup, same_node=True)), rel=1e-9)
    apart = ["cluster.pools.node.nodes=2", "roles.rollout.gpu_offset=8"]
    assert not load_scenario(CKPT, apart).roles_in_one_nvlink_domain("actor", "rollout")
    assert _sync_s(apart) == pytest.approx(sync_time(setup), rel=1e-9)
    two_pools = ["cluster.pools.gen={hardware: h100-sxm, nodes: 1, gpus_per_node: 8}", "roles.rollout.pool=gen",
                 "roles.rollout.gpu_offset=0"]
    assert _sync_s(two_pools) == pytest.approx(sync_time(setup), rel=1e-9)


def test_the_schedule_prices_the_path_the_scenario_names():
    apart = ["cluster.pools.node.nodes=2", "roles.rollout.gpu_offset=8"]  # over the NICs
    bucketed = _sync_s(apart)
    per_tensor = _sync_s([*apart, "schedule.weight_sync.path=per-tensor-nccl"])
    delta = _sync_s([*apart, "schedule.weight_sync.delta=true"])
    senders = _sync_s([*apart, "schedule.weight_sync.senders=all"])
    model = ModelShape(**resolve_preset("qwen2.5-7b"))
    assert per_tensor - bucketed > model.weight_tensors * PER_TENSOR_S["per-tensor-nccl"] * 0.9
    assert delta < 0.2 * bucketed and senders < bucketed
    # Inside one node NVLink outruns the delta's diff of each trainer shard over PCIe: a delta sync is slower.
    assert _sync_s(["schedule.weight_sync.delta=true"]) > _sync_s([])


@pytest.mark.parametrize(("override", "message"), [
    ("schedule.weight_sync_bucket_mb=512", "weight_sync_bucket_mb moved: write weight_sync: {bucket_mb: ...}"),
    ("schedule.weight_sync.per_tensor_ms=2", "per_tensor_ms is read only by the per-tensor paths"),
    ("schedule.weight_sync.delta_fraction=0.1", "delta_fraction is read only with delta: true"),
    ("schedule.weight_sync.host_gb_per_s=3", "host_gb_per_s is read only by path: staged"),
    ("schedule.weight_sync.path=sharded", "schedule.weight_sync.path"),
    ("schedule.weight_sync.bucket_mb=5.0e-324", "schedule.weight_sync.bucket_mb: must be >= 0.001"),
    ("schedule.weight_sync={path: staged, host_gb_per_s: 5.0e-324}", "schedule.weight_sync.host_gb_per_s: must be >="),
])
def test_bad_weight_sync_knobs_are_one_line_each(override, message):
    with pytest.raises(ScenarioError) as err:
        load_scenario(CKPT, [override])
    assert len(err.value.problems) == 1 and message in str(err.value)


def test_colocated_runs_refuse_the_network_knobs():
    with pytest.raises(ScenarioError) as err:
        load_scenario("scenarios/quickstart.yaml", ["schedule.weight_sync.senders=all"])
    assert ("schedule.weight_sync.senders: with placement 'colocate': the rollout shares the actor's GPUs"
            in str(err.value))


def test_colocated_switch_pays_per_tensor_calls_or_the_host_bounce():
    from rlsim.sim.costs.transition import TransitionSetup, to_generate

    model = ModelShape(**resolve_preset("qwen3-30b-a3b"))
    base = TransitionSetup(model=model, hw=H100, sharding="fsdp", train_tp=1, train_pp=1, train_dp=8, gen_tp=4,
                           gpus_per_node=8, reshard="3d-hybrid-engine", engine_kind="vllm-v1", cuda_graphs=True,
                           max_num_seqs=256, kv_pool_bytes_per_gpu=0.0, sleep_level=1, host_s=0.0)
    bucketed = to_generate(base).load
    per_tensor = to_generate(replace(base, sync_path="per-tensor-nccl")).load
    staged = to_generate(replace(base, sync_path="staged")).load
    assert per_tensor - bucketed == pytest.approx(model.weight_tensors * PER_TENSOR_S["per-tensor-nccl"])
    shard = model.weight_bytes_total / 4
    assert staged - bucketed == pytest.approx(2 * shard / H100.pcie_bytes_per_s)
    assert colocated_extra_time("bucketed", model.weight_tensors, shard, H100) == 0.0


# ---------------------------------------------------------------- framework knobs


def test_weight_sync_from_knobs_maps_transport_names():
    assert weight_sync_from_knobs() == {}
    assert weight_sync_from_knobs(transport="nccl", bucket_mb=512) == {"bucket_mb": 512.0}
    assert weight_sync_from_knobs(transport="NCCL", senders="all") == {"senders": "all"}
    assert weight_sync_from_knobs(transport="delta_sharded") == {"delta": True}
    assert weight_sync_from_knobs(transport="vllm_zmq_sparse") == {"path": "staged", "delta": True}
    assert weight_sync_from_knobs(transport="gloo") == {"path": "staged"}
    assert weight_sync_from_knobs(bucket_bytes=512 * 2**20) == {"bucket_mb": pytest.approx(536.870912)}
    assert weight_sync_from_knobs(delta_fraction=0.01) == {"delta": True, "delta_fraction": 0.01}
    with pytest.raises(ValueError, match="unknown weight-sync transport 'carrier-pigeon'"):
        weight_sync_from_knobs(transport="carrier-pigeon")
    with pytest.raises(ValueError, match="bucket size once"):
        weight_sync_from_knobs(bucket_mb=1, bucket_bytes=1e6)


def test_verl_checkpoint_engine_knobs_reach_the_scenario():
    from import_helpers import fetch_wheel

    from rlsim.tools.importers.command import run_import

    ce = "actor_rollout_ref.rollout.checkpoint_engine."
    cfg = fetch_wheel("verl", "0.9.1") / "verl" / "experimental" / "one_step_off_policy" / "config" / \
        "one_step_off_ppo_trainer.yaml"
    base = ["actor_rollout_ref.rollout.name=vllm", "trainer.nnodes=2", "trainer.n_gpus_per_node=6",
            "rollout.n_gpus_per_node=4", "algorithm.adv_estimator=grpo"]
    nccl = run_import("verl", cfg, [*base, f"{ce}backend=nccl", f"{ce}update_weights_bucket_megabytes=512"])
    sync = nccl.scenario.schedule.weight_sync
    # verl 0.9.1's NCCL engine relays through rank 0's node-local peers by default (multi_sender)
    assert (sync.path, sync.senders, sync.bucket_mb, sync.delta) == ("bucketed", "all", 512, False)
    assert nccl.ledger.used[f"{ce}backend"] == "schedule.weight_sync.path"
    delta = run_import("verl", cfg, [*base, f"{ce}backend=delta_sharded"]).scenario.schedule.weight_sync
    assert (delta.senders, delta.delta) == ("one", True)
    # A colocated run keeps one sender whatever the backend: the weights never cross the network.
    dump = Path("tests/fixtures/import/verl/dapo_run_dump.yaml")
    assert run_import("verl", dump, [f"++{ce}backend=nccl"]).scenario.schedule.weight_sync.senders == "one"
