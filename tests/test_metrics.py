"""The evaluation measures (pipeline/metrics.py, kernels/linkage.py) against the references of naive.py.

Record linkage is compared for exact equality (distances, tie counts, own flags): the kd-tree and the
brute-force matrix compute each distance with the same operations in the same order. Everything else
is compared with tolerances of a few ulps of the data's scale.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import microagg
import naive
from conftest import PUBLISHED_MDAV_IL
from microagg import kernels
from microagg.kernels import linkage
from microagg.pipeline import metrics
from microagg.pipeline.errors import InputError

PROPERTY = settings(deadline=None, max_examples=50)


def c64(X):
    return np.ascontiguousarray(X, dtype=np.float64)


@st.composite
def tie_matrix(draw, min_rows=0, max_rows=40, max_cols=4, values=3):
    """Small-integer ``(n, d)`` data: duplicate rows and equal distances abound."""
    n = draw(st.integers(min_rows, max_rows))
    d = draw(st.integers(1, max_cols))
    return c64(draw(hnp.arrays(np.float64, (n, d), elements=st.integers(0, values - 1).map(float))))


@st.composite
def float_pair(draw, min_rows=2, max_rows=30, max_cols=4):
    """An original and a masked file of the same shape; bounded floats with some exact zeros and
    repeated values (the array strategy's fill value repeats)."""
    n = draw(st.integers(min_rows, max_rows))
    d = draw(st.integers(1, max_cols))
    elements = st.one_of(st.just(0.0), st.floats(-1e3, 1e3, allow_nan=False).map(lambda v: round(v, 3)))
    X = draw(hnp.arrays(np.float64, (n, d), elements=elements))
    Xm = draw(hnp.arrays(np.float64, (n, d), elements=elements))
    return c64(X), c64(Xm)


def standardized(X, Xm):
    """Both files z-scored with the original's exact mean and population std (the public API's)."""
    Z, mean, std = microagg.standardize(X)
    return c64(Z), c64(kernels.standardize(c64(Xm), mean, std))


def assert_links_equal(got, expected):
    best, count, own = expected
    np.testing.assert_array_equal(got.distance, best)
    np.testing.assert_array_equal(got.count, count)
    np.testing.assert_array_equal(got.own, own)


@pytest.fixture(scope="module")
def census_mdav(census):
    """Census quasi-identifiers and their classic MDAV k=3 release (group means)."""
    released = microagg.anonymize(census, 3, method="mdav")
    return c64(census.to_numpy()), c64(released[list(census.columns)].to_numpy())


# --- the kd-tree kernel --------------------------------------------------------------------------


@PROPERTY
@given(Z=tie_matrix(), data=st.data(), leaf_size=st.integers(1, 6))
def test_tree_equals_brute_force_on_ties(Z, data, leaf_size):
    Q = c64(data.draw(hnp.arrays(np.float64, (data.draw(st.integers(0, 40)), Z.shape[1]),
                                 elements=st.integers(0, 2).map(float))))
    tree = metrics.build_link_tree(Z, leaf_size=leaf_size)
    assert sorted(tree.ids.tolist()) == list(range(Z.shape[0]))  # every original exactly once
    assert_links_equal(metrics.query_links(tree, Q), naive.links(Z, Q))


@PROPERTY
@given(pair=float_pair(min_rows=1, max_rows=60), leaf_size=st.sampled_from([1, 3, 32]))
def test_tree_equals_brute_force_on_floats(pair, leaf_size):
    Z, Q = pair
    assert_links_equal(metrics.query_links(metrics.build_link_tree(Z, leaf_size=leaf_size), Q),
                       naive.links(Z, Q))


@PROPERTY
@given(Z=tie_matrix(min_rows=1, values=2))
def test_collapsed_duplicates_count_their_multiplicity(Z):
    distinct, multiplicity = np.unique(Z, axis=0, return_counts=True)
    Q = c64(np.concatenate([Z, Z + 0.5]))
    whole = metrics.query_links(metrics.build_link_tree(Z, leaf_size=2), Q)
    collapsed = metrics.query_links(metrics.build_link_tree(c64(distinct), weights=multiplicity, leaf_size=2), Q)
    np.testing.assert_array_equal(collapsed.distance, whole.distance)
    np.testing.assert_array_equal(collapsed.count, whole.count)


@PROPERTY
@given(Z=tie_matrix(min_rows=1), data=st.data())
def test_a_bound_only_saves_work(Z, data):
    """Searching within ``bound`` gives the plain answer merged with "(bound, 0 originals)"."""
    Q = Z[::-1] + 0.5
    bound = c64(data.draw(hnp.arrays(np.float64, Q.shape[0], elements=st.sampled_from([0.25, 0.5, 1.25, 2.0, np.inf]))))
    tree = metrics.build_link_tree(Z, leaf_size=2)
    plain = metrics.query_links(tree, Q)
    bounded = metrics.query_links(tree, Q, bound=bound)
    capped = metrics.Links(bound, np.zeros(Q.shape[0], dtype=np.int64), np.zeros(Q.shape[0], dtype=bool))
    assert_links_equal(bounded, metrics.combine_links(plain, capped))


@PROPERTY
@given(Z=tie_matrix(min_rows=1, max_rows=30, values=5), data=st.data())
def test_combine_links_over_any_split_equals_one_shot(Z, data):
    n = Z.shape[0]
    Q = c64(np.concatenate([Z, Z[: n // 2] + 0.5]))
    qids = np.arange(Q.shape[0], dtype=np.int64) % n
    block = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    one_shot = metrics.query_links(metrics.build_link_tree(Z), Q, qids)
    merged = metrics.no_links(Q.shape[0])
    for b in range(3):  # empty blocks included
        rows = np.flatnonzero(block == b)
        part = metrics.query_links(metrics.build_link_tree(Z[rows], rows, leaf_size=2), Q, qids)
        merged = metrics.combine_links(part, merged)
    assert_links_equal(merged, one_shot)


def test_routed_blocks_equal_one_shot():
    """What a distributed driver does: blocks of originals (here: a split along one column, so the
    boxes overlap little), each query answered by its home block first, then by every other block
    whose box is not farther than the query's current best; the merged answer is exact."""
    rng = np.random.default_rng(7)
    Z = c64(rng.integers(0, 6, (600, 3)))  # many duplicate rows and exact ties
    Q = c64(np.concatenate([Z, rng.integers(0, 6, (200, 3)) + 0.5]))
    qids = np.arange(Q.shape[0], dtype=np.int64)  # ids >= 600 match no original
    blocks = [np.flatnonzero(Z[:, 0] <= 1), np.flatnonzero((Z[:, 0] > 1) & (Z[:, 0] <= 3)), np.flatnonzero(Z[:, 0] > 3)]
    trees = [metrics.build_link_tree(Z[rows], rows, leaf_size=8) for rows in blocks]
    home = np.minimum(np.floor(Q[:, 0] / 2).astype(int), 2)
    links = metrics.no_links(Q.shape[0])
    for b, tree in enumerate(trees):
        mine = np.flatnonzero(home == b)
        part = metrics.query_links(tree, Q[mine], qids[mine])
        links = metrics.Links(*(np.copy(a) for a in links))
        links.distance[mine], links.count[mine], links.own[mine] = part
    visited = 0
    for b, tree in enumerate(trees):
        lower = metrics.box_lower_bounds(Q, *tree.box)
        route = np.flatnonzero((home != b) & (lower <= links.distance))
        visited += route.size
        part = metrics.query_links(tree, Q[route], qids[route], bound=links.distance[route])
        merged = metrics.combine_links(metrics.Links(*(a[route] for a in links)), part)
        links = metrics.Links(*(np.copy(a) for a in links))
        links.distance[route], links.count[route], links.own[route] = merged
    assert 0 < visited < 2 * Q.shape[0]  # routing skipped some blocks, yet ...
    assert_links_equal(links, naive.links(Z, Q))  # ... the answer is exact


@PROPERTY
@given(P=tie_matrix(min_rows=1, values=7), q=hnp.arrays(np.float64, 4, elements=st.floats(-3, 9, allow_nan=False)))
def test_box_lower_bound_never_exceeds_a_distance(P, q):
    q = c64(q[: P.shape[1]])
    P = c64(P * 0.37 + 0.1)  # inexact values: rounding is exercised
    lo, hi = P.min(axis=0), P.max(axis=0)
    bound = linkage.box_lower_bound(q, lo, hi)
    each = [naive.links(P[i : i + 1], q[None, :])[0][0] for i in range(P.shape[0])]
    assert all(bound <= e for e in each)  # in floating point, for every point of the box
    if ((lo <= q) & (q <= hi)).all():
        assert bound == 0.0
    else:
        assert bound > 0.0


# --- DLD ----------------------------------------------------------------------------------------


def test_dld_of_a_file_against_itself_is_100_percent(census):
    X = census.to_numpy()
    assert len(np.unique(X, axis=0)) == len(X)  # no duplicate records
    assert metrics.dld(X, X) == 100.0
    assert metrics.dld(X, X, columns=[0, 4]) == pytest.approx(naive.dld(X, X, [0, 4]), abs=1e-12)


def test_dld_ties_credit_one_over_t():
    X = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 5.0], [1.0, 5.0], [3.0, 2.0]])
    links = metrics.record_linkage(X, X)
    np.testing.assert_array_equal(links.count, [3, 3, 3, 2, 2, 1])
    assert links.own.all()
    assert metrics.dld(X, X) == pytest.approx(100 * (3 * (1 / 3) + 2 * (1 / 2) + 1) / 6)  # 50%
    # the masked record 5 now sits exactly between originals 3/4 and 5: three at the same distance
    Xm = X.copy()
    Xm[5] = [2.0, 3.5]
    Z, Zm = standardized(X, Xm)
    assert_links_equal(metrics.record_linkage(X, Xm), naive.links(Z, Zm))
    assert metrics.dld(X, Xm) == pytest.approx(naive.dld(X, Xm), abs=1e-12)


def test_dld_on_one_attribute_with_few_values():
    """200000 records, 3 values (an intruder knowing one coarse attribute): each masked record ties
    with every original of its value, so the credits sum to the number of distinct values."""
    X = np.repeat(np.array([[1.0, 0.0], [2.0, 1.0], [5.0, 2.0]]), [100000, 60000, 40000], axis=0)
    X[:, 1] = np.arange(len(X)) % 7
    links = metrics.record_linkage(X, X, columns=[0])
    np.testing.assert_array_equal(np.unique(links.count), [40000, 60000, 100000])
    assert links.own.all() and (links.distance == 0).all()
    assert metrics.dld(X, X, columns=[0]) == pytest.approx(100 * 3 / len(X))
    assert metrics.dld(X, X) == pytest.approx(100 * 21 / len(X))  # 3 x 7 distinct tuples


@PROPERTY
@given(X=tie_matrix(min_rows=1, max_rows=30, values=4), data=st.data())
def test_record_linkage_equals_brute_force(X, data):
    """Masked files with repeated tuples (like a microaggregated release) and exact ties."""
    n = X.shape[0]
    pick = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n)))
    Xm = c64(X[pick] + data.draw(st.sampled_from([0.0, 0.5])))
    Z, Zm = standardized(X, Xm)
    assert_links_equal(metrics.record_linkage(X, Xm, leaf_size=2), naive.links(Z, Zm))
    cols = [X.shape[1] - 1]
    Zc, Zmc = standardized(X[:, cols], Xm[:, cols])
    assert_links_equal(metrics.record_linkage(X, Xm, columns=cols), naive.links(Zc, Zmc))


