"""rlsim/sim/sampling.py against numpy's own draws: the same value, bit for bit, and the same stream left after."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rlsim.sim.sampling import lognormal_sampler, uniform_sampler, weighted_index_sampler

seeds = st.integers(0, 2**32 - 1)
finite = st.floats(-50, 50, allow_nan=False)


def _pair(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    return np.random.default_rng(seed), np.random.default_rng(seed)


def _same_stream_after(ours: np.random.Generator, numpys: np.random.Generator) -> None:
    assert ours.bit_generator.state == numpys.bit_generator.state


@given(seeds, st.floats(-5, 5), st.floats(0.01, 3), st.one_of(st.none(), st.floats(0.1, 1e4)), st.integers(1, 5))
def test_lognormal_is_numpys(seed, mu, sigma, cap, draws):
    ours, numpys = _pair(seed)
    sample = lognormal_sampler(mu, sigma, cap)
    for _ in range(draws):
        x = numpys.lognormal(mu, sigma)
        assert sample(ours) == (x if cap is None else min(x, cap))
    _same_stream_after(ours, numpys)


@given(seeds, finite, st.floats(0, 100), st.integers(1, 5))
def test_uniform_is_numpys(seed, low, width, draws):
    ours, numpys = _pair(seed)
    sample = uniform_sampler(low, low + width)
    for _ in range(draws):
        assert sample(ours) == numpys.uniform(low, low + width)
    _same_stream_after(ours, numpys)


@given(seeds, st.lists(st.floats(0, 10), min_size=1, max_size=8).filter(lambda w: sum(w) > 0), st.integers(1, 5))
def test_weighted_index_is_numpys_choice(seed, weights, draws):
    ours, numpys = _pair(seed)
    sample = weighted_index_sampler(weights)
    w = np.asarray(weights, dtype=float)
    for _ in range(draws):
        assert sample(ours) == numpys.choice(len(w), p=w / w.sum())
    _same_stream_after(ours, numpys)


def test_a_different_draw_would_be_caught():
    """The comparison is sharp: numpy's normal is not its lognormal, and one draw moves the stream."""
    ours, numpys = _pair(7)
    assert lognormal_sampler(0.0, 1.0)(ours) != numpys.normal(0.0, 1.0)
    numpys.random()
    assert ours.bit_generator.state != numpys.bit_generator.state
