"""Interval disclosure and quantiles from columns ranked in buckets (pipeline/columns.py) against the
in-memory measures of pipeline/metrics.py over whole columns: exact, with ties across buckets."""

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from microagg import kernels
from microagg.kernels import histogram
from microagg.pipeline import columns, graph, metrics
from microagg.pipeline import evaluate as ev


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


def _zero_inflated(seed, n=3000):
    """An amount that is zero in 60 % of the records (its masked zeros span many buckets), a
    continuous column, and small integers; the masked file repeats values as a release does."""
    rng = np.random.default_rng(seed)
    amount = np.where(rng.random(n) < 0.6, 0.0, rng.lognormal(8, 1, n))
    X = np.column_stack([amount, rng.normal(size=n) * 50 + 7, rng.integers(0, 5, n).astype(np.float64)])
    groups = rng.permutation(n) // 4
    Xm = pd.DataFrame(X).groupby(groups).transform("mean").to_numpy().copy()
    Xm[X[:, 0] == 0.0, 0] = 0.0  # zero stays zero, as an all-zero group's centroid
    Xm[rng.random(n) < 0.01, 1] = -0.0
    return X, Xm


def _pairs(X, Xm, piece_rows, directory=None):
    names = [f"c{j}" for j in range(X.shape[1])]
    original = dd.from_pandas(pd.DataFrame(X, columns=names), npartitions=3)
    masked = dd.from_pandas(pd.DataFrame(Xm, columns=names), npartitions=2)
    return ev.prepare(original, masked, names, piece_rows=piece_rows, directory=directory).pairs


def _measure(X, Xm, ps, bucket_rows, piece_rows, batch_values=columns.BATCH_VALUES, directory=None):
    return columns.column_measures(_pairs(X, Xm, piece_rows, directory), X.shape[1], len(X), ps, metrics.QUANTILES,
                                   bucket_rows=bucket_rows, batch_values=batch_values, directory=directory)


@pytest.mark.parametrize("filed", [False, True])
@pytest.mark.parametrize("seed, ps, bucket_rows, batch_values",
                         [(1, [10.0], 97, 10**6), (2, [1.0, 10.0, 50.0], 400, 6000), (3, [10.0], 10**6, 1)])
def test_rates_and_quantiles_equal_the_whole_column_measures_exactly(seed, ps, bucket_rows, batch_values, filed,
                                                                     tmp_path):
    """Many buckets or one; all columns in one batch, in two (6,000 values: two columns of 3,000 rows),
    or one column at a time; the records and summaries in memory or through files (a large evaluation's
    scratch directory, where the pieces' QIs are too: each batch's files are gone after it)."""
    X, Xm = _zero_inflated(seed)
    directory = str(tmp_path) if filed else None
    rates, q_original, q_masked = _measure(X, Xm, ps, bucket_rows, piece_rows=701, batch_values=batch_values,
                                           directory=directory)
    np.testing.assert_array_equal(rates, metrics.interval_disclosure_rates(X, Xm, ps))  # bit for bit
    np.testing.assert_array_equal(q_original, np.quantile(X, metrics.QUANTILES, axis=0))
    np.testing.assert_array_equal(q_masked, np.quantile(Xm, metrics.QUANTILES, axis=0))
    assert 0 < rates.min() and rates.max() <= 100
    if filed:
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left and all(name.startswith(ev.PAIR_FILE) for name in left)  # the pieces' QIs only


@pytest.mark.parametrize("direct", [None, 0])  # 0: the exchange in two levels, as on a large cluster
def test_either_exchange_gives_the_same_measures(monkeypatch, direct):
    X, Xm = _zero_inflated(4, n=1500)
    monkeypatch.setattr(graph, "DIRECT_PIECES", 4096 if direct is None else direct)
    rates, q_original, q_masked = _measure(X, Xm, [10.0], 50, piece_rows=200)
    np.testing.assert_array_equal(rates, metrics.interval_disclosure_rates(X, Xm, 10.0))
    np.testing.assert_array_equal(q_masked, np.quantile(Xm, metrics.QUANTILES, axis=0))


