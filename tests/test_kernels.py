"""Property tests: the Numba kernels against the naive references of ``naive.py``.

Inputs are drawn by Hypothesis. The MDAV comparison uses small-integer data, on which the kernel
and the reference perform the same floating-point operations exactly, so labels must be identical
even though ties and duplicate rows abound; everything else is compared with tolerances derived from
the data's scale.
"""

import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import microagg
import naive
from microagg import kernels
from microagg.kernels import eigen, groups, ties, windows
from microagg.kernels.refine import LIST_SLACK, TOL, _first_neighbours, _neighbour_lists, _update_lists, refine_sse
from microagg.kernels.select import keep_smallest, offer_in_order
from microagg.pipeline import blocking, stats, stitch

FAST = settings(deadline=None, max_examples=150)
THOROUGH = settings(deadline=None, max_examples=400)


def c64(X):
    return np.ascontiguousarray(X, dtype=np.float64)


def finite(bound, **kwargs):
    return st.floats(-bound, bound, allow_nan=False, allow_infinity=False, **kwargs)


def not_tiny(bound):
    """Bounded floats that are 0 or at least 1e-100 in magnitude: a non-constant column then has a
    variance well inside float64's normal range (below ~1e-154 a spread underflows to a zero std in
    numpy, which the tolerances below use; the exact statistics keep it)."""
    return finite(bound).map(lambda v: v if v == 0.0 or abs(v) >= 1e-100 else 0.0)


@st.composite
def small_integer_matrix(draw, k, max_rows):
    """An ``(n, d)`` float64 matrix of integers 0..4 with n in [k, max_rows], some columns constant."""
    n = draw(st.integers(k, max_rows))
    d = draw(st.integers(1, 4))
    X = draw(hnp.arrays(np.float64, (n, d), elements=st.integers(0, 4).map(float)))
    for j in range(d):
        if draw(st.booleans()) and draw(st.booleans()):  # about one column in four is constant
            X[:, j] = draw(st.integers(0, 4))
    return c64(X)


@st.composite
def float_matrix(draw, min_rows, max_rows, max_cols=4, bound=1e3, elements=None):
    """An ``(n, d)`` float64 matrix of bounded floats; the array strategy's fill value repeats, so
    duplicate values and duplicate rows are common."""
    n = draw(st.integers(min_rows, max_rows))
    d = draw(st.integers(1, max_cols))
    elements = finite(bound) if elements is None else elements
    return c64(draw(hnp.arrays(np.float64, (n, d), elements=elements)))


@st.composite
def labelled_matrix(draw, max_rows=30):
    """A float matrix and labels ``0..g-1``, every label used."""
    X = draw(float_matrix(1, max_rows))
    n = X.shape[0]
    g = draw(st.integers(1, n))
    labels = np.array(draw(st.lists(st.integers(0, g - 1), min_size=n, max_size=n)), dtype=np.int64)
    labels[:g] = np.arange(g)  # every group non-empty ...
    labels = labels[draw(st.permutations(range(n)))]  # ... wherever its rows are
    return X, np.ascontiguousarray(labels, dtype=np.int64), g


def assert_valid_partition(labels, n, k):
    """Every row labelled, labels 0..g-1 all used, every group of k..2k-1 rows."""
    assert labels.dtype == np.int64
    assert labels.shape == (n,)
    assert labels.min() == 0
    counts = np.bincount(labels)
    assert (counts > 0).all(), f"unused labels in 0..{labels.max()}: {np.flatnonzero(counts == 0)}"
    if n < 2 * k:
        assert counts.tolist() == [n]
    else:
        assert counts.min() >= k, f"group of {counts.min()} < k={k}"
        assert counts.max() <= 2 * k - 1, f"group of {counts.max()} > 2k-1={2 * k - 1}"


def assert_contiguous_along(labels, order, k):
    """Groups are consecutive runs of ``order`` numbered 0, 1, ... along it, each of k..2k-1 rows."""
    along = labels[order]
    steps = np.diff(along)
    assert along[0] == 0
    assert set(steps.tolist()) <= {0, 1}, f"groups are not contiguous along the order: {along}"
    counts = np.bincount(along)
    assert counts.min() >= k and counts.max() <= 2 * k - 1, f"group sizes {counts.tolist()}"


def sse_tolerance(X):
    """Absolute rounding allowance for SSE-like sums: a few ulps of the sum of squares."""
    return 1e-12 * (1.0 + float((X**2).sum()))


# --- MDAV ---------------------------------------------------------------------------------------


@THOROUGH
@given(data=st.data(), k=st.integers(2, 5))
def test_mdav_identical_to_textbook_on_ties(data, k):
    X = data.draw(small_integer_matrix(k, 3 * k + 6))
    expected = naive.mdav(X, k)
    got = kernels.mdav(X, k)
    np.testing.assert_array_equal(got, expected)
    assert_valid_partition(got, X.shape[0], k)


@FAST
@given(data=st.data(), k=st.integers(2, 3))
def test_mdav_identical_to_textbook_many_rounds(data, k):
    # up to 17k rows: several rounds, and the first ones run before the kernel compacts dead records
    X = data.draw(small_integer_matrix(k, 17 * k))
    np.testing.assert_array_equal(kernels.mdav(X, k), naive.mdav(X, k))


@pytest.mark.parametrize("n, d, high, k", [(700, 3, 4, 2), (900, 13, 4, 5), (1500, 13, 1000, 3), (1200, 5, 60, 10)])
def test_mdav_identical_to_textbook_where_its_scans_take_their_shortcuts(n, d, high, k):
    """Blocks of hundreds of rows, where MDAV's nearest-records scan reads only the blocks of records
    within its bound and r is mostly found among the records listed after a full pass (kernels.mdav):
    the textbook's groups exactly, with ties everywhere (values 0..4) and with few (0..1000). Integer
    values keep the centroids' sums exact, so the textbook's distances are the kernel's, bit for bit."""
    X = np.random.default_rng(n + d + k).integers(0, high + 1, size=(n, d)).astype(np.float64)
    got = kernels.mdav(X, k)
    np.testing.assert_array_equal(got, naive.mdav(X, k))
    assert_valid_partition(got, n, k)


@THOROUGH
@given(data=st.data(), k=st.integers(2, 6))
def test_mdav_partition_invariants(data, k):
    X = data.draw(float_matrix(k, 8 * k, bound=1e6))
    labels = kernels.mdav(X, k)
    assert_valid_partition(labels, X.shape[0], k)
    # labels are numbered in order of formation: all groups but the last have exactly k rows
    counts = np.bincount(labels)
    assert (counts[:-1] == k).all()


# --- optimal contiguous partitions (Hansen-Mukherjee) ---------------------------------------------