def test_dld_of_an_mdav_release(census_mdav):
    X, Xm = census_mdav
    k = 3
    value = metrics.dld(X, Xm)
    assert value == pytest.approx(naive.dld(X, Xm), abs=1e-9)
    # one masked tuple per group of >= k records and a credit of at most 1 per group
    assert 0.0 < value < 100.0 / k
    some = metrics.dld(X, Xm, columns=[1, 3, 8])
    assert some == pytest.approx(naive.dld(X, Xm, [1, 3, 8]), abs=1e-9)


# --- sums: chunk -> combine -> finalize -------------------------------------------------------------


def test_moments_combined_over_chunks_equal_one_shot(census_mdav):
    X, Xm = census_mdav
    rng = np.random.default_rng(3)
    rows = rng.permutation(len(X))
    cuts = np.sort(rng.choice(np.arange(1, len(X)), 2, replace=False))
    chunks = [metrics.moments(X[r], Xm[r]) for r in np.split(rows, cuts)]
    combined = metrics.combine_moments(metrics.combine_moments(chunks[2], chunks[0]), chunks[1])
    combined = metrics.combine_moments(combined, metrics.moments(X[:0], Xm[:0]))  # an empty partition
    whole = metrics.moments(X, Xm)
    assert combined["n"] == whole["n"]
    for key in whole:
        np.testing.assert_allclose(combined[key], whole[key], rtol=1e-12, atol=0, err_msg=key)
    for finalize in (metrics.information_loss_family_from, metrics.il1s_from, metrics.sse_il_from):
        got, expected = finalize(combined), finalize(whole)
        if isinstance(expected, dict):
            for key in ("X-X'", "V-V'", "S-S'", "R-R'", "IL", "SSE", "SST"):
                if key in expected:
                    assert got[key] == pytest.approx(expected[key], rel=1e-12)
        else:
            assert got == pytest.approx(expected, rel=1e-12)


