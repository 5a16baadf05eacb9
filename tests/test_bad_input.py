"""Bad input: a clear one-paragraph error naming the column and the count, a non-zero exit, nothing written."""

import importlib.util
import json
import os

import numpy as np
import pandas as pd
import pytest

import microagg
from conftest import CENSUS_CSV, assert_k_anonymous, microagg_cli


def _fails(tmp_path, *args, code=2):
    out = tmp_path / "release"
    proc = microagg_cli("anonymize", *args[:1], out, *args[1:], "--scheduler", "synchronous")
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("microagg: error:")
    assert not out.exists(), "a failed job wrote its output"
    assert not [p for p in os.listdir(tmp_path) if ".microagg-" in p], "temporary directory left behind"
    return proc.stderr


@pytest.fixture
def small(tmp_path):
    df = pd.DataFrame({"id": range(12), "a": np.arange(12.0), "b": np.arange(12.0) ** 2, "c": list("xyzw") * 3})
    return df


def _csv(tmp_path, df, name="in.csv"):
    path = tmp_path / name
    df.to_csv(path, index=False)
    return path


def test_nan_values_name_column_and_count(tmp_path, small):
    small.loc[[1, 4, 7], "b"] = np.nan
    err = _fails(tmp_path, _csv(tmp_path, small), "--k", "3", "--qi", "a,b")
    assert "'b'" in err and "3 row(s)" in err and "missing" in err and "--missing centroid" in err


def test_infinite_values_name_column_and_count(tmp_path, small):
    small["a"] = small["a"].astype(float)
    small.loc[[2, 3], "a"] = np.inf
    path = tmp_path / "in.parquet"
    small.to_parquet(path, index=False)
    err = _fails(tmp_path, path, "--k", "3", "--qi", "a,b")
    assert "'a'" in err and "2 row(s)" in err and "infinite" in err
    assert "--missing centroid" not in err  # it releases missing values, not infinite ones


def test_non_numeric_qi_names_column_and_value(tmp_path, small):
    small["b"] = small["b"].astype(object)
    small.loc[5, "b"] = "unknown"
    err = _fails(tmp_path, _csv(tmp_path, small), "--k", "3", "--qi", "a,b")
    assert "'b'" in err and "not numeric" in err and "1 row(s) hold a value that is not a number" in err
    assert "'unknown'" in err


def _late_text_csv(tmp_path, column, rows=(15_000, 17_500)):
    """20,000 rows whose ``column`` holds text only at ``rows``, past the first 256 kB Dask guesses the
    types from."""
    rng = np.random.default_rng(4)
    df = pd.DataFrame({"a": rng.normal(size=20_000), "b": rng.normal(size=20_000),
                       "zip": rng.integers(10_000, 99_999, 20_000)})
    df[column] = df[column].astype(object)
    df.loc[list(rows), column] = ["n.a.", "?"][:len(rows)]
    return _csv(tmp_path, df)


def test_a_qi_with_text_after_its_first_rows_names_column_and_count(tmp_path):
    err = _fails(tmp_path, _late_text_csv(tmp_path, "b"), "--k", "3", "--qi", "a,b")
    assert "'b' (quasi-identifier): 2 row(s), for example 'n.a.'" in err and "not numbers" in err
    assert "Mismatched" not in err  # Dask's table is not shown


def test_survey_weights_with_text_after_their_first_rows_name_column_and_count(tmp_path):
    df = pd.DataFrame({"a": np.arange(20_000.0), "b": np.arange(20_000.0) % 7, "w": np.ones(20_000)})
    df["w"] = df["w"].astype(object)
    df.loc[18_000, "w"] = "heavy"
    err = _fails(tmp_path, _csv(tmp_path, df), "--k", "3", "--qi", "a,b", "--weights", "w")
    assert "'w' (weights): 1 row(s), for example 'heavy'" in err


def test_a_csv_in_another_dialect_names_the_flag_that_reads_it(tmp_path, small):
    """A semicolon-separated file read as comma-separated, decimal commas, and Latin-1 bytes (in the
    first block, and past it, where a worker meets them) each name the flag that reads the file."""
    path = tmp_path / "semi.csv"
    small.to_csv(path, index=False, sep=";", decimal=",")
    err = _fails(tmp_path, path, "--k", "3", "--qi", "a,b")
    assert "reads as one column, 'id;a;b;c'" in err and "--csv-separator ';'" in err
    err = _fails(tmp_path, path, "--k", "3", "--qi", "a,b", "--csv-separator", ";")
    assert "'a' is not numeric" in err and "--csv-decimal ','" in err
    late = pd.DataFrame({"a": np.arange(30_000.0), "b": np.arange(30_000.0) % 7, "town": "Paris"})
    late.loc[25_000, "town"] = "Orl\u00e9ans"
    for name, frame in (("first.csv", late.iloc[24_000:]), ("late.csv", late)):
        path = tmp_path / name
        frame.to_csv(path, index=False, encoding="latin-1")
        err = _fails(tmp_path, path, "--k", "3", "--qi", "a,b")
        assert "--csv-encoding" in err, name
    for flag, value, message in (("--csv-separator", "ab", "separator must be one character"),
                                 ("--csv-decimal", '"', "decimal mark must be one character other than the digits"),
                                 ("--csv-encoding", "klingon", "unknown CSV encoding 'klingon'")):
        assert message in _fails(tmp_path, _csv(tmp_path, small), "--k", "3", "--qi", "a,b", flag, value)


