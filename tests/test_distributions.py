"""Length and latency distributions are objects: each draws its own values and knows its bounds and mean.

Checked here: minimum / maximum / expectation against values worked by hand and against the mean of a
large sample; every draw within [minimum, maximum]; and the draws through the classes bit for bit the
numpy (or rlsim/sim/sampling.py) calls they replaced.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsim.sim.sampling import lognormal_sampler, uniform_sampler
from rlsim.sim.scenario.schema import (
    EmpiricalLength,
    EmpiricalSeconds,
    FixedLength,
    FixedSeconds,
    LognormalLength,
    LognormalSeconds,
    UniformLength,
    UniformSeconds,
)

N = 400_000


def _sample_mean_close(dist, n: int = N, seed: int = 0, sigmas: float = 5.0) -> tuple[float, float]:
    """(expectation, sample mean), asserting they agree within `sigmas` standard errors (+ half a token)."""
    x = np.asarray(dist.sample(np.random.default_rng(seed), n), dtype=float)
    assert x.min() >= dist.minimum() and x.max() <= dist.maximum()
    err = sigmas * x.std() / math.sqrt(n) + 0.5
    assert abs(x.mean() - dist.expectation()) <= err, (x.mean(), dist.expectation())
    return dist.expectation(), float(x.mean())


# ---------------------------------------------------------------- lengths: known values


def test_fixed_and_uniform_lengths_known_values():
    fixed = FixedLength(kind="fixed", value=7)
    assert (fixed.minimum(), fixed.maximum(), fixed.expectation()) == (7, 7, 7.0)
    uni = UniformLength(kind="uniform", min=10, max=21)
    assert (uni.minimum(), uni.maximum(), uni.expectation()) == (10, 21, 15.5)
    _sample_mean_close(uni)
    assert fixed.sample(np.random.default_rng(0), 3).tolist() == [7, 7, 7]


def test_plain_lognormal_length_mean_is_its_mean_far_below_the_cap():
    """With the cap far in the tail the clipped mean is the law's own `mean` (rounding aside)."""
    dist = LognormalLength(kind="lognormal", mean=2000.0, sigma=0.5, max=10**6)
    assert (dist.minimum(), dist.maximum()) == (1, 10**6)
    assert dist.expectation() == pytest.approx(2000.0, rel=1e-6)
    _sample_mean_close(dist)


def test_clipped_lognormal_length_mean_loses_the_tail():
    """max_tokens at the median: half the draws sit at the cap, the rest average exp(mu + s^2/2) Phi(-s)/0.5."""
    mean, s = 1000.0, 1.0
    median = math.exp(math.log(mean) - s * s / 2)
    cap = round(median)
    dist = LognormalLength(kind="lognormal", mean=mean, sigma=s, max=cap)
    hand = 0.5 * cap + mean * (0.5 * math.erfc(s / math.sqrt(2)))  # E[X; X < median] = mean * Phi(-s)
    assert dist.expectation() == pytest.approx(hand, rel=1e-3)
    _sample_mean_close(dist)


@pytest.mark.parametrize("shape", [
    {"truncated_fraction": 0.05},
    {"wrong_fraction": 0.3, "wrong_length_ratio": 1.8},
    {"wrong_fraction": 0.3, "wrong_length_ratio": 1.8, "truncated_fraction": 0.02, "min": 50},
    {"group_correlation": 0.6},
    {"mean_schedule": [{"from_step": 0, "mean": 900.0, "max": 3000}, {"from_step": 5, "mean": 4000.0}]},
])
def test_shaped_lognormal_length_mean_matches_a_large_sample(shape):
    dist = LognormalLength(**({"kind": "lognormal", "mean": 1500.0, "sigma": 0.9, "max": 4096} | shape))
    assert dist.maximum() == max(dist.caps())
    _sample_mean_close(dist)


@settings(max_examples=25, deadline=None)
@given(mean=st.floats(5.0, 2e4), sigma=st.floats(0.05, 2.0), cap_ratio=st.floats(0.2, 50.0),
       low=st.integers(1, 20), seed=st.integers(0, 2**31))
def test_lognormal_length_expectation_is_the_sample_mean(mean, sigma, cap_ratio, low, seed):
    cap = max(low, int(mean * cap_ratio))
    dist = LognormalLength(kind="lognormal", mean=mean, sigma=sigma, min=low, max=cap)
    _sample_mean_close(dist, n=100_000, seed=seed)


def test_empirical_length_bounds_and_mean(tmp_path):
    path = tmp_path / "lengths.csv"
    path.write_text("length\n5\n100\n300\n40\n")
    dist = EmpiricalLength(kind="empirical", path=str(path))
    assert (dist.minimum(), dist.maximum(), dist.expectation()) == (5, 300, 111.25)
    capped = EmpiricalLength(kind="empirical", path=str(path), max=50)
    assert (capped.minimum(), capped.maximum(), capped.expectation()) == (5, 50, (5 + 50 + 50 + 40) / 4)
    _sample_mean_close(capped)


# ---------------------------------------------------------------- latencies: known values


