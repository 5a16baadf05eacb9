"""The distributed pipeline: blocks, stitching, determinism, invariants, gate, identifiers."""

import collections
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import re
import threading
import time

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import microagg
from microagg.pipeline import methods
from conftest import EIA_NON_QI, assert_k_anonymous, microagg_cli
from synthetic import QI, extract

BLOCKED = ["--block-size", "1500", "--blocks-per-task", "4", "--identifiers", "person_id", "--qi", ",".join(QI)]
RELEASE_ONLY = ["--no-evaluate", "--no-html"]  # tests that compare the release's Parquet bytes alone


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """20k rows as one Parquet file and as four, plus the frame."""
    df = extract(20_000, seed=3)
    root = tmp_path_factory.mktemp("data")
    df.to_parquet(root / "one.parquet", index=False)
    (root / "four").mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(df)), 4)):
        df.iloc[rows].to_parquet(root / "four" / f"part-{i}.parquet", index=False)
    return root, df


def _run(tmp_path, name, *args):
    out = tmp_path / name
    microagg_cli("anonymize", *args[:1], out, *args[1:], check=True)
    return out


def _files(out):
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.parquet"))}


def test_blocked_release_invariants(tmp_path, data):
    root, df = data
    out = _run(tmp_path, "rel", root / "one.parquet", "--no-html", "--k", 5, *BLOCKED, "--scheduler", "synchronous",
               "--rows-per-file", 7000)
    released = pd.read_parquet(out)
    report = json.loads((out / "_report.json").read_text())
    assert report["blocks"] > 8 and report["tasks"] >= 2 and report["upper_planes"] >= 1
    assert report["stitch_sse_gain"] > 0
    assert len(released) == len(df) and "person_id" not in released.columns
    assert_k_anonymous(released, QI, 5)
    assert report["min_group_size"] >= 5 and report["max_group_size"] <= 9
    assert released["region"].astype(str).tolist() == df["region"].astype(str).tolist()
    np.testing.assert_array_equal(released["flag"].to_numpy(), df["flag"].to_numpy())
    np.testing.assert_allclose(released[QI].sum().to_numpy(), df[QI].sum().to_numpy(), rtol=1e-9, atol=1e-6)
    assert sorted(_files(out)) == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    # blocking + stitching stays close to global MDAV (and usually beats it)
    X = df[QI].to_numpy()
    global_il = microagg.information_loss(X, microagg.partition(X, 5))
    assert report["information_loss"] < 1.05 * global_il


def test_byte_identical_across_files_workers_and_schedulers(tmp_path, data):
    root, _ = data
    common = ["--k", 4, *BLOCKED, *RELEASE_ONLY]
    reference = _files(_run(tmp_path, "sync-one", root / "one.parquet", *common, "--scheduler", "synchronous"))
    for name, source, extra in [
        ("sync-four", root / "four", ["--scheduler", "synchronous"]),
        ("local-1", root / "four", ["--workers", 1]),
        ("local-2", root / "one.parquet", ["--workers", 2]),  # two workers, threads of one process
        ("processes-2", root / "four", ["--workers", 2, "--processes"]),
    ]:
        assert _files(_run(tmp_path, name, source, *common, *extra)) == reference, name


def test_empty_input_files_leave_the_release_unchanged(tmp_path, data):
    """A warehouse export may hold empty files (a day without rows): they are skipped, and the release is
    byte for byte the one made from the same rows without them."""
    root, df = data
    source = tmp_path / "with-empty"
    source.mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(df)), 4)):
        df.iloc[:0].to_parquet(source / f"part-{2 * i}.parquet", index=False)
        df.iloc[rows].to_parquet(source / f"part-{2 * i + 1}.parquet", index=False)
    df.iloc[:0].to_parquet(source / "part-9.parquet", index=False)
    common = ["--k", 4, *BLOCKED, *RELEASE_ONLY]
    reference = _files(_run(tmp_path, "reference", root / "four", *common, "--scheduler", "synchronous"))
    assert _files(_run(tmp_path, "sync", source, *common, "--scheduler", "synchronous")) == reference
    assert _files(_run(tmp_path, "local", source, *common, "--workers", 2)) == reference


def test_warehouse_directory_layouts_give_the_same_release(tmp_path, data):
    """Directories as Spark and Hive leave them: Spark's ``part-*.snappy.parquet`` with ``_SUCCESS``,
    ``_committed_*`` and hidden ``.crc`` files beside them; Hive's files named ``000000_0``, with no
    suffix; a README beside the data. Each gives the release of the same files named ``*.parquet``,
    with their Arrow types kept (a nullable integer column stays int64, not pandas' float64)."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    root, df = data
    count = pa.array([None if i % 7 == 0 else i for i in range(len(df))], pa.int64())
    table = pa.Table.from_pandas(df, preserve_index=False).append_column("count", count)
    plain = tmp_path / "plain"
    plain.mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(df)), 4)):
        pq.write_table(table.slice(rows[0], len(rows)), plain / f"part-{i}.parquet")
    spark, hive, readme = tmp_path / "spark", tmp_path / "hive", tmp_path / "readme"
    for layout in (spark, hive, readme):
        layout.mkdir()
    for i, part in enumerate(sorted(plain.iterdir())):
        shutil.copy(part, spark / f"part-{i:05d}-c0ffee.snappy.parquet")
        (spark / f".part-{i:05d}-c0ffee.snappy.parquet.crc").write_bytes(b"\x00crc")
        shutil.copy(part, hive / f"{i:06d}_0")
        shutil.copy(part, readme / part.name)
    (spark / "_SUCCESS").touch()
    (spark / "_committed_4711").write_text("{}")
    (readme / "README.txt").write_text("exported nightly by the warehouse\n")
    common = ["--k", 4, *BLOCKED, "--workers", 2, *RELEASE_ONLY]
    reference = _files(_run(tmp_path, "reference", plain, *common))
    assert pq.read_schema(tmp_path / "reference" / "part-00000.parquet").field("count").type == pa.int64()
    for layout in (spark, hive, readme):
        assert _files(_run(tmp_path, f"from-{layout.name}", layout, *common)) == reference, layout.name


def test_a_csv_column_that_changes_type_part_way_is_read_with_the_type_of_all_its_rows(tmp_path):
    """Dask guesses a CSV column's type from the first rows: a postcode column of numbers with a
    text value further on, and whole numbers with an empty cell further on, used to fail the job
    ("Mismatched dtypes"). The input is read again with each column's type from all its rows: text
    and nullable integers (int64 with a null in the release, not float64), every value released as
    written, the same release on any cluster."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(8)
    n = 20_000
    df = pd.DataFrame({"q0": rng.normal(size=n), "q1": rng.lognormal(size=n),
                       "postcode": rng.integers(10_000, 99_999, n).astype(str), "count": rng.integers(0, 9, n)})
    df.loc[15_000, "postcode"] = "SW1A 1AA"
    df["count"] = df["count"].astype(object)
    df.loc[18_000, "count"] = None
    source = tmp_path / "late.csv"
    df.to_csv(source, index=False)
    releases = []
    for name, flags in (("sync", ["--scheduler", "synchronous"]), ("local", ["--workers", 2])):
        out = _run(tmp_path, name, source, "--k", 3, "--qi", "q0,q1", *flags)
        report = json.loads((out / "_report.json").read_text())
        assert report["input_types_widened"] == {"postcode": "string", "count": "Int64"}
        assert report["timings"]["csv types"] > 0
        assert report["evaluation"]["checks"]["unchanged_columns"] == {"postcode": 0, "count": 0}
        releases.append(_files(out))
    assert releases[0] == releases[1]
    released = pq.read_table(tmp_path / "sync")
    assert pa.types.is_large_string(released.schema.field("postcode").type)
    assert released.column("postcode").to_pylist() == df["postcode"].tolist()
    assert released.schema.field("count").type == pa.int64()
    assert released.column("count").null_count == 1 and released.column("count")[18_000].as_py() is None
    assert released.column("count").to_pylist()[:5] == df["count"][:5].tolist()
    assert_k_anonymous(released.to_pandas(), ["q0", "q1"], 3)
    evaluated = tmp_path / "evaluated.json"
    microagg_cli("evaluate", source, tmp_path / "sync", "--qi", "q0,q1", "--report", evaluated, "--no-html",
                 "--scheduler", "synchronous", check=True)
    report = json.loads(evaluated.read_text())
    # the postcode, text in the release, is read as text from the start (pipeline.evaluate.run)
    assert report["input_types_widened"] == {"original": {"count": "Int64"}, "masked": None}
    assert report["checks"]["unchanged_columns"] == {"postcode": 0, "count": 0}


def test_whole_numbers_with_empty_cells_in_a_csv_input_are_released_exactly(tmp_path):
    """A CSV column of whole numbers with an empty cell in Dask's sample (its first rows), or with no
    value there (a sparse column), was guessed float64: a warehouse's nullable bigint key beyond 2**53
    was released rounded (2**62 + 1 as 2**62) under an int64-looking name, and ``7`` as ``7.0``; so
    was one with no value in the first 256 kB, even after the type pass. Such a column is now read as
    a nullable integer: released as int64 with its nulls, every value as written, on any cluster; the
    evaluation reads it alike. A column of that kind whose later rows hold decimals (or text) is read
    again as float64 (or text); one of them used as a QI is released as a QI (float64), its missing
    cell refused or filled by --missing centroid."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    n = 20_000
    key = [str(2**62 + i) if i % 3 else "" for i in range(n)]
    dose = [str(i % 5) if i % 4 else "" for i in range(n)]
    dose[17_000] = "2.5"
    age = [str(int(a)) for a in rng.integers(18, 90, n)]
    age[2] = ""
    parent = [str(2**62 + i) if i >= 100 and i % 5 == 0 else "" for i in range(n)]  # sparse: none in Dask's rows
    # none in the first 256 kB either: a bigint key, decimals, booleans (with empty cells: text, as pandas reads them)
    late = [str(2**62 + i) if i >= 10_000 and i % 7 == 0 else "" for i in range(n)]
    refund = ["12.5" if i >= 10_000 and i % 9 == 0 else "" for i in range(n)]
    opted = ["True" if i >= 10_000 and i % 11 == 0 else "" for i in range(n)]
    source = tmp_path / "keys.csv"
    pd.DataFrame({"q0": rng.normal(size=n), "q1": rng.lognormal(size=n), "key": key, "dose": dose,
                  "age": age, "parent": parent, "late": late, "refund": refund, "opted": opted}).to_csv(source,
                                                                                                        index=False)
    assert source.read_bytes()[:256_000].count(b"\n") < 10_000
    columns = dict.fromkeys(["key", "dose", "age", "parent", "late", "refund", "opted"], 0)
    releases = []
    for name, flags in (("sync", ["--scheduler", "synchronous"]), ("local", ["--workers", 2])):
        out = _run(tmp_path, name, source, "--k", 3, "--qi", "q0,q1", *flags)
        report = json.loads((out / "_report.json").read_text())
        assert report["input_types_widened"] == {"dose": "float64", "refund": "float64", "opted": "string"}
        assert report["evaluation"]["checks"]["unchanged_columns"] == columns
        releases.append(_files(out))
    assert releases[0] == releases[1]
    released = pq.read_table(tmp_path / "sync")
    assert released.schema.field("key").type == pa.int64() and released.schema.field("age").type == pa.int64()
    assert released.column("key").to_pylist() == [int(v) if v else None for v in key]
    assert released.column("age").to_pylist() == [int(v) if v else None for v in age]
    assert released.column("parent").to_pylist() == [int(v) if v else None for v in parent]
    assert released.column("late").to_pylist() == [int(v) if v else None for v in late]
    assert released.schema.field("dose").type == pa.float64()
    assert released.column("dose").to_pylist() == [float(v) if v else None for v in dose]
    assert released.column("refund").to_pylist() == [float(v) if v else None for v in refund]
    assert released.column("opted").to_pylist() == [v or None for v in opted]
    evaluated = tmp_path / "evaluated.json"
    microagg_cli("evaluate", source, tmp_path / "sync", "--qi", "q0,q1", "--report", evaluated, "--no-html",
                 "--scheduler", "synchronous", check=True)
    assert json.loads(evaluated.read_text())["checks"]["unchanged_columns"] == columns
    proc = microagg_cli("anonymize", source, tmp_path / "refused", "--k", 3, "--qi", "q0,q1,age",
                        "--scheduler", "synchronous")
    assert proc.returncode == 2 and "column 'age' has 1 row(s) with a missing (NaN) value" in proc.stderr
    assert not (tmp_path / "refused").exists()
    out = _run(tmp_path, "filled", source, "--k", 3, "--qi", "q0,q1,age", "--missing", "centroid",
               "--scheduler", "synchronous")
    filled = pq.read_table(out)
    assert filled.schema.field("age").type == pa.float64() and filled.column("age").null_count == 0
    assert_k_anonymous(filled.to_pandas(), ["q0", "q1", "age"], 3)


@pytest.mark.parametrize("guessed, later, widened", [
    ("int64", ["1", "2"], None),
    ("int64", ["1.5", "2"], "float64"),
    ("int64", ["", "2"], "Int64"),
    ("int64", ["", ""], "Int64"),
    ("int64", ["", "2.5"], "float64"),
    ("Int64", ["", "2"], None),
    ("Int64", ["18446744073709551615", "2"], "float64"),
    ("Int64", ["1.5", ""], "float64"),
    ("Int64", ["x", ""], "string"),
    ("float64", ["", "2"], None),
    ("float64", ["abc", "1"], "string"),
    ("bool", ["True", "False"], None),
    ("bool", ["", ""], "boolean"),
    ("bool", ["True", ""], "string"),
    ("bool", ["2", "3"], "string"),
    ("int64", ["true", "1"], "string"),
    ("object", ["1", "x"], None),
    ("empty", ["", "2"], None),  # no value in the sample: guessed Int64
    ("empty", ["", ""], None),
    ("empty", ["1.5", ""], "float64"),
    ("empty", ["True", "False"], "boolean"),
    ("empty", ["True", ""], "string"),
    ("empty", ["x", "2"], "string"),
])
def test_the_type_a_csv_column_needs_for_its_later_rows(guessed, later, widened):
    from microagg.pipeline import io

    value = {"int64": "1", "Int64": "1\n0,", "float64": "1.5", "bool": "True", "object": "a", "empty": ""}[guessed]
    first, _ = io._block_kinds(f"x,c\n0,{value}\n".encode(), None, True, {}, ())
    kinds, _ = io._block_kinds("".join(f"0,{v}\n" for v in later).encode(), ["x", "c"], False, {}, ())
    guess = (pd.Int64Dtype() if guessed in ("Int64", "empty")  # whole numbers and an empty cell, or no value, first
             else pd.read_csv(__import__("io").StringIO(f"c\n{value}\n"))["c"].dtype)
    assert io._widened(guess, {first["c"], kinds["c"]}) == widened


def test_line_breaks_inside_quoted_fields_of_a_csv_read_in_blocks(tmp_path, monkeypatch, capsys):
    """A warehouse's free-text column (a comment, an address) holds line breaks inside quoted fields.
    Dask cuts a large CSV file into blocks at the first line break after each offset, which can fall
    inside such a field: the job failed with an internal error ("EOF inside string"). Such a file is
    now cut at line breaks outside quotes and released with every field as pandas reads the whole
    file, on any cluster; a type change further on is found over the same pieces. A row that does
    not fit the header is bad input (exit 2), not an internal error."""
    from microagg.jobs import cli
    from microagg.pipeline import io

    rng = np.random.default_rng(5)
    n = 6000
    notes = [f'said "no", twice\nthen {i}\n\nleft' if i % 7 == 0 else None if i % 11 == 0 else f"plain {i}"
             for i in range(n)]
    frame = pd.DataFrame({"person_id": np.arange(n), "q0": rng.normal(size=n).round(4),
                          "q1": rng.normal(size=n).round(4), "note": notes,
                          "code": [str(i % 50) if i < n - 9 else f"x{i}" for i in range(n)]})
    path = tmp_path / "export.csv"
    frame.to_csv(path, index=False)  # pandas quotes a field holding a line break, a comma or a quote
    monkeypatch.setattr(io, "CSV_BLOCKSIZE", "16KiB")
    with pytest.raises(ValueError):  # Dask's own blocks: a cut inside a quoted field
        dd.read_csv(path, blocksize="16KiB", dtype={"code": "string"}).compute(scheduler="synchronous")
    expected = pd.read_csv(path, dtype={"code": "string"})
    got = io.read_input(path, dtypes={"code": "string"})
    assert got.npartitions > 10
    got = got.compute(scheduler="synchronous").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)
    assert got["note"].tolist()[:8] == [notes[0], *notes[1:7], notes[7]]
    releases = []
    for name, flags in (("sync", ["--scheduler", "synchronous"]), ("local", ["--workers", "2"])):
        out = tmp_path / name
        assert cli.main(["--quiet", "anonymize", "--no-html", str(path), str(out), "--k", "3", "--qi", "q0,q1",
                         "--identifiers", "person_id", *flags]) == 0, capsys.readouterr().err
        report = json.loads((out / "_report.json").read_text())
        assert report["input_types_widened"] == {"code": "string"}  # its last rows: read again, in pieces
        assert report["evaluation"]["checks"]["unchanged_columns"] == {"note": 0, "code": 0}
        releases.append(_files(out))
    assert releases[0] == releases[1]
    import pyarrow.parquet as pq

    released = pq.read_table(tmp_path / "sync")
    assert released.column("note").to_pylist() == notes
    assert released.column("code").to_pylist() == frame["code"].tolist()
    # a row with a field more than the header, past the first block: bad input, nothing written
    lines = path.read_text().split("\n")
    at = next(i for i in range(len(lines) // 2, len(lines))
              if len(fields := lines[i].split(",")) == 5 and fields[3] == f"plain {fields[0]}")
    lines[at] += ",9"
    (tmp_path / "bad.csv").write_text("\n".join(lines))
    code = cli.main(["anonymize", "--no-html", str(tmp_path / "bad.csv"), str(tmp_path / "refused"), "--k", "3",
                     "--qi", "q0,q1", "--scheduler", "synchronous"])
    err = capsys.readouterr().err
    with pytest.raises(pd.errors.ParserError, match=r"in line (\d+),") as whole:  # pandas on the whole file
        pd.read_csv(tmp_path / "bad.csv")
    line = int(re.search(r"in line (\d+),", str(whole.value)).group(1))
    assert line > 3000  # past the first blocks, whose rows are counted in
    assert code == 2 and (f"the CSV input cannot be parsed: file {tmp_path / 'bad.csv'}, line {line:,} (the header is "
                          f"line 1; a quoted field over several lines counts as one): Expected 5 fields, saw 6") in err, err
    assert not (tmp_path / "refused").exists()


def _messy_csv(rng, sep, rows):
    """CSV text as hand-made exports hold it: a quote inside an unquoted field (``12" pipe``), quoted
    fields holding the separator, doubled quotes and line breaks (LF or CRLF), text after a closing
    quote (not with a separator of several bytes: pandas' Python reader refuses it), a quote after a
    space, empty fields, blank lines; CRLF line ends or LF."""
    def field():
        return rng.choice(['12" pipe', 'o"k', '"a\nb"', f'"x{sep}y"', '"say ""hi"""', '"q"" \n"""', '"\r\n"',
                           '"ab"x' if len(sep.encode()) == 1 else '"ab"', ' "sp"', '', '"z"', 'plain', 'w x'],
                          p=[.1, .05, .1, .05, .05, .05, .05, .05, .05, .05, .1, .25, .05])
    end = rng.choice(["\n", "\r\n"])
    lines = [sep.join(["id", "q", "t1", "t2"])]
    for i in range(rows):
        lines.append(sep.join([str(i), f"{rng.random():.3f}", field(), field()]) + (end if rng.random() < .02 else ""))
    return end.join(lines) + end