def test_numbers_with_thousands_separators_are_read_with_csv_thousands(tmp_path):
    """``1.234,5`` in a semicolon-separated file and ``"1,234.5"`` quoted in a comma-separated one (a
    spreadsheet's export of formatted numbers): refused as text with the flags that read them (the
    hint said "a decimal comma" for both), and read with them as the plain numbers are; so is
    ``"1,5"`` quoted in a comma-separated file (the hint's --csv-decimal ',' was refused there)."""
    rng = np.random.default_rng(5)
    q, b = rng.integers(1_000, 9_999_999, 60) / 10, rng.integers(0, 99, 60)
    plain = _csv(tmp_path, pd.DataFrame({"Q": q, "B": b}), "plain.csv")
    european = tmp_path / "de.csv"
    european.write_text("Q;B\n" + "".join(f"{v:,.1f};{w}\n".replace(",", "_").replace(".", ",").replace("_", ".")
                                          for v, w in zip(q, b)))
    spreadsheet = tmp_path / "us.csv"
    spreadsheet.write_text("Q,B\n" + "".join(f'"{v:,.1f}",{w}\n' for v, w in zip(q, b)))
    common = ["--k", "3", "--qi", "Q,B", "--scheduler", "synchronous", "--no-html"]
    microagg_cli("anonymize", plain, tmp_path / "plain", *common, check=True)
    expected = pd.read_parquet(tmp_path / "plain")
    for source, dialect, hint in (
            (european, ["--csv-separator", ";", "--csv-decimal", ","],
             "(thousands separators '.' and a decimal comma: give --csv-thousands '.' and --csv-decimal ',')"),
            (spreadsheet, [], "(thousands separators ',': give --csv-thousands ',')")):
        err = _fails(tmp_path, source, *common[:4], *dialect)
        assert "'Q' is not numeric" in err and hint in err, err
        flag = "." if source == european else ","
        out = tmp_path / f"read-{source.stem}"
        microagg_cli("anonymize", source, out, *common, *dialect, "--csv-thousands", flag, check=True)
        pd.testing.assert_frame_equal(pd.read_parquet(out), expected)
    message = _fails(tmp_path, plain, *common[:4], "--csv-thousands", ".")
    assert "thousands separator must be one character other than the decimal mark" in message
    # decimal commas quoted in a comma-separated file (a spreadsheet's export): the hint's flag reads them
    commas = tmp_path / "commas.csv"
    commas.write_text("Q,B\n" + "".join(f'"{str(v).replace(".", ",")}",{w}\n' for v, w in zip(q, b)))
    err = _fails(tmp_path, commas, *common[:4])
    assert "'Q' is not numeric" in err and "(a decimal comma: give --csv-decimal ',')" in err, err
    microagg_cli("anonymize", commas, tmp_path / "read-commas", *common, "--csv-decimal", ",", check=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "read-commas"), expected)


def _export(n, seed=0):
    """A warehouse export's lines: an id, a free-text note, two QIs."""
    rng = np.random.default_rng(seed)
    return ["id,note,a,b"] + [f"{i},note {i},{rng.normal():.3f},{rng.normal():.3f}" for i in range(n)]


@pytest.mark.parametrize("suffix, ending", [("csv", "\n"), ("tsv", "\n"), ("csv", "\r\n"), ("csv", "\r")])
def test_rows_swallowed_by_a_quote_left_open_are_refused(tmp_path, monkeypatch, suffix, ending):
    """A note that starts with a quote never closed on its line runs to the next quote: pandas reads
    the rows between as part of that one value, without an error, and the release had 60 rows of 100.
    It is refused, naming the column and the count of rows swallowed, on a file read in blocks too
    (and on a tab-separated one, whose separator comes from its name, and on files whose lines end
    in ``\r\n`` or, as old Mac files, in ``\r``: 60 rows released with exit 0 before)."""
    from microagg.pipeline import io, release

    lines = _export(100)
    lines[11] = lines[11].replace("note 10", '"note 10')  # rows 11..49 become part of row 10's note
    lines[51] = lines[51].replace("note 50", 'note 50"')
    path = tmp_path / f"export.{suffix}"
    path.write_bytes((ending.join(line.replace(",", "\t" if suffix == "tsv" else ",") for line in lines)
                      + ending).encode())
    assert len(pd.read_csv(path, sep="\t" if suffix == "tsv" else ",")) == 60  # what the job released before
    err = _fails(tmp_path, path, "--k", "3", "--qi", "a,b", "--identifiers", "id")
    assert "'note'" in err and "39 row(s)" in err and "quote" in err and "note 10" in err
    monkeypatch.setattr(io, "CSV_BLOCKSIZE", "512B")  # read in pieces: the value's rows are still found
    with pytest.raises(microagg.InputError, match=r"'note'.* 39 row\(s\)"):
        release.run(path, tmp_path / "blocks", release.ReleaseOptions(
            k=3, quasi_identifiers=["a", "b"], identifiers=["id"]), html=False)
    assert not (tmp_path / "blocks").exists()
    # meant as they are: released as pandas reads the file, and the report says the check was off
    out = tmp_path / "allowed"
    proc = microagg_cli("anonymize", path, out, "--k", "3", "--qi", "a,b", "--identifiers", "id",
                        "--allow-rows-in-quotes", "--scheduler", "synchronous", "--no-html")
    assert proc.returncode == 0, proc.stderr
    assert len(pd.read_parquet(out)) == 60
    assert json.loads((out / "_report.json").read_text())["rows_in_quotes_allowed"] is True


def test_notes_over_several_lines_are_not_taken_for_swallowed_rows(tmp_path):
    """Legitimate quoted values over several lines, one of whose lines has as many fields as a row
    (but not its numbers), are released as pandas reads them."""
    lines = _export(30)
    lines[5] = lines[5].replace("note 4", '"called, no answer, twice\ncalled, no answer, twice\nagain"')
    lines[9] = lines[9].replace("note 8", '"1, 2\n3,\n4"')
    path = tmp_path / "export.csv"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "release"
    proc = microagg_cli("anonymize", path, out, "--k", "3", "--qi", "a,b", "--identifiers", "id",
                        "--scheduler", "synchronous", "--no-html")
    assert proc.returncode == 0, proc.stderr
    released = pd.read_parquet(out)
    assert len(released) == 30
    assert released["note"][4] == "called, no answer, twice\ncalled, no answer, twice\nagain"


def test_tab_separated_files_read_without_a_flag(tmp_path, small):
    """``*.tsv`` files (plain or compressed, one or a directory of them) are tab-separated unless
    --csv-separator says otherwise: the release is that of the same rows comma-separated (a ``.tsv``
    used to be "cannot tell the format")."""
    common = ["--k", "3", "--qi", "a,b", "--scheduler", "synchronous", "--no-html"]
    microagg_cli("anonymize", _csv(tmp_path, small), tmp_path / "from-csv", *common, check=True)
    expected = pd.read_parquet(tmp_path / "from-csv")
    folder = tmp_path / "extract"
    folder.mkdir()
    small[:6].to_csv(folder / "part-0.tsv.gz", sep="\t", index=False)
    small[6:].to_csv(folder / "part-1.tsv.gz", sep="\t", index=False)
    small.to_csv(tmp_path / "in.tsv", sep="\t", index=False)
    for source in (tmp_path / "in.tsv", folder):
        out = tmp_path / f"from-{source.name}"
        proc = microagg_cli("anonymize", source, out, *common, check=True)
        assert "Warning" not in proc.stderr  # Dask's about a gzipped file read whole
        pd.testing.assert_frame_equal(pd.read_parquet(out), expected)
    small.to_csv(tmp_path / "commas.tsv", index=False)  # misnamed: the flag reads it
    microagg_cli("anonymize", tmp_path / "commas.tsv", tmp_path / "from-commas", *common, "--csv-separator", ",",
                 check=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "from-commas"), expected)


