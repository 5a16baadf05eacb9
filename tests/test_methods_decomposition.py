"""MD, CBFS, TFRP, GSMS, MDAV-NC and the TFRP2 / Decompose-Shrink refinements.

* Invariants on Hypothesis-drawn matrices for every method x growth rule and every refinement x
  criterion: every row in exactly one group, groups of k..2k-1 rows, deterministic, and a
  refinement never raises the SSE (computed by definition with NumPy).
* The fixed-size kernels against the slow, literal NumPy versions below, label for label. On
  small-integer data (ties everywhere, exact arithmetic) this checks the documented tie rules.
* The refinements' fixed points: after decompose-shrink no single-record Shrink move lowers the SSE.
* The published information loss of Khomnotai et al. (2018), Tables 3-4 (census, EIA; k = 3, 5, 10),
  for MDAV, CBFS and TFRP with NN and NC growth and GSMS-NN, unrefined, with TFRP2 and with the
  iterated Decompose/Shrink, within 2% relative (in fact within 0.7%, most to the third decimal);
  and MD's published IL (shared/papers/dbm-density-based-microaggregation.txt Table 1).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import microagg
import naive
from conftest import EIA_NON_QI
from microagg import kernels
from microagg.kernels import decomposition, fixed_size
from microagg.kernels.mdav import mdav_nc
from microagg.pipeline.errors import InputError
from microagg.pipeline.methods import METHODS, REFINERS, run_method, run_refiner

SETTINGS = settings(deadline=None, max_examples=60)

# every method of this module with each growth rule it defines
VARIANTS = [("mdav", {}), ("mdav", {"grow": "nc"}), ("md", {}), ("cbfs", {}), ("cbfs", {"grow": "nc"}),
            ("tfrp", {}), ("tfrp", {"grow": "nc"}), ("gsms", {})]
REFINEMENTS = [("tfrp2", {}), ("tfrp2", {"criterion": "exact"}),
               ("decompose-shrink", {}), ("decompose-shrink", {"criterion": "exact"})]


def c64(X):
    return np.ascontiguousarray(X, dtype=np.float64)


@st.composite
def matrices(draw, min_rows=2, max_rows=40):
    """``(X, k)``: an ``(n, d)`` matrix (small integers, with many ties and duplicate rows, or bounded
    floats) and a k with ``2 <= k <= n``."""
    k = draw(st.integers(2, 5))
    n = draw(st.integers(max(k, min_rows), max(max_rows, k)))
    d = draw(st.integers(1, 4))
    if draw(st.booleans()):
        elements = st.integers(0, 4).map(float)
    else:
        elements = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
    return c64(draw(hnp.arrays(np.float64, (n, d), elements=elements))), k


def sizes_of(labels):
    labels = np.asarray(labels)
    assert labels.dtype == np.int64
    g = int(labels.max()) + 1
    assert labels.min() == 0 and np.unique(labels).size == g, "labels must be exactly 0..g-1"
    return np.bincount(labels, minlength=g)


def sse_slack(X):
    """Rounding allowance when two SSEs of the same data are compared."""
    return 1e-9 * (1.0 + float((X * X).sum()))


# ---------------------------------------------------------------------------------------------
# invariants


@pytest.mark.parametrize("name,options", VARIANTS)
@SETTINGS
@given(data=matrices())
def test_method_invariants(name, options, data):
    X, k = data
    method = METHODS[name]
    labels = run_method(method, X, k, options)
    assert labels.shape == (X.shape[0],)
    sizes = sizes_of(labels)
    assert sizes.min() >= k
    assert method.bounded and sizes.max() <= 2 * k - 1  # (fewer than 2k rows: one group)
    np.testing.assert_array_equal(labels, run_method(method, X.copy(), k, options))


@st.composite
def partitions(draw):
    """``(X, k, labels)`` with labels either a method's partition or an arbitrary one with every group
    of at least k rows (possibly much larger than 2k - 1, e.g. a single group)."""
    X, k = draw(matrices(min_rows=2))
    n = X.shape[0]
    if draw(st.booleans()):
        name, options = draw(st.sampled_from(VARIANTS))
        return X, k, run_method(METHODS[name], X, k, options)
    n_groups = draw(st.integers(1, n // k))
    labels = np.repeat(np.arange(n_groups), k)
    extra = draw(hnp.arrays(np.int64, n - labels.size, elements=st.integers(0, n_groups - 1)))
    labels = np.concatenate([labels, extra])
    order = np.array(draw(st.permutations(range(n))))
    return X, k, np.ascontiguousarray(labels[order], dtype=np.int64)


@pytest.mark.parametrize("name,options", REFINEMENTS)
@SETTINGS
@given(data=partitions())
def test_refinement_invariants(name, options, data):
    X, k, labels = data
    before = labels.copy()
    refined = run_refiner(REFINERS[name], X, labels, k, options)
    np.testing.assert_array_equal(labels, before)  # the input is not modified
    assert refined.shape == labels.shape
    sizes = sizes_of(refined)
    assert sizes.min() >= k and sizes.max() <= 2 * k - 1
    assert naive.sse(X, refined) <= naive.sse(X, labels) + sse_slack(X)
    np.testing.assert_array_equal(refined, run_refiner(REFINERS[name], X, labels.copy(), k, options))


@SETTINGS
@given(data=partitions())
def test_split_large_groups(data):
    X, k, labels = data
    split = decomposition.split_large_groups(X, labels, k)
    sizes = sizes_of(split)
    assert sizes.min() >= k and sizes.max() <= 2 * k - 1
    assert naive.sse(X, split) <= naive.sse(X, labels) + sse_slack(X)
    # a refinement of the input partition: rows of one output group come from one input group
    for g in np.unique(split):
        assert np.unique(labels[split == g]).size == 1
    # groups already of k..2k-1 rows are kept as they are
    small = np.isin(labels, np.flatnonzero(np.bincount(labels) < 2 * k))
    for g in np.unique(labels[small]):
        assert np.unique(split[labels == g]).size == 1


@pytest.mark.parametrize("criterion", ["frozen", "exact"])
@SETTINGS
@given(data=partitions())
def test_decompose_shrink_ends_where_shrink_finds_no_move(criterion, data):
    """Figure 1 stops when neither operation changes the partition: then no record of a group with
    more than k rows can move to another group with an exact SSE decrease (Figure 4)."""
    X, k, labels = data
    refined = run_refiner(REFINERS["decompose-shrink"], X, labels, k, {"criterion": criterion})
    g = int(refined.max()) + 1
    sizes = np.bincount(refined, minlength=g)
    cents = np.array([X[refined == a].mean(axis=0) for a in range(g)])
    tol = 1e-9 * (1.0 + float((X * X).sum()) / X.shape[0])
    for i in range(X.shape[0]):
        a = refined[i]
        if sizes[a] <= k:
            continue
        gain = sizes[a] / (sizes[a] - 1) * ((X[i] - cents[a]) ** 2).sum()
        for q in range(g):
            if q != a:
                cost = sizes[q] / (sizes[q] + 1) * ((X[i] - cents[q]) ** 2).sum()
                assert cost - gain >= -tol, (i, a, q)


def test_options_are_checked():
    Z = c64(np.arange(24.0).reshape(12, 2))
    for name in ("mdav", "cbfs", "tfrp"):
        with pytest.raises(InputError, match="grow"):
            run_method(METHODS[name], Z, 3, {"grow": "nearest"})
    for name in ("md", "gsms"):
        with pytest.raises(InputError, match="does not take"):
            run_method(METHODS[name], Z, 3, {"grow": "nc"})
    labels = run_method(METHODS["mdav"], Z, 3)
    for name in ("tfrp2", "decompose-shrink"):
        with pytest.raises(InputError, match="criterion"):
            run_refiner(REFINERS[name], Z, labels, 3, {"criterion": "greedy"})


# ---------------------------------------------------------------------------------------------
# the kernels against literal NumPy versions


def _distances(X, p):
    """Squared distances of every row to ``p``, accumulated column by column as the kernels do."""
    out = np.zeros(X.shape[0])
    for j in range(X.shape[1]):
        out += (X[:, j] - p[j]) ** 2
    return out


def _farthest(X, rest, p):
    return rest[int(np.argmax(_distances(X, p)[rest]))]  # the first (lowest row) maximum


def _grown(X, rest, seed, k, nc):
    """``seed`` and k-1 records of ``rest``: its nearest neighbours, or (nc) repeatedly the record
    nearest to the running centroid; lowest row on ties."""
    if not nc:
        others = rest[rest != seed]
        return np.concatenate(([seed], others[np.argsort(_distances(X, X[seed])[others], kind="stable")[:k - 1]]))
    members = [seed]
    running = X[seed].copy()
    while len(members) < k:
        others = rest[~np.isin(rest, members)]
        best = others[int(np.argmin(_distances(X, running / len(members))[others]))]
        members.append(best)
        running = running + X[best]
    return np.array(members)


def _attach(X, labels):
    """Unlabelled rows (-1) to the group with the nearest centroid (lowest group on ties)."""
    g = int(labels.max()) + 1
    cents = np.array([X[labels == a].mean(axis=0) for a in range(g)])
    for i in np.flatnonzero(labels < 0):
        labels[i] = int(np.argmin(_distances(cents, X[i])))


def naive_mdav_nc(X, k):
    n = X.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    rest = np.arange(n)
    group = 0

    def take(members):
        nonlocal rest, group
        labels[members] = group
        group += 1
        rest = rest[~np.isin(rest, members)]

    while rest.size >= 3 * k:
        r = _farthest(X, rest, X[rest].sum(axis=0) / rest.size)
        take(_grown(X, rest, r, k, True))
        s = _farthest(X, rest, X[r])
        take(_grown(X, rest, s, k, True))
    if rest.size >= 2 * k:
        take(_grown(X, rest, _farthest(X, rest, X[rest].sum(axis=0) / rest.size), k, True))
    labels[rest] = group
    return labels


def naive_seeded(X, k, nc, tfrp):
    """CBFS (centroid of the rest) or TFRP-1 (per-attribute max corner, min corner, in turn)."""
    n = X.shape[0]
    if n < 2 * k:
        return np.zeros(n, dtype=np.int64)
    labels = np.full(n, -1, dtype=np.int64)
    rest = np.arange(n)
    corners = (X.max(axis=0), X.min(axis=0))
    group = 0
    while rest.size >= k:
        p = corners[group % 2] if tfrp else X[rest].sum(axis=0) / rest.size
        members = _grown(X, rest, _farthest(X, rest, p), k, nc)
        labels[members] = group
        group += 1
        rest = rest[~np.isin(rest, members)]
    if rest.size:
        _attach(X, labels)
    return labels


def naive_md(X, k):
    n = X.shape[0]
    if n < 2 * k:
        return np.zeros(n, dtype=np.int64)
    labels = np.full(n, -1, dtype=np.int64)
    rest = np.arange(n)
    group = 0
    while rest.size >= 2 * k:
        best, pair = -1.0, None
        for t, a in enumerate(rest):  # every pair, lowest (a, b) first among equals
            dist = _distances(X, X[a])
            for b in rest[t + 1:]:
                if dist[b] > best:
                    best, pair = dist[b], (a, b)
        r, s = pair
        members = _grown(X, rest, r, k, False)
        labels[members] = group
        rest = rest[~np.isin(rest, members)]
        if s not in rest:  # only with ties: s joined r's group
            s = _farthest(X, rest, X[r])
        members = _grown(X, rest, s, k, False)
        labels[members] = group + 1
        rest = rest[~np.isin(rest, members)]
        group += 2
    if rest.size >= k:
        labels[rest] = group
    elif rest.size:
        _attach(X, labels)
    return labels


def naive_gsms(X, k):
    """Literally: the candidate (a record and its k-1 nearest) minimising SSE(p) + SSE(T \\ p)."""
    n = X.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    rest = np.arange(n)
    group = 0
    while rest.size >= 2 * k:
        costs = []
        for x in rest:
            p = _grown(X, rest, x, k, False)
            others = rest[~np.isin(rest, p)]
            costs.append((naive.sse(X[p], np.zeros(k)) + naive.sse(X[others], np.zeros(others.size)), p))
        p = min(costs, key=lambda c: c[0])[1]  # first minimum: the lowest seed row
        labels[p] = group
        group += 1
        rest = rest[~np.isin(rest, p)]
    labels[rest] = group
    return labels


def naive_gsms_rule(X, k):
    """GSMS by the kernel's rule, literally: each remaining record's candidate is itself and its k-1
    nearest (lowest rows on ties), and the candidate whose centroid is farthest from the remaining
    records' centroid is taken, the lowest seed row on ties; the same arithmetic, term by term."""
    n, d = X.shape
    labels = np.full(n, -1, dtype=np.int64)
    rest = np.arange(n)
    total = X.sum(axis=0)
    group = 0
    while rest.size >= 2 * k:
        c = total / rest.size
        best, chosen = -1.0, None
        for x in rest:
            p = _grown(X, rest, x, k, False)
            csum = X[p].sum(axis=0)
            far = 0.0
            for j in range(d):
                far += (csum[j] / k - c[j]) ** 2
            if far > best:
                best, chosen = far, p
        labels[chosen] = group
        total = total - X[chosen].sum(axis=0)
        group += 1
        rest = rest[~np.isin(rest, chosen)]
    labels[rest] = group
    return labels


