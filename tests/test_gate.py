"""The release gate's evidence: exact tuple counts through the groups, and a summary that flags rows below k."""

import numpy as np
import pytest
from types import SimpleNamespace

from microagg.pipeline.release import ReleaseOptions, Rows, summarize, tuple_counts


def test_distinct_tuples_count_their_group_sizes():
    table = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert tuple_counts(table, np.array([3, 2])).tolist() == [3, 2]


def test_identical_tuples_of_two_groups_count_together():
    table = np.array([[1.0], [2.0], [1.0]])
    assert tuple_counts(table, np.array([2, 2, 2])).tolist() == [4, 2, 4]


def test_nan_tuples_compare_equal():
    table = np.array([[np.nan, 1.0], [np.nan, 1.0], [0.0, 1.0]])
    assert tuple_counts(table, np.array([1, 2, 5])).tolist() == [3, 3, 5]


def test_summary_flags_rows_below_k():
    job = SimpleNamespace(options=ReleaseOptions(k=3), std=np.array([1.0]), qi=("q",))
    values = np.array([[1.0], [1.0], [1.0], [2.0], [2.0]])
    rows = Rows(row_id=np.arange(5), leaf=np.zeros(5, np.int64), values=values)
    labels = np.array([0, 0, 0, 1, 1])
    summary = summarize(rows, labels, np.array([[1.0], [2.0]]), job, 0.0)
    assert summary["rows"] == 5 and summary["groups"] == 2
    assert summary["min_group_size"] == 2 and summary["rows_in_small_tuples"] == 2
    assert summary["min_tuple_count"] == 2 and summary["sse"] == 0.0


def test_two_small_groups_with_one_tuple_are_k_anonymous_together():
    job = SimpleNamespace(options=ReleaseOptions(k=3), std=np.array([1.0]), qi=("q",))
    rows = Rows(row_id=np.arange(4), leaf=np.zeros(4, np.int64), values=np.array([[0.0], [2.0], [0.0], [2.0]]))
    summary = summarize(rows, np.array([0, 0, 1, 1]), np.array([[1.0], [1.0]]), job, 0.0)
    assert summary["min_tuple_count"] == 4 and summary["rows_in_small_tuples"] == 0
    assert summary["sse"] == 4.0


def test_summary_counts_the_rows_a_condition_releases():
    job = SimpleNamespace(options=ReleaseOptions(k=2, release_where="q > 1.5"), std=np.array([1.0]), qi=("q",))
    rows = Rows(row_id=np.arange(5), leaf=np.zeros(5, np.int64), values=np.array([[1.0], [1.0], [1.0], [2.0], [2.0]]))
    summary = summarize(rows, np.array([0, 0, 0, 1, 1]), np.array([[1.0], [2.0]]), job, 0.0)
    assert summary["rows"] == 5 and summary["rows_released"] == 2


def test_tuples_sharing_a_hash_are_still_counted_by_their_values():
    from microagg.pipeline.release import _tuple_evidence

    table = np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0]])
    counts, distinct = _tuple_evidence(table, np.array([2, 3, 4]), np.zeros(3, dtype=np.uint64))  # one hash
    assert counts.tolist() == [6, 3, 6] and distinct.tolist() == [0]


def test_negative_zero_and_nans_of_any_payload_are_one_tuple():
    other_nan = np.array([0x7FF8000000000001], dtype=np.uint64).view(np.float64)[0]
    table = np.array([[0.0, np.nan], [-0.0, other_nan], [-0.0, -np.nan], [1.0, np.nan]])
    assert tuple_counts(table, np.array([2, 3, 5, 4])).tolist() == [10, 10, 10, 4]


def test_summary_sums_equal_numpys_over_missing_cells_and_a_constant_column(monkeypatch):
    from microagg.kernels import histogram
    from microagg.pipeline import metrics, release

    rng = np.random.default_rng(7)
    n, g = 400, 60
    X = rng.normal(size=(n, 3)) * [1.0, 5.0, 0.0] + [0.0, 10.0, 2.0]  # the last column constant
    labels = np.sort(rng.integers(0, g, n))
    labels = np.unique(labels, return_inverse=True)[1].astype(np.int64)
    table = np.array([X[labels == c].mean(axis=0) for c in range(labels.max() + 1)])
    std = X.std(axis=0)
    edges = np.array([np.linspace(lo - 1, hi + 1, 9) for lo, hi in zip(X.min(axis=0), X.max(axis=0))])
    edges[2] = np.linspace(1.0, 3.0, 9)
    job = SimpleNamespace(options=ReleaseOptions(k=2), std=std, qi=("a", "b", "c"), edges=edges, first_column=0)
    rows = Rows(row_id=np.arange(n), leaf=np.zeros(n, np.int64), values=X)
    scale = np.where(std > 0, std, np.inf)
    expected = metrics.moments(X, table[labels])
    summary = summarize(rows, labels, table, job, 0.0)
    assert np.isclose(summary["sse"], np.nansum(((X - table[labels]) / scale) ** 2), rtol=1e-12, atol=0)
    data = summary["data"]
    assert (data["counts_x"] == histogram.bin_counts(X, edges, np.ones(n, dtype=np.int64))).all()
    for key in ("mean_x", "mean_m", "comoment_m", "sq_diff"):
        assert np.allclose(data["moments"][key], expected[key], rtol=1e-12, atol=1e-9), key
    # the original's co-moments are the statistics pass's (the same rows): a piece holds zeros
    assert not data["moments"]["comoment_x"].any()
    for block in (release.COMOMENT_ROWS, 64, 7):  # the statistics pass centres the rows a block at a time
        monkeypatch.setattr(release, "COMOMENT_ROWS", block)
        rows_seen, mean, comoment = release._comoments(X)
        assert rows_seen == n and np.allclose(mean, expected["mean_x"], rtol=1e-12)
        assert np.allclose(comoment, expected["comoment_x"], rtol=1e-12, atol=1e-9)
    # missing cells (the centroid option): left out of the SSE, and the moments are the complete rows'
    X[[3, 50], [0, 1]] = np.nan
    table[labels[3], 0] = np.nan
    job = SimpleNamespace(options=ReleaseOptions(k=2, missing="centroid"), std=std, qi=("a", "b", "c"), edges=edges,
                          first_column=0)
    summary = summarize(Rows(np.arange(n), np.zeros(n, np.int64), X), labels, table, job, 0.0)
    assert np.isclose(summary["sse"], np.nansum(((X - table[labels]) / scale) ** 2), rtol=1e-12, atol=0)
    complete = np.isfinite(X).all(axis=1) & np.isfinite(table[labels]).all(axis=1)
    assert summary["data"]["moments"]["n"] == complete.sum() < n
    assert (summary["data"]["counts_x"] == histogram.bin_counts(X, edges, np.ones(n, dtype=np.int64))).all()


