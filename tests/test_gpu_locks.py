"""Roles on parts of one pool (ROLL's device_mapping): GPU segments, who may run together, memory per run."""

from pathlib import Path

import pytest
import simpy
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import parse_scenario
from rlsim.sim.schedules.gpu_locks import GpuLocks
from rlsim.sim.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]


def judge_scenario(**schedule) -> dict:
    data = yaml.safe_load((ROOT / "scenarios/roll/rlvr-qwen2.5-7b-judge.yaml").read_text())
    data["steps"], data["warmup_steps"] = 2, 0
    data["algorithm"]["prompts_per_step"] = 16
    data["schedule"].update(schedule)
    return data


def gpu_span(scn, group: str) -> tuple[str, int, int]:
    """Pool GPUs of a ledger group: a role's range, or engine i's tp GPUs inside its role's range."""
    role, _, index = group.rpartition("-")
    if role and index.isdigit():
        spec = scn.roles[role]
        start = scn.role_gpu_range(role)[0] + int(index) * spec.parallel.tp
        return spec.pool, start, start + spec.parallel.tp
    start, stop = scn.role_gpu_range(group)
    return scn.roles[group].pool, start, stop


def assert_no_gpu_double_booked(res) -> None:
    scn = res.scenario
    rows = [(gpu_span(scn, r.gpu_group), r.start_s, r.end_s, r.gpu_group, r.phase) for r in res.timeline.itertuples()]
    for i, ((pool_a, a0, a1), s_a, e_a, g_a, p_a) in enumerate(rows):
        for (pool_b, b0, b1), s_b, e_b, g_b, p_b in rows[i + 1:]:
            if pool_a == pool_b and a0 < b1 and b0 < a1:
                assert min(e_a, e_b) - max(s_a, s_b) <= 1e-9, (g_a, p_a, s_a, e_a, g_b, p_b, s_b, e_b)


def test_segments_follow_the_role_boundaries():
    scn = parse_scenario(judge_scenario(), source="t")
    locks = GpuLocks(simpy.Environment(), scn)
    assert locks.segments["main"] == [("main", 0, 12), ("main", 12, 16)]
    assert locks.of("actor") == [("main", 0, 12), ("main", 12, 16)]
    assert locks.of("rollout") == [("main", 0, 12)] and locks.of("reward") == [("main", 12, 16)]
    assert locks.of("rollout", "reward") == locks.of("actor")


@pytest.mark.parametrize("scoring", ["sample", "batch"])
def test_partial_overlap_never_double_books_a_gpu(scoring):
    res = simulate(parse_scenario(judge_scenario(judge_scoring=scoring), source="t"))
    assert_no_gpu_double_booked(res)
    tl = res.timeline
    # The actor trains on all 16 GPUs, the rollout generates on 0-11, the judge scores on 12-15.
    assert set(tl[tl["role"] == "rollout"]["gpu_group"]) == {f"rollout-{i}" for i in range(12)}
    assert set(tl[tl["role"] == "reward"]["gpu_group"]) == {f"reward-{i}" for i in range(4)}
    for _, rows in tl.groupby("step"):
        gen_end = rows[rows["role"] == "rollout"]["end_s"].max()
        judge_start = rows[rows["role"] == "reward"]["start_s"].min()
        assert (judge_start < gen_end) == (scoring == "sample")  # ROLL judges during generation, verl after


def test_sample_level_judging_shortens_the_step():
    sample = simulate(parse_scenario(judge_scenario(judge_scoring="sample"), source="t"))
    batch = simulate(parse_scenario(judge_scenario(judge_scoring="batch"), source="t"))
    assert sample.summary["step_time_s"] < batch.summary["step_time_s"]
    assert (sample.steps["timing_s/reward"] < batch.steps["timing_s/reward"]).all()
    assert sample.summary["gpu_idle_fraction"] < batch.summary["gpu_idle_fraction"]


def test_disjoint_actor_and_rollout_in_one_pool_broadcast_instead_of_resharding():
    data = judge_scenario(judge_scoring="batch")
    data["roles"]["actor"].update(gpu_offset=8, gpus=8)
    data["roles"]["reference"].update(gpu_offset=8, gpus=8)
    data["roles"]["rollout"]["gpus"] = 8
    data["roles"]["reward"].update(gpu_offset=8, gpus=8)
    res = simulate(parse_scenario(data, source="t"))
    assert_no_gpu_double_booked(res)
    assert set(res.timeline[res.timeline["role"] == "actor"]["phase"]) >= {"sync", "train"}
    assert "switch" not in set(res.timeline["phase"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"reward": {"gpu_offset": 16}}, "roles.reward.gpu_offset: 16 is past pool 'main''s 16 GPUs"),
        ({"reward": {"gpu_offset": 12, "gpus": 8}}, "roles.reward.gpus: asks GPUs 12..19 but pool 'main' has 16"),
        ({"reward": {"gpu_offset": 12, "parallel": {"tp": 8}}}, "roles.reward.gpu_offset: must be a multiple of tp"),
        ({"reward": {"gpu_offset": 8, "gpus": 8}}, "schedule.judge_scoring: 'sample' needs the judge on GPUs apart"),
        ({"reward": {"engine": {"gpu_memory_utilization": 0.99}}}, "pool 'main' GPUs 12..15 (h100-sxm): actor+"),
    ],
)
def test_bad_device_mappings_name_the_problem(change, message):
    data = judge_scenario()
    for role, fields in change.items():
        data["roles"][role].update(fields)
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(data, source="t")
    assert any(message in line for line in exc.value.lines()), exc.value.lines()


@settings(max_examples=12, deadline=None)
@given(rollout_gpus=st.sampled_from([4, 8, 12]), judge_gpus=st.sampled_from([2, 4]),
       scoring=st.sampled_from(["sample", "batch"]), seed=st.integers(0, 3))
def test_any_device_mapping_keeps_gpus_exclusive(rollout_gpus, judge_gpus, scoring, seed):
    """Whatever the split of one pool, no two phases ever hold a GPU at once, and every step trains."""
    data = judge_scenario(judge_scoring=scoring)
    data["seed"] = seed
    data["roles"]["rollout"]["gpus"] = rollout_gpus
    data["roles"]["reward"].update(gpu_offset=rollout_gpus, gpus=judge_gpus)
    res = simulate(parse_scenario(data, source="t"))
    assert_no_gpu_double_booked(res)
    assert (res.steps["samples"] == 16 * 8).all()


def test_a_placement_shortcut_decides_the_gpus_itself():
    """`colocate` puts every role on all GPUs: a role's own gpus/gpu_offset do not survive the rewrite."""
    from rlsim.sim.scenario.placement import resolve_placement

    data = judge_scenario(placement="colocate", judge_scoring="batch")
    placement, problems = resolve_placement(parse_scenario(data, source="t"))
    assert not problems
    assert {placement.scenario.role_gpu_range(r) for r in placement.scenario.roles} == {(0, 16)}


def test_async_schedules_keep_the_judge_on_gpus_of_its_own():
    data = judge_scenario()
    data["cluster"]["pools"]["train"] = {"hardware": "h100-sxm", "nodes": 1, "gpus_per_node": 4}
    data["roles"]["actor"]["pool"] = data["roles"]["reference"]["pool"] = "train"
    data["roles"]["reward"].update(pool="train", gpu_offset=0)
    data["schedule"] = {"kind": "roll", "async_generation_ratio": 1}
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(data, source="t")
    assert "roles.reward.pool: roll scores samples while other roles run" in exc.value.lines()[0]
