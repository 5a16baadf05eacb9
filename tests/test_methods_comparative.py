"""The methods of the comparative study: V-MDAV, DBA, k-Ward and the MDAV/GA hybrid.

Invariants on Hypothesis-drawn matrices for every method (groups of >= k rows, <= 2k-1 where the
method promises it, every row labelled, labels 0..g-1, deterministic, the same seed the same
result); the kernels against slow references written from the papers' text (below); and the
published information loss of ``shared/papers/comparative-study-microaggregation.txt`` Tables 6-7
on the CASC census and EIA files, within 2% relative, or our own value where the paper gives none
or where it is not reproduced (the kernel's docstring says why).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import microagg
from conftest import EIA_NON_QI
from microagg import kernels
from microagg.kernels.dba import dba1, dba2
from microagg.kernels.ga import evolve, macro_groups
from microagg.kernels.kward import _split as _kward_split
from microagg.kernels.kward import kward
from microagg.pipeline.errors import InputError
from microagg.pipeline.methods import METHODS, run_method

NEW = ("vmdav", "dba", "kward", "ga")
FAST = settings(deadline=None, max_examples=60)


def c64(X):
    return np.ascontiguousarray(X, dtype=np.float64)


@st.composite
def matrix_and_k(draw, max_rows=40):
    """``(X, k)``: k in 2..5 and an ``(n, d)`` matrix with n in [k, max_rows]; small integers (ties
    and duplicate rows abound) or bounded floats."""
    k = draw(st.integers(2, 5))
    n = draw(st.integers(k, max_rows))
    d = draw(st.integers(1, 4))
    if draw(st.booleans()):
        elements = st.integers(0, 4).map(float)
    else:
        elements = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
    return c64(draw(hnp.arrays(np.float64, (n, d), elements=elements))), k


@st.composite
def continuous_matrix_and_k(draw, max_rows=30):
    """``(X, k)`` with X standard normal from a drawn seed: no ties, so a reference that computes
    the same quantities in another order must find the same partition."""
    k = draw(st.integers(2, 4))
    n = draw(st.integers(k, max_rows))
    d = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return c64(rng.standard_normal((n, d))), k


def assert_partition(labels, n, k, bounded):
    assert labels.dtype == np.int64
    assert labels.shape == (n,)
    counts = np.bincount(labels)
    assert labels.min() == 0 and (counts > 0).all(), "labels are not 0..g-1, all used"
    assert counts.min() >= k, f"group of {counts.min()} < k={k}"
    if bounded:
        assert counts.max() <= 2 * k - 1, f"group of {counts.max()} > 2k-1"


def canonical(labels):
    """Labels renumbered by first appearance: equal iff the partitions are equal."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(first.shape[0], dtype=np.int64)
    rank[np.argsort(first)] = np.arange(first.shape[0])
    return rank[inverse]


def sse(Z, labels):
    return sum(float(((Z[labels == g] - Z[labels == g].mean(axis=0)) ** 2).sum()) for g in np.unique(labels))


# --- invariants --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NEW)
@FAST
@given(data=matrix_and_k())
def test_every_method_returns_a_k_partition_deterministically(name, data):
    X, k = data
    method = METHODS[name]
    labels = run_method(method, X, k)
    assert_partition(labels, X.shape[0], k, method.bounded)
    np.testing.assert_array_equal(run_method(method, X.copy(), k), labels)


def test_catalogue_entries():
    assert METHODS["vmdav"].options == {"gamma": 0.2}
    assert METHODS["vmdav"].bounded is False
    assert METHODS["dba"].bounded and METHODS["kward"].bounded and METHODS["ga"].bounded
    assert METHODS["ga"].options["seed"] == 0 and METHODS["ga"].options["macro"] == 7
    for name in NEW:
        assert "shared/papers/" in METHODS[name].reference


@FAST
@given(data=matrix_and_k(), gamma=st.floats(0.0, 3.0))
def test_vmdav_any_gamma(data, gamma):
    X, k = data
    labels = run_method(METHODS["vmdav"], X, k, {"gamma": gamma})
    assert_partition(labels, X.shape[0], k, bounded=False)
    # groups are formed with k..2k-1 rows; only the fewer than k leftovers can go beyond
    assert np.bincount(labels).max() <= 2 * k - 1 + k - 1


