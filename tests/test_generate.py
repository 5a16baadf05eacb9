"""`microagg generate`: seeded census-like microdata, deterministic, atomic, realistic and usable."""

import os
from pathlib import Path

import dask
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from conftest import microagg_cli
from microagg.jobs.cluster import dask_client
from microagg.pipeline import generate
from microagg.pipeline.errors import InputError


def _write(output, rows, files, seed=0, client=None):
    if client is not None:
        return generate.write_dataset(output, rows, files, seed, client)
    with dask.config.set(scheduler="synchronous"):
        return generate.write_dataset(output, rows, files, seed)


def _parts(directory):
    return sorted(p for p in Path(directory).iterdir() if p.name.startswith("part-"))


def _bytes(directory):
    return {p.name: p.read_bytes() for p in _parts(directory)}


@pytest.fixture(scope="module")
def sample():
    """200,000 rows of seed 0 (four random streams), as pandas."""
    return generate.chunk(200_000, 0, 0).to_pandas()


# --- determinism -----------------------------------------------------------------------------------

def test_a_row_depends_only_on_the_seed_and_its_position(sample):
    edge = generate.STREAM_ROWS  # a window across the boundary of two random streams
    window = generate.chunk(20, edge - 7, 0).to_pandas()
    pd.testing.assert_frame_equal(window, sample.iloc[edge - 7:edge + 13].reset_index(drop=True))
    assert generate.chunk(1, 12_345, 0).to_pandas().iloc[0].equals(sample.iloc[12_345].rename(0))


def test_same_arguments_give_byte_identical_files_on_any_scheduler(tmp_path):
    rows, files = 150_000, 3  # files start and end inside random streams
    _write(tmp_path / "sync", rows, files, seed=11)
    with dask_client("local", workers=2, threads_per_worker=1, memory_limit="2GiB") as client:
        _write(tmp_path / "cluster", rows, files, seed=11, client=client)
    _write(tmp_path / "again", rows, files, seed=11)
    sync = _bytes(tmp_path / "sync")
    assert list(sync) == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert _bytes(tmp_path / "cluster") == sync
    assert _bytes(tmp_path / "again") == sync


def test_the_rows_do_not_depend_on_the_number_of_files(tmp_path):
    _write(tmp_path / "one", 5_000, 1, seed=3)
    _write(tmp_path / "seven", 5_000, 7, seed=3)
    one = pq.read_table(tmp_path / "one").replace_schema_metadata()
    seven = pq.read_table(tmp_path / "seven").replace_schema_metadata()
    assert [pq.ParquetFile(p).metadata.num_rows for p in _parts(tmp_path / "seven")] == [714, 714, 714, 715, 714,
                                                                                         714, 715]
    assert one.equals(seven)


def test_a_different_seed_gives_different_data():
    a = generate.chunk(2_000, 0, 1).to_pandas()
    b = generate.chunk(2_000, 0, 2).to_pandas()
    assert (a["person_id"] == b["person_id"]).all()
    for column in ["AGE", "WAGE", "AGI", "HOUSEHOLD_TYPE"]:
        assert (a[column] != b[column]).mean() > 0.5, column


# --- the dataset -----------------------------------------------------------------------------------

def test_row_count_unique_ids_row_groups_and_schema(tmp_path, monkeypatch):
    monkeypatch.setattr(generate, "CHUNK_ROWS", 1_000)  # several row groups per file
    summary = _write(tmp_path / "out", 4_500, 2, seed=5)
    assert summary["rows"] == 4_500 and summary["files"] == 2
    parts = _parts(tmp_path / "out")
    assert [pq.ParquetFile(p).metadata.num_row_groups for p in parts] == [3, 3]  # 1000+1000+250 rows each
    df = pd.read_parquet(tmp_path / "out")
    assert len(df) == 4_500
    assert df["person_id"].is_unique and df["person_id"].tolist() == list(range(4_500))
    pd.testing.assert_frame_equal(df, generate.chunk(4_500, 0, 5).to_pandas())
    schema = pq.read_schema(parts[0])
    assert schema.names == ["person_id", *generate.CATEGORICAL, *generate.QUASI_IDENTIFIERS,
                            *generate.CONFIDENTIAL, generate.WEIGHTS]
    assert len(generate.QUASI_IDENTIFIERS) == 13 and generate.IDENTIFIERS == ["person_id"]
    assert all(pd.api.types.is_numeric_dtype(df[c]) for c in generate.QUASI_IDENTIFIERS)
    assert all(pd.api.types.is_string_dtype(df[c]) for c in generate.CATEGORICAL)
    assert not df.isna().any().any()
    assert all(c.isupper() for c in df.columns if c != "person_id")
    assert b"microagg.generate" in schema.metadata