def test_csv_files_compressed_in_different_ways(tmp_path, small):
    """Dask reads every file with the first one's compression: a plain file after a gzipped one was
    an internal error ("Not a gzipped file")."""
    folder = tmp_path / "extract"
    folder.mkdir()
    small[:6].to_csv(folder / "part-0.csv.gz", index=False)
    small[6:].to_csv(folder / "part-1.csv", index=False)
    err = _fails(tmp_path, folder, "--k", "3", "--qi", "a,b")
    assert "are compressed in different ways (gzip: 1 (e.g. " in err and "none: 1 (e.g. " in err
    assert "part-1.csv)" in err


def test_csv_header_names_with_spaces_around_them_can_be_named_without(tmp_path, small):
    """A CSV header written ``id, a, b`` names the columns ``' a'`` and ``' b'``: the options name them
    without the spaces (they named no column; with the default QIs, the evaluation stripped them and
    refused the job), and the release keeps the names as written."""
    path = tmp_path / "spaced.csv"
    small = small.assign(w=np.arange(1.0, 13.0))
    path.write_text("id, a, b, c, w\n" + "".join(f"{r.id}, {r.a}, {r.b},{r.c}, {r.w}\n" for r in small.itertuples()))
    common = ["--k", "3", "--scheduler", "synchronous", "--no-html"]
    out = tmp_path / "named"
    proc = microagg_cli("anonymize", path, out, *common, "--qi", "a,b", "--identifiers", "id", "--weights", "w",
                        "--known", "a", "--report", tmp_path / "r.json", check=True)
    assert "input column(s) ' a', ' b', ' w', 'id' have spaces" not in proc.stderr
    assert "input column(s) ' a', ' b', ' w' have spaces around their names" in proc.stderr, proc.stderr
    released = pd.read_parquet(out)
    assert list(released.columns) == [" a", " b", " c", " w"]
    assert_k_anonymous(released, [" a", " b"], 3)
    np.testing.assert_array_equal(released[" w"], small["w"])
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["quasi_identifiers"] == [" a", " b"] and report["evaluation"]["anonymity"]["k_prime"] >= 3
    default = tmp_path / "default"
    microagg_cli("anonymize", path, default, *common, check=True)  # every numeric column: id, a, b, w
    assert_k_anonymous(pd.read_parquet(default), ["id", " a", " b", " w"], 3)
    proc = microagg_cli("evaluate", path, out, "--qi", "a,b", "--known", "b", "--k", "3", "--scheduler",
                        "synchronous", "--report", tmp_path / "e.json", "--no-html", check=True)
    evaluation = json.loads((tmp_path / "e.json").read_text())
    assert evaluation["qi"] == [" a", " b"] and evaluation["known"] == [[" b"]]
    job = tmp_path / "job.toml"  # a job file names them alike, evaluated after the release
    job.write_text(f'[input]\npath = "{path}"\n[output]\npath = "{tmp_path / "job"}"\n[anonymize]\nk = 3\n'
                   f'quasi_identifiers = ["a", "b"]\nidentifiers = ["id"]\n[evaluate]\nknown = [["a"]]\n'
                   f'[cluster]\nscheduler = "synchronous"\n[report]\nhtml = false\n')
    microagg_cli("validate", job, check=True)
    microagg_cli("run", job, check=True)
    assert_k_anonymous(pd.read_parquet(tmp_path / "job"), [" a", " b"], 3)


def test_csv_text_columns_are_released_as_written(tmp_path):
    """A CSV input's kept text keeps ``NA``, ``NULL``, ``None`` (Namibia's country code was released as a
    null) and only an empty cell is null; a column of numbers in a column of numbers still reads ``NA``
    as missing. Whole numbers written with leading zeros in the first rows (postcodes) are text, as
    are ``--csv-text``'s columns (``0456`` after the first rows); the evaluation reads them alike."""
    rows = 40
    df = pd.DataFrame({"id": range(rows), "country": (["NA", "DE", "", "FR"] * 10),
                       "note": (["None", "NULL", "ok", "n/a"] * 10), "zip": (["00123", "02139", "", "10001"] * 10),
                       "late": ["123"] * 30 + ["0456"] * 10, "Q": np.linspace(0.0, 1.0, rows),
                       "B": [str(i % 7) for i in range(rows)]})
    df.loc[5, "B"] = "NA"
    path = tmp_path / "kept.csv"
    df.to_csv(path, index=False)
    common = ["--k", "3", "--qi", "Q", "--scheduler", "synchronous", "--no-html"]
    out = tmp_path / "kept"
    proc = microagg_cli("anonymize", path, out, *common, "--csv-text", "late", "--report", tmp_path / "r.json",
                        check=True)
    assert "column(s) 'zip' hold whole numbers written with leading zeros (00123): read as text" in proc.stderr
    released = pd.read_parquet(out)
    for column in ("country", "note", "zip", "late"):
        assert [None if pd.isna(v) else v for v in released[column]] == [v or None for v in df[column]], column
    assert released["B"].isna().tolist() == [i == 5 for i in range(rows)]  # 'NA' among numbers: missing
    assert released["B"].dtype == "Int64"
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["text_columns"] == ["late", "zip"]
    assert report["evaluation"]["checks"]["unchanged_columns"] == dict.fromkeys(
        ["B", "country", "id", "late", "note", "zip"], 0)
    proc = microagg_cli("evaluate", path, out, "--qi", "Q", "--k", "3", "--csv-text", "late", "--scheduler",
                        "synchronous", "--no-html", "--report", tmp_path / "e.json", check=True)
    assert "columns changed" not in proc.stdout, proc.stdout
    # a quasi-identifier or an unknown column named as text is refused, naming it
    for flags, message in ((["--csv-text", "Q"], "--csv-text names column(s) 'Q' that must hold numbers"),
                           (["--csv-text", "nope"], "--csv-text names 1 column(s) not in the input: 'nope'")):
        err = _fails(tmp_path, path, *common[:4], *flags)
        assert message in err, err
    job = tmp_path / "job.toml"
    for text, code in (('["late"]', 0), ('["Q"]', 2)):
        job.write_text(f'[input]\npath = "{path}"\ntext = {text}\n[output]\npath = "{tmp_path / "job"}"\n'
                       f'[anonymize]\nk = 3\nquasi_identifiers = ["Q"]\n[cluster]\nscheduler = "synchronous"\n')
        proc = microagg_cli("validate", job)
        assert proc.returncode == code, proc.stderr
    assert "[input] text names column(s) 'Q' that must hold numbers" in proc.stderr, proc.stderr


