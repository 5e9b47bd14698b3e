"""verl V1's replay buffer (eviction and refill) and elastic hybrid replicas (verl fully_async's dynamic resource
scheduling): the rules on their own, then the runs (docs/schedules-2026.md)."""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from import_helpers import assert_complete, fetch_wheel, refused_in_one_line
from typer.testing import CliRunner

from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.results.lifecycle import ABORTED, COMPLETED, DROPPED, FAILED, TRAINED, Reason, advance
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.schedules import build_schedule
from rlsim.sim.schedules.elastic_replicas import (
    DEFAULT_SWITCH_COST_S,
    INITIAL_PER_GROUP_S,
    RATIO_DOWN,
    RATIO_UP_MAX,
    RATIO_UP_MIN,
    ElasticController,
)
from rlsim.sim.schedules.groups import Group, Sample
from rlsim.sim.schedules.replay_buffer import (
    FAILED as EVICT_FAILED,
)
from rlsim.sim.schedules.replay_buffer import (  # noqa: I001
    FILTERED,
    STALE,
    ReplayBufferBook,
    ReplayBufferExpiry,
    ReplayBufferRule,
)
from rlsim.sim.staleness import VERSIONS, Staleness
from rlsim.tools.cli import app
from rlsim.tools.importers.command import run_import

ROOT = Path(__file__).resolve().parents[1]
REPLAY = ROOT / "scenarios/async/verl-v1-replay-buffer.yaml"
ELASTIC = ROOT / "scenarios/async/elastic-hybrid-replicas.yaml"

# ---------------------------------------------------------------- the replay buffer's rule


def test_a_group_spans_one_version_more_than_it_is_behind_and_is_stale_past_the_threshold():
    rule = ReplayBufferRule(max_off_policy_threshold=2)
    assert [rule.span(b) for b in (0, 1, 2)] == [1, 2, 3]
    assert [rule.stale(b) for b in (0, 1, 2, 3)] == [False, False, True, True]
    assert not ReplayBufferRule(None).stale(100)  # null: no staleness control


def test_failed_groups_are_evicted_as_failed_and_finished_ones_for_every_reason_they_have():
    rule = ReplayBufferRule(max_off_policy_threshold=1, filter_prob=0.5)
    assert rule.reasons(5, failed=True, all_equal=True) == {EVICT_FAILED}
    assert rule.reasons(1, failed=False, all_equal=True) == {STALE, FILTERED}
    assert rule.reasons(0, failed=False, all_equal=False) == frozenset()


def test_the_book_refills_one_prompt_per_evicted_group_and_reports_each_step_once():
    book = ReplayBufferBook()
    assert book.evict(frozenset((STALE, FILTERED)), span=3) == 1
    assert book.evict(frozenset((EVICT_FAILED,)), span=1) == 1
    cols = book.step_columns()
    assert cols == {"replay/evicted_stale": 1, "replay/evicted_filtered": 1, "replay/evicted_failed": 1,
                    "replay/refilled": 2}
    assert book.spans == [3]
    assert set(book.step_columns().values()) == {0}


class _Loop:
    """What the expiry policy reads of the loop, for groups whose start versions are given."""

    def __init__(self, syncs: int, seed: int = 0):
        self.env = SimpleNamespace(now=10.0, rng=np.random.default_rng(seed))
        self.syncs, self.accepted_groups, self.dropped_stale, self.woken = syncs, 0, 0, 0
        self.discarded: list[tuple[int, str]] = []

    def age(self, version: int, unit) -> Staleness:
        return Staleness(self.syncs - version, unit)  # one push per trainer step

    def discard_group(self, g: Group, reason: str) -> None:
        for s in g.samples:
            if s.state is COMPLETED:
                advance(s, DROPPED, reason)
        self.discarded.append((g.gid, reason))

    def wake_rollout(self) -> None:
        self.woken += 1


def _group(gid: int, version: int, failed: bool = False) -> Group:
    g = Group(gid, version, 0.0)
    for i in range(4):
        s = Sample(gid * 4 + i, g, 10, 10)
        advance(s, COMPLETED if i or not failed else FAILED, None)
        g.samples.append(s)
    return g