@st.composite
def integer_matrix(draw):
    """Small integers 0..3: ties and duplicate rows everywhere, and every sum, centroid and distance
    the kernels compute is exact, so labels must agree exactly with the literal versions."""
    k = draw(st.integers(2, 4))
    n = draw(st.integers(k, 30))
    d = draw(st.integers(1, 3))
    return c64(draw(hnp.arrays(np.float64, (n, d), elements=st.integers(0, 3).map(float)))), k


@SETTINGS
@given(data=integer_matrix())
def test_fixed_size_kernels_match_literal_versions_with_ties(data):
    X, k = data
    np.testing.assert_array_equal(mdav_nc(X, k), naive_mdav_nc(X, k))
    np.testing.assert_array_equal(run_method(METHODS["mdav"], X, k, {"grow": "nn"}), naive.mdav(X, k))
    for nc in (False, True):
        np.testing.assert_array_equal(fixed_size.cbfs(X, k, nc), naive_seeded(X, k, nc, False))
        np.testing.assert_array_equal(fixed_size.tfrp(X, k, nc), naive_seeded(X, k, nc, True))
    np.testing.assert_array_equal(fixed_size.md(X, k), naive_md(X, k))
    np.testing.assert_array_equal(fixed_size.gsms(X, k), naive_gsms_rule(X, k))


