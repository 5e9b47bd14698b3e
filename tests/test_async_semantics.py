"""Schedule semantics of framework knobs: verl fully_async's rule, require_batches, partial_rollout, drain.

Every test checks an event trace or an invariant of it, not a pinned number: verl's admission cap at
every group start, the optimizer updates the cost model actually runs, and the order of a drain
(in-flight requests finish before the weights change; nothing new is admitted meanwhile).
"""

from __future__ import annotations

import pytest

import rlsim.sim.costs.training as batching
from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.results.lifecycle import SampleState
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import parse_scenario
from rlsim.sim.schedules.fully_async import FullyAsyncSchedule
from rlsim.sim.simulate import simulate


def scenario(steps=4, prompts=8, n=4, sigma=1.0, mini_batches=2, epochs=1, **schedule) -> dict:
    """A few H800 engines and a 1-node trainer, a small model and long-tailed responses."""
    return {
        "name": "semantics",
        "seed": 3,
        "steps": steps,
        "cluster": {"pools": {"gen": {"hardware": "h800", "nodes": 1, "gpus_per_node": 4},
                              "train": {"hardware": "h800", "nodes": 1, "gpus_per_node": 2}}},
        "models": {"m": {"preset": "qwen2.5-0.5b"}},
        "roles": {
            "actor": {"pool": "train", "model": "m", "train": {"sharding": "fsdp"}},
            "rollout": {"pool": "gen", "model": "m", "engine": {"gpu_memory_utilization": 0.5, "max_num_seqs": 8}},
        },
        "algorithm": {"kind": "grpo", "prompts_per_step": prompts, "samples_per_prompt": n,
                      "mini_batches": mini_batches, "epochs": epochs},
        "workload": {"prompt_length": {"kind": "uniform", "min": 32, "max": 256},
                     "response_length": {"kind": "lognormal", "mean": 400, "sigma": sigma, "max": 4000}},
        "schedule": {"kind": "fully-async", **schedule},
    }


def run(data: dict) -> FullyAsyncSchedule:
    scn = parse_scenario(data, source="test")
    env = SimEnvironment(scn.seed)
    sched = FullyAsyncSchedule(scn, env)
    env.run(until=env.process(sched.run()))
    return sched


def groups_of(sched: FullyAsyncSchedule) -> list:
    return sorted({s.group.gid: s.group for s in sched.samples_all}.values(), key=lambda g: g.gid)


# ---------------------------------------------------------------- verl: require_batches, ppo_mini_batch_size


@pytest.mark.parametrize("require_batches, epochs", [(1, 1), (3, 1), (2, 2)])
def test_require_batches_sets_updates_and_prompts_per_trainer_step(monkeypatch, require_batches, epochs):
    """Each trainer step consumes require_batches x ppo_mini_batch_size prompt groups and makes
    require_batches x epochs optimizer updates (counted in the cost model's update plan), whatever
    algorithm.mini_batches says."""
    plans = []
    real = batching.update_plan

    def spy(n_samples, mini_batches, epochs_, dp, seq_lens, balance, *scope):
        plan = real(n_samples, mini_batches, epochs_, dp, seq_lens, balance, *scope)
        plans.append((n_samples, len(plan)))
        return plan

    monkeypatch.setattr(batching, "update_plan", spy)
    mb, n = 2, 4
    sched = run(scenario(steps=3, n=n, mini_batches=1, epochs=epochs, max_head_offpolicyness=None,
                         staleness_threshold=0.5, require_batches=require_batches, ppo_mini_batch_size=mb))
    assert len(sched.step_rows) == 3
    for row in sched.step_rows:
        assert row["trainer/prompt_groups"] == require_batches * mb
        assert row["samples"] == require_batches * mb * n
    assert len(plans) == 3  # one actor update per trainer step
    for n_samples, updates in plans:
        assert n_samples == require_batches * mb * n
        assert updates == require_batches * epochs