def test_the_expiry_evicts_failed_stale_and_filtered_groups_and_frees_their_slots():
    loop = _Loop(syncs=3)
    loop.accepted_groups = 5
    expiry = ReplayBufferExpiry(ReplayBufferRule(max_off_policy_threshold=2, filter_prob=0.0))
    fresh, behind_one, behind_two, failed = _group(0, 3), _group(1, 2), _group(2, 1), _group(3, 3, failed=True)
    keep = expiry.screen(loop, [fresh, behind_one, behind_two, failed])
    assert keep == [fresh, behind_one]
    assert loop.discarded == [(2, Reason.STALE), (3, Reason.GROUP_FAILED)]
    assert loop.accepted_groups == 3 and loop.woken == 1 and loop.dropped_stale == 4
    assert all(s.state is DROPPED for s in behind_two.samples)
    assert [s.state for s in failed.samples].count(DROPPED) == 3  # the failed one stays failed


def test_the_dapo_draw_is_made_once_per_group():
    loop = _Loop(syncs=0)
    expiry = ReplayBufferExpiry(ReplayBufferRule(None, filter_prob=0.5))
    groups = [_group(i, 0) for i in range(200)]
    kept = expiry.screen(loop, groups)
    assert 60 < len(kept) < 140  # about half are all-equal
    assert expiry.screen(loop, kept) == kept  # screened again (the version moved): no new draw
    assert expiry.book.evicted[FILTERED] == 200 - len(kept) == expiry.book.refilled


def test_with_no_filter_and_no_threshold_nothing_is_evicted_and_no_draw_is_made():
    loop = _Loop(syncs=9)
    state = loop.env.rng.bit_generator.state
    groups = [_group(i, 0) for i in range(5)]
    assert ReplayBufferExpiry(ReplayBufferRule(None)).screen(loop, groups) == groups
    assert loop.env.rng.bit_generator.state == state


# ---------------------------------------------------------------- the elastic controller (verl's default policy)


def test_replicas_start_asleep_and_leave_generation_at_the_ratio_of_a_cycle():
    ctl = ElasticController("default", 0.3, cycle_groups=128)
    assert not ctl.should_deactivate()
    assert ctl.deactivate_wait_groups() == 38  # int(0.3 x 128)
    ctl.activated(2.0)
    assert ctl.should_deactivate()
    ctl.deactivated(1.0)
    assert not ctl.active


def test_the_first_decision_activates_on_the_pessimistic_estimate_when_the_queue_is_short():
    ctl = ElasticController("default", 0.3, cycle_groups=100)
    rec = ctl.should_activate(produced=110, expected=100)  # 10 queued, 30 wanted: a gap of 20
    assert rec["gap_groups"] == pytest.approx(20)
    assert rec["benefit_s"] == pytest.approx(20 * INITIAL_PER_GROUP_S)
    assert rec["switch_cost_s"] == DEFAULT_SWITCH_COST_S and rec["activate"]
    assert not ctl.should_activate(produced=140, expected=100)["activate"]  # 40 queued: no gap


def test_the_benefit_is_the_gap_times_the_measured_wait_per_group_against_the_mean_switch():
    ctl = ElasticController("default", 0.3, cycle_groups=100)
    ctl.collected(30.0, 10)  # 3 s per group the trainer really waited for
    ctl.activated(5.0)
    ctl.deactivated(6.0)
    ctl.after_push()  # one cycle with a switch: 11 s; 10 of 100 groups waited for: the ratio rises to 0.4
    assert ctl.switch_cost() == pytest.approx(11.0) and ctl.ratio == pytest.approx(0.4)
    ctl.collected(30.0, 10)
    rec = ctl.should_activate(produced=136, expected=100)  # gap 40 - 36 = 4 groups x 3 s = 12 s > 11 s
    assert rec["benefit_s"] == pytest.approx(12.0) and rec["activate"]
    assert not ctl.should_activate(produced=137, expected=100)["activate"]  # 3 x 3 s = 9 s < 11 s