@PROPERTY
@given(pair=float_pair(min_rows=3), data=st.data())
def test_moments_chunks_property(pair, data):
    X, Xm = pair
    cut = data.draw(st.integers(0, X.shape[0]))
    combined = metrics.combine_moments(metrics.moments(X[:cut], Xm[:cut]), metrics.moments(X[cut:], Xm[cut:]))
    whole = metrics.moments(X, Xm)
    scale = 1.0 + float((X**2).sum() + (Xm**2).sum())
    for key in whole:
        np.testing.assert_allclose(combined[key], whole[key], rtol=1e-9, atol=1e-9 * scale, err_msg=key)


# --- information loss ----------------------------------------------------------------------------


def assert_family_close(got, expected):
    for key in ("X-X'", "V-V'", "S-S'", "R-R'", "IL"):
        if math.isnan(expected[key]):
            assert math.isnan(got[key]), key
        else:
            assert got[key] == pytest.approx(expected[key], rel=1e-9, abs=1e-9), key


def test_information_loss_family_of_an_mdav_release(census_mdav):
    X, Xm = census_mdav
    got = metrics.information_loss_family(X, Xm)
    assert_family_close(got, naive.information_loss_family(X, Xm))
    assert got["undefined_terms"] == {"X-X'": 0, "V-V'": 0, "S-S'": 0}
    # mean aggregation keeps every mean, shrinks every variance: positive, finite loss
    assert 0 < got["IL"] < 100
    assert metrics.information_loss_family(X, X)["IL"] == 0.0


