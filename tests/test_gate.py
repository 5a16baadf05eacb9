"""The release gate's evidence: exact tuple counts through the groups, and a summary that flags rows below k."""

import numpy as np
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