def test_the_ratio_rises_with_the_share_waited_for_clipped_and_falls_without_a_floor():
    ctl = ElasticController("default", 0.3, cycle_groups=100)
    ctl.collected(5.0, 5)
    ctl.after_push()
    assert ctl.ratio == pytest.approx(0.3 + 0.05)
    ctl.collected(5.0, 1)
    ctl.after_push()
    assert ctl.ratio == pytest.approx(0.35 + RATIO_UP_MIN)
    ctl.collected(50.0, 90)
    ctl.after_push()
    assert ctl.ratio == pytest.approx(0.37 + RATIO_UP_MAX)
    for _ in range(30):
        ctl.after_push()  # no wait: training is the bottleneck
    assert ctl.ratio == pytest.approx(0.47 - 30 * RATIO_DOWN)
    assert ctl.deactivate_wait_groups() <= 0  # verl sets no floor: the replicas leave at once
    ctl.ratio = 0.99
    ctl.collected(1.0, 50)
    ctl.after_push()
    assert ctl.ratio == 1.0


def test_fixed_ratio_activates_while_the_queue_is_short_and_never_adapts():
    ctl = ElasticController("fixed_ratio", 0.5, cycle_groups=10)
    assert ctl.should_activate(produced=14, expected=10)["activate"]
    assert not ctl.should_activate(produced=15, expected=10)["activate"]
    ctl.collected(100.0, 10)
    ctl.after_push()
    assert ctl.ratio == 0.5


def test_static_never_activates_and_waits_for_nothing():
    ctl = ElasticController("static_fully_async", 0.3, cycle_groups=10)
    assert ctl.deactivate_wait_groups() == 0
    assert not ctl.should_activate(produced=0, expected=10)["activate"]


# ---------------------------------------------------------------- the knobs


@pytest.mark.parametrize(("path", "overrides", "where"), [
    (REPLAY, ["schedule.max_off_policy_threshold=0"], "schedule.max_off_policy_threshold"),
    (REPLAY, ["schedule.max_off_policy_threshold=1.5"], "schedule.max_off_policy_threshold"),
    (REPLAY, ["schedule.replay_buffer.filter_prob=1"], "schedule.replay_buffer.filter_prob"),
    (REPLAY, ["schedule.replay_buffer.capacity=4"], "schedule.replay_buffer.capacity"),
])
def test_bad_knobs_are_refused_in_one_line(path, overrides, where):
    with pytest.raises(ScenarioError) as err:
        load_scenario(path, overrides)
    assert where in str(err.value)


def test_the_replay_buffer_admits_by_the_prefetch_window_and_bounds_staleness_by_the_span():
    spec = load_scenario(REPLAY).schedule
    assert spec.admission_bound == Staleness(1, VERSIONS)  # num_warmup_batches: 1
    assert spec.staleness_bound == Staleness(1, VERSIONS)  # a span of 2 versions: 1 behind
    off = load_scenario(REPLAY, ["schedule.replay_buffer=null"]).schedule
    assert off.admission_bound == off.staleness_bound == Staleness(2, VERSIONS)  # rlsim's rule without it



@pytest.mark.parametrize(("overrides", "where"), [
    (["schedule.resplit={}"], "schedule.elastic"),
    (["schedule.elastic.deactivate_ratio=0"], "schedule.elastic.deactivate_ratio"),
    (["schedule.elastic.policy=greedy"], "schedule.elastic.policy"),
    # 6 trainer GPUs do not divide into TP4 engines
    (["cluster.pools.train.gpus_per_node=3", "roles.rollout.parallel.tp=4"], "schedule.elastic"),
])
def test_bad_elastic_knobs_are_refused_in_one_line(overrides, where):
    with pytest.raises(ScenarioError) as err:
        load_scenario(ELASTIC, overrides)
    assert where in str(err.value)


# ---------------------------------------------------------------- replay-buffer runs


@functools.cache  # the tests only read a run: the same run is made once per module
def _schedule_after(path: Path, *sets: str):
    """A run's schedule object, after the run (its samples, with states and reasons, and its policies)."""
    scn = load_scenario(path, list(sets))
    env = SimEnvironment(scn.seed)
    sched = build_schedule(scn, env)
    env.run(until=env.process(sched.run()))
    return sched