@PROPERTY
@given(pair=float_pair())
def test_information_loss_family_equals_formulas(pair):
    X, Xm = pair
    V = np.cov(X, rowvar=False).reshape(X.shape[1], X.shape[1])
    if np.all(V == 0):  # every component undefined: nothing to compare
        return
    got = metrics.information_loss_family(X, Xm)
    assert_family_close(got, naive.information_loss_family(X, Xm))
    assert got["undefined_terms"]["X-X'"] == int((X == 0).sum())


def test_information_loss_family_reports_undefined_terms():
    X = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 8.0]])
    Xm = np.array([[1.0, 1.0], [2.0, 3.0], [4.0, 8.0]])
    got = metrics.information_loss_family(X, Xm)
    assert got["undefined_terms"]["X-X'"] == 1
    assert got["X-X'"] == 0.0  # the only changed value is the undefined term
    assert_family_close(got, naive.information_loss_family(X, Xm))


@PROPERTY
@given(pair=float_pair())
def test_il1s_equals_definition(pair):
    X, Xm = pair
    assert metrics.il1s(X, Xm) == pytest.approx(naive.il1s(X, Xm), rel=1e-9, abs=1e-12)


def test_il1s_by_hand():
    X = np.array([[1.0], [3.0]])  # S = sqrt(2)
    Xm = np.array([[2.0], [2.0]])
    assert metrics.il1s(X, Xm) == pytest.approx((1 + 1) / (math.sqrt(2) * math.sqrt(2)) / 2)


@PROPERTY
@given(pair=float_pair())
def test_sse_il_equals_definition(pair):
    X, Xm = pair
    got, expected = metrics.sse_il(X, Xm), naive.sse_il(X, Xm)
    for key in ("SSE", "SST", "IL"):
        assert got[key] == pytest.approx(expected[key], rel=1e-9, abs=1e-9), key


