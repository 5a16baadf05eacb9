"""--missing centroid: MDAV over the observed coordinates, missing values released as group centroids."""

import json

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import microagg
from microagg.kernels import mdav
from microagg.kernels.missing import mdav_missing, observed_distances
from microagg.pipeline.release import ReleaseOptions, build_release
from conftest import assert_k_anonymous, assert_refused, microagg_cli
from synthetic import QI, clustered, extract

QI5 = QI[:5]


def _with_holes(n, share=0.1, seed=2):
    df = extract(n, d=5, seed=seed)
    X = df[QI5].to_numpy().copy()
    X[np.random.default_rng(seed).random(X.shape) < share] = np.nan
    X[np.isnan(X).all(axis=1), 0] = 1.0  # every row keeps an observed value
    df[QI5] = X
    return df


def test_observed_distances_rescale_the_shared_coordinates():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(40, 6))
    Z[rng.random(Z.shape) < 0.3] = np.nan
    p = Z[3].copy()
    dist, count = np.empty(40), np.empty(40)
    observed_distances(np.ascontiguousarray(Z.T), 40, p, dist, count)
    for i in range(40):
        both = ~np.isnan(Z[i]) & ~np.isnan(p)
        expected = 6 / both.sum() * ((Z[i, both] - p[both]) ** 2).sum() if both.any() else np.inf
        assert dist[i] == pytest.approx(expected, rel=1e-12)


def test_without_missing_values_it_is_classic_mdav():
    Z = clustered(2000, 5, seed=3)
    Z = (Z - Z.mean(axis=0)) / Z.std(axis=0)
    np.testing.assert_array_equal(mdav_missing(Z, 4), mdav(Z, 4))


def test_in_memory_equals_distributed_and_missing_cells_get_their_group_centroid():
    df = _with_holes(3000)
    in_memory = microagg.anonymize(df, 4, QI5, identifiers=["person_id"], missing="centroid", block_size=200,
                                   blocks_per_task=2)
    options = ReleaseOptions(k=4, quasi_identifiers=tuple(QI5), identifiers=("person_id",), missing="centroid",
                             block_size=200, blocks_per_task=2)
    with dask.config.set(scheduler="threads", num_workers=2):
        released, report = build_release(dd.from_pandas(df, npartitions=3), options)
        released = released.compute().reset_index(drop=True)
    np.testing.assert_array_equal(released[QI5].to_numpy(), in_memory[QI5].to_numpy())
    assert not released[QI5].isna().any().any()
    assert_k_anonymous(released, QI5, 4)
    # every group (rows sharing a released tuple) releases the mean of its observed values per column
    # (distinct groups with equal tuples would merge here; with continuous values they do not occur)
    group = released.groupby(QI5, sort=False).ngroup().to_numpy()
    for j, column in enumerate(QI5):
        observed = df[column].groupby(group).mean()  # pandas skips NaN
        observed = observed.fillna(df[column].mean())  # a group with none: the column's mean
        first = released[column].groupby(group).first()
        np.testing.assert_allclose(first.to_numpy(), observed.to_numpy(), rtol=1e-12, atol=1e-12)
    assert report["missing"] == "centroid"
    assert report["imputed_cells"] == {c: int(df[c].isna().sum()) for c in QI5}
    assert 0 < report["information_loss"] < 100
    assert report["min_tuple_count"] >= 4


def test_cli_release_with_missing_values(tmp_path):
    df = _with_holes(1500, seed=4)
    source = tmp_path / "in.parquet"
    df.to_parquet(source, index=False)
    out = tmp_path / "out"
    proc = microagg_cli("anonymize", "--no-html", source, out, "--k", 5, "--qi", ",".join(QI5), "--identifiers",
                        "person_id", "--missing", "centroid", "--workers", 2, "--block-size", 300, check=True)
    assert "information loss" in proc.stdout
    released = pd.read_parquet(out)
    assert len(released) == len(df) and not released[QI5].isna().any().any()
    assert_k_anonymous(released, QI5, 5)
    report = json.loads((out / "_report.json").read_text())
    assert sum(report["imputed_cells"].values()) == int(df[QI5].isna().sum().sum())
    # the evaluation (on by default) needs complete QIs in both files: off here, and said so
    assert "evaluation" not in report and "not evaluated: with --missing centroid" in proc.stdout
    refused = microagg_cli("anonymize", "--no-html", source, tmp_path / "other", "--k", 5, "--qi", ",".join(QI5),
                           "--missing", "centroid", "--evaluate", "--scheduler", "synchronous")
    assert refused.returncode == 2 and "cannot evaluate this release (with --missing centroid" in refused.stderr
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize("change, flags, message", [
    (None, [], "has 1 row(s) with a missing (NaN) value"),  # the default stays an error
    (None, ["--missing", "centroid", "--method", "vmdav"], "supports --method mdav (grow nn), not 'vmdav'"),
    (None, ["--missing", "centroid", "--aggregate", "median"], "cannot be combined with --aggregate median"),
    ("row", ["--missing", "centroid"], "1 row(s) have every quasi-identifier missing"),
    ("column", ["--missing", "centroid"], "column 'q2' has no observed value"),
])
def test_bad_missing_values_are_refused(tmp_path, change, flags, message):
    df = extract(60, d=3, seed=1)
    df.loc[5, "q1"] = np.nan
    if change == "row":
        df.loc[7, ["q0", "q1", "q2"]] = np.nan
    if change == "column":
        df["q2"] = np.nan
    assert_refused(tmp_path, df, ["q0", "q1", "q2"], 3, flags, message)


@pytest.mark.parametrize("holes", [False, True])
def test_the_statistics_pass_counts_complete_rows_extremes_and_empty_rows(holes):
    from microagg.pipeline.release import _partition_sums

    df = _with_holes(500) if holes else extract(500, d=5, seed=2)
    if holes:
        df.loc[7, QI5] = np.nan  # a row with no observed value
    sums, complete, mean, comoment, bad, evidence, empty, lo, hi, swallowed = _partition_sums(df, QI5)
    X = df[QI5].to_numpy(dtype=np.float64)
    F = X[~np.isnan(X).any(axis=1)]
    assert complete == len(F) and (complete < len(X)) == holes
    np.testing.assert_allclose(mean, F.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(comoment, (F - F.mean(axis=0)).T @ (F - F.mean(axis=0)), rtol=1e-10)
    np.testing.assert_array_equal(lo, np.nanmin(X, axis=0))
    np.testing.assert_array_equal(hi, np.nanmax(X, axis=0))
    assert empty == (1 if holes else 0) and swallowed == (0, None, None)  # not a CSV input: not looked for
    np.testing.assert_array_equal(sums.nans, np.isnan(X).sum(axis=0))