@pytest.mark.parametrize("method", ["md", "gsms"])
def test_fixed_size_kernels_on_a_zero_inflated_input(method):
    """160 rows, 90 % of them copies of the all-zero record, the rest whole numbers: MD scans one copy
    of each class for its farthest pair (and, once only zeros are left, takes the two lowest rows);
    GSMS's zeros share one candidate list. The labels are still the literal versions'."""
    rng = np.random.default_rng(7)
    X = rng.integers(1, 9, size=(160, 3)).astype(float)
    X[rng.random(160) < 0.9] = 0.0
    naive_version = naive_md if method == "md" else naive_gsms_rule
    for k in (2, 3, 5):
        np.testing.assert_array_equal(getattr(fixed_size, method)(X, k), naive_version(X, k))


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(2, 4), n=st.integers(4, 36), d=st.integers(1, 4))
def test_gsms_minimises_sse_of_group_plus_rest(seed, k, n, d):
    """GSMS selects by the identity SSE(p) + SSE(T \\ p) = SSE(T) - k|T|/(|T|-k) ||mean p - mean T||^2;
    on continuous data (no ties) it forms the groups of the literal criterion. (With 2k records left
    a candidate and its complement tie exactly and rounding picks which is numbered first.)"""
    X = np.random.default_rng(seed).normal(size=(max(n, k), d))
    np.testing.assert_array_equal(first_appearance(fixed_size.gsms(X, k)), first_appearance(naive_gsms(X, k)))


