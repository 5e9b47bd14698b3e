"""The mechanisms RL systems shipped after the seed's: each one's defining behaviour, on a small run.

docs/schedules-2026.md describes each mechanism, its knobs and its scenario.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlsim.sim.results.lifecycle import SampleState
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["steps=2", "warmup_steps=0", "algorithm.prompts_per_step=8"]


def run(path: str, *overrides: str, small=SMALL):
    return simulate(load_scenario(ROOT / path, [*small, *overrides]))


# ---------------------------------------------------------------- rollout log-probs, every schedule

LOGPROB_CASES = {
    "hybridflow": "scenarios/quickstart.yaml",
    "one-step-off": "scenarios/async/verl-dapo-7b-h20-one-step-off.yaml",
    "fully-async": "scenarios/async/areal-1.5b-h800.yaml",
    "roll": "scenarios/roll/rlvr-qwen2.5-7b-async.yaml",
    "agentic-roll": "scenarios/roll/agentic-sokoban.yaml",
}


@pytest.mark.parametrize("case", sorted(LOGPROB_CASES))
def test_rollout_logprobs_remove_the_old_log_prob_pass_from_the_timeline(case):
    """recompute_logprob: false: no actor forward pass (timeline) and no old_log_prob column, in every schedule."""
    with_pass = run(LOGPROB_CASES[case], "schedule.recompute_logprob=true")
    without = run(LOGPROB_CASES[case], "schedule.recompute_logprob=false")
    actor_fwd = with_pass.timeline.query("role == 'actor' and phase == 'forward'")
    assert len(actor_fwd) > 0 and "timing_s/old_log_prob" in with_pass.steps.columns, case
    assert without.timeline.query("role == 'actor' and phase == 'forward'").empty, case
    assert "timing_s/old_log_prob" not in without.steps.columns, case
    # The actor's busy time drops by exactly the pass it no longer runs (same lengths: same seed and draws).
    busy = {k: (r.timeline.query("role == 'actor'").eval("(end_s - start_s) * gpus")).sum()
            for k, r in (("with", with_pass), ("without", without))}
    fwd = (actor_fwd.end_s - actor_fwd.start_s).mul(actor_fwd.gpus).sum()
    if case in ("hybridflow", "one-step-off"):  # synchronous batches: the same samples are trained either way
        assert busy["with"] - busy["without"] == pytest.approx(fwd, rel=1e-6), case


def test_verl_import_maps_rollout_log_probs_for_the_synchronous_trainer():
    from import_helpers import fetch_wheel

    from rlsim.tools.importers.command import run_import

    cfg = fetch_wheel("verl", "0.9.1") / "verl" / "trainer" / "config" / "ppo_trainer.yaml"
    base = ["actor_rollout_ref.rollout.name=vllm"]
    assert run_import("verl", cfg, base).scenario.schedule.recompute_logprob is True  # verl's default
    imported = run_import("verl", cfg, [*base, "algorithm.rollout_correction.bypass_mode=true"])
    assert imported.scenario.schedule.kind == "hybridflow"
    assert imported.scenario.schedule.recompute_logprob is False
    assert imported.ledger.used["algorithm.rollout_correction.bypass_mode"].startswith("schedule.recompute")


# ---------------------------------------------------------------- LoRA RL


def test_lora_sync_moves_the_adapter_bytes_only():
    """One-step-off (an NCCL broadcast each step): the sync moves r x (d_in + d_out) per adapted module."""
    from rlsim.sim.costs.lora import adapter_bytes
    from rlsim.sim.costs.weight_sync import SyncSetup, sync_time
    from rlsim.sim.engine.fleet import role_hardware

    path = "scenarios/async/verl-dapo-7b-h20-one-step-off.yaml"
    lora = run(path, "schedule.lora.rank=32")
    full = run(path)
    scn = lora.scenario
    model = scn.models[scn.roles["actor"].model]
    adapter = adapter_bytes(model, 32)
    # Every linear layer of a layer: 32 x (d_in + d_out) parameters, written out by hand for q, k, v, o, gate, up, down.
    h, q, kv, f = model.hidden, model.heads * model.d_head, model.kv_heads * model.d_head, model.ffn
    by_hand = model.layers * 32 * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + f) + (f + h)) * model.weight_bytes
    assert adapter == by_hand
    assert (lora.steps["weight_sync/bytes"] == adapter).all()  # one sync per step, the adapter and nothing else
    assert adapter < 0.03 * model.weight_bytes_total and "weight_sync/bytes" not in full.steps.columns
    # The broadcast takes what moving those bytes takes, far less than moving the full weights.
    hw_a, hw_r = role_hardware(scn, scn.roles["actor"]), role_hardware(scn, scn.roles["rollout"])
    gpus = scn.role_gpus("actor")
    expect = sync_time(SyncSetup(adapter, model.layers * 2 * 7, hw_a, hw_r, scn.role_gpus("rollout"),
                                 scn.roles["rollout"].parallel.tp, gpus, -(-gpus // 6)))
    assert lora.steps["timing_s/sync_rollout_weights"].to_numpy() == pytest.approx(expect, rel=1e-9)
    assert (lora.steps["timing_s/sync_rollout_weights"] < 0.05 * full.steps["timing_s/sync_rollout_weights"]).all()


def test_lora_update_skips_the_base_weight_gradients_and_engines_pay_the_lora_kernels():
    from rlsim.sim.costs.lora import lora_step_overhead_s

    lora = run("scenarios/sync/grpo-lora.yaml", small=["steps=1", "warmup_steps=0"])
    full = run("scenarios/sync/grpo-lora.yaml", "schedule.lora=null", small=["steps=1", "warmup_steps=0"])
    ratio = float(lora.steps["timing_s/update_actor"].iloc[0] / full.steps["timing_s/update_actor"].iloc[0])
    # The linear layers' 6N per token becomes 4N (adapters ~1% of N); attention, the memory-bound operators,
    # recompute, the log-prob passes over the vocabulary and the fixed costs are unchanged, so the update falls
    # to about 2/3-5/6 of the full one (costs/training_ops.py).
    assert 0.6 < ratio < 0.84, ratio
    # Same seed, same lengths: generation is slower only by the per-step LoRA kernels.
    assert (lora.steps["response_tokens"] == full.steps["response_tokens"]).all()
    assert float(lora.steps["timing_s/gen"].iloc[0]) > float(full.steps["timing_s/gen"].iloc[0])
    scn = lora.scenario
    ro = scn.roles["rollout"]
    from rlsim.sim.engine.fleet import role_hardware

    hw = role_hardware(scn, ro)
    per_step = lora_step_overhead_s(scn.models[ro.model], hw, ro.parallel.tp, 32, "all-linear", 4e-6)
    assert per_step == pytest.approx(2 * 4 * 28 * 4e-6 + 80_740_352 * 2 / 2 / 3.35e12, rel=0.05)  # 28 layers (7B)


def test_lora_store_sync_needs_a_bandwidth_and_verl_import_maps_lora_rank():
    from import_helpers import fetch_wheel

    from rlsim.sim.scenario.errors import ScenarioError
    from rlsim.tools.importers.command import run_import

    with pytest.raises(ScenarioError, match="store_gb_per_s"):
        load_scenario(ROOT / "scenarios/sync/grpo-lora.yaml", ["schedule.lora.sync=store"])
    cfg = fetch_wheel("verl", "0.9.1") / "verl" / "trainer" / "config" / "ppo_trainer.yaml"
    imported = run_import("verl", cfg, ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.lora_rank=64"])
    assert imported.scenario.schedule.lora.rank == 64 and imported.scenario.schedule.lora.targets == "all-linear"
    assert run_import("verl", cfg, ["actor_rollout_ref.rollout.name=vllm"]).scenario.schedule.lora is None


# ---------------------------------------------------------------- group-affinity routing


def _affinity_run(n: int, policy: str):
    """A short asynchronous GRPO run, kept whole (no preemption, no weight-update recompute): the schedule."""
    from rlsim.sim.engine.environment import SimEnvironment
    from rlsim.sim.schedules import build_schedule

    scn = load_scenario(ROOT / "scenarios/async/grpo-affinity-cap.yaml", [
        "steps=2", "warmup_steps=0", "algorithm.prompts_per_step=16", f"algorithm.samples_per_prompt={n}",
        "workload.response_length.mean=300", "workload.response_length.max=600", f"schedule.routing.policy={policy}"])
    env = SimEnvironment(scn.seed)
    schedule = build_schedule(scn, env)
    env.run(until=env.process(schedule.run()))
    return schedule


@pytest.mark.parametrize("n", [2, 4, 8])
def test_affinity_routing_saves_prefill_in_proportion_to_group_size(n):
    """A group's prompt is prefilled once (plus one token per other answer): (n-1)/n of its prefill is saved."""
    sched = _affinity_run(n, "affinity")
    groups = {}
    for s in sched.samples_all:
        if s.request is not None and s.request.finished:
            groups.setdefault(s.group.gid, []).append(s)
    whole = [g for g in groups.values() if len(g) == n]
    assert len(whole) >= 16
    assert all(len({s.request.engine for s in g}) == 1 for g in whole)  # one engine per group
    assert sum(s.request.preemptions for g in whole for s in g) == 0
    prompt = sum(s.prompt_tokens for g in whole for s in g)
    prefilled = sum(s.request.prefilled_tokens for g in whole for s in g)  # what the engines computed
    assert prefilled == sum(g[0].prompt_tokens + n - 1 for g in whole)  # the prompt once, 1 token per sibling
    saved = 1 - prefilled / prompt
    mean_p = prompt / (n * len(whole))
    assert saved == pytest.approx((n - 1) / n * (1 - 1 / mean_p), rel=0.02)


