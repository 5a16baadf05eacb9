"""Mic1D-k (--method mic1d): the paper's steps, in memory and distributed with exactly the same values."""

import json

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import microagg
from microagg.pipeline import mic1d, release
from microagg.pipeline.errors import ReleaseGateError
from microagg.pipeline.release import ReleaseOptions, build_release
from conftest import CENSUS_CSV, assert_refused, microagg_cli
from naive import mic1d_paper
from synthetic import QI, extract

CENSUS = pd.read_csv(CENSUS_CSV)


def _distributed(df, k, qi, method_options=(), npartitions=3, scheduler="threads", **options):
    """The distributed release on small buckets (runs cross many bucket edges)."""
    options.setdefault("block_size", 20)
    options.setdefault("blocks_per_task", 1)  # buckets of 20 x 1 x 25 = 500 values
    release_options = ReleaseOptions(k=k, method="mic1d", quasi_identifiers=tuple(qi),
                                     method_options=tuple(sorted(dict(method_options).items())), **options)
    with dask.config.set(scheduler=scheduler, num_workers=2):
        released, report = build_release(dd.from_pandas(df, npartitions=npartitions), release_options)
        return released.compute().reset_index(drop=True), report


def _ties(n, seed):
    """Integer-valued columns of different scales: many equal values inside and across columns."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.integers(0, 20, n), "b": rng.integers(0, 5, n) * 10, "c": rng.integers(0, 3000, n),
                         "d": np.zeros(n, dtype=np.int64)}).astype(float)


@pytest.mark.parametrize("k, merge", [(3, False), (7, True), (40, False), (1000, False)])
def test_in_memory_follows_the_paper_step_by_step(k, merge):
    X = _ties(400, seed=k).to_numpy()  # column d is all zeros: released as it is, outside the vector
    got = mic1d.protect(X, k, merge=merge)
    np.testing.assert_allclose(got[:, :3], mic1d_paper(X[:, :3], k, merge), rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(got[:, 3], X[:, 3])


def test_constant_columns_are_released_as_they_are_in_memory_and_distributed(tmp_path):
    rng = np.random.default_rng(4)
    n = 997
    df = pd.DataFrame({"a": rng.normal(size=n), "c": np.full(n, 0.1), "b": rng.integers(0, 50, n).astype(float),
                       "d": np.full(n, 7.0)})
    X = df.to_numpy()
    # the paper's vector of all four columns changes some of the constant 0.1s (what this guards against)
    assert (mic1d_paper(X, 5)[:, 1] != 0.1).any()
    expected = mic1d_paper(X[:, [0, 2]], 5)
    in_memory = microagg.anonymize(df, 5, method="mic1d")
    np.testing.assert_allclose(in_memory[["a", "b"]].to_numpy(), expected, rtol=1e-12, atol=1e-9)
    assert (in_memory["c"] == 0.1).all() and (in_memory["d"] == 7.0).all()
    released, report = _distributed(df, 5, ["a", "c", "b", "d"])
    np.testing.assert_array_equal(released.to_numpy(), in_memory.to_numpy())
    assert report["constant_columns"] == ["c", "d"] and report["values"] == 2 * n
    assert report["real_anonymity"]["c"] == n  # a constant adds no distinct tuple
    assert report["real_anonymity"]["all"] == pytest.approx(n / len(released[["a", "b"]].drop_duplicates()))
    histograms = report["summary"]["histograms"]
    assert histograms["masked"][1] == histograms["original"][1] and sum(histograms["masked"][1]) == n
    # k counts the vector's values: 2 varying columns x 3 rows = 6 values
    with pytest.raises(microagg.InputError, match="fewer than k=7"):
        microagg.anonymize(df.iloc[:3], 7, method="mic1d")
    # every QI constant: the records are released as they are, through the CLI too
    path = tmp_path / "constant.csv"
    df[["c", "d"]].iloc[:30].to_csv(path, index=False)
    proc = microagg_cli("anonymize", "--no-html", path, tmp_path / "out", "--k", 5, "--method", "mic1d", "--scheduler",
                        "synchronous", "--no-evaluate", check=True)
    assert "no QI varies" in proc.stdout and "constant QIs released as they are: c, d" in proc.stdout
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out"), df[["c", "d"]].iloc[:30])


def test_released_values_stay_in_range_and_runs_of_equal_values_come_back_unchanged():
    X = CENSUS.to_numpy(dtype=float)
    P = mic1d.protect(X, 500)
    assert P.shape == X.shape and np.isfinite(P).all()
    assert (P >= X.min()).all() and (P <= X.max()).all()
    assert not np.array_equal(P, X)
    # a first-pass run of equal values normalizes to 0.5 and maps back to its value, whatever the
    # second pass does: of 600 sevens (k=5) only those in the runs shared with 0 or 1000 change
    Y = np.column_stack([np.r_[np.full(599, 7.0), 8.0], np.arange(600.0) * 1000])
    Q = mic1d.protect(Y, 5)
    assert (Q[:599, 0] == 7.0).sum() >= 590 and (Q[:599, 0] != 7.0).any()


@pytest.mark.parametrize("k, method_options, extra", [
    (3, {}, {}),
    (5, {"remainder": "merge"}, {}),
    (1000, {}, {}),  # runs longer than a bucket: one run gathers the slices of several buckets
    (4, {}, {"attribute_blocks": (("q0", "q1", "q2"), ("q3", "q4"))}),
])
def test_distributed_equals_in_memory_exactly(k, method_options, extra):
    df = extract(1500, d=5, seed=3)
    df[["q1", "q3"]] = df[["q1", "q3"]].round(0)  # ties
    qi = QI[:5]
    in_memory = microagg.anonymize(df, k, qi, method="mic1d", identifiers=["person_id"], method_options=method_options,
                                   attribute_blocks=extra.get("attribute_blocks"))
    released, report = _distributed(df, k, qi, method_options, identifiers=("person_id",), **extra)
    np.testing.assert_array_equal(released[qi].to_numpy(), in_memory[qi].to_numpy())
    assert list(released.columns) == list(in_memory.columns)
    assert (released["region"] == df["region"]).all() and (released["flag"] == df["flag"]).all()
    assert report["tasks"] >= 2 * (len(extra.get("attribute_blocks", [qi])) - 1) + 10  # many buckets
    assert report["values"] == 1500 * 5 and report["k_anonymity_verified"] is False
    assert report["real_anonymity"]["all"] >= 1.0
    # independent of the input partitioning and of the bucket size
    other, _ = _distributed(df, k, qi, method_options, npartitions=5, block_size=33, identifiers=("person_id",),
                            **extra)
    np.testing.assert_array_equal(other[qi].to_numpy(), released[qi].to_numpy())


def test_strata_restart_the_runs():
    df = extract(900, d=3, seed=5)
    qi = QI[:3]
    in_memory = microagg.anonymize(df, 6, qi, method="mic1d", identifiers=["person_id"], strata=["region"])
    released, report = _distributed(df, 6, qi, identifiers=("person_id",), strata=("region",))
    np.testing.assert_array_equal(released[qi].to_numpy(), in_memory[qi].to_numpy())
    # each stratum on its own equals Mic1D-k of that stratum alone
    for region, rows in df.groupby("region", observed=True).groups.items():
        alone = mic1d.protect(df.loc[rows, qi].to_numpy(), 6)
        np.testing.assert_array_equal(released.loc[rows, qi].to_numpy(), alone)
    assert report["strata"]["count"] == 4


def test_report_sse_and_real_anonymity_match_a_direct_computation():
    X = CENSUS.to_numpy(dtype=float)
    released, report = _distributed(CENSUS, 3000, list(CENSUS.columns))
    P = released.to_numpy()
    std = X.std(axis=0)  # the pipeline's standardization (population standard deviation)
    assert report["sse"] == pytest.approx((((X - P) / std) ** 2).sum(), rel=1e-9)
    assert report["real_anonymity"]["all"] == pytest.approx(len(X) / len(np.unique(P, axis=0)))
    assert report["real_anonymity"]["AGI"] == pytest.approx(len(X) / len(np.unique(P[:, 1])))
    assert report["remainder_runs"] == 1 and report["min_group_size"] == 14040 % 3000


def test_the_gate_refuses_runs_shorter_than_k_and_nothing_is_written(tmp_path, monkeypatch):
    broken = mic1d.second_pass

    def short_runs(cells, lo, hi, bounds, k, merge):  # a deliberately broken partitioner (test hook)
        return broken(cells, lo, hi, bounds, k - 1, merge)

    monkeypatch.setattr(mic1d, "second_pass", short_runs)
    with pytest.raises(ReleaseGateError, match="fewer than k=5 values"):
        _distributed(CENSUS, 5, list(CENSUS.columns), scheduler="sync")
    out = tmp_path / "release"
    options = ReleaseOptions(k=5, method="mic1d", block_size=20, blocks_per_task=1)
    with dask.config.set(scheduler="sync"), pytest.raises(ReleaseGateError):
        release.run(str(CENSUS_CSV), str(out), options)
    assert not out.exists() and not list(tmp_path.iterdir())


def test_cli_on_a_local_cluster_matches_the_synchronous_run(tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(CENSUS)), 4)):  # four input files against one
        CENSUS.iloc[rows].to_parquet(source / f"part-{i}.parquet", index=False)
    outs = []
    for name, extra in (("sync", [CENSUS_CSV, "--scheduler", "synchronous"]),
                        ("local", [source, "--workers", 2, "--block-size", 20, "--blocks-per-task", 1])):
        out = tmp_path / name
        proc = microagg_cli("anonymize", "--no-html", extra[0], out, "--k", 3000, "--method", "mic1d", *extra[1:],
                            check=True)
        assert "real anonymity k'" in proc.stdout
        outs.append(out)
    assert (outs[0] / "part-00000.parquet").read_bytes() == (outs[1] / "part-00000.parquet").read_bytes()
    report = json.loads((outs[1] / "_report.json").read_text())
    assert report["method"] == "mic1d" and report["remainder"] == "separate"
    assert "records are not k-anonymous" in report["k_anonymity_scope"]


@pytest.mark.parametrize("flags, message", [
    (["--method", "mic1d", "--refine", "local"], "--refine local does not apply to --method mic1d"),
    (["--method", "mic1d", "--aggregate", "median"], "--aggregate median does not apply"),
    (["--method", "mic1d", "--noise", "laplace", "--epsilon", "1"], "--noise laplace does not apply"),
    (["--method", "mic1d", "--release-where", "q0 > 0"], "--release-where does not apply"),
    (["--method", "mdav", "--remainder", "merge"], "does not take option(s) ['remainder']"),
])
def test_bad_mic1d_options_are_refused(tmp_path, flags, message):
    assert_refused(tmp_path, extract(100, seed=1), ["q0", "q1", "q2"], 3, flags, message)


def test_k_counts_values_not_rows():
    small = CENSUS.iloc[:10]
    out = microagg.anonymize(small, 100, method="mic1d")  # 130 values >= k = 100 > 10 rows
    assert out.shape == small.shape
    with pytest.raises(microagg.InputError, match="fewer than k=200"):
        microagg.anonymize(small, 200, method="mic1d")
    with pytest.raises(microagg.InputError, match="mic1d releases protected values"):
        microagg.partition(CENSUS.to_numpy(dtype=float), 5, method="mic1d")
