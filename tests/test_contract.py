"""The run-output contract, across every schedule: what each one reports and the invariants it keeps.

Every schedule reports through the run collector only (rlsim/sim/results/collector.py); these tests hold
each of them to the same declared columns, GPU-time conservation per pool, one life per sample and
policy versions that only grow.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlsim.sim.results.collector import MFU_PREFIX, STEP_COLUMNS, SUMMARY_COLUMNS, TIMING_PREFIX
from rlsim.sim.scenario.loader import apply_overrides, load_scenario, parse_scenario, read_yaml
from rlsim.sim.simulate import simulate
from rlsim.tools.report.plots import busy_by_pool

ROOT = Path(__file__).resolve().parents[1]

SMALL = ["steps=2", "warmup_steps=1", "algorithm.prompts_per_step=8"]
AGENTIC = "scenarios/agentic/tool-latency-base.yaml"
# Every schedule, with single-turn samples and with multi-turn agentic trajectories (the `agent` workload and
# the tool environments of AGENTIC grafted onto the schedule's scenario). Generation-only has no agentic case:
# it runs single-turn requests only.
CASES = {
    "generation-only": ("scenarios/hybridflow/verl-generation-flat.yaml", SMALL),
    "hybridflow": ("scenarios/quickstart.yaml", SMALL),
    "hybridflow-split": ("scenarios/hybridflow/ppo-llama-7b.yaml", ["schedule.placement=split", *SMALL]),
    "one-step-off": ("scenarios/async/verl-dapo-7b-h20-one-step-off.yaml", SMALL),
    "fully-async": ("scenarios/async/areal-1.5b-h800.yaml", SMALL),
    "roll": ("scenarios/roll/rlvr-qwen2.5-7b-async.yaml", SMALL),
    "agentic-hybridflow": ("scenarios/quickstart.yaml", SMALL),
    "agentic-one-step-off": ("scenarios/async/verl-dapo-7b-h20-one-step-off.yaml", SMALL),
    "agentic-fully-async": (AGENTIC, ["steps=2", "warmup_steps=1"]),
    "agentic-roll": ("scenarios/roll/agentic-sokoban.yaml", SMALL),
    # The schedules of docs/schedules-2026.md.
    "one-step-off-rollout-logprobs": ("scenarios/async/verl-dapo-7b-h20-one-step-off.yaml",
                                      ["schedule.recompute_logprob=false", *SMALL]),
    "hybridflow-lora": ("scenarios/sync/grpo-lora.yaml", SMALL),
    "fully-async-affinity": ("scenarios/async/grpo-affinity-cap.yaml", SMALL),
    "fully-async-inflight": ("scenarios/async/inflight-updates.yaml", SMALL),
    "verl-v1-colocate-async": ("scenarios/async/verl-v1-colocate-async.yaml", SMALL),
    "verl-v1-separate-async-lending": ("scenarios/async/verl-v1-separate-async-lending.yaml", SMALL),
    # Agents on engines that sleep while the trainer holds their GPUs: a turn back from a tool never goes to one.
    "agentic-verl-v1-colocate-async": ("scenarios/async/verl-v1-colocate-async.yaml", SMALL),
    "agentic-verl-v1-separate-async-lending": ("scenarios/async/verl-v1-separate-async-lending.yaml", SMALL),
    "hybridflow-tail-reshard": ("scenarios/sync/tail-reshard.yaml", SMALL),
    "hybridflow-moe-expert-parallel": ("scenarios/sync/moe-qwen3-30b-a3b-ep.yaml", SMALL),
    "hybridflow-gb200-nvl72": ("scenarios/sync/grpo-gb200-nvl72.yaml", SMALL),  # 4-GPU hosts, one NVLink domain
    "fully-async-resplit": ("scenarios/async/resplit-online.yaml", ["steps=4", "warmup_steps=1"]),
    # Quantised and speculative rollout (docs/rollout-quantisation.md), colocated and disaggregated.
    "hybridflow-fp8-rollout": ("scenarios/sync/grpo-fp8-rollout.yaml", SMALL),
    "hybridflow-speculative": ("scenarios/sync/grpo-speculative.yaml", SMALL),
    "one-step-off-nvfp4-speculative": (
        "scenarios/async/verl-dapo-7b-h20-one-step-off.yaml",
        ["roles.rollout.engine.quantization={weights: nvfp4, kv_cache: fp8}",
         "roles.rollout.engine.speculative={k: 2, draft_cost: 0.1, acceptance: 0.6, acceptance_drop_per_version: 0.1, "
         "draft_refresh_versions: null}", *SMALL]),
    # Prefill/decode-disaggregated rollout (docs/rollout-quantisation.md): synchronous, one-step-off and fully async,
    # single-turn and agentic (later turns prefill on their decode engine).
    "hybridflow-pd-disagg": ("scenarios/sync/grpo-pd-disagg.yaml", SMALL),
    "agentic-hybridflow-pd-disagg": ("scenarios/sync/grpo-pd-disagg.yaml", SMALL),
    "one-step-off-pd-disagg": ("scenarios/async/verl-dapo-7b-h20-one-step-off.yaml",
                               ["roles.rollout.engine.disaggregation={prefill_engines: 1, decode_engines: 1, "
                                "kv_link: nvlink}", *SMALL]),
    "fully-async-pd-disagg": ("scenarios/async/areal-1.5b-h800.yaml", ["roles.rollout.engine.disaggregation="
                              "{prefill_engines: 6, decode_engines: 18, kv_link: rdma}", *SMALL]),
    "fully-async-staleness-abort": ("scenarios/async/staleness-abort.yaml", ["steps=4", "warmup_steps=1"]),
    # verl V1's replay buffer: evicted groups (stale, filtered, or with a failed trajectory) and their refills.
    "verl-v1-replay-buffer": ("scenarios/async/verl-v1-replay-buffer.yaml", SMALL),
    "agentic-verl-v1-replay-buffer": ("scenarios/async/verl-v1-replay-buffer.yaml", SMALL),
    # Elastic hybrid replicas (verl fully_async's dynamic resource scheduling): engines on the actor's GPUs
    # woken at a push, put to sleep at the start of a step, rebalancing what runs.
    "fully-async-elastic": ("scenarios/async/elastic-hybrid-replicas.yaml", SMALL),
    "agentic-fully-async-elastic": ("scenarios/async/elastic-hybrid-replicas.yaml",  # turns re-prefill at a push
                                    ["schedule.partial_rollout=null", "schedule.interrupt=recompute", *SMALL]),
    # Context parallelism (docs/long-context.md): dynamic over the whole group, and static Ulysses.
    "hybridflow-dynamic-cp": ("scenarios/sync/long-context-dynamic-cp.yaml", SMALL),
    "hybridflow-ulysses-cp": ("scenarios/sync/long-context-dynamic-cp.yaml",
                              ["roles.actor.parallel.cp=4", "roles.actor.parallel.cp_dynamic=false",
                               "roles.actor.parallel.cp_kind=ulysses", *SMALL]),
}


def _scenario(name: str):
    path, overrides = CASES[name]
    if not name.startswith("agentic-"):
        return load_scenario(ROOT / path, overrides)
    data, agentic = apply_overrides(read_yaml(ROOT / path), overrides), read_yaml(ROOT / AGENTIC)
    data["workload"] = {**data["workload"], "agent": agentic["workload"]["agent"],
                        "response_length": agentic["workload"]["response_length"]}
    data["environments"] = agentic["environments"]
    return parse_scenario(data, source=f"{path} + agent")


@pytest.fixture(scope="module", params=sorted(CASES))
def run(request):
    res = simulate(_scenario(request.param))
    assert (res.trajectories is not None) == request.param.startswith("agentic-")
    return request.param, res


def test_every_step_column_is_declared_and_the_base_columns_are_always_there(run):
    name, res = run
    for col in res.steps.columns:
        assert col.startswith((TIMING_PREFIX, MFU_PREFIX)) or col in STEP_COLUMNS, (name, col)
    base = ["step", "warmup", "start_s", "end_s", "timing_s/step", "samples", "tokens", "policy_version",
            "staleness/mean", "staleness/max", "preemptions"]
    assert set(base) <= set(res.steps.columns), name
    assert not res.steps[base].isna().any().any(), name


def test_gpu_time_is_conserved_per_pool(run):
    """No GPU group is busy twice at once, so busy + idle = GPUs x window in every pool."""
    name, res = run
    tl = res.timeline
    for _, g in tl.groupby("gpu_group"):
        g = g.sort_values("start_s")
        assert (g["start_s"].to_numpy()[1:] >= g["end_s"].to_numpy()[:-1] - 1e-9).all(), name
    pools = {p: spec.gpus for p, spec in res.scenario.cluster.pools.items()}
    frac = busy_by_pool(tl, res.steps, pools)
    assert set(frac.index) == set(res.summary["idle_fraction_by_pool"]), name
    for pool, idle in res.summary["idle_fraction_by_pool"].items():
        assert 0.0 <= idle <= 1.0 + 1e-9
        busy = frac.loc[pool].drop("idle").sum()
        assert busy + idle == pytest.approx(1.0, abs=1e-9), (name, pool)
        assert frac.loc[pool, "idle"] == pytest.approx(idle, abs=1e-9), (name, pool)  # plot == summary


def test_every_sample_is_generated_once_and_ends_trained_discarded_or_in_flight(run):
    name, res = run
    s = res.samples
    assert s["sample_id"].is_unique, name
    assert set(s["fate"]) <= {"trained", "discarded", "in_flight", "finished"}, name
    if name != "generation-only":
        assert (s["fate"] == "trained").any(), name
    if name == "generation-only":
        assert (s["fate"] == "finished").all()
    trained = s[s["fate"] == "trained"]
    assert (trained["staleness"] >= 0).all() and not trained["staleness"].isna().any(), name
    assert trained["finished_s"].notna().all(), name
    if name != "generation-only":
        assert len(trained) == int(res.steps["samples"].sum()), name
    if res.trajectories is not None:  # one sample per trajectory that got to run a turn
        assert len(s) <= len(res.trajectories), name
        assert len(trained) <= int((res.trajectories["outcome"] == "completed").sum()), name


def test_policy_versions_only_grow(run):
    name, res = run
    versions = res.steps["policy_version"].to_numpy()
    assert (np.diff(versions) >= 0).all(), name
    assert (np.diff(res.steps["end_s"].to_numpy()) >= 0).all(), name
    if name != "generation-only":
        assert (np.diff(versions) == 1).all(), name  # one optimizer step's version per RL step


def test_split_placement_results_use_the_resolved_pools():
    """Regression: with `placement: split` the idle plot showed pool `main` 100% idle (unresolved scenario)."""
    res = simulate(load_scenario(ROOT / CASES["hybridflow-split"][0], CASES["hybridflow-split"][1]))
    assert res.scenario.schedule.placement == "custom"
    assert set(res.scenario.cluster.pools) == set(res.timeline["pool"])
    assert all(idle < 0.99 for idle in res.summary["idle_fraction_by_pool"].values())


def test_critical_path_shares_sum_to_one_and_trainer_phases_win_overlaps(run):
    name, res = run
    shares = res.summary["critical_path_share_by_phase"]
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-9), name
    assert all(v >= 0 for v in shares.values()), name


def test_critical_path_share_on_a_hand_made_timeline():
    import pandas as pd

    from rlsim.sim.results.metrics import critical_path_share

    tl = pd.DataFrame({"phase": ["train", "generate", "generate"], "start_s": [0.0, 1.0, 3.0],
                       "end_s": [2.0, 4.0, 3.5]})
    assert critical_path_share(tl, 0.0, 5.0) == pytest.approx({"train": 0.4, "generate": 0.4, "idle": 0.2})
    assert critical_path_share(tl, 1.0, 2.0) == pytest.approx({"train": 1.0, "idle": 0.0})


def test_one_step_off_last_step_is_steady_state_not_a_drain():
    """The rollout pool keeps generating the next batch during the last step (no 'drain' counted as idle)."""
    from rlsim.sim.results.metrics import clip_to_window

    res = simulate(load_scenario(ROOT / CASES["one-step-off"][0], ["steps=3", "warmup_steps=1",
                                                                   "algorithm.prompts_per_step=8"]))
    pool = res.scenario.roles["rollout"].pool
    gpus = res.scenario.cluster.pools[pool].gpus
    idle = []
    for _, row in res.measured_steps.iterrows():
        busy = clip_to_window(res.timeline[res.timeline["pool"] == pool], row["start_s"], row["end_s"])
        idle.append(1 - busy["gpu_seconds"].sum() / (gpus * (row["end_s"] - row["start_s"])))
    # A drained last step would sit near 100% idle; steady steps differ only by their sampled lengths.
    assert idle[-1] < 0.5 and abs(idle[-1] - np.mean(idle[:-1])) < 0.15
    assert res.summary["idle_fraction_by_pool"][pool] == pytest.approx(
        np.average(idle, weights=res.measured_steps["timing_s/step"]), abs=1e-6)


def test_the_readme_one_module_schedule_runs_and_keeps_the_contract(monkeypatch):
    """The README's "how to add a schedule" example, verbatim in spirit: phase code only."""
    import rlsim.sim.schedules as schedules
    from rlsim.sim.schedules.rl_base import Batch, RLSchedule

    class MySchedule(RLSchedule):
        def rollout(self, step, timing):
            algo = self.scenario.algorithm
            start = self.env.now
            prompt, response = yield from self.generate_batch(algo.prompts_per_step, algo.samples_per_prompt)
            timing["timing_s/gen"] = self.env.now - start
            return Batch(prompt, response, [r.rid for r in self.last_batch])

    monkeypatch.setitem(schedules.SCHEDULES, "hybridflow", MySchedule)
    res = simulate(load_scenario(ROOT / "scenarios/quickstart.yaml", SMALL))
    assert list(res.steps["policy_version"]) == [1, 2, 3]
    assert (res.samples["fate"] == "trained").sum() == res.steps["samples"].sum()
    assert {"timing_s/gen", "timing_s/update_actor"} <= set(res.steps.columns)