def _read_as_pandas(data, start, end, sep, state):
    """Bytes ``start..end`` of ``data`` read one at a time from ``state`` as pandas' C tokenizer reads
    them (``kernels.csvscan``'s states): (the state after them, their first line break that ends a
    record, their first inside a quoted field; -1: none)."""
    from microagg.kernels.csvscan import QUOTE_IN_QUOTED, QUOTED, START, UNQUOTED

    first = inner = -1
    for i in range(start, end):
        c = data[i:i + 1]
        at_sep = data[max(i + 1 - len(sep), 0):i + 1] == sep
        if state == QUOTED:
            if c == b'"':
                state = QUOTE_IN_QUOTED
            elif c == b"\n" and inner < 0:
                inner = i
        elif c == b"\n":
            first = i if first < 0 else first
            state = START
        elif at_sep:
            state = START
        elif state in (START, QUOTE_IN_QUOTED):
            state = QUOTED if c == b'"' else UNQUOTED
    return state, first, inner


def test_the_scan_of_a_csv_block_follows_every_starting_state_as_pandas_reads(tmp_path, monkeypatch):
    """``io._record_ends`` of any span of a messy file, scanned in stretches of a few bytes (a quote-free
    stretch skipped whole, a separator of several bytes across two stretches), gives for each state a
    reader may be in at the span's start what reading its bytes one at a time gives."""
    from microagg.pipeline import io

    rng = np.random.default_rng(11)
    for sep, encoding in ((",", "utf-8"), ("§", "utf-8"), ("\t", "latin-1")):
        path = tmp_path / f"scan{len(sep.encode(encoding))}.csv"
        path.write_bytes(_messy_csv(rng, sep, 120).replace("plain", "plain" * 5).encode(encoding))
        data, sep_bytes = path.read_bytes(), sep.encode(encoding)
        for stretch in (5, 64):
            monkeypatch.setattr(io, "SCAN_BYTES", stretch)
            for start, end in ((0, len(data)), *sorted(tuple(sorted(rng.integers(0, len(data), 2))) for _ in range(30))):
                after, first, inner = io._record_ends(str(path), int(start), int(end), sep_bytes)
                for state in range(4):
                    assert (after[state], first[state], inner[state]) == _read_as_pandas(data, start, end, sep_bytes,
                                                                                         state)


