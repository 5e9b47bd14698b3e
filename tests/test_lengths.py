"""Response-length shapes: truncation mass, group correlation, wrong answers, drift, trace replay."""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import rlsim
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import parse_scenario
from rlsim.sim.scenario.schema import (
    EmpiricalLength,
    FixedLength,
    LognormalLength,
    UniformLength,
    WorkloadSpec,
)
from rlsim.sim.workload import (
    LengthSampler,
    sample_group_lengths,
)
from rlsim.tools.cli import app

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
N = NormalDist()


def lognormal(**kw) -> LognormalLength:
    return LognormalLength(**({"kind": "lognormal", "mean": 2000.0, "sigma": 0.5, "max": 10**7} | kw))


def workload(response: dict | None = None, **kw) -> WorkloadSpec:
    data = {"prompt_length": {"kind": "uniform", "min": 10, "max": 500}}
    if response is not None:
        data["response_length"] = response
    return WorkloadSpec.model_validate(data | kw)


# ---------------------------------------------------------------- the default path is today's


def _old_sample_lengths(dist, n, rng):
    """rlsim.sim.workload.sample_lengths as it was before the shape options (copied verbatim)."""
    if isinstance(dist, FixedLength):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.min, dist.max, size=n, endpoint=True, dtype=np.int64)
    if isinstance(dist, LognormalLength):
        mu = np.log(dist.mean) - dist.sigma**2 / 2.0
        x = rng.lognormal(mu, dist.sigma, size=n)
        return np.clip(np.rint(x), dist.min, dist.max).astype(np.int64)
    if isinstance(dist, EmpiricalLength):
        x = rng.choice(pd.read_csv(dist.path)[dist.column].to_numpy().astype(np.int64), size=n, replace=True)
        if dist.max is not None:
            x = np.minimum(x, dist.max)
        return np.maximum(x, 1).astype(np.int64)
    raise TypeError


def test_default_path_is_bit_identical_to_the_old_sampling(tmp_path):
    csv = tmp_path / "lens.csv"
    csv.write_text("length\n" + "\n".join(str(v) for v in (5, 900, 1200, 40000)) + "\n")
    responses = [
        {"kind": "fixed", "value": 700},
        {"kind": "uniform", "min": 3, "max": 9000},
        {"kind": "lognormal", "mean": 1500, "sigma": 0.8, "max": 4096},
        {"kind": "empirical", "path": str(csv), "max": 30000},
    ]
    for response in responses:
        wl = workload(response)
        for seed in (0, 7):
            new, old = np.random.default_rng(seed), np.random.default_rng(seed)
            for step in range(3):  # successive steps share one generator: the stream stays aligned
                p, r = sample_group_lengths(wl, 32, 8, step, new)
                p_old = np.repeat(_old_sample_lengths(wl.prompt_length, 32, old), 8)
                r_old = _old_sample_lengths(wl.response_length, 32 * 8, old)
                assert np.array_equal(p, p_old) and np.array_equal(r, r_old)
                assert p.dtype == r.dtype == np.int64
            assert np.array_equal(wl.response_length.sample(new, 50), _old_sample_lengths(
                wl.response_length, 50, old))


def test_sample_lognormal_reports_no_wrong_answers_without_wrong_fraction():
    lengths, wrong = lognormal().sample_shaped(np.random.default_rng(0), 10, 4, 0)
    assert lengths.shape == wrong.shape == (40,) and not wrong.any()


# ---------------------------------------------------------------- truncation at the cap


def test_truncated_fraction_sets_the_mass_at_the_cap_and_the_body_lies_below():
    n, f, cap = 40_000, 0.05, 4096
    dist = lognormal(mean=1500.0, sigma=0.8, max=cap, truncated_fraction=f)
    x = dist.sample(np.random.default_rng(1), n)
    hit = x == cap
    assert abs(hit.mean() - f) < 4 * math.sqrt(f * (1 - f) / n)
    body = x[~hit]
    assert body.max() < cap and body.min() >= 1
    # The body is the lognormal conditioned to < cap: P(body <= q) = F(q) / F(cap).
    mu = math.log(1500.0) - 0.8**2 / 2
    for q in (500, 1500, 3000):
        want = N.cdf((math.log(q + 0.5) - mu) / 0.8) / N.cdf((math.log(cap) - mu) / 0.8)
        assert abs((body <= q).mean() - want) < 0.01, q
    # Without truncated_fraction the law is clipped: ~4.8% at the cap for these parameters, not 1%.
    clipped = lognormal(mean=1500.0, sigma=0.8, max=cap).sample(np.random.default_rng(1), n)
    assert abs((clipped == cap).mean() - (1 - N.cdf((math.log(cap) - mu) / 0.8))) < 0.005
    one = lognormal(mean=1500.0, sigma=0.8, max=cap, truncated_fraction=0.01).sample(np.random.default_rng(1), n)
    assert abs((one == cap).mean() - 0.01) < 0.003


