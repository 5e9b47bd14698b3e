"""Aggregate mode (rlsim/sim/aggregate.py): a share of identical rollout engines with the same share of the load."""

from __future__ import annotations

import numpy as np
import pytest

from rlsim.sim import aggregate
from rlsim.sim.costs.phase_costs import PhaseCosts
from rlsim.sim.paths import shipped_dir
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.scenario.placement import resolve_scenario
from rlsim.sim.simulate import simulate
from rlsim.sim.workload import LengthSampler

SCENARIOS = shipped_dir("scenarios")
GRPO_7B = SCENARIOS / "hybridflow" / "grpo-qwen2.5-7b-h100.yaml"
X8 = ["cluster.pools.main.nodes=16", "algorithm.prompts_per_step=512"]  # 128 H100, 64 engines: shipped load per GPU


def _resolved(path, overrides=()):
    scn, problems = resolve_scenario(load_scenario(path, list(overrides)))
    assert not problems
    return scn


def test_plan_takes_the_largest_share_that_leaves_enough_engines_and_divides_the_batches():
    path = SCENARIOS / "agentic" / "asearcher-7b.yaml"
    plan, why = aggregate.plan(_resolved(path, ["simulation.engines=16"]))
    assert why == "" and plan.engines == 96 and plan.factor == 4  # 24 engines >= 16; 128 prompt groups / 4
    reduced = plan.reduced
    assert reduced.algorithm.prompts_per_step == 32
    assert reduced.schedule.consumer_batch_size == 32 and reduced.schedule.max_concurrent_rollouts == 32
    assert reduced.environments.pools["search_clients"].concurrency == 80
    assert reduced.cluster == plan.reduced.cluster  # pools and layouts unchanged: training stays exact
    # by default an asynchronous run simulates at least 8 engines: 12 of 96, 16 prompt groups per step
    plan, _ = aggregate.plan(_resolved(path))
    assert plan.factor == 8 and plan.reduced.algorithm.prompts_per_step == 16
    # a synchronous one at least 16 engines
    plan, _ = aggregate.plan(_resolved(GRPO_7B, X8))
    assert plan.factor == 4 and plan.engines // plan.factor == 16


def test_plan_keeps_at_least_16_prompt_groups_per_step():
    # 96 engines would allow 1/8 (12 engines), but 64 prompt groups / 8 leaves 8: 1/4 (16 groups, 24 engines)
    plan, _ = aggregate.plan(_resolved(SCENARIOS / "agentic" / "asearcher-7b.yaml", [
        "algorithm.prompts_per_step=64", "schedule.consumer_batch_size=64", "schedule.max_concurrent_rollouts=64"]))
    assert plan.factor == 4 and plan.reduced.algorithm.prompts_per_step == 16
    plan, why = aggregate.plan(_resolved(SCENARIOS / "agentic" / "asearcher-7b.yaml", [
        "algorithm.prompts_per_step=16", "schedule.consumer_batch_size=16", "schedule.max_concurrent_rollouts=16"]))
    assert plan is None and "16 prompt groups per step" in why


def test_plan_falls_back_with_a_reason():
    plan, why = aggregate.plan(_resolved(SCENARIOS / "quickstart.yaml"))
    assert plan is None and "4 rollout engines" in why
    plan, why = aggregate.plan(_resolved(SCENARIOS / "roll" / "rlvr-qwen2.5-7b-async.yaml"))
    assert plan is None and "roll" in why


def test_fallback_runs_exactly_and_says_so():
    scn = load_scenario(SCENARIOS / "quickstart.yaml", ["steps=1", "simulation.mode=aggregate"])
    res = simulate(scn)
    exact = simulate(load_scenario(SCENARIOS / "quickstart.yaml", ["steps=1"]))
    assert res.meta["simulation_mode"] == "exact" and "ran exactly" in res.meta["aggregate_fallback"]
    assert res.summary == exact.summary
    assert aggregate.describe_mode(exact.meta) is None


def test_simulation_section_is_strict():
    with pytest.raises(ScenarioError):
        load_scenario(GRPO_7B, ["simulation.mode=fluid"])
    with pytest.raises(ScenarioError):
        load_scenario(GRPO_7B, ["simulation.engine=4"])