def test_fixed_and_uniform_latency_known_values():
    fixed = FixedSeconds(kind="fixed", value=2.5)
    assert (fixed.minimum(), fixed.maximum(), fixed.expectation()) == (2.5, 2.5, 2.5)
    assert (fixed.p_above(2.0), fixed.p_above(2.5)) == (1.0, 0.0)
    uni = UniformSeconds(kind="uniform", min=1.0, max=3.0)
    assert (uni.minimum(), uni.maximum(), uni.expectation()) == (1.0, 3.0, 2.0)
    assert (uni.p_above(0.5), uni.p_above(2.5), uni.p_above(3.0)) == (1.0, 0.25, 0.0)
    _sample_mean_close(uni)


def test_lognormal_latency_mean_median_and_cap():
    dist = LognormalSeconds(kind="lognormal", median=2.97, sigma=0.8)
    assert (dist.minimum(), dist.maximum()) == (0.0, math.inf)
    assert dist.expectation() == pytest.approx(2.97 * math.exp(0.32), rel=1e-12)
    assert dist.p_above(2.97) == pytest.approx(0.5)
    _sample_mean_close(dist)
    capped = LognormalSeconds(kind="lognormal", median=2.97, sigma=0.8, max=2.97)
    # capped at the median: half at the cap, the lower half averages exp(mu + s^2/2) Phi(-s) / 0.5
    hand = 0.5 * 2.97 + 2.97 * math.exp(0.32) * 0.5 * math.erfc(0.8 / math.sqrt(2))
    assert capped.expectation() == pytest.approx(hand, rel=1e-9)
    assert capped.maximum() == 2.97
    _sample_mean_close(capped)
    point = LognormalSeconds(kind="lognormal", median=4.0, sigma=0.0, max=3.0)
    assert (point.minimum(), point.maximum(), point.expectation()) == (3.0, 3.0, 3.0)


def test_lognormal_latency_survival_matches_a_sample():
    dist = LognormalSeconds(kind="lognormal", median=1.0, sigma=1.2, max=20.0)
    x = dist.sample(np.random.default_rng(3), N)
    for t in (0.3, 1.0, 5.0, 19.0, 20.0):
        assert abs((x > t).mean() - dist.p_above(t)) < 0.004, t


def test_empirical_latency_bounds_mean_and_survival(tmp_path):
    path = tmp_path / "lat.csv"
    path.write_text("seconds\n0.5\n1.5\n4.0\n10.0\n")
    dist = EmpiricalSeconds(kind="empirical", path=str(path))
    assert (dist.minimum(), dist.maximum(), dist.expectation()) == (0.5, 10.0, 4.0)
    assert dist.p_above(1.5) == 0.5
    _sample_mean_close(dist)


# ---------------------------------------------------------------- the draws are the old calls, bit for bit


@pytest.mark.parametrize("seed", [0, 11])
def test_length_draws_are_the_numpy_calls_they_replaced(seed, tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("length\n3\n900\n17\n")
    uni = UniformLength(kind="uniform", min=10, max=500)
    logn = LognormalLength(kind="lognormal", mean=700.0, sigma=0.7, min=4, max=2048)
    emp = EmpiricalLength(kind="empirical", path=str(path), max=500)
    a, b = np.random.default_rng(seed), np.random.default_rng(seed)
    for _ in range(20):
        assert np.array_equal(uni.sample(a, 64), b.integers(10, 500, size=64, endpoint=True, dtype=np.int64))
        want = np.clip(np.rint(b.lognormal(np.log(700.0) - 0.7**2 / 2.0, 0.7, size=64)), 4, 2048).astype(np.int64)
        assert np.array_equal(logn.sample(a, 64), want)
        want = np.maximum(np.minimum(b.choice(np.array([3, 900, 17], dtype=np.int64), size=64), 500), 1)
        assert np.array_equal(emp.sample(a, 64), want)
    scalar = logn.sampler()
    law = lognormal_sampler(np.log(700.0) - 0.7**2 / 2.0, 0.7)
    for _ in range(500):
        assert scalar(a) == min(2048, max(4, round(law(b))))
    assert a.random() == b.random()


@pytest.mark.parametrize("seed", [0, 11])
def test_latency_draws_are_the_sampling_module_and_numpy_calls(seed, tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("seconds\n0.25\n7.5\n")
    uni = UniformSeconds(kind="uniform", min=0.5, max=2.0)
    logn = LognormalSeconds(kind="lognormal", median=2.97, sigma=0.5, max=20.0)
    emp = EmpiricalSeconds(kind="empirical", path=str(path))
    a, b = np.random.default_rng(seed), np.random.default_rng(seed)
    one_u, one_l, one_e = uni.sampler(), logn.sampler(), emp.sampler()
    ref_u, ref_l = uniform_sampler(0.5, 2.0), lognormal_sampler(math.log(2.97), 0.5, 20.0)
    for _ in range(500):
        assert one_u(a) == ref_u(b)
        assert one_l(a) == ref_l(b)
        assert one_e(a) == float(b.choice(np.array([0.25, 7.5])))
    assert np.array_equal(uni.sample(a, 50), b.uniform(0.5, 2.0, size=50))
    assert np.array_equal(logn.sample(a, 50), np.minimum(b.lognormal(math.log(2.97), 0.5, size=50), 20.0))
    assert a.random() == b.random()


def test_only_the_response_length_may_be_shaped_per_group():
    assert not FixedLength(kind="fixed", value=3).per_group
    assert not LognormalLength(kind="lognormal", mean=10.0, sigma=0.5, max=100).per_group
    assert LognormalLength(kind="lognormal", mean=10.0, sigma=0.5, max=100, wrong_fraction=0.1).per_group