def test_the_reported_covariance_is_numpys_over_the_complete_rows_whatever_the_blocks_of_rows(monkeypatch):
    """The statistics pass centres each partition's rows a block at a time (one buffer reused, not a
    centred copy of the partition): the population covariance of the complete rows, as NumPy's, for
    partitions of fewer rows than a block, of several blocks and of a block and a remainder, with
    rows holding a NaN or an infinity left out; and the released values' co-moments (a transposed
    view of an output file's columns) likewise."""
    import dask.dataframe as dd
    import pandas as pd

    from microagg.pipeline import release

    rng = np.random.default_rng(4)
    X = rng.normal(size=(1_000, 3)) * [1.0, 50.0, 1e4] + [0.0, -3.0, 7e5]
    X[[5, 500, 999], [0, 1, 2]] = np.nan
    complete = X[np.isfinite(X).all(axis=1)]
    expected = np.cov(complete, rowvar=False, ddof=0)
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    for block in (16_384, 64, 7):
        monkeypatch.setattr(release, "COMOMENT_ROWS", block)
        for partitions in (1, 3):
            stats = release.column_statistics(dd.from_pandas(frame, npartitions=partitions), ["a", "b", "c"],
                                              missing="centroid")
            np.testing.assert_allclose(stats[4], expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
            assert stats[9] == len(complete)
        columns = np.ascontiguousarray(complete.T)  # an output file's values, column by column
        n, mean, products = release._comoments(columns.T)
        assert n == len(complete)
        np.testing.assert_allclose(mean, complete.mean(axis=0), rtol=1e-14)
        np.testing.assert_allclose(products / n, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    n, mean, products = release._comoments(np.empty((0, 3)))
    assert n == 0 and not mean.any() and not products.any()


def _pieces(rng, n_rows, widths, owners):
    """Pieces of a release of rows ``0..n_rows-1`` (``owners`` pieces per attribute block of ``widths``): each
    piece's rows ascending, its groups drawn at random over its own table."""
    pieces, slots, first = [], [], 0
    for width in widths:
        owner = rng.integers(0, owners, n_rows)
        for p in range(owners):
            row_id = np.flatnonzero(owner == p).astype(np.int64)
            table = rng.normal(size=(max(1, len(row_id) // 3), width))
            pieces.append((row_id, rng.integers(0, len(table), len(row_id)), table))
            slots.append(tuple(range(first, first + width)))
        first += width
    return pieces, slots


def test_released_values_are_scattered_to_their_rows_and_columns_for_any_range_and_attribute_blocks():
    """Every cell of an output file's range gets its group's value in its attribute block's columns (rows of
    the pieces outside the range ignored), row-major then written out column by column, as a NumPy
    scatter does it; a row released twice, or not at all, refuses the release."""
    from microagg.pipeline.release import ReleaseGateError, _scatter

    rng = np.random.default_rng(7)
    pieces, slots = _pieces(rng, 1000, (2, 3, 1), 5)
    want = np.full((6, 1000), np.nan)
    for (row_id, group, table), slot in zip(pieces, slots):
        want[np.ix_(list(slot), row_id)] = table[group].T
    for start, stop in ((0, 1000), (130, 517), (999, 1000)):
        got = _scatter(start, stop, 6, slots, pieces)
        assert not np.isnan(want[:, start:stop]).any()
        assert got.shape == (6, stop - start) and got.flags.c_contiguous
        assert np.array_equal(got, want[:, start:stop])
    twice = pieces + [pieces[0]]
    with pytest.raises(ReleaseGateError, match="exactly once"):
        _scatter(0, 1000, 6, slots + [slots[0]], twice)
    with pytest.raises(ReleaseGateError, match=r"\(\d+ row\(s\) wrong\)"):
        _scatter(0, 1000, 6, slots[1:], pieces[1:])