def test_input_names_holding_glob_characters(tmp_path, small):
    """Files and directories whose names hold ``[`` or ``?`` are read as named (a CSV directory named
    ``extract[2026]`` was "max_workers must be greater than 0"); a name with ``*``, which fsspec
    always reads as a glob, is refused saying so (it was "does not exist")."""
    common = ["--k", "3", "--qi", "a,b", "--scheduler", "synchronous", "--no-html"]
    microagg_cli("anonymize", _csv(tmp_path, small), tmp_path / "plain", *common, check=True)
    expected = pd.read_parquet(tmp_path / "plain")
    folder = tmp_path / "extract[2026]?"
    folder.mkdir()
    small[:6].to_csv(folder / "part-[0].csv", index=False)
    small[6:].to_csv(folder / "part-[1].csv", index=False)
    small.to_parquet(tmp_path / "in[1].parquet", index=False)
    for i, source in enumerate((folder, tmp_path / "in[1].parquet")):
        out = tmp_path / f"release-{i}"
        microagg_cli("anonymize", source, out, *common, check=True)
        pd.testing.assert_frame_equal(pd.read_parquet(out), expected)
    microagg_cli("anonymize", folder / "part-[0].csv", tmp_path / "one-file", *common, check=True)
    assert len(pd.read_parquet(tmp_path / "one-file")) == 6
    starred = tmp_path / "a*b"
    starred.mkdir()
    small.to_csv(starred / "part-0.csv", index=False)
    err = _fails(tmp_path, starred, *common[:4])
    assert "exists, but its name holds '*', which is read as a glob" in err
    # '?' and '[...]' as globs: Dask expands only '*'; a pattern that would match files is refused saying so
    for pattern in ("part-?.csv", "part-[01].csv"):
        small[:6].to_csv(tmp_path / "part-0.csv", index=False)
        small[6:].to_csv(tmp_path / "part-1.csv", index=False)
        err = _fails(tmp_path, tmp_path / pattern, *common[:4])
        assert "glob characters microagg does not expand (Dask expands only '*'); as a pattern it would match " \
               "2 file(s)" in err, err


def test_rows_per_file_that_would_flood_the_filesystem(tmp_path, monkeypatch):
    """A typo in --rows-per-file (25 for 250000) would write a file per 25 rows: refused after the
    statistics pass, before any file, with the least value that fits."""
    from microagg.pipeline import release

    monkeypatch.setattr(release, "MAX_OUTPUT_FILES", 100)
    with pytest.raises(microagg.InputError, match=r"--rows-per-file 10 would cut the 2,000 rows into 200 files, "
                                                  r"more than 100; give at least 20 rows per file"):
        release.check_file_count(2_000, 10)
    release.check_file_count(2_000, 20)
    monkeypatch.undo()
    df = pd.DataFrame({"a": np.arange(100_001.0), "b": np.arange(100_001.0) % 7})
    err = _fails(tmp_path, _csv(tmp_path, df), "--k", "3", "--qi", "a,b", "--rows-per-file", "1")
    assert "--rows-per-file 1 would cut the 100,001 rows into 100,001 files, more than 100,000" in err
    assert "give at least 2 rows per file" in err


def test_unknown_qi_column(tmp_path, small):
    err = _fails(tmp_path, _csv(tmp_path, small), "--k", "3", "--qi", "a,nope")
    assert "--qi" in err and "'nope'" in err


def test_unknown_identifier_column(tmp_path, small):
    err = _fails(tmp_path, _csv(tmp_path, small), "--k", "3", "--identifiers", "person")
    assert "--identifiers" in err and "'person'" in err


@pytest.mark.parametrize("k", ["1", "0", "-3"])
def test_k_below_two(tmp_path, small, k):
    err = _fails(tmp_path, _csv(tmp_path, small), "--k", k, "--qi", "a,b")
    assert "k must be >= 2" in err


def test_fewer_rows_than_k(tmp_path, small):
    err = _fails(tmp_path, _csv(tmp_path, small), "--k", "13", "--qi", "a,b")
    assert "12 rows" in err and "k=13" in err


def _files(tmp_path, *frames):
    folder = tmp_path / "extract"
    folder.mkdir()
    for i, frame in enumerate(frames):
        frame.to_parquet(folder / f"part-{i}.parquet", index=False)
    return folder


def test_an_input_file_lacking_a_column(tmp_path, small):
    source = _files(tmp_path, small[:6], small[6:9], small[9:].drop(columns=["b"]))
    err = _fails(tmp_path, source, "--k", "3", "--qi", "a")
    assert "'b'" in err and "missing from 1 of 3 input files" in err and "part-2.parquet" in err


def test_an_input_file_with_a_column_the_first_lacks(tmp_path, small):
    source = _files(tmp_path, small[:6], small[6:].assign(extra=1))
    err = _fails(tmp_path, source, "--k", "3", "--qi", "a")
    assert "'extra'" in err and "1 of 2 input files" in err and "not in the first" in err


@pytest.mark.parametrize("column, qi", [("c", "a"), ("a", "a")])
def test_a_column_of_incompatible_types_across_files(tmp_path, small, column, qi):
    """A column that is text in one file and numbers in another (a QI or any other column) is refused up
    front; before, the other column failed only at the write, after the whole job."""
    other = small[6:].copy()
    other[column] = np.arange(6) if column == "c" else other[column].astype(str)
    err = _fails(tmp_path, _files(tmp_path, small[:6], other), "--k", "3", "--qi", qi)
    assert f"'{column}'" in err and "no one type holds" in err and "1 file(s)" in err