def test_vmdav_can_exceed_2k_minus_1():
    """Why ``bounded=False``: two tight clusters of 2k-1 and one straggler, which joins a full group."""
    k = 3
    X = c64([[0, 0], [0, 0.01], [0.01, 0], [0.01, 0.01], [0.005, 0.005],
             [10, 10], [10, 10.01], [10.01, 10], [10.01, 10.01], [10.005, 10.005], [10.3, 10.3]])
    labels = run_method(METHODS["vmdav"], X, k, {"gamma": 1.1})
    assert np.bincount(labels).tolist() == [5, 6]


@FAST
@given(data=matrix_and_k(), seed=st.integers(0, 2**31), macro=st.integers(1, 4),
       population=st.integers(1, 6), generations=st.integers(0, 5))
def test_ga_same_seed_same_result_and_never_worse_than_mdav(data, seed, macro, population, generations):
    X, k = data
    options = {"seed": seed, "macro": macro, "population": population, "generations": generations}
    labels = run_method(METHODS["ga"], X, k, options)
    assert_partition(labels, X.shape[0], k, bounded=True)
    np.testing.assert_array_equal(run_method(METHODS["ga"], X.copy(), k, options), labels)
    base = kernels.mdav(X, k)
    # elitism, and the MDAV chromosome in every macro-group's first population
    assert sse(X, labels) <= sse(X, base) * (1 + 1e-9) + 1e-9


def test_ga_seed_changes_the_search_not_the_guarantees():
    Z = c64(np.random.default_rng(5).standard_normal((120, 3)))
    runs = [run_method(METHODS["ga"], Z, 3, {"seed": s, "generations": 30, "population": 10}) for s in (0, 1)]
    for labels in runs:
        assert_partition(labels, 120, 3, bounded=True)
    assert not np.array_equal(canonical(runs[0]), canonical(runs[1]))


@pytest.mark.parametrize("name, options", [
    ("vmdav", {"gamma": -0.1}), ("vmdav", {"gamma": float("nan")}), ("vmdav", {"gamma": "0.2"}),
    ("ga", {"seed": -1}), ("ga", {"seed": 1.5}), ("ga", {"population": 0}), ("ga", {"macro": 0}),
    ("ga", {"mutation": 1.5}), ("ga", {"crossover": True}), ("dba", {"gamma": 1.0}), ("kward", {"seed": 0}),
])
def test_bad_options_are_input_errors(name, options):
    with pytest.raises(InputError, match=next(iter(options))):
        run_method(METHODS[name], c64(np.arange(20.0).reshape(10, 2)), 2, options)


# --- the kernels against references written from the papers' text -------------------------------


def _sq(Z, p):
    return ((Z - p) ** 2).sum(axis=1)


def naive_vmdav(Z, k, gamma):
    """Section 3.6: fixed centroid; farthest unassigned record + its k-1 nearest; extend while the
    unassigned record nearest to the group (d_in, to its nearest member) is gamma-times nearer (in
    squared distance) than to its nearest other unassigned record (d_out); leftovers to the nearest
    group centroid."""
    n = Z.shape[0]
    labels = np.full(n, -1)
    if n < 2 * k:
        return np.zeros(n, dtype=np.int64)
    c = Z.mean(axis=0)
    g = 0
    while (labels < 0).sum() >= k:
        free = np.flatnonzero(labels < 0)
        e = free[np.argmax(_sq(Z[free], c))]
        others = free[free != e]
        members = [e, *others[np.argsort(_sq(Z[others], Z[e]), kind="stable")[:k - 1]]]
        labels[members] = g
        while len(members) < 2 * k - 1 and (labels < 0).any() and gamma > 0:
            free = np.flatnonzero(labels < 0)
            d_in_all = np.array([min(_sq(Z[members], Z[u])) for u in free])
            u = free[np.argmin(d_in_all)]
            rest = free[free != u]
            d_out = _sq(Z[rest], Z[u]).min() if rest.size else np.inf
            if not d_in_all.min() < gamma * d_out:
                break
            labels[u] = g
            members.append(u)
        g += 1
    centroids = np.array([Z[labels == h].mean(axis=0) for h in range(g)])
    for i in np.flatnonzero(labels < 0):
        labels[i] = np.argmin(_sq(centroids, Z[i]))
    return labels