def test_truncated_fraction_zero_puts_nothing_at_the_cap():
    x = lognormal(mean=3000.0, sigma=1.0, max=4096, truncated_fraction=0.0).sample(np.random.default_rng(2), 20_000)
    assert x.max() < 4096


def test_truncated_fraction_needs_room_below_the_cap():
    with pytest.raises(ValueError, match="truncated_fraction needs max > min"):
        lognormal(min=100, max=100, truncated_fraction=0.1)


# ---------------------------------------------------------------- a difficulty shared by a group


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.8, 1.0])
def test_group_correlation_keeps_the_marginal_and_correlates_log_lengths_within_a_group(rho):
    groups, k = 20_000, 4
    x = sample_group_lengths(workload(lognormal(group_correlation=rho).model_dump()), groups, k, 0,
                             np.random.default_rng(3))[1]
    logs = np.log(x).reshape(groups, k)
    assert abs(x.mean() / 2000.0 - 1) < 0.02  # the marginal mean is unchanged
    assert abs(logs.std() - 0.5) < 0.01
    r = np.corrcoef(logs[:, 0], logs[:, 1])[0, 1] if rho < 1 else 1.0
    assert abs(r - rho) < 0.03
    if rho == 1.0:
        assert (logs == logs[:, :1]).all()  # one difficulty, one length, per group


def test_group_correlation_truncates_hard_groups_together():
    groups, k = 5_000, 8
    dist = lognormal(mean=1500.0, sigma=0.8, max=4096, truncated_fraction=0.05, group_correlation=0.8)
    x = sample_group_lengths(workload(dist.model_dump()), groups, k, 0, np.random.default_rng(4))[1]
    hits = (x == 4096).reshape(groups, k).sum(axis=1)
    assert abs(hits.mean() / k - 0.05) < 0.01
    # Independent truncation would leave ~1/3 of groups with a truncated answer; correlated, far fewer.
    assert (hits > 0).mean() < 0.6 * (1 - 0.95**k)


# ---------------------------------------------------------------- wrong answers run longer


def test_wrong_answers_are_longer_and_the_overall_mean_stays():
    dist = lognormal(wrong_fraction=0.4, wrong_length_ratio=3.0, sigma=0.4)
    x, wrong = dist.sample_shaped(np.random.default_rng(5), 50_000, 1, 0)
    assert abs(wrong.mean() - 0.4) < 0.01
    assert abs(x[wrong].mean() / x[~wrong].mean() - 3.0) < 0.06
    assert abs(x.mean() / 2000.0 - 1) < 0.01
    # Right answers: 2000 / (0.6 + 0.4 * 3) = 1111 tokens on average.
    assert abs(x[~wrong].mean() - 2000 / 1.8) < 15


def test_wrong_answers_take_most_of_the_truncation():
    dist = lognormal(mean=1500.0, sigma=0.6, max=6000, wrong_fraction=0.3, wrong_length_ratio=3.0,
                     truncated_fraction=0.05)
    x, wrong = dist.sample_shaped(np.random.default_rng(6), 40_000, 1, 0)
    hit = x == 6000
    assert abs(hit.mean() - 0.05) < 0.005
    assert wrong[hit].mean() > 0.9 and x[~hit].max() < 6000


# ---------------------------------------------------------------- a mean that drifts over steps


AREAL_STAGES = [  # AReaL v0.1: 8k stage 5.7k -> 4.1k, ~6.2k at the end of the 16k stage, ~7.1k in the 24k stage
    {"from_step": 0, "mean": 5700, "to_mean": 4100, "steps": 100, "max": 8192},
    {"from_step": 150, "mean": 6200, "max": 16384},
    {"from_step": 250, "mean": 7100, "max": 24576},
]