def test_a_value_holding_most_of_a_column_is_spread_over_buckets():
    rng = np.random.default_rng(5)
    values = np.where(rng.random(2000) < 0.7, 0.0, rng.random(2000))
    rows = np.arange(2000)
    marks = [(values[:, None], values[:, None], rows)]
    split = columns.splitters(marks, 10)[0]
    which = columns.bucket_of(values, rows, split)
    sizes = np.bincount(which, minlength=10)
    assert sizes.max() <= 2 * len(values) / 10  # the 1,400 zeros do not fill one bucket
    assert (np.diff(which[np.argsort(values, kind="stable")]) >= 0).all()  # buckets follow (value, row id)
    ranks = columns.ranks_of([(int(s), float(values[which == b].min()), int((values[which == b] == values[which == b].min()).sum()),
                               float(values[which == b].max()), int((values[which == b] == values[which == b].max()).sum()))
                              for b, s in enumerate(sizes)])
    zeros = int((values == 0).sum())
    for b in range(10):
        first = values[which == b].min()
        assert ranks.below_first[b] == (values < first).sum()
        assert ranks.through_last[b] == (values <= values[which == b].max()).sum()
    assert ranks.through_last[0] == zeros


def _splitters_at_or_below(first, second, s_first, s_second):
    """The definition of a pair's bucket, by brute force: every splitter compared with every pair."""
    below = (s_first[None, :] < first[:, None]) | ((s_first[None, :] == first[:, None])
                                                   & (s_second[None, :] <= second[:, None]))
    return below.sum(axis=1)


@pytest.mark.parametrize("m", [0, 1, 2, 3, 7, 64, 65, 300])
def test_a_pair_s_bucket_counts_the_splitters_at_or_below_it_ties_by_the_second(m):
    rng = np.random.default_rng(m)
    n = 4000
    # few distinct values (ties within the pairs, within the splitters and between both), -0.0 beside 0.0
    values = rng.integers(-3, 4, n).astype(np.float64) * rng.choice([1.0, 0.5], n)
    values[rng.random(n) < 0.1] = -0.0
    rows = rng.integers(0, 50, n).astype(np.int64)
    pick = rng.integers(0, n, m)
    s_values, s_rows = values[pick], rows[pick]
    order = np.lexsort((s_rows, s_values))
    s_values, s_rows = s_values[order], s_rows[order]
    want = _splitters_at_or_below(values, rows, s_values, s_rows)
    np.testing.assert_array_equal(columns.bucket_of(values, rows, (s_values, s_rows)), want)
    # the sequence methods' (stratum, score): an integer first, a float second
    strata, scores = rng.integers(0, 3, n).astype(np.int64), np.round(rng.normal(size=n), 1)
    order = np.lexsort((scores[pick], strata[pick]))
    s_strata, s_scores = np.ascontiguousarray(strata[pick][order]), np.ascontiguousarray(scores[pick][order])
    np.testing.assert_array_equal(kernels.pair_buckets(strata, scores, s_strata, s_scores),
                                  _splitters_at_or_below(strata, scores, s_strata, s_scores))


def test_quantile_ranks_and_lerp_are_numpys():
    rng = np.random.default_rng(6)
    for n in (1, 2, 3, 10, 101, 1000):
        x = np.sort(rng.normal(size=n) * 1e3)
        q = np.array([0.0, 0.01, 0.25, 0.5, 0.7, 0.95, 0.99, 1.0])
        below, above, weight = columns.quantile_ranks(n, q)
        np.testing.assert_array_equal(columns.lerp(x[below], x[above], weight), np.quantile(x, q))


@pytest.mark.parametrize("bins", [2, 5, 4096])
def test_quantiles_are_selected_from_their_bins_exactly(bins):
    X, Xm = _zero_inflated(7, n=2500)
    pairs = _pairs(X, Xm, piece_rows=300)
    marks = dask.compute(*[dask.delayed(columns.piece_marks)(p) for p in pairs])
    q_original, q_masked = columns.quantiles_of(pairs, len(X), metrics.QUANTILES, marks, bins=bins, fan_in=3)
    np.testing.assert_array_equal(q_original, np.quantile(X, metrics.QUANTILES, axis=0))
    np.testing.assert_array_equal(q_masked, np.quantile(Xm, metrics.QUANTILES, axis=0))