def test_sse_il_of_mdav_is_the_published_il(census_mdav):
    X, Xm = census_mdav
    got = metrics.sse_il(X, Xm)
    assert round(got["IL"], 3) == pytest.approx(PUBLISHED_MDAV_IL["census", 3])
    # the same SSE / SST / IL as the kernels the release pipeline uses
    Z = c64(microagg.standardize(X)[0])
    _, labels = np.unique(Xm, axis=0, return_inverse=True)
    labels = np.ascontiguousarray(labels.ravel(), dtype=np.int64)
    il, sse, sst = kernels.information_loss(Z, labels, int(labels.max()) + 1)
    assert got["IL"] == pytest.approx(il, rel=1e-9)
    assert got["SSE"] == pytest.approx(sse, rel=1e-9)
    assert got["SST"] == pytest.approx(sst, rel=1e-9)


def test_attribute_changes_equal_numpy(census_mdav):
    X, Xm = census_mdav
    names = [f"a{j}" for j in range(X.shape[1])]
    table = metrics.attribute_changes(X, Xm, names)
    assert len(table) == X.shape[1] * (2 + len(metrics.QUANTILES))
    row = table.set_index(["attribute", "statistic"])
    for j, name in enumerate(names):
        assert row.loc[(name, "mean"), "original"] == pytest.approx(X[:, j].mean(), rel=1e-12)
        assert row.loc[(name, "mean"), "masked"] == pytest.approx(Xm[:, j].mean(), rel=1e-12)
        assert row.loc[(name, "variance"), "masked"] == pytest.approx(Xm[:, j].var(ddof=1), rel=1e-12)
        for q in metrics.QUANTILES:
            before, after = np.quantile(X[:, j], q), np.quantile(Xm[:, j], q)
            assert row.loc[(name, f"q{q:g}"), "original"] == before
            assert row.loc[(name, f"q{q:g}"), "masked"] == after
            assert row.loc[(name, f"q{q:g}"), "relative_change"] == pytest.approx((after - before) / abs(before))
    # mean aggregation preserves means and shrinks variances
    assert (row.xs("mean", level="statistic")["relative_change"].abs() < 1e-12).all()
    assert (row.xs("variance", level="statistic")["relative_change"] < 0).all()


# --- interval disclosure --------------------------------------------------------------------------


@PROPERTY
@given(pair=float_pair(min_rows=1, max_rows=25), p=st.sampled_from([1, 5, 10, 25, 50]))
def test_interval_disclosure_equals_definition(pair, p):
    X, Xm = pair
    assert metrics.interval_disclosure(X, Xm, p) == pytest.approx(naive.interval_disclosure(X, Xm, p), abs=1e-9)


def test_interval_disclosure_by_hand():
    # 20 records, p = 10: 2h < 2, so h = 0 and the interval is the tie block of the masked value
    x = np.arange(20.0)
    assert metrics.rank_half_width(20, 10) == 0
    assert metrics.interval_disclosure(x, x) == 100.0
    assert metrics.interval_disclosure(x, x + 0.5) == 0.0
    # p = 30: 2h < 6, h = 2: x + 2 has x two ranks below it (except the two lowest records, whose
    # windows are clipped at the lowest rank 2)
    assert metrics.rank_half_width(20, 30) == 2
    assert metrics.interval_disclosure(x, x + 2, 30) == 100.0 * 18 / 20
    # several p: the mean of the rates
    both = metrics.interval_disclosure(x, x + 2, [10, 30])
    assert both == pytest.approx(0.5 * (metrics.interval_disclosure(x, x + 2, 10) + 90.0))


def test_interval_disclosure_of_an_mdav_release(census_mdav):
    X, Xm = census_mdav
    rates = metrics.interval_disclosure_rates(X, Xm)
    assert rates.shape == (X.shape[1],)
    assert ((0 < rates) & (rates <= 100)).all()
    assert metrics.interval_disclosure(X, Xm) == pytest.approx(rates.mean())
    assert metrics.interval_disclosure(X, Xm, columns=[2, 5]) == pytest.approx(rates[[2, 5]].mean())
    # a wider interval discloses more
    assert metrics.interval_disclosure(X, Xm, 1) <= metrics.interval_disclosure(X, Xm, 10)