def test_affinity_policies_trade_prefill_saved_against_load_imbalance():
    small = ["steps=2", "warmup_steps=0", "algorithm.prompts_per_step=32", "schedule.max_concurrent_rollouts=24"]
    res = {p: run("scenarios/async/grpo-affinity-cap.yaml", f"schedule.routing.policy={p}", small=small)
           for p in ("least-loaded", "affinity", "affinity-bounded")}
    saved = {p: r.steps["routing/prefill_saved_tokens"].sum() for p, r in res.items()}
    hits = {p: r.steps["routing/affinity_hits"].sum() for p, r in res.items()}
    imb = {p: r.steps["routing/load_imbalance"].mean() for p, r in res.items()}
    assert saved["affinity"] > saved["affinity-bounded"] > saved["least-loaded"] >= 0
    assert hits["affinity"] > hits["affinity-bounded"] > hits["least-loaded"]
    assert imb["affinity"] > imb["affinity-bounded"] > imb["least-loaded"] >= 1.0
    # The global cap: never more groups in flight than max_concurrent_rollouts, across all replicas.
    cap = res["affinity"].scenario.schedule.max_concurrent_rollouts
    n = res["affinity"].scenario.algorithm.samples_per_prompt
    smp = res["affinity"].samples
    start, end = smp["arrival_s"].to_numpy(), smp["finished_s"].fillna(np.inf).to_numpy()
    in_flight = [(start <= t) & (t < end) for t in start]
    assert max(int(f.sum()) for f in in_flight) <= cap * n
    assert max(int(f.sum()) for f in in_flight) > (cap - 1) * n  # and the cap is what binds