def test_a_quote_inside_an_unquoted_field_of_a_csv_read_in_blocks(tmp_path, monkeypatch, capsys):
    """A quote inside an unquoted field (a height, ``12" pipe``) is a character like any other for
    pandas. The cut of a file with quoted line breaks counted it as an opening quote: every later cut
    fell inside quoted fields, and a job on a file pandas reads failed ("EOF inside string"). The cuts
    now follow pandas' reading (a quote opens a field only at its start), with any one-character
    separator, also one of several bytes in the file's encoding: on messy files cut in 2 KiB blocks,
    each scanned in stretches of 61 bytes, the read is pandas' of the whole file, and so is the
    release's. A UTF-16 file, whose line breaks Dask cut as it cut any, also inside quoted fields, is
    read whole."""
    import warnings

    from microagg.jobs import cli
    from microagg.pipeline import io

    monkeypatch.setattr(io, "CSV_BLOCKSIZE", "2KiB")
    monkeypatch.setattr(io, "SCAN_BYTES", 61)  # a block scanned in stretches, a separator across two of them
    rng = np.random.default_rng(7)
    compared = 0
    for i, (sep, encoding) in enumerate([(",", "utf-8"), (";", "utf-8"), ("\t", "utf-8"), ("§", "utf-8"),
                                         ("§", "latin-1")] * 4):
        path = tmp_path / f"messy{i}.csv"
        path.write_bytes(_messy_csv(rng, sep, 600).encode(encoding))
        dialect = io.csv_dialect(sep, encoding=encoding)
        try:
            with warnings.catch_warnings():  # pandas' Python reader for a separator of several bytes
                warnings.simplefilter("ignore", pd.errors.ParserWarning)
                expected = pd.read_csv(path, **dialect, dtype={"t1": "string", "t2": "string"})
        except pd.errors.ParserError:  # a row pandas itself cannot read (a field too many)
            continue
        with warnings.catch_warnings(record=True) as caught:  # not pandas' "Falling back to the 'python' engine"
            warnings.simplefilter("always")
            got = io.read_input(path, csv=dialect, dtypes={"t1": "string", "t2": "string"})
            assert got.npartitions > 4
            got = got.compute(scheduler="synchronous").reset_index(drop=True)
        assert not [w for w in caught if issubclass(w.category, pd.errors.ParserWarning)]
        pd.testing.assert_frame_equal(got, expected, check_dtype=False)
        compared += 1
    assert compared >= 15
    # UTF-16 (a spreadsheet's "Unicode text"): its line breaks are two bytes; each file is read whole
    path = tmp_path / "unicode.txt"
    path.write_bytes(_messy_csv(rng, "\t", 600).replace('"ab"x', '"ab"').encode("utf-16"))
    dialect = io.csv_dialect("\t", encoding="utf-16")
    got = io.read_input(path, csv=dialect, dtypes={"t1": "string", "t2": "string"})
    assert got.npartitions == 1
    pd.testing.assert_frame_equal(got.compute(scheduler="synchronous").reset_index(drop=True),
                                  pd.read_csv(path, **dialect, dtype={"t1": "string", "t2": "string"}), check_dtype=False)
    # a row of a field too many in a file of a separator of several bytes: bad input naming its line (it
    # was an internal error: pandas' Python reader refused the C reader's option of the locating pass)
    lines = _messy_csv(rng, "§", 600).split("\n")  # with quoted line breaks: read in pieces
    at = next(j for j in range(len(lines) // 2, len(lines)) if '"' not in lines[j - 1] + lines[j])  # a whole row
    lines[at] = lines[at].replace("\r", "") + "§5§6" + "\r" * lines[at].endswith("\r")
    (tmp_path / "bad.csv").write_text("\n".join(lines))
    with pytest.raises(pd.errors.ParserError, match=r"in line (\d+),") as whole:  # pandas on the whole file
        pd.read_csv(tmp_path / "bad.csv", sep="§", engine="python", skip_blank_lines=False)
    line = int(re.search(r"in line (\d+),", str(whole.value)).group(1))
    assert line < at  # lines in quoted fields count as one
    assert cli.main(["anonymize", str(tmp_path / "bad.csv"), str(tmp_path / "refused"), "--k", "3", "--qi", "q",
                     "--csv-separator", "§", "--scheduler", "synchronous"]) == 2
    assert (f"file {tmp_path / 'bad.csv'}, line {line} (the header is line 1; a quoted field over several lines "
            "counts as one): Expected 4 fields, saw 6") in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    lines = ["person_id,q0,q1,size,note"]  # the job that failed
    for i in range(3000):
        size = '12" pipe' if i == 100 else f"{i % 9} in"
        note = f'"said ""no"",\nthen {i}"' if i % 7 == 0 else f"plain {i}"
        lines.append(f"{i},{rng.normal():.4f},{rng.normal():.4f},{size},{note}")
    path = tmp_path / "heights.csv"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "release"
    assert cli.main(["--quiet", "anonymize", str(path), str(out), "--k", "3", "--qi", "q0,q1", "--identifiers",
                     "person_id", "--scheduler", "synchronous", "--no-html"]) == 0
    import pyarrow.parquet as pq

    released, expected = pq.read_table(out), pd.read_csv(path)
    assert released.column("size").to_pylist() == expected["size"].tolist()
    assert released.column("note").to_pylist() == expected["note"].tolist()


def test_a_csv_whose_lines_end_in_a_bare_carriage_return_is_read_once(tmp_path, monkeypatch, caplog):
    """Lines ended by a bare ``\r`` (old Mac files): Dask's blocks are cut at ``\n``, which such a file
    never holds, and Dask read the whole file once per block: 10,500 rows released from this file of
    1,500 (7 blocks), exit 0. Such a file is read whole (said in the log), its rows once each, the
    release the same as that of the same rows ended by ``\n``."""
    from microagg.pipeline import io, release

    monkeypatch.setattr(io, "CSV_BLOCKSIZE", "4KiB")
    rng = np.random.default_rng(11)
    lines = ["id,a,b,c"] + [f"{i},{rng.normal():.4f},{rng.normal():.4f},{rng.integers(0, 9)}" for i in range(1500)]
    mac, unix = tmp_path / "mac.csv", tmp_path / "unix.csv"
    mac.write_bytes(("\r".join(lines) + "\r").encode())
    unix.write_bytes(("\n".join(lines) + "\n").encode())
    assert mac.stat().st_size > 4 * 4096  # cut into several blocks if read in blocks
    options = release.ReleaseOptions(k=3, quasi_identifiers=["a", "b"], identifiers=["id"])
    with caplog.at_level("WARNING", logger="microagg.pipeline.io"):
        release.run(mac, tmp_path / "from-mac", options, html=False)
    assert "bare carriage return" in caplog.text and "mac.csv" in caplog.text
    release.run(unix, tmp_path / "from-unix", options, html=False)
    got, expected = pd.read_parquet(tmp_path / "from-mac"), pd.read_parquet(tmp_path / "from-unix")
    assert len(got) == 1500
    pd.testing.assert_frame_equal(got, expected)
    assert not io._csv_files(str(unix), {})[0].whole(str(unix), "4KiB")



def test_a_csv_whose_rows_end_in_a_separator_keeps_its_columns(tmp_path, monkeypatch):
    """Rows that end in a separator the header does not (``0,0.24,0.54,3,``): pandas took the first
    column for an index and shifted the others one column to the left, silently: the release's ``id``
    held the QI ``a``'s values, unprotected, and ``a`` and ``b`` were ``b`` and ``c`` aggregated, exit
    0. Such a file is read by its header now, in one block or in many: the release is that of the same
    rows without the separator. A first row of one field more that is not empty is left to pandas
    (the rows' names of R's ``write.table``)."""
    from microagg.pipeline import io, release

    rng = np.random.default_rng(5)
    rows = [f"{i},{rng.normal():.4f},{rng.normal():.4f},{rng.integers(1, 6)}" for i in range(1500)]
    plain, ended = tmp_path / "plain.csv", tmp_path / "ended.csv"
    plain.write_text("id,a,b,c\n" + "\n".join(rows) + "\n")
    ended.write_text("id,a,b,c\n" + "\n".join(row + "," for row in rows) + "\n")
    options = release.ReleaseOptions(k=3, quasi_identifiers=["a", "b"])
    expected = None
    for blocksize in ("64MB", "4KiB"):
        monkeypatch.setattr(io, "CSV_BLOCKSIZE", blocksize)
        for path in (plain, ended):
            out = tmp_path / f"{path.stem}-{blocksize}"
            release.run(path, out, options, html=False)
            got = pd.read_parquet(out)
            assert got["id"].tolist() == list(range(1500)) and got["c"].tolist() == [int(r.split(",")[3]) for r in rows]
            expected = got if expected is None else expected
            pd.testing.assert_frame_equal(got, expected)
    assert io._ends_in_a_separator(["id", "a"], ["1", "2", " "])
    assert not io._ends_in_a_separator(["a", "b"], ["row1", "1", "2"]) and not io._ends_in_a_separator(["a"], None)


def test_a_shift_jis_csv_separated_by_pipes_is_read_the_same_whole_and_in_blocks(tmp_path, monkeypatch):
    """In Shift-JIS the second byte of a character may be ``|`` (``ポ`` is ``0x83 0x7C``): the byte scan
    that cuts a CSV into blocks at line breaks outside quotes sees a separator there, and a quote after
    it (``ポ"x``) at the start of a field. A file with such fields and quoted line breaks (a note over
    two lines) releases the same rows read whole or in blocks of 4 KiB, its text as written."""
    from microagg.pipeline import io, release

    rng = np.random.default_rng(9)
    names = ['ポ"x', "東京", '"ポイント|一\n二"', "ポ"]
    rows = [f"{rng.normal():.4f}|{rng.normal():.4f}|{names[i % 4]}" for i in range(1200)]
    path = tmp_path / "sjis.csv"
    path.write_bytes(("a|b|name\n" + "\n".join(rows) + "\n").encode("shift_jis"))
    options = release.ReleaseOptions(k=3, quasi_identifiers=["a", "b"])
    dialect = io.csv_dialect("|", encoding="shift_jis")
    released = []
    for blocksize in ("64MB", "4KiB"):
        monkeypatch.setattr(io, "CSV_BLOCKSIZE", blocksize)
        out = tmp_path / f"release-{blocksize}"
        release.run(path, out, options, html=False, csv=dialect)
        released.append(pd.read_parquet(out))
    pd.testing.assert_frame_equal(released[0], released[1])
    assert released[1]["name"].tolist() == [('ポ"x', "東京", "ポイント|一\n二", "ポ")[i % 4] for i in range(1200)]
    # read whole for that separator only: separated by commas (no second byte is one) it is cut as usual
    assert not io.scans_as_ascii("shift_jis", "|") and io.scans_as_ascii("shift_jis", ",")
    assert io.scans_as_ascii("utf-8", "|") and not io.scans_as_ascii("utf-16", ",")


def test_a_value_after_the_last_column_of_a_csv_whose_rows_end_in_a_separator_is_refused(tmp_path, monkeypatch):
    """In a file whose rows end in a separator (read with ``index_col=False``), a row whose last field
    is not empty has more fields than the header, as in any other file: pandas dropped the value with
    a warning and released the rest. Now it is refused (exit 2) with its file, its line and the count
    of such rows, read whole or in blocks, and nothing is written."""
    from microagg.jobs.cli import main
    from microagg.pipeline import io, release
    from microagg.pipeline.errors import CSVParseError

    rng = np.random.default_rng(8)
    lines = ["id,a,b,c"] + [f"{i},{rng.normal():.4f},{rng.normal():.4f},{rng.integers(1, 6)},"
                            + ("7" if i in (700, 1201) else "") for i in range(1500)]
    lines.insert(301, "")  # a blank line: lines are counted as pandas counts them, from the header's 1
    path = tmp_path / "ended.csv"
    path.write_text("\n".join(lines) + "\n")
    line = lines.index(next(x for x in lines if x.endswith(",7"))) + 1
    options = release.ReleaseOptions(k=3, quasi_identifiers=["a", "b"])
    for blocksize in ("64MB", "4KiB"):
        monkeypatch.setattr(io, "CSV_BLOCKSIZE", blocksize)
        with pytest.raises(CSVParseError) as caught:
            release.run(path, tmp_path / "out", options, html=False)
        assert f"file {path}, line {line:,} " in str(caught.value), caught.value
        assert "a value after the last column 'c'" in str(caught.value) and "2 such row(s)" in str(caught.value)
        assert not (tmp_path / "out").exists()
    assert main(["anonymize", str(path), str(tmp_path / "cli"), "--k", "3", "--qi", "a,b", "--no-html"]) == 2
    assert not (tmp_path / "cli").exists()


def test_a_csv_with_the_rows_names_of_r_releases_its_columns_and_says_the_names_are_not(tmp_path, caplog):
    """R's ``write.table`` writes each row's name before its fields, with no name for them in the
    header: pandas reads them as the rows' index, the columns stay the header's, and the names are
    not released; the log says so (they were dropped without a word)."""
    from microagg.pipeline import release

    rng = np.random.default_rng(6)
    rows = [(f'"r{i}"', f"{rng.normal():.4f}", f"{rng.normal():.4f}") for i in range(300)]
    path = tmp_path / "from-r.csv"
    path.write_text('"a","b"\n' + "\n".join(",".join(row) for row in rows) + "\n")
    with caplog.at_level("WARNING", logger="microagg.pipeline.io"):
        release.run(path, tmp_path / "out", release.ReleaseOptions(k=3, quasi_identifiers=["a", "b"]), html=False,
                    evaluation={})  # the evaluation reads the input again: said once all the same
    got = pd.read_parquet(tmp_path / "out")
    assert list(got.columns) == ["a", "b"] and len(got) == 300
    assert abs(got["a"].mean() - np.mean([float(r[1]) for r in rows])) < 1e-9  # a's values, not the names
    assert caplog.text.count("one field more than the header") == 1 and "from-r.csv" in caplog.text



def test_a_malformed_csv_row_is_named_by_its_file_and_line(tmp_path, monkeypatch, capsys):
    """pandas counts a malformed row's line from the start of the block that holds it: the message
    named a line of some 64 MB block of some file. The job now names the file and the line in it."""
    from microagg.pipeline import io
    from microagg.jobs import cli

    monkeypatch.setattr(io, "CSV_BLOCKSIZE", "16KiB")
    rng = np.random.default_rng(8)
    frames = [pd.DataFrame({"q0": rng.normal(size=3000).round(4), "q1": rng.normal(size=3000).round(4),
                            "code": rng.integers(0, 99, 3000)}) for _ in range(2)]
    source = tmp_path / "export"
    source.mkdir()
    for i, frame in enumerate(frames):
        frame.to_csv(source / f"part-{i}.csv", index=False)

    def refused(name, row, change):
        lines = (source / name).read_text().split("\n")
        lines[row] = change(lines[row])
        (source / name).write_text("\n".join(lines))
        code = cli.main(["anonymize", f"{source}/*.csv", str(tmp_path / "out"), "--k", "3", "--qi", "q0,q1",
                         "--scheduler", "synchronous"])
        assert code == 2 and not (tmp_path / "out").exists()
        return capsys.readouterr().err

    (source / "part-1.csv").write_text((source / "part-1.csv").read_text().replace("\n", "\n\n\n", 1))
    err = refused("part-1.csv", 2400, lambda line: line + ",7")  # in the 4th block of the second file
    with pytest.raises(pd.errors.ParserError, match="in line 2401,"):  # pandas counts blank lines too
        pd.read_csv(source / "part-1.csv")
    assert f"cannot be parsed: file {source / 'part-1.csv'}, line 2,401 (the header is line 1" in err, err
    assert "Expected 3 fields, saw 4; fix or drop that row" in err
    code = cli.main(["evaluate", f"{source}/*.csv", f"{source}/*.csv", "--qi", "q0,q1", "--k", "3",
                     "--scheduler", "synchronous"])
    err = capsys.readouterr().err
    assert code == 2 and f"cannot be parsed: file {source / 'part-1.csv'}, line 2,401 (the header" in err, err
    frames[1].to_csv(source / "part-1.csv", index=False)
    err = refused("part-0.csv", 5, lambda line: line + ",7,8")  # in the first block
    assert f"file {source / 'part-0.csv'}, line 6 (the header" in err and "saw 5" in err, err
    frames[0].to_csv(source / "part-0.csv", index=False)
    err = refused("part-1.csv", 2999, lambda line: '"' + line)  # a quote left open at the last row
    assert f"file {source / 'part-1.csv'}, line 3,000 (the header is line 1" in err, err
    assert "EOF inside string (a quote opened on that line is never closed)" in err


def test_csv_files_read_in_blocks_with_their_columns_in_another_order(tmp_path, monkeypatch, capsys):
    """Dask reads each block of a CSV file but its first under the first file's header: a file whose
    columns come in another order (an export whose columns were reordered) and which is read in
    blocks had one column's values released under the other's name, silently. Each block is now
    read under its own file's header: the release is that of the same rows in one file."""
    from microagg.jobs import cli
    from microagg.pipeline import io

    rng = np.random.default_rng(6)
    n = 8000
    frame = pd.DataFrame({"person_id": np.arange(n), "q0": rng.normal(size=n).round(4),
                          "q1": (rng.normal(size=n) * 100).round(2), "region": rng.choice(["north", "south"], n)})
    folder = tmp_path / "extract"
    folder.mkdir()
    frame[: n // 2].to_csv(folder / "part-0.csv", index=False)
    frame[n // 2:][["region", "q1", "person_id", "q0"]].to_csv(folder / "part-1.csv", index=False)
    frame.to_csv(tmp_path / "whole.csv", index=False)
    monkeypatch.setattr(io, "CSV_BLOCKSIZE", "16KiB")
    got = io.read_input(folder)
    assert got.npartitions > 8
    pd.testing.assert_frame_equal(got.compute(scheduler="synchronous").reset_index(drop=True), frame,
                                  check_dtype=False)
    for name, source in (("from-two", folder), ("from-one", tmp_path / "whole.csv")):
        assert cli.main(["--quiet", "anonymize", str(source), str(tmp_path / name), "--k", "3", "--qi", "q0,q1",
                         "--scheduler", "synchronous", "--no-html"]) == 0, capsys.readouterr().err
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "from-two"), pd.read_parquet(tmp_path / "from-one"))


def test_a_csv_field_longer_than_128_kib_in_the_first_row(tmp_path):
    """A JSON payload or a long text in the first row: Python's csv module, which reads the files'
    headers and first rows, refuses a field beyond 128 KiB by default (the job failed with an
    internal error, "field larger than field limit"); pandas reads it, and so is it released."""
    rng = np.random.default_rng(7)
    blob = '{"events": [' + ", ".join(f'"e{i}"' for i in range(30000)) + "]}"
    frame = pd.DataFrame({"q0": rng.normal(size=40).round(4), "q1": rng.normal(size=40).round(4),
                          "payload": [blob] + ["{}"] * 39})
    frame.to_csv(tmp_path / "events.csv", index=False)
    assert len(blob) > 2 ** 17
    out = _run(tmp_path, "release", tmp_path / "events.csv", "--no-html", "--k", 3, "--qi", "q0,q1", "--scheduler",
               "synchronous")
    assert pd.read_parquet(out)["payload"].tolist() == frame["payload"].tolist()


def test_a_large_k_gets_blocks_of_at_least_2k_rows_unless_a_block_size_is_given(tmp_path, data):
    """k = 3000 without --block-size: blocks of up to 6,000 rows (2k), not the default 2,500 that
    cannot hold two groups (it was refused as "block size must be at least 2k", an option the user
    never gave); in memory as in the pipeline. A block size given that small is still refused."""
    root, df = data
    out = _run(tmp_path, "large-k", root / "four", "--no-html", "--k", 3000, "--qi", ",".join(QI), "--workers", 2,
               "--no-evaluate")
    report = json.loads((out / "_report.json").read_text())
    assert report["block_size_target"] == 6000 and report["blocks"] > 1 and report["min_group_size"] >= 3000
    assert_k_anonymous(pd.read_parquet(out), QI, 3000)
    labels = microagg.partition(df[QI].to_numpy(), 3000, stitch="light", one_block_rows=0)
    assert np.bincount(labels).min() >= 3000
    proc = microagg_cli("anonymize", "--no-html", root / "four", tmp_path / "refused", "--k", 3000, "--qi",
                        ",".join(QI), "--block-size", 2500, "--scheduler", "synchronous")
    assert proc.returncode == 2 and "block size must be at least 2k = 6000, got 2500" in proc.stderr


def test_an_output_that_is_a_symbolic_link_is_replaced_through_it(tmp_path):
    """OUTPUT a link to a release (``latest -> 2026-11-25``): the new release replaces the directory
    the link points to, and the link stays a link. (The rename replaced the link by a directory and
    left the link aside as a hidden ``.microagg-old-`` entry.) A link to nothing yet is written through."""
    source = tmp_path / "in.parquet"
    extract(2_000, seed=4).to_parquet(source, index=False)
    common = ["--qi", ",".join(QI), "--no-evaluate", "--scheduler", "synchronous"]
    _run(tmp_path, "2026-11-25", source, "--no-html", "--k", 3, *common)
    (tmp_path / "latest").symlink_to("2026-11-25")
    microagg_cli("anonymize", "--no-html", source, tmp_path / "latest", "--k", 4, *common, check=True)
    assert (tmp_path / "latest").is_symlink()
    assert json.loads((tmp_path / "2026-11-25" / "_report.json").read_text())["k"] == 4
    (tmp_path / "next").symlink_to("2026-11-26")
    microagg_cli("anonymize", "--no-html", source, tmp_path / "next", "--k", 5, *common, check=True)
    assert (tmp_path / "next").is_symlink() and (tmp_path / "2026-11-26" / "_SUCCESS").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_an_input_of_fewer_rows_than_partitions(tmp_path):
    """Three rows split across the cluster's cores leave empty partitions: still one group of three."""
    source = tmp_path / "tiny.parquet"
    pd.DataFrame({"a": [1.0, 2.0, 4.0], "b": [0.0, 1.0, 5.0], "name": ["x", "y", "z"]}).to_parquet(source, index=False)
    out = _run(tmp_path, "rel", source, "--no-html", "--k", 2, "--qi", "a,b", "--workers", 2, "--no-evaluate")
    released = pd.read_parquet(out)
    assert released["name"].tolist() == ["x", "y", "z"]
    np.testing.assert_allclose(released[["a", "b"]].to_numpy(), [[7 / 3, 2.0]] * 3)


def _released_with(tmp_path, source, monkeypatch, name, values, workers, threads):
    """``{value: (report, files)}``: ``release.run`` with the blocked options on a LocalCluster of ``workers``
    x ``threads`` (threads of this process), once with each of ``values`` as ``release.<name>``."""
    from distributed import Client, LocalCluster

    from microagg.pipeline import release

    options = release.ReleaseOptions(k=4, quasi_identifiers=tuple(QI), identifiers=("person_id",), block_size=1500,
                                     blocks_per_task=4)
    runs = {}
    with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=False, dashboard_address=":0") as \
            cluster, Client(cluster):
        for value in values:
            monkeypatch.setattr(release, name, value)
            out = tmp_path / f"{name}-{value}"
            runs[value] = release.run(str(source), str(out), options), _files(out)
    return runs


def test_an_input_too_large_to_keep_is_read_in_every_pass_with_the_same_release(tmp_path, data, monkeypatch):
    from microagg.pipeline import release

    root, _ = data
    reference = _files(_run(tmp_path, "sync", root / "four", "--no-html", "--k", 4, *BLOCKED, "--scheduler",
                            "synchronous"))
    measured = release.INPUT_EXPANSION  # 10**9 below: "larger than the workers' memory"
    runs = _released_with(tmp_path, root / "four", monkeypatch, "INPUT_EXPANSION", (measured, 10**9), 2, 1)
    assert all(files == reference for _, files in runs.values())
    assert {value: report["input_kept_in_memory"] for value, (report, _) in runs.items()} == {measured: True,
                                                                                            10**9: False}


def test_an_input_read_in_every_pass_is_read_in_each_only_for_the_columns_that_pass_needs(tmp_path, data,
                                                                                            monkeypatch):
    """Re-read in every pass (too large to keep), the input is read for its QIs in the statistics, sample and
    routing passes and for its other columns in the write: no pass reads a column it does not use (the write's
    13 QIs were about four fifths of its read). Each partition's reads are of one length, so the row ids (positions
    within the partitions) still hold: the release is the one an input kept in memory gives."""
    from microagg.pipeline import io, release

    root, _ = data
    reads = []
    read_table = io.ExactIntegersEngine._read_table.__func__

    def recorded(cls, path_or_frag, fs, row_groups, columns, *args, **kwargs):
        table = read_table(cls, path_or_frag, fs, row_groups, columns, *args, **kwargs)
        reads.append((os.path.basename(str(getattr(path_or_frag, "path", path_or_frag))),
                      tuple(c for c in columns or () if c is not None), table.num_rows))
        return table

    monkeypatch.setattr(io.ExactIntegersEngine, "_read_table", classmethod(recorded))
    runs = _released_with(tmp_path, root / "four", monkeypatch, "INPUT_EXPANSION", (release.INPUT_EXPANSION, 10**9),
                          2, 1)
    (kept, kept_files), (reread, reread_files) = runs.values()
    assert kept["input_kept_in_memory"] and not reread["input_kept_in_memory"]
    assert reread_files == kept_files
    per_pass = collections.Counter(columns for _, columns, _ in reads)
    # of each of the four files: kept, every column once (its solve's and its write's columns are persisted
    # together: one read, cut in two); re-read, the QIs (three passes) and the rest (the write)
    assert per_pass == {tuple(QI) + ("region", "flag"): 4, tuple(QI): 4 * 3, ("region", "flag"): 4}
    by_file = {}
    for name, columns, rows in reads:
        by_file.setdefault(name, set()).add(rows)
    assert sorted(by_file) == [f"part-{i}.parquet" for i in range(4)]
    assert all(len(rows) == 1 for rows in by_file.values())  # every read of a file: all of its rows


def test_an_input_kept_in_memory_lets_its_solved_columns_go_once_routed_with_the_same_release(tmp_path, data,
                                                                                              monkeypatch):
    """Kept in memory, the input's columns for the solve (the QIs) and for the write (the rest) are held apart, and
    the solve's go as soon as the blocks stage has routed them: at the gate the worker holds no partition with a QI,
    and the write's columns are still there, so the write does not read the input again. (Held together, the 10M-row
    job kept its whole input beside the rows routed from it: 2.7 GiB against 2.0; BENCHMARKS.md, sixty-sixth
    session.) The release is the re-read one's."""
    from distributed import Client, LocalCluster

    from microagg.pipeline import release

    root, _ = data
    reference = _files(_run(tmp_path, "sync", root / "four", "--no-html", "--k", 4, *BLOCKED, "--scheduler",
                            "synchronous"))
    options = release.ReleaseOptions(k=4, quasi_identifiers=tuple(QI), identifiers=("person_id",), block_size=1500,
                                     blocks_per_task=4)
    held = []  # at the gate: the columns of every frame in the worker's memory
    gate = release.gate

    def frames(worker):
        return [tuple(v.columns) for v in list(worker.data.values()) if isinstance(v, pd.DataFrame)]

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster):
        worker = next(iter(cluster.workers.values()))

        def watched(*args, **kwargs):
            # the client's release of the solved columns reaches the worker a moment after the stage
            deadline = time.monotonic() + 30
            while any(set(QI) & set(c) for c in frames(worker)) and time.monotonic() < deadline:
                time.sleep(0.05)
            held.append(frames(worker))
            return gate(*args, **kwargs)

        monkeypatch.setattr(release, "gate", watched)
        report = release.run(str(root / "four"), str(tmp_path / "kept"), options, html=False)
    assert report["input_kept_in_memory"]
    assert _files(tmp_path / "kept") == reference
    assert held and not any(set(QI) & set(c) for c in held[0])
    assert ("region", "flag") in held[0]  # the write's columns, kept for it


def _resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident size from /proc")
def test_a_heap_s_freed_pages_inside_it_go_back_to_the_system_when_trimmed():
    """Freed memory between live allocations stays resident until the heap is trimmed (glibc's
    ``malloc_trim``): 100 MB of 2 kB buffers, nine in ten freed, each freed run held in place by a kept
    neighbour."""
    import ctypes

    from microagg.pipeline import release

    try:
        ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        pytest.skip("no glibc malloc_trim")
    release.trim_heap()  # what was free before the test
    buffers = [bytearray(2048) for _ in range(50_000)]
    for b in buffers:
        b[::512] = b"\x01" * 4  # every page touched: resident
    kept = buffers[::10]
    del buffers
    before = _resident_bytes()
    assert release.trim_heap() == 1
    assert before - _resident_bytes() > 40 * 2**20
    assert len(kept) == 5000  # still held, and still readable
    assert all(k[0] == 1 for k in kept)