def test_filtered_groups_are_evicted_whole_and_each_is_refilled_with_a_fresh_prompt():
    sched = _schedule_after(REPLAY, "steps=4")
    book = sched.expiry.book
    filtered = {s.group.gid for s in sched.samples_all if s.reason == Reason.FILTERED}
    assert book.evicted[FILTERED] == len(filtered) > 0
    for gid in filtered:  # the whole group goes, none of it trained
        assert all(s.state is DROPPED for s in sched.samples_all if s.group.gid == gid)
    # About filter_prob of the groups that finished are evicted (0.3 in the scenario).
    finished = {s.group.gid for s in sched.samples_all if s.group.closed}
    assert 0.15 < len(filtered) / len(finished) < 0.45
    # Each evicted group gave its slot to a fresh prompt: the groups started cover the trained, the evicted and
    # those still in flight or queued at the end.
    evicted = {s.group.gid for s in sched.samples_all if s.reason in (Reason.FILTERED, Reason.STALE)}
    assert book.refilled == len(evicted)
    trained = {s.group.gid for s in sched.samples_all if s.state is TRAINED}
    assert len(trained) == (4 + 1) * sched.batch_groups  # steps + warm-up steps, full batches
    assert not trained & evicted
    assert sched.groups_started >= len(trained) + len(evicted)


def test_no_trained_group_spans_more_versions_than_the_threshold():
    for threshold in (2, 1):
        sched = _schedule_after(REPLAY, "steps=4", f"schedule.max_off_policy_threshold={threshold}")
        trained = [r for r in sched.collector.samples.values() if r.fate == "trained"]
        assert trained and max(r.staleness for r in trained) <= threshold - 1  # span = versions behind + 1
    assert sched.expiry.book.evicted[STALE] > 0 and min(sched.expiry.book.spans) == 2


def test_without_the_filter_the_replay_buffer_evicts_nothing_at_a_loose_threshold():
    sched = _schedule_after(REPLAY, "steps=3", "schedule.replay_buffer.filter_prob=0")
    assert sum(sched.expiry.book.evicted.values()) == 0
    assert not [s for s in sched.samples_all if s.state is DROPPED]


# ---------------------------------------------------------------- `rlsim import verl`


@pytest.fixture(scope="module")
def verl_root() -> Path:
    return fetch_wheel("verl", "0.9.1")


def test_import_maps_verl_v1s_replay_buffer(verl_root):
    imported = run_import("verl", verl_root / "verl" / "trainer" / "config" / "ppo_trainer.yaml", [
        "actor_rollout_ref.rollout.name=vllm", "trainer.use_v1=true", "trainer.v1.trainer_mode=separate_async",
        "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=4",
        "trainer.v1.separate_async.parameter_sync_step=1", "data.train_batch_size=256",
        "algorithm.filter_groups.enable=true",
        "trainer.v1.separate_async.num_warmup_batches=2"])
    sched, ledger = imported.scenario.schedule, imported.ledger
    assert sched.replay_buffer.num_warmup_batches == 2 and sched.replay_buffer.filter_prob == 0.3
    assert sched.max_off_policy_threshold == 8  # verl's default
    assert ledger.used["trainer.v1.sampler.max_off_policy_strategy"].startswith("schedule.replay_buffer")
    assert any("all equal" in a.what and a.value == 0.3 for a in ledger.assumed)
    assert_complete(ledger)


def test_import_refuses_the_wait_strategy_in_one_line(verl_root):
    config = verl_root / "verl" / "trainer" / "config" / "ppo_trainer.yaml"
    line = refused_in_one_line(CliRunner(), app, "verl", config, [
        "actor_rollout_ref.rollout.name=vllm", "trainer.use_v1=true", "trainer.v1.trainer_mode=colocate_async",
        "trainer.v1.sampler.max_off_policy_strategy=wait"])
    assert "max_off_policy_strategy" in line and "not modelled" in line