def test_stage_at_interpolates_within_a_stage_and_holds_after_the_ramp():
    dist = lognormal(mean=1000.0, max=4096, mean_schedule=AREAL_STAGES)
    assert dist.stage_at(0) == (5700, 8192)
    assert dist.stage_at(50) == (4900, 8192)
    assert dist.stage_at(120) == (4100, 8192)
    assert dist.stage_at(150) == (6200, 16384)
    assert dist.stage_at(10**6) == (7100, 24576)
    late = lognormal(mean=1000.0, max=4096, mean_schedule=[{"from_step": 10, "mean": 3000}])
    assert late.stage_at(9) == (1000, 4096) and late.stage_at(10) == (3000, 4096)
    assert dist.maximum() == 24576 and late.maximum() == 4096


def test_per_step_mean_follows_the_schedule():
    wl = workload(lognormal(sigma=0.15, max=8192, mean_schedule=AREAL_STAGES).model_dump())
    rng = np.random.default_rng(7)
    for step, want in ((0, 5700), (50, 4900), (100, 4100), (200, 6200), (300, 7100)):
        r = sample_group_lengths(wl, 512, 8, step, rng)[1]
        assert abs(r.mean() / want - 1) < 0.02, step
    wide = workload(lognormal(sigma=1.5, max=8192, mean_schedule=AREAL_STAGES).model_dump())
    assert sample_group_lengths(wide, 512, 8, 10, rng)[1].max() == 8192
    assert sample_group_lengths(wide, 512, 8, 200, rng)[1].max() == 16384


def test_mean_schedule_is_validated():
    with pytest.raises(ValueError, match="to_mean and steps go together"):
        lognormal(mean_schedule=[{"from_step": 0, "mean": 10, "to_mean": 5}])
    with pytest.raises(ValueError, match="from_step must increase"):
        lognormal(mean_schedule=[{"from_step": 5, "mean": 10}, {"from_step": 5, "mean": 20}])


def test_stage_maxima_reach_the_memory_checks():
    res = CliRunner().invoke(app, ["validate", str(QUICKSTART), "--set",
                                   "workload.response_length.mean_schedule=[{from_step: 5, mean: 2000, max: 2000000}]"])
    assert res.exit_code == 2 and "max response 2000000" in res.output


def test_per_group_shapes_are_refused_outside_response_length():
    with pytest.raises(ValueError, match="prompt_length: group_correlation, wrong_fraction and mean_schedule"):
        WorkloadSpec.model_validate({"prompt_length": lognormal(group_correlation=0.5).model_dump(),
                                     "response_length": {"kind": "fixed", "value": 3}})
    # truncation alone is an i.i.d. law: fine anywhere
    WorkloadSpec.model_validate({"prompt_length": lognormal(max=100, truncated_fraction=0.1).model_dump(),
                                 "response_length": {"kind": "fixed", "value": 3}})


# ---------------------------------------------------------------- paired replay of a length trace


PAIRS = [(120, 900), (64, 20000), (300, 7), (1024, 4096), (77, 1500)]


def _write_trace(path: Path, vidur: bool = False) -> Path:
    if vidur:
        rows = [f"{0.5 * i},{p},{r}" for i, (p, r) in enumerate(PAIRS)]
        path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "\n".join(rows) + "\n")
    else:
        path.write_text("prompt_len,response_len\n" + "\n".join(f"{p},{r}" for p, r in PAIRS) + "\n")
    return path


@pytest.mark.parametrize("vidur", [False, True])
def test_sequential_trace_replays_pairs_in_order_cycling(tmp_path, vidur):
    trace = _write_trace(tmp_path / "t.csv", vidur)
    wl = WorkloadSpec.model_validate({"length_trace": {"path": str(trace)}})
    sampler = LengthSampler(wl, np.random.default_rng(0))
    p1, r1 = sampler(2, 2, 0)
    p2, r2 = sampler(1, 3, 1)
    got = list(zip(np.concatenate([p1, p2]).tolist(), np.concatenate([r1, r2]).tolist(), strict=True))
    assert got == PAIRS + PAIRS[:2]


def test_shuffled_trace_draws_real_pairs_deterministically(tmp_path):
    wl = WorkloadSpec.model_validate({"length_trace": {"path": str(_write_trace(tmp_path / "t.csv")),
                                                       "order": "shuffle"}})

    def draw(seed):
        p, r = sample_group_lengths(wl, 50, 4, 0, np.random.default_rng(seed))
        return list(zip(p.tolist(), r.tolist(), strict=True))

    a = draw(3)
    assert a == draw(3) and a != draw(4)
    assert set(a) <= set(PAIRS) and len(set(a)) == len(PAIRS)