def first_appearance(labels):
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[inverse]


# ---------------------------------------------------------------------------------------------
# published information loss

# Khomnotai, Lin, Peng & Santra (2018), Table 3 (census) and Table 4 (EIA): IL of the method
# unrefined, refined by TFRP2 (suffix "2") and by the iterated Decompose/Shrink (suffix "3").
PUBLISHED = {
    "census": {
        ("cbfs", "nn"): {3: (5.654, 5.648, 5.644), 5: (8.884, 8.848, 8.554), 10: (14.001, 13.902, 12.809)},
        ("cbfs", "nc"): {3: (5.348, 5.337, 5.325), 5: (8.685, 8.656, 8.575), 10: (14.341, 14.117, 12.672)},
        ("mdav", "nn"): {3: (5.692, 5.683, 5.660), 5: (9.088, 9.054, 8.950), 10: (14.156, 14.017, 12.809)},
        ("mdav", "nc"): {3: (5.343, 5.335, 5.334), 5: (8.945, 8.898, 8.698), 10: (14.361, 14.043, 12.648)},
        ("tfrp", "nn"): {3: (5.864, 5.805, 5.735), 5: (9.252, 9.039, 8.408), 10: (14.369, 14.042, 13.024)},
        ("tfrp", "nc"): {3: (5.645, 5.546, 5.466), 5: (9.301, 9.037, 8.796), 10: (14.834, 14.265, 12.963)},
        ("gsms", None): {3: (5.564, 5.545, 5.535), 5: (8.686, 8.597, 8.367), 10: (13.549, 13.452, 13.085)},
    },
    "eia": {
        ("cbfs", "nn"): {3: (0.478, 0.416, 0.402), 5: (1.740, 0.960, 0.803), 10: (3.512, 2.644, 2.036)},
        ("cbfs", "nc"): {3: (0.470, 0.426, 0.415), 5: (1.533, 0.891, 0.762), 10: (3.276, 2.552, 2.282)},
        ("mdav", "nn"): {3: (0.483, 0.417, 0.401), 5: (1.667, 0.969, 0.802), 10: (3.840, 2.931, 2.022)},
        ("mdav", "nc"): {3: (0.471, 0.428, 0.415), 5: (1.459, 0.962, 0.795), 10: (3.058, 2.744, 2.298)},
        ("tfrp", "nn"): {3: (0.513, 0.419, 0.405), 5: (1.768, 0.969, 0.800), 10: (3.543, 2.669, 2.040)},
        ("tfrp", "nc"): {3: (0.465, 0.420, 0.410), 5: (1.670, 0.887, 0.779), 10: (3.288, 2.545, 2.289)},
        ("gsms", None): {3: (0.469, 0.407, 0.394), 5: (1.713, 0.890, 0.796), 10: (3.313, 2.569, 2.101)},
    },
}
# MD: shared/papers/dbm-density-based-microaggregation.txt Table 1
PUBLISHED_MD = {"census": {3: 5.720, 5: 9.006, 10: 14.397}, "eia": {3: 0.472, 5: 1.669, 10: 3.714}}
# the one unrefined figure we do not reproduce to the third decimal (0.04% off): CBFS-NN, census, k=10
OURS_UNREFINED = {("census", "cbfs", "nn", 10): 14.007}


