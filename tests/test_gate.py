"""The release gate's tuple counting: proof through uniform groups, exact counts otherwise."""

import numpy as np
import pandas as pd

from microagg.pipeline.release import GAIN, GROUP_ID, LEAF, LOSS, _block_summary, tuple_counts, tuples_through_groups


def _dense(groups):
    _, dense = np.unique(groups, return_inverse=True)
    return dense, np.bincount(dense)


def test_uniform_groups_prove_the_counts():
    values = np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0], [3.0, 4.0], [1.0, 2.0]])
    groups = np.array([7, 9, 7, 9, 7])
    counts = tuples_through_groups(values, *_dense(groups))
    assert sorted(counts.tolist()) == [2, 3]


def test_a_group_with_differing_rows_falls_back_to_exact_counts():
    values = np.array([[1.0, 2.0], [1.0, 2.0], [5.0, 5.0], [3.0, 4.0], [3.0, 4.0]])
    groups = np.array([0, 0, 0, 1, 1])  # group 0 is not uniform: its third row is unique
    counts = tuples_through_groups(values, *_dense(groups))
    assert sorted(counts.tolist()) == [1, 2, 2]
    assert sorted(tuple_counts(values).tolist()) == [1, 2, 2]


def test_identical_centroids_of_two_groups_count_together():
    values = np.array([[1.0], [1.0], [1.0], [1.0], [2.0], [2.0]])
    assert sorted(tuple_counts(values).tolist()) == [2, 4]


def test_block_summary_flags_rows_below_k():
    part = pd.DataFrame({
        GROUP_ID: [0, 0, 0, 1, 1], "q": [1.0, 1.0, 1.0, 2.0, 2.0],
        LEAF: [0, 0, 0, 0, 0], LOSS: [0.1] * 5, GAIN: [0.0] * 5,
    })
    summary = _block_summary(part, ["q"], 3).iloc[0]
    assert summary["rows"] == 5 and summary["groups"] == 2
    assert summary["min_group_size"] == 2 and summary["rows_in_small_tuples"] == 2
    assert summary["min_tuple_count"] == 2