def _trace_scenario(tmp_path: Path, trace: str, **workload) -> Path:
    data = yaml.safe_load(QUICKSTART.read_text())
    data["workload"] = {"length_trace": {"path": trace}} | workload
    path = tmp_path / "scn.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "file not found: {csv}"),
        ("prompt_len,response\n1,2\n", "{csv}: needs columns prompt_len,response_len (or Vidur's "
         "num_prefill_tokens,num_decode_tokens), has: prompt_len, response"),
        ("", "{csv}: needs columns prompt_len,response_len"),
        ("prompt_len,response_len\n", "no rows in {csv}"),
        ("prompt_len,response_len\n10,20\n10,2.5\n", "{csv} line 3: expected a positive integer in column "
         "'response_len', got '2.5'"),
        ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,-3,5\n1,x,5\n", "{csv} line 2: expected a positive "
         "integer in column 'num_prefill_tokens', got '-3' (2 bad values)"),
    ],
)
def test_bad_trace_csv_is_one_line_and_exit_2(tmp_path, content, message):
    csv = tmp_path / "trace.csv"
    if content is not None:
        csv.write_text(content)
    res = CliRunner().invoke(app, ["validate", str(_trace_scenario(tmp_path, "trace.csv"))])
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.output
    assert lines[0].startswith(f"{tmp_path / 'scn.yaml'}: workload.length_trace.path: ")
    assert message.format(csv=csv) in lines[0]


def test_trace_with_a_byte_order_mark_validates(tmp_path):
    (tmp_path / "trace.csv").write_bytes(b"\xef\xbb\xbfprompt_len,response_len\r\n100,200\r\n")
    res = CliRunner().invoke(app, ["validate", str(_trace_scenario(tmp_path, "trace.csv"))])
    assert res.exit_code == 0, res.output


def test_a_trace_refuses_contradicting_length_settings(tmp_path):
    _write_trace(tmp_path / "t.csv")
    base = yaml.safe_load(QUICKSTART.read_text())
    base["workload"] = {"length_trace": {"path": "t.csv"}, "response_length": {"kind": "fixed", "value": 3}}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(base, "s.yaml", base_dir=tmp_path)
    assert info.value.lines() == [
        "s.yaml: workload: length_trace sets prompt and response lengths as pairs: remove response_length"
    ]
    base["workload"] = {"prompt_length": {"kind": "fixed", "value": 3}}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(base, "s.yaml", base_dir=tmp_path)
    assert info.value.lines() == ["s.yaml: workload: response_length required (or a length_trace)"]


# ---------------------------------------------------------------- determinism and invariants


def test_same_seed_same_lengths_with_every_shape():
    dist = lognormal(mean=1500.0, sigma=0.9, max=8192, truncated_fraction=0.04, group_correlation=0.6,
                     wrong_fraction=0.3, wrong_length_ratio=3.0, mean_schedule=[{"from_step": 2, "mean": 3000}])
    wl = workload(dist.model_dump())
    a = [sample_group_lengths(wl, 64, 8, s, np.random.default_rng(11)) for s in range(4)]
    b = [sample_group_lengths(wl, 64, 8, s, np.random.default_rng(11)) for s in range(4)]
    assert all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b, strict=True))
    c = sample_group_lengths(wl, 64, 8, 0, np.random.default_rng(12))
    assert not np.array_equal(a[0][1], c[1])


@settings(max_examples=60, deadline=None)
@given(
    rho=st.sampled_from([0.0, 0.5, 1.0]),
    f=st.sampled_from([None, 0.0, 0.1, 0.6]),
    w=st.sampled_from([0.0, 0.3, 1.0]),
    ratio=st.floats(0.2, 5.0),
    sigma=st.floats(0.05, 2.5),
    mean=st.floats(10.0, 50_000.0),
    lo=st.integers(1, 50),
    span=st.integers(1, 30_000),
    groups=st.integers(1, 12),
    k=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
)
def test_lengths_stay_in_bounds_and_groups_are_contiguous(rho, f, w, ratio, sigma, mean, lo, span, groups, k, seed):
    dist = LognormalLength(kind="lognormal", mean=mean, sigma=sigma, min=lo, max=lo + span, truncated_fraction=f,
                           group_correlation=rho, wrong_fraction=w, wrong_length_ratio=ratio)
    p, r = sample_group_lengths(workload(dist.model_dump()), groups, k, 0, np.random.default_rng(seed))
    assert p.shape == r.shape == (groups * k,)
    assert r.min() >= lo and r.max() <= lo + span
    assert (p.reshape(groups, k) == p.reshape(groups, k)[:, :1]).all()  # one prompt per contiguous group
    if f is not None:
        assert (r[r != lo + span] < lo + span).all()
    if rho == 1.0 and w in (0.0, 1.0) and f is None:  # one difficulty per group: one length per group
        assert (r.reshape(groups, k) == r.reshape(groups, k)[:, :1]).all()