def _arrow_files(tmp_path, *tables, names=None):
    import pyarrow.parquet as pq

    folder = tmp_path / "extract"
    for i, (table, name) in enumerate(zip(tables, names or [f"part-{i}.parquet" for i in range(len(tables))])):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, folder / name)
    return folder


def _qis(n, seed):
    rng = np.random.default_rng(seed)
    return {"a": rng.normal(size=n), "b": rng.normal(size=n)}


@pytest.mark.parametrize("first", ["dictionary", "plain"])
def test_strings_dictionary_encoded_in_one_file_and_plain_in_another(tmp_path, first):
    """Small files are read together: a categorical partition beside a string one made the
    concatenation fail (an internal error) when the dictionary-encoded file came first."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    coded = pa.table({**_qis(20, 0), "c": pa.array(["x", None] * 10).dictionary_encode()})
    plain = pa.table({**_qis(20, 1), "c": pa.array(["y", "z"] * 10)})
    tables = (coded, plain) if first == "dictionary" else (plain, coded)
    out = tmp_path / "release"
    microagg_cli("anonymize", _arrow_files(tmp_path, *tables), out, "--k", "3", "--qi", "a,b", "--no-html",
                 "--no-evaluate", "--scheduler", "synchronous", check=True)
    released = pq.read_table(out)
    assert released.schema.field("c").type == pa.string()
    assert released.column("c").to_pylist() == tables[0].column("c").to_pylist() + tables[1].column("c").to_pylist()


def test_a_uint64_column_beyond_int64_in_one_file_and_int64_in_another(tmp_path):
    """Arrow widens uint64 and int64 to int64: a value of 2**64 - 1 failed the write after the whole job."""
    import pyarrow as pa

    signed = pa.table({**_qis(20, 0), "key": pa.array(range(20), pa.int64())})
    large = pa.table({**_qis(20, 1), "key": pa.array([2**64 - 1 - i for i in range(20)], pa.uint64())})
    err = _fails(tmp_path, _arrow_files(tmp_path, signed, large), "--k", "3", "--qi", "a,b")
    assert "'key'" in err and "uint64" in err and "18,446,744,073,709,551,615" in err and "part-1.parquet" in err
    small = pa.table({**_qis(20, 1), "key": pa.array(range(20, 40), pa.uint64())})  # fits: released as int64
    out = tmp_path / "fits"
    microagg_cli("anonymize", _arrow_files(tmp_path / "other", signed, small), out, "--k", "3", "--qi", "a,b",
                 "--no-html", "--no-evaluate", "--scheduler", "synchronous", check=True)
    assert pd.read_parquet(out)["key"].tolist() == list(range(40))


@pytest.mark.parametrize("content", [b"", b"not a parquet file"])
def test_a_file_of_a_directory_input_that_is_not_parquet(tmp_path, content):
    """A file of no bytes or without a footer (a writer that died) beside good ones: an internal error
    at the read before."""
    import pyarrow as pa

    source = _arrow_files(tmp_path, pa.table(_qis(20, 0)))
    (source / "part-1.parquet").write_bytes(content)
    err = _fails(tmp_path, source, "--k", "3", "--qi", "a,b")
    assert "1 of the input's 2 files cannot be read as Parquet" in err and "part-1.parquet" in err


@pytest.mark.parametrize("layout, said", [
    (["x=1/part.parquet", "x=1/y=2/part.parquet"], "lie under different Hive partition keys"),
    (["x=1/part.parquet", "x=2/part.parquet"], "column 'x' is both a Hive partition directory"),
])
def test_hive_directories_dask_cannot_read(tmp_path, layout, said):
    """Partition directories at different depths, a key that the files also hold as a column: each
    failed inside Dask (an internal error). (A partition of null keys is read: test_distributed.py.)"""
    import pyarrow as pa

    extra = {"x": pa.array([1] * 20, pa.int64())} if "both" in said else {}
    source = _arrow_files(tmp_path, *[pa.table({**_qis(20, i), **extra}) for i in range(2)], names=layout)
    err = _fails(tmp_path, source, "--k", "3", "--qi", "a,b")
    assert said in err and "e.g. " in err


def test_a_numeric_hive_partition_column_can_be_a_quasi_identifier(tmp_path):
    """Dask reads ``year=2020/`` directories as a categorical column, which was refused as a QI (not
    numeric, and "store it as numbers" cannot be done to a directory's name)."""
    import pyarrow as pa

    layout = [f"year={y}/part.parquet" for y in (2020, 2021, 2022)]
    source = _arrow_files(tmp_path, *[pa.table(_qis(20, i)) for i in range(3)], names=layout)
    out = tmp_path / "release"
    microagg_cli("anonymize", source, out, "--k", "3", "--qi", "a,b,year", "--no-html", "--no-evaluate",
                 "--scheduler", "synchronous", check=True)
    released = pd.read_parquet(out)
    assert released.groupby(["a", "b", "year"]).size().min() >= 3
    assert released["year"].between(2020, 2022).all() and released["year"].nunique() > 3  # aggregated
    kept = tmp_path / "kept"
    microagg_cli("anonymize", source, kept, "--k", "3", "--qi", "a,b", "--no-html", "--no-evaluate",
                 "--scheduler", "synchronous", check=True)
    import pyarrow.parquet as pq

    assert pq.read_table(kept).column("year").to_pylist() == [2020] * 20 + [2021] * 20 + [2022] * 20


def test_an_unnamed_pandas_index_is_said_to_be_left_out(tmp_path):
    """pandas stores an unnamed index that is not a row number (dates, say) as ``__index_level_0__``;
    Dask's read leaves it out, and the release lost it without a word."""
    frame = pd.DataFrame(_qis(20, 0), index=pd.date_range("2020-01-01", periods=20))
    frame.to_parquet(tmp_path / "in.parquet")
    proc = microagg_cli("anonymize", tmp_path / "in.parquet", tmp_path / "release", "--k", "3", "--no-html",
                        "--no-evaluate", "--scheduler", "synchronous", check=True)
    assert "unnamed pandas index (__index_level_0__" in proc.stderr and "df.reset_index()" in proc.stderr
    assert list(pd.read_parquet(tmp_path / "release").columns) == ["a", "b"]
    frame.reset_index().to_parquet(tmp_path / "plain.parquet")  # made a column: released, no warning
    proc = microagg_cli("anonymize", tmp_path / "plain.parquet", tmp_path / "again", "--k", "3", "--qi", "a,b",
                        "--no-html", "--no-evaluate", "--scheduler", "synchronous", check=True)
    assert "pandas index" not in proc.stderr
    assert (pd.read_parquet(tmp_path / "again")["index"] == frame.index).all()


def test_a_constant_qi_of_a_large_magnitude_is_released(tmp_path):
    """A constant 1e20: the report's histogram edges were all one number (a division by zero)."""
    import pyarrow as pa

    out = tmp_path / "release"
    source = _arrow_files(tmp_path, pa.table({"a": [1e20] * 30, "b": _qis(30, 0)["b"]}))
    microagg_cli("anonymize", "--no-html", source, out, "--k", "3", "--qi", "a,b", "--no-evaluate", "--scheduler",
                 "synchronous", check=True)
    released = pd.read_parquet(out)
    assert (released["a"] == 1e20).all() and released.groupby("b").size().min() >= 3


def test_files_of_different_numeric_types_are_released_in_the_wider_type(tmp_path, small):
    """int64 in one file, float64 in another (not a QI): the column comes out float64, values intact."""
    other = small[6:].assign(id=small["id"][6:] + 0.5)
    out = tmp_path / "release"
    microagg_cli("anonymize", "--no-html", _files(tmp_path, small[:6], other), out, "--k", "3", "--qi", "a,b",
                 "--scheduler", "synchronous", check=True)
    import pyarrow.parquet as pq

    table = pq.read_table(out)
    assert str(table.schema.field("id").type) == "double"
    assert table.column("id").to_pylist() == [*range(6), *(np.arange(6, 12) + 0.5)]


def test_a_csv_header_naming_a_column_twice(tmp_path):
    """pandas would rename the second 'income' to 'income.1' and release it unchanged: a QI's copy in clear."""
    path = tmp_path / "in.csv"
    path.write_text("income,age,income\n" + "".join(f"{i},{i % 7},{i}\n" for i in range(20)))
    err = _fails(tmp_path, path, "--k", "3", "--qi", "income,age")
    assert "'income' is named 2 times" in err and "in.csv" in err


def test_a_parquet_file_naming_a_column_twice(tmp_path):
    """Arrow writes a schema with two fields of one name; Dask's read failed with "Can't unify schema
    with duplicate field names" under a line about its pandas backend: the file and the column now."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "in.parquet"
    pq.write_table(pa.table([np.arange(20.0), np.arange(20.0) % 7, np.arange(20.0)], names=["income", "age", "income"]),
                   path)
    err = _fails(tmp_path, path, "--k", "3", "--qi", "income,age")
    assert f"the Parquet file {path} names column(s) 'income' more than once" in err


def test_csv_files_lacking_a_column(tmp_path, small):
    folder = tmp_path / "extract"
    folder.mkdir()
    small[:6].to_csv(folder / "part-0.csv", index=False)
    small[6:].drop(columns=["c"]).to_csv(folder / "part-1.csv", index=False)
    err = _fails(tmp_path, folder, "--k", "3", "--qi", "a,b")
    assert "'c'" in err and "missing from 1 of 2 input files" in err and "part-1.csv" in err


def test_csv_files_with_their_columns_in_another_order(tmp_path, small):
    """Each file's header names its columns: the release is the one of the same rows in one file."""
    folder = tmp_path / "extract"
    folder.mkdir()
    small[:6].to_csv(folder / "part-0.csv", index=False)
    small[6:][["c", "b", "id", "a"]].to_csv(folder / "part-1.csv", index=False)
    whole = _csv(tmp_path, small)
    common = ["--k", "3", "--qi", "a,b", "--scheduler", "synchronous", "--no-html", "--no-evaluate"]
    microagg_cli("anonymize", folder, tmp_path / "from-two", *common, check=True)
    microagg_cli("anonymize", whole, tmp_path / "from-one", *common, check=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "from-two"), pd.read_parquet(tmp_path / "from-one"))


