"""Asynchronous schedules: one-step-off overlap, AReaL's staleness bound, interruptions, accounting."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario, parse_scenario
from rlsim.sim.schedules.fully_async import FullyAsyncSchedule
from rlsim.sim.simulate import simulate

ROOT = Path(__file__).resolve().parent.parent


def small_async(eta=1, interrupt="recompute", steps=4, prompts=8, n=4, sigma=1.0, **schedule) -> dict:
    """A few H800 engines and a 1-node trainer, a small model and long-tailed responses."""
    return {
        "name": "small-async",
        "seed": 3,
        "steps": steps,
        "cluster": {"pools": {"gen": {"hardware": "h800", "nodes": 1, "gpus_per_node": 4},
                              "train": {"hardware": "h800", "nodes": 1, "gpus_per_node": 2}}},
        "models": {"m": {"preset": "qwen2.5-0.5b"}},
        "roles": {
            "actor": {"pool": "train", "model": "m", "train": {"sharding": "fsdp"}},
            "rollout": {"pool": "gen", "model": "m", "engine": {"gpu_memory_utilization": 0.5, "max_num_seqs": 8}},
        },
        "algorithm": {"kind": "grpo", "prompts_per_step": prompts, "samples_per_prompt": n, "mini_batches": 2},
        "workload": {"prompt_length": {"kind": "uniform", "min": 32, "max": 256},
                     "response_length": {"kind": "lognormal", "mean": 400, "sigma": sigma, "max": 4000}},
        "schedule": {"kind": "fully-async", "max_head_offpolicyness": eta, "interrupt": interrupt, **schedule},
    }


def run_schedule(data: dict) -> tuple[FullyAsyncSchedule, dict]:
    scn = parse_scenario(data, source="test")
    env = SimEnvironment(scn.seed)
    sched = FullyAsyncSchedule(scn, env)
    env.run(until=env.process(sched.run()))
    return sched, sched.token_accounting()


@settings(max_examples=25, deadline=None)
@given(eta=st.sampled_from([0, 1, 2, 3, None]),
       interrupt=st.sampled_from(["keep", "recompute", "abort-resume", "abort-discard"]),
       prompts=st.sampled_from([2, 4, 6]), n=st.integers(1, 4), seed=st.integers(0, 50),
       max_conc=st.sampled_from([None, 3, 20]), drop=st.booleans())
def test_staleness_bound_and_no_sample_lost_or_trained_twice(eta, interrupt, prompts, n, seed, max_conc, drop):
    data = small_async(eta=eta, interrupt=interrupt, steps=4, prompts=prompts, n=n, max_concurrent_rollouts=max_conc,
                       drop_stale=drop and eta is not None)
    data["seed"] = seed
    sched, acct = run_schedule(data)
    if eta is not None and drop:  # AReaL bounds staleness at admission; only the drop option bounds it when trained
        assert max(sched.staleness_values) <= eta
    if not drop:
        assert sched.dropped_stale == 0
    # Every trained sample was generated in full, trained once; no sample is in two places.
    trained = [s for s in sched.samples_all if s.finished and s.group not in sched.buffer]
    rows = sum(r["samples"] for r in sched.step_rows)
    assert rows == len(sched.staleness_values) == 4 * prompts * n
    ids = [s.sid for s in sched.samples_all]
    assert len(ids) == len(set(ids))
    for s in trained:
        assert sum(s.version_tokens.values()) == s.generated
    # The accounting's counters against the samples and engines they count (in flight = the remainder).
    assert acct["tokens_generated"] == sum(e.tokens_generated for e in sched.engines)
    assert acct["tokens_trained"] == sum(s.generated for s in sched.samples_all if s.trained_step is not None)
    assert acct["tokens_in_flight"] >= 0 and acct["tokens_discarded"] >= 0
    in_flight = sum(s.generated for s in sched.samples_all if not s.finished or s.group in sched.buffer)
    in_flight += sum(r.generated for e in sched.engines for r in e.running)  # not yet synced into samples
    assert in_flight <= acct["tokens_in_flight"] + 1e-9


def test_eta_zero_matches_the_synchronous_schedule_on_the_same_pools():
    """eta = 0 is synchronous RL: the same step as HybridFlow with rollout on its own pool (within 1%), once
    HybridFlow's first step (whose engines start with the initial weights, no sync) is behind it."""
    data = small_async(eta=0, steps=3, prompts=8, n=4)
    data["workload"]["prompt_length"] = {"kind": "fixed", "value": 128}
    data["workload"]["response_length"] = {"kind": "fixed", "value": 600}
    fully = simulate(parse_scenario(data, source="test"))
    sync = dict(data)
    sync["schedule"] = {"kind": "hybridflow", "placement": "custom", "dispatch": "round-robin"}
    base = simulate(parse_scenario(sync, source="test"))
    steps, base_steps = fully.measured_steps["timing_s/step"], base.measured_steps["timing_s/step"]
    assert steps.iloc[1:].to_numpy() == pytest.approx(base_steps.iloc[1:].to_numpy(), rel=0.01)
    assert base.measured_steps["timing_s/update_weights"].iloc[0] == 0.0
    # over the whole run, the only difference is that one sync
    sync_s = fully.measured_steps["timing_s/sync_rollout_weights"].iloc[0]
    assert steps.sum() - base_steps.sum() == pytest.approx(sync_s, rel=0.05)


