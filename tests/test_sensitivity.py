"""`rlsim sensitivity` and the pool `profile_overrides` it varies the calibrated constants through."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.simulate import simulate
from rlsim.tools.cli import app
from rlsim.tools.sensitivity import _yaml_number, default_inputs, parse_vary, prepare, run_sensitivity

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
SMALL = ["algorithm.prompts_per_step=16", "steps=1"]
OVR = "cluster.pools.gen.profile_overrides"
runner = CliRunner()


def _lines(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.strip()]


# ---------------------------------------------------------------- profile_overrides


def test_profile_override_is_applied_marked_and_cached():
    base = load_scenario(QUICKSTART, SMALL)
    slow = load_scenario(QUICKSTART, [*SMALL, f"{OVR}.train_mfu=0.2"])
    pool = slow.cluster.pools["gen"]
    hw = pool.profile()
    assert hw.train_mfu == 0.2 and hw.sources["train_mfu"] == "scenario pool override"
    assert base.cluster.pools["gen"].profile().train_mfu != 0.2
    assert pool.profile() is hw  # cached: called for every role and engine
    t_base = simulate(base).steps["timing_s/update_actor"].sum()
    t_slow = simulate(slow).steps["timing_s/update_actor"].sum()
    assert t_slow > 1.5 * t_base  # half the MFU: about twice the update time


def test_profile_override_round_trips_through_the_resolved_dump():
    from rlsim.sim.scenario.loader import dump_scenario, parse_scenario

    scn = load_scenario(QUICKSTART, [f"{OVR}.decode_eta_mem=0.5"])
    again = parse_scenario(yaml.safe_load(dump_scenario(scn)))
    assert again.cluster.pools["gen"].profile().decode_eta_mem == 0.5


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (f"{OVR}.foo=1", f"{OVR}.foo: not a hardware profile number; known: bf16_tflops"),
        (f"{OVR}.name=3", f"{OVR}.name: not a hardware profile number; known:"),
        (f"{OVR}.sources=3", f"{OVR}.sources: not a hardware profile number; known:"),
        (f"{OVR}.train_mfu=1.5", f"{OVR}.train_mfu: must be <= 1, got 1.5"),
        (f"{OVR}.decode_eta_mem=0", f"{OVR}.decode_eta_mem: must be >= 0.001, got 0.0"),
        (f"{OVR}.collective_latency_us=-1", f"{OVR}.collective_latency_us: must be >= 0, got -1"),
        (f"{OVR}.train_mfu=fast", f"{OVR}.train_mfu: expected a number, got 'fast'"),
        (f"{OVR}.price_usd_per_gpu_hour=2", "use price_usd_per_gpu_hour"),
    ],
)
def test_bad_profile_override_exit_2_one_line(override, message):
    res = runner.invoke(app, ["validate", str(QUICKSTART), "--set", override])
    assert res.exit_code == 2, res.output
    lines = _lines(res.output)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{QUICKSTART}: ") and message in lines[0]
    assert "Traceback" not in res.output


def test_nic_given_twice_is_an_error():
    res = runner.invoke(app, [
        "validate", str(QUICKSTART), "--set", "cluster.pools.gen.nic_gbit_per_s=100",
        "--set", f"{OVR}.nic_gbit_per_s=200",
    ])
    assert res.exit_code == 2 and "give it once" in res.output


# ---------------------------------------------------------------- inputs


def test_default_inputs_of_quickstart():
    inputs, skipped = default_inputs(load_scenario(QUICKSTART))
    keys = [i.key for i in inputs]
    for field in ("decode_eta_mem", "decode_eta_compute", "decode_fixed_overhead_ms", "prefill_eta_compute",
                  "small_ops_eta_mem", "collective_latency_us", "nic_gbit_per_s"):
        assert f"{OVR}.{field}" in keys
    assert "roles.rollout.engine.host_overhead_per_seq_us" in keys
    assert {"workload.response_length.mean", "workload.response_length.sigma"} <= set(keys)
    # Caps and lower bounds are not shape; the prompt length is not varied.
    assert not [k for k in keys if k.endswith((".max", ".min")) or "prompt_length" in k]
    assert len(keys) == len(set(keys))
    for inp in inputs:
        assert inp.low < inp.high, inp
        if inp.base:
            assert inp.low < inp.base < inp.high, inp
            assert math.isclose(inp.low, 0.8 * inp.base, rel_tol=1e-9) or "clipped" in inp.note, inp


def test_default_inputs_generic_distributions_and_agentic():
    scn = load_scenario(QUICKSTART, ["workload.response_length={kind: uniform, min: 100, max: 900}"])
    keys = [i.key for i in default_inputs(scn)[0]]
    assert "workload.response_length.min" in keys and "workload.response_length.max" in keys
    fixed = default_inputs(load_scenario(QUICKSTART, ["workload.response_length={kind: fixed, value: 501}"]))[0]
    (value,) = [i for i in fixed if i.key == "workload.response_length.value"]
    assert (value.low, value.high) == (401, 601) and isinstance(value.low, int)  # integers stay integers
    agentic = default_inputs(load_scenario(ROOT / "scenarios" / "agentic" / "asearcher-7b.yaml"))
    keys, skipped = [i.key for i in agentic[0]], agentic[1]
    assert "workload.agent.turns.mean" in keys and "workload.agent.tokens_per_turn.mean" in keys
    assert any(k.startswith("environments.tools.") and k.endswith("latency.median") for k in keys)
    # The train pool has no engine: its decode constants are not varied (and the report says so).
    assert "cluster.pools.train.profile_overrides.decode_eta_mem" not in keys
    assert any("cluster.pools.train" in s and "decode_eta_mem" in s for s in skipped)


def test_expert_parallel_scenarios_vary_the_alltoall_latency_they_pay():
    """ep > 1 prices dispatch/combine all-to-alls from the profile's fitted send/recv latency (costs/moe.py):
    the in-node one where an ep group fits in a node, the cross-node one where it spans nodes; not otherwise."""
    moe = ROOT / "scenarios" / "sync" / "moe-qwen3-30b-a3b-ep.yaml"
    p2p = "cluster.pools.main.profile_overrides.p2p_latency"
    keys = [i.key for i in default_inputs(load_scenario(moe))[0]]
    assert f"{p2p}_us" in keys and f"{p2p}_inter_node_us" not in keys  # ep 8 and 4 on 8-GPU nodes
    wide = ["roles.actor.parallel.ep=16", "roles.reference.parallel.ep=16"]
    inputs = {i.key: i for i in default_inputs(load_scenario(moe, wide))[0]}
    assert f"{p2p}_us" in inputs and f"{p2p}_inter_node_us" in inputs  # ep 16 spans the two nodes
    assert (inputs[f"{p2p}_inter_node_us"].low, inputs[f"{p2p}_inter_node_us"].base) == pytest.approx((15.28, 19.1))
    assert not [i.key for i in default_inputs(load_scenario(QUICKSTART))[0] if "p2p" in i.key]
    # and the latency is paid: a slower send/recv slows the step
    quick = ["steps=1", "warmup_steps=0"]
    fast, slow = (simulate(load_scenario(moe, [*quick, f"{p2p}_us={v}"])).summary["step_time_s"] for v in (6.08, 9.12))
    assert slow > fast


def test_zero_host_overhead_is_varied_absolutely():
    scn = load_scenario(QUICKSTART, ["roles.rollout.engine.host_overhead_per_seq_us=0"])
    (host,) = [i for i in default_inputs(scn)[0] if i.key.endswith("host_overhead_per_seq_us")]
    assert (host.low, host.base, host.high) == (0.0, 0.0, 50.0) and "absolute" in host.note


def test_vary_syntax_clipping_and_absolute():
    scn = load_scenario(QUICKSTART, [f"{OVR}.decode_eta_mem=0.9"])
    inp = parse_vary(scn, f"{OVR}.decode_eta_mem=±20%")
    assert inp.high == 1.0 and math.isclose(inp.low, 0.72) and "clipped" in inp.note
    assert parse_vary(scn, f"{OVR}.decode_eta_mem=+-10%").high == pytest.approx(0.99)
    inp = parse_vary(scn, "algorithm.samples_per_prompt=4:16")
    assert (inp.low, inp.high) == (4, 16) and inp.low_sets == ("algorithm.samples_per_prompt=4",)
    assert yaml.safe_load(_yaml_number(1e-05)) == 1e-05 and yaml.safe_load(_yaml_number(0.1)) == 0.1


# ---------------------------------------------------------------- runs


def test_table_shape_and_signs():
    prep = prepare(QUICKSTART, SMALL, [f"{OVR}.decode_eta_mem=±20%", "workload.response_length.mean=±30%"])
    result = run_sensitivity(prep, metric="samples_per_s")
    table = result.table.set_index("input")
    assert len(table) == 2 and result.metrics == ("samples_per_s", "throughput_tokens_per_s", "gpu_idle_fraction")
    for m in result.metrics:
        for col in (f"{m}_low", f"{m}_base", f"{m}_high", f"{m}_low_pct", f"{m}_high_pct"):
            assert table[col].notna().all(), col
    # Faster HBM cannot slow a decode-bound scenario down; longer responses mean fewer samples per second.
    eta = table.loc[f"{OVR}.decode_eta_mem"]
    tput = [eta[f"throughput_tokens_per_s_{side}"] for side in ("low", "base", "high")]
    assert tput == sorted(tput) and tput[0] < tput[2]
    mean = table.loc["workload.response_length.mean"]
    assert mean["samples_per_s_high"] < mean["samples_per_s_base"] < mean["samples_per_s_low"]
    assert mean["samples_per_s_high_pct"] < 0 < mean["samples_per_s_low_pct"]
    assert list(result.table["swing"]) == sorted(result.table["swing"], reverse=True)


def test_same_seed_same_table_whatever_the_jobs():
    vary = [f"{OVR}.prefill_eta_compute=±20%", "workload.response_length.sigma=±20%", f"{OVR}.decode_eta_mem=0.5:0.9"]
    serial = run_sensitivity(prepare(QUICKSTART, SMALL, vary)).table
    pooled = run_sensitivity(prepare(QUICKSTART, SMALL, vary), jobs=2).table
    pd.testing.assert_frame_equal(serial, pooled)
    other_seed = run_sensitivity(prepare(QUICKSTART, SMALL, vary, seed=7)).table
    assert not other_seed["throughput_tokens_per_s_base"].equals(serial["throughput_tokens_per_s_base"])


def test_cli_writes_csv_and_tornado(tmp_path):
    res = runner.invoke(app, ["sensitivity", str(QUICKSTART), *[a for s in SMALL for a in ("--set", s)],
                              "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(tmp_path / "sensitivity.csv")
    assert {"input", "low_value", "high_value", "throughput_tokens_per_s_low", "throughput_tokens_per_s_base",
            "throughput_tokens_per_s_high", "throughput_tokens_per_s_low_pct", "throughput_tokens_per_s_high_pct",
            "gpu_idle_fraction_low_pct", "swing"} <= set(df.columns)
    assert len(df) == len(default_inputs(load_scenario(QUICKSTART, SMALL))[0])
    assert list(df["swing"]) == sorted(df["swing"], reverse=True)
    assert (tmp_path / "tornado.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "small_ops_eta_mem" in res.output and "runs in" in res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80  # every table wraps to 80 columns, none crops
    assert "…" not in res.output


@pytest.mark.parametrize(
    ("vary", "message"),
    [
        ("nosuch.key=±20%", "the scenario has no key 'nosuch'"),
        ("workload.response_length.mean=lots", "expected ±P% or lo:hi"),
        ("workload.response_length.mean", "expected dotted.path=±P% or dotted.path=lo:hi"),
        ("workload.response_length=±20%", "is a mapping, not a number"),
        (f"{OVR}.prefill_eta_compute=0.5:1.5", "high value 1.5 is invalid"),
        (f"{OVR}.train_mfu=±20%", "train_mfu is not set on this pool's profile: training and forward passes"),
        (f"{OVR}.hbm=±5%", "not a hardware profile number"),
        ("workload.response_length.mean=900:100", "must be <="),
    ],
)
def test_bad_vary_exit_2_one_line(tmp_path, vary, message):
    res = runner.invoke(app, ["sensitivity", str(QUICKSTART), "--vary", vary, "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    lines = _lines(res.output)
    assert len(lines) == 1 and lines[0].startswith("--vary: ") and message in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_bad_metric_exit_2(tmp_path):
    res = runner.invoke(app, ["sensitivity", str(QUICKSTART), *[a for s in SMALL for a in ("--set", s)],
                              "--vary", f"{OVR}.prefill_eta_compute=±10%", "--metric", "speed", "--out",
                              str(tmp_path)])
    assert res.exit_code == 2 and "--metric: speed: not a number in the summary" in res.output
