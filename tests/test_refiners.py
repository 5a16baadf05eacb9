"""Refinements applied to any method (local, ils) and the `auto` portfolio."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import microagg
import naive
from microagg.pipeline import methods
from microagg.pipeline.methods import AUTO_PORTFOLIO, METHODS, REFINERS, iterated_local_search, run_method
from synthetic import clustered

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


def test_auto_races_its_portfolio_over_the_blocks_of_a_task(monkeypatch):
    """The race's rule, on made-up SSEs: the first four blocks and every sixteenth try every member;
    a member within 1 % of such a block's best stays in the race; the other blocks try only those."""
    members = len(AUTO_PORTFOLIO)
    dba, nc, cbfs_nc = 9, 1, 4
    tried = []

    def fake(Z, k, flags):
        block = len(tried)
        tried.append(set(np.flatnonzero(flags)))
        sse = np.full(members, 2.0)
        sse[dba] = 1.0
        if block == 2:
            sse[nc] = 1.009  # within 1 % of the best: kept
            sse[cbfs_nc] = 1.011  # not within
        if block == 16:
            sse[cbfs_nc] = 0.5  # a reprobe's best
        if block == 20:
            sse[nc] = 0.9  # beats the others, but this block is no probe
        return np.zeros(len(Z), dtype=np.int64), np.where(flags, sse, np.inf)

    monkeypatch.setattr(methods, "auto_members", fake)
    race = methods.Race()
    for _ in range(40):
        race.partition(np.zeros((6, 2)), 3)
    every = set(range(members))
    for block, flags in enumerate(tried):
        if block < 4 or block in (16, 32):
            assert flags == every, block
        elif block < 16:
            assert flags == {dba, nc}, block
        else:  # the sixteenth block's best joins, and no member leaves
            assert flags == {dba, nc, cbfs_nc}, block


def test_auto_raced_over_blocks_keeps_the_full_portfolio_s_loss_with_fewer_runs(monkeypatch):
    """On an input cut into blocks, ``auto``'s race runs far fewer members than the full portfolio
    for about the same loss (every group still of k or more); one block alone tries every member."""
    X = clustered(12_000, d=5, seed=4)
    Z, _, _ = microagg.standardize(X)
    runs = []
    counted = methods.run_method

    def counting(method, Z, k, options=None):
        runs.append(method.name)
        return counted(method, Z, k, options)

    monkeypatch.setattr(methods, "run_method", counting)
    loss, count = {}, {}
    for portfolio in ("race", "full"):
        runs.clear()
        labels = microagg.partition(X, 5, "auto", method_options={"portfolio": portfolio}, block_size=500,
                                    one_block_rows=0)
        assert np.bincount(labels).min() >= 5
        loss[portfolio], count[portfolio] = naive.information_loss(X, labels), len(runs)
    assert count["race"] < 0.6 * count["full"]
    assert loss["race"] <= loss["full"] * 1.005
    small = Z[:600]
    one = [microagg.partition(small, 5, "auto", method_options={"portfolio": p}, standardized=True)
           for p in ("race", "full")]
    assert np.array_equal(one[0], one[1])
    with pytest.raises(microagg.InputError, match="portfolio"):
        microagg.partition(small, 5, "auto", method_options={"portfolio": "some"}, standardized=True)


@pytest.mark.parametrize("k, target", [(3, 5.187), (5, 7.872), (10, 12.200)])
def test_auto_with_ils_beats_the_best_known_census_loss(census, k, target):
    """The lowest IL known to us on census (issue 4) is beaten within a few hundred iterations;
    the IL is recomputed here from the partition by definition."""
    X = census.to_numpy(dtype=float)
    labels = microagg.partition(X, k, "auto", refine="ils", refine_options={"iterations": 300})
    sizes = np.bincount(labels)
    assert sizes.min() >= k
    assert naive.information_loss(X, labels) < target