def test_import_maps_fully_asyncs_dynamic_resource_scheduling(verl_root):
    cfg = verl_root / "verl" / "experimental" / "fully_async_policy" / "config" / "fully_async_ppo_trainer.yaml"
    imported = run_import("verl", cfg, [
        "actor_rollout_ref.rollout.name=vllm", "data.train_batch_size=0",
        "actor_rollout_ref.actor.ppo_mini_batch_size=32", "async_training.use_dynamic_resource_scheduling=true",
        "async_training.dynamic_schedule_deactivate_ratio=0.5", "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
        "actor_rollout_ref.rollout.standalone_gpu_memory_utilization=0.85"])
    scn, ledger = imported.scenario, imported.ledger
    el = scn.schedule.elastic
    assert (el.policy, el.deactivate_ratio, el.rebalance, el.gpu_memory_utilization) == ("default", 0.5, True, 0.4)
    assert scn.roles["rollout"].engine.gpu_memory_utilization == 0.85  # the standalone replicas'
    assert "async_training.dynamic_schedule_policy" in ledger.used
    assert_complete(ledger)
    off = run_import("verl", cfg, ["actor_rollout_ref.rollout.name=vllm", "data.train_batch_size=0",
                                   "actor_rollout_ref.actor.ppo_mini_batch_size=32"])
    assert off.scenario.schedule.elastic is None
    assert "async_training.dynamic_schedule_deactivate_ratio" in off.ledger.ignored


# ---------------------------------------------------------------- elastic runs


def test_elastic_replicas_shorten_the_run_and_generate_only_while_the_trainer_does_not_train():
    sched = _schedule_after(ELASTIC)
    off = _schedule_after(ELASTIC, "schedule.elastic=null")
    assert sched.collector.step_rows[-1]["end_s"] < 0.85 * off.collector.step_rows[-1]["end_s"]
    tl = sched.env.ledger.to_frame()
    lent = tl[tl["gpu_group"].str.startswith("lent-") & (tl["phase"] == "generate")]
    trainer = tl[(tl["gpu_group"] == "actor") & tl["phase"].isin(["train", "forward"])]
    assert len(lent) and len(trainer)
    for _, t in trainer.iterrows():  # the trainer's GPUs never train and generate at once
        assert not ((lent["start_s"] < t["end_s"] - 1e-9) & (lent["end_s"] > t["start_s"] + 1e-9)).any()
    assert not off.env.ledger.to_frame()["gpu_group"].str.startswith("lent-").any()


def test_every_activation_follows_verls_default_rule_and_the_ratio_adapts():
    sched = _schedule_after(ELASTIC)
    ctl = sched.elastic.controller
    assert len(ctl.log) == sched.total_steps  # one decision per weight push (one push per step here)
    for rec in ctl.log:
        if rec["gap_groups"] <= 0:
            assert not rec["activate"]
        else:
            assert rec["activate"] == (rec["benefit_s"] > rec["switch_cost_s"])
    assert ctl.log[0]["switch_cost_s"] == DEFAULT_SWITCH_COST_S  # nothing measured before the first push
    assert ctl.overheads and all(o > 0 for o in ctl.overheads)  # then each cycle's measured switches
    steps = sched.collector.step_rows
    ratios = [r["elastic/deactivate_ratio"] for r in steps]
    assert ratios[0] != 0.3 and all(abs(b - a) <= RATIO_UP_MAX + 1e-9 for a, b in zip(ratios, ratios[1:], strict=False))


def test_elastic_moves_lose_no_sample_and_keep_partial_output():
    sched = _schedule_after(ELASTIC)
    assert sched.lending.moved > 0 and sched.elastic.rebalanced > 0
    for s in sched.samples_all:
        if s.state in (ABORTED, DROPPED):
            assert s.reason == Reason.END_OF_RUN, (s.sid, s.reason)
        if s.finished and s.state in (COMPLETED, TRAINED):
            assert s.generated == s.response_tokens and sum(s.version_tokens.values()) == s.generated


def test_static_policy_never_wakes_the_replicas_and_the_run_is_the_baseline():
    static = _schedule_after(ELASTIC, "schedule.elastic.policy=static_fully_async")
    off = _schedule_after(ELASTIC, "schedule.elastic=null")
    assert not static.elastic.controller.active
    assert [r["end_s"] for r in static.collector.step_rows] == [r["end_s"] for r in off.collector.step_rows]