@pytest.fixture(scope="module")
def standardized(census, eia):
    return {
        "census": microagg.standardize(census.to_numpy(dtype=np.float64))[0],
        "eia": microagg.standardize(eia.drop(columns=EIA_NON_QI).to_numpy(dtype=np.float64))[0],
    }


@pytest.mark.parametrize("dataset", ["census", "eia"])
@pytest.mark.parametrize("method,grow", list(PUBLISHED["census"]))
def test_published_information_loss(standardized, dataset, method, grow):
    Z = standardized[dataset]
    options = {} if grow is None else {"grow": grow}
    for k, expected in PUBLISHED[dataset][method, grow].items():
        got = []
        for refine in ("none", "tfrp2", "decompose-shrink"):
            labels = microagg.partition(Z, k, method, refine=refine, standardized=True, method_options=options)
            sizes = np.bincount(labels)
            assert sizes.min() >= k and sizes.max() <= 2 * k - 1
            got.append(microagg.information_loss(Z, labels, standardized=True))
        for value, published in zip(got, expected):
            assert value == pytest.approx(published, rel=0.02), (dataset, method, grow, k, got, expected)
        unrefined = OURS_UNREFINED.get((dataset, method, grow, k), expected[0])
        assert round(got[0], 3) == pytest.approx(unrefined), (dataset, method, grow, k, got[0])
        assert got[2] <= got[0] + 1e-9 and got[1] <= got[0] + 1e-9


@pytest.mark.parametrize("dataset", ["census", "eia"])
def test_published_md_information_loss(standardized, dataset):
    Z = standardized[dataset]
    for k, published in PUBLISHED_MD[dataset].items():
        labels = microagg.partition(Z, k, "md", standardized=True)
        assert np.bincount(labels).max() <= 2 * k - 1
        assert microagg.information_loss(Z, labels, standardized=True) == pytest.approx(published, rel=0.02)


def test_mdav_nn_is_the_classic_kernel(standardized):
    """The grow option left the classic MDAV path untouched: the registry's default is kernels.mdav."""
    for Z in standardized.values():
        for k in (3, 5):
            np.testing.assert_array_equal(microagg.partition(Z, k, "mdav", standardized=True), kernels.mdav(Z, k))