def test_the_release_s_freed_memory_is_given_back_before_its_evaluation(tmp_path, data, monkeypatch):
    """Evaluated, the job trims the heaps of its workers and of its own process once the release is written,
    before the evaluation reads both files: the evaluation's memory then starts from what the job still
    holds, not from the release's high-water mark. Without an evaluation there is nothing to trim for."""
    from distributed import Client, LocalCluster

    from microagg.pipeline import release

    root, _ = data
    options = release.ReleaseOptions(k=4, quasi_identifiers=tuple(QI), identifiers=("person_id",), block_size=1500,
                                     blocks_per_task=4)
    steps = tmp_path / "steps"  # a file: the trim sent to the worker is a copy of this test's function

    def record(step):
        with open(steps, "a") as f:
            f.write(f"{step} {threading.get_ident()}\n")

    evaluate = release._evaluate_written
    monkeypatch.setattr(release, "trim_heap", lambda: record("trim") or 1)
    monkeypatch.setattr(release, "_evaluate_written", lambda *args, **kwargs: record("evaluate") or evaluate(*args,
                                                                                                          **kwargs))
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster):
        for name, evaluation in (("evaluated", {}), ("plain", None)):
            record(f"job-{name}")
            report = release.run(str(root / "four"), str(tmp_path / name), options, html=False,
                                 evaluation=evaluation)
            assert (tmp_path / name / "_report.json").exists() and ("evaluation" in report) == (evaluation is not None)
    here = str(threading.get_ident())
    done = [line.split() for line in steps.read_text().splitlines()]
    assert [step for step, _ in done] == ["job-evaluated", "trim", "trim", "evaluate", "job-plain"]
    assert done[1][1] != here and done[2][1] == here  # the worker's thread, then this process


def test_a_projected_read_keeps_the_input_s_partitions(tmp_path):
    """The pipeline's passes read their columns untuned (release.parts_of), partitioned as the whole input, in
    the input's column order. (Tuned, Dask fuses a read of a few columns into fewer partitions: the 10M extract's
    10 became 3 for its non-QI columns; with release.UNTUNED tuned, the release tests above stop at the gate's
    row-count check.)"""
    import dask

    from microagg.pipeline import io, release

    df = extract(20_000, seed=5)
    for i, rows in enumerate(np.array_split(np.arange(len(df)), 4)):
        df.iloc[rows].to_parquet(tmp_path / f"part-{i}.parquet", index=False)
    ddf = io.read_input(str(tmp_path))
    assert ddf.npartitions > 1
    few = release.projected(ddf, ["flag", "region"])
    assert list(few.columns) == ["region", "flag"]  # the input's order
    assert release.projected(ddf, list(ddf.columns)) is ddf
    # the write reads neither the QIs nor the identifiers it drops; one QI if nothing else is left
    assert release.write_columns(list(ddf.columns), QI, ["person_id"]) == ["region", "flag"]
    assert release.write_columns(list(ddf.columns), QI) == ["person_id", "region", "flag"]
    assert release.write_columns(["person_id", *QI], QI, ["person_id"]) == ["q0"]
    with dask.config.set(scheduler="synchronous"):
        lengths = [len(p) for p in dask.compute(*release.parts_of(few))]
        assert lengths == [len(p) for p in dask.compute(*release.parts_of(ddf))]
        assert len(lengths) == ddf.npartitions and sum(lengths) == len(df)


def test_tasks_in_one_roomy_process_read_whole_outputs_with_the_same_release(tmp_path, data, monkeypatch):
    """In one process with memory to spare, each block task takes its rows from the routing tasks' whole
    outputs, and each upper plane's task its pieces from the block tasks' (no task per piece: at 10M rows
    each left a core idle about 1.7 ms, BENCHMARKS.md); with too little memory for that, a task per
    piece as on a cluster of several workers. The same release either way, and as two workers'."""
    from microagg.pipeline import release

    root, _ = data
    reference = _files(_run(tmp_path, "two-workers", root / "four", "--no-html", "--k", 4, *BLOCKED, "--workers", 2))
    pieces = {}  # per memory setting: the graph's tasks that take one piece of a routing or block task's output
    solve_blocks = release.solve_blocks

    def counted(*args, **kwargs):
        released, forest = solve_blocks(*args, **kwargs)
        keys = released[0].dask.layers[released[0].__dask_layers__()[0]].keys()
        pieces[release.SHARED_OUTPUTS_BYTES] = (sum(len(key) == 4 and key[1] == "route" for key in keys),
                                                sum(len(key) == 4 and key[1] == "solve" and key[3] > 0 for key in keys))
        return released, forest

    monkeypatch.setattr(release, "solve_blocks", counted)
    roomy = release.SHARED_OUTPUTS_BYTES  # 10**12 below: "more than the worker's memory"
    runs = _released_with(tmp_path, root / "four", monkeypatch, "SHARED_OUTPUTS_BYTES", (roomy, 10**12), 1, 2)
    assert all(files == reference for _, files in runs.values())
    report = runs[roomy][0]
    assert report["upper_planes"] > 0
    assert pieces[roomy] == (0, 0)
    assert pieces[10**12][0] == 4 * report["tasks"]  # four input files, a piece of each for every block task
    assert pieces[10**12][1] > 0


def test_pieces_of_shared_outputs_are_taken_once_and_cleared_with_the_same_release(tmp_path, data, monkeypatch):
    """Read from shared outputs, each routed piece and each piece of a block task's output for an upper
    plane is taken by exactly one task, which clears it from its output (its memory goes as that task
    ends, not when the output's last reader does): at the end every routed output is empty and every
    block task's output holds its released piece only. The release is that of two workers."""
    from microagg.pipeline import release

    root, _ = data
    reference = _files(_run(tmp_path, "two-workers", root / "four", "--no-html", "--k", 4, *BLOCKED, "--workers", 2))
    taken, outputs = [], {}
    take = release._taken

    def recorded(outs, slots):
        for out, slot in zip(outs, slots):
            assert out[slot] is not None  # not taken before
            taken.append((id(out), slot))
            outputs[id(out)] = out
        return take(outs, slots)

    monkeypatch.setattr(release, "_taken", recorded)
    runs = _released_with(tmp_path, root / "four", monkeypatch, "SHARED_OUTPUTS_BYTES", (release.SHARED_OUTPUTS_BYTES,),
                          1, 2)
    report, files = runs[release.SHARED_OUTPUTS_BYTES]
    assert files == reference and report["upper_planes"] > 0
    assert len(taken) == len(set(taken))
    routed = [out for out in outputs.values() if not isinstance(out[0], release.Released)]
    solved = [out for out in outputs.values() if isinstance(out[0], release.Released)]
    assert len(routed) == 4 and all(len(out) == report["tasks"] for out in routed)  # four input files
    assert all(piece is None for out in routed for piece in out)
    assert solved and all(piece is None for out in solved for piece in out[1:])


@pytest.mark.parametrize("workers, threads", [(1, 2), (2, 1)], ids=["one-process", "two-workers"])
def test_each_file_s_released_values_are_scattered_in_the_task_that_writes_its_input_rows(tmp_path, data,
                                                                                      monkeypatch, workers, threads):
    """An output file's released values are scattered from the pieces in the task that puts them into its
    input rows. As a task of their own they needed only the persisted pieces, so they ran ahead of the
    input's reading and waited in memory (at 10M rows with the input re-read: 31 files' values, 0.8 GB at
    once). Every file's task gets its own rows (row ids start..stop-1), once; the release is as before."""
    from distributed import Client, LocalCluster

    from microagg.pipeline import release

    root, df = data
    reference = _files(_run(tmp_path, "sync", root / "four", "--no-html", "--k", 4, *BLOCKED, "--rows-per-file", 3000,
                            "--scheduler", "synchronous"))
    calls = []
    replaced = release._replaced

    def recorded(original, start, stop, *args):
        calls.append((start, stop, int(original.index[0]), int(original.index[-1]) + 1, len(original)))
        return replaced(original, start, stop, *args)

    monkeypatch.setattr(release, "_replaced", recorded)
    options = release.ReleaseOptions(k=4, quasi_identifiers=tuple(QI), identifiers=("person_id",), block_size=1500,
                                     blocks_per_task=4, rows_per_file=3000)
    with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=False, dashboard_address=":0") as \
            cluster, Client(cluster):
        release.run(str(root / "four"), str(tmp_path / "out"), options, html=False)
    assert _files(tmp_path / "out") == reference
    starts = list(range(0, len(df), 3000))
    assert sorted(calls) == [(a, min(a + 3000, len(df)), a, min(a + 3000, len(df)), min(3000, len(df) - a))
                             for a in starts]