# ---------------------------------------------------------------- end to end through the schedules


def _gen_times(*overrides: str, steps: int = 3) -> pd.Series:
    scn = rlsim.load_scenario(QUICKSTART, overrides=[f"steps={steps}", "algorithm.prompts_per_step=16",
                                                     *overrides])
    return rlsim.simulate(scn).steps["timing_s/gen"]


def test_truncated_answers_lengthen_a_synchronous_step():
    """Without a truncation mass the batch never reaches the 4096 cap (sigma 0.3); 5% at the cap sets the step."""
    tight = ["workload.response_length.sigma=0.3", "workload.response_length.mean=1000"]
    plain = _gen_times(*tight)
    capped = _gen_times(*tight, "workload.response_length.truncated_fraction=0.05")
    assert (capped > 1.5 * plain).all()


def test_group_correlation_shortens_the_mean_step_and_widens_its_spread():
    """The step waits for the batch's longest answer; a shared difficulty leaves fewer independent draws
    (16 prompts instead of 128 answers), so the expected maximum falls while step-to-step spread grows."""
    shape = ["workload.response_length.sigma=0.6", "workload.response_length.mean=1000",
             "workload.response_length.max=16384"]
    iid = _gen_times(*shape, steps=30)
    corr = _gen_times(*shape, "workload.response_length.group_correlation=0.9", steps=30)
    assert corr.mean() < 0.9 * iid.mean()
    assert corr.std() / corr.mean() > 1.1 * iid.std() / iid.mean()


def test_generation_only_and_fully_async_replay_the_trace(tmp_path):
    trace = _write_trace(tmp_path / "t.csv")
    wl = ["workload.prompt_length=null", "workload.response_length=null", f"workload.length_trace={{path: {trace}}}"]
    gen = rlsim.load_scenario(QUICKSTART, overrides=[
        "steps=2", "algorithm.prompts_per_step=2", "algorithm.samples_per_prompt=5", "algorithm.mini_batches=1",
        *wl])
    steps = rlsim.simulate(gen).steps
    assert steps["response_length/max"].tolist() == [20000, 20000]
    assert steps["response_length/mean"].tolist() == [np.mean([r for _, r in PAIRS])] * 2
    scn = rlsim.load_scenario(ROOT / "scenarios" / "async" / "areal-1.5b-h800.yaml", overrides=[
        "steps=2", "warmup_steps=0", "algorithm.prompts_per_step=4", "algorithm.samples_per_prompt=3", *wl])
    samples = rlsim.simulate(scn).samples
    done = samples[samples["finished_s"].notna()]
    assert len(done) >= 12
    for sid, p, r in done[["sample_id", "prompt_tokens", "response_tokens"]].itertuples(index=False):
        assert (p, r) == PAIRS[sid % len(PAIRS)]


def test_fully_async_drift_follows_the_policy_version():
    """Groups launched under policy versions 0-1 draw mean 500, from version 2 on mean 3000."""
    scn = rlsim.load_scenario(ROOT / "scenarios" / "async" / "areal-1.5b-h800.yaml", overrides=[
        "steps=4", "warmup_steps=0", "algorithm.prompts_per_step=8", "algorithm.samples_per_prompt=4",
        "schedule.max_head_offpolicyness=0", "workload.response_length.sigma=0.2",
        "workload.response_length.mean_schedule=[{from_step: 0, mean: 500}, {from_step: 2, mean: 3000}]"])
    samples = rlsim.simulate(scn).samples
    done = samples[samples["finished_s"].notna()]
    short, long = done[done["response_tokens"] < 1500], done[done["response_tokens"] >= 1500]
    assert len(short) and len(long)
    assert short["sample_id"].max() < long["sample_id"].min()  # sample ids follow the launch order