def test_without_verl_batch_knobs_updates_follow_algorithm_mini_batches(monkeypatch):
    plans = []
    real = batching.update_plan
    monkeypatch.setattr(batching, "update_plan", lambda *a: plans.append(len(p := real(*a))) or p)
    sched = run(scenario(steps=2, mini_batches=4, epochs=2, max_head_offpolicyness=1))
    assert plans == [8, 8] and [r["trainer/optimizer_updates"] for r in sched.step_rows] == [8, 8]


# ---------------------------------------------------------------- verl: staleness_threshold admission


@pytest.mark.parametrize("threshold, trigger", [(0.0, 2), (0.5, 1), (0.5, 2), (1.0, 1)])
def test_verl_staleness_threshold_caps_samples_per_weight_version(threshold, trigger):
    """verl's rollouter: per weight version, groups started since the sync plus those in flight or
    queued at the sync never exceed int((1 + s) x trigger x require_batches x ppo_mini_batch_size).
    Recomputed from the trace (group start order, the time the trainer took each group, sync times)."""
    rb, mb = 1, 4
    cap = int((1 + threshold) * trigger * rb * mb)
    sched = run(scenario(steps=6, sigma=1.2, max_head_offpolicyness=None, staleness_threshold=threshold,
                         trigger_parameter_sync_step=trigger, require_batches=rb, ppo_mini_batch_size=mb))
    groups = groups_of(sched)
    syncs = [(t, first) for t, first, _ in sched.sync_marks]
    assert len(syncs) == 6 // trigger  # one weight version per trigger_parameter_sync_step trainer steps
    windows = [(0.0, 0, 0)]  # (reset time, first group of the version, groups carried over)
    for t, first in syncs:
        carried = sum(1 for g in groups if g.gid < first and (g.taken_s is None or g.taken_s > t))
        windows.append((t, first, carried))
    bound_reached = False
    for k, (_, first, carried) in enumerate(windows):
        end = windows[k + 1][1] if k + 1 < len(windows) else sched.groups_started
        started = end - first
        assert carried + started <= cap, (k, carried, started, cap)
        bound_reached |= carried + started == cap
    assert bound_reached  # the cap, not something else, is what limits admission
    # The schedule's own running count agrees at every start; stale samples are never dropped.
    assert max(c for _, _, c in sched.admission_log) <= cap
    assert sched.dropped_stale == 0 and sched.admission.max_required == cap


def test_verl_threshold_is_a_fraction_not_versions():
    """s = 0.5 lets a version start 1.5 syncs' worth of groups (not eta = 0.5 versions): more throughput
    than s = 0, and samples older than one version appear, which AReaL's eta = 0.5 would forbid."""
    base = dict(steps=6, sigma=1.2, max_head_offpolicyness=None, require_batches=1, ppo_mini_batch_size=4)
    s0 = run(scenario(staleness_threshold=0.0, **base))
    s5 = run(scenario(staleness_threshold=0.5, **base))
    assert s5.step_rows[-1]["end_s"] < s0.step_rows[-1]["end_s"]
    assert max(s5.staleness_values) > 1 and max(s0.staleness_values) <= 1


# ---------------------------------------------------------------- verl: partial_rollout


def test_partial_rollout_on_interrupts_and_resumes_off_waits():
    base = dict(steps=4, sigma=1.2, max_head_offpolicyness=None, staleness_threshold=0.5,
                require_batches=1, ppo_mini_batch_size=4)
    on, off = run(scenario(partial_rollout=True, **base)), run(scenario(partial_rollout=False, **base))
    assert on.interrupt == "abort-resume" and off.interrupt == "drain"
    # On: generations interrupted at a sync resume afterwards, so some trajectories span versions and
    # are re-prefilled (prompt + partial output); nothing is thrown away.
    assert sum(len(s.version_tokens) > 1 for s in on.samples_all if s.finished) > 0
    assert on.token_accounting()["tokens_discarded"] == 0
    # Off: every sample is generated by one policy version; each sync waits for the drain.
    assert all(len(s.version_tokens) == 1 for s in off.samples_all if s.finished)
    drains = [r["timing_s/drain_rollout"] for r in off.step_rows]
    assert all(d > 0 for d in drains)
    assert all(r["timing_s/sync_rollout_weights"] >= d for r, d in zip(off.step_rows, drains, strict=True))
    assert "timing_s/drain_rollout" not in on.step_rows[0]