def test_staleness_buys_throughput():
    th = {}
    for eta in (0, 1, 4):
        th[eta] = simulate(parse_scenario(small_async(eta=eta, steps=5, prompts=8, n=4), source="t")).summary
    assert th[0]["staleness_max"] == 0
    assert th[1]["throughput_tokens_per_s"] > 1.2 * th[0]["throughput_tokens_per_s"]
    assert th[4]["staleness_mean"] >= th[1]["staleness_mean"]


def test_interruption_modes_cost_and_versions():
    out = {}
    for mode in ("keep", "recompute", "abort-resume", "abort-discard"):
        sched, acct = run_schedule(small_async(eta=None, interrupt=mode, steps=4))  # no stale drops
        prefill = sum(e.tokens_prefilled for e in sched.engines)
        multi = sum(len(s.version_tokens) > 1 for s in sched.samples_all if s.finished)
        out[mode] = (prefill, acct["tokens_discarded"], multi)
    assert out["recompute"][0] > out["keep"][0]  # re-prefill after every update
    assert out["abort-discard"][1] > 0 and out["keep"][1] == out["recompute"][1] == out["abort-resume"][1] == 0
    assert out["keep"][2] > 0 and out["recompute"][2] > 0  # trajectories that span versions
    assert out["abort-discard"][2] == 0  # restarted from scratch: one version per sample


@pytest.mark.slow
def test_one_step_off_overlaps_generation_with_training():
    sync = simulate(load_scenario(ROOT / "scenarios/async/verl-dapo-7b-h20-sync.yaml", ["steps=2"]))
    off = simulate(load_scenario(ROOT / "scenarios/async/verl-dapo-7b-h20-one-step-off.yaml", ["steps=2"]))
    assert off.summary["step_time_s"] < sync.summary["step_time_s"]
    steps = off.steps
    assert list(steps["staleness/max"]) == [0, 1, 1]  # the first batch is fresh, later ones one version old
    for col in ("timing_s/wait_prev_gen", "timing_s/generate_async", "timing_s/sync_rollout_weights"):
        assert col in steps.columns
    # Generation of step k+1 runs while step k trains: rollout and actor busy at the same time.
    tl = off.timeline
    gen = tl[(tl["phase"] == "generate") & (tl["step"] == 1)]
    train = tl[(tl["phase"] == "train") & (tl["role"] == "actor") & (tl["step"] == 1)]
    assert gen["start_s"].min() < train["end_s"].max() and gen["end_s"].max() > train["start_s"].min()


def test_async_schedules_need_rollout_on_its_own_pool():
    data = small_async()
    data["roles"]["rollout"]["pool"] = "train"
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(data, source="s.yaml")
    line = exc.value.lines()[0]
    assert line.startswith("s.yaml: roles.rollout.pool: fully-async needs rollout on GPUs apart from the actor")


def test_verl_spelling_maps_onto_the_staleness_rule():
    data = small_async(eta=None, steps=4, staleness_threshold=0.5, trigger_parameter_sync_step=2)
    sched, _ = run_schedule(data)
    assert sched.spec.eta == 0.5 and sched.admit_unit == 2 * sched.batch_groups
    syncs = [r for r in sched.step_rows if "timing_s/sync_rollout_weights" in r]
    assert len(syncs) == 2  # weights pushed every second trainer step
    assert sched.dropped_stale == 0  # verl bounds how far rollout runs ahead; it never drops samples


def test_decoupled_ppo_adds_the_proximal_forward_pass():
    with_fwd = simulate(parse_scenario(small_async(eta=1, recompute_logprob=True), source="t")).steps
    without = simulate(parse_scenario(small_async(eta=1, recompute_logprob=False), source="t")).steps
    assert "timing_s/old_log_prob" in with_fwd.columns and "timing_s/old_log_prob" not in without.columns


def test_shipped_async_scenarios_validate():
    for path in sorted((ROOT / "scenarios/async").glob("*.yaml")):
        load_scenario(path)
