"""Aggregates (--aggregate mean | median | trimmed) weighted by --weights, in memory and distributed."""

import json

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import microagg
from microagg.kernels.stats import group_weighted
from conftest import assert_k_anonymous, assert_refused, microagg_cli
from synthetic import QI, extract

MEAN, MEDIAN, TRIMMED = 0, 1, 2


def _one_group(values, weights, kind):
    X = np.asarray(values, dtype=float).reshape(-1, 1)
    return group_weighted(X, np.asarray(weights, dtype=float), np.zeros(len(X), np.int64), 1, kind)[0, 0]


def test_unit_weights_give_the_usual_aggregates():
    rng = np.random.default_rng(1)
    for m in (2, 3, 4, 5, 8):
        v = rng.normal(size=m)
        assert _one_group(v, np.ones(m), MEAN) == pytest.approx(v.mean())
        assert _one_group(v, np.ones(m), MEDIAN) == pytest.approx(np.median(v))
    v = np.array([9.0, 1.0, 5.0, 3.0, 100.0])
    assert _one_group(v, np.ones(5), TRIMMED) == pytest.approx((3 + 5 + 9) / 3)  # 20% of 5 = one from each end


def test_weights_move_the_aggregates():
    v, w = [1.0, 2.0, 10.0], [1.0, 1.0, 8.0]
    assert _one_group(v, w, MEAN) == pytest.approx((1 + 2 + 80) / 10)
    assert _one_group(v, w, MEDIAN) == 10.0  # the heavy record holds more than half the weight
    # trimmed: 2 of the 10 units off each end: [1 (w1), 2 (w1)] lose 2 units, 10 keeps 6 of its 8
    assert _one_group(v, w, TRIMMED) == pytest.approx(10.0)
    # three records of weight 1: 0.6 trimmed from each end, the outer records keep 0.4 each
    assert _one_group([0.0, 1.0, 5.0], [1, 1, 1], TRIMMED) == pytest.approx((0.4 * 0 + 1 + 0.4 * 5) / 1.8)


@pytest.mark.parametrize("scale", [2.0 ** 1020, 2.0 ** -1070])
def test_the_aggregates_of_weights_near_the_float_limits_are_those_of_their_ratios(scale):
    """Weights are ratios: the largest finite weights (a group's total beyond the largest float) and
    the smallest (their products with the values below the smallest) give the aggregates that the
    same weights in ordinary units give, to the bit. Both were wrong before: NaN centroids (the job
    refused with a message that blamed the masked file), or centroids near 0."""
    rng = np.random.default_rng(8)
    X = rng.normal(size=(600, 3)) * 1e3
    labels = np.repeat(np.arange(120), 5)
    w = rng.integers(1, 9, 600).astype(float)  # whole: times a power of two, exact even if subnormal
    for kind in (MEAN, MEDIAN, TRIMMED):
        expected = group_weighted(X, w, labels, 120, kind)
        np.testing.assert_array_equal(group_weighted(X, w * scale, labels, 120, kind), expected)
    df = extract(2000, seed=9)
    df["weight"] = rng.integers(1, 9, len(df)) * scale
    args = dict(quasi_identifiers=QI, identifiers=["person_id"], weights="weight")
    released = microagg.anonymize(df, 5, **args)
    assert_k_anonymous(released, QI, 5)
    expected = microagg.anonymize(df.assign(weight=df["weight"] / scale), 5, **args)
    np.testing.assert_array_equal(released[QI].to_numpy(), expected[QI].to_numpy())


@pytest.mark.parametrize("aggregate", ["mean", "median", "trimmed"])
def test_weighted_aggregates_in_memory_equal_distributed(aggregate):
    df = extract(9000, seed=3)
    df["weight"] = np.random.default_rng(4).uniform(0.5, 4.0, len(df))
    args = dict(quasi_identifiers=QI, identifiers=["person_id"], aggregate=aggregate, weights="weight", block_size=2000)
    in_memory = microagg.anonymize(df, 4, **args)
    with dask.config.set(scheduler="synchronous"):
        distributed = microagg.anonymize(dd.from_pandas(df, npartitions=4), 4, **args).compute()
    pd.testing.assert_frame_equal(distributed.reset_index(drop=True), in_memory.reset_index(drop=True))
    assert_k_anonymous(in_memory, QI, 4)
    np.testing.assert_array_equal(in_memory["weight"].to_numpy(), df["weight"].to_numpy())
    unweighted = microagg.anonymize(df, 4, **{**args, "weights": None})
    assert not np.allclose(unweighted[QI].to_numpy(), in_memory[QI].to_numpy())  # the weights matter


def test_cli_trimmed_weighted_release(tmp_path):
    df = extract(3000, seed=5)
    df["weight"] = np.random.default_rng(6).integers(1, 9, len(df)).astype(float)
    source = tmp_path / "in.parquet"
    df.to_parquet(source, index=False)
    out = tmp_path / "out"
    microagg_cli("anonymize", "--no-html", source, out, "--k", 3, "--qi", ",".join(QI), "--identifiers", "person_id",
                 "--aggregate", "trimmed", "--weights", "weight", "--workers", 2, check=True)
    released = pd.read_parquet(out)
    expected = microagg.anonymize(df, 3, QI, identifiers=["person_id"], aggregate="trimmed", weights="weight")
    np.testing.assert_array_equal(released[QI].to_numpy(), expected[QI].to_numpy())
    report = json.loads((out / "_report.json").read_text())
    assert report["aggregate"] == "trimmed" and report["weights"] == "weight"


@pytest.mark.parametrize("change, flags, message", [
    (None, ["--weights", "nope"], "weights column 'nope' is not in the input"),
    (None, ["--weights", "region"], "weights column 'region' is not numeric"),
    (None, ["--weights", "q3"], "weights column 'q3' is also a quasi-identifier"),
    ("zero", ["--weights", "weight"], "weights column 'weight': 3 row(s) hold a weight that is missing"),
])
def test_bad_weights_fail_before_anything_is_written(tmp_path, change, flags, message):
    df = extract(400, seed=8)
    df["weight"] = 1.0
    if change == "zero":
        df.loc[[3, 50, 70], "weight"] = [0.0, -1.0, np.nan]
    assert_refused(tmp_path, df, QI, 3, flags, message)