def test_busy_is_not_useful_keys_are_declared_and_are_fractions_per_pool_and_phase(run):
    """Tail share per pool and MFU/MBU per pool/phase: declared, in [0, 1], keyed by pools and timeline phases."""
    name, res = run
    if name == "generation-only":
        assert not set(SUMMARY_COLUMNS) & set(res.summary), name
        return
    assert set(SUMMARY_COLUMNS) <= set(res.summary), name
    pools = set(res.scenario.cluster.pools)
    assert set(res.summary["tail_share_by_pool"]) == pools, name
    phases = {(p, ph) for p, ph in res.timeline[["pool", "phase"]].itertuples(index=False)}
    for key in ("mfu_by_phase", "mbu_by_phase"):
        for k, v in res.summary[key].items():
            pool, phase = k.split("/")
            assert (pool, phase) in phases and 0.0 < v <= 1.0, (name, key, k, v)
    for pool, v in res.summary["tail_share_by_pool"].items():
        assert 0.0 <= v <= 1.0 + 1e-9, (name, pool, v)
    if name == "hybridflow":  # 64 samples on 4 engines of 256 seqs: every generating second is a thin tail
        s = res.summary
        generating = s["busy_fraction_by_phase"]["generate"] / (1 - s["gpu_idle_fraction"])
        assert s["tail_share_by_pool"]["gen"] == pytest.approx(generating, rel=1e-6)
    gen = [k for k in res.summary["mbu_by_phase"] if k.endswith("/generate")]
    assert gen, name  # every RL schedule decodes


def test_quickstart_tail_share_and_mfu_are_what_its_batches_and_costs_say():
    """Full quickstart: 1,024 responses on 4 engines of 256 sequences start full, then thin out (long tail)."""
    res = simulate(load_scenario(ROOT / "scenarios/quickstart.yaml", ["steps=1"]))
    s = res.summary
    generating = s["busy_fraction_by_phase"]["generate"] / (1 - s["gpu_idle_fraction"])
    assert 0.05 < s["tail_share_by_pool"]["gen"] < generating  # some, not all, of generation is a thin tail
    assert s["mfu_by_phase"]["gen/train"] < s["mfu_by_phase"]["gen/forward"] <= 1.0  # fractions of peak
    assert s["mbu_by_phase"]["gen/generate"] > 3 * s["mfu_by_phase"]["gen/generate"]  # decode is memory-bound
