"""Agentic multi-turn RL and ROLL scheduling: turns, tools, outcomes, redundancy, the alpha bound."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.results.lifecycle import Reason, SampleState
from rlsim.sim.scenario.loader import parse_scenario
from rlsim.sim.schedules import build_schedule
from rlsim.sim.simulate import simulate
from rlsim.tools.report.plots import busy_by_pool

ROOT = Path(__file__).resolve().parent.parent
BASE = yaml.safe_load((ROOT / "scenarios/agentic/tool-latency-base.yaml").read_text())


def small(schedule: dict | None = None, **tool) -> dict:
    data = copy.deepcopy(BASE)
    data["steps"], data["warmup_steps"] = 3, 0
    data["algorithm"]["prompts_per_step"] = 6
    data["algorithm"]["samples_per_prompt"] = 4
    data["environments"]["pools"]["workers"]["concurrency"] = 5  # a real queue
    data["environments"]["tools"]["env"].update(tool)
    if schedule is not None:
        data["schedule"] = schedule
    return data


def run(data: dict):
    scn = parse_scenario(data, source="test")
    env = SimEnvironment(scn.seed)
    sched = build_schedule(scn, env)
    env.run(until=env.process(sched.run()))
    return sched


def trajectories(sched):
    if getattr(sched, "samples_all", None):
        return [s.trajectory for s in sched.samples_all if s.trajectory is not None]
    return sched.trajectories


@pytest.mark.parametrize("schedule", [
    None,  # fully-async (the base)
    {"kind": "roll", "async_generation_ratio": 1, "group_size_redundancy": 2},
    {"kind": "hybridflow", "placement": "custom"},
])
def test_turns_never_overlap_and_env_concurrency_holds(schedule):
    sched = run(small(schedule))
    trajs = trajectories(sched)
    assert trajs
    for t in trajs:
        spans = t.turn_spans
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))  # one turn at a time
        assert t.turns <= t.turns_planned and t.context <= 32768
    pools = sched.tools.pool_frame()
    assert (pools["max_in_service"] <= pools["concurrency"]).all()
    assert pools.loc["workers", "max_in_service"] == 5  # the queue was used to the limit


def test_failures_and_timeouts_account_for_every_trajectory():
    """5% of calls fail outright and about 2% time out (lognormal tail past 4 s): four outcomes add up."""
    data = small(None, failure_prob=0.05, timeout_s=4.0, latency={"kind": "lognormal", "median": 1.0, "sigma": 0.7})
    counts = []
    for _ in range(2):
        res = simulate(parse_scenario(data, source="test"))
        s = res.summary
        outcomes = [s[f"trajectories_{k}"] for k in ("completed", "failed", "aborted", "dropped")]
        assert sum(outcomes) == s["trajectories_launched"]
        assert s["trajectories_failed"] > 0
        counts.append(outcomes)
    assert counts[0] == counts[1]  # same seed, same counts
    sched = run(data)
    stats = sched.tools.stats_frame().loc["env"]
    assert stats["timeouts"] > 0 and stats["failed_attempts"] > 0


def test_redundancy_trains_exactly_group_size_per_group():
    sched = run(small({"kind": "roll", "async_generation_ratio": 1, "group_size_redundancy": 3}))
    n = 4
    trained_groups = {}
    for s in sched.samples_all:
        if s.trained_version is not None and s.state is SampleState.TRAINED:
            trained_groups.setdefault(s.group.gid, []).append(s)
    assert trained_groups
    assert all(len(v) <= n for v in trained_groups.values())
    full = [g for g, v in trained_groups.items() if len(v) == n]
    assert len(full) >= len(trained_groups) * 0.9  # failures aside, every group trains group_size samples
    assert sched.redundant_aborted > 0


@pytest.mark.parametrize("alpha", [0, 0.5, 1, 2])
def test_roll_alpha_bound_holds_for_every_trained_sample(alpha):
    sched = run(small({"kind": "roll", "async_generation_ratio": alpha}))
    trained = [s for s in sched.samples_all if s.trained_version is not None]
    assert trained
    for s in trained:
        assert s.group.start_version >= s.trained_version - math.ceil(alpha)


def test_dynamic_sampling_drops_and_replaces_groups():
    sched = run(small({"kind": "roll", "async_generation_ratio": 1, "dynamic_sampling": True, "filter_prob": 0.4,
                       "max_additional_running_prompts": 4}))
    assert sched.filtered_groups > 0
    assert sum(r["samples"] for r in sched.step_rows) > 0
    dropped = [s for s in sched.samples_all if s.state is SampleState.DROPPED]
    assert dropped and all(s.reason in ("filtered: all rewards equal", "expired") for s in dropped)


def test_prefix_is_reused_across_turns():
    sched = run(small())
    prefilled = sum(e.tokens_prefilled for e in sched.engines)
    contexts = sum(t.context for t in trajectories(sched))
    # Without prefix reuse every turn would re-prefill its whole context; with it, far less.
    turns_context = sum(t.context * t.turns for t in trajectories(sched))
    assert prefilled < 0.5 * turns_context and prefilled >= 0.3 * contexts


def test_agentic_reproduction_orders_the_schedules():
    from rlsim.tools.reproduce.agentic import variant

    idle = {}
    for schedule in ("sync", "roll-async", "fully-async"):
        data = variant(schedule, 10.0)
        data["steps"], data["algorithm"]["prompts_per_step"] = 2, 16
        idle[schedule] = simulate(parse_scenario(data, source="t")).summary["gpu_idle_fraction"]
    assert idle["fully-async"] < idle["roll-async"] < idle["sync"]


def test_llm_judge_served_by_its_own_engines():
    data = yaml.safe_load((ROOT / "scenarios/roll/rlvr-qwen2.5-7b-judge.yaml").read_text())
    data["steps"], data["algorithm"]["prompts_per_step"] = 1, 8
    data["schedule"]["judge_scoring"] = "batch"  # verl: the batch is scored after generation
    res = simulate(parse_scenario(data, source="t"))
    judge = res.timeline[res.timeline["role"] == "reward"]
    assert set(judge["phase"]) == {"reward"} and set(judge["gpu_group"]) <= {f"reward-{i}" for i in range(4)}
    for step, rows in judge.groupby("step"):
        gen = res.timeline[(res.timeline["role"] == "rollout") & (res.timeline["step"] == step)]
        assert rows["start_s"].min() >= gen["end_s"].max()
    assert res.steps["timing_s/reward"].iloc[0] > 0
    assert any(name.startswith("reward-") for name in res.engine_stats["engine"])


def test_sample_level_judging_in_roll():
    """ROLL scores each sample as soon as it finishes: judge requests start before generation ends."""
    data = yaml.safe_load((ROOT / "scenarios/roll/rlvr-qwen2.5-7b-judge.yaml").read_text())
    data["cluster"]["pools"]["train"] = {"hardware": "h100-sxm", "nodes": 1, "gpus_per_node": 4}
    data["roles"]["actor"]["pool"] = data["roles"]["reference"]["pool"] = "train"
    data["steps"], data["algorithm"]["prompts_per_step"] = 2, 8
    data["schedule"] = {"kind": "roll", "async_generation_ratio": 1}
    res = simulate(parse_scenario(data, source="t"))
    tl = res.timeline
    first_judge = tl[tl["role"] == "reward"]["start_s"].min()
    last_gen = tl[(tl["role"] == "rollout") & (tl["step"] == 0)]["end_s"].max()
    assert first_judge < last_gen
    assert "timing_s/reward" not in res.steps.columns  # nothing left to score on the trainer's path


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="known miss: the long-context training terms (recompute, rank imbalance, "
                   "log-probs over the vocabulary) made this RLVR step's training dearer; rollout share 0.66, "
                   "published > 0.70 (docs/validation.md). Strict: remove this mark when the share is back above 0.70")
def test_roll_rlvr_rollout_share_finding():
    """ROLL Flash (docs/sources.md §8): rollout is more than 70% of an RLVR step."""
    from rlsim.tools.reproduce.validation import bound_findings

    found = bound_findings().set_index("name")
    row = found.loc["ROLL RLVR: rollout share of step time (rlvr-qwen2.5-7b-judge)"]
    assert bool(row["passed"]) and float(row["simulated"]) > 0.70


# ---------------------------------------------------------------- agents on engines that sleep (verl V1 lending)

LEND_AGENT = yaml.safe_load((ROOT / "tests/repros/16-verl-v1-lending-agent-double-books-gpus.yaml").read_text())


@settings(max_examples=12, deadline=None)
@given(colocated=st.booleans(), turns=st.integers(1, 4), latency=st.sampled_from([0.0, 0.3, 2.0, 8.0]),
       train_gpus=st.sampled_from([2, 4, 6]), tp=st.sampled_from([1, 2]), sync=st.integers(1, 2),
       prompts=st.integers(1, 4), n=st.integers(1, 3), slots=st.integers(1, 6), seed=st.integers(0, 20))
def test_lent_engines_take_agent_turns_only_while_awake(colocated, turns, latency, train_gpus, tp, sync, prompts, n,
                                                        slots, seed):
    """verl V1 lending and colocate_async with multi-turn agents whose tools take time: engines on the trainer's
    GPUs sleep while it trains, and no turn (first or later) ever runs on them then. The GPU ledger holds it: no
    GPU group busy twice at once, no pool busier than its size, busy + idle = the pool's GPU-time. A turn running
    when its engine is put to sleep moves with its partial output, as a sample does."""
    data = copy.deepcopy(LEND_AGENT)
    data["seed"], data["steps"] = seed, 2
    data["cluster"]["pools"]["train"]["gpus_per_node"] = max(train_gpus, 4 if colocated else 2)  # (memory: >= 4)
    data["roles"]["rollout"]["parallel"]["tp"] = tp
    data["algorithm"].update(prompts_per_step=prompts, samples_per_prompt=n)
    data["workload"]["agent"]["turns"] = {"kind": "uniform", "min": 1, "max": turns} if turns > 1 else \
        {"kind": "fixed", "value": 1}
    data["environments"]["pools"]["sandbox"]["concurrency"] = slots
    data["environments"]["tools"]["search"]["latency"] = {"kind": "fixed", "value": latency}
    data["schedule"]["parameter_sync_step"] = sync
    if colocated:
        data["roles"]["rollout"]["pool"] = "train"
        data["schedule"].update(trainer_mode="colocate_async", hybrid_rollout={"enable_switch": False})
    res = simulate(parse_scenario(data, source="lend-agent"))  # the ledger refuses a double booking (OverbookedPool)
    tl = res.timeline
    for _, g in tl.groupby("gpu_group"):
        g = g.sort_values("start_s")
        assert (g["start_s"].to_numpy()[1:] >= g["end_s"].to_numpy()[:-1] - 1e-9).all()
    pools = {p: spec.gpus for p, spec in res.scenario.cluster.pools.items()}
    frac = busy_by_pool(tl, res.steps, pools)
    for pool, idle in res.summary["idle_fraction_by_pool"].items():
        assert frac.loc[pool].drop("idle").sum() + idle == pytest.approx(1.0, abs=1e-9), pool
    lent = tl[tl["gpu_group"].str.startswith("lent-") | (tl["pool"] == "train") & (tl["phase"] == "generate")]
    training = tl[(tl["role"] == "actor") & (tl["phase"] != "switch")]
    for _, t in training.iterrows():  # nothing generates on the trainer's GPUs while it trains
        assert not ((lent["start_s"] < t["end_s"] - 1e-9) & (lent["end_s"] > t["start_s"] + 1e-9)).any()
    # A turn running on an engine put to sleep goes on elsewhere with its partial output: no trajectory is lost to it.
    assert not (res.trajectories["reason"] == Reason.MID_GENERATION).any()
    done = res.trajectories[res.trajectories["outcome"] == "completed"]
    assert (done["turns"] == done["turns_planned"]).all()


@pytest.mark.parametrize("kind", ["fully-async", "hybridflow"])
def test_agent_turns_and_tokens_per_turn_drift_with_a_mean_schedule(kind):
    """A lognormal's mean_schedule moves agent turns and tokens per turn over the run, as it does responses."""
    data = small({"kind": kind, "placement": "custom"} if kind == "hybridflow" else None)
    data["steps"] = 4
    data["workload"]["agent"]["turns"] = {"kind": "lognormal", "mean": 3, "sigma": 0.3, "max": 20,
                                          "mean_schedule": [{"from_step": 2, "mean": 9}]}
    data["workload"]["agent"]["tokens_per_turn"] = {"kind": "lognormal", "mean": 100, "sigma": 0.3, "max": 2048,
                                                    "mean_schedule": [{"from_step": 0, "mean": 100, "to_mean": 400,
                                                                       "steps": 3}]}
    data["environments"]["pools"]["workers"]["concurrency"] = 64
    res = simulate(parse_scenario(data, source="test"))
    trajs = res.trajectories.sort_values("trajectory")  # launch order
    trajs = trajs[trajs["turns"] > 0]  # those that ran (an asynchronous run ends with some not started)
    turns_planned = trajs["turns_planned"].to_numpy()
    generated = trajs["generated_tokens"].to_numpy() / trajs["turns"].clip(lower=1).to_numpy()
    early, late = slice(0, 24), slice(-24, None)  # the first and last step's trajectories (6 prompts x 4)
    assert turns_planned[early].mean() < 5 < turns_planned[late].mean()
    assert generated[early].mean() < 200 < generated[late].mean()


def test_agent_drift_refuses_group_shapes():
    data = small()
    data["workload"]["agent"]["turns"] = {"kind": "lognormal", "mean": 3, "sigma": 0.3, "max": 20,
                                          "group_correlation": 0.5}
    with pytest.raises(Exception, match="agent.turns: group_correlation and wrong_fraction shape"):
        parse_scenario(data, source="test")
