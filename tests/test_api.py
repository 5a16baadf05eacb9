"""The in-memory API: partition, anonymize, information_loss."""

import numpy as np
import pandas as pd
import pytest

import microagg
from conftest import assert_k_anonymous


def test_anonymize_pandas_invariants(census):
    df = census.copy()
    df.insert(0, "pid", np.arange(len(df)))
    df["note"] = np.where(np.arange(len(df)) % 2, "odd", "even")
    qi = ["AGI", "FEDTAX", "PTOTVAL", "TAXINC"]
    out = microagg.anonymize(df, 5, quasi_identifiers=qi, identifiers=["pid"])
    assert list(out.columns) == [c for c in df.columns if c != "pid"]
    assert len(out) == len(df)
    assert_k_anonymous(out, qi, 5)
    untouched = [c for c in out.columns if c not in qi]
    pd.testing.assert_frame_equal(out[untouched], df[untouched])
    np.testing.assert_allclose(out[qi].sum(), df[qi].sum(), rtol=1e-12)


def test_anonymize_default_qis_and_median(census):
    out = microagg.anonymize(census, 3, aggregate="median")
    assert_k_anonymous(out, list(census.columns), 3)
    with pytest.raises(microagg.InputError, match="aggregate"):
        microagg.anonymize(census, 3, aggregate="mode")


def test_partition_is_deterministic_and_standardized_flag(census):
    X = census.to_numpy(dtype=float)
    a = microagg.partition(X, 4)
    b = microagg.partition(X.copy(), 4)
    np.testing.assert_array_equal(a, b)
    Z, mean, std = microagg.standardize(X)
    np.testing.assert_array_equal(microagg.partition(Z, 4, standardized=True), a)
    assert a.dtype == np.int64 and np.bincount(a).min() >= 4


def test_a_qi_whose_variance_is_below_the_smallest_float_is_still_grouped_on(census):
    """Scaling a column by a power of two changes no z-score; at 2**-560 the census' first column
    varies by about 1e-165, so its variance (about 1e-330) is below float64's smallest subnormal.
    Its std is still exact, and the partition is that of the unscaled data (not one ignoring it)."""
    X = census.to_numpy(dtype=float)
    tiny = X.copy()
    tiny[:, 0] *= 2.0 ** -560
    assert float(np.var(tiny[:, 0])) == 0.0  # numpy's variance underflows
    _, _, std = microagg.standardize(tiny)
    assert std[0] == microagg.standardize(X)[2][0] * 2.0 ** -560
    labels = microagg.partition(tiny, 3)
    np.testing.assert_array_equal(labels, microagg.partition(X, 3))
    assert not np.array_equal(labels, microagg.partition(np.delete(X, 0, axis=1), 3))


@pytest.mark.parametrize("method", ["pcp", "zscore"])
def test_projection_methods_give_valid_partitions(census, method):
    X = census.to_numpy(dtype=float)
    labels = microagg.partition(X, 5, method=method)
    sizes = np.bincount(labels)
    assert sizes.min() >= 5 and sizes.max() <= 9
    il = microagg.information_loss(X, labels)
    assert 0 < il < 100


def test_univariate_partitions_one_column(census):
    """On several columns, partition returned one partition ordered by the first column and costed on
    all of them: neither individual ranking nor a multivariate method."""
    X = census.to_numpy(dtype=float)
    with pytest.raises(microagg.InputError, match="one column at a time; got 13 columns"):
        microagg.partition(X, 5, method="univariate")
    labels = microagg.partition(X[:, 2:3], 5, method="univariate")
    sizes = np.bincount(labels)
    assert sizes.min() >= 5 and sizes.max() <= 9
    low = pd.Series(X[:, 2]).groupby(labels).min().sort_values()
    high = pd.Series(X[:, 2]).groupby(labels).max()[low.index]
    assert (high.to_numpy()[:-1] <= low.to_numpy()[1:]).all()  # intervals of the column, in its order


def test_information_loss_of_trivial_partitions(census):
    X = census.to_numpy(dtype=float)
    assert microagg.information_loss(X, np.zeros(len(X), dtype=np.int64)) == pytest.approx(100.0)
    assert microagg.information_loss(X, np.arange(len(X))) == pytest.approx(0.0)
