"""GPUs users run now: GB200 / GB300 NVL72 (72 GPUs in one NVLink domain over hosts of 4), B300, and PCIe consumer
cards (RTX 4090 48 GB, RTX 5090): datasheet numbers (docs/sources.md §1), efficiencies assumed from the nearest
fitted GPU, and the NVLink domain deciding NVLink or NIC for every collective."""

from __future__ import annotations

import pytest

from rlsim.sim.costs.collectives import ring_bandwidth_bytes_per_s
from rlsim.sim.costs.moe import ep_alltoall_time
from rlsim.sim.costs.resharding import reshard_time
from rlsim.sim.hardware import load_profile

# docs/sources.md §1: BF16 TFLOP/s, memory GB, memory TB/s, NVLink GB/s per direction, NIC Gb/s, NVLink domain.
SPECS = {
    "gb200": (2500, 186, 8.0, 900, 400, 72),
    "gb300": (2500, 288, 8.0, 900, 800, 72),
    "b300": (2250, 288, 8.0, 900, 800, None),
    "rtx4090-48gb": (165.2, 48, 1.008, 0, 100, None),
    "rtx5090": (209.5, 32, 1.792, 0, 100, None),
}
BASE = {"gb200": "b200", "gb300": "b200", "b300": "b200", "rtx4090-48gb": "l40s", "rtx5090": "l40s"}
EFFICIENCIES = ("decode_eta_mem", "decode_eta_compute", "prefill_eta_compute", "small_ops_eta_mem",
                "collective_latency_us", "p2p_latency_us", "p2p_latency_inter_node_us", "gemm_fixed_us",
                "layer_small_ops_us", "kernel_launch_us", "moe_layer_fixed_us", "attention_fixed_us")


@pytest.mark.parametrize("name", sorted(SPECS))
def test_profile_loads_with_its_datasheet_numbers(name):
    p = load_profile(name)
    bf16, memory, bandwidth, nvlink, nic, domain = SPECS[name]
    assert (p.bf16_tflops, p.hbm_gb, p.hbm_tb_per_s, p.nvlink_gb_per_s, p.nic_gbit_per_s) == \
        pytest.approx((bf16, memory, bandwidth, nvlink, nic))
    assert p.nvlink_domain_gpus == domain


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_efficiency_is_the_nearest_fitted_gpus_and_says_assumed(name):
    p, base = load_profile(name), load_profile(BASE[name])
    for field in EFFICIENCIES:
        assert getattr(p, field) == getattr(base, field), field
        assert p.sources[field].startswith("assumed: copied from"), field


def test_nvl72_all_reduce_inside_a_rack_uses_nvlink_across_racks_the_nic():
    gb200 = load_profile("gb200")
    nvlink, nic = gb200.nvlink_bytes_per_s, gb200.nic_bytes_per_s
    assert ring_bandwidth_bytes_per_s(gb200, 4, 4) == nvlink  # one host
    assert ring_bandwidth_bytes_per_s(gb200, 8, 4) == nvlink  # two hosts, one rack: NVLink still
    assert ring_bandwidth_bytes_per_s(gb200, 72, 4) == nvlink  # the whole rack
    assert ring_bandwidth_bytes_per_s(gb200, 144, 4) == nic  # two racks: the inter-rack network
    b200 = load_profile("b200")  # no domain given: a node, as before
    assert ring_bandwidth_bytes_per_s(b200, 8, 8) == b200.nvlink_bytes_per_s
    assert ring_bandwidth_bytes_per_s(b200, 16, 8) == b200.nic_bytes_per_s


def test_nvl72_expert_all_to_all_and_reshard_over_two_hosts_stay_on_nvlink():
    gb200 = load_profile("gb200")
    hosts_only = gb200.model_copy(update={"nvlink_domain_gpus": None})
    size = 64e6
    in_rack = ep_alltoall_time(gb200, size, 8, 4)
    assert in_rack == pytest.approx(gb200.p2p_latency_s() + size * 7 / 8 / gb200.nvlink_bytes_per_s)
    assert ep_alltoall_time(hosts_only, size, 8, 4) > in_rack  # 4-GPU hosts without the domain: half over the NIC
    assert ep_alltoall_time(gb200, size, 144, 4) > in_rack  # two racks
    # train tp 8 (two hosts) -> engine tp 1: the gather inside the rack is NVLink, with host-sized domains the NIC
    fast = reshard_time("3d-hybrid-engine", 16e9, gb200, 8, 1, 9, 1, gpus_per_node=4)
    slow = reshard_time("3d-hybrid-engine", 16e9, hosts_only, 8, 1, 9, 1, gpus_per_node=4)
    assert slow / fast == pytest.approx(gb200.nvlink_bytes_per_s / gb200.nic_bytes_per_s, rel=0.05)


@pytest.mark.parametrize("name", ["rtx4090-48gb", "rtx5090"])
def test_consumer_cards_have_no_nvlink_path(name):
    p = load_profile(name)
    assert p.nvlink_gb_per_s == 0 and p.nvlink_domain(8) == 8
    assert ring_bandwidth_bytes_per_s(p, 8, 8) == p.pcie_bytes_per_s  # inside a box: PCIe
    assert ring_bandwidth_bytes_per_s(p, 16, 8) == p.nic_bytes_per_s
    assert ep_alltoall_time(p, 1e6, 4, 8) == pytest.approx(p.p2p_latency_s() + 1e6 * 3 / 4 / p.pcie_bytes_per_s)
    # a domain on a card without NVLink is no NVLink path either
    fake = p.model_copy(update={"nvlink_domain_gpus": 72})
    assert fake.nvlink_domain(8) == 8 and ring_bandwidth_bytes_per_s(fake, 16, 8) == p.nic_bytes_per_s


def test_shipped_nvl72_scenario_runs_with_experts_across_hosts():
    from rlsim.sim.api import load_scenario, shipped_dir, simulate

    scn = load_scenario(shipped_dir("scenarios") / "sync" / "grpo-gb200-nvl72.yaml",
                        overrides=["steps=1", "warmup_steps=0"])
    pool = scn.cluster.pools["main"]
    assert pool.hardware == "gb200" and pool.gpus_per_node == 4
    assert scn.roles["actor"].parallel.ep > pool.gpus_per_node  # the expert all-to-all spans hosts
    result = simulate(scn)
    assert len(result.steps) == 1 and result.steps["timing_s/update_actor"].iloc[0] > 0


def test_rlsim_scenarios_lists_the_nvl72_scenario():
    from typer.testing import CliRunner

    from rlsim.tools.cli import app

    res = CliRunner().invoke(app, ["scenarios"])
    assert res.exit_code == 0, res.output
    assert any(line.split()[0] == "sync/grpo-gb200-nvl72" for line in res.output.splitlines() if line.strip())