# ---------------------------------------------------------------- AReaL's non-interruptible baseline: drain


def test_drain_trace_in_flight_finish_first_and_nothing_is_admitted():
    data = scenario(steps=4, sigma=1.2, max_head_offpolicyness=1, interrupt="drain")
    data["roles"]["rollout"]["engine"]["max_num_seqs"] = 4  # requests queue in the engines
    sched = run(data)
    requests = [s.request for s in sched.samples_all if s.request is not None]
    assert len(sched.drain_log) == 4 * len(sched.engines)
    held_somewhere = False
    for rec in sched.drain_log:
        start, resumed, engine = rec["start"], rec["resumed"], rec["engine"]
        assert rec["new_version"] > rec["version"]
        for r in rec["in_flight"]:  # every in-flight request finishes before the engine's weights change
            assert r.finished_s is not None and r.finished_s <= resumed
            assert set(r.version_tokens) <= {rec["version"]}
        in_flight = set(rec["in_flight"])
        for r in requests:
            if r.engine != engine or r in in_flight:
                continue
            assert r.admitted_s is None or not (start < r.admitted_s < resumed), (engine, r.rid)
            if r.arrival_s < start and r.admitted_s is not None and r.admitted_s >= resumed:
                held_somewhere = True  # queued before the drain, admitted only after the new weights
    assert held_somewhere
    # Nothing from a drain remains held or gated afterwards.
    assert not any(e.holding for e in sched.engines)
    assert sum(s.generated for s in sched.samples_all if s.trained_step is not None) == \
        sched.token_accounting()["tokens_trained"]


def test_drain_is_slower_than_interruptible_generation_with_long_tails():
    """AReaL Fig. 6b compares interruptible generation against waiting for in-flight requests."""
    th = {}
    for mode in ("recompute", "drain"):
        th[mode] = simulate(parse_scenario(scenario(steps=4, sigma=1.2, max_head_offpolicyness=1, interrupt=mode),
                                           source="t")).summary
    assert th["recompute"]["throughput_tokens_per_s"] > 1.2 * th["drain"]["throughput_tokens_per_s"]
    assert th["drain"]["rollout_idle_ratio"] > th["recompute"]["rollout_idle_ratio"]


# ---------------------------------------------------------------- knobs that contradict each other


@pytest.mark.parametrize("schedule, line", [
    ({"staleness_threshold": 0.5, "max_head_offpolicyness": 2},
     "test: schedule.staleness_threshold: verl's staleness_threshold"),
    ({"partial_rollout": True, "interrupt": "recompute"},
     "test: schedule.partial_rollout: partial_rollout: true means interrupt: abort-resume, but interrupt is"),
    ({"partial_rollout": False, "interrupt": "abort-resume"},
     "test: schedule.partial_rollout: partial_rollout: false means interrupt: drain"),
    ({"consumer_batch_size": 8, "require_batches": 2},
     "test: schedule.consumer_batch_size: AReaL's consumer_batch_size and verl's require_batches"),
    ({"consumer_batch_size": 8, "require_batches": 2, "ppo_mini_batch_size": 2},
     "test: schedule.consumer_batch_size: AReaL's consumer_batch_size and verl's require_batches / "
     "ppo_mini_batch_size both set the prompt groups per trainer step and disagree (8 vs 4)"),
    ({"staleness_threshold": 0.5, "drop_stale": True},
     "test: schedule.drop_stale: drop_stale drops samples older than max_head_offpolicyness versions"),
])
def test_contradictory_framework_knobs_are_one_line_errors(schedule, line):
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(scenario(**schedule), source="test")
    lines = exc.value.lines()
    assert len(lines) == 1 and lines[0].startswith(line), lines


