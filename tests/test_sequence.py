"""Sequence methods (pcp, zscore, univariate): one global ordering, one contiguous partition along it,
distributed through a chain of bucket tasks that must give exactly the in-memory optimum."""

import json

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import microagg
from microagg import kernels
from microagg.pipeline import sequence
from microagg.pipeline.release import ReleaseOptions, build_release
from conftest import CENSUS_CSV, assert_k_anonymous, assert_refused, microagg_cli
from synthetic import QI, extract

CENSUS = pd.read_csv(CENSUS_CSV)


def _distributed(df, k, method, method_options=(), npartitions=3, **options):
    """The distributed release, on small buckets (so the chain crosses many bucket edges)."""
    options.setdefault("block_size", 200)
    options.setdefault("blocks_per_task", 2)
    release = ReleaseOptions(k=k, method=method, quasi_identifiers=tuple(QI), identifiers=("person_id",),
                             method_options=tuple(sorted(dict(method_options).items())), **options)
    with dask.config.set(scheduler="threads", num_workers=2):
        released, report = build_release(dd.from_pandas(df, npartitions=npartitions), release)
        return released.compute().reset_index(drop=True), report


@pytest.mark.parametrize("method, options", [("pcp", {}), ("zscore", {}), ("univariate", {"grouping": "optimal"}),
                                             ("univariate", {"grouping": "fixed"})])
def test_distributed_equals_in_memory_across_many_buckets(method, options):
    df = extract(6000, seed=11)
    df.loc[::7, "q3"] = df.loc[0, "q3"]  # ties in one column: the order falls back to the row id
    in_memory = microagg.anonymize(df, 4, QI, method=method, identifiers=["person_id"], method_options=options,
                                   block_size=200)
    released, report = _distributed(df, 4, method, options)
    np.testing.assert_array_equal(released[QI].to_numpy(), in_memory[QI].to_numpy())
    n_blocks = len(QI) if method == "univariate" else 1
    assert report["blocks"] == n_blocks * (6000 // 400)  # buckets of about 400 rows, each chained
    if method == "univariate":
        assert report["k_anonymity_scope"] == "each quasi-identifier"
        for column in QI:
            assert_k_anonymous(released, [column], 4)
        assert set(report["attribute_blocks"]["real_anonymity"]) == {*(str(i) for i in range(1, 14)), "all"}
    else:
        assert report["k_anonymity_scope"] == "all quasi-identifiers"
        assert_k_anonymous(released, QI, 4)
    # the same partition whatever the input partitioning and bucket size
    other, _ = _distributed(df, 4, method, options, npartitions=5, block_size=150)
    np.testing.assert_array_equal(other[QI].to_numpy(), released[QI].to_numpy())


def test_univariate_is_each_column_optimal_or_in_runs_of_k():
    X = CENSUS.to_numpy(dtype=float)
    k = 3
    optimal = microagg.anonymize(CENSUS, k, method="univariate")
    fixed = microagg.anonymize(CENSUS, k, method="univariate", method_options={"grouping": "fixed"})
    for j, column in enumerate(CENSUS.columns):
        x = X[:, j]
        _, cost = kernels.univariate_optimal(x.copy(), k)  # on the raw values: equal-cost optima may differ
        assert ((optimal[column] - x) ** 2).sum() == pytest.approx(cost, rel=1e-9, abs=1e-9)
        sizes = optimal.groupby(column).size()
        assert sizes.min() >= k
        # fixed: runs of k along the stable sort, the last run taking the remainder
        order = np.argsort(x, kind="stable")
        runs = np.minimum(np.arange(len(x)) // k, len(x) // k - 1)
        expected = np.empty(len(x))
        expected[order] = pd.Series(x[order]).groupby(runs).transform("mean").to_numpy()
        np.testing.assert_allclose(fixed[column].to_numpy(), expected, rtol=1e-12, atol=1e-9)
        # the optimum never loses more than the fixed runs
        assert ((optimal[column] - x) ** 2).sum() <= ((fixed[column] - x) ** 2).sum() * (1 + 1e-12)


@pytest.mark.parametrize("method", ["pcp", "zscore"])
def test_projection_is_the_optimal_contiguous_partition_of_the_paper(method):
    X = CENSUS.to_numpy(dtype=float)
    Z, _, _ = microagg.standardize(X)
    labels = microagg.partition(X, 3, method=method)
    score = kernels.project(Z, sequence.direction(method, Z)) if method == "pcp" else Z.sum(axis=1)
    expected, _ = kernels.optimal_contiguous(Z, np.argsort(score, kind="stable").astype(np.int64), 3)
    np.testing.assert_array_equal(labels, expected)


def test_strata_are_ordered_first_and_never_shared():
    df = extract(3000, seed=5)
    in_memory = microagg.anonymize(df, 5, QI, method="pcp", identifiers=["person_id"], strata=["region"],
                                   block_size=200)
    released, report = _distributed(df, 5, "pcp", strata=("region",))
    np.testing.assert_array_equal(released[QI].to_numpy(), in_memory[QI].to_numpy())
    assert_k_anonymous(released, ["region", *QI], 5)
    fixed, _ = _distributed(df, 5, "univariate", {"grouping": "fixed"}, strata=("region",))
    for column in QI:
        assert_k_anonymous(fixed, ["region", column], 5)


def test_cli_sequence_methods_on_a_local_cluster_match_the_synchronous_run(tmp_path):
    outs = []
    for name, extra in (("sync", ["--scheduler", "synchronous"]), ("local", ["--workers", 2, "--block-size", 200])):
        out = tmp_path / name
        microagg_cli("anonymize", "--no-html", CENSUS_CSV, out, "--k", 3, "--method", "univariate",
                     "--univariate-grouping", "fixed", *extra, check=True)
        outs.append(out)
    assert (outs[0] / "part-00000.parquet").read_bytes() == (outs[1] / "part-00000.parquet").read_bytes()
    report = json.loads((outs[0] / "_report.json").read_text())
    assert report["method_options"] == {"grouping": "fixed"} and report["min_group_size"] == 3


@pytest.mark.parametrize("flags, message", [
    (["--method", "pcp", "--refine", "local"], "does not apply to --method pcp"),
    (["--method", "univariate", "--blocks", "q0,q1;q2"], "takes no --blocks"),
    (["--method", "univariate", "--univariate-grouping", "fixed", "--grow", "nc"], "grow"),
])
def test_bad_sequence_options_are_refused(tmp_path, flags, message):
    df = extract(100, seed=1)
    assert_refused(tmp_path, df, ["q0", "q1", "q2"], 3, flags, message)