def test_default_files_and_balanced_ranges():
    assert [generate.default_files(n) for n in (1, 999_999, 1_000_000, 1_000_001, 10_000_000)] == [1, 1, 1, 2, 10]
    assert generate.file_ranges(10, 3) == [(0, 3), (3, 3), (6, 4)]
    assert generate.file_ranges(5, 5) == [(i, 1) for i in range(5)]


@pytest.mark.parametrize(("rows", "files", "seed", "name"), [
    (0, 1, 0, "--rows"), (5, 0, 0, "--files"), (5, 6, 0, "--files"), (5, 1, -1, "--seed"), (5.0, 1, 0, "--rows"),
])
def test_bad_arguments_are_refused_before_anything_runs(tmp_path, rows, files, seed, name):
    with pytest.raises(InputError, match=name):
        generate.write_dataset(tmp_path / "out", rows, files, seed)
    assert os.listdir(tmp_path) == []


# --- realism ---------------------------------------------------------------------------------------

def test_tax_identities_and_bounds(sample):
    df = sample
    money = [c for c in generate.QUASI_IDENTIFIERS if c not in ("AGE", "CHILDREN", "HOUSEHOLD_SIZE")]
    assert (df[money + ["HEALTH_EXP"]] >= 0).all().all()
    assert (df[money + ["HEALTH_EXP"]] % 1 == 0).all().all(), "amounts are whole currency units"
    assert (df["EARNINGS"] == df["WAGE"] + df["SELF_EMP"]).all()
    assert (df["AGI"] == df["EARNINGS"] + df["CAPITAL_INC"] + df["RETIREMENT"] - df["ADJUSTMENTS"]).all()
    assert (df["TAXINC"] <= df["AGI"]).all()
    assert (df["TAX"] <= df["TAXINC"]).all()
    assert (df["TAX"] <= 0.37 * df["TAXINC"] + 0.5).all()
    assert (df["FICA"] <= 0.0765 * df["WAGE"] + 0.01).all()
    capped = df["WAGE"] > 300_000
    assert capped.any() and (df.loc[capped, "FICA"] < 0.05 * df.loc[capped, "WAGE"]).all(), "the wage base caps FICA"
    assert df["AGE"].between(0, 100).all() and df["AGE"].min() >= 17
    assert (df["WEIGHT"] > 0).all()


def test_zero_inflation_skew_and_correlations(sample):
    df = sample
    assert 0.25 <= (df["WAGE"] == 0).mean() <= 0.35
    assert (df["SELF_EMP"] == 0).mean() > 0.85
    assert 0.5 < (df["CAPITAL_INC"] == 0).mean() < 0.85
    positive = df.loc[df["CAPITAL_INC"] > 0, "CAPITAL_INC"]
    assert positive.max() > 100 * positive.median(), "capital income is heavy-tailed"
    wages = df.loc[df["WAGE"] > 0, "WAGE"]
    assert wages.mean() > 1.2 * wages.median() and wages.skew() > 2, "wages are right-skewed"
    assert np.corrcoef(df["WAGE"], df["AGI"])[0, 1] > 0.5
    assert np.corrcoef(df["AGI"], df["TAX"])[0, 1] > 0.5
    assert np.corrcoef(df["CHILDREN"], df["HOUSEHOLD_SIZE"])[0, 1] > 0.5
    assert np.corrcoef(df["AGE"], df["RETIREMENT"])[0, 1] > 0.3
    # the wage's age hump: prime-age earners out-earn the young and the old
    mean_wage = wages.groupby(pd.cut(df.loc[wages.index, "AGE"], [16, 24, 54, 100])).mean()
    assert mean_wage.iloc[1] > 1.5 * mean_wage.iloc[0] and mean_wage.iloc[1] > 1.2 * mean_wage.iloc[2]


