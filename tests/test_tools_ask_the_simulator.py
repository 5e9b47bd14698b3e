"""The tools hold no copy of a simulator rule: each asks the object that owns it.

Per rule, the simulator's owner is changed (monkeypatched) and the tool is seen to follow, or the tool is shown
to hold the simulator's own object; where a rule is arithmetic, the tool and the simulator agree on a case.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlsim.sim.api import load_profile, load_scenario, parse_scenario, resolve_preset, shipped_dir, simulate
from rlsim.sim.costs import moe
from rlsim.sim.model_shapes import ModelShape
from rlsim.sim.scenario.schema import environments, lengths, schedule

SCENARIOS = shipped_dir("scenarios")
QUICKSTART = SCENARIOS / "quickstart.yaml"


# ---------------------------------------------------------------- MoE cost terms in calibration


def test_calibration_prices_moe_rows_with_the_simulators_terms():
    from rlsim.tools.calibration import ops_moe

    assert ops_moe.touched_fraction is moe.touched_fraction
    assert ops_moe.grouped_gemm_work is moe.grouped_gemm_work


def test_the_fitted_form_at_the_profiles_efficiencies_is_the_simulators_expert_gemm():
    """A Frontier-style row of Qwen3-30B-A3B at TP 1, EP 1, priced as calibration fits it (`gemm_terms`, then
    hypot(read / eta_mem, compute / eta_compute)), equals the simulator's grouped GEMM of the same step."""
    from rlsim.tools.calibration.ops_moe import gemm_terms

    model = ModelShape(**resolve_preset("qwen3-30b-a3b"))
    hw = load_profile("h800").model_copy(update={"moe_routing_per_token_us": None})
    peak = hw.peak_flops_for(model.weight_bytes)
    for tokens in (1.0, 16.0, 512.0):
        row = {"expert_hidden_dim": np.array([float(model.ffn)]), "num_tensor_parallel_workers": np.array([1.0]),
               "hidden_dim": np.array([float(model.hidden)]),
               "num_experts_per_device": np.array([float(model.num_experts)]),
               "expert_utilization": np.array([moe.touched_share(model, tokens)]),
               "total_routed_tokens": np.array([tokens * model.experts_per_token])}
        _, read, compute = gemm_terms(row, peak, hw.hbm_bytes_per_s)
        fitted_form = np.hypot(read / hw.moe_gemm_eta_mem, compute / hw.moe_gemm_eta_compute)[0]
        simulated = moe.expert_gemm_time(model, hw, tokens, tp=1, ep=1) / model.layers
        assert fitted_form == pytest.approx(simulated, rel=1e-12)


def test_touched_experts_of_calibration_is_the_simulators_share_row_by_row():
    from rlsim.tools.calibration.ops_moe import touched_experts

    model = ModelShape(**resolve_preset("qwen3-30b-a3b"))
    tokens = np.array([0.0, 1.0, 7.0, 300.0])
    got = touched_experts(tokens, np.full(4, float(model.num_experts)), np.full(4, float(model.experts_per_token)))
    want = [model.num_experts * moe.touched_share(model, t) for t in tokens]
    assert got == pytest.approx(want, rel=1e-12)


# ---------------------------------------------------------------- distribution shapes in sensitivity


def _keys(scn) -> set[str]:
    from rlsim.tools.sensitivity import default_inputs

    return {i.key for i in default_inputs(scn)[0]}


def test_sensitivity_varies_the_shape_the_length_law_declares(monkeypatch):
    scn = load_scenario(QUICKSTART)
    before = {k for k in _keys(scn) if k.startswith("workload.response_length.")}
    assert {"workload.response_length.mean", "workload.response_length.sigma"} <= before
    monkeypatch.setattr(lengths.LognormalLength, "shape_fields", ("sigma",))
    after = {k for k in _keys(scn) if k.startswith("workload.response_length.")}
    assert after == {"workload.response_length.sigma"}


def test_sensitivity_moves_the_centre_the_latency_law_declares(monkeypatch):
    scn = load_scenario(SCENARIOS / "agentic" / "tool-latency-base.yaml")
    latency = {k for k in _keys(scn) if k.startswith("environments.tools.")}
    assert latency and all(k.endswith(".latency.median") for k in latency)
    monkeypatch.setattr(environments.LognormalSeconds, "centre_fields", ("sigma",))
    latency = {k for k in _keys(scn) if k.startswith("environments.tools.")}
    assert latency and all(k.endswith(".latency.sigma") for k in latency)


def test_a_uniform_centre_is_read_as_the_laws_own_mean(monkeypatch):
    """Several centre fields scale together and the input reads as the law's `expectation()`."""
    from rlsim.tools.sensitivity.inputs import _distribution_inputs

    law = lengths.UniformLength(kind="uniform", min=100, max=300)
    (inp,) = _distribution_inputs("workload.agent.turns", law, 10.0, [], center_only=True)
    assert (inp.key, inp.base, inp.low, inp.high) == ("workload.agent.turns.mean", 200.0, 180.0, 220.0)
    assert inp.low_sets == ("workload.agent.turns.min=90", "workload.agent.turns.max=270")
    monkeypatch.setattr(lengths.UniformLength, "expectation", lambda self: float(self.max))
    (inp,) = _distribution_inputs("workload.agent.turns", law, 10.0, [], center_only=True)
    assert (inp.base, inp.low, inp.high) == (300.0, 270.0, 330.0)


