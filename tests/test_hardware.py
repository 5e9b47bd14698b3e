"""Shipped hardware profiles: they load, cite every number, and match docs/sources.md §1."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from rlsim.sim.hardware import _NUMERIC_FIELDS, HardwareProfile, available_profiles, load_profile, profiles_dir
from rlsim.sim.paths import shipped_dir

SHIPPED = ("a100-80gb", "h100-sxm", "h200", "h20", "b200", "mi300x", "l40s", "h800", "a800")

# docs/sources.md §1: BF16 TFLOP/s, HBM GB, HBM TB/s, NVLink GB/s per direction, NIC Gb/s.
SPECS = {
    "a100-80gb": (312, 80, 2.039, 300, 200),
    "h100-sxm": (989, 80, 3.35, 450, 400),
    "h200": (989, 141, 4.8, 450, 400),
    "h20": (148, 96, 4.0, 450, 400),
    "b200": (2250, 180, 7.7, 900, 400),
    "mi300x": (1307, 192, 5.3, 896 / 2, 400),  # xGMI 896 GB/s aggregate (bidirectional)
    "l40s": (362, 48, 0.864, 0, None),  # no NVLink; no NIC listed
    "h800": (989, 80, 3.35, 200, 400),  # AReaL testbed (docs/sources.md §7)
    "a800": (312, 80, 2.039, 200, 200),  # A800 SXM4 datasheet; NIC assumed as DGX A100 (docs/sources.md §1)
}

# docs/sources.md §1, derived ridge points (FLOP/byte) = BF16 FLOP/s / HBM bytes/s.
RIDGE = {"a100-80gb": 153, "h100-sxm": 295, "h200": 206, "h20": 37, "b200": 292, "mi300x": 247}


def _raw(name: str) -> dict:
    with open(profiles_dir() / f"{name}.yaml") as fh:
        return yaml.safe_load(fh)


def test_every_reference_gpu_is_shipped():
    assert set(SHIPPED) <= set(available_profiles())


@pytest.mark.parametrize("name", available_profiles())
def test_profile_loads_and_cites_every_number(name):
    profile = load_profile(name)
    assert profile.name == name  # the name is the file stem
    assert profile.description
    for field in _NUMERIC_FIELDS:
        if getattr(profile, field) is not None:
            assert profile.sources.get(field, "").strip(), f"{name}: {field} has no source"


@pytest.mark.parametrize("name", available_profiles())
def test_efficiencies_are_physically_plausible(name):
    p = load_profile(name)
    assert p.train_mfu is None and p.forward_mfu is None  # MFU is a result of the operator-priced passes
    for eta in (p.decode_eta_mem, p.decode_eta_compute, p.prefill_eta_compute, p.small_ops_eta):
        assert 0.1 <= eta <= 1.0
    # The kernels a CUDA-graph step runs outside its layers: tens of microseconds (engine_kinds.graph_step_overhead_ms)
    assert 0.005 <= p.decode_fixed_overhead_ms <= 0.1
    assert 0 <= p.collective_latency_us <= 50
    assert p.fp8_tflops is None or p.fp8_tflops == pytest.approx(2 * p.bf16_tflops, rel=0.03)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_spec_values_match_reference(name):
    p = load_profile(name)
    bf16, hbm_gb, hbm_tb, nvlink, nic = SPECS[name]
    assert p.bf16_tflops == pytest.approx(bf16)
    assert p.hbm_gb == pytest.approx(hbm_gb)
    assert p.hbm_tb_per_s == pytest.approx(hbm_tb)
    assert p.nvlink_gb_per_s == pytest.approx(nvlink)
    if nic is not None:
        assert p.nic_gbit_per_s == pytest.approx(nic)


@pytest.mark.parametrize("name", sorted(RIDGE))
def test_ridge_points_match_reference(name):
    p = load_profile(name)
    assert p.peak_flops / p.hbm_bytes_per_s == pytest.approx(RIDGE[name], rel=0.02)


def test_fp8_only_where_the_gpu_has_it():
    assert load_profile("a100-80gb").fp8_tflops is None
    a100 = load_profile("a100-80gb")
    assert a100.peak_flops_for(1) == a100.peak_flops  # FP8 weights fall back to the BF16 peak
    h100 = load_profile("h100-sxm")
    assert h100.fp8_tflops == 1979
    assert h100.peak_flops_for(1) == pytest.approx(1979e12)


def test_h800_is_an_h100_with_narrower_nvlink():
    h100, h800 = load_profile("h100-sxm"), load_profile("h800")
    for field in ("bf16_tflops", "fp8_tflops", "hbm_gb", "hbm_tb_per_s", "decode_eta_mem",
                  "decode_fixed_overhead_ms", "prefill_eta_compute"):
        assert getattr(h800, field) == getattr(h100, field)
    assert h800.nvlink_gb_per_s == h100.nvlink_gb_per_s * 200 / 450


def test_l40s_talks_over_pcie():
    p = load_profile("l40s")
    assert p.nvlink_gb_per_s == 0
    assert p.intra_node_bytes_per_s() == p.pcie_bytes_per_s


def test_profile_missing_a_source_is_rejected():
    data = _raw("h100-sxm")
    del data["sources"]["hbm_tb_per_s"]
    with pytest.raises(ValidationError, match="hbm_tb_per_s"):
        HardwareProfile.model_validate(data)


def test_source_for_unknown_field_is_rejected():
    data = _raw("h100-sxm")
    data["sources"]["hbm_tbps"] = "typo"
    with pytest.raises(ValidationError, match="hbm_tbps"):
        HardwareProfile.model_validate(data)


def test_unknown_profile_field_is_rejected():
    data = _raw("h100-sxm")
    data["hbm_tbps"] = 3.35
    with pytest.raises(ValidationError):
        HardwareProfile.model_validate(data)


def test_efficiency_above_one_is_rejected():
    data = _raw("h100-sxm")
    data["decode_eta_mem"] = 1.2
    with pytest.raises(ValidationError):
        HardwareProfile.model_validate(data)


@pytest.mark.parametrize("name, profile", [
    ("H100", "h100-sxm"), ("h100", "h100-sxm"), ("H100-SXM", "h100-sxm"), ("NVIDIA H100", "h100-sxm"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("H100 SXM5", "h100-sxm"), ("A100", "a100-80gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("AMD Instinct MI300X", "mi300x"), ("H20", "h20"), ("H800", "h800"),
])
def test_gpu_names_match_case_and_vendor_insensitively(name, profile):
    from rlsim.sim.hardware import canonical_profile

    assert canonical_profile(name) == profile
    assert load_profile(name) == load_profile(profile)


@pytest.mark.parametrize("name", ["H100 PCIe", "A100 40GB", "h30"])
def test_a_gpu_of_another_kind_is_not_matched_and_never_offered_a_sibling_number(name):
    from rlsim.sim.hardware import available_profiles, canonical_profile, unknown_profile_message

    assert canonical_profile(name) is None
    message = unknown_profile_message(name, available_profiles())
    guess = message.split(" (known")[0]
    assert "h800" not in guess and "a800" not in guess and "h20" not in guess, guess


def test_a_scenario_plan_and_import_take_the_names_users_type(tmp_path):
    from typer.testing import CliRunner

    from rlsim.sim.api import load_scenario
    from rlsim.tools.cli import app
    from rlsim.tools.plan.sizing import parse_gpu

    scn = load_scenario(shipped_dir("scenarios") / "quickstart.yaml", ["cluster.pools.gen.hardware=NVIDIA H100"])
    assert scn.cluster.pools["gen"].hardware == "h100-sxm"
    assert parse_gpu("H100:64", ["h100-sxm", "h800"]) == ("h100-sxm", 64)
    with pytest.raises(ValueError) as caught:
        parse_gpu("H100 PCIe", ["h100-sxm", "h800"])
    assert "did you mean h100-sxm?" in str(caught.value) and "h800?" not in str(caught.value)
    out = tmp_path / "s.yaml"
    res = CliRunner().invoke(app, ["import", "verl", str(Path(__file__).parent / "repros" /
                                                         "13-import-verl-typo-key-silently-ignored.yaml"),
                                   "--hardware", "H100", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "hardware: h100-sxm" in out.read_text()