def naive_dba(Z, k):
    """Section 3.3. DBA-1: the unassigned record whose k-neighbourhood (itself and its k-1 nearest
    unassigned records) has the smallest SSE forms a group with it; leftovers to the nearest
    centroid. DBA-2: in reverse order of formation, decompose a group into the nearest other
    centroids when that lowers the SSE; groups of >= 2k split by MDAV."""
    n = Z.shape[0]
    if n < 2 * k:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    labels = np.full(n, -1)
    g = 0
    while (labels < 0).sum() >= k:
        free = np.flatnonzero(labels < 0)
        hoods = [np.r_[x, free[free != x][np.argsort(_sq(Z[free[free != x]], Z[x]), kind="stable")[:k - 1]]]
                 for x in free]
        spread = [((Z[h] - Z[h].mean(axis=0)) ** 2).sum() for h in hoods]
        labels[hoods[int(np.argmin(spread))]] = g
        g += 1
    centroids = np.array([Z[labels == h].mean(axis=0) for h in range(g)])
    for i in np.flatnonzero(labels < 0):
        labels[i] = np.argmin(_sq(centroids, Z[i]))
    first = labels.copy()
    for q in range(g - 1, -1, -1):
        rows = np.flatnonzero(labels == q)
        others = [h for h in range(g) if h != q and (labels == h).any()]
        if rows.size == 0 or not others:
            continue
        centroids = np.array([Z[labels == h].mean(axis=0) for h in others])
        trial = labels.copy()
        trial[rows] = [others[int(np.argmin(_sq(centroids, Z[i])))] for i in rows]
        if sse(Z, trial) < sse(Z, labels):
            labels = trial
    out = np.empty(n, dtype=np.int64)
    nxt = 0
    for q in np.unique(labels):
        rows = np.flatnonzero(labels == q)
        sub = kernels.mdav(c64(Z[rows]), k) if rows.size >= 2 * k else np.zeros(rows.size, dtype=np.int64)
        out[rows] = nxt + sub
        nxt += sub.max() + 1
    return first, out


def naive_kward(Z, k):
    """Domingo-Ferrer & Mateo-Sanz: the k nearest of MDAV's two extremes as two groups, then Ward
    (the merge of least SSE increase) never joining two groups of >= k, until all have >= k;
    recursively on groups of >= 2k. Brute force over all admissible pairs at every merge."""
    labels = np.zeros(Z.shape[0], dtype=np.int64)
    todo = [np.arange(Z.shape[0])]
    groups = []
    while todo:
        rows = todo.pop()
        if rows.size < 2 * k:
            groups.append(rows)
            continue
        X = Z[rows]
        r = int(np.argmax(_sq(X, X.mean(axis=0))))
        first = np.argsort(_sq(X, X[r]), kind="stable")[:k]
        rest = np.setdiff1d(np.arange(rows.size), first)
        s = rest[int(np.argmax(_sq(X[rest], X[r])))]
        second = rest[np.argsort(_sq(X[rest], X[s]), kind="stable")[:k]]
        clusters = [list(first), list(second)] + [[i] for i in np.setdiff1d(rest, second)]
        while any(len(c) < k for c in clusters):
            best = None
            for a in range(len(clusters)):
                for b in range(a + 1, len(clusters)):
                    na, nb = len(clusters[a]), len(clusters[b])
                    if na >= k and nb >= k:
                        continue
                    cost = na * nb / (na + nb) * ((X[clusters[a]].mean(0) - X[clusters[b]].mean(0)) ** 2).sum()
                    if best is None or cost < best[0]:
                        best = (cost, a, b)
            _, a, b = best
            clusters[a] = clusters[a] + clusters[b]
            del clusters[b]
        for c in clusters:
            todo.append(rows[np.sort(c)])
    for g, rows in enumerate(groups):
        labels[rows] = g
    return labels


@FAST
@given(data=continuous_matrix_and_k(), gamma=st.sampled_from([0.0, 0.2, 1.1, 2.0]))
def test_vmdav_kernel_matches_reference(data, gamma):
    Z, k = data
    np.testing.assert_array_equal(canonical(run_method(METHODS["vmdav"], Z, k, {"gamma": gamma})),
                                  canonical(naive_vmdav(Z, k, gamma)))


@FAST
@given(data=continuous_matrix_and_k())
def test_dba_kernels_match_reference(data):
    Z, k = data
    first, final = naive_dba(Z, k)
    labels1 = dba1(Z, k)
    np.testing.assert_array_equal(canonical(labels1), canonical(first))
    np.testing.assert_array_equal(canonical(dba2(Z, labels1, k)), canonical(final))
    np.testing.assert_array_equal(run_method(METHODS["dba"], Z, k), dba2(Z, labels1, k))


@st.composite
def tied_matrix_and_k(draw):
    """``(X, k)``: whole numbers 0..3 (copies of rows everywhere) and k = 2 or 4, so that every mean,
    squared distance and SSE DBA-1 computes is exact: its labels must be the reference's, ties
    included."""
    k = draw(st.sampled_from([2, 4]))
    n = draw(st.integers(k, 40))
    d = draw(st.integers(1, 3))
    return c64(draw(hnp.arrays(np.float64, (n, d), elements=st.integers(0, 3).map(float)))), k