# --- score, equivalence classes --------------------------------------------------------------------


def test_score_by_hand():
    assert metrics.disclosure_risk(20.0, 60.0) == 40.0
    assert metrics.score(30.0, 20.0, 60.0) == 35.0


def test_score_of_an_mdav_release(census_mdav):
    X, Xm = census_mdav
    il = metrics.information_loss_family(X, Xm)["IL"]
    dld, id_ = metrics.dld(X, Xm), metrics.interval_disclosure(X, Xm)
    value = metrics.score(il, dld, id_)
    assert value == pytest.approx(0.5 * il + 0.25 * dld + 0.25 * id_)
    assert 0 < value < 100


def test_k_prime_and_class_sizes_by_hand():
    Xm = np.array([
        [1.0, 2.0], [1.0, 2.0], [1.0, 2.0],  # a class of 3
        [0.0, 5.0], [-0.0, 5.0],  # a class of 2 (-0.0 == 0.0)
        [7.0, 7.0], [7.0, 7.0], [7.0, 7.0],  # another class of 3
        [9.0, 1.0],  # a class of 1
    ])
    assert metrics.real_anonymity(Xm) == 9 / 4
    smallest, histogram = metrics.class_sizes(Xm)
    assert smallest == 1
    assert histogram == {1: 1, 2: 1, 3: 2}
    assert metrics.check_k_anonymous(Xm, 2) == 1
    assert metrics.check_k_anonymous(Xm, 3) == 3
    assert metrics.check_k_anonymous(Xm, 1) == 0
    summary = metrics.class_size_summary(metrics.class_sizes_of(Xm))
    assert summary == {"records": 9, "classes": 4, "min": 1, "k_prime": 9 / 4, "histogram": {1: 1, 2: 1, 3: 2}}


def test_mdav_release_is_k_anonymous(census_mdav):
    _, Xm = census_mdav
    assert metrics.check_k_anonymous(Xm, 3) == 0
    smallest, histogram = metrics.class_sizes(Xm)
    assert smallest >= 3 and set(histogram) <= {3, 4, 5}
    assert sum(size * count for size, count in histogram.items()) == len(Xm)
    assert metrics.real_anonymity(Xm) >= 3


# --- bad input ----------------------------------------------------------------------------------


def test_bad_input_is_refused():
    X = np.ones((4, 2))
    with pytest.raises(InputError, match="differ in shape"):
        metrics.dld(X, np.ones((4, 3)))
    with pytest.raises(InputError, match="missing or infinite"):
        metrics.information_loss_family(X, np.full((4, 2), np.nan))
    with pytest.raises(InputError, match="distinct positions"):
        metrics.dld(X, X, columns=[0, 0])
    with pytest.raises(InputError, match="percentage"):
        metrics.interval_disclosure(X, X, p=0)
    with pytest.raises(TypeError, match="numeric"):
        metrics.sse_il(np.array([["a"]]), np.array([["b"]]))


@settings(deadline=None, max_examples=30)
@given(hnp.arrays(np.float64, st.tuples(st.integers(0, 60), st.integers(1, 4)),
                  elements=st.sampled_from([0.0, -0.0, 1.5, -2.0, 3.0])))
def test_row_codes_group_equal_rows_by_value_even_when_hashes_collide(A):
    """``metrics._row_codes``: rows grouped by value (``-0.0`` as ``0.0``), numbered in order of first
    appearance; the grouping by hash is checked row by row, so a collision (forced here: every hash
    equal) falls back to grouping by bytes with the same result."""
    expected = {}
    want = np.array([expected.setdefault(tuple(r + 0.0), len(expected)) for r in A], dtype=np.int64)
    codes, first = metrics._row_codes(A)
    np.testing.assert_array_equal(codes, want)
    np.testing.assert_array_equal(codes[first], np.arange(len(first)))
    real = microagg.kernels.row_hashes
    try:
        microagg.kernels.row_hashes = lambda X, seed: np.zeros(X.shape[0], dtype=np.uint64)
        collided, first_collided = metrics._row_codes(A)
    finally:
        microagg.kernels.row_hashes = real
    np.testing.assert_array_equal(collided, want)
    np.testing.assert_array_equal(first_collided, first)