# ---------------------------------------------------------------- in-flight weight updates


def _inflight(*overrides: str):
    from rlsim.sim.engine.environment import SimEnvironment
    from rlsim.sim.schedules import build_schedule

    scn = load_scenario(ROOT / "scenarios/async/inflight-updates.yaml",
                        ["steps=3", "warmup_steps=0", "algorithm.prompts_per_step=32", *overrides])
    env = SimEnvironment(scn.seed)
    schedule = build_schedule(scn, env)
    env.run(until=env.process(schedule.run()))
    return schedule


def test_inflight_updates_put_tokens_of_several_versions_in_one_sequence():
    sched = _inflight()
    trained = [s for s in sched.samples_all if s.trained_version is not None]
    mixed = [s for s in trained if len(s.version_tokens) > 1]
    assert mixed, "no trained sequence spans a weight push"
    for s in mixed:  # every token is accounted to one version, and the versions are consecutive pushes
        assert sum(s.version_tokens.values()) == s.generated
        assert max(s.version_tokens) - min(s.version_tokens) == len(s.version_tokens) - 1
    assert sched.tokens_discarded == 0  # nothing is aborted or re-generated at a push: sequences continue
    rows = sched.collector.step_rows
    assert sum(r["samples/multi_version"] for r in rows) == len(mixed)
    # Per token, a batch is less stale than per sample once sequences span pushes (newer tokens count less).
    last = rows[-1]
    assert last["tokens/multi_version_share"] > 0
    assert last["staleness/token_mean"] < last["staleness/mean"]
    assert last["staleness/token_max"] == last["staleness/max"]