@FAST
@given(data=tied_matrix_and_k())
def test_dba1_matches_reference_on_copies_of_rows(data):
    """DBA-1 shares one candidate list among the copies of a row (kernels/ties.py): the groups are
    still those of the literal algorithm, every tie going to the lowest row."""
    Z, k = data
    first, _ = naive_dba(Z, k)
    np.testing.assert_array_equal(canonical(dba1(Z, k)), canonical(first))


@pytest.mark.parametrize("k", [3, 5])
def test_dba1_on_a_zero_inflated_input_matches_reference(k):
    """300 rows, 90 % of them copies of the all-zero record, the rest continuous: the zeros' shared
    list is scanned again and again as they are grouped, and the groups are the literal algorithm's."""
    rng = np.random.default_rng(k)
    X = rng.lognormal(size=(300, 4))
    X[rng.random(300) < 0.9] = 0.0
    Z = c64(microagg.standardize(X)[0])
    first, _ = naive_dba(Z, k)
    np.testing.assert_array_equal(canonical(dba1(Z, k)), canonical(first))


@FAST
@given(data=continuous_matrix_and_k())
def test_kward_kernel_matches_reference(data):
    Z, k = data
    np.testing.assert_array_equal(canonical(run_method(METHODS["kward"], Z, k)), canonical(naive_kward(Z, k)))


def kward_by_passes(Z, k):
    """k-Ward's recursion with every segment split by its pass (``kernels.kward._split``), copies of
    one record included: the kernel's loop without its closed form for them."""
    labels = np.zeros(Z.shape[0], dtype=np.int64)
    todo, groups = [np.arange(Z.shape[0])], []
    while todo:
        rows = todo.pop()
        if rows.size < 2 * k:
            groups.append(rows)
            continue
        local = _kward_split(Z, rows, k)
        todo.extend(rows[local == c] for c in range(local.max() + 1))
    for g, rows in enumerate(sorted(groups, key=lambda r: r.min())):
        labels[rows] = g
    return labels


@FAST
@given(data=tied_matrix_and_k())
def test_kward_on_copies_of_rows_matches_its_passes(data):
    """A segment of copies of one record is split in closed form (every merge costs 0, so each pass
    peels one group of k): on whole numbers, where every centroid of copies is exact, the groups
    are those of the passes themselves."""
    Z, k = data
    np.testing.assert_array_equal(kward(Z, k), kward_by_passes(Z, k))


