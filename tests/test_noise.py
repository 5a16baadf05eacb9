"""Noise-added release (--noise laplace --epsilon) and preference-range release (--release-where)."""

import json

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import microagg
from microagg.kernels import noise
from conftest import assert_k_anonymous, assert_refused, microagg_cli
from synthetic import QI, extract


@pytest.fixture(scope="module")
def frame():
    return extract(12000, seed=7)


def test_laplace_draws_have_their_scale():
    scale = np.full((20000, 3), 2.5)
    draws = noise.laplace_draws(scale, np.arange(20000, dtype=np.int64) * 11, 3)
    # E|Laplace(b)| = b; the mean of 60,000 draws is within 5% of it (its standard error is 0.4%)
    assert abs(np.abs(draws).mean() / 2.5 - 1) < 0.05
    assert abs(draws.mean()) < 0.05 * 2.5  # centred
    assert np.all(noise.laplace_draws(np.zeros((4, 2)), np.arange(4, dtype=np.int64), 3) == 0)


def test_released_noise_has_the_paper_scale(frame):
    k, epsilon = 5, 0.5
    X = frame[QI].to_numpy()
    plain = microagg.anonymize(frame, k, QI, identifiers=["person_id"], block_size=3000)
    noisy = microagg.anonymize(frame, k, QI, identifiers=["person_id"], block_size=3000, noise="laplace",
                               epsilon=epsilon, seed=11)
    labels = plain.groupby(QI, sort=False).ngroup().to_numpy()  # the groups (plain release tuples)
    g = labels.max() + 1
    extents = noise.group_extents(X, labels.astype(np.int64), g)
    first = pd.Series(np.arange(len(labels))).groupby(labels).min().to_numpy()
    drawn = noisy[QI].to_numpy()[first] - plain[QI].to_numpy()[first]
    scale = extents / k / epsilon
    ratio = np.abs(drawn[scale > 0]) / scale[scale > 0]
    assert len(ratio) > 20000
    assert abs(ratio.mean() - 1) < 0.05  # mean |noise| within 5% of its expectation (sensitivity / epsilon)
    assert_k_anonymous(noisy, QI, k)  # one draw per group and attribute: groups keep one tuple


def test_noise_in_memory_equals_distributed_and_follows_the_seed(frame):
    args = dict(quasi_identifiers=QI, identifiers=["person_id"], block_size=3000, noise="laplace", epsilon=1.0)
    in_memory = microagg.anonymize(frame, 4, seed=5, **args)
    with dask.config.set(scheduler="synchronous"):
        distributed = microagg.anonymize(dd.from_pandas(frame, npartitions=3), 4, seed=5, **args).compute()
    pd.testing.assert_frame_equal(distributed.reset_index(drop=True), in_memory.reset_index(drop=True))
    other = microagg.anonymize(frame, 4, seed=6, **args)
    assert not np.allclose(other[QI].to_numpy(), in_memory[QI].to_numpy())


def test_noise_beyond_the_values_an_input_may_hold_is_refused(frame):
    args = dict(quasi_identifiers=QI, identifiers=["person_id"], noise="laplace")
    with pytest.raises(microagg.InputError, match="too small for these values"):
        microagg.anonymize(frame.iloc[:200], 4, epsilon=1e-300, **args)
    released = microagg.anonymize(frame.iloc[:200], 4, epsilon=1e-100, **args)  # large noise, but finite
    assert np.isfinite(released[QI].to_numpy()).all()


def test_cli_noise_is_reproducible_and_recorded(tmp_path, frame):
    source = tmp_path / "in.parquet"
    frame.to_parquet(source, index=False)
    common = ["--k", 5, "--qi", ",".join(QI), "--identifiers", "person_id", "--block-size", 3000,
              "--noise", "laplace", "--epsilon", 2]
    outs = []
    for name, seed, where in (("a", 1, "synchronous"), ("b", 1, "local"), ("c", 2, "synchronous")):
        out = tmp_path / name  # b: the same job on a local cluster of two workers
        proc = microagg_cli("anonymize", "--no-html", source, out, *common, "--seed", seed, "--scheduler", where,
                            "--workers", 2, check=True)
        assert "noise: laplace, epsilon 2.0" in proc.stdout
        outs.append((out / "part-00000.parquet").read_bytes())
    assert outs[0] == outs[1] and outs[0] != outs[2]
    report = json.loads((tmp_path / "a" / "_report.json").read_text())
    assert report["noise"] == "laplace" and report["epsilon"] == 2.0 and report["k_anonymity_verified"]
    assert_k_anonymous(pd.read_parquet(tmp_path / "a"), QI, 5)


def test_release_where_keeps_whole_groups(tmp_path, frame):
    source = tmp_path / "in.parquet"
    frame.to_parquet(source, index=False)
    out = tmp_path / "out"
    condition = "q0 >= 0 and q1 < 2"
    proc = microagg_cli("anonymize", "--no-html", source, out, "--k", 5, "--qi", ",".join(QI), "--identifiers",
                        "person_id", "--block-size", 3000, "--release-where", condition, "--workers", 2, check=True)
    released = pd.read_parquet(out)
    full = microagg.anonymize(frame, 5, QI, identifiers=["person_id"], block_size=3000)
    expected = full[full.eval(condition)]
    assert 0 < len(released) < len(frame)
    pd.testing.assert_frame_equal(released.reset_index(drop=True), expected.reset_index(drop=True),
                                  check_dtype=False, check_categorical=False)
    assert_k_anonymous(released, QI, 5)
    report = json.loads((out / "_report.json").read_text())
    assert report["rows_released"] == len(released) and report["rows"] == len(frame)
    assert f"released {len(released)} of {len(frame)} rows" in proc.stdout


@pytest.mark.parametrize("flags, message", [
    (["--noise", "laplace", "--epsilon", "0"], "epsilon must be a finite number > 0, got 0.0"),
    (["--noise", "laplace", "--epsilon", "-1"], "epsilon must be a finite number > 0"),
    (["--noise", "laplace"], "Laplace noise needs a privacy budget"),
    (["--epsilon", "1"], "give it with --noise laplace"),
    (["--release-where", "region == 'north'"], "['region'] is not among them"),
    (["--release-where", "q0 >"], "is not a valid condition"),
    # an epsilon that takes released values to infinity: committed before, exit 0 (1e-320), or refused
    # after the whole job as if the input held them (1e-300)
    (["--noise", "laplace", "--epsilon", "1e-320"], "--epsilon 1e-320 is too small for these values"),
    (["--noise", "laplace", "--epsilon", "1e-300"], "beyond 1e+150 in magnitude, or to infinity"),
])
def test_bad_noise_and_where_options_fail_before_anything_is_written(tmp_path, frame, flags, message):
    assert_refused(tmp_path, frame.iloc[:500], QI, 5, flags, message)