def test_csv_files_without_rows_add_nothing(tmp_path, small):
    """A warehouse's empty partitions: files with a header and no row, or no bytes at all, among the
    others. The first file one of them: Dask guessed every column's type from its header alone, as
    text ("quasi-identifier column 'a' is not numeric"). A text value further on (the identifiers of
    the last file) takes the second read, which skips them too. The release is that of one file."""
    folder = tmp_path / "extract"
    folder.mkdir()
    rows = small.assign(id=small["id"].astype(str).where(small.index < 11, "x11"))
    rows[:0].to_csv(folder / "part-0.csv", index=False)
    (folder / "part-1.csv").write_bytes(b"")
    rows[:6].to_csv(folder / "part-2.csv", index=False)
    rows[:0][["c", "b", "id", "a"]].to_csv(folder / "part-3.csv", index=False)
    (folder / "part-4.csv").write_text("id,a,b,c\n\n")
    rows[6:].to_csv(folder / "part-5.csv", index=False)
    common = ["--k", "3", "--qi", "a,b", "--scheduler", "synchronous", "--no-html"]
    proc = microagg_cli("anonymize", folder, tmp_path / "from-files", *common, check=True)
    assert "change type part-way" in proc.stderr  # the text identifier: the second read ran
    microagg_cli("anonymize", _csv(tmp_path, rows), tmp_path / "from-one", *common, check=True)
    released = pd.read_parquet(tmp_path / "from-files")
    pd.testing.assert_frame_equal(released, pd.read_parquet(tmp_path / "from-one"))
    assert len(released) == 12 and released["id"].tolist()[-1] == "x11"


@pytest.mark.parametrize("files, held", [
    ({"in.csv": "a,b\n"}, "its CSV file holds a header and no row"),
    ({"in.csv": ""}, "its CSV file holds nothing, not even a header"),
    ({"part-0.csv": "a,b\n", "part-1.csv": "", "part-2.csv": "a,b\n\n\n"},
     "its 3 CSV files hold a header and no row, or nothing"),
])
def test_an_input_without_rows(tmp_path, files, held):
    """An empty nightly extract: exit 2 naming it (it was "column 'a' is not numeric (dtype string)",
    or pandas' "No columns to parse from file" under a line about its backend)."""
    folder = tmp_path / "extract"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    source = folder / "in.csv" if len(files) == 1 else folder
    err = _fails(tmp_path, source, "--k", "3", "--qi", "a,b")
    assert f"the input {str(source)!r} has no rows: {held}; there is nothing to release" in err
    proc = microagg_cli("evaluate", source, source, "--qi", "a,b")
    assert proc.returncode == 2 and "has no rows" in proc.stderr, proc.stderr