@pytest.mark.parametrize("share", [0.9, 1.0])
def test_kward_on_a_zero_inflated_input_matches_its_passes(share):
    """300 rows of which a share are the all-zero record (raw: their centroids are exactly 0). With
    every record a copy, the groups are k rows in row order, the last 300 mod k rows in the first."""
    rng = np.random.default_rng(3)
    X = rng.lognormal(size=(300, 4))
    X[rng.random(300) < share] = 0.0
    for k in (3, 7):
        labels = kward(c64(X), k)
        np.testing.assert_array_equal(labels, kward_by_passes(c64(X), k))
    if share == 1.0:
        expected = np.arange(300) // 7
        expected[expected == 300 // 7] = 0
        np.testing.assert_array_equal(labels, expected)


def test_ga_macro_groups_are_mdav_on_the_average_vectors():
    """Steps 3-5 of section 3.1: MDAV's k-groups, grouped in sevens (K = 21 at k = 3) by MDAV."""
    Z = c64(np.random.default_rng(2).standard_normal((300, 4)))
    labels, macro_of_group = macro_groups(Z, 3, 7)
    np.testing.assert_array_equal(labels, kernels.mdav(Z, 3))
    centroids = c64([Z[labels == g].mean(axis=0) for g in range(labels.max() + 1)])
    np.testing.assert_array_equal(macro_of_group, kernels.mdav(centroids, 7))
    # 100 k-groups = 14 x 7 + 2: MDAV's last macro-group takes the 2 extra average vectors
    assert sorted(np.bincount(macro_of_group).tolist()) == [7] * 13 + [9]


def test_ga_evolve_is_bit_for_bit_and_improves():
    Z = c64(np.random.default_rng(3).standard_normal((21, 3)))
    start = canonical(kernels.mdav(Z, 3))
    runs = [evolve(Z, 3, start, np.random.Generator(np.random.PCG64(np.random.SeedSequence((0, 7)))),
                   20, 50, 0.5, 0.02) for _ in range(2)]
    np.testing.assert_array_equal(runs[0], runs[1])
    assert sse(Z, runs[0]) < sse(Z, start)


# --- published information loss (comparative study Tables 6-7) ----------------------------------

# (method, dataset, k) -> published IL: V-MDAV and its MDAV row quote Solanas & Martinez-Balleste
# (2006), DBA-1 and DBA-2 quote Lin et al. (2010).
PUBLISHED = {
    ("vmdav", "census", 3): 5.69, ("vmdav", "census", 5): 8.98, ("vmdav", "census", 10): 14.07,
    ("vmdav", "eia", 5): 1.30, ("vmdav", "eia", 10): 2.82,
    ("vmdav-gamma0", "census", 3): 5.66, ("vmdav-gamma0", "census", 5): 9.01, ("vmdav-gamma0", "census", 10): 14.07,
    ("vmdav-gamma0", "eia", 3): 0.49, ("vmdav-gamma0", "eia", 5): 1.78, ("vmdav-gamma0", "eia", 10): 3.54,
    ("dba-1", "census", 3): 6.145, ("dba-1", "census", 5): 10.842, ("dba-1", "census", 10): 15.785,
    ("dba-1", "eia", 3): 1.090, ("dba-1", "eia", 5): 1.896, ("dba-1", "eia", 10): 4.266,
    ("dba", "census", 3): 5.582, ("dba", "census", 5): 9.046, ("dba", "census", 10): 13.521,
    ("dba", "eia", 3): 0.421, ("dba", "eia", 5): 0.818, ("dba", "eia", 10): 2.081,
}
# Our values where the paper has none (k-Ward, the GA hybrid: not in Tables 5-7) or where a faithful
# implementation does not reproduce it (V-MDAV on EIA at k = 3: published 0.53; see kernels/vmdav.py).
# The GA runs here with a reduced budget (population 20, 60 generations; the defaults, 50 and 300,
# take about 1 s on census and 5 s on EIA per k); its defaults give census 5.398 / 8.662 / 13.445
# and EIA 0.438 / 1.575 / 3.204.
OURS = {
    ("vmdav", "eia", 3): 0.506,
    ("kward", "census", 3): 5.991, ("kward", "census", 5): 9.110, ("kward", "census", 10): 14.111,
    ("kward", "eia", 3): 0.415, ("kward", "eia", 5): 0.917, ("kward", "eia", 10): 2.218,
    ("ga", "census", 3): 5.495, ("ga", "census", 5): 8.766, ("ga", "census", 10): 13.742,
    ("ga", "eia", 3): 0.449, ("ga", "eia", 5): 1.615, ("ga", "eia", 10): 3.349,
}
GA_TEST_BUDGET = {"population": 20, "generations": 60}


@pytest.fixture(scope="module")
def standardized(census, eia):
    return {
        "census": microagg.standardize(census.to_numpy())[0],
        "eia": microagg.standardize(eia.drop(columns=EIA_NON_QI).to_numpy())[0],
    }


def _labels(variant, dataset, Z, k):
    if variant == "vmdav":
        return run_method(METHODS["vmdav"], Z, k, {"gamma": 0.2 if dataset == "census" else 1.1})
    if variant == "vmdav-gamma0":
        return run_method(METHODS["vmdav"], Z, k, {"gamma": 0.0})
    if variant == "dba-1":
        return dba1(Z, k)
    if variant == "ga":
        return run_method(METHODS["ga"], Z, k, GA_TEST_BUDGET)
    return run_method(METHODS[variant], Z, k)


@pytest.mark.parametrize("variant, dataset, k", sorted(PUBLISHED))
def test_published_information_loss(standardized, variant, dataset, k):
    Z = standardized[dataset]
    labels = _labels(variant, dataset, Z, k)
    assert np.bincount(labels).min() >= k
    il = microagg.information_loss(Z, labels, standardized=True)
    assert il == pytest.approx(PUBLISHED[variant, dataset, k], rel=0.02)


@pytest.mark.parametrize("variant, dataset, k", sorted(OURS))
def test_our_information_loss(standardized, variant, dataset, k):
    Z = standardized[dataset]
    labels = _labels(variant, dataset, Z, k)
    assert np.bincount(labels).min() >= k
    il = microagg.information_loss(Z, labels, standardized=True)
    assert round(il, 3) == pytest.approx(OURS[variant, dataset, k])
    if variant == "ga":  # the hybrid's claim (section 3.1): a lower SSE than MDAV
        assert il < microagg.information_loss(Z, kernels.mdav(Z, k), standardized=True)