@THOROUGH
@given(data=st.data(), k=st.integers(2, 5))
def test_univariate_optimal_is_optimal(data, k):
    n = data.draw(st.integers(k, 14))
    x = c64(data.draw(hnp.arrays(np.float64, n, elements=finite(100))))
    labels, cost = kernels.univariate_optimal(x, k)
    assert cost == pytest.approx(naive.optimal_univariate(x, k), rel=1e-9, abs=1e-9)
    assert_contiguous_along(labels, np.argsort(x, kind="stable"), k)
    assert naive.sse(x[:, None], labels) == pytest.approx(cost, rel=1e-9, abs=1e-9)


@FAST
@given(data=st.data(), k=st.integers(2, 4))
def test_optimal_contiguous_is_optimal(data, k):
    X = data.draw(float_matrix(k, 12, max_cols=3, bound=100))
    n = X.shape[0]
    order = np.array(data.draw(st.permutations(range(n))), dtype=np.int64)
    labels, cost = kernels.optimal_contiguous(X, order, k)
    assert cost == pytest.approx(naive.optimal_contiguous(X, order, k), rel=1e-9, abs=1e-9)
    assert_contiguous_along(labels, order, k)
    assert naive.sse(X, labels) == pytest.approx(cost, rel=1e-9, abs=1e-9)


# --- SSE, SST, IL, centroids ------------------------------------------------------------------------


@THOROUGH
@given(case=labelled_matrix())
def test_sse_sst_information_loss(case):
    X, labels, g = case
    tol = sse_tolerance(X)
    e, t = naive.sse(X, labels), naive.sst(X)
    assert kernels.sse(X, labels, g) == pytest.approx(e, rel=1e-9, abs=tol)
    assert kernels.sst(X) == pytest.approx(t, rel=1e-9, abs=tol)
    il, ke, kt = kernels.information_loss(X, labels, g)
    assert ke == kernels.sse(X, labels, g) and kt == kernels.sst(X)
    if t > 1e6 * tol:  # SST well above rounding noise: the ratio is meaningful, and SSE <= SST
        assert il == pytest.approx(100.0 * e / t, rel=1e-6, abs=1e-9)
        assert 0.0 <= il <= 100.0 * (1 + 1e-9)


def test_information_loss_is_zero_without_spread():
    Z = np.zeros((6, 2))
    labels = np.array([0, 0, 0, 1, 1, 1], dtype=np.int64)
    assert kernels.information_loss(Z, labels, 2) == (0.0, 0.0, 0.0)
    assert naive.information_loss(Z, labels) == 0.0


@THOROUGH
@given(case=labelled_matrix())
def test_group_medians(case):
    X, labels, g = case
    scale = float(np.abs(X).max())
    np.testing.assert_allclose(kernels.group_medians(X, labels, g), naive.group_medians(X, labels),
                               rtol=1e-12, atol=1e-12 * scale)


@THOROUGH
@given(case=labelled_matrix())
def test_group_means_preserve_column_sums(case):
    X, labels, g = case
    means = kernels.group_means(X, labels, g)
    counts = np.bincount(labels, minlength=g)
    assert means.shape == (g, X.shape[1])
    scale = float(np.abs(X).sum())
    # the floor: a subnormal value's mean may underflow to zero (e.g. mean(5e-324, 0) == 0)
    np.testing.assert_allclose((means * counts[:, None]).sum(axis=0), X.sum(axis=0),
                               rtol=1e-9, atol=max(1e-12 * scale, 1e-300))
    # and each row of ``means`` is its group's mean
    for h in range(g):
        np.testing.assert_allclose(means[h], X[labels == h].mean(axis=0), rtol=1e-9,
                                   atol=1e-12 * scale)


# --- standardization and its split-independent statistics -----------------------------------------


@THOROUGH
@given(data=st.data())
def test_standardize_mean_zero_std_one(data):
    X = data.draw(float_matrix(1, 40, elements=not_tiny(1e6)))
    for j in range(X.shape[1]):
        if data.draw(st.booleans()) and data.draw(st.booleans()):
            X[:, j] = X[0, j]  # about one column in four constant
    Z, mean, std = microagg.standardize(X)
    assert Z.shape == X.shape and Z.dtype == np.float64
    for j in range(X.shape[1]):
        col = X[:, j]
        if (col == col[0]).all():
            assert std[j] == 0.0
            assert mean[j] == col[0]
            assert (Z[:, j] == 0.0).all()
            continue
        assert std[j] > 0.0
        # z-scores carry an error of a few ulps of max|x| / std: scale the allowance with it
        tol = 1e-12 * (1.0 + float(np.abs(col).max()) / float(col.std()))
        assert abs(Z[:, j].mean()) <= tol
        assert abs(Z[:, j].std() - 1.0) <= tol