@pytest.mark.parametrize("k", [0, 1, 2])
def test_inflight_updates_honour_the_trajectory_age_bound(k):
    """No trained trajectory is older than k versions; k = 0 leaves nothing in flight across a push."""
    sched = _inflight(f"schedule.max_trajectory_age_steps={k}")
    trained = [s for s in sched.samples_all if s.trained_version is not None]
    assert len(trained) == 3 * 32 * 16
    ages = [s.trained_version - s.oldest_version for s in trained]
    assert max(ages) <= k
    assert max(ages) == k  # the bound is reached: it is what limits staleness
    assert all(s.trained_version - min(s.version_tokens or {0: 0}) <= k for s in trained)
    if k == 0:
        assert all(len(s.version_tokens) <= 1 for s in trained)


def test_inflight_knobs_refuse_contradictions_in_one_line():
    from rlsim.sim.scenario.errors import ScenarioError

    path = ROOT / "scenarios/async/inflight-updates.yaml"
    with pytest.raises(ScenarioError, match="interrupt: keep"):
        load_scenario(path, ["schedule.interrupt=recompute"])
    with pytest.raises(ScenarioError, match="max_trajectory_age_steps"):
        load_scenario(path, ["schedule.max_head_offpolicyness=4"])
    assert load_scenario(path, []).schedule.drop_stale  # the age bound drops what is older


# ---------------------------------------------------------------- verl V1 trainer: colocate_async, lending


def _v1(path: str, *overrides: str):
    from rlsim.sim.engine.environment import SimEnvironment
    from rlsim.sim.schedules import build_schedule

    scn = load_scenario(ROOT / path, ["steps=2", "warmup_steps=0", *overrides])
    env = SimEnvironment(scn.seed)
    schedule = build_schedule(scn, env)
    env.run(until=env.process(schedule.run()))
    return schedule


LENDING = "scenarios/async/verl-v1-separate-async-lending.yaml"


def _lends(path_overrides=()):
    return _v1(LENDING, "steps=8", *path_overrides)


@pytest.mark.slow
def test_lending_moves_gpus_only_when_the_benefit_beats_the_switch_cost():
    """verl's rule, decision by decision: lend iff groups remain and benefit > cost (or one is not known yet)."""
    sched = _lends()
    assert len(sched.lending.lend_log) == 8
    for rec in sched.lending.lend_log:
        b, c = rec["benefit_seconds"], rec["effective_switch_cost_seconds"]
        assert rec["lend"] == (rec["remaining"] > 0 and (b is None or c is None or b > c)), rec
    measured = [r for r in sched.lending.lend_log if r["effective_switch_cost_seconds"] is not None and r["remaining"]]
    assert measured  # once a round trip is measured, the cost gates: here a benefit below it kept the GPUs
    assert all(r["lend"] == (r["benefit_seconds"] > r["effective_switch_cost_seconds"]) for r in measured)
    assert any(not r["lend"] for r in measured)
    tl = sched.env.ledger.to_frame()
    lent = tl[tl["gpu_group"].str.startswith("lent-")]
    assert len(lent) > 0 and (lent["pool"] == "train").all()  # the trainer's GPUs generated
    switches_in = sum(1 for r in sched.lending.lend_log if r["lend"])
    assert len(sched.lending.to_rollout_s) == min(switches_in, sched.lending.switch.switch_cost_window_size)
    # A switch dearer than any benefit: once its cost is measured, the GPUs stay with the trainer.
    dear = _lends(["schedule.hybrid_rollout.engine_start_s=1000"])
    known = [r for r in dear.lending.lend_log if r["effective_switch_cost_seconds"] is not None]
    assert known and not any(r["lend"] for r in known)
    assert all(r["effective_switch_cost_seconds"] > 1000 for r in known)
    # Lending pays here: the run is shorter than without it (the trainer's GPUs fill the first wait).
    off = _lends(["schedule.hybrid_rollout.enable_switch=false"])
    assert not off.lending.lend_log and off.env.ledger.to_frame()["gpu_group"].str.startswith("lent-").sum() == 0
    assert sched.collector.step_rows[-1]["end_s"] < off.collector.step_rows[-1]["end_s"]