def test_release_files_are_written_into_arrows_own_files_with_the_same_bytes(tmp_path, data, monkeypatch):
    """The release's Parquet files go into Arrow's own files, not fsspec's Python ones: pyarrow takes the
    interpreter lock for every page it hands a Python file, and at 10M rows the encoding spent about a
    third of its time waiting for it while the job's other thread held it (BENCHMARKS.md, forty-third
    session). The bytes are those written through fsspec."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from microagg.pipeline import io as pipeline_io

    root, _ = data
    sinks = []
    write_table = pq.write_table

    def recorded(table, where, *args, **kwargs):
        sinks.append(where)
        return write_table(table, where, *args, **kwargs)

    monkeypatch.setattr(pq, "write_table", recorded)
    runs = _released_with(tmp_path, root / "four", monkeypatch, "SHARED_OUTPUTS_BYTES", (40,), 1, 2)
    native, sinks[:] = list(sinks), []
    assert native and all(isinstance(s, pa.NativeFile) for s in native)
    monkeypatch.setattr(pipeline_io, "_is_local", lambda fs: False)
    (tmp_path / "fsspec").mkdir()
    through_fsspec = _released_with(tmp_path / "fsspec", root / "four", monkeypatch, "SHARED_OUTPUTS_BYTES", (40,),
                                    1, 2)
    assert sinks and not any(isinstance(s, pa.NativeFile) for s in sinks)
    assert runs[40][1] == through_fsspec[40][1] and len(runs[40][1]) == len(native)


def test_a_large_parquet_file_is_read_in_partitions_of_whole_row_groups(tmp_path, data, monkeypatch, caplog):
    """A single file larger than io.PARQUET_BLOCKSIZE is read a few row groups per partition (so no
    task holds the whole file), with the same release; a row group beyond io.LARGE_ROW_GROUP rows,
    which no reader splits, is named in a warning."""
    import logging

    from microagg.pipeline import io, release

    root, df = data
    reference = _files(_run(tmp_path, "sync", root / "one.parquet", "--no-html", "--k", 4, *BLOCKED, "--scheduler",
                            "synchronous"))
    source = tmp_path / "row-groups.parquet"
    df.to_parquet(source, index=False, row_group_size=2500)  # 8 row groups of about 0.3 MB
    monkeypatch.setattr(io, "PARQUET_BLOCKSIZE", "700KB")
    monkeypatch.setattr(io, "LARGE_ROW_GROUP", 2000)
    with caplog.at_level(logging.WARNING, logger="microagg.pipeline.io"):
        assert io.read_input(source).npartitions == 4
    assert "has a row group of 2,500 rows" in caplog.text and str(source) in caplog.text
    options = release.ReleaseOptions(k=4, quasi_identifiers=tuple(QI), identifiers=("person_id",), block_size=1500,
                                     blocks_per_task=4)
    with dask.config.set(scheduler="synchronous"):
        release.run(str(source), str(tmp_path / "release"), options)
    assert _files(tmp_path / "release") == reference


def test_many_small_files_are_read_together_with_the_same_release(tmp_path, data):
    """200 files of 100 rows: read as a few partitions of adjacent files (each stage paid a task per file
    and per pass), at least two per core; the release is the one from a single file."""
    from microagg.pipeline import io

    root, df = data
    source = tmp_path / "many"
    source.mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(df)), 200)):
        df.iloc[rows].to_parquet(source / f"part-{i:03d}.parquet", index=False)
    assert io.read_input(source).npartitions == 2 * io.cluster_cores()
    assert io.read_input(root / "four").npartitions == 4  # few files: as they are
    common = ["--k", 4, *BLOCKED, *RELEASE_ONLY]
    reference = _files(_run(tmp_path, "reference", root / "one.parquet", *common, "--scheduler", "synchronous"))
    assert _files(_run(tmp_path, "local", source, *common, "--workers", 2)) == reference
    assert _files(_run(tmp_path, "processes", source, *common, "--workers", 2, "--processes")) == reference


def test_many_small_csv_files_are_read_together_with_the_same_release(tmp_path, data):
    from microagg.pipeline import io

    _, df = data
    source = tmp_path / "csv-files"
    source.mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(df)), 100)):
        df.iloc[rows].to_csv(source / f"part-{i:03d}.csv", index=False)
    df.to_csv(tmp_path / "one.csv", index=False)
    assert io.read_input(source).npartitions == 2 * io.cluster_cores()
    common = ["--k", 4, *BLOCKED, "--scheduler", "synchronous", *RELEASE_ONLY]
    one = _files(_run(tmp_path, "one", tmp_path / "one.csv", *common))
    assert _files(_run(tmp_path, "many", source, *common)) == one


def test_the_two_level_exchange_gives_the_same_release(tmp_path, data, monkeypatch):
    """Past graph.DIRECT_PIECES (the large-cluster shape) rows reach their tasks, and released values
    their files, through two levels of pieces: same bytes as the direct exchange, with attribute
    blocks too (one exchange per block), for a sequence method (rows to its buckets) and for Mic1D-k
    (values to the buckets of both its sorts)."""
    from distributed import Client, LocalCluster

    from microagg.pipeline import graph, release

    root, _ = data
    blocks = (tuple(QI[:6]), tuple(QI[6:]))
    shapes = {"plain": {}, "blocks": {"attribute_blocks": blocks}, "sequence": {"method": "pcp"},
              "mic1d": {"method": "mic1d"}}
    flags = {"plain": [], "blocks": ["--blocks", ";".join(",".join(b) for b in blocks)],
             "sequence": ["--method", "pcp"], "mic1d": ["--method", "mic1d"]}
    reference = {name: _files(_run(tmp_path, f"sync-{name}", root / "four", "--k", 4, *BLOCKED, "--scheduler",
                                   "synchronous", "--rows-per-file", 3000, *flags[name], *RELEASE_ONLY))
                 for name in shapes}
    monkeypatch.setattr(graph, "DIRECT_PIECES", 0)  # every exchange of two producers or more in two levels
    seen = []
    plan = graph.exchange_plan
    monkeypatch.setattr(graph, "exchange_plan", lambda *args: seen.append(plan(*args)) or seen[-1])
    # worker processes: the merges and their functions travel pickled, as on a real cluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster):
        for name, extra in shapes.items():
            options = release.ReleaseOptions(k=4, quasi_identifiers=tuple(QI), identifiers=("person_id",),
                                             block_size=1500, blocks_per_task=4, rows_per_file=3000, **extra)
            out = tmp_path / f"two-level-{name}"
            release.run(str(root / "four"), str(out), options, html=False)
            assert _files(out) == reference[name], name
    assert sum(p is not None for p in seen) >= 9  # rows (values: twice) and files of each shape


def test_exchange_plan():
    from microagg.pipeline import graph

    assert graph.exchange_plan(10, 128) is None and graph.exchange_tasks(10, 128) == 1280
    batches, groups = graph.exchange_plan(200, 128)
    assert [len(x) for x in (batches, groups)] == [14, 10]  # 140 merges of at most one task's rows each
    for ranges, n in ((batches, 200), (groups, 128)):
        assert ranges[0][0] == 0 and ranges[-1][1] == n and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert max(b - a for a, b in ranges) - min(b - a for a, b in ranges) <= 1
    assert graph.exchange_tasks(200, 128) == 200 * 10 + 14 * 10 + 14 * 128 < 200 * 128 / 6
    assert [len(x) for x in graph.exchange_plan(4, 4, 0)] == [2, 2]
    # told its rows, no merge holds more than MERGE_ROWS of them: 30M rows from 30 partitions to 512
    # block tasks make 120 merges (3 batches x 40 groups), not 30 of a million rows each
    assert [len(x) for x in graph.exchange_plan(30, 512)] == [1, 30]
    batches, groups = graph.exchange_plan(30, 512, rows=30_000_000)
    assert len(batches) * len(groups) == 30_000_000 // graph.MERGE_ROWS == 120
    assert graph.exchange_plan(255, 40, rows=10_000_000) == graph.exchange_plan(255, 40)  # already small enough
    assert len(graph.exchange_plan(3, 3, 0, rows=10**9)[1]) == 3  # never more merges than pairs


def _total(*values):
    return sum(values)


def test_each_kind_of_task_of_a_layer_has_a_task_prefix_of_its_own():
    """The scheduler estimates a task's duration by its key's prefix (Dask's ``key_split``). The block tasks
    once shared theirs with the routing tasks and a thousand getitems, were estimated at a few milliseconds,
    and were all placed on the worker holding most of their inputs, the other idle (10M rows, two workers:
    the blocks stage 42 s instead of 33). Each kind now has its own prefix: the tag's first string, a piece
    of a task's output ``<kind>-item``, an exchange's slices and merges ``<tag>-slice`` and ``<tag>-merge``;
    the keys keep their tags, and one layer holds them all."""
    import dask
    from dask.utils import key_split

    from microagg.pipeline import graph

    layer = graph.Layer("microagg-blocks")
    routed = [layer.task(("route", i), list, range(3 * i, 3 * i + 3)) for i in range(40)]
    pieces = layer.exchange("routed", routed, 3, sum, direct=0)
    solved = [layer.task(("solve", c), _total, *pieces[c]) for c in range(3)]
    total = layer.task("total", _total, *solved)
    kinds = {}
    for key in layer._tasks:
        kinds.setdefault(key_split(key), set()).add(key[1])
    assert kinds == {"microagg-blocks-route": {"route"}, "microagg-blocks-solve": {"solve"},
                     "microagg-blocks-routed-slice": {"routed"}, "microagg-blocks-routed-merge": {"routed"},
                     "microagg-blocks-routed-item": {"routed"}, "microagg-blocks-total": {"total"}}
    assert all(key[0].endswith(layer.name.rsplit("-", 1)[1]) for key in layer._tasks)  # one token: one layer
    out = layer.delayed([total])[0]
    assert out.__dask_layers__() == (layer.name,) and set(out.dask.layers) == {layer.name}
    assert dask.compute(out, scheduler="synchronous")[0] == sum(range(120))


def test_the_released_rows_exchange_makes_as_few_merges_as_its_bytes_need():
    """Told its bytes (the released rows on their way to the output files: about 37 bytes a row at k = 5 and
    13 QIs), the two-level exchange makes as few merges as hold graph.MERGE_BYTES each, not one per
    consumer: at 100M rows, 2,559 released pieces to 400 files took 41,280 tasks, now about half."""
    from microagg.pipeline import graph
    from microagg.pipeline.release import released_bytes

    for rows, pieces, files in ((100_000_000, 2559, 400), (10_000_000, 255, 40), (30_000_000, 1023, 120)):
        nbytes = released_bytes(rows, 13, 5)
        batches, groups = graph.exchange_plan(pieces, files, nbytes=nbytes)
        merges = len(batches) * len(groups)
        assert nbytes / merges <= graph.MERGE_BYTES  # no merge holds more than MERGE_BYTES, about
        assert merges < min(pieces, files)
        for ranges, n in ((batches, pieces), (groups, files)):
            assert ranges[0][0] == 0 and ranges[-1][1] == n and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        by_rows = graph.exchange_tasks(pieces, files, rows=rows)
        assert graph.exchange_tasks(pieces, files, nbytes=nbytes) < 0.7 * by_rows
    assert graph.exchange_tasks(2559, 400, rows=100_000_000) == 41_280
    assert released_bytes(100_000_000, 13, 5) == 100_000_000 * 16 + 8 * 13 * 100_000_000 // 5
    # a few bytes still make one merge at least, never more than the pairs, and a small exchange stays direct
    assert [len(x) for x in graph.exchange_plan(30, 200, nbytes=10)] == [1, 1]
    assert len(graph.exchange_plan(3, 3, 0, nbytes=10**12)[1]) == 3
    assert graph.exchange_plan(10, 40, nbytes=10**12) is None


def _lengths(*bundles):
    return [len(output) for bundle in bundles for output in bundle]


def test_bundles_give_every_consumer_every_output_through_few_dependencies():
    """The one-process write's file tasks, which each need every released piece, depend on about
    sqrt(pieces) bundles of them (P + C sqrt(P) dependencies, not P C: at 30M rows 1,023 pieces and 120
    files); each consumer still gets every output, in order, and Dask counts a bundle as references."""
    from dask.sizeof import sizeof

    from microagg.pipeline import graph

    layer = graph.Layer("bundles-test")
    producers = [layer.task(("out", i), np.arange, i + 1) for i in range(1023)]
    bundles = layer.bundles("pieces", producers)
    consumers = [layer.task(("file", c), _lengths, *bundles) for c in range(120)]
    assert len(bundles) == 32
    deps = [len(layer._tasks[ref.key].dependencies) for ref in bundles + consumers]
    assert max(deps[:32]) == 32 and sum(deps[:32]) == 1023  # each output in one bundle
    assert sum(deps) == 1023 + 120 * 32 < 1023 * 120 / 25
    results = dask.compute(*layer.delayed(consumers), scheduler="sync")
    assert all(r == list(range(1, 1024)) for r in results)
    one = layer.bundles("few", producers[:16])  # up to BUNDLE_MIN outputs: one bundle
    assert len(one) == 1 and len(layer._tasks[one[0].key].dependencies) == 16
    outputs = [np.zeros(1000) for _ in range(10)]
    assert sizeof(graph.Bundle(outputs)) < 1000 < 10 * 8000 <= sizeof(tuple(outputs))
    # outputs not kept elsewhere (the routed rows: their keys are released once bundled): a plain tuple,
    # which Dask counts in full
    layer = graph.Layer("bundles-test-alone")
    alone = layer.bundles("alone", [layer.task(("out", i), np.arange, i + 1) for i in range(40)], kept=False)
    got = dask.compute(*layer.delayed(alone), scheduler="sync")
    assert len(got) == 7 and all(type(b) is tuple for b in got)
    assert [len(a) for b in got for a in b] == list(range(1, 41))


def test_dask_api_is_independent_of_partitioning(data):
    _, df = data
    small = df.iloc[:6000]
    results = []
    with dask.config.set(scheduler="synchronous"):
        for npartitions in (1, 3, 7):
            ddf = dd.from_pandas(small, npartitions=npartitions)
            out = microagg.anonymize(ddf, 3, quasi_identifiers=QI, identifiers=["person_id"], block_size=1000)
            assert isinstance(out, dd.DataFrame)
            results.append(out.compute().reset_index(drop=True))
    for other in results[1:]:
        pd.testing.assert_frame_equal(other, results[0])
    assert_k_anonymous(results[0], QI, 3)


def test_a_qi_varying_below_1e_160_is_grouped_on_in_a_blocked_release(data):
    """The statistics pass's std of a column scaled by 2**-560 (variance below float64's smallest
    subnormal) is exact: the blocked release is that of the unscaled column, scaled."""
    _, df = data
    small = df.iloc[:6000]
    tiny = small.assign(q0=small["q0"] * 2.0 ** -560)
    with dask.config.set(scheduler="synchronous"):
        released = [microagg.anonymize(dd.from_pandas(frame, npartitions=3), 3, quasi_identifiers=QI,
                                       identifiers=["person_id"], block_size=1000).compute()
                    for frame in (small, tiny)]
    plain, scaled = (r.reset_index(drop=True) for r in released)
    np.testing.assert_array_equal(scaled["q0"].to_numpy(), plain["q0"].to_numpy() * 2.0 ** -560)
    pd.testing.assert_frame_equal(scaled.drop(columns="q0"), plain.drop(columns="q0"))
    assert_k_anonymous(scaled, QI, 3)


@pytest.mark.parametrize("refine", ["none", "local", "ils"])
def test_one_block_equals_the_in_memory_method(census, refine):
    with dask.config.set(scheduler="synchronous"):
        distributed = microagg.anonymize(dd.from_pandas(census, npartitions=3), 3, refine=refine).compute()
    in_memory = microagg.anonymize(census, 3, refine=refine)
    pd.testing.assert_frame_equal(distributed.reset_index(drop=True), in_memory)
    X = census.to_numpy(dtype=float)
    labels = microagg.partition(X, 3, refine=refine)
    expected = 5.692 if refine == "none" else None
    il = microagg.information_loss(X, labels)
    if expected:
        assert round(il, 3) == expected
    else:
        assert il < 5.692  # the local search only ever lowers the SSE


def test_an_input_up_to_one_block_rows_is_one_block(eia):
    """EIA (4,092 rows) is larger than the default block (2,500) but within ``one_block_rows``
    (5,000): solved as one block, classic MDAV exactly (IL 0.483 at k=3); without the threshold it is
    split, and stitching cannot make up the whole loss."""
    X = eia.drop(columns=EIA_NON_QI).to_numpy(dtype=float)
    def canonical(labels):  # groups numbered by their first row
        return np.unique(labels, return_inverse=True, return_index=True)[1].argsort().argsort()[labels]

    exact = canonical(microagg.partition(X, 3))
    assert np.array_equal(canonical(microagg.partition(X, 3, block_size=2500)), exact)
    assert round(microagg.information_loss(X, exact), 3) == 0.483
    split = microagg.partition(X, 3, block_size=2500, one_block_rows=0)
    assert not np.array_equal(canonical(split), exact)
    assert np.bincount(split).min() >= 3
    with pytest.raises(microagg.InputError, match="one-block rows"):
        microagg.partition(X, 3, block_size=2500, one_block_rows=-1)


@pytest.mark.parametrize("order", ["kd", "pca", "zscore"])
def test_orders_give_k_anonymous_releases(tmp_path, data, order):
    root, df = data
    out = _run(tmp_path, order, root / "one.parquet", "--no-html", "--k", 3, *BLOCKED, "--order", order,
               "--scheduler", "synchronous")
    report = json.loads((out / "_report.json").read_text())
    assert report["order"] == order and report["blocks"] > 1
    assert_k_anonymous(pd.read_parquet(out), QI, 3)


@pytest.mark.parametrize("refinement", [("--refine", "local"), ("--stitch", "deep"),
                                        ("--refine", "ils", "--iterations", "5")])
def test_refinement_lowers_information_loss(tmp_path, data, refinement):
    root, _ = data
    plain = _run(tmp_path, "plain", root / "one.parquet", "--no-html", "--k", 5, *BLOCKED, "--scheduler", "synchronous")
    refined = _run(tmp_path, "refined", root / "one.parquet", "--no-html", "--k", 5, *BLOCKED, *refinement,
                   "--scheduler", "synchronous")
    reports = [json.loads((p / "_report.json").read_text()) for p in (plain, refined)]
    assert reports[1]["information_loss"] < reports[0]["information_loss"]
    assert reports[1][refinement[0].lstrip("-")] == refinement[1]
    assert_k_anonymous(pd.read_parquet(refined), QI, 5)


def test_fast_stitching_is_the_same_release_in_memory_and_from_any_files(tmp_path, data):
    """``--stitch fast`` (narrower bands, fewer candidate groups): k-anonymous, byte-identical from one
    file or four, the groups of the in-memory blocked solve with the same options; its stitching still
    wins SSE back, less than the default's block sweeps and wider windows do on these data."""
    root, df = data
    common = ["--k", 5, *BLOCKED, "--stitch", "fast", "--scheduler", "synchronous"]
    one = _run(tmp_path, "fast-one", root / "one.parquet", "--no-html", *common)
    four = _run(tmp_path, "fast-four", root / "four", "--no-html", *common)
    assert _files(one) == _files(four)
    released = pd.read_parquet(one)
    assert_k_anonymous(released, QI, 5)
    in_memory = microagg.anonymize(df, 5, QI, identifiers=("person_id",), block_size=1500, blocks_per_task=4,
                                   stitch="fast")
    np.testing.assert_array_equal(in_memory[QI].to_numpy(), released[QI].to_numpy())
    light = _run(tmp_path, "light", root / "one.parquet", "--no-html", "--k", 5, *BLOCKED, "--scheduler", "synchronous")
    fast_report, light_report = (json.loads((p / "_report.json").read_text()) for p in (one, light))
    assert fast_report["stitch"] == "fast" and fast_report["blocks"] > 1
    assert 0 < fast_report["stitch_sse_gain"] < light_report["stitch_sse_gain"]
    assert light_report["information_loss"] < fast_report["information_loss"]


def test_auto_s_race_is_the_same_release_in_memory_and_from_any_files(tmp_path, data):
    """``--method auto`` races its portfolio over each task's blocks: the race depends only on the task
    and its blocks' order, so the release is byte-identical from one file or four, with one worker or
    two, and equals the in-memory blocked solve; ``--portfolio full`` is recorded and loses no less."""
    root, df = data
    df = df.iloc[:12_000]
    df.to_parquet(tmp_path / "one.parquet", index=False)
    (tmp_path / "three").mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(df)), 3)):
        df.iloc[rows].to_parquet(tmp_path / "three" / f"part-{i}.parquet", index=False)
    common = ["--k", 5, "--method", "auto", "--block-size", 600, "--blocks-per-task", 16,
              "--identifiers", "person_id", "--qi", ",".join(QI), "--no-evaluate", "--no-html"]
    one = _run(tmp_path, "race-one", tmp_path / "one.parquet", *common, "--scheduler", "synchronous")
    three = _run(tmp_path, "race-three", tmp_path / "three", *common, "--workers", 2)
    assert _files(one) == _files(three)
    released = pd.read_parquet(one)
    assert_k_anonymous(released, QI, 5)
    in_memory = microagg.anonymize(df, 5, QI, identifiers=("person_id",), method="auto", block_size=600,
                                   blocks_per_task=16)
    np.testing.assert_array_equal(in_memory[QI].to_numpy(), released[QI].to_numpy())
    full = _run(tmp_path, "full", tmp_path / "one.parquet", *common, "--portfolio", "full",
                "--scheduler", "synchronous")
    race_report, full_report = (json.loads((p / "_report.json").read_text()) for p in (one, full))
    assert race_report["blocks"] >= 16 and race_report["method_options"] == {}
    assert full_report["method_options"] == {"portfolio": "full"} and full_report["auto_portfolio"] is None
    # the race's counts: every block tried the members in the race, and was won by one of them
    raced = race_report["auto_portfolio"]
    members = raced["members"]
    assert raced["blocks"] == sum(m["won"] for m in members.values()) >= race_report["blocks"] - 1
    assert all(m["tried"] <= raced["blocks"] and m["won"] <= m["tried"] for m in members.values())
    assert {"mdav", "mdav grow=nc", "mhm mhm_order=npn", "dba"} <= set(members)
    assert len(members) == len(methods.AUTO_PORTFOLIO)
    assert sum(m["tried"] for m in members.values()) < len(members) * raced["blocks"]  # not every member ran
    assert full_report["information_loss"] <= race_report["information_loss"] * 1.01


@pytest.mark.parametrize("hashed", [False, True])
def test_a_parquet_inputs_dropped_identifiers_are_never_read(tmp_path, data, monkeypatch, hashed):
    from microagg.pipeline import io, release

    root, df = data
    read = []
    table = io.ExactIntegersEngine._read_table.__func__

    def spy(cls, path_or_frag, fs, row_groups, columns, *args, **kwargs):
        read.append(None if columns is None else list(columns))
        return table(cls, path_or_frag, fs, row_groups, columns, *args, **kwargs)

    monkeypatch.setattr(io.ExactIntegersEngine, "_read_table", classmethod(spy))
    options = release.ReleaseOptions(k=4, quasi_identifiers=tuple(QI), identifiers=("person_id",), block_size=1500,
                                     blocks_per_task=4, hash_identifiers=hashed)
    with dask.config.set(scheduler="synchronous"):
        release.run(root / "four", tmp_path / "out", options, identifier_key=b"key" if hashed else None, html=False)
    released = pd.read_parquet(tmp_path / "out")
    assert read and all(columns is not None for columns in read)
    # dropped: no read asked for the column (a hashed one is read: the release holds its pseudonyms)
    assert any("person_id" in columns for columns in read) == hashed
    assert ("person_id" in released.columns) == hashed and len(released) == len(df)
    assert_k_anonymous(released, QI, 4)


_SUMMED = threading.Event()  # module-level: the graph's functions below are pickled by reference
_WAITED = []
_ORIGINAL = {}


def _last_read_waits(cls, path_or_frag, *args, **kwargs):
    """The engine's read, which waits for a partition's sums before reading the last file."""
    if str(path_or_frag).endswith("part-3.parquet"):
        _WAITED.append(_SUMMED.wait(timeout=30))
    return _ORIGINAL["read"](cls, path_or_frag, *args, **kwargs)


def _summing(*args, **kwargs):
    _SUMMED.set()
    return _ORIGINAL["sums"](*args, **kwargs)


def test_the_statistics_pass_sums_a_partition_while_the_others_are_read(tmp_path, data, monkeypatch):
    """On a cluster the input is kept in memory (persisted) and summed in one stage, without a barrier
    between the two: a partition read early is summed beside the last reads. The read of the last file
    here waits for a partition's sums; before, the sums began once every read had ended (the wait timed
    out)."""
    from distributed import Client, LocalCluster

    from microagg.pipeline import io, release

    root, df = data
    _SUMMED.clear()
    _WAITED.clear()
    _ORIGINAL.update(read=io.ExactIntegersEngine._read_table.__func__, sums=release._partition_sums)
    monkeypatch.setattr(io.ExactIntegersEngine, "_read_table", classmethod(_last_read_waits))
    monkeypatch.setattr(release, "_partition_sums", _summing)
    options = release.ReleaseOptions(k=4, quasi_identifiers=tuple(QI), identifiers=("person_id",), block_size=1500,
                                     blocks_per_task=4)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster):
        report = release.run(str(root / "four"), str(tmp_path / "out"), options, html=False)
    assert report["input_kept_in_memory"] is True
    assert _WAITED and all(_WAITED)  # the last file's read (each pass that read it) saw a partition summed
    released = pd.read_parquet(tmp_path / "out")
    assert len(released) == len(df)
    assert_k_anonymous(released, QI, 4)