@THOROUGH
@given(data=st.data())
def test_column_stats_independent_of_split(data):
    # squares must stay finite (|x| < 1.3e154); subnormals and mixed magnitudes are welcome
    X = data.draw(float_matrix(1, 40, bound=1e100))
    n = X.shape[0]
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=6)))  # empty chunks allowed
    bounds = [0, *cuts, n]
    parts = [stats.chunk(c64(X[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]
    split_mean, split_std = stats.finalize(stats.combine(parts))
    whole_mean, whole_std = stats.finalize(stats.chunk(X))
    np.testing.assert_array_equal(split_mean, whole_mean)
    np.testing.assert_array_equal(split_std, whole_std)
    # and the split order of the chunks does not matter either
    rev_mean, rev_std = stats.finalize(stats.combine(parts[::-1]))
    assert (rev_mean == whole_mean).all() and (rev_std == whole_std).all()
    # the mean is the correctly rounded exact mean (fractions), whatever the cancellation
    for j in range(X.shape[1]):
        exact = sum((Fraction(float(v)) for v in X[:, j]), Fraction(0)) / n
        assert whole_mean[j] == float(exact)


# --- the public API ------------------------------------------------------------------------------


def well_scaled(X):
    """Each column constant or with a spread well above the rounding of its magnitude (so numpy's
    two-pass std and the exact one give z-scores that agree to many digits), and not so tiny that
    its squares are subnormal (around 1e-161 the naive reference loses digits; the exact sums do not)."""
    for col in X.T:
        if (col == col[0]).all():
            continue  # constant (numpy's std of a tiny non-constant column can underflow to 0.0 too)
        spread = float(col.std())
        if spread < 1e-6 * float(np.abs(col).max()) or spread < 1e-150:
            return False
    return True


@THOROUGH
@given(data=st.data(), k=st.integers(2, 5), position=st.integers(0, 4), value=finite(1e3))
def test_partition_ignores_constant_column(data, k, position, value):
    X = data.draw(float_matrix(k, 6 * k, bound=1e3))
    position = min(position, X.shape[1])
    with_constant = c64(np.insert(X, position, value, axis=1))
    labels = microagg.partition(X, k)
    np.testing.assert_array_equal(microagg.partition(with_constant, k), labels)
    assert_valid_partition(labels, X.shape[0], k)


@THOROUGH
@given(data=st.data(), k=st.integers(2, 5))
def test_information_loss_matches_naive(data, k):
    X = data.draw(float_matrix(k, 6 * k, bound=1e3))
    assume(well_scaled(X))
    labels = microagg.partition(X, k)
    il = microagg.information_loss(X, labels)
    assert il == pytest.approx(naive.information_loss(X, labels), rel=1e-7, abs=1e-9)
    # arbitrary labels (not 0..g-1, any order) are accepted too
    shuffled = 7 * labels[::-1] + 3
    assert microagg.information_loss(X, shuffled) == pytest.approx(
        naive.information_loss(X, shuffled), rel=1e-7, abs=1e-9)


@st.composite
def partitioned(draw):
    """A float matrix with an MDAV partition of it (groups k..2k-1)."""
    k = draw(st.integers(2, 5))
    X = draw(float_matrix(min_rows=2 * k, max_rows=60, max_cols=4, bound=100.0))
    return X, k, kernels.mdav(X, k)


@FAST
@given(partitioned(), st.integers(1, 6), st.integers(1, 10))
def test_refine_never_raises_sse_and_keeps_sizes(case, neighbors, sweeps):
    X, k, labels = case
    before = naive.sse(X, labels)
    refined = labels.copy()
    kernels.refine(X, refined, k, 2 * k - 1, neighbors, sweeps)
    sizes = np.bincount(refined)
    assert refined.shape == labels.shape and sizes.min() >= k and sizes.max() <= 2 * k - 1
    assert np.array_equal(np.unique(refined), np.arange(len(sizes)))  # compact labels
    assert naive.sse(X, refined) <= before + 1e-9 * max(1.0, before)
    again = labels.copy()
    kernels.refine(X, again, k, 2 * k - 1, neighbors, sweeps)
    assert np.array_equal(again, refined)  # deterministic
    rescanned = labels.copy()
    kernels.refine(X, rescanned, k, 2 * k - 1, neighbors, sweeps, rescan=True)
    assert np.array_equal(rescanned, refined)  # neighbour lists brought up to date = scanned again


@FAST
@given(partitioned(), st.integers(1, 6), st.integers(1, 10))
def test_refine_sse_gives_refines_groups_and_the_drop_of_the_sse(case, neighbors, sweeps):
    """The SSE drop that the block sweeps report (the stitching's gain) is summed from the changes' own
    deltas, without an SSE pass before and after: it is the difference of the two SSEs."""
    X, k, labels = case
    refined = labels.copy()
    changes = kernels.refine(X, refined, k, 2 * k - 1, neighbors, sweeps)
    summed = labels.copy()
    found, drop = refine_sse(X, summed, k, 2 * k - 1, neighbors, sweeps, TOL)
    assert found == changes
    np.testing.assert_array_equal(summed, refined)
    before, after = naive.sse(X, labels), naive.sse(X, refined)
    assert drop >= 0.0
    assert drop == pytest.approx(before - after, rel=1e-9, abs=1e-9 * max(1.0, before))
    assert (drop > 0.0) == (changes > 0)


@pytest.mark.parametrize("ties", [False, True])
def test_refine_to_convergence_with_lists_brought_up_to_date_gives_the_groups_of_full_scans(ties):
    """Hundreds of groups over many sweeps, with equal distances when ``ties``: the local search that
    updates its neighbour lists forms the groups of the one that scans every pair at every sweep."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(1500, 6)) * rng.uniform(0.2, 3.0, size=6)
    if ties:
        X = np.round(X)
    for k, neighbors in ((3, 8), (5, 6)):
        start = kernels.mdav(X, k)
        fast, slow = start.copy(), start.copy()
        changes = kernels.refine(X, fast, k, 2 * k - 1, neighbors, 1000)
        assert kernels.refine(X, start.copy(), k, 2 * k - 1, neighbors, 1) < changes  # sweeps after the first changed groups
        assert kernels.refine(X, slow, k, 2 * k - 1, neighbors, 1000, rescan=True) == changes
        assert np.array_equal(fast, slow)


def _memory_case(seed):
    """A small local-search input (rows, start labels, k, neighbour groups) of one of four shapes."""
    rng = np.random.default_rng(seed)
    k, d = int(rng.integers(2, 5)), int(rng.integers(1, 4))
    shape = seed % 4
    if shape == 0:  # values on a coarse grid of one decimal: ties
        X = np.round(rng.normal(size=(int(rng.integers(30, 150)), d)), 1)
    elif shape == 1:  # clusters of k + 1 records
        centres = rng.normal(size=(int(rng.integers(5, 30)), d)) * 3
        X = np.repeat(centres, k + 1, axis=0) + rng.normal(size=(len(centres) * (k + 1), d)) * 0.3
    elif shape == 2:  # small integers
        X = rng.integers(0, 6, size=(int(rng.integers(30, 150)), d)).astype(float)
    else:
        X = rng.exponential(size=(int(rng.integers(30, 150)), d))
    n = len(X)
    if rng.integers(0, 3) == 0:
        labels = np.asarray(microagg.partition(X, k, standardized=True), dtype=np.int64)
    else:  # random groups of k records (the last up to 2k - 1)
        labels = np.empty(n, dtype=np.int64)
        labels[rng.permutation(n)] = np.minimum(np.arange(n) // k, n // k - 1)
    return X, labels, k, int(rng.integers(2, 7))


def test_refine_skips_only_evaluations_that_would_find_nothing_again(monkeypatch):
    """The local search remembers the pairs and the dissolutions it evaluated without effect, with the
    versions of the groups (and, for a dissolution, the neighbours) they depended on, and skips them
    while those are unchanged. Its groups equal those of the same search evaluating everything every
    time (the kernel's Python source, run with both memories forgetting all): 200 small inputs to
    convergence. A memory that ignored its neighbours' versions, or which groups its neighbours were,
    or either group of a pair, skipped evaluations that would have changed the groups, and gave other
    groups in some of them."""
    import importlib

    module = importlib.import_module("microagg.kernels.refine")
    for seed in range(200):
        X, labels, k, neighbors = _memory_case(seed)
        remembered = labels.copy()
        changes = kernels.refine(X, remembered, k, 2 * k - 1, neighbors, 20, module.TOL, False)
        with monkeypatch.context() as patch:
            patch.setattr(module, "_idle", lambda *args: False)
            patch.setattr(module, "_dissolve_idle", lambda *args: False)
            everything = labels.copy()
            assert module._refine.py_func(X, everything, k, 2 * k - 1, neighbors, 20, module.TOL, False)[0] == changes
        np.testing.assert_array_equal(remembered, everything)


def test_a_dissolution_sending_several_members_to_one_group_is_costed_exactly():
    """Three members of a dissolved group joining one neighbour add more than their costs taken one at a
    time (each against the neighbour's centroid before any joined): Hypothesis found this input, on which
    the local search accepted that dissolution and raised the SSE from 11.6 to 11.875."""
    X = np.array([[0, 2, -1], [-1, -1, -1], [-1, -1, -1], [0, -1, -1], [-1, -1, -1], [1, -1, -1]]
                 + [[-1, -1, -1]] * 11, dtype=float)
    labels = np.repeat(np.arange(3), [5, 5, 7])
    refined = labels.copy()
    kernels.refine(X, refined, 5, 9, 2, 1)
    assert naive.sse(X, refined) < naive.sse(X, labels)
    assert np.bincount(refined).min() >= 5


def test_a_dissolution_remembered_without_effect_is_evaluated_again_once_its_group_changed(monkeypatch):
    """A dissolution remembered without effect is evaluated again once its own group changed, even if
    none of its neighbours did: a group c whose list holds a (a's does not hold c) may move a record
    into a or swap one with it. One input (small whole numbers, two neighbour groups, k = 3; one of
    three found among 30,000 random ones) where a memory that ignored the group's
    own version skipped a dissolution that would have changed the groups: the kernel's groups equal
    those of the same search evaluating everything every time, and that memory's do not."""
    import importlib

    module = importlib.import_module("microagg.kernels.refine")
    rng = np.random.default_rng(15047)
    k, d, n = int(rng.integers(2, 5)), int(rng.integers(1, 4)), int(rng.integers(60, 400))
    X = rng.integers(0, 6, size=(n, d)).astype(float)
    labels = np.empty(n, dtype=np.int64)
    labels[rng.permutation(n)] = np.minimum(np.arange(n) // k, n // k - 1)
    neighbors = int(rng.integers(1, 4))
    assert (n, k, neighbors) == (270, 3, 2)

    remembered = labels.copy()
    changes = kernels.refine(X, remembered, k, 2 * k - 1, neighbors, 20, module.TOL, False)

    def search(idle, dissolve_idle):
        with monkeypatch.context() as patch:
            patch.setattr(module, "_idle", idle)
            patch.setattr(module, "_dissolve_idle", dissolve_idle)
            out = labels.copy()
            return module._refine.py_func(X, out, k, 2 * k - 1, neighbors, 20, module.TOL, False)[0], out

    everything = search(lambda *args: False, lambda *args: False)
    assert everything[0] == changes
    np.testing.assert_array_equal(remembered, everything[1])

    def neighbours_only(seen, near, near_version, version, nb, a):  # the group's own version ignored
        return all(near[a, u] == nb[a, u] and (nb[a, u] < 0 or near_version[a, u] == version[nb[a, u]])
                   for u in range(nb.shape[1]))

    careless = search(module._idle, neighbours_only)
    assert not np.array_equal(careless[1], everything[1])


def test_refine_improves_mdav_on_census(census):
    Z, _, _ = microagg.standardize(census.to_numpy(dtype=float))
    labels = kernels.mdav(Z, 3)
    refined = labels.copy()
    changes = kernels.refine(Z, refined, 3, 5)
    assert changes > 0
    assert naive.sse(Z, refined) < 0.95 * naive.sse(Z, labels)


@FAST
@given(hnp.arrays(np.float64, st.integers(1, 40), elements=st.integers(0, 6).map(float)), st.integers(1, 8),
       st.integers(0, 2**32 - 1))
def test_offers_in_any_order_keep_what_a_scan_in_order_keeps(values, capacity, seed):
    """offer_in_order, fed the candidates shuffled, ends with the buffers keep_smallest fills from a
    scan by increasing id (ties to the lower id)."""
    want_keys, want_ids = np.empty(capacity), np.empty(capacity, dtype=np.int64)
    got_keys, got_ids = np.empty(capacity), np.empty(capacity, dtype=np.int64)
    want = got = 0
    for ident, key in enumerate(values):
        want = keep_smallest(want_keys, want_ids, want, key, ident)
    for ident in np.random.default_rng(seed).permutation(len(values)):
        got = offer_in_order(got_keys, got_ids, got, values[ident], ident)
    assert got == want
    assert np.array_equal(got_ids[:got], want_ids[:want]) and np.array_equal(got_keys[:got], want_keys[:want])


def _nearest_groups(sums, size, alive, n_neighbors):
    """The local search's neighbour lists from a scan of every pair of groups."""
    return _first_neighbours(_neighbour_lists(sums, size, alive, n_neighbors), alive, n_neighbors)


@FAST
@given(float_matrix(min_rows=3, max_rows=80, max_cols=5, bound=100.0), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_nearest_groups_are_the_nearest_centroids(sums, n_neighbors, seed):
    rng = np.random.default_rng(seed)
    size = rng.integers(1, 9, size=len(sums))
    alive = rng.random(len(sums)) < 0.8
    assume(alive.sum() > n_neighbors)
    nb = _nearest_groups(sums, size, alive, n_neighbors)
    centroids = sums / size[:, None]
    for a in np.flatnonzero(alive):
        others = np.flatnonzero(alive & (np.arange(len(sums)) != a))
        want = np.sort(((centroids[others] - centroids[a]) ** 2).sum(axis=1))[:n_neighbors]
        assert set(nb[a]) <= set(others)
        got = np.sort(((centroids[nb[a]] - centroids[a]) ** 2).sum(axis=1))
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert (nb[~alive] == -1).all()


@FAST
@given(st.integers(2, 90), st.integers(1, 5), st.integers(1, 8), st.booleans(), st.integers(0, 2**32 - 1))
def test_neighbour_lists_brought_up_to_date_are_those_a_full_scan_gives(n_groups, d, n_neighbors, ties, seed):
    """The local search's lists after groups moved or died (a few, or many: then all are scanned
    again) hold the same neighbours, in the same order, as scanning every pair again."""
    rng = np.random.default_rng(seed)
    draw = (lambda shape: rng.integers(-3, 4, size=shape).astype(float)) if ties else (lambda shape: rng.normal(size=shape))
    sums, size = draw((n_groups, d)), rng.integers(1, 9, size=n_groups)
    alive = np.ones(n_groups, dtype=bool)
    n_neighbors = min(n_neighbors, n_groups - 1)
    lists = _neighbour_lists(sums, size, alive, n_neighbors + LIST_SLACK)
    version, seen = np.zeros(n_groups, dtype=np.int64), np.zeros(n_groups, dtype=np.int64)
    for _ in range(6):
        share = rng.choice([0.02, 0.1, 0.5])
        moved = np.flatnonzero(alive & (rng.random(n_groups) < share))
        sums[moved] += draw((len(moved), d)) * rng.choice([0.1, 1.0])
        version[moved] += 1
        if alive.sum() > 2 and rng.random() < 0.5:
            dead = rng.choice(np.flatnonzero(alive))
            alive[dead] = False
            version[dead] += 1
        _update_lists(lists, sums, size, alive, version, seen, n_neighbors)
        assert np.array_equal(seen, version)
        assert np.array_equal(_first_neighbours(lists, alive, n_neighbors), _nearest_groups(sums, size, alive, n_neighbors))


@FAST
@given(hnp.arrays(np.int64, st.integers(1, 60), elements=st.integers(0, 40)), st.integers(0, 2**32 - 1))
def test_group_bookkeeping(raw, seed):
    local, g = groups.compact_labels(raw)
    first_seen = list(dict.fromkeys(raw.tolist()))
    assert g == len(first_seen)
    assert np.array_equal(local, [first_seen.index(v) for v in raw])
    start, rows = groups.group_members(local, g)
    for group in range(g):
        assert np.array_equal(rows[start[group]:start[group + 1]], np.flatnonzero(local == group))
    chosen = np.random.default_rng(seed).permutation(g)[: max(1, g // 2)]
    assert np.array_equal(groups.gather_groups(start, np.diff(start), rows, chosen),
                          np.flatnonzero(np.isin(local, chosen)))
    Z = np.random.default_rng(seed).normal(size=(len(raw), 3))
    centroids, radius, sizes = groups.group_shape(Z, local, g)
    for group in range(g):
        member = Z[local == group]
        np.testing.assert_allclose(centroids[group], member.mean(axis=0))
        np.testing.assert_allclose(radius[group], np.sqrt(((member - member.mean(axis=0)) ** 2).sum(axis=1).mean()))
        assert sizes[group] == len(member)


def test_refine_accepts_groups_larger_than_max_size():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    labels = np.repeat(np.arange(4), 15)  # groups of 15 > 2k-1 = 5
    before = naive.sse(X, labels)
    kernels.refine(X, labels, 3, 5)
    sizes = np.bincount(labels)
    assert sizes.min() >= 3 and sizes.max() <= 15
    assert naive.sse(X, labels) < before


# --- stitching windows ----------------------------------------------------------------------------


@FAST
@given(float_matrix(min_rows=2, max_rows=60, max_cols=13, bound=100.0))
def test_principal_axis_matches_numpy(P):
    centred = P - P.mean(axis=0)
    values, vectors = np.linalg.eigh(centred.T @ centred)
    assume(values[-1] > 1e-6 * max(1.0, abs(values).max()))
    assume(len(values) == 1 or values[-1] - values[-2] > 1e-6 * values[-1])  # a well-defined direction
    v = eigen.principal_axis(P, np.arange(len(P)))
    np.testing.assert_allclose(np.linalg.norm(v), 1.0, rtol=1e-12)
    np.testing.assert_allclose(abs(v @ vectors[:, -1]), 1.0, atol=1e-9)  # the same axis as LAPACK's
    assert v[np.argmax(np.abs(v))] > 0  # sign: the largest entry positive


@FAST
@given(st.integers(1, 300), st.integers(1, 5), st.integers(1, 400), st.integers(0, 2**32 - 1))
def test_split_windows_cuts_whole_groups_by_median(m, d, window_rows, seed):
    rng = np.random.default_rng(seed)
    centroids = rng.normal(size=(m + 7, d)) * rng.uniform(0.5, 4.0, size=d)
    sizes = rng.integers(3, 9, size=m + 7).astype(np.int64)
    candidates = rng.permutation(m + 7)[:m].astype(np.int64)
    order, bounds = windows.split_windows(centroids, candidates, sizes, window_rows)
    assert sorted(order.tolist()) == sorted(candidates.tolist()) and bounds[0] == 0 and bounds[-1] == m
    for a, b in zip(bounds[:-1], bounds[1:]):
        assert b > a
        # a window is either small enough or could not be cut further (fewer than 4 groups)
        assert sizes[order[a:b]].sum() <= window_rows or b - a < 4
    if sizes[candidates].sum() > window_rows and m >= 4:  # the first cut: a median split of the centroids
        assert m // 2 in bounds.tolist()
        p = centroids @ eigen.principal_axis(centroids, candidates)
        assert p[order[: m // 2]].max() <= p[order[m // 2:]].min() + 1e-9
    else:
        assert bounds.tolist() == [0, m]


def _recorded(X, labels, g, extra_groups=0, extra_rows=0):
    """A group table (:func:`groups.record_groups`) of ``labels`` (``0..g-1``, every group present)."""
    n, d = X.shape
    table = (np.full((g + extra_groups, d), np.nan), np.full(g + extra_groups, np.nan),
             np.zeros(g + extra_groups, dtype=np.int64), np.zeros(g + extra_groups, dtype=np.int64),
             np.zeros(g + extra_groups, dtype=np.int64))
    pool, head = np.full(n + extra_rows, -1, dtype=np.int64), np.full(n, -7, dtype=np.int64)
    top = groups.record_groups(X, labels, np.arange(n), 0, g, *table, pool, 0, head)
    return table, pool, top, head


@FAST
@given(hnp.arrays(np.int64, st.integers(1, 60), elements=st.integers(0, 40)), st.integers(0, 2**32 - 1))
def test_the_group_table_holds_group_shape_bit_for_bit(raw, seed):
    local, g = groups.compact_labels(raw)
    X = np.random.default_rng(seed).normal(size=(len(raw), 4)) * 1e3
    (centroids, radius, sizes, start, count), pool, top, head = _recorded(X, local, g)
    want = groups.group_shape(X, local, g)
    assert np.array_equal(centroids.view(np.uint64), want[0].view(np.uint64))
    assert np.array_equal(radius.view(np.uint64), want[1].view(np.uint64))
    assert np.array_equal(sizes, want[2]) and top == len(raw)
    assert np.array_equal(head[head >= 0], np.arange(g))  # the groups in order of first appearance
    assert np.array_equal(np.flatnonzero(head >= 0), [np.flatnonzero(local == group)[0] for group in range(g)])
    for group in range(g):
        assert np.array_equal(pool[start[group]:start[group] + count[group]], np.flatnonzero(local == group))


@FAST
@given(hnp.arrays(np.int64, st.integers(1, 80), elements=st.integers(0, 30)), st.integers(1, 6),
       st.floats(0.0, 2.0), st.integers(0, 2**32 - 1))
def test_plane_candidates_are_the_groups_within_the_band_projected_in_column_order(raw, d, band, seed):
    local, g = groups.compact_labels(raw)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(len(raw), d)) * rng.uniform(0.1, 1e3, size=d)
    (centroids, radius, _, _, _), _, _, head = _recorded(X, local, g)
    direction = rng.normal(size=d)
    direction /= np.linalg.norm(direction)
    s, e = sorted(rng.integers(0, len(raw) + 1, size=2).tolist())
    threshold = float(np.median(X[:, 0])) if d == 1 else float(rng.normal())
    got = windows.plane_candidates(centroids, radius, head, s, e, direction, threshold, band)
    ids = head[s:e][head[s:e] >= 0]  # groups by first row, in order
    if not len(ids):
        assert len(got) == 0
        return
    median = np.median(radius[ids])
    want = []
    for group in ids:
        p = 0.0
        for j in range(d):  # column order, one addition at a time
            p += float(centroids[group, j]) * float(direction[j])
        if abs(p - threshold) <= band * (radius[group] + median):
            want.append(group)
    assert got.tolist() == want
    distance = stitch.plane_distance(centroids[ids], direction, threshold)  # the same projection, all groups
    assert np.array_equal(np.sort(got), np.sort(ids[stitch.near_plane(distance, radius[ids], band)]))


def _improve_recorded(X, labels, g, chosen, k, sweeps, window_rows):
    """:func:`windows.improve_recorded_windows` of the groups ``chosen`` of ``labels`` (``0..g-1``), in a table of
    their own: ``(new labels, gain, table, pool, top before, top after, head, next id)``."""
    labels = labels.copy()
    rows = int(np.isin(labels, chosen).sum())
    table, pool, top, head = _recorded(X, labels, g, rows // k + 1, rows)
    gain, next_id, new_top = windows.improve_recorded_windows(X, labels, chosen, *table, pool, top, head, g, k,
                                                              2 * k - 1, 4, sweeps, window_rows)
    return labels, gain, table, pool, top, new_top, head, next_id


@FAST
@given(partitioned(), st.integers(1, 3), st.integers(10, 80), st.integers(0, 2**32 - 1))
def test_recorded_windows_never_raise_sse_and_touch_only_candidates(case, sweeps, window_rows, seed):
    X, k, labels = case
    X = np.ascontiguousarray(X, dtype=np.float64)
    g = int(labels.max()) + 1
    chosen = np.sort(np.random.default_rng(seed).permutation(g)[: max(1, g // 2)]).astype(np.int64)
    new, gain = _improve_recorded(X, labels, g, chosen, k, sweeps, window_rows)[:2]
    outside = ~np.isin(labels, chosen)
    assert np.array_equal(new[outside], labels[outside])
    sizes = np.bincount(new)
    assert sizes[sizes > 0].min() >= k and sizes.max() <= 2 * k - 1
    before, after = naive.sse(X, labels), naive.sse(X, new)
    assert gain >= 0 and after <= before + 1e-9 * max(1.0, before)
    np.testing.assert_allclose(before - after, gain, atol=1e-7 * max(1.0, before))
    # every window is re-solved as a whole: rows of an untouched group keep one label, and no new
    # group mixes candidate and non-candidate rows
    for label in np.unique(new[~outside]):
        assert not outside[new == label].any()


@FAST
@given(partitioned(), st.integers(1, 3), st.integers(10, 80), st.integers(0, 2**32 - 1))
def test_recorded_windows_do_not_depend_on_group_ids_and_record_their_groups(case, sweeps, window_rows, seed):
    X, k, labels = case
    g = int(labels.max()) + 1
    X = np.ascontiguousarray(X, dtype=np.float64)
    chosen = np.sort(np.random.default_rng(seed).permutation(g)[: max(1, g // 2)]).astype(np.int64)
    want, want_gain = _improve_recorded(X, labels, g, chosen, k, sweeps, window_rows)[:2]
    # the same groups under other ids (ids in reverse order of first appearance), the candidates in the
    # same order: the same partition and gain, bit for bit
    ids = np.arange(g)[::-1].copy()
    got, gain, table, pool, top, new_top, head, next_id = _improve_recorded(X, ids[labels], g, ids[chosen], k, sweeps,
                                                                            window_rows)
    assert gain == want_gain
    assert np.array_equal(groups.compact_labels(got)[0], groups.compact_labels(want)[0])  # the same partition
    # the table is that of the new labels, as if recorded afresh
    live = np.unique(got)
    fresh = groups.group_shape(X, groups.compact_labels(got)[0], len(live))
    order = groups.compact_labels(got)[0]
    first = [got[np.flatnonzero(order == i)[0]] for i in range(len(live))]
    assert np.array_equal(table[0][first].view(np.uint64), fresh[0].view(np.uint64))
    assert np.array_equal(table[2][first], fresh[2])
    assert np.array_equal(head[head >= 0], first)
    for group in first:
        assert np.array_equal(pool[table[3][group]:table[3][group] + table[4][group]], np.flatnonzero(got == group))
    assert next_id - g == len(np.setdiff1d(live, ids)) and new_top - top == int(np.isin(got, live[live >= g]).sum())


@FAST
@given(st.integers(20, 600), st.integers(1, 6), st.sampled_from([0.25, 0.5, 1.0]), st.integers(20, 200),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_grow_tree_matches_the_recursive_reference(n, d, fraction, block_size, fixed, seed):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, d)) * rng.uniform(0.2, 3.0, size=d) + rng.normal(size=d)
    direction = np.full(d, 1.0 / np.sqrt(d)) if fixed else None
    got = kernels.grow_tree(Z, fraction, float(block_size), 0.0, 8, np.empty(0) if direction is None else direction)
    want = naive.split_tree(Z, fraction, block_size, 0.0, 8, direction)
    for a, b in zip(got[2:4], want[2:4]):
        assert np.array_equal(a, b)  # the same shape: children and leaves in the same order
    assert got[5] == want[5]
    np.testing.assert_allclose(got[0], want[0], atol=1e-8)
    np.testing.assert_allclose(got[1], want[1], atol=1e-8)
    np.testing.assert_allclose(got[4], want[4])
    if len(got[1]):  # every leaf's estimated rows within the block size, or too few rows to split
        leaves = kernels.route(np.ascontiguousarray(Z), got[0], got[1], got[2], got[3])
        counts = np.bincount(leaves, minlength=got[5])
        assert ((counts / fraction <= block_size) | (counts < 2 * 8)).all()  # no ties in continuous data
        assert counts.sum() == n and (counts >= 8).all()


@FAST
@given(st.integers(0, 1500), st.integers(1, 5), st.sampled_from([0.25, 0.5, 1.0]), st.integers(20, 300),
       st.sampled_from([0.0, 400.0, 3000.0]), st.integers(2, 12), st.booleans(), st.sampled_from(["normal", "ties"]),
       st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_the_split_tree_grown_on_several_cores_is_the_tree_of_one(n, d, fraction, block_size, one_block_rows,
                                                                   min_child, fixed, data, depth, seed):
    """The client grows a large sample's tree in subtrees side by side (``pipeline.blocking.grow_tree``):
    the same nodes, thresholds and leaves, in the same order, as the one-core kernel; the root's rule
    (one block up to ``one_block_rows``) applies to the root only; rows tied on a split stay whole."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, d)) * rng.uniform(0.2, 3.0, size=d)
    if data == "ties":
        Z = np.round(Z)
        Z[: n // 3] = 0.0
    direction = np.full(d, 1.0 / np.sqrt(d)) if fixed else np.empty(0)
    want = kernels.grow_tree(Z, fraction, float(block_size), one_block_rows, min_child, direction)
    got = blocking.grow_tree(Z, fraction, float(block_size), one_block_rows, min_child, direction, threads=3,
                             depth=depth)
    for a, b in zip(got[:5], want[:5]):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert got[5] == want[5]


@FAST
@given(st.integers(0, 300), st.integers(1, 5), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_routing_equals_one_row_at_a_time(n, d, n_nodes, seed):
    """The kernels descend several rows side by side: every row still reaches the leaf a plain
    descent gives, in trees of uneven depth and for any number of rows."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, d))
    # a random binary tree: each new node hangs off a free child slot of an earlier one
    left = np.full(n_nodes, -1, dtype=np.int64)
    right = np.full(n_nodes, -1, dtype=np.int64)
    for node in range(1, n_nodes):
        slots = [(p, side) for p in range(node) for side, kids in enumerate((left, right)) if kids[p] == -1]
        p, side = slots[rng.integers(len(slots))]
        (left, right)[side][p] = node
    n_leaves = 0
    for p in range(n_nodes):  # the free slots become leaves, numbered in node order
        for kids in (left, right):
            if kids[p] == -1:
                kids[p] = -1 - n_leaves
                n_leaves += 1
    directions = rng.normal(size=(n_nodes, d))
    thresholds = rng.normal(size=n_nodes) * 0.5
    want = naive.route(Z, directions, thresholds, left, right)
    assert np.array_equal(kernels.route(Z, directions, thresholds, left, right), want)
    assert np.array_equal(kernels.route_raw(Z * 2.0, np.zeros(d), np.full(d, 2.0), directions, thresholds,
                                            left, right), want)
    assert want.max(initial=0) < n_leaves


@FAST
@given(st.integers(1, 400), st.integers(1, 6), st.integers(0, 2**32 - 1), st.booleans())
def test_routing_raw_rows_is_routing_their_z_scores(n, d, seed, fortran):
    """The route tasks' kernel standardizes row by row: every row reaches the leaf its standardized
    row reaches (the split tree's own routing), with missing and non-finite values and constant
    columns, whichever order the rows are stored in."""
    from microagg.pipeline.blocking import at_mean

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.2, 3.0, size=d) + rng.normal(size=d)
    X[rng.random((n, d)) < 0.05] = np.nan
    X[rng.random((n, d)) < 0.01] = np.inf
    if d > 1:
        X[:, 1] = 2.5  # a constant column (std 0)
    with warnings.catch_warnings():  # an all-NaN column (Hypothesis finds them): NaN mean and std, fixed below
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, std = np.nanmean(np.where(np.isfinite(X), X, np.nan), axis=0), np.nanstd(X, axis=0)
    mean, std = np.nan_to_num(mean), np.where(np.isfinite(std), std, 0.0)
    Z = at_mean(kernels.standardize(X, mean, std))
    tree = kernels.grow_tree(np.ascontiguousarray(np.nan_to_num(Z, posinf=0.0)), 1.0, 20.0, 0.0, 4, np.empty(0))
    raw = np.asfortranarray(X) if fortran else X
    want = (kernels.route(Z, *tree[:4]) if len(tree[1]) else np.zeros(n, dtype=np.int64))
    assert np.array_equal(kernels.route_raw(raw, mean, std, *tree[:4]), want)


@FAST
@given(st.integers(0, 80), st.integers(1, 12), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_file_pieces_cut_a_piece_by_file(n, n_groups, files, seed):
    rng = np.random.default_rng(seed)
    row_id = np.sort(rng.choice(200, size=n, replace=False)).astype(np.int64)
    group = rng.integers(0, n_groups, size=n).astype(np.int64)
    starts = np.concatenate([[0], np.sort(rng.choice(np.arange(1, 200), size=files - 1, replace=False))])
    cuts, rank, ids, id_bounds = groups.file_pieces(row_id, group, n_groups, starts.astype(np.int64))
    assert cuts.tolist() == [0, *np.searchsorted(row_id, starts[1:]).tolist(), n]
    for f in range(files):
        a, b = cuts[f], cuts[f + 1]
        used = np.unique(group[a:b])  # the file's groups in id order
        assert ids[id_bounds[f]:id_bounds[f + 1]].tolist() == used.tolist()
        assert np.array_equal(used[rank[a:b]], group[a:b])


@settings(deadline=None, max_examples=40)
@given(st.integers(1, 60), st.integers(1, 4), st.integers(0, 2**62), st.integers(0, 3))
def test_tuple_sample_takes_equal_tuples_together_wherever_they_are(n_distinct, d, seed, seed_rows):
    """A sample of tuples by :func:`kernels.row_hashes` below a threshold: a row's membership depends only
    on its values and the seed (equal rows, -0.0 as 0.0, in or out together, in any order)."""
    rng = np.random.default_rng(seed_rows)
    distinct = rng.integers(-3, 4, size=(n_distinct, d)).astype(np.float64)
    rows = rng.integers(0, n_distinct, size=200)
    X = distinct[rows]
    X[X == 0] = np.where(rng.random((X == 0).sum()) < 0.5, -0.0, 0.0)
    threshold = np.uint64(2**63)
    mask = kernels.row_hashes(X, seed) < threshold
    for t in range(n_distinct):
        assert len(set(mask[rows == t].tolist())) <= 1
    order = rng.permutation(len(X))
    np.testing.assert_array_equal(kernels.row_hashes(np.ascontiguousarray(X[order]), seed) < threshold,
                                  mask[order])
    assert not (kernels.row_hashes(X, seed) < np.uint64(0)).any()


def test_tuple_sample_rate_follows_the_threshold():
    X = np.random.default_rng(0).normal(size=(20000, 3))
    for fraction in (0.05, 0.5):
        rate = (kernels.row_hashes(X, 7) < np.uint64(int(fraction * 2.0**64))).mean()
        assert abs(rate - fraction) < 4 * np.sqrt(fraction * (1 - fraction) / len(X))


@FAST
@given(X=hnp.arrays(np.float64, st.tuples(st.integers(0, 60), st.integers(0, 3)),
                    elements=st.sampled_from([0.0, -0.0, 1.0, 2.5, np.nan, np.inf])))
def test_copy_classes_are_the_identical_finite_rows(X):
    """Two rows share a class exactly when they are equal and finite (-0.0 equals 0.0); classes are
    numbered by their lowest row, which ``first`` gives, and ``size`` counts their rows."""
    cls, first, size = ties.copy_classes(np.ascontiguousarray(X))
    finite = np.isfinite(X).all(axis=1)
    same = (X[:, None, :] == X[None, :, :]).all(axis=2) & finite[:, None] & finite[None, :]
    np.fill_diagonal(same, True)
    np.testing.assert_array_equal(cls[:, None] == cls[None, :], same)
    np.testing.assert_array_equal(first, [np.flatnonzero(cls == c)[0] for c in range(len(first))])
    np.testing.assert_array_equal(size, np.bincount(cls, minlength=len(first)))
    assert (np.diff(first) > 0).all()


def test_copy_classes_split_a_run_of_many_distinct_rows_only_into_identical_rows():
    """Rows whose projections are all equal but which are all distinct (x, -x scaled by the weights'
    ratio): past RUN_CLASSES of them a row is a class of its own; a class still never mixes rows."""
    ratio = 1.0 + (1 * 0.6180339887498949) % 1.0
    a = np.arange(1.0, 101.0)
    X = np.repeat(np.column_stack([a * ratio, -a]), 2, axis=0)  # every projection 0, each row twice
    cls, first, size = ties.copy_classes(np.ascontiguousarray(X))
    for c in range(len(first)):
        assert (X[cls == c] == X[first[c]]).all()
    assert size.max() == 2 and len(first) > 100


def test_the_blocked_solve_calls_its_kernels_without_the_dispatchers_compile_path(monkeypatch):
    """Once compiled, every kernel call of the blocked solve (and of auto's members' local search, the
    local and ils refinements) finds its compiled version directly: the local search, called with
    its defaults left to Numba, went through the dispatcher's compile path on every call (about
    0.4 ms each, once per block)."""
    import numba.core.dispatcher as dispatcher

    from microagg.pipeline import blocked, stitch
    from microagg.pipeline.solver import Solver

    Z = np.random.default_rng(3).normal(size=(24_000, 5))
    solver = Solver.build("mdav", {}, "none", {}, 0)
    plan = blocked.Blocking(block_size=500, blocks_per_task=8)
    first, _ = blocked.blocked_partition(Z, 3, solver, stitch.STITCHING["light"], plan, threads=2)  # compiles
    fallbacks = []
    compile_for_args = dispatcher._DispatcherBase._compile_for_args

    def counted(self, *args, **kws):
        fallbacks.append(self.py_func.__name__)
        return compile_for_args(self, *args, **kws)

    others = [dict(method="auto"), dict(method="mdav", refine="local"),
              dict(method="mdav", refine="ils", refine_options={"iterations": 30})]
    for options in others:  # compiled
        microagg.partition(Z[:600], 3, **options)
    monkeypatch.setattr(dispatcher._DispatcherBase, "_compile_for_args", counted)
    again, info = blocked.blocked_partition(Z, 3, solver, stitch.STITCHING["light"], plan, threads=2)
    for options in others:  # auto's local search of its members, the local and ils refinements
        microagg.partition(Z[:600], 3, **options)
    assert info["blocks"] >= 40 and fallbacks == []
    np.testing.assert_array_equal(again, first)


# --- a task's rows copied once: standardized as gathered, group shapes read where the rows are ------


@FAST
@given(data=st.data())
def test_the_standardized_rows_and_group_shapes_of_rows_in_another_order_are_bit_for_bit_the_gathered_ones(data):
    # a task's rows are standardized as they are gathered in its order, and its groups' shapes read
    # the rows where they are (kernels.standardize's rows, groups.group_shape's at): the same bits as
    # from the copy in that order, which the pipeline made before
    X = data.draw(float_matrix(1, 40))
    n, d = X.shape
    if data.draw(st.booleans()):
        X[data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, d - 1))] = np.nan  # a missing cell
    rows = np.asarray(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=60)), dtype=np.int64)
    mean = np.asarray(data.draw(st.lists(st.floats(-1e3, 1e3), min_size=d, max_size=d)))
    std = np.asarray(data.draw(st.lists(st.sampled_from([0.0, 0.3, 1.5, 1e3]), min_size=d, max_size=d)))  # 0: zeros
    gathered = np.ascontiguousarray(X[rows])
    np.testing.assert_array_equal(kernels.standardize(X, mean, std, rows), kernels.standardize(gathered, mean, std))
    Z = np.nan_to_num(X)
    labels = np.asarray(data.draw(st.lists(st.integers(0, 3), min_size=len(rows), max_size=len(rows))),
                        dtype=np.int64)
    labels, g = groups.compact_labels(labels)
    for at_rows, plain in zip(groups.group_shape(Z, labels, g, rows),
                              groups.group_shape(np.ascontiguousarray(Z[rows]), labels, g)):
        np.testing.assert_array_equal(at_rows, plain)


def test_a_task_whose_group_table_starts_empty_and_grows_solves_it_the_same(monkeypatch):
    # the table of a task's groups (shapes, members, first rows) grows by doubling when the stitching's new
    # groups need more room: from one entry on, the partition and the stitching's gain are the same, with
    # copies of records (their groups formed first) and a stitching deep enough to re-partition windows
    from microagg.pipeline import blocked, stitch
    from microagg.pipeline.solver import Solver

    rng = np.random.default_rng(11)
    Z = rng.normal(size=(4_000, 3))
    Z[:300] = Z[0]  # 300 copies of one record
    plan = blocked.Blocking(block_size=250, blocks_per_task=4, one_block_rows=250)
    solver = Solver.build("mdav")
    for settings in (stitch.STITCHING["light"], stitch.STITCHING["deep"]):
        roomy = blocked.blocked_partition(Z, 5, solver, settings, plan, threads=1)
        monkeypatch.setattr(stitch.GroupTable, "first_room", 0)
        tight = blocked.blocked_partition(Z, 5, solver, settings, plan, threads=1)
        monkeypatch.undo()
        np.testing.assert_array_equal(tight[0], roomy[0])
        assert tight[1]["stitch_sse_gain"] == roomy[1]["stitch_sse_gain"] > 0
        assert tight[1]["tasks"] > 1 and tight[1]["blocks"] > 8


def test_a_task_solved_from_its_raw_rows_where_they_are_equals_the_task_solved_from_a_standardized_copy():
    # the release's tasks pass their raw rows and (mean, std), the in-memory blocked solve its rows'
    # positions: the task's rows are copied once, standardized on the way; the labels, each row's
    # upper plane and the gain are those of the standardized copy, with missing cells too
    from microagg.pipeline import blocked, blocking, stitch
    from microagg.pipeline.solver import Solver

    rng = np.random.default_rng(5)
    n = 6_000
    X = rng.lognormal(size=(n, 4)) * [1.0, 10.0, 100.0, 1000.0]
    X[rng.integers(0, n, 40), rng.integers(0, 4, 40)] = np.nan
    mean, std = np.nanmean(X, axis=0), np.nanstd(X, axis=0)
    Z = kernels.standardize(X, mean, std)
    plan = blocked.Blocking(block_size=300, blocks_per_task=4)
    filled = np.nan_to_num(Z)
    forest = blocking.build_forest(filled, None, 1, 1.0, plan.block_size, plan.blocks_per_task * plan.block_size, 5,
                                   plan.order, plan.one_block_rows)
    leaf = forest.route(filled)
    settings = stitch.STITCHING["light"]
    solver = Solver.build("mdav")
    tasks = 0
    for task in range(forest.n_tasks):
        rows = np.flatnonzero(forest.leaf_task[leaf] == task)
        tree, local, leaf_offset, tag_offset = forest.local_task(task)
        if not len(rows) or not tree.task_ancestors[local]:
            continue
        args = (leaf[rows] - leaf_offset, tree, local, 5, solver, settings, tag_offset)
        copied = stitch.solve_task(np.ascontiguousarray(Z[rows]), *args)
        raw = stitch.solve_task(np.ascontiguousarray(X[rows]), *args, scale=(mean, std))
        where = stitch.solve_task(Z, *args, rows=rows)
        for other in (raw, where):
            np.testing.assert_array_equal(other[0], copied[0])
            np.testing.assert_array_equal(other[1], copied[1])
            assert other[2] == copied[2]
        tasks += 1
        assert (copied[1] >= 0).any() and np.isnan(X[rows]).any()
    assert tasks >= 4