def test_lending_never_loses_a_sample():
    sched = _lends()
    assert sched.lending.moved > 0  # sequences were running on the lent GPUs when the trainer took them back
    for s in sched.samples_all:  # only the off-policy bound drops samples; a move loses none
        if s.state in (SampleState.ABORTED, SampleState.DROPPED):
            assert s.reason in ("stale", "in flight at end of run"), (s.sid, s.reason)
        if s.finished and s.state in (SampleState.COMPLETED, SampleState.TRAINED):  # the whole response generated
            assert s.generated == s.response_tokens
            assert sum(s.version_tokens.values()) == s.generated
    trained = sum(1 for s in sched.samples_all if s.trained_version is not None)
    assert trained == 8 * sched.scenario.algorithm.prompts_per_step * sched.scenario.algorithm.samples_per_prompt


def test_colocate_async_takes_turns_on_the_same_gpus_and_resumes_partial_rollouts():
    sched = _v1("scenarios/async/verl-v1-colocate-async.yaml", "steps=3")
    tl = sched.env.ledger.to_frame()
    gen = tl[tl["phase"] == "generate"]
    train = tl[(tl["role"] == "actor") & (tl["phase"] != "generate")]
    for _, t in train.iterrows():  # the actor's phases never overlap generation on the shared GPUs
        assert not ((gen["start_s"] < t["end_s"] - 1e-9) & (gen["end_s"] > t["start_s"] + 1e-9)).any()
    assert sched.lending.moved > 0  # partial rollouts: sequences set aside at a switch ...
    resumed = [s for s in sched.samples_all if s.trained_version is not None and len(s.version_tokens) > 1]
    assert resumed  # ... continue under the next weights and are trained
    assert all(s.reason in ("stale", "in flight at end of run") for s in sched.samples_all  # only the bound drops
               if s.state in (SampleState.ABORTED, SampleState.DROPPED))


# ---------------------------------------------------------------- tail re-sharding

TAIL = "scenarios/sync/tail-reshard.yaml"


def _tail(*overrides: str):
    return _v1(TAIL, *overrides)


@pytest.mark.parametrize("mode", ["migrate", "recompute"])
def test_tail_reshard_shortens_a_tail_bound_rollout_by_more_than_its_cost(mode):
    taken = _tail(f"schedule.tail_reshard.mode={mode}", "steps=3")
    base = _tail("schedule.tail_reshard=null", "steps=3")
    rows, brows = taken.collector.step_rows, base.collector.step_rows
    assert [r["response_tokens"] for r in rows] == [r["response_tokens"] for r in brows]  # the same samples
    assert taken.tail.log and all(rec["taken"] for rec in taken.tail.log)
    for rec, r, b in zip(taken.tail.log, rows, brows, strict=True):
        saved = b["timing_s/gen"] - r["timing_s/gen"]
        assert saved > rec["move_s"] > 0, (rec, saved)
    tl = taken.env.ledger.to_frame()
    wide = tl[tl["gpu_group"].str.startswith("wide-")]
    assert set(wide["phase"]) == {"switch", "generate"} and (wide["gpus"] == 8).all()  # TP2 -> TP8
    for s in taken.collector.samples.values():  # every sample is whole: its response generated in full
        assert s.finished_s is not None


def test_tail_reshard_is_not_taken_when_it_cannot_pay():
    dear = _tail("schedule.tail_reshard.restart_s=1000")
    base = _tail("schedule.tail_reshard=null")
    assert dear.tail.log and not any(rec["taken"] for rec in dear.tail.log)
    assert all(rec["cost_s"] >= 1000 for rec in dear.tail.log)
    assert [r["end_s"] for r in dear.collector.step_rows] == [r["end_s"] for r in base.collector.step_rows]
    assert not dear.env.ledger.to_frame()["gpu_group"].str.startswith("wide-").any()


# ---------------------------------------------------------------- online re-splitting

RESPLIT = "scenarios/async/resplit-online.yaml"