def test_a_byte_order_mark_in_one_csv_file_is_not_a_column_name(tmp_path):
    folder = tmp_path / "extract"
    folder.mkdir()
    (folder / "part-0.csv").write_bytes("\ufeffa,b\n1,2\n3,4\n5,6\n".encode())
    (folder / "part-1.csv").write_text("a,b\n7,8\n9,10\n11,12\n")
    out = tmp_path / "release"
    microagg_cli("anonymize", "--no-html", folder, out, "--k", "2", "--qi", "a,b", "--scheduler", "synchronous",
                 "--no-evaluate", check=True)
    assert pd.read_parquet(out).columns.tolist() == ["a", "b"]


def test_an_output_inside_the_input_directory(tmp_path, small):
    """The next run would read the release as more input (the CLI, as the job files already did)."""
    source = _files(tmp_path, small)
    proc = microagg_cli("anonymize", "--no-html", source, source / "release", "--k", "3", "--qi", "a,b", "--scheduler",
                        "synchronous")
    assert proc.returncode == 2 and "lies inside the input" in proc.stderr, proc.stderr
    assert sorted(os.listdir(source)) == ["part-0.parquet"]
    link = tmp_path / "link"
    link.symlink_to(source)
    proc = microagg_cli("anonymize", "--no-html", link, source / "release", "--k", "3", "--qi", "a", "--scheduler",
                        "synchronous")
    assert proc.returncode == 2 and "lies inside the input" in proc.stderr, proc.stderr
    # a glob that cannot match the release is fine
    out = source / "release"
    microagg_cli("anonymize", "--no-html", f"{source}/*.parquet", out, "--k", "3", "--qi", "a,b", "--scheduler",
                 "synchronous", "--no-evaluate", check=True)
    assert len(pd.read_parquet(out)) == len(small)


def test_a_full_filesystem_is_a_storage_failure(tmp_path, small, monkeypatch, capsys):
    """The write fails with ENOSPC: exit 5, one paragraph, nothing at the output, no temporary directory."""
    import errno

    import pyarrow.parquet as pq

    from microagg.jobs import cli

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq, "write_table", full)
    out = tmp_path / "release"
    code = cli.main(["anonymize", "--no-html", str(_csv(tmp_path, small)), str(out), "--k", "3", "--qi", "a,b",
                     "--scheduler", "synchronous", "--no-evaluate"])
    err = capsys.readouterr().err
    assert code == 5 and err.startswith("microagg: error: a filesystem refused a write") and "No space left" in err
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if ".microagg-" in p]