def test_consistent_or_defaulted_knobs_resolve():
    spec = parse_scenario(scenario(staleness_threshold=0.5), source="t").schedule
    assert spec.verl_rule and spec.interrupt == "abort-resume"  # verl's default partial_rollout: True
    spec = parse_scenario(scenario(consumer_batch_size=4, require_batches=2, ppo_mini_batch_size=2), source="t")
    assert spec.schedule.consumer_groups(spec.algorithm) == 4
    spec = parse_scenario(scenario(partial_rollout=False), source="t").schedule
    assert not spec.verl_rule and spec.interrupt == "drain"
    areal = parse_scenario(scenario(), source="t").schedule
    assert areal.interrupt == "recompute" and areal.max_head_offpolicyness == 4 and not areal.verl_rule


def test_roll_has_no_verl_sync_knobs():
    data = scenario()
    data["schedule"] = {"kind": "roll", "trigger_parameter_sync_step": 2}
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(data, source="test")
    assert exc.value.lines() == ["test: schedule.trigger_parameter_sync_step: unknown key for roll (only fully-async, "
                                 "verl-v1 use it)"]


# ---------------------------------------------------------------- AReaL unchanged


def test_areal_admission_rule_holds_at_every_start():
    """AReaL's code form: accepted + running <= (eta + version + 1) x B at every group start.

    With the rlsim `drop_stale` option on, a dropped group frees its slot and no trained sample is older
    than eta.
    """
    eta, prompts = 1, 4
    sched = run(scenario(steps=5, prompts=prompts, sigma=1.2, max_head_offpolicyness=eta, drop_stale=True))
    assert not sched.verl and sched.drop_stale and sched.interrupt == "recompute"
    groups = groups_of(sched)
    for t, gid, _ in sched.admission_log:
        version = sum(1 for r in sched.step_rows if "timing_s/sync_rollout_weights" in r and r["end_s"] <= t)
        started = gid + 1
        dropped_before = sum(1 for g in groups if g.gid < gid and g.taken_s is not None and g.taken_s <= t
                             and all(s.state is SampleState.DROPPED for s in g.samples))
        assert started - dropped_before <= (eta + version + 1) * prompts + 1e-9
    assert max(sched.staleness_values) <= eta


def test_areal_bounds_staleness_at_admission_only_and_trains_every_finished_sample():
    """AReaL 1.0.4 (docs/sources.md §7): no staleness drop; the trainer takes the oldest finished groups.

    With a long tail a sample admitted within the bound can finish more than eta versions later: it is
    trained, not dropped (staleness above eta is then possible and reported).
    """
    eta, prompts = 1, 4
    sched = run(scenario(steps=5, prompts=prompts, sigma=1.2, max_head_offpolicyness=eta))
    assert not sched.drop_stale and sched.dropped_stale == 0
    states = {s.state for g in groups_of(sched) for s in g.samples}
    assert SampleState.DROPPED not in states
    assert max(sched.staleness_values) > eta  # the same run with drop_stale: true keeps every sample <= eta
    for t, gid, _ in sched.admission_log:  # admission still obeys the rule (nothing frees a slot early)
        version = sum(1 for r in sched.step_rows if "timing_s/sync_rollout_weights" in r and r["end_s"] <= t)
        assert gid + 1 <= (eta + version + 1) * prompts + 1e-9


def test_resolved_knobs_survive_a_dump_and_reload():
    """The resolved spec (interrupt from partial_rollout, eta cleared under verl's rule) reloads as is."""
    import yaml

    from rlsim.sim.scenario.loader import dump_scenario

    for knobs in ({"staleness_threshold": 0.2}, {"staleness_threshold": 0.2, "partial_rollout": False},
                  {"require_batches": 2, "ppo_mini_batch_size": 2}):
        scn = parse_scenario(scenario(**knobs), source="t")
        again = parse_scenario(yaml.safe_load(dump_scenario(scn)), source="dump")
        assert again.schedule == scn.schedule