def _selected(pairs, n, caplog):
    """The quantiles of both files' pieces, and the log's lines on columns selected again."""
    marks = dask.compute(*[dask.delayed(columns.piece_marks)(p) for p in pairs])
    with caplog.at_level("INFO", logger="microagg.pipeline.columns"):
        found = columns.quantiles_of(pairs, n, metrics.QUANTILES, marks, fan_in=2)
    return found, [r.getMessage() for r in caplog.records if "selected again" in r.getMessage()]


def _in_pieces(X, Xm, bounds):
    return [ev.Pair(s, X[s:e], Xm[s:e], np.zeros(0, dtype=np.int64)) for s, e in zip(bounds[:-1], bounds[1:])]


def test_the_quantiles_windows_hold_every_wanted_rank_of_ordinary_columns(caplog):
    """The first round's bins near the ranks the marks predict hold them all: no column is selected again.
    Small pieces (every row a mark) sit beside large ones (a mark every 38 rows): each mark is weighed by
    the rows it stands for."""
    X, Xm = _zero_inflated(11, n=30_000)
    X[:300, 1] += 1e4  # the small pieces' values are far from the rest
    (q_original, q_masked), again = _selected(_in_pieces(X, Xm, [0, 200, 10_000, 10_300, 30_000]), len(X), caplog)
    assert again == []
    np.testing.assert_array_equal(q_original, np.quantile(X, metrics.QUANTILES, axis=0))
    np.testing.assert_array_equal(q_masked, np.quantile(Xm, metrics.QUANTILES, axis=0))