# ---------------------------------------------------------------- engine limits in the report


def _tiny():
    return parse_scenario({
        "name": "tiny", "seed": 7, "steps": 1, "warmup_steps": 0,
        "cluster": {"pools": {"gen": {"hardware": "h100-sxm", "nodes": 1, "gpus_per_node": 2}}},
        "models": {"policy": {"preset": "qwen2.5-0.5b"}},
        "roles": {"rollout": {"pool": "gen", "model": "policy", "parallel": {"tp": 1}, "engine": {"max_num_seqs": 8}}},
        "algorithm": {"kind": "generate", "prompts_per_step": 4, "samples_per_prompt": 2},
        "workload": {"prompt_length": {"kind": "fixed", "value": 64},
                     "response_length": {"kind": "fixed", "value": 64}},
        "schedule": {"kind": "generation-only"},
    })


def test_report_reads_each_engines_limit_from_the_engine(monkeypatch, tmp_path):
    from rlsim.sim.engine.inference import InferenceEngine
    from rlsim.tools.report.output import load_run, write_results
    from rlsim.tools.report.tables import RunTables

    monkeypatch.setattr(InferenceEngine, "max_num_seqs", property(lambda self: 7))
    result = simulate(_tiny())
    assert RunTables.from_result(result).max_num_seqs == {"rollout-0": 7, "rollout-1": 7}
    write_results(result, tmp_path, plots=False)
    assert load_run(tmp_path)[1].max_num_seqs == {"rollout-0": 7, "rollout-1": 7}


def test_lent_engines_have_their_limit_in_the_report():
    """Engines that belong to no role by name (verl V1's lent trainer GPUs, `lent-<i>`) carry their limit: the
    report used to match `<role>-<i>` names to roles and left them without one."""
    from rlsim.tools.report.tables import RunTables

    scn = load_scenario(SCENARIOS / "async" / "verl-v1-separate-async-lending.yaml", ["steps=1", "warmup_steps=0"])
    limits = RunTables.from_result(simulate(scn)).max_num_seqs
    lent = {k: v for k, v in limits.items() if k.startswith("lent-")}
    assert lent and set(lent.values()) == {scn.roles["rollout"].engine.max_num_seqs}


def test_the_validation_regime_counts_engines_and_context_as_the_simulator_does(monkeypatch):
    import rlsim.sim.api as api
    from rlsim.tools.report.validation_band import scenario_regime

    scn = load_scenario(QUICKSTART)
    base = scenario_regime(scn)
    monkeypatch.setattr(api, "max_sequence_tokens", lambda s: 12_345)
    assert scenario_regime(scn).context == 12_345
    samples = scn.algorithm.prompts_per_step * scn.algorithm.samples_per_prompt
    monkeypatch.setattr(type(scn), "engine_count", lambda self, name: samples)  # one sequence per engine
    assert scenario_regime(scn).batch == "small" != base.batch


# ---------------------------------------------------------------- staleness bounds in reproduce


def test_the_complexity_table_reads_each_schedules_staleness_bound(monkeypatch):
    from rlsim.sim.staleness import VERSIONS, Staleness
    from rlsim.tools.reproduce.transitions import complexity_table

    assert list(complexity_table()["staleness_bound"].iloc[-3:]) == [0, 1, 4]
    monkeypatch.setattr(schedule.OneStepOffSpec, "staleness_bound", property(lambda self: Staleness(3, VERSIONS)))
    assert list(complexity_table()["staleness_bound"].iloc[-3:]) == [0, 3, 4]


def test_a_synchronous_schedule_declares_a_bound_of_zero_versions():
    from rlsim.sim.staleness import VERSIONS, Staleness

    assert load_scenario(QUICKSTART).schedule.staleness_bound == Staleness(0, VERSIONS)


# ---------------------------------------------------------------- head starts in sweep and plan


def test_sweep_warms_up_by_the_head_start_the_spec_declares(monkeypatch):
    from rlsim.tools.sweep.steady_state import steady_state_warmup

    fully_async = {"kind": "fully-async", "max_head_offpolicyness": 2}
    assert steady_state_warmup(fully_async, 0) == 1 + 3  # eta + 1 versions ahead, one step each
    monkeypatch.setattr(schedule.FullyAsyncSpec, "head_start_steps", property(lambda self: 6))
    assert steady_state_warmup(fully_async, 0) == 7
    monkeypatch.setattr(schedule.HybridFlowSpec, "head_start_steps", property(lambda self: 2))
    assert steady_state_warmup({"kind": "hybridflow"}, 0) == 3