def test_household_types_drive_ages_and_counts(sample):
    df = sample
    shares = df["HOUSEHOLD_TYPE"].value_counts(normalize=True)
    assert set(shares.index) == set(generate._TYPES) and shares.min() > 0.05
    by_type = df.groupby("HOUSEHOLD_TYPE")
    assert (by_type.get_group("COUPLE_WITH_CHILDREN")["CHILDREN"] >= 1).all()
    assert (by_type.get_group("SINGLE_PARENT")["CHILDREN"] >= 1).all()
    assert (by_type.get_group("RETIRED")["CHILDREN"] == 0).all()
    assert by_type.get_group("RETIRED")["AGE"].min() >= 60
    assert by_type.get_group("STUDENT")["AGE"].max() <= 30
    assert (df["HOUSEHOLD_SIZE"] >= 1 + df["CHILDREN"]).all()
    assert (df.loc[df["HOUSEHOLD_TYPE"].str.startswith("COUPLE"), "HOUSEHOLD_SIZE"] >= 2).all()
    assert set(df["REGION"]) == {"NORTHEAST", "MIDWEST", "SOUTH", "WEST"} and set(df["SEX"]) == {"F", "M"}


# --- the output directory and the command ----------------------------------------------------------

def test_atomic_release_directory(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _write(out, 300, 2, seed=1)
    assert (out / "_SUCCESS").exists()
    _write(out, 300, 3, seed=1)  # a previous generated dataset is replaced
    assert sorted(_bytes(out)) == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(generate, "write_file", fail)
    with pytest.raises(OSError, match="disk full"):
        _write(out, 300, 2, seed=1)
    assert len(_parts(out)) == 3, "a failed job leaves the previous dataset in place"
    assert [p for p in os.listdir(tmp_path) if ".microagg-" in p] == [], "temporary directory left behind"
    with pytest.raises(OSError):
        _write(tmp_path / "new", 300, 2, seed=1)
    assert not (tmp_path / "new").exists()


def test_refuses_a_directory_that_is_not_a_release(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious.txt").write_text("keep me")
    with pytest.raises(InputError, match="not a microagg release"):
        _write(tmp_path / "data", 10, 1)
    assert os.listdir(tmp_path / "data") == ["precious.txt"]


def test_cli_generate(tmp_path):
    out = tmp_path / "cli"
    proc = microagg_cli("generate", out, "--rows", "2k", "--files", 2, "--seed", 7, "--scheduler", "synchronous",
                        check=True)
    assert proc.stdout.count("\n") == 1 and "2000 rows in 2 file(s)" in proc.stdout and " s)" in proc.stdout
    _write(tmp_path / "api", 2_000, 2, seed=7)
    assert _bytes(out) == _bytes(tmp_path / "api")
    assert (out / "_SUCCESS").exists()
    quiet = microagg_cli("--quiet", "generate", tmp_path / "q", "--rows", 10, "--scheduler", "synchronous",
                         check=True)
    assert quiet.stdout == "" and len(_parts(tmp_path / "q")) == 1


@pytest.mark.parametrize(("flags", "message"), [
    (["--rows", "0"], "--rows must be at least 1"),
    (["--rows", "5", "--files", "6"], "--files (6) cannot exceed --rows (5)"),
    (["--rows", "many"], "argument --rows: not a count"),
    (["--rows", "5", "--seed", "-3"], "--seed must be >= 0"),
])
def test_cli_bad_arguments_exit_2(tmp_path, flags, message):
    proc = microagg_cli("generate", tmp_path / "out", *flags, "--scheduler", "synchronous")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_generated_extract_can_be_anonymized(tmp_path):
    source, release = tmp_path / "generated", tmp_path / "release"
    microagg_cli("generate", source, "--rows", 3_000, "--files", 2, "--seed", 4, "--scheduler", "synchronous",
                 check=True)
    proc = microagg_cli("anonymize", source, release, "--k", 5, "--qi", ",".join(generate.QUASI_IDENTIFIERS),
                        "--identifiers", ",".join(generate.IDENTIFIERS), "--scheduler", "synchronous")
    assert proc.returncode == 0, proc.stderr
    released = pd.read_parquet(release)
    assert len(released) == 3_000 and "person_id" not in released.columns
    assert released.groupby(generate.QUASI_IDENTIFIERS).size().min() >= 5
    original = pd.read_parquet(source)
    pd.testing.assert_series_equal(released["HEALTH_EXP"], original["HEALTH_EXP"])
