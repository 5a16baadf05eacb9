"""Refinements applied to any method (local, ils) and the `auto` portfolio."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import microagg
import naive
from microagg.pipeline.methods import AUTO_PORTFOLIO, METHODS, REFINERS, iterated_local_search, run_method

FAST = settings(max_examples=25, deadline=None)


@st.composite
def blocks(draw):
    k = draw(st.integers(2, 4))
    n = draw(st.integers(2 * k, 50))
    seed = draw(st.integers(0, 2**31 - 1))
    X = np.random.default_rng(seed).normal(size=(n, draw(st.integers(1, 4)))) * draw(st.sampled_from([1.0, 100.0]))
    return np.ascontiguousarray(X), k


@FAST
@given(blocks(), st.sampled_from(["mdav", "vmdav", "dbm"]), st.integers(0, 3))
def test_ils_never_raises_sse_keeps_sizes_and_repeats(case, method, seed):
    X, k = case
    labels = microagg.partition(X, k, method, standardized=True)
    refined = microagg.partition(X, k, method, standardized=True, refine="ils",
                                 refine_options={"iterations": 10, "seed": seed})
    sizes = np.bincount(refined)
    assert sizes.min() >= k and sizes.max() <= max(2 * k - 1, np.bincount(labels).max())
    assert naive.sse(X, refined) <= naive.sse(X, labels) + 1e-9 * max(1.0, naive.sse(X, labels))
    again = microagg.partition(X, k, method, standardized=True, refine="ils",
                               refine_options={"iterations": 10, "seed": seed})
    assert np.array_equal(refined, again)


def test_ils_rounds_and_budget(census):
    Z, _, _ = microagg.standardize(census.to_numpy(dtype=float))
    start = microagg.partition(Z, 3, standardized=True)
    labels, done = iterated_local_search(Z, start, 3, iterations=60, seed=1)
    assert done == 60
    assert naive.sse(Z, labels) < naive.sse(Z, start)
    _, done = iterated_local_search(Z, start, 3, iterations=None, time_budget=0.01, seed=1)
    assert done >= 1
    with pytest.raises(microagg.InputError):
        iterated_local_search(Z, start, 3, iterations=None, time_budget=None)


@pytest.mark.parametrize("k", [3, 5, 10])
def test_auto_is_the_best_of_its_portfolio(census, k):
    Z, _, _ = microagg.standardize(census.to_numpy(dtype=float))
    auto = naive.sse(Z, microagg.partition(Z, k, "auto", standardized=True))
    for name, options in AUTO_PORTFOLIO:
        if name in METHODS and set(options) <= set(METHODS[name].options):
            labels = run_method(METHODS[name], Z, k, options)
            local = REFINERS["local"].refine(Z, labels, k)
            assert auto <= naive.sse(Z, local) + 1e-9


@pytest.mark.parametrize("k, target", [(3, 5.187), (5, 7.872), (10, 12.200)])
def test_auto_with_ils_beats_the_best_known_census_loss(census, k, target):
    """The lowest IL known to us on census (issue 4) is beaten within a few hundred iterations;
    the IL is recomputed here from the partition by definition."""
    X = census.to_numpy(dtype=float)
    labels = microagg.partition(X, k, "auto", refine="ils", refine_options={"iterations": 300})
    sizes = np.bincount(labels)
    assert sizes.min() >= k
    assert naive.information_loss(X, labels) < target
