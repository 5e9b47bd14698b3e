"""HybridFlow / verl synchronous schedule: a hand-traced step, placements, conservation, invariants."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsim.sim.costs.generation import decode_coefficients, prefill_time
from rlsim.sim.costs.resharding import reshard_bytes_per_gpu, reshard_redundant_bytes_per_gpu
from rlsim.sim.costs.training import update_plan
from rlsim.sim.model_shapes import ModelShape, resolve_preset
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import parse_scenario
from rlsim.sim.simulate import simulate

ROOT = Path(__file__).resolve().parent.parent

# A profile with round numbers so every phase time below can be written out by hand.
PROFILE = {
    "name": "toy", "bf16_tflops": 100.0, "hbm_gb": 80.0, "hbm_tb_per_s": 2.0, "nvlink_gb_per_s": 100.0,
    "nic_gbit_per_s": 100.0, "pcie_gb_per_s": 20.0, "decode_eta_mem": 0.5, "decode_eta_compute": 0.5,
    "decode_fixed_overhead_ms": 10.0, "prefill_eta_compute": 0.5, "train_mfu": 0.4, "forward_mfu": 0.5,
    "collective_latency_us": 0.0, "price_usd_per_gpu_hour": 1.0,
}
PROFILE["sources"] = {k: "test value" for k, v in PROFILE.items() if isinstance(v, float)}


@pytest.fixture
def toy_profile(tmp_path) -> str:
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(PROFILE))
    return str(path)


def ppo_2gpu(profile: str, **schedule) -> dict:
    # The plain pass model (long-context terms have their own hand checks in tests/test_long_context.py).
    role = {"pool": "main", "model": "m", "parallel": {"tp": 2}, "train": {"long_context_costs": False}}
    return {
        "name": "ppo-2gpu",
        "steps": 2,
        "cluster": {"pools": {"main": {"hardware": profile, "nodes": 1, "gpus_per_node": 2}}},
        "models": {"m": {"preset": "qwen2.5-0.5b"}},
        "roles": {
            "actor": role, "reference": role, "critic": role, "reward": role,
            "rollout": {**role, "engine": {"gpu_memory_utilization": 0.5, "max_num_seqs": 16}},
        },
        "algorithm": {"kind": "ppo", "prompts_per_step": 4, "samples_per_prompt": 1, "mini_batches": 2, "epochs": 1},
        "workload": {"prompt_length": {"kind": "fixed", "value": 8}, "response_length": {"kind": "fixed", "value": 4}},
        "schedule": {"kind": "hybridflow", "placement": "colocate", "switch_overhead_s": 0.5, **schedule},
    }


def test_two_gpu_colocated_ppo_step_by_hand(toy_profile):
    res = simulate(parse_scenario(ppo_2gpu(toy_profile), source="test"))
    m = ModelShape(**resolve_preset("qwen2.5-0.5b"))
    from rlsim.sim.costs.memory import kv_capacity_tokens
    from rlsim.sim.hardware import load_profile

    hw = load_profile(toy_profile)
    peak = 100e12
    n, L, q = m.params, m.layers, m.heads * m.d_head
    # Switch to generation: 3D-HybridEngine with train tp2 == gen tp2 gathers nothing; the engine wakes (its
    # weight shard back over PCIe, the KV pool re-mapped at 100 GB/s), loads the shard (layout conversion from
    # Megatron + copy: 2 x read+write at 85% of HBM, 50 us per tensor), and the 0.5 s host overhead; after
    # generation it sleeps (the shard to host over PCIe).
    shard = m.weight_bytes_total / 2
    kv_pool = kv_capacity_tokens(m, hw, 2, 0.5, 1e9) * m.kv_bytes_per_token / 2
    wake = shard / hw.pcie_bytes_per_s + kv_pool / 100e9
    load = 2 * 2 * shard / (hw.hbm_bytes_per_s * 0.85) + (m.layers * 12 + 2) * 50e-6  # 12 tensors a layer, tied
    sleep = shard / hw.pcie_bytes_per_s
    switch = wake + load + 0.5 + sleep
    # Generation: one prefill of 4 x 8 tokens (emits the first token), then 3 decode steps at batch 4.
    gen = prefill_time(m, hw, 2, 32, 4 * 64, 0) + decode_coefficients(m, hw, 2, 4).steps_time(4 * 9, 3)
    # Forward passes over 4 sequences of 12 tokens on 2 GPUs (tp2, dp1): 2N per token + 2 L q s^2 (causal).
    fwd = (2 * n * 48 + 2 * L * q * 4 * 144) / (2 * peak * 0.5)
    # Updates: 2 mini-batches of 2 sequences: 6N per token + 6 L q s^2 (causal), then Adam over N/2 params per GPU.
    mini = (6 * n * 24 + 6 * L * q * 2 * 144) / (2 * peak * 0.4) + 32 * n / 2 / 2e12
    upd = 2 * mini
    step = res.steps.iloc[0]
    assert step["timing_s/update_weights"] == pytest.approx(switch, rel=1e-9)
    assert step["timing_s/gen"] == pytest.approx(gen, rel=1e-9)
    for col in ("reward", "old_log_prob", "ref", "values"):
        assert step[f"timing_s/{col}"] == pytest.approx(fwd, rel=1e-9), col
    for col in ("update_critic", "update_actor"):
        assert step[f"timing_s/{col}"] == pytest.approx(upd, rel=1e-9), col
    # One pool: every phase runs after the other, in verl's order.
    assert step["timing_s/step"] == pytest.approx(switch + gen + 4 * fwd + 2 * upd, rel=1e-9)
    tl = res.timeline[res.timeline["step"] == 0]
    order = [(r.role, r.phase) for r in tl.sort_values("start_s").itertuples()]
    assert order == [
        ("actor", "switch"), ("rollout", "generate"), ("actor", "switch"), ("reward", "forward"), ("actor", "forward"),
        ("reference", "forward"), ("critic", "forward"), ("critic", "train"), ("actor", "train"),
    ]


def test_policy_version_increments_once_per_step(toy_profile):
    res = simulate(parse_scenario(ppo_2gpu(toy_profile) | {"steps": 4}, source="test"))
    assert list(res.steps["policy_version"]) == [1, 2, 3, 4]
    gen = res.timeline[res.timeline["phase"] == "generate"]
    assert list(gen["policy_version"]) == list(gen["step"])  # step k generates with the weights of version k


def _no_overlap(intervals: list[tuple[float, float]]) -> bool:
    intervals = sorted(intervals)
    return all(a[1] <= b[0] + 1e-9 for a, b in zip(intervals, intervals[1:], strict=False))


@pytest.mark.parametrize("placement", ["colocate", "split", "standalone"])
def test_gpu_time_conservation_and_time_sharing(placement):
    data = yaml.safe_load((ROOT / "scenarios/hybridflow/ppo-llama-7b.yaml").read_text())
    data["steps"] = 2
    data["algorithm"]["prompts_per_step"] = 64
    for role in ("actor", "reference", "critic", "reward"):  # standalone sets are 8/4/2/2 GPUs
        data["roles"][role]["parallel"] = {"tp": 2}
        data["roles"][role]["train"] = {"sharding": "fsdp"}
    res = simulate(parse_scenario(data, source="test"))
    window = res.summary["simulated_seconds"]
    tl = res.timeline
    for pool, rows in tl.groupby("pool"):
        busy = float(((rows["end_s"] - rows["start_s"]) * rows["gpus"]).sum())
        idle = res.summary["idle_fraction_by_pool"][pool]
        # busy + idle = GPUs x window, with the pool's GPUs recovered from the model phases' groups.
        gpus = int(rows[rows["role"] != "rollout"]["gpus"].max())
        assert busy + idle * gpus * window == pytest.approx(gpus * window, rel=1e-9), pool
        # Roles of one pool time-share its GPUs: the model phases never overlap each other or generation.
        spans = [(r.start_s, r.end_s) for r in rows.itertuples() if r.role != "rollout"]
        for _, gen in rows[rows["role"] == "rollout"].groupby("step"):
            spans.append((gen["start_s"].min(), gen["end_s"].max()))
        assert _no_overlap(spans), pool
    busy_total = sum(res.summary["busy_fraction_by_phase"].values())
    assert busy_total + res.summary["gpu_idle_fraction"] == pytest.approx(1.0)
    assert window == pytest.approx(res.steps["timing_s/step"].sum())


def test_split_idles_the_critic_pool_during_generation():
    data = yaml.safe_load((ROOT / "scenarios/hybridflow/ppo-llama-7b.yaml").read_text())
    data["schedule"]["placement"] = "split"
    data["steps"] = 1
    res = simulate(parse_scenario(data, source="test"))
    idle = res.summary["idle_fraction_by_pool"]
    assert idle["main-critic"] > 0.3  # HybridFlow: separate actor and critic GPUs idle about a third
    assert idle["main-actor"] < 0.05


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 200), mini=st.integers(1, 8), epochs=st.integers(1, 3), dp=st.integers(1, 8),
       balance=st.booleans(), seed=st.integers(0, 1000))
def test_every_sample_trained_exactly_once_per_epoch(n, mini, epochs, dp, balance, seed):
    lens = np.random.default_rng(seed).integers(1, 5000, n)
    plan = update_plan(n, mini, epochs, dp, lens, balance)
    assert len(plan) == mini * epochs
    for e in range(epochs):
        seen = np.concatenate([np.concatenate(ranks) for ranks in plan[e * mini:(e + 1) * mini]])
        assert sorted(seen.tolist()) == list(range(n))


def test_reshard_volumes_match_hybridflow_example():
    """HybridFlow Table 2 on its example: training 1-4-2 (p-t-d) on 8 GPUs, generation 1-2-2-2."""
    M = 1.0
    assert reshard_bytes_per_gpu("3d-hybrid-engine", M, train_tp=4, train_pp=1, train_dp=2, gen_tp=2) == 0.25
    assert reshard_bytes_per_gpu("hybridflow-v", M, train_tp=4, train_pp=1, train_dp=2, gen_tp=2) == 0.75
    assert reshard_bytes_per_gpu("naive", M, train_tp=4, train_pp=1, train_dp=2, gen_tp=2) == 0.875
    assert reshard_redundant_bytes_per_gpu("3d-hybrid-engine", M, 4, 1, 2) == 0.0
    assert reshard_redundant_bytes_per_gpu("hybridflow-v", M, 4, 1, 2) == 0.5


def test_reshard_method_orders_switch_time(toy_profile):
    times = {}
    for method in ("3d-hybrid-engine", "hybridflow-v", "naive"):
        data = ppo_2gpu(toy_profile, reshard=method)  # on 8 GPUs: training 1-4-2, generation t_g=2
        data["cluster"]["pools"]["main"]["gpus_per_node"] = 8
        for role in ("actor", "reference", "critic", "reward"):
            data["roles"][role]["parallel"] = {"tp": 4}
        res = simulate(parse_scenario(data, source="test"))
        times[method] = res.steps["timing_s/update_weights"].iloc[0]
    assert times["3d-hybrid-engine"] < times["hybridflow-v"] < times["naive"]


def test_disaggregated_rollout_syncs_weights_over_the_nic(toy_profile):
    data = ppo_2gpu(toy_profile, placement="custom")
    data["cluster"]["pools"]["gen"] = {"hardware": toy_profile, "nodes": 1, "gpus_per_node": 2}
    data["roles"]["rollout"]["pool"] = "gen"
    res = simulate(parse_scenario(data, source="test"))
    m = ModelShape(**resolve_preset("qwen2.5-0.5b"))
    sync = res.steps["timing_s/update_weights"]
    assert sync.iloc[0] == 0.0  # engines start with the initial weights
    # Bucketed from one sender at 0.44 of its 100 Gb/s NIC (costs/weight_sync.py), one 2048 MB bucket, no latency;
    # the bucket packed on the sender (read + write of the weights) and each receiver's TP2 shard loaded, at 85% of HBM.
    from rlsim.sim.hardware import load_profile

    hw = load_profile(toy_profile)
    hbm = hw.hbm_bytes_per_s * 0.85
    expect = m.weight_bytes_total * (1 / (0.44 * 100e9 / 8) + 2 / hbm + 2 / 2 / hbm) + 3 * hw.collective_latency_s
    assert sync.iloc[1] == pytest.approx(expect, rel=1e-9)
    phases = set(res.timeline["phase"])
    assert "sync" in phases and "switch" not in phases


def test_grpo_has_no_critic_and_rule_reward_on_cpu(toy_profile):
    data = ppo_2gpu(toy_profile)
    data["algorithm"]["kind"] = "grpo"
    for role in ("critic", "reward"):
        del data["roles"][role]
    res = simulate(parse_scenario(data, source="test"))
    cols = set(res.steps.columns)
    assert "timing_s/values" not in cols and "timing_s/update_critic" not in cols
    assert res.steps["timing_s/reward"].iloc[0] == pytest.approx(4 * 0.002 / 16)
    assert set(res.timeline["role"]) == {"actor", "rollout", "reference"}


def test_remax_adds_a_greedy_generation(toy_profile):
    data = ppo_2gpu(toy_profile)
    data["algorithm"]["kind"] = "remax"
    del data["roles"]["critic"]
    res = simulate(parse_scenario(data, source="test"))
    assert (res.steps["timing_s/gen_max"] > 0).all()


def test_placement_problems_are_reported_before_simulating(toy_profile):
    data = ppo_2gpu(toy_profile, placement="standalone")
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(data, source="s.yaml")
    assert exc.value.lines() == [
        "s.yaml: schedule.placement_gpus: 2 GPUs do not split evenly into 4 sets; give placement_gpus"
    ]
    data = ppo_2gpu(toy_profile, placement="split")  # 1 GPU per set cannot hold tp=2
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(data, source="s.yaml")
    assert "s.yaml: roles.actor.parallel.tp: with placement 'split': must divide gpus_per_node (1), got 2" in (
        exc.value.lines()
    )
    data = ppo_2gpu(toy_profile)
    data["algorithm"]["kind"] = "grpo"
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(data, source="s.yaml")
    assert "s.yaml: roles.critic: grpo has no critic" in exc.value.lines()[0]


def test_colocated_memory_failure_names_the_numbers():
    data = yaml.safe_load((ROOT / "scenarios/hybridflow/ppo-llama-34b.yaml").read_text())
    for role in ("actor", "reference", "critic", "reward"):  # as shipped it fits only with pp 2 + offload
        data["roles"][role]["parallel"]["pp"] = 1
        data["roles"][role]["train"]["optimizer_offload"] = False
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(data, source="s.yaml")
    line = exc.value.lines()[0]
    assert line.startswith("s.yaml: schedule.placement:") and "GB per GPU" in line and "> 80 GB" in line


def test_transition_cost_orders_the_methods():
    """F2: 3D-HybridEngine moves the least, naive and the NIC broadcast the most (HybridFlow Table 2)."""
    from rlsim.tools.reproduce.transitions import complexity_table, transition_table

    tab = transition_table()
    for (_, _), rows in tab.groupby(["model", "gpus"]):
        t = rows.set_index("method")["seconds"]
        assert t["3d-hybrid-engine"] <= t["hybridflow-v"] < t["naive"]
    comp = complexity_table().set_index("strategy")
    assert comp.loc["colocated sync, 3d-hybrid-engine", "redundant_gb_per_gpu"] == 0
    assert list(comp["staleness_bound"].iloc[-3:]) == [0, 1, 4]


@pytest.mark.slow
def test_validation_rows_cover_the_published_numbers():
    from rlsim.tools.reproduce.validation import nim_rows

    nim = nim_rows()
    assert len(nim) == 5 and all(abs(r["simulated"] / r["published"] - 1) < 0.20 for r in nim)  # predicted (NIM guard)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="speedup 1.18 against 1.44 (-18%) since training is priced from operators: "
                   "update_actor on H20 comes out +55% (sync) and +61% (one-step-off), rank imbalance and recompute "
                   "under the scenario's assumed lengths (docs/reproductions.md, verl one-step-off)")
def test_verl_one_step_off_speedup_within_15_percent():
    from rlsim.tools.reproduce.validation import verl_rows

    speedup = next(r for r in verl_rows() if "speedup" in r["name"])
    assert abs(speedup["simulated"] / speedup["published"] - 1) < 0.15


@pytest.mark.slow
def test_figures_batch_size_and_generation_tp():
    """F8: bigger rollout batches amortise the tail; F3: under KV pressure a larger TP generates faster."""
    from rlsim.tools.reproduce.figures import batch_group_table, generation_tp_table

    bg = batch_group_table()
    for _, rows in bg.groupby("samples_per_prompt"):
        assert rows["throughput_tokens_per_s"].is_monotonic_increasing
        assert rows["gpu_idle_fraction"].iloc[-1] < rows["gpu_idle_fraction"].iloc[0]
    tp = generation_tp_table().set_index(["model", "engine", "gpu_memory_utilization", "gen_tp"])["generation_s"]
    assert tp[("llama-7b", "modern engine", 0.3, 4)] < tp[("llama-7b", "modern engine", 0.3, 1)]
    # With vLLM 0.3.1's per-sequence host cost, fewer sequences per engine win (HybridFlow's t_g finding).
    assert tp[("llama-7b", "vLLM 0.3.1", 0.5, 2)] < 0.5 * tp[("llama-7b", "vLLM 0.3.1", 0.5, 8)]


def test_generation_tp_finding_fitted_on_7b_predicts_13b():
    """HybridFlow (docs/sources.md §5): t_g=2 cuts 7B generation 60.3% vs t_g=8 (the fit), t_g=4 cuts
    13B 36.4% (a prediction: nothing was fitted to it). Without the per-sequence host overhead of
    vLLM 0.3.1 the cut vanishes: memory-bound decode costs the same per GPU at any t_g."""
    from rlsim.tools.reproduce.hybridflow_placement import generation_tp_gain

    assert generation_tp_gain("7b", 2) == pytest.approx(0.603, abs=0.01)
    assert generation_tp_gain("13b", 4) == pytest.approx(0.364, rel=0.10)
    assert generation_tp_gain("7b", 2, host_overhead_per_seq_us=0.0) < 0.1


@pytest.mark.slow  # over 2 s alone: the slow layer (CI runs it)
def test_vllm_03_host_cost_is_the_refit_of_hybridflows_7b_finding():
    """Engine kind vllm-0.3 carries the per-sequence host cost that re-running the fit gives (within 2%)."""
    from rlsim.sim.costs.engine_kinds import ENGINE_KINDS
    from rlsim.tools.reproduce.hybridflow_placement import fit_host_overhead

    assert fit_host_overhead() == pytest.approx(ENGINE_KINDS["vllm-0.3"].host_per_seq_us, rel=0.02)


def test_a_colocation_that_fits_at_no_size_is_refused_without_scanning_every_size(monkeypatch):
    """Found by the fuzz (a plan space's training layout emptied to TP 1 for PPO Llama-7B): the smallest size a
    colocated set fits at was searched one step at a time up to 4,096 GPUs for every candidate (4 CPU-s for one
    space). Per-GPU memory only falls as the set grows, so the largest size answers 'none' in one evaluation;
    where the set fits, the answer is the linear scan's."""
    import rlsim.sim.scenario.placement as placement
    from rlsim.sim.scenario.loader import read_yaml
    from rlsim.tools.cli.common import resolve_scenario_path

    path = resolve_scenario_path("hybridflow/ppo-llama-7b")
    data = read_yaml(path)
    scn = parse_scenario(data, str(path), (), path.parent)
    roles = list(scn.roles)
    step = max(scn.roles[r].parallel.tp * scn.roles[r].parallel.pp for r in roles)
    scan = next(g for g in range(step, 4097, step)
                if placement.colocated_memory(scn, "main", roles, g, 4096).fits)
    assert placement._min_gpus(scn, "main", roles, 4096) == scan

    calls = []
    real = placement.colocated_memory
    monkeypatch.setattr(placement, "colocated_memory", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    for role in data["roles"].values():
        if "parallel" in role:
            role["parallel"] = {"tp": 1}
    with pytest.raises(ScenarioError, match="does not fit at any size"):
        parse_scenario(data, "tp1.yaml", (), path.parent)
    assert len(calls) <= 3, calls  # the set at its size, then at the largest: not 4,096 sizes