def test_aggregate_agrees_with_exact_on_a_128_gpu_synchronous_run():
    exact = simulate(load_scenario(GRPO_7B, [*X8, "steps=2"]))
    agg = simulate(load_scenario(GRPO_7B, [*X8, "steps=2", "simulation.mode=aggregate"]))
    assert agg.meta["simulation_mode"] == "aggregate" and agg.meta["aggregate_factor"] == 4
    assert "rollout engines simulated" in aggregate.describe_mode(agg.meta)
    assert "at least 16 engines (the default for a synchronous schedule)" in agg.meta["aggregate_share_rule"]
    assert agg.meta["events"] < exact.meta["events"] / 2
    # counts scaled back: every step trains the full batch
    assert (agg.measured_steps["samples"] == 512 * 8).all()
    e, a = exact.summary, agg.summary
    assert a["throughput_tokens_per_s"] == pytest.approx(e["throughput_tokens_per_s"], rel=0.04)
    assert a["step_time_s"] == pytest.approx(e["step_time_s"], rel=0.04)
    assert a["gpu_idle_fraction"] == pytest.approx(e["gpu_idle_fraction"], abs=0.02)
    # engine efficiency counts each simulated engine as the engines it stands for
    assert a["mbu_by_phase"]["main/generate"] == pytest.approx(e["mbu_by_phase"]["main/generate"], rel=0.05)
    assert a["mfu_by_phase"]["main/generate"] == pytest.approx(e["mfu_by_phase"]["main/generate"], rel=0.05)
    # the synchronous step's tail: the generation phase waits for the slowest engine of all 64
    gen_e, gen_a = exact.measured_steps["timing_s/gen"].mean(), agg.measured_steps["timing_s/gen"].mean()
    assert gen_a == pytest.approx(gen_e, rel=0.04)


def test_tail_subsample_keeps_the_longest_group_and_the_distribution():
    scn = load_scenario(GRPO_7B)
    rng = np.random.default_rng(3)
    full = LengthSampler(scn.workload, np.random.default_rng(3))(256 * 8, 8, 0)[1]
    sub = aggregate.TailSubsample(LengthSampler(scn.workload, np.random.default_rng(3)), 8, rng)
    prompt, response = sub(256, 8, 0)
    assert len(prompt) == len(response) == 256 * 8
    assert response.max() == full.max()  # the same draw: the batch's longest sequence is simulated
    assert response.mean() == pytest.approx(full.mean(), rel=0.05)
    # the trainer's full batch: the simulated share with the rows not simulated, the whole draw once (not the
    # share, and its longest group, repeated 8 times)
    full_prompt, _ = LengthSampler(scn.workload, np.random.default_rng(3))(256 * 8, 8, 0)
    batch = aggregate.TrainerBatch(8, rng, sub)(prompt + response)
    assert sorted(batch) == sorted(full_prompt + full) and not sub.rest
    # no draw kept (asynchronous): the share once and 7 shares drawn from its quantile function, between its
    # order statistics (not 8 copies, nor copies drawn with replacement: repeated rows tie)
    share = prompt + response
    batch = aggregate.TrainerBatch(8, rng)(share)
    assert len(batch) == 256 * 8 * 8 and batch.min() >= share.min() and batch.max() == share.max()
    values, counts = np.unique(batch, return_counts=True)
    shared, in_share = np.unique(share, return_counts=True)
    assert (counts[np.searchsorted(values, shared)] >= in_share).all()  # every row of the share is trained
    assert len(values) > 2 * len(shared)  # the rest lies between the share's lengths, not on them
    assert batch.mean() == pytest.approx(share.mean(), rel=0.05)


def _update_seconds_per_token(path):
    """The trainer's update of a batch of sequence lengths on the scenario's actor, per token (PhaseCosts)."""
    costs = PhaseCosts(_resolved(path))
    return lambda lens: costs.phase_time("update_actor", "actor", lens) / lens.sum()