def test_a_report_that_fails_after_the_commit_says_the_release_is_there(tmp_path, small, monkeypatch, capsys):
    import errno

    from microagg.jobs import cli
    from microagg.pipeline import release

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(release, "_write_json", full)
    out = tmp_path / "release"
    code = cli.main(["anonymize", str(_csv(tmp_path, small)), str(out), "--k", "3", "--qi", "a,b", "--scheduler",
                     "synchronous", "--no-evaluate", "--no-html", "--report", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 5 and f"the release is committed at {out}, but its report could not be written" in err, err
    assert "Nothing was written" not in err and (out / "_SUCCESS").exists()


def test_a_task_failure_is_reported_once_without_the_workers_traceback(tmp_path):
    """A text value in the second CSV file fails a task on the local cluster's worker: the job's one
    paragraph, not also the worker's "Compute Failed" record with its traceback (shown with --debug)."""
    folder = tmp_path / "extract"
    folder.mkdir()
    (folder / "part-0.csv").write_text("a,b\n1,2\n3,4\n5,6\n")
    (folder / "part-1.csv").write_text("a,b\n7,x\n9,10\n11,12\n")
    for extra in ([], ["--processes"]):
        proc = microagg_cli("anonymize", folder, tmp_path / "release", "--k", "2", "--qi", "a,b", "--workers", "1",
                            *extra)
        assert proc.returncode == 2 and "'b'" in proc.stderr, proc.stderr
        assert "Compute Failed" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_report_path_that_cannot_be_written_is_refused_before_the_release(tmp_path, small):
    """The JSON report beside the release is written after the commit: it is checked first, so a bad
    --report cannot leave a release behind an exit code of failure."""
    err = _fails(tmp_path, _csv(tmp_path, small), "--k", "3", "--qi", "a,b", "--report", tmp_path / "no" / "r.json")
    assert "the directory of the report" in err and "does not exist" in err
    err = _fails(tmp_path, _csv(tmp_path, small), "--k", "3", "--qi", "a,b", "--report", tmp_path)
    assert "is a directory" in err


def test_an_output_url_is_refused(tmp_path, small):
    for url in ("s3://bucket/release", f"file://{tmp_path}/release"):
        proc = microagg_cli("anonymize", _csv(tmp_path, small), url, "--k", "3", "--qi", "a,b", "--scheduler",
                            "synchronous")
        assert proc.returncode == 2 and "the output must be a local path, without a URL scheme" in proc.stderr
    assert not [p for p in os.listdir(tmp_path) if p != "in.csv"]


@pytest.mark.skipif(importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed")
def test_an_object_store_input_without_its_package_says_which(tmp_path):
    proc = microagg_cli("anonymize", "s3://bucket/extract.parquet", tmp_path / "release", "--k", "3", "--qi", "a",
                        "--scheduler", "synchronous")
    assert proc.returncode == 2 and "s3fs" in proc.stderr and "internal error" not in proc.stderr, proc.stderr


def test_unknown_method(tmp_path, small):
    err = _fails(tmp_path, _csv(tmp_path, small), "--k", "3", "--method", "magic")
    assert "unknown method 'magic'" in err and "mdav" in err


def test_missing_input(tmp_path):
    err = _fails(tmp_path, tmp_path / "nowhere.csv", "--k", "3")
    assert "does not exist" in err and "nowhere.csv" in err


def test_existing_foreign_output_is_not_touched(tmp_path):
    out = tmp_path / "release"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    proc = microagg_cli("anonymize", CENSUS_CSV, out, "--k", "3", "--scheduler", "synchronous")
    assert proc.returncode == 2 and "not a microagg release" in proc.stderr
    assert os.listdir(out) == ["precious.txt"]


def test_gate_refuses_a_release_that_is_not_k_anonymous(tmp_path, monkeypatch):
    """A deliberately broken partitioner (groups of 2 under k=3) must never reach the output."""
    from microagg.pipeline import methods
    from microagg.pipeline.errors import ReleaseGateError
    from microagg.pipeline.release import ReleaseOptions, run

    broken = methods.Method("broken", "pairs", "test hook", lambda Z, k: np.arange(len(Z), dtype=np.int64) // 2)
    monkeypatch.setitem(methods.METHODS, "broken", broken)
    out = tmp_path / "release"
    import dask

    with dask.config.set(scheduler="synchronous"):
        with pytest.raises(ReleaseGateError, match="not 3-anonymous"):
            run(str(CENSUS_CSV), str(out), ReleaseOptions(k=3, method="broken"))
    assert not out.exists()
    assert os.listdir(tmp_path) == []


def test_api_errors():
    X = np.arange(20.0).reshape(10, 2)
    with pytest.raises(microagg.InputError, match="k must be >= 2"):
        microagg.partition(X, 1)
    with pytest.raises(microagg.InputError, match="fewer than k"):
        microagg.partition(X, 11)
    with pytest.raises(microagg.InputError, match="unknown method"):
        microagg.partition(X, 2, method="nope")
    with pytest.raises(TypeError, match="numeric"):
        microagg.partition(np.array([["a", "b"]] * 4), 2)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(microagg.InputError, match="column 1.*1 row"):
        microagg.partition(bad, 2)
    df = pd.DataFrame({"a": [1.0, 2.0, 3.0], "s": ["x", "y", "z"]})
    with pytest.raises(microagg.InputError, match="'s' is not numeric.*'x'"):
        microagg.anonymize(df, 2, quasi_identifiers=["a", "s"])


def test_values_too_large_to_square_are_refused():
    with pytest.raises(microagg.InputError, match="column 0.*2 row.*above 1e150"):
        microagg.standardize(np.array([[1e155], [-1e155], [1.0]]))


def test_debug_flag_shows_the_traceback(tmp_path):
    proc = microagg_cli("--debug", "anonymize", tmp_path / "missing.csv", tmp_path / "out", "--k", "3",
                        "--scheduler", "synchronous")
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "does not exist" in proc.stderr


def test_unreachable_scheduler_is_a_cluster_error(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "release"
    proc = microagg_cli("anonymize", CENSUS_CSV, out, "--k", "3", "--scheduler", f"tcp://127.0.0.1:{port}")
    assert proc.returncode == 4, proc.stderr
    assert "cannot reach the Dask scheduler" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_whole_numbers_written_with_leading_zeros_after_the_first_rows_are_released_as_written(tmp_path):
    """A kept column of whole numbers whose leading zeros appear only in a later file or block (US
    postcodes sorted by state: ``01234`` after ``35004``) was released without them (1234), silently:
    every block read is checked, and the input is read again with the column as text. A QI written
    with leading zeros stays a number; exponents and dates in other columns are no such numbers."""
    from microagg.kernels.csvscan import padded_number

    for text, found in ((b"a,b\n1,01\n", 6), (b"01,2\n", 0), (b'x,"01"\n', 3), (b"x, -012\n", 4),
                        (b"x,1e-05\n", -1), (b"x,2024-05-01\n", -1), (b"x,0.5\n", -1), (b"x,0\n", -1),
                        (b"x;012\n", -1)):
        assert padded_number(np.frombuffer(text, dtype=np.uint8), ord(",")) == found, text
    folder = tmp_path / "extract"
    folder.mkdir()
    rows = 60
    first = pd.DataFrame({"id": range(rows), "Q": np.linspace(0.0, 1.0, rows), "R": np.arange(rows) % 9 * 1.5,
                          "zip": [str(35004 + i) for i in range(rows)], "n": [str(i % 4) for i in range(rows)],
                          "small": ["1.5e-05"] * rows, "day": ["2024-05-01"] * rows})
    second = first.assign(id=first["id"] + rows, zip=[f"{i:05d}" for i in range(1000, 1000 + rows)],
                          Q=[f"0{i % 9}" for i in range(rows)])  # a QI written 00..08: numbers all the same
    first.to_csv(folder / "part-0.csv", index=False)
    second.to_csv(folder / "part-1.csv", index=False)
    out = tmp_path / "release"
    proc = microagg_cli("anonymize", folder, out, "--k", "3", "--qi", "Q,R", "--identifiers", "id", "--scheduler",
                        "synchronous", "--no-html", "--report", tmp_path / "r.json", check=True)
    assert "column(s) 'zip' change type part-way through; read again as zip: string" in proc.stderr, proc.stderr
    released = pd.read_parquet(out)
    assert released["zip"].tolist() == [*first["zip"], *second["zip"]]  # 01000, not 1000
    assert released["n"].dtype == "int64" and released["Q"].dtype == "float64"
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["input_types_widened"] == {"zip": "string"}
    assert report["evaluation"]["checks"]["unchanged_columns"]["zip"] == 0
    # named as text up front: one pass, the same release
    microagg_cli("anonymize", folder, tmp_path / "named", "--k", "3", "--qi", "Q,R", "--identifiers", "id",
                 "--scheduler", "synchronous", "--no-html", "--csv-text", "zip", check=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "named"), released)


def test_a_named_pipe_in_the_input_is_refused_not_waited_on(tmp_path):
    """A named pipe given as the input, or among a directory's files (a device, a socket likewise): a job
    reads its input more than once, which a pipe cannot give. It waited for ever on a pipe no one wrote
    to, even past a SIGTERM; it is refused as bad input, naming the file, and nothing is written."""
    folder = tmp_path / "folder"
    folder.mkdir()
    pd.DataFrame({"a": np.arange(20.0), "b": np.arange(20.0) % 3}).to_csv(folder / "a.csv", index=False)
    os.mkfifo(folder / "b.csv")
    for source in (folder / "b.csv", folder):
        out = tmp_path / "release"
        proc = microagg_cli("anonymize", source, out, "--k", 3, "--scheduler", "synchronous", timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert f"'{folder / 'b.csv'}' is a named pipe" in proc.stderr and "write it to a file first" in proc.stderr
        assert not out.exists() and not [p for p in os.listdir(tmp_path) if ".microagg-" in p]