def test_hash_identifiers(tmp_path, data):
    root, df = data
    out = tmp_path / "hashed"
    env_key = "an operator's secret"
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).with_name("microagg")
    args = [str(exe), "anonymize", "--no-html", str(root / "one.parquet"), str(out), "--k", "3", *map(str, BLOCKED),
            "--hash-identifiers", "--scheduler", "synchronous"]
    proc = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "MICROAGG_HMAC_KEY": env_key})
    assert proc.returncode == 0, proc.stderr
    released = pd.read_parquet(out)
    expected = [hmac.new(env_key.encode(), str(v).encode(), hashlib.sha256).hexdigest() for v in df["person_id"]]
    assert released["person_id"].tolist() == expected
    report = (out / "_report.json").read_text()
    assert env_key not in report and json.loads(report)["identifiers_hashed"] == ["person_id"]
    # the release's evaluation does not count the hashed identifier as a changed column
    checks = json.loads(report)["evaluation"]["checks"]
    assert checks["passed"] and checks["not_compared"] == ["person_id"] and "person_id" not in checks["unchanged_columns"]
    # without the key: a clear error and nothing written
    env = {k: v for k, v in os.environ.items() if k != "MICROAGG_HMAC_KEY"}
    proc = subprocess.run([*args[:3], str(tmp_path / "nokey"), *args[4:]], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "MICROAGG_HMAC_KEY" in proc.stderr
    assert not (tmp_path / "nokey").exists()


def test_hashed_identifiers_of_a_csv_input_are_those_of_its_text(tmp_path, monkeypatch):
    """A CSV identifier is hashed as written. ``00123`` and ``123`` were one pseudonym (both read as the
    number 123), and a column of whole numbers with an empty cell was read as float64: every pseudonym
    was then that of ``123.0``, so one missing id in a day's export changed all of them. Here the empty
    cells come after Dask's sample, and a later text cell in another column makes the input be read
    again with widened types: the identifiers stay text. A missing identifier stays missing."""
    rng = np.random.default_rng(4)
    n = 20_000
    ids = [str(i) for i in range(n)]
    ids[10], ids[12] = "00123", "123"
    for i in range(15_000, n, 97):
        ids[i] = ""
    note = [str(i % 7) for i in range(n)]
    note[18_000] = "see file"
    frame = pd.DataFrame({"person_id": ids, "q0": rng.normal(size=n), "q1": rng.normal(size=n), "note": note})
    source = tmp_path / "in.csv"
    frame.to_csv(source, index=False)
    key = "an operator's secret"
    monkeypatch.setenv("MICROAGG_HMAC_KEY", key)
    out = _run(tmp_path, "hashed", source, "--k", 3, "--identifiers", "person_id", "--qi", "q0,q1",
               "--hash-identifiers", "--scheduler", "synchronous", "--no-html")  # evaluated: the input read again
    import pyarrow.parquet as pq

    released = pq.read_table(out)
    expected = [None if t == "" else hmac.new(key.encode(), t.encode(), hashlib.sha256).hexdigest() for t in ids]
    assert released.column("person_id").to_pylist() == expected
    assert json.loads((out / "_report.json").read_text())["input_types_widened"] == {"note": "string"}


def test_an_integer_qi_that_may_hold_nulls_is_released_and_filtered_as_floats(tmp_path):
    """An integer QI with a null, or from a file without statistics (it may hold one), is read as
    pandas' nullable Int64; the release's condition is still checked on the released float64 values
    (on Int64 it was refused: "not a true/false condition")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(8)
    n = 600
    ages = [None if i % 50 == 0 else int(a) for i, a in enumerate(rng.integers(18, 90, n))]
    table = pa.table({"person_id": np.arange(n), "q0": rng.normal(size=n), "age": pa.array(ages, pa.int64())})
    pq.write_table(table, tmp_path / "nulls.parquet")
    pq.write_table(table.set_column(2, "age", pa.array(rng.integers(18, 90, n))), tmp_path / "no-stats.parquet",
                   write_statistics=False)
    for name, extra in (("nulls", ["--missing", "centroid"]), ("no-stats", [])):
        out = _run(tmp_path, f"release-{name}", tmp_path / f"{name}.parquet", "--k", 3, "--qi", "q0,age",
                   "--identifiers", "person_id", "--release-where", "age > 30", *extra, "--scheduler", "synchronous",
                   "--no-html")
        released = pd.read_parquet(out)
        assert len(released) and (released["age"] > 30).all() and released["age"].dtype == np.float64, name
        assert_k_anonymous(released, ["q0", "age"], 3)


def test_the_release_keeps_the_input_schema(tmp_path):
    """Every column of a Parquet input leaves with its Arrow type (a dictionary, a nullable integer, a
    date, a decimal, a list, a struct... once failed the write, or came out as what pandas made of them), the
    quasi-identifiers as float64, a pseudonymised identifier as string, all nullable; the values of
    the other columns are the input's, also from files whose nullability differs."""
    import decimal
    import subprocess
    import sys
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(11)
    n = 4000
    maybe = [None if i >= 1000 and i % 13 == 0 else i for i in range(n)]
    fields = {
        "person_id": (pa.int64(), False, np.arange(n)),
        "q0": (pa.float64(), False, rng.normal(size=n)),
        "q1": (pa.int32(), True, rng.integers(0, 90, n)),
        "q2": (pa.float32(), False, rng.normal(size=n)),
        "name": (pa.string(), False, [f"n{i % 7}" for i in range(n)]),
        "long_text": (pa.large_string(), True, [None if i % 5 == 0 else f"t{i}" for i in range(n)]),
        "region": (pa.dictionary(pa.int32(), pa.string()), True, [f"r{i % 3}" for i in range(n)]),
        "count": (pa.int64(), True, maybe),  # nulls from row 1000 on
        # integers beyond 2**53 with nulls (a warehouse's bigint keys): read as float64, they were released
        # rounded (2**62 + 1 came out as 2**62)
        "account": (pa.int64(), True, [None if i % 10 == 0 else 2**62 + i for i in range(n)]),
        "serial": (pa.uint64(), True, [None if i % 10 == 1 else 2**64 - 1 - i for i in range(n)]),
        "household": (pa.int64(), True, [None if i % 6 == 0 else i // 3 for i in range(n)]),  # an identifier
        "narrow": (pa.uint8(), False, rng.integers(0, 255, n)),
        "share": (pa.float32(), True, [None if i % 7 == 0 else 0.5 for i in range(n)]),
        "flag": (pa.bool_(), True, rng.random(n) < 0.5),
        "day": (pa.date32(), True, [None if i % 11 == 0 else i for i in range(n)]),
        "seen": (pa.timestamp("ms", tz="UTC"), True, np.arange(n) * 60_000),
        "amount": (pa.decimal128(12, 2), True, [decimal.Decimal(i) / 100 for i in range(n)]),
        "tags": (pa.list_(pa.int32()), True, [None if i % 9 == 0 else list(range(i % 4)) for i in range(n)]),
        "address": (pa.struct([("street", pa.string()), ("floor", pa.int8())]), True,
                    [{"street": f"s{i % 17}", "floor": i % 5} for i in range(n)]),
    }
    schema = pa.schema([pa.field(name, kind, nullable) for name, (kind, nullable, _) in fields.items()])
    arrays = [pa.array(values).cast(kind) if pa.types.is_dictionary(kind) else pa.array(values, kind)
              for kind, _, values in fields.values()]
    source = tmp_path / "typed"
    source.mkdir()
    table = pa.Table.from_arrays(arrays, schema=schema)
    first = schema.set(schema.get_field_index("count"), schema.field("count").with_nullable(False))
    pq.write_table(table.slice(0, 1000).cast(first), source / "a.parquet")  # "count" declared non-null here,
    pq.write_table(table.slice(1000), source / "b.parquet", row_group_size=1000)  # with nulls here
    out = tmp_path / "release"
    exe = Path(sys.executable).with_name("microagg")
    proc = subprocess.run([str(exe), "anonymize", "--no-html", str(source), str(out), "--k", "3", "--qi", "q0,q1,q2",
                           "--identifiers", "person_id,household", "--hash-identifiers", "--block-size", "1500",
                           "--blocks-per-task", "2", "--one-block-rows", "0", "--scheduler", "synchronous"],
                          capture_output=True, text=True, env={**os.environ, "MICROAGG_HMAC_KEY": "k"})
    assert proc.returncode == 0, proc.stderr
    released = pq.read_table(out)
    assert json.loads((out / "_report.json").read_text())["blocks"] > 1
    original = pq.read_table(source)
    for field in schema:
        got = released.schema.field(field.name)
        assert got.nullable, field.name
        if field.name in ("q0", "q1", "q2"):
            assert got.type == pa.float64(), field.name
        elif field.name in ("person_id", "household"):
            assert got.type == pa.string(), got
        else:
            assert got.type == field.type, field.name
            assert released.column(field.name).equals(original.column(field.name)), field.name
    assert_k_anonymous(released.select(["q0", "q1", "q2"]).to_pandas(), ["q0", "q1", "q2"], 3)
    # an identifier's pseudonyms are those of its values' text (1, not 1.0 when the column holds a null), and
    # a missing identifier stays missing (one shared pseudonym would link every record that lacks it)
    expected = [None if v is None else hmac.new(b"k", str(v).encode(), hashlib.sha256).hexdigest()
                for v in original.column("household").to_pylist()]
    assert released.column("household").to_pylist() == expected


def test_nans_and_nulls_of_a_kept_float_column_are_released_apart(tmp_path):
    """A floating-point column released as it is, holding NaNs (a value: 0/0 in a warehouse's ratio)
    and nulls (missing): pandas read both as NaN and the write made every NaN a null, which changes
    ``COUNT(ratio)`` in SQL; the evaluation, reading both alike, found the column unchanged. Both are
    now released as they are, on any cluster, with the pandas metadata of NumPy floats as before; and
    ``microagg evaluate`` counts a NaN released as a null as a changed row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(2)
    n = 3000
    values = [float("nan") if i % 5 == 0 else None if i % 7 == 0 else i / 4 for i in range(n)]
    table = pa.table({"q0": rng.normal(size=n), "q1": rng.normal(size=n),
                      "ratio": pa.array(values, pa.float64(), from_pandas=False),
                      "share": pa.array(values, pa.float32(), from_pandas=False),
                      "weight": rng.random(n) + 0.5})
    source = tmp_path / "in.parquet"
    pq.write_table(table, source)
    releases = []
    for name, flags in (("sync", ["--scheduler", "synchronous"]), ("local", ["--workers", 2])):
        out = _run(tmp_path, name, source, "--k", 3, "--qi", "q0,q1", "--weights", "weight", *flags)
        report = json.loads((out / "_report.json").read_text())
        assert report["evaluation"]["checks"]["unchanged_columns"] == {"ratio": 0, "share": 0, "weight": 0}
        releases.append(_files(out))
    assert releases[0] == releases[1]
    released = pq.read_table(tmp_path / "sync")
    for column in ("ratio", "share"):
        got = released.column(column)
        assert got.null_count == 343 and pa.compute.sum(pa.compute.is_nan(got)).as_py() == 600
        assert str(got.to_pylist()) == str(table.column(column).to_pylist())
    assert pd.read_parquet(tmp_path / "sync").dtypes[["ratio", "share"]].tolist() == [np.float64, np.float32]
    nulled = released.set_column(released.schema.get_field_index("ratio"), "ratio",
                                 pa.array(released.column("ratio").to_pylist(), pa.float64(), from_pandas=True))
    pq.write_table(nulled, tmp_path / "nulled.parquet")
    evaluated = tmp_path / "evaluated.json"
    microagg_cli("evaluate", source, tmp_path / "nulled.parquet", "--qi", "q0,q1", "--report", evaluated,
                 "--no-html", "--scheduler", "synchronous", check=True)
    assert json.loads(evaluated.read_text())["checks"]["unchanged_columns"] == {"ratio": 600, "share": 0, "weight": 0}


def test_int96_timestamps_beyond_the_nanosecond_range_are_released_as_they_are(tmp_path, monkeypatch):
    """Spark writes timestamps as INT96 by default; pyarrow reads them in nanoseconds and wraps a value
    beyond 1677..2262 silently: a warehouse's open-ended ``9999-12-31 23:59:59`` was released as
    ``1816-03-30 05:56:07`` (and the evaluation, reading both alike, found the column unchanged).
    Such an input is now read in microseconds: every value released as it is, on any cluster and
    partitioning, nested in a struct, list or map too. An input whose INT96 values all fit nanoseconds
    keeps them (digits below the microsecond too); one that needs both units is refused, naming the
    columns, with nothing written."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    from microagg.pipeline import io

    rng = np.random.default_rng(3)
    n = 6000
    valid_to = [None if i % 13 == 0 else dt.datetime(9999, 12, 31, 23, 59, 59) if i % 3 else
                dt.datetime(2020, 1, 1) + dt.timedelta(microseconds=int(i) * 1_000_001) for i in range(n)]
    born = [dt.datetime(1, 1, 1) if i % 17 == 0 else dt.datetime(1950, 6, 1, 12, 30) for i in range(n)]
    # nested: a struct of (from, to) spans, a list of them (Spark writes nested timestamps as INT96 too)
    spell = pa.array([{"start": b, "end": v} for b, v in zip(born, valid_to)],
                     pa.struct([("start", pa.timestamp("us")), ("end", pa.timestamp("us"))]))
    stays = pa.array([[b, v] if i % 5 else None for i, (b, v) in enumerate(zip(born, valid_to))],
                     pa.list_(pa.timestamp("us")))
    checks = pa.array([[("last", v)] for v in valid_to], pa.map_(pa.string(), pa.timestamp("us")))
    table = pa.table({"q0": rng.normal(size=n), "q1": rng.normal(size=n),
                      "valid_to": pa.array(valid_to, pa.timestamp("us")), "born": pa.array(born, pa.timestamp("us")),
                      "spell": spell, "stays": stays, "checks": checks})
    source = tmp_path / "spark"
    source.mkdir()
    for i in range(3):
        pq.write_table(table.slice(i * 2000, 2000), source / f"part-{i}.parquet", row_group_size=500,
                       use_deprecated_int96_timestamps=True)
    assert pq.ParquetFile(source / "part-0.parquet").metadata.schema.column(2).physical_type == "INT96"
    monkeypatch.setattr(io, "PARQUET_BLOCKSIZE", "8KiB")  # row groups read apart, as parts of a large file
    ddf = io.read_input(source)
    assert ddf.npartitions > 3
    got = ddf.compute()
    assert got["valid_to"].tolist() == [pd.NaT if v is None else pd.Timestamp(v) for v in valid_to]
    assert got["born"].tolist() == [pd.Timestamp(v) for v in born]
    # scanned once per version of the files: a job reads its input two to five times
    scanned = []
    scan = io._int96_values
    monkeypatch.setattr(io, "_int96_values", lambda *pair: scanned.append(1) or scan(*pair))
    io.read_input(source)
    assert not scanned
    os.utime(source / "part-1.parquet", ns=(0, 0))  # a file written again
    assert io.read_input(source).dtypes["valid_to"] == "datetime64[us]" and scanned
    releases = []
    for name, flags in (("sync", ["--scheduler", "synchronous"]), ("local", ["--workers", 2])):
        out = _run(tmp_path, name, source, "--no-html", "--k", 3, "--qi", "q0,q1", *flags)
        report = json.loads((out / "_report.json").read_text())
        assert report["evaluation"]["checks"]["unchanged_columns"] == dict.fromkeys(
            ["valid_to", "born", "spell", "stays", "checks"], 0)
        releases.append(_files(out))
    assert releases[0] == releases[1]
    released = pq.read_table(tmp_path / "sync")
    assert released.schema.field("valid_to").type == pa.timestamp("us")
    assert released.schema.field("spell").type == spell.type
    assert released.column("valid_to").to_pylist() == valid_to
    assert released.column("born").to_pylist() == born
    for name, values in (("spell", spell), ("stays", stays), ("checks", checks)):
        assert released.column(name).to_pylist() == values.to_pylist(), name
    # all within nanoseconds: read in nanoseconds, as before, the digits below the microsecond kept
    # row i: i seconds and 7i nanoseconds after 2020-09-13 (all but every 1000th row have nanoseconds)
    seen = pa.array(np.arange(n) * 1_000_000_007 + 1_600_000_000_000_000_000, pa.timestamp("ns"))
    pq.write_table(table.drop(["valid_to", "born", "spell", "stays", "checks"]).append_column("seen", seen),
                   tmp_path / "fine.parquet", use_deprecated_int96_timestamps=True)
    out = _run(tmp_path, "fine", tmp_path / "fine.parquet", "--no-html", "--k", 3, "--qi", "q0,q1", "--no-evaluate",
               "--scheduler", "synchronous")
    assert pq.read_table(out).column("seen").to_pylist() == seen.to_pylist()
    def refused(frame, name, *messages):
        pq.write_table(frame, tmp_path / name, use_deprecated_int96_timestamps=True)
        proc = microagg_cli("anonymize", "--no-html", tmp_path / name, tmp_path / "refused", "--k", 3, "--qi", "q0,q1",
                            "--scheduler", "synchronous")
        assert proc.returncode == 2 and all(m in proc.stderr for m in messages), proc.stderr
        assert not (tmp_path / "refused").exists()

    refused(table.drop(["spell", "stays", "checks"]).append_column("seen", seen), "both.parquet",
            "column(s) 'born' (353 value(s)), 'valid_to' (3692 value(s)) hold dates outside",
            "column(s) 'seen' (5994 value(s)) hold digits below the microsecond")
    # the same, the nanoseconds nested in a struct; the spans' 353 + 3692 dates outside
    refused(table.drop(["valid_to", "born", "stays", "checks"]).append_column(
        "seen", pa.StructArray.from_arrays([seen], ["at"])), "nested.parquet",
        "column(s) 'spell' (4045 value(s)) hold dates outside", "column(s) 'seen' (5994 value(s)) hold digits below")


def test_a_hive_partitioned_input_keeps_its_partition_column(tmp_path):
    """A column named by directories (``region=north/...``), not in the files' schema: released with
    every row's value, as Dask reads it (a dictionary of strings)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    n = 3000
    table = pa.table({"person_id": np.arange(n), "q0": rng.normal(size=n), "q1": rng.normal(size=n),
                      "region": [("north", "south", "east")[i % 3] for i in range(n)],
                      "count": pa.array(rng.integers(0, 9, n), pa.int16())})
    pq.write_to_dataset(table, tmp_path / "hive", partition_cols=["region"])
    out = tmp_path / "release"
    microagg_cli("anonymize", "--no-html", tmp_path / "hive", out, "--k", 3, "--qi", "q0,q1", "--identifiers",
                 "person_id", "--no-evaluate", "--scheduler", "synchronous", check=True)
    released = pq.read_table(out)
    assert pa.types.is_dictionary(released.schema.field("region").type)
    assert released.schema.field("count").type == pa.int16()
    original = dd.read_parquet(tmp_path / "hive").compute()  # the input's row order, as the job reads it
    got = released.to_pandas()
    assert got["region"].astype(str).tolist() == original["region"].astype(str).tolist()
    assert got["count"].tolist() == original["count"].tolist()
    assert_k_anonymous(got, ["q0", "q1"], 3)


def test_a_hive_partition_of_null_keys_is_released_with_the_types_of_one_without(tmp_path):
    """Hive and Spark write a null key as ``key=__HIVE_DEFAULT_PARTITION__/``; Dask failed to read such
    an input (pyarrow: no non-null segments to infer the key's type from), and the job refused it. Its
    rows are now released with null keys, and the keys keep the types an input without the null
    directories gets (a nightly export's schema does not change on the day a null key appears)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(8)
    source, plain = tmp_path / "nulls", tmp_path / "plain"
    for year in ("2024", "2025", "__HIVE_DEFAULT_PARTITION__"):
        for region in ("north", "south", "__HIVE_DEFAULT_PARTITION__"):
            table = pa.table({"q0": rng.normal(size=40), "q1": rng.normal(size=40),
                              "count": pa.array(rng.integers(0, 9, 40), pa.int16())})
            for root in (source,) if "__" in year + region else (source, plain):
                (root / f"year={year}" / f"region={region}").mkdir(parents=True, exist_ok=True)
                pq.write_table(table, root / f"year={year}" / f"region={region}" / "part-0.parquet")
    released = {}
    for root, options in ((source, ()), (plain, ("--scheduler", "synchronous"))):
        out = tmp_path / f"release-{root.name}"
        microagg_cli("anonymize", root, out, "--k", 3, "--qi", "q0,q1", "--no-html", "--no-evaluate", *options,
                     check=True)
        released[root.name] = pq.read_table(out)
    assert released["nulls"].schema.field("year").type == released["plain"].schema.field("year").type == pa.int32()
    region = released["nulls"].schema.field("region").type
    assert region == released["plain"].schema.field("region").type and pa.types.is_dictionary(region)
    got = released["nulls"].to_pandas()
    assert len(got) == 9 * 40
    keys = got[["year", "region"]].astype("string").fillna("null").value_counts()
    assert keys.to_dict() == {(y, r): 40 for y in ("2024", "2025", "null") for r in ("north", "south", "null")}
    assert_k_anonymous(got, ["q0", "q1"], 3)


def test_a_column_pandas_stored_as_its_index_is_released(tmp_path):
    """``df.to_parquet`` of a frame with a named index stores the index as a column (last): it is a
    column of the input like any other, released unchanged in its place (it used to be dropped)."""
    import pyarrow.parquet as pq

    rng = np.random.default_rng(6)
    n = 3000
    df = pd.DataFrame({"q0": rng.normal(size=n), "q1": rng.normal(size=n), "v": rng.integers(0, 9, n)},
                      index=pd.Index(np.arange(n) * 10, name="rowkey"))
    df.to_parquet(tmp_path / "indexed.parquet")
    out = tmp_path / "release"
    microagg_cli("anonymize", "--no-html", tmp_path / "indexed.parquet", out, "--k", 3, "--qi", "q0,q1",
                 "--no-evaluate", "--scheduler", "synchronous", check=True)
    released = pq.read_table(out)
    assert released.column_names == pq.read_schema(tmp_path / "indexed.parquet").names == ["q0", "q1", "v", "rowkey"]
    assert released.column("rowkey").to_pylist() == df.index.tolist()
    assert released.column("v").to_pylist() == df["v"].tolist()


def test_gate_refuses_blocked_release_from_broken_partitioner(tmp_path, data, broken_method):
    from microagg.pipeline.errors import ReleaseGateError
    from microagg.pipeline.release import ReleaseOptions, run

    root, _ = data
    out = tmp_path / "release"
    with dask.config.set(scheduler="synchronous"):
        with pytest.raises(ReleaseGateError, match="not 4-anonymous"):
            run(str(root / "one.parquet"), str(out),
                ReleaseOptions(k=4, method="broken", block_size=1500, blocks_per_task=4, quasi_identifiers=tuple(QI)))
    assert not out.exists() and os.listdir(tmp_path) == []


def test_invariants_on_100k_rows(tmp_path):
    df = extract(100_000, seed=11)
    path = tmp_path / "big.parquet"
    df.to_parquet(path, index=False)
    out = _run(tmp_path, "rel", path, "--no-html", "--k", 5, "--identifiers", "person_id", "--qi", ",".join(QI),
               "--workers", 2)
    released = pd.read_parquet(out)
    assert len(released) == len(df)
    assert_k_anonymous(released, QI, 5)
    assert released["region"].astype(str).tolist() == df["region"].astype(str).tolist()
    np.testing.assert_array_equal(released["flag"].to_numpy(), df["flag"].to_numpy())
    report = json.loads((out / "_report.json").read_text())
    assert report["min_group_size"] >= 5 and report["blocks"] >= 16
    assert report["workers"]["count"] == 2 and report["workers"]["max_peak_rss_bytes"] > 0


@pytest.mark.parametrize("order", ["kd", "pca"])
def test_in_memory_blocked_solve_equals_the_distributed_release(data, order):
    """The blocked algorithm without Dask forms the same groups: identical released values."""
    _, df = data
    options = dict(block_size=1500, blocks_per_task=4, order=order, seed=7)
    in_memory = microagg.anonymize(df, 5, QI, identifiers=("person_id",), **options)
    with dask.config.set(scheduler="synchronous"):
        distributed = microagg.anonymize(dd.from_pandas(df, npartitions=3), 5, QI, identifiers=("person_id",),
                                         **options).compute()
    pd.testing.assert_frame_equal(in_memory.reset_index(drop=True), distributed.reset_index(drop=True),
                                  check_exact=True)
    labels = microagg.partition(df[QI].to_numpy(), 5, **options)
    assert np.bincount(labels).min() >= 5
    assert len(np.unique(in_memory[QI].to_numpy(), axis=0)) == labels.max() + 1


def test_the_write_merges_released_pieces_files_in_order_only_when_each_file_would_read_few_rows_of_each(
        monkeypatch):
    """Output files x filed released pieces reads of fewer than CHUNK_ROWS rows each, on average: consecutive
    pieces' files are merged first, about MERGE_BYTES of rows each (here 1.15 MB a piece: 58 a merge)."""
    from microagg.pipeline import graph, release

    monkeypatch.setattr(release, "_merge_pieces", lambda *pieces: pieces)
    monkeypatch.setattr(release, "CHUNK_ROWS", 256)
    pieces, files = [f"piece-{i}" for i in range(100)], 40
    rows = release.CHUNK_ROWS * len(pieces) * files
    layer = graph.Layer("microagg-test")
    assert release._merged(layer, 0, pieces, 13, rows, files) is pieces
    assert release._merged(layer, 0, pieces[:1], 13, rows - 1, files) == pieces[:1]
    merged = release._merged(layer, 0, pieces, 13, rows - 1, files)
    batches = dask.compute(*layer.delayed(merged), scheduler="synchronous")
    assert [len(b) for b in batches] == [58, 42] and [p for b in batches for p in b] == pieces


def test_a_tree_reduction_merges_every_output_in_order_and_gives_the_client_the_root_alone():
    """Layer.reduce merges outputs fan_in at a time, level by level (1,000 outputs by 8: 125 + 16 + 2 + 1
    merges), keeping their order; one output is its own root."""
    from microagg.pipeline import graph

    layer = graph.Layer("reduce-test")
    outputs = [layer.task(("out", i), list, range(i, i + 1)) for i in range(1000)]
    root = layer.reduce("merge", outputs, _joined, fan_in=8)
    merges = [key for key in layer._tasks if key[1] == "merge"]
    assert len(merges) == 125 + 16 + 2 + 1
    assert max(len(layer._tasks[key].dependencies) for key in merges) == 8
    assert dask.compute(*layer.delayed([root]), scheduler="sync")[0] == list(range(1000))
    assert layer.reduce("alone", outputs[:1], _joined) is outputs[0]


def test_a_layer_over_many_persisted_objects_keeps_them_in_one_layer_of_its_graph():
    """Persisted objects (each a key and its future) that a layer's tasks take join one layer of its
    graph, beside the layers of other collections it takes: Dask copies a graph layer by layer for each
    collection computed, so 4,095 gate summaries over as many one-layer pieces made 4,096 x 4,096 copies
    (1.2 GB in the job's process at 100M rows)."""
    from distributed import Client, LocalCluster

    from microagg.pipeline import graph

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster):
        first = graph.Layer("pieces")
        pieces = dask.persist(*first.delayed([first.task(i, list, range(i)) for i in range(300)]))
        offset = dask.delayed(int)(7)  # a collection with a graph of its own
        layer = graph.Layer("summaries")
        lengths = layer.delayed([layer.task(i, _length_plus, piece, offset) for i, piece in enumerate(pieces)])
        assert len(lengths[0].dask.layers) == 3  # the layer, the persisted pieces', the offset's
        assert list(dask.compute(*lengths)) == [i + 7 for i in range(300)]


def _length_plus(values, offset):
    return len(values) + offset


def _joined(*lists):
    return [x for part in lists for x in part]


def test_real_anonymity_of_a_blocked_release(tmp_path, data):
    """k' = records / distinct released tuples, from the gate's evidence (no pass over the rows), equals
    a count over the written release."""
    root, df = data
    out = _run(tmp_path, "kprime", root / "four", "--no-html", "--k", 3, *BLOCKED, "--scheduler", "synchronous")
    report = json.loads((out / "_report.json").read_text())
    released = pd.read_parquet(out)
    assert report["real_anonymity"]["all"] == len(released) / len(released[QI].drop_duplicates())


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_real_anonymity_counts_tuples_repeated_across_pieces_once(tmp_path, monkeypatch, processes):
    """k' counts each distinct released tuple once, however many pieces or files release it. Here 6,000
    records are 30 distinct ones, 200 copies each, spread over three strata (solved apart: each stratum's
    pieces release most of the same tuples) and six output files. On worker processes the pieces' tuple
    hashes meet on the workers (graph.Layer.reduce, two at a time here), never in the gate's summaries;
    with attribute blocks the files' distinct tuples do the same. Both equal a count over the written
    release."""
    from distributed import Client, LocalCluster

    from microagg.pipeline import graph, release

    monkeypatch.setattr(graph, "FAN_IN", 2)  # trees of several levels
    rng = np.random.default_rng(9)
    distinct = pd.DataFrame(rng.normal(size=(30, 3)).round(3), columns=["a", "b", "c"])
    df = distinct.iloc[rng.permutation(np.repeat(np.arange(30), 200))].reset_index(drop=True)
    source = tmp_path / "copies.parquet"
    df.assign(region=np.arange(len(df)) % 3).to_parquet(source, index=False)
    gated = []
    gate = release.gate
    monkeypatch.setattr(release, "gate", lambda *a: gated.append(gate(*a)) or gated[-1])
    base = dict(k=4, quasi_identifiers=("a", "b", "c"), block_size=600, blocks_per_task=2, rows_per_file=1000)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=":0") as cluster, \
            Client(cluster):
        for name, options in [("strata", dict(base, strata=("region",))),
                              ("blocks", dict(base, attribute_blocks=(("a",), ("b",), ("c",))))]:
            out = tmp_path / name
            report = release.run(str(source), str(out), release.ReleaseOptions(**options))
            released = pd.read_parquet(out)[["a", "b", "c"]]
            k_prime = report["attribute_blocks"]["real_anonymity"] if name == "blocks" else report["real_anonymity"]
            assert k_prime["all"] == len(df) / len(released.drop_duplicates())
            if name == "blocks":
                assert k_prime["1+3"] == len(df) / len(released[["a", "c"]].drop_duplicates())
    summaries, _, counted = gated[0]
    assert all("tuple_hashes" not in s for s in summaries)
    assert counted < sum(s["groups"] for s in summaries if s["rows"]) - 30  # tuples repeated across the strata
    assert len(list((tmp_path / "blocks").glob("*.parquet"))) == 6


def test_block_sweeps_lower_the_loss_of_a_blocked_solve_and_leave_one_block_alone(census):
    # light's first step: one local-search sweep over each block's own groups before any plane is
    # stitched; an input of one block stays the method's partition (the published MDAV figures)
    from microagg.pipeline import blocked, stitch
    from microagg.pipeline.solver import Solver

    X = extract(20_000, seed=3)[QI].to_numpy()
    Z = (X - X.mean(axis=0)) / X.std(axis=0)
    solver = Solver.build("mdav")
    plan = blocked.Blocking(block_size=1000, blocks_per_task=4)
    with_sweeps = stitch.STITCHING["light"]
    without = dataclasses.replace(with_sweeps, block_sweeps=0)
    labels = {}
    for name, settings in (("without", without), ("with", with_sweeps)):
        labels[name], info = blocked.blocked_partition(Z, 5, solver, settings, plan, threads=2)
        assert info["blocks"] > 8 and np.bincount(labels[name]).min() >= 5
        assert np.bincount(labels[name]).max() <= 9
    loss = {name: microagg.information_loss(Z, labels[name], standardized=True) for name in labels}
    assert loss["with"] < loss["without"]
    C = census.to_numpy()
    Zc = (C - C.mean(axis=0)) / C.std(axis=0)
    one, info = blocked.blocked_partition(Zc, 5, solver, with_sweeps, blocked.Blocking(), threads=1)
    assert info["blocks"] == 1
    np.testing.assert_array_equal(one, stitch.compact(microagg.partition(Zc, 5, standardized=True)))


def test_an_upper_plane_gathers_at_most_its_bound_of_rows(monkeypatch):
    # the rows near an upper split plane travel to one stitching task: without a bound they grow
    # with the input (the root plane's task killed workers of 1.5 GiB at 30M rows)
    from microagg.pipeline import stitch

    X = extract(40_000, seed=3)[QI].to_numpy()
    seen = []
    original = stitch.stitch_upper

    def recorded(Z, group_ids, *args):
        seen.append(len(Z))
        return original(Z, group_ids, *args)

    monkeypatch.setattr(stitch, "stitch_upper", recorded)
    blocking = dict(block_size=500, blocks_per_task=4)
    unbounded = microagg.partition(X, 5, **blocking)
    assert len(seen) > 4 and max(seen) > 600
    widest, seen[:] = max(seen), []
    monkeypatch.setattr(stitch, "UPPER_ROWS", 600)
    bounded = microagg.partition(X, 5, **blocking)
    assert len(seen) > 4 and 0 < max(seen) <= 600 < widest
    for labels in (unbounded, bounded):
        assert np.bincount(labels).min() >= 5
    loss = [microagg.information_loss(X, labels) for labels in (unbounded, bounded)]
    assert loss[1] <= 1.05 * loss[0]  # fewer groups re-stitched across the upper planes: little lost


def test_the_upper_plane_bound_keeps_groups_of_identical_records_on_the_plane_first(monkeypatch):
    # groups of identical records have radius 0 (here most groups: the median radius is 0 too), and
    # are still the nearest to a plane they lie on
    from types import SimpleNamespace

    from microagg.pipeline import stitch

    tree = SimpleNamespace(task_ancestors=[[0]], upper=np.array([0]), directions=np.array([[1.0, 0.0]]),
                           thresholds=np.array([0.0]), leaf_counts=(np.array([1]), np.array([1])))
    Z = np.zeros((25, 2))
    Z[15:, 0] = 0.005  # groups 3 and 4 a little off the plane (within its band), with a radius
    Z[15::2, 1] = 0.05
    labels = np.repeat(np.arange(5), 5)
    monkeypatch.setattr(stitch, "UPPER_ROWS", 15)
    assert stitch.assign_upper(Z, labels, tree, 0, stitch.STITCHING["light"]).tolist() == [0, 0, 0, -1, -1]
    monkeypatch.setattr(stitch, "UPPER_ROWS", 100)
    assert stitch.assign_upper(Z, labels, tree, 0, stitch.STITCHING["light"]).tolist() == [0] * 5


def test_a_block_the_sample_cannot_split_is_cut_where_it_is_solved(monkeypatch):
    """Zero-inflated data: 90 % of the records identical. No median split of the sample separates
    them, so one leaf held them all (900,570 rows of a 1M-row input, solved by MDAV in 6 minutes).
    The leaf is now cut on its rows as the tree cuts a cell: no block reaches the solver above the
    block size, and every tuple occurring k times or more is grouped with itself before the method
    runs (exact ties made kward, DBA, GSMS and MD quadratic). Identical records cost nothing, so the
    loss is that of the other records."""
    from microagg.pipeline import blocking, stitch

    rng = np.random.default_rng(4)
    X = np.zeros((60_000, 4))
    X[::10] = rng.lognormal(size=(6_000, 4))
    seen = []
    original = stitch.solve_block

    def recorded(Z, k, solver, tag=0, race=None):
        seen.append(len(Z))
        _, counts = np.unique(Z, axis=0, return_counts=True)
        assert counts.max() < k  # the frequent tuples never reach the method
        return original(Z, k, solver, tag, race)

    monkeypatch.setattr(stitch, "solve_block", recorded)
    for method in ("mdav", "kward"):
        seen[:] = []
        labels = microagg.partition(X, 5, method=method, block_size=1000, blocks_per_task=8)
        sizes = np.bincount(labels)
        assert sizes.min() >= 5 and seen and max(seen) <= 1000
        zeros = labels[X.sum(axis=1) == 0]
        assert (np.bincount(zeros)[np.unique(zeros)] == sizes[np.unique(zeros)]).all()  # zeros only with zeros
    df = pd.DataFrame(X, columns=list("abcd"))
    options = dict(block_size=1000, blocks_per_task=8)
    in_memory = microagg.anonymize(df, 5, list("abcd"), **options)
    with dask.config.set(scheduler="synchronous"):
        distributed = microagg.anonymize(dd.from_pandas(df, npartitions=3), 5, list("abcd"), **options).compute()
    pd.testing.assert_frame_equal(in_memory.reset_index(drop=True), distributed.reset_index(drop=True),
                                  check_exact=True)
    order, steps = blocking.cut_plan(np.zeros((10_000, 3)), 1000)
    assert [b - a for a, b, plane, _ in steps if plane is None] == [625] * 16 and len(steps) == 31
    np.testing.assert_array_equal(order, np.arange(10_000))  # ties in row order
    Z = rng.normal(size=(5_000, 3))
    order, steps = blocking.cut_plan(Z, 700)
    assert sorted(order.tolist()) == list(range(5_000))
    for a, b, plane, threshold in steps:
        if plane is None:  # a piece: at most the size, its rows in increasing position
            assert b - a <= 700 and (np.diff(order[a:b]) > 0).all()
        else:  # a split: its halves on either side of its plane
            side = Z[order[a:b]] @ plane - threshold
            assert (side[:(b - a) // 2] <= 0).all() and (side[(b - a) // 2:] >= 0).all()


def test_frequent_tuples_are_grouped_with_themselves():
    from microagg.pipeline import stitch
    from microagg.pipeline.solver import Solver

    Z = np.array([[0.0, 0]] * 12 + [[1.0, 1]] * 4 + [[2.0, 2]] * 7 + [[5.0, 5], [6.0, 6]])
    labels, g = stitch.duplicate_groups(Z, 5)
    assert g == 3  # twelve zeros: groups of 5 and 7; seven twos: one group; four ones: too few
    assert labels[:12].tolist() == [0] * 5 + [1] * 7 and labels[16:23].tolist() == [2] * 7
    assert (labels[12:16] == -1).all() and (labels[23:] == -1).all()
    # six rows left (the ones, 5 and 6): solved by the method; one row left would join its nearest group
    solved = stitch.solve_without_duplicates(Z, 5, Solver.build("mdav"))
    assert np.bincount(solved).min() >= 5 and len(np.unique(solved[12:16])) == 1
    one = stitch.solve_without_duplicates(np.vstack([Z[:12], [[0.1, 0.0]]]), 5, Solver.build("mdav"))
    assert one.tolist() == [0] * 5 + [1] * 7 + [0]  # both groups at (0, 0): the lower number


@pytest.mark.parametrize("workers, threads, processes", [(1, 2, False), (2, 1, False), (2, 1, True)],
                         ids=["one-process", "two-workers", "worker-processes"])
def test_rows_in_transit_through_files_give_the_same_release_and_leave_no_file(tmp_path, data, monkeypatch,
                                                                               workers, threads, processes):
    """With the tasks in the job's process, the routed rows go through files in a scratch directory
    (pipeline.transit) beyond TRANSIT_MEMORY_SHARE of the memory: each routing task writes one file, each block
    task reads its rows from every file and writes those for its upper planes to one file, which their tasks
    read; every released piece goes to a file cut by output file, which the write reads file by file. The
    release is the one through memory, and the directory is gone after the job. Workers in other processes
    use the files too, whatever the share, when they see the scratch directory (here: one host); through memory
    when they do not (pipeline.release._unseen_by_workers, patched)."""
    from distributed import Client, LocalCluster

    from microagg.pipeline import release, transit

    root, df = data
    weighted = root / "weighted.parquet"
    df.assign(weight=np.random.default_rng(4).uniform(0.5, 4.0, len(df))).to_parquet(weighted, index=False)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    written, read, merged = [], [], []
    write, read_keys, merge = transit.write_rows, transit.read_keys, transit.merge
    monkeypatch.setattr(transit, "write_rows", lambda path, *a: written.append(path) or write(path, *a))
    monkeypatch.setattr(transit, "read_keys", lambda pairs: read.append(pairs) or read_keys(pairs))
    monkeypatch.setattr(transit, "merge",
                        lambda path, files: merged.append(tuple(f.path for f in files)) or merge(path, files))
    runs = {}
    base = dict(k=4, quasi_identifiers=tuple(QI), identifiers=("person_id",), block_size=1500, blocks_per_task=4,
                rows_per_file=3000)
    with dask.config.set({"temporary-directory": str(scratch)}), \
            LocalCluster(n_workers=workers, threads_per_worker=threads, processes=processes,
                         dashboard_address=":0") as cluster, Client(cluster):
        for name, source, options in [("plain", root / "four", base),
                                      ("weighted", weighted, dict(base, weights="weight", strata=("region",))),
                                      ("blocks", root / "four", dict(base, attribute_blocks=(tuple(QI[:2]),
                                                                                             tuple(QI[2:]))))]:
            for threshold in (0, "merged", 10**18):
                monkeypatch.setattr(release, "TRANSIT_MEMORY_SHARE", 0 if threshold == "merged" else threshold)
                out = tmp_path / f"{name}-{threshold}"
                with monkeypatch.context() as patched:
                    if processes and threshold == 10**18:  # (between processes, memory only if a worker cannot see the files)
                        patched.setattr(release, "_unseen_by_workers", lambda path: workers)
                    if threshold == "merged":  # the released pieces' files merged two by two before the write
                        patched.setattr(release, "CHUNK_ROWS", 10**9)
                        patched.setattr(release, "MERGE_BYTES", 1)
                    report = release.run(str(source), str(out), release.ReleaseOptions(**options))
                runs[name, threshold] = ((report["rows_in_transit"], report["released_pieces"]), _files(out),
                                         report.get("attribute_blocks"))
                assert [p for p in os.listdir(scratch) if p.startswith(transit.PREFIX)] == []  # beside Dask's own
    assert runs["blocks", 0][2]["real_anonymity"]["all"] > 1  # k' read from the released pieces' files
    for name in ("plain", "weighted", "blocks"):
        assert runs[name, 0][1:] == runs[name, "merged"][1:] == runs[name, 10**18][1:]
        assert runs[name, 10**18][0] == ("memory", "memory")
        assert runs[name, 0][0] == runs[name, "merged"][0] == ("files",) * 2
    if not processes:  # the spies see only this process's calls
        assert {len(paths) for paths in merged} == {1, 2} or {len(paths) for paths in merged} == {2}  # (a last batch: 1)
        assert len(set(merged)) == len(merged)  # once for the write and the real anonymity (attribute blocks)
        upper = [path for path in written if "-upper-" in path]
        released = [path for path in written if "-released-" in path]
        routed = [path for path in written if path not in upper + released]
        assert len(routed) >= 4 + 2 and len(set(written)) == len(written)  # one file per input partition
        assert len(upper) >= 2  # block tasks below an upper plane
        assert len(released) >= 2 * len(upper)  # the block tasks' and the upper planes' released pieces
        assert len(read) >= 2 * 2  # every block task (pack) and upper plane of each job reads its rows


def test_rows_in_transit_stay_in_memory_when_a_worker_process_cannot_see_the_scratch_directory(tmp_path, monkeypatch,
                                                                                               caplog):
    """Worker processes see a scratch directory on a filesystem they share with the job (here, one host), and the
    rows in transit go through it; a worker that does not see it (another host's temporary directory) keeps them in
    memory, which the log says, and the directory goes."""
    from distributed import Client, LocalCluster

    from microagg.pipeline import release, transit

    monkeypatch.setattr(release, "TRANSIT_MEMORY_SHARE", 0)
    with dask.config.set({"temporary-directory": str(tmp_path)}), LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, Client(cluster):
        assert release._unseen_by_workers(str(tmp_path)) == 0
        assert release._unseen_by_workers(str(tmp_path / "another-host-s")) == 2
        with release.transit_directory(1000, 15) as path:
            assert path and os.path.isdir(path)
        monkeypatch.setattr(release, "_unseen_by_workers", lambda path: 1)
        with caplog.at_level(logging.INFO, logger="microagg"), release.transit_directory(1000, 15) as path:
            assert path is None
    assert "rows in transit kept in memory: 1 Dask worker(s) cannot see the scratch directory" in caplog.text
    assert [p for p in os.listdir(tmp_path) if p.startswith(transit.PREFIX)] == []


def test_the_released_pieces_go_through_files_only_when_they_too_would_take_a_tenth_of_the_memory(tmp_path, data,
                                                                                                  monkeypatch):
    """Rows in transit (15 cells a row here) beyond a tenth of the memory go through files; the released pieces
    (2 cells a row and a k-th of a tuple: 5.25) only beyond it too, since written row by row they cost
    three times their size. The release is the same either way."""
    from microagg.pipeline import release

    root, _ = data
    options = release.ReleaseOptions(k=4, quasi_identifiers=tuple(QI), identifiers=("person_id",), block_size=1500,
                                     blocks_per_task=4)
    n_rows = 20_000
    runs = {}
    with dask.config.set(scheduler="synchronous", **{"temporary-directory": str(tmp_path)}):
        for name, memory in (("both", 40 * n_rows * 8), ("rows", 100 * n_rows * 8), ("none", 200 * n_rows * 8)):
            monkeypatch.setattr(release, "_process_memory", lambda memory=memory: memory)
            report = release.run(str(root / "four"), str(tmp_path / name), options)
            runs[name] = (report["rows_in_transit"], report["released_pieces"]), _files(tmp_path / name)
    assert {name: how for name, (how, _) in runs.items()} == {
        "both": ("files", "files"), "rows": ("files", "memory"), "none": ("memory", "memory")}
    assert runs["both"][1] == runs["rows"][1] == runs["none"][1]


def test_rows_in_transit_without_disk_room_stay_in_memory_only_if_it_can_hold_them(tmp_path, data, monkeypatch, capsys):
    """With too little free space in the scratch directory, rows in transit beyond a tenth of the memory stay in
    memory if they take at most half of it; beyond, the job stops before its blocks stage with exit code 5 and a
    message that says what they need on disk and in memory and where, and writes nothing (it ran out of memory in
    the stage before)."""
    from microagg.jobs import cli
    from microagg.pipeline import release, transit

    root, df = data
    n_rows = len(df)
    rows_bytes = 15 * 8 * n_rows  # 13 QIs, row ids and leaves
    monkeypatch.setattr(transit, "free_space", lambda root: 1000)
    monkeypatch.setattr(transit, "scratch_root", lambda: str(tmp_path))
    args = ["anonymize", "--no-html", "--no-evaluate", str(root / "four"), "--k", "4", *BLOCKED, "--scheduler",
            "synchronous"]
    monkeypatch.setattr(release, "_process_memory", lambda: 3 * rows_bytes)  # a third of the memory: kept there
    assert cli.main(args[:4] + [str(tmp_path / "kept")] + args[4:]) == 0
    assert json.loads((tmp_path / "kept" / "_report.json").read_text())["rows_in_transit"] == "memory"
    capsys.readouterr()
    monkeypatch.setattr(release, "_process_memory", lambda: 1.5 * rows_bytes)  # two thirds: refused
    assert cli.main(args[:4] + [str(tmp_path / "refused")] + args[4:]) == 5
    err = capsys.readouterr().err
    assert err.startswith(f"microagg: error: scratch space for rows in transit: {transit.ROOM * rows_bytes / 1e9:.1f} "
                          f"GB needed, {tmp_path} has 0.0 GB free; in memory they would take "
                          f"{rows_bytes / 1e9:.1f} GB"), err
    assert "more than 50% of the job's" in err and "DASK_TEMPORARY_DIRECTORY" in err
    assert err.rstrip().endswith("Nothing was written.")
    assert not (tmp_path / "refused").exists() and not [p for p in os.listdir(tmp_path) if ".microagg-" in p]


def test_an_evaluation_whose_qis_fit_neither_on_disk_nor_in_memory_is_refused_before_it_reads_them(
        tmp_path, monkeypatch):
    """The evaluation's scratch follows the same rule (its QIs held 2.5 times in memory, 2.5 times on disk)."""
    from microagg.pipeline import evaluate, release, transit
    from microagg.pipeline.errors import ScratchSpaceError

    monkeypatch.setattr(transit, "free_space", lambda root: 0)
    rows, width = 100_000, 13
    qis = 16 * rows * width
    monkeypatch.setattr(release, "_process_memory", lambda: 6 * qis)  # 2.5 times the QIs: under half of it
    with evaluate.scratch_directory(rows, width) as path:
        assert path is None
    monkeypatch.setattr(release, "_process_memory", lambda: 4 * qis)
    with pytest.raises(ScratchSpaceError, match=r"scratch space for both files' QIs: 0\.1 GB needed"):
        with evaluate.scratch_directory(rows, width):
            pass


def _first(values):
    return float(values[0])


def test_the_split_trees_held_once_by_the_blocks_graph_do_not_count_toward_dask_s_large_graph_warning():
    """Dask warns of a graph past 10 MB (data embedded by mistake); the blocks stage's graph holds each split tree
    once on purpose (10.2 MB at 100M rows), so the threshold is raised by their pickled size for it: a graph of a
    12 MB object warns without it and not with it, and one larger than the object and the threshold warns still."""
    import warnings

    from distributed import Client, LocalCluster

    from microagg.pipeline import graph, release

    tree = np.arange(1_500_000, dtype=np.float64)  # 12 MB pickled
    big = np.arange(3_000_000, dtype=np.float64)

    def warned(obj, held):
        layer = graph.Layer("microagg-test")
        shipped = dask.delayed(obj, name=f"literal-{id(layer)}", traverse=False)
        refs = [layer.task(i, _first, shipped) for i in range(4)]
        with warnings.catch_warnings(record=True) as caught, release._graph_holding(held):
            warnings.simplefilter("always")
            assert dask.compute(*layer.delayed(refs)) == (0.0,) * 4
        return any("Sending large graph" in str(w.message) for w in caught)

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster):
        assert warned(tree, [])
        assert not warned(tree, [tree])
        assert warned(np.concatenate([tree, big]), [tree])
    assert dask.config.get(release.GRAPH_WARNING) == "10MB"  # as it was, after each graph