def test_resplit_follows_its_rule_and_the_timeline_shows_each_resplit():
    sched = _v1(RESPLIT, "steps=6", "warmup_steps=1")
    rs = sched.resplit.rs
    applied = [r for r in sched.resplit.resplit_log if r["apply"]]
    assert applied, "the undersized rollout pool is never re-split"
    left_of = {r["step"]: sched.total_steps - r["step"] - 1 for r in sched.resplit.resplit_log}
    for r in sched.resplit.resplit_log:
        if not r["trigger"]:
            assert not r["apply"]
            continue
        pays = (r["to"] != r["from"] and r["gain"] >= rs.min_gain
                and (r["bound_s"] - r["new_bound_s"]) * left_of[r["step"]] > r["cost_s"])
        assert r["apply"] == pays, r
    tl = sched.env.ledger.to_frame()
    resplits = tl[(tl["gpu_group"] == "actor") & (tl["phase"] == "resplit")]
    assert len(resplits) == len(applied)
    assert resplits["end_s"].sub(resplits["start_s"]).tolist() == pytest.approx([r["cost_s"] for r in applied])
    # Between re-splits the trainer trains on the GPUs the last one left it; those it gave up generate.
    ends = [*resplits["end_s"].tolist(), float("inf")]
    train = tl[(tl["gpu_group"] == "actor") & (tl["phase"] == "train")]
    for rec, start, end in zip(applied, ends, ends[1:], strict=False):
        rows = train[(train["start_s"] >= start) & (train["start_s"] < end)]
        assert len(rows) and (rows["gpus"] == sched.scenario.role_gpus("actor") - 2 * rec["to"]).all()
    first = resplits["end_s"].min()
    lent = tl[tl["gpu_group"].str.startswith("lent-")]
    assert len(lent) > 0 and lent["start_s"].min() >= first
    steps = sched.collector.step_rows
    assert [r["resplit/applied"] for r in steps] == [int(r["apply"]) for r in sched.resplit.resplit_log]
    for s in sched.samples_all:  # a move back to training loses no sample
        assert s.state is not SampleState.ABORTED or s.reason == "in flight at end of run"


# ---------------------------------------------------------------- routing over engines that come and go


@pytest.mark.parametrize("policy", ["least-loaded", "affinity-bounded"])
def test_routing_spreads_samples_over_lent_engines_as_the_loop_does(policy):
    """The router and the loop share one load balancer: with lending, `schedule.routing` spreads samples over the
    standalone and the lent engines (once it sent every sample to rollout-0: the schedule rebuilt the loop's
    least-loaded index after the router had been handed the old one)."""
    routed = _v1(LENDING, f"schedule.routing.policy={policy}")
    engines = {s.request.engine for s in routed.samples_all if s.request is not None}
    assert engines == {e.name for e in routed.engines} == {"rollout-0", "rollout-1", *(f"lent-{i}" for i in range(6))}
    per_engine = [sum(1 for s in routed.samples_all if s.request is not None and s.request.engine == e.name)
                  for e in routed.engines]
    assert max(per_engine) < 0.4 * sum(per_engine)
    if policy == "least-loaded":  # the router's least-loaded engine is the loop's: the same run as without routing
        plain = _v1(LENDING)
        assert [(s.sid, s.request.engine) for s in routed.samples_all if s.request is not None] == \
            [(s.sid, s.request.engine) for s in plain.samples_all if s.request is not None]


def test_routing_follows_a_resplit_onto_the_engines_it_wakes():
    sched = _v1(RESPLIT, "steps=5", "warmup_steps=1", "schedule.routing.policy=affinity-bounded")
    assert any(r["apply"] for r in sched.resplit.resplit_log)
    engines = {s.request.engine for s in sched.samples_all if s.request is not None}
    assert "rollout-0" in engines and any(name.startswith("lent-") for name in engines)
    assert sched.balancer.consistent()


@pytest.mark.slow
def test_resplit_is_not_made_when_reconfiguration_costs_more_than_it_saves():
    dear = _v1(RESPLIT, "steps=4", "warmup_steps=1", "schedule.resplit.reconfig_s=10000")
    fixed = _v1(RESPLIT, "steps=4", "warmup_steps=1", "schedule.resplit=null")
    assert any(r["trigger"] for r in dear.resplit.resplit_log) and not any(r["apply"] for r in dear.resplit.resplit_log)
    assert [r["end_s"] for r in dear.collector.step_rows] == [r["end_s"] for r in fixed.collector.step_rows]


