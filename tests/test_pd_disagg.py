"""Prefill/decode-disaggregated rollout: the KV transfer's cost, the prefill pool feeding decode engines, the
checks, and what the split does against mixed engines (docs/rollout-quantisation.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.sim import aggregate
from rlsim.sim.costs.generation import PrefillCost, decode_coefficients
from rlsim.sim.costs.pd_disagg import kv_bytes, kv_transfer_time, link_bytes_per_s, prefill_batch_time
from rlsim.sim.costs.quantisation import engine_shape
from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.engine.inference import InferenceEngine
from rlsim.sim.engine.prefill_pool import PrefillPool
from rlsim.sim.engine.request import Request
from rlsim.sim.hardware import load_profile
from rlsim.sim.model_shapes import ModelShape, resolve_preset
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.scenario.schema import EngineSpec
from rlsim.sim.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
PD = ROOT / "scenarios/sync/grpo-pd-disagg.yaml"
QWEN7 = ModelShape(**resolve_preset("qwen2.5-7b"))
H100 = load_profile("h100-sxm")
SMALL = ["steps=2", "warmup_steps=1", "algorithm.prompts_per_step=16"]


def _run(*sets: str):
    return simulate(load_scenario(PD, [*SMALL, *sets]))


def _gen_s(*sets: str) -> float:
    steps = _run(*sets).steps
    return float(steps.loc[~steps["warmup"], "timing_s/gen"].sum())


# ------------------------------------------------------------------ costs


def test_kv_bytes_are_the_models_kv_per_token_and_fp8_halves_them():
    assert kv_bytes(QWEN7, 1000) == 1000 * 2 * QWEN7.layers * QWEN7.kv_heads * QWEN7.d_head * 2
    assert kv_bytes(engine_shape(QWEN7, None, "fp8"), 1000) == kv_bytes(QWEN7, 1000) / 2


def test_transfer_is_bytes_over_tp_links_plus_one_latency():
    tokens = 20_000
    for link, bw, inter in (("nvlink", 450e9, False), ("rdma", 50e9, True), ("pcie", 50e9, False)):
        assert link_bytes_per_s(H100, link) == bw
        for tp in (1, 2, 4):
            want = kv_bytes(QWEN7, tokens) / (bw * tp) + H100.p2p_latency_s(inter)
            assert kv_transfer_time(QWEN7, H100, tokens, link, tp) == pytest.approx(want, rel=1e-12)
    assert kv_transfer_time(QWEN7, H100, 0, "rdma", 2) == 0.0
    assert kv_transfer_time(QWEN7, H100, 2 * tokens, "rdma", 2) > 1.9 * kv_transfer_time(QWEN7, H100, tokens, "rdma", 2)


def test_a_prefill_batch_costs_the_rounds_an_engine_admission_pays():
    cost = PrefillCost(QWEN7, H100, 2)
    lengths = [1500, 700, 3000]
    total, sq = sum(lengths), float(sum(t * t for t in lengths))
    assert prefill_batch_time(cost, lengths, 2048) == cost.rounds(total, sq, 0.0, 2048)[1]
    assert cost.rounds(total, sq, 0.0, 2048)[0] == 3  # 5,200 tokens in chunks of at most 2,048
    assert prefill_batch_time(cost, [], 2048) == 0.0


# ------------------------------------------------------------------ the prefill pool


def test_one_request_prefills_in_the_pool_moves_its_kv_then_decodes_without_a_prefill():
    env = SimEnvironment(0)
    env.ledger.add_pool("p", 4)
    settings = EngineSpec()
    decode = InferenceEngine(env, "d", QWEN7, H100, 2, settings, 200_000, pool="p")
    pool = PrefillPool(env, ["pf"], QWEN7, H100, 2, settings, "rdma", "p")
    decode.prefill_remotely(pool)
    req = Request(1, prompt_tokens=1000, max_new_tokens=11)
    done = decode.submit(req)
    assert decode.load == 1  # in transit counts towards the decode engine's load
    env.run(done)
    prefill = prefill_batch_time(PrefillCost(QWEN7, H100, 2, settings.overheads(H100)), [1000], 8192)
    move = kv_transfer_time(QWEN7, H100, 1000, "rdma", 2)
    # The prefill emits the first token; the other ten are decode steps at batch 1 from a 1,001-token context.
    c = decode_coefficients(QWEN7, H100, 2, 1, overheads=decode.overheads)
    assert req.finished_s == pytest.approx(prefill + move + c.steps_time(1001, 10), rel=1e-9)
    assert req.admitted_s == 0.0 and req.first_token_s == pytest.approx(prefill + move, rel=1e-12)
    assert decode.tokens_prefilled == 0 and pool.tokens_prefilled == 1000 and req.prefilled_tokens == 1000
    assert decode.tokens_generated == 11 and decode.load == 0
    busy = env.ledger.to_frame()
    assert set(busy["gpu_group"]) == {"pf", "d"} and set(busy["phase"]) == {"generate"}


def test_the_pool_batches_prompts_and_its_link_carries_one_batch_after_another():
    env = SimEnvironment(0)
    env.ledger.add_pool("p", 4)
    settings = EngineSpec(max_num_batched_tokens=4096)
    decode = InferenceEngine(env, "d", QWEN7, H100, 2, settings, 1_000_000, pool="p")
    pool = PrefillPool(env, ["pf"], QWEN7, H100, 2, settings, "pcie", "p")
    decode.prefill_remotely(pool)
    reqs = [Request(i, prompt_tokens=2000, max_new_tokens=5) for i in range(8)]
    env.run(env.all_of([decode.submit(r) for r in reqs]))
    assert pool.batches == 4  # two 2,000-token prompts per 4,096-token batch
    assert pool.kv_bytes_moved == kv_bytes(QWEN7, 16_000)
    assert pool.transfer_s == pytest.approx(4 * kv_transfer_time(QWEN7, H100, 4000, "pcie", 2))


def test_an_aborted_request_never_reaches_its_decode_engine():
    env = SimEnvironment(0)
    env.ledger.add_pool("p", 4)
    settings = EngineSpec(max_num_batched_tokens=1000)
    decode = InferenceEngine(env, "d", QWEN7, H100, 2, settings, 200_000, pool="p")
    decode.prefill_remotely(PrefillPool(env, ["pf"], QWEN7, H100, 2, settings, "rdma", "p"))
    first, second = Request(1, 1000, 5), Request(2, 1000, 5)
    decode.submit(first)
    done = decode.submit(second)
    decode.abort(second)  # still queued in the pool
    assert done.triggered and second.aborted
    env.run()
    assert first.finished and not second.finished and decode.completed == 1 and decode.load == 0


def test_later_agentic_turns_prefill_on_their_decode_engine():
    env = SimEnvironment(0)
    env.ledger.add_pool("p", 4)
    decode = InferenceEngine(env, "d", QWEN7, H100, 2, EngineSpec(), 200_000, pool="p")
    pool = PrefillPool(env, ["pf"], QWEN7, H100, 2, EngineSpec(), "rdma", "p")
    decode.prefill_remotely(pool)
    req = Request(1, prompt_tokens=100, max_new_tokens=5, prefix_tokens=900, trajectory_id="t")
    env.run(decode.submit(req))
    assert pool.tokens_prefilled == 0 and decode.tokens_prefilled == 1000


# ------------------------------------------------------------------ the scenario


def test_the_split_runs_its_engines_as_prefill_and_decode_and_keeps_gpu_time():
    res = _run()
    gen = res.timeline[res.timeline["phase"] == "generate"]
    assert set(gen["gpu_group"]) == {"rollout-prefill-0", "rollout-0", "rollout-1", "rollout-2"}
    assert (gen["gpus"] == 2).all()  # four TP2 engines: the role's 8 GPUs
    assert set(res.engine_stats["engine"]) == {"rollout-0", "rollout-1", "rollout-2"}
    first = gen.groupby("gpu_group")["start_s"].min()
    assert first["rollout-prefill-0"] < first["rollout-0"]  # decode starts once the first batch's KV is there


def test_a_slower_kv_link_slows_generation_and_the_split_keeps_one_event_per_batch():
    nvlink = _gen_s()
    pcie = _gen_s("roles.rollout.engine.disaggregation.kv_link=pcie")
    assert pcie > nvlink

    def events(*sets):
        return simulate(load_scenario(PD, ["steps=1", "warmup_steps=0", "algorithm.prompts_per_step=16", *sets])
                        ).meta["events"]

    short = events("workload.response_length={kind: fixed, value: 500}")
    long = events("workload.response_length={kind: fixed, value: 4000}")
    assert long == short  # 8x the tokens, the same batch changes


def test_at_equal_gpus_the_split_loses_to_mixed_engines_on_rl_rollout_shapes():
    # benchmarks/pd_disagg_sweep.py: every prompt/response cell of the table; two of them here.
    for prompt, response in ((512, 1024), (8192, 256)):
        sets = [f"workload.prompt_length={{kind: fixed, value: {prompt}}}",
                f"workload.response_length={{kind: fixed, value: {response}}}",
                "roles.rollout.engine.max_num_batched_tokens=16384"]
        assert _gen_s(*sets) > _gen_s(*sets, "roles.rollout.engine.disaggregation=null")


# ------------------------------------------------------------------ checks


@pytest.mark.parametrize(("sets", "where", "words"), [
    (["roles.rollout.engine.disaggregation.decode_engines=4"], "roles.rollout.engine.disaggregation",
     "1 + decode_engines 4 = 5 engines of TP 2, but the role's 8 GPUs make 4"),
    (["cluster.pools.gen.hardware=l40s", "roles.rollout.engine.gpu_memory_utilization=0.3"],
     "roles.rollout.engine.disaggregation.kv_link", "has no NVLink: use pcie or rdma"),
    (["roles.reference.engine={disaggregation: {prefill_engines: 1, decode_engines: 7}}"],
     "roles.reference.engine.disaggregation", "only the rollout role"),
])
def test_a_bad_split_is_one_line_at_its_path(sets, where, words):
    with pytest.raises(ScenarioError) as err:
        load_scenario(PD, sets)
    text = str(err.value)
    assert where in text and words in text and "Traceback" not in text


def test_a_schedule_that_rebuilds_engines_is_refused():
    with pytest.raises(ScenarioError, match="schedule.tail_reshard"):
        load_scenario(PD, ["schedule.tail_reshard={factor: 2}"])


def test_aggregate_mode_runs_the_split_exactly_and_says_why():
    scn = load_scenario(PD, ["simulation.engines=1"])
    plan_, why = aggregate.plan(scn)
    assert plan_ is None and "prefill/decode disaggregation" in why


# ------------------------------------------------------------------ import mapping


def test_verl_disaggregation_maps_to_the_engine_split():
    pytest.importorskip("typer")
    from import_helpers import assert_complete, fetch_wheel

    from rlsim.tools.importers.command import run_import
    from rlsim.tools.importers.common import ImportProblem

    config = fetch_wheel("verl", "0.9.1") / "verl" / "trainer" / "config" / "ppo_trainer.yaml"
    d = "actor_rollout_ref.rollout.disaggregation"
    on = ["actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
          f"{d}.enabled=true", f"{d}.decode_replicas=3"]
    imported = run_import("verl", config, on)
    pd = imported.scenario.roles["rollout"].engine.disaggregation
    assert (pd.prefill_engines, pd.decode_engines, pd.kv_link) == (1, 3, "nvlink")  # one 8-GPU PD replica, NIXL
    assert f"{d}.decode_replicas" in imported.ledger.used and f"{d}.transfer_backend" in imported.ledger.used
    assert any("KV moved by nixl" in a.what for a in imported.ledger.assumed)
    assert_complete(imported.ledger)
    two = run_import("verl", config, [*on, f"{d}.decode_replicas=1", f"{d}.transfer_backend=mooncake",
                                      f"+{d}.mooncake_protocol=rdma"])
    pd = two.scenario.roles["rollout"].engine.disaggregation
    assert (pd.prefill_engines, pd.decode_engines, pd.kv_link) == (2, 2, "rdma")  # two replicas of 1 + 1
    off = run_import("verl", config, [])
    assert off.scenario.roles["rollout"].engine.disaggregation is None
    assert f"{d}.enabled" in off.ledger.ignored
    with pytest.raises(ImportProblem, match="asymmetric"):
        run_import("verl", config, [*on, f"{d}.decode_tensor_model_parallel_size=1"])


def test_slime_prefill_servers_split_the_rollout_engines():
    pytest.importorskip("typer")
    from import_helpers import assert_complete

    from rlsim.tools.importers.command import run_import

    script = ROOT / "tests/fixtures/import/slime/run-qwen3-4B.sh"
    imported = run_import("slime", script, ["--rollout-num-gpus-per-engine", "2", "--prefill-num-servers", "1"])
    pd = imported.scenario.roles["rollout"].engine.disaggregation
    gpus = imported.scenario.role_gpus("rollout")
    assert (pd.prefill_engines, pd.decode_engines, pd.kv_link) == (1, gpus // 2 - 1, "rdma")
    assert "--prefill-num-servers" in imported.ledger.used
    assert any("SGLang PD" in a.what for a in imported.ledger.assumed)
    assert_complete(imported.ledger)
    assert run_import("slime", script, []).scenario.roles["rollout"].engine.disaggregation is None