def test_an_asynchronous_share_keeps_its_finishing_order_piece_by_piece():
    """An asynchronous batch comes in finishing order, short sequences first, and the trainer cuts it into
    contiguous mini-batches: shuffled whole it trains ~2% slower (in-flight updates, 2,048 sequences on 8 H800).
    A 1/2 share made whole in four pieces, each resampled from itself and kept in place, costs what the batch in
    its own order does; shuffled whole, it does not."""
    per_token = _update_seconds_per_token(SCENARIOS / "async" / "inflight-updates.yaml")
    rng = np.random.default_rng(0)
    n, group = 2048, 16
    in_pieces, shuffled = [], []
    for _ in range(6):
        response = np.minimum(np.rint(rng.lognormal(np.log(8000) - 0.32, 0.8, n)), 27648)
        lens = (response + rng.integers(64, 1025, n)).astype(np.int64)
        in_order = lens[np.argsort(np.log(lens) + rng.normal(0, 1.0, n))]  # finishing order: short first, loosely
        whole = per_token(in_order)
        for _ in range(3):
            keep = np.sort(rng.choice(n // group, n // group // 2, replace=False))  # the share's groups, in order
            share = in_order.reshape(-1, group)[keep].ravel()
            batch = aggregate.TrainerBatch(2, rng, segments=4)(share)
            assert len(batch) == n and batch[: n // 4].mean() < batch[-n // 4:].mean()
            in_pieces.append(per_token(batch) / whole)
            shuffled.append(per_token(aggregate.TrainerBatch(2, rng)(share)) / whole)
    assert np.mean(in_pieces) == pytest.approx(1.0, abs=0.01)
    assert np.mean(shuffled) > 1.02


@pytest.mark.slow  # 36 update passes of 16,384 sequences over 256 ranks
def test_an_asynchronous_share_resampled_prices_its_update_like_the_full_batch():
    """A 1/64 share of agentic trajectories (lengths capped by the context) made whole by TrainerBatch: its update
    over 256 balanced ranks costs what the full batch's does per token. Drawn with replacement instead, each
    length comes ~64 times and the balanced deal evens the ranks out better than distinct lengths can: ~2% fast
    (ASearcher 7B at 1,024 GPUs, its exact run's own batches: -3.5% against -0.9% interpolated)."""
    per_token = _update_seconds_per_token(SCENARIOS / "scale" / "asearcher-7b-1024.yaml")
    rng = np.random.default_rng(0)
    f, n = 64, 256
    interpolated, with_replacement = [], []
    for _ in range(6):
        turns = np.clip(np.rint(rng.lognormal(np.log(6.5), 0.8, f * n)), 1, 32)
        full = np.minimum(400 + np.rint(turns * rng.uniform(900, 2500, f * n)), 32768).astype(np.int64)
        whole = np.mean([per_token(rng.permutation(full)) for _ in range(3)])
        for _ in range(6):
            share = rng.choice(full, n, replace=False)
            interpolated.append(per_token(aggregate.TrainerBatch(f, rng)(share)) / whole)
            repeated = np.concatenate([share, rng.choice(share, (f - 1) * n)])
            with_replacement.append(per_token(rng.permutation(repeated)) / whole)
    assert np.mean(interpolated) == pytest.approx(1.0, abs=0.01)
    assert np.mean(with_replacement) < 0.99


def test_stratified_turns_keep_the_law_and_steady_the_share():
    """A share's planned turns drawn as one of every f of the fleet's by rank: each draw still has the law's
    distribution, and a step's mean turns varies as the fleet's does, not as 1/f as many draws' would."""
    scn = load_scenario(SCENARIOS / "agentic" / "asearcher-7b.yaml")
    law = scn.workload.agent.turns
    rng = np.random.default_rng(0)

    def draw(n, step):
        return law.sample_groups(rng, n, 1, step)

    f, n = 64, 256
    stratified = aggregate.StratifiedDraws(draw, f, rng, n)
    steps = [stratified(n, step) for step in range(200)]
    plain = [draw(n, 0) for _ in range(200)]
    pooled = np.concatenate(steps)
    assert pooled.mean() == pytest.approx(np.concatenate(plain).mean(), rel=0.02)
    assert np.quantile(pooled, 0.99) == pytest.approx(np.quantile(np.concatenate(plain), 0.99), abs=1)
    assert np.std([s.mean() for s in steps]) < 0.3 * np.std([p.mean() for p in plain])
    # served a group at a time within a version; a new version starts a new block
    again = aggregate.StratifiedDraws(draw, f, rng, n)
    groups = [again(16, 0) for _ in range(16)]
    assert len(again.pool) == 0 and np.concatenate(groups).std() > 0
    again(16, 0), again(16, 1)
    assert len(again.pool) == n - 16


def test_tail_subsample_spreads_capped_groups_over_engines_as_the_full_batch_does():
    """Groups tied at the cap are picked in random order: picked in drawn order, every f-th of them would
    land evenly over the engines' chunks and every simulated engine would hold a capped sequence."""
    scn = load_scenario(SCENARIOS / "hybridflow" / "verl-generation-flat.yaml")
    cap = scn.workload.response_length.max
    full, share = [], []
    for seed in range(30):
        _, response = LengthSampler(scn.workload, np.random.default_rng(seed))(2048, 8, 0)
        full.append((response.reshape(128, 128).max(axis=1) >= cap).mean())  # 128 engines x 16 groups
        sub = aggregate.TailSubsample(LengthSampler(scn.workload, np.random.default_rng(seed)), 8,
                                      np.random.default_rng(100 + seed))
        _, response = sub(256, 8, 0)
        share.append((response.reshape(16, 128).max(axis=1) >= cap).mean())  # the 16 simulated engines
    assert 0.7 < np.mean(full) < 0.95  # most engines, not all, hold a capped sequence
    assert np.mean(share) == pytest.approx(np.mean(full), abs=0.05)


def _extensions(draw, k=64, factor=8, trials=200):
    from types import SimpleNamespace

    out = []
    for _ in range(trials):
        finish = draw(k)
        reqs = [SimpleNamespace(engine=f"e{i}", finished_s=t, max_new_tokens=100) for i, t in enumerate(finish)]
        reqs.append(SimpleNamespace(engine="long", finished_s=90.0, max_new_tokens=200))  # the longest, done early
        out.append(aggregate.tail_extension(reqs, 0.0, k + 1, factor))
    return np.array(out)


def test_tail_extension_extrapolates_the_slowest_engine_to_all_engines():
    from types import SimpleNamespace

    rng = np.random.default_rng(0)
    k, factor, scale = 64, 8, 5.0
    # exponential tail: E[max of 519] - E[max of 64] = scale x (H(519) - H(64)) (the shape estimate is clamped
    # to <= 0, so noise only ever makes the tail look bounded: the estimate is on the low side)
    expected = scale * float(np.sum(1.0 / np.arange(k + 1, (k + 1) * factor)))
    ext = _extensions(lambda n: 100 + rng.exponential(scale, n), k, factor)
    assert 0.6 * expected < ext.mean() < 1.1 * expected
    # a bounded tail (uniform finishing times up to 110 s): the slowest of 519 is 0.13 s later than of 64
    bounded = _extensions(lambda n: rng.uniform(100, 110, n), k, factor)
    assert bounded.mean() < 0.5 and bounded.mean() < 0.1 * ext.mean()
    one = [SimpleNamespace(engine="e0", finished_s=3.0, max_new_tokens=5)]
    assert aggregate.tail_extension(one, 0.0, 1, 8) == 0.0  # too few engines to say anything


@pytest.mark.slow  # over 2 s alone: the slow layer (CI runs it)
def test_aggregate_agrees_with_exact_on_an_agentic_fully_async_run():
    """Tool-calling trajectories, fully asynchronous: 6 of 12 engines, the tool pool halved; two seeds."""
    path = SCENARIOS / "agentic" / "tool-latency-base.yaml"
    figures = {}
    for mode in ("exact", "aggregate"):
        runs = [simulate(load_scenario(path, ["steps=3", "simulation.engines=4", f"simulation.mode={mode}",
                                              f"seed={seed}"])) for seed in range(2)]
        assert runs[0].meta["simulation_mode"] == mode
        figures[mode] = {k: np.mean([r.summary[k] for r in runs])
                         for k in ("throughput_tokens_per_s", "step_time_s", "staleness_mean")}
        figures[mode]["idle"] = np.mean([r.summary["idle_fraction_by_pool"]["gen"] for r in runs])
        figures[mode]["calls"] = np.mean([r.tools["calls"].sum() for r in runs])
    e, a = figures["exact"], figures["aggregate"]
    assert a["throughput_tokens_per_s"] == pytest.approx(e["throughput_tokens_per_s"], rel=0.04)
    assert a["step_time_s"] == pytest.approx(e["step_time_s"], rel=0.05)
    assert a["staleness_mean"] == pytest.approx(e["staleness_mean"], rel=0.05)
    assert a["idle"] == pytest.approx(e["idle"], abs=0.03)
    assert a["calls"] == pytest.approx(e["calls"], rel=0.05)  # tool calls scaled back to the whole fleet