def test_verl_import_maps_the_v1_trainer_modes_and_lending_knobs():
    from import_helpers import assert_complete, fetch_wheel

    from rlsim.tools.importers.command import run_import

    root = fetch_wheel("verl", "0.9.1") / "verl" / "trainer" / "config"
    sep = run_import("verl", root / "ppo_megatron_trainer.yaml", [
        "actor_rollout_ref.rollout.name=vllm", "algorithm.adv_estimator=grpo", "trainer.v1.trainer_mode=separate_async",
        "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=4",
        "trainer.v1.separate_async.hybrid_rollout.enable_switch=true"])
    sched = sep.scenario.schedule
    assert (sched.kind, sched.trainer_mode, sched.parameter_sync_step) == ("verl-v1", "separate_async", 4)
    assert sched.hybrid_rollout.enable_switch and sched.hybrid_rollout.switch_cost_window_size == 3
    assert sched.max_off_policy_threshold == 8 and sched.drop_stale  # verl's sampler default, strategy drop
    assert sep.scenario.cluster.pools["gen"].gpus == 4 and sep.scenario.roles["rollout"].pool == "gen"
    assert_complete(sep.ledger)
    colo = run_import("verl", root / "ppo_trainer.yaml", ["actor_rollout_ref.rollout.name=vllm",
                                                          "trainer.v1.trainer_mode=colocate_async"])
    assert colo.scenario.schedule.trainer_mode == "colocate_async"
    assert colo.scenario.roles["rollout"].pool == colo.scenario.roles["actor"].pool
    assert_complete(colo.ledger)


def test_plan_searches_lending_on_and_off():
    import yaml

    from rlsim.tools.plan import enumerate_candidates, load_space

    space = load_space(ROOT / "scenarios/plan/verl-v1-lending-space.yaml")
    base = yaml.safe_load((ROOT / LENDING).read_text())
    cands = enumerate_candidates(base, space, (ROOT / LENDING).parent)
    switches = sorted(c.scenario.schedule.hybrid_rollout.enable_switch for c in cands if c.scenario is not None)
    assert switches == [False, True, True]


@pytest.mark.parametrize("cost_s, lends", [(10.0, True), (1000.0, False)])
def test_lending_decision_on_each_side_of_the_switch_cost(cost_s, lends):
    """verl 0.9.1's rule (trainer_separate_async.on_step_end): lend iff groups remain to wait for and
    remaining x per-group wait x hybrid / (hybrid + standalone) > the measured round-trip switch cost."""
    from rlsim.sim.engine.environment import SimEnvironment
    from rlsim.sim.schedules import build_schedule

    scn = load_scenario(ROOT / LENDING, ["schedule.hybrid_rollout.adaptive_switch_threshold=false"])
    sched = build_schedule(scn, SimEnvironment(scn.seed))
    sched.lending.wait_s, sched.lending.wait_groups = 100.0, 10  # 10 s a group so far
    sched.lending.to_rollout_s.append(cost_s / 2)
    sched.lending.to_trainer_s.append(cost_s / 2)
    rec = sched.lending.decide(had_idle=True)
    remaining = sched.lending.threshold()  # nothing sampleable yet
    assert rec["remaining"] == remaining > 0
    assert rec["benefit_seconds"] == pytest.approx(remaining * 10.0 * 12 / 16)  # 12 trainer GPUs, 4 standalone
    assert rec["effective_switch_cost_seconds"] == pytest.approx(cost_s)
    assert rec["lend"] is lends


def test_lending_is_decided_once_a_weight_version_as_verl_does():
    """verl decides in on_step_end, after its whole step (parameter_sync_step local updates, one push); an
    rlsim trainer step is one local update, so with parameter_sync_step 2 a run of 4 steps decides twice."""
    sched = _v1(LENDING, "steps=4", "schedule.parameter_sync_step=2")
    assert len(sched.lending.lend_log) == 2
    rows = sched.collector.step_rows
    assert [r["lending/lent"] for r in rows[0::2]] == [0, 0]  # inside a version: the GPUs stay with the trainer