def test_a_quantile_the_marks_mislead_about_is_selected_again_over_every_bin_exactly(caplog):
    """Marks taken every 10th row of pieces where exactly those rows spread over [0, 1] and every other row
    lies in [0.4, 0.41]: the windows look for the middle ranks where the marks put them, miss them, and those
    columns' second round over all their bins finds them."""
    n = 16 * 2560
    rng = np.random.default_rng(12)
    X = np.column_stack([0.4 + 0.01 * rng.random(n), rng.normal(size=n)])
    X[::10, 0] = rng.random(n // 10)  # every mark of column 0
    Xm = X[:, ::-1].copy()
    (q_original, q_masked), again = _selected(_in_pieces(X, Xm, list(range(0, n + 1, 2560))), n, caplog)
    assert again == ["quantiles: 2 of 4 column(s) selected again over all their bins"]
    np.testing.assert_array_equal(q_original, np.quantile(X, metrics.QUANTILES, axis=0))
    np.testing.assert_array_equal(q_masked, np.quantile(Xm, metrics.QUANTILES, axis=0))


def test_a_filed_piece_is_read_once_per_side_in_each_pass_of_the_selection(monkeypatch, tmp_path):
    """Pieces in files: each pass (the bins' counts, then the wanted bins' values) reads a piece's columns of
    one file in one call, not one call per column, and the quantiles stay exact."""
    from microagg.pipeline import transit
    X, Xm = _zero_inflated(13, n=2000)
    pairs = _pairs(X, Xm, piece_rows=500, directory=str(tmp_path))
    marks = dask.compute(*[dask.delayed(columns.piece_marks)(p) for p in pairs])
    calls = []
    read = transit.read_columns
    monkeypatch.setattr(transit, "read_columns", lambda path, n, cs: calls.append(list(cs)) or read(path, n, cs))
    q_original, q_masked = columns.quantiles_of(pairs, len(X), metrics.QUANTILES, marks, fan_in=2)
    assert len(calls) == 2 * 2 * len(pairs)  # two passes, two files' columns, every piece
    assert all(len(cs) == X.shape[1] for cs in calls)
    np.testing.assert_array_equal(q_original, np.quantile(X, metrics.QUANTILES, axis=0))
    np.testing.assert_array_equal(q_masked, np.quantile(Xm, metrics.QUANTILES, axis=0))


@settings(deadline=None, max_examples=50)
@given(hnp.arrays(np.float64, st.integers(0, 300), elements=st.sampled_from([0.0, 1.5, -2.25, 3.0, 1e300, -7.0]))
       | hnp.arrays(np.float64, st.integers(0, 300), elements=st.floats(-1e6, 1e6).map(lambda x: x + 0.0)))
def test_distinct_sorted_is_numpys_unique(values):
    """The buckets' summaries: ``np.unique`` with inverse and counts, repeated values or all distinct."""
    got = columns.distinct_sorted(values)
    for mine, numpy in zip(got, np.unique(values, return_inverse=True, return_counts=True)):
        np.testing.assert_array_equal(mine, numpy.reshape(-1))
        assert mine.dtype == np.int64 or mine.dtype == np.float64


@pytest.mark.parametrize("repeats", [1, 5])
def test_distinct_sorted_of_a_bucket_s_size_is_numpys_unique(repeats):
    """At a bucket's size, where NumPy's default sort of the distinct values takes its vectorized path."""
    rng = np.random.default_rng(repeats)
    values = np.repeat(np.round(rng.lognormal(size=250_000 // repeats), 3) * rng.choice([-1.0, 1.0], 250_000 // repeats),
                       repeats) + 0.0
    rng.shuffle(values)
    for mine, numpy in zip(columns.distinct_sorted(values), np.unique(values, return_inverse=True, return_counts=True)):
        np.testing.assert_array_equal(mine, numpy.reshape(-1))


@settings(deadline=None, max_examples=200)
@given(hnp.arrays(np.float64, st.integers(0, 200), elements=st.sampled_from([0.0, -0.0, 1.0, 2.0, 2.5, 3.0, -1.0,
                                                                             np.inf, -np.inf])),
       st.lists(st.booleans(), min_size=6, max_size=6))
def test_a_value_s_bin_is_the_number_of_edges_not_above_it_whatever_edges_are_searched_first(x, first):
    """:func:`microagg.kernels.histogram.sorted_bins`, which places the quantiles' values in their bins: a value
    on an edge, below the first, above the last, a negative zero; any subset of the edges searched first (none,
    all, adjacent ones, the ends)."""
    edges = np.array([-1.0, 0.0, 1.0, 2.0, 3.0, 4.0])
    coarse = np.flatnonzero(first).astype(np.int64)
    np.testing.assert_array_equal(histogram.sorted_bins(x, edges, coarse), np.searchsorted(edges, x, side="right"))


@pytest.mark.parametrize("every", [1, 3, 40, 1000])
def test_a_value_s_bin_among_many_edges_is_the_same_counted_or_searched(every):
    """Searches among more edges than :data:`microagg.kernels.histogram.LINEAR_SEARCH` (binary) and fewer
    (counted), at both levels: every edge searched first, every third, every 40th, none but the first."""
    rng = np.random.default_rng(every)
    edges = np.unique(np.round(rng.normal(size=400), 2))
    x = np.concatenate([np.round(rng.normal(size=5000) * 1.2, 2), edges, [-np.inf, np.inf, -0.0]])
    coarse = np.arange(0, len(edges), every, dtype=np.int64)
    np.testing.assert_array_equal(histogram.sorted_bins(x, edges, coarse), np.searchsorted(edges, x, side="right"))


@settings(deadline=None, max_examples=100)
@given(hnp.arrays(np.float64, st.integers(0, 200), elements=st.sampled_from([0.0, -0.0, 1.0, 2.0, 2.5, 3.0, -1.0,
                                                                             np.inf, -np.inf])),
       st.lists(st.integers(0, 6), unique=True, max_size=7).map(sorted), st.integers(1, 60))
def test_values_within_bins_are_those_a_comparison_with_each_bin_finds(x, bins, spread):
    """:func:`microagg.kernels.histogram.within_ranges`, which picks the values of the quantiles' wanted bins:
    adjacent bins, a value on a bin's edge, the first and the last (open) bins, a negative zero; few ranges
    (counted) and many (searched)."""
    lo, hi = columns._bounds(np.array([-1.0, 0.0, 1.0, 2.0, 3.0, 4.0]), np.array(bins, dtype=np.int64))
    many = np.arange(spread) * 10.0 + 100.0  # ranges beyond every value, to pass the count's limit
    lo, hi = np.concatenate([lo, many]), np.concatenate([hi, many + 5.0])
    want = np.zeros(len(x), dtype=bool)
    for a, b in zip(lo, hi):
        want |= (x >= a) & (x < b)
    np.testing.assert_array_equal(histogram.within_ranges(x, lo, hi), want)
