"""Reading inputs (CSV / Parquet, local or fsspec URLs) and committing releases atomically."""

import codecs
import contextlib
import glob
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
import threading
import time
import uuid
from collections import Counter
from functools import lru_cache, partial
from importlib.resources import files
from typing import NamedTuple

import dask.dataframe as dd
import fsspec
import numpy as np
from dask.dataframe.io.csv import read_pandas
from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine
from pandas.errors import ParserError

from .._cpu import usable_cores
from . import interrupts
from .errors import CSVParseError, CSVTypeChange, InputError, OutputBusyError, ReleaseGateError

log = logging.getLogger(__name__)

EXAMPLES = {
    "census": "data/census.csv",
}
"""Bundled example data, addressed as ``example:NAME`` (the CASC Census reference file)."""

_TSV_SUFFIXES = (".tsv", ".tsv.gz", ".tsv.bz2", ".tsv.xz", ".tsv.zst", ".tab")
_CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zst", ".txt") + _TSV_SUFFIXES
_PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")


def example_path(name):
    if name not in EXAMPLES:
        raise InputError(f"unknown example {name!r}; bundled examples: {', '.join(EXAMPLES)}")
    return str(files("microagg.pipeline").joinpath(EXAMPLES[name]))


def resolve_input(path):
    """``(format, urlpath)`` for an input path: ``example:NAME``, a file, a directory or a glob."""
    path = str(path)
    if path.startswith("example:"):
        return "csv", example_path(path.split(":", 1)[1])
    try:
        fs, _, paths = fsspec.get_fs_token_paths(path)
    except ImportError as exc:  # fsspec names the package its protocol needs
        raise InputError(f"input path {path!r}: {exc} (into the same environment as microagg, and on the "
                         f"workers)") from exc
    if not paths or not all(fs.exists(p) for p in paths):
        magic = "".join(c for c in "*?[" if c in path)
        if magic and is_local(path) and os.path.exists(path.removeprefix("file://")):
            raise InputError(f"input path {path!r} exists, but its name holds {magic!r}, which is read as a glob "
                             f"(matching nothing): rename it, or link it under a name without")
        other = "".join(c for c in "?[" if c in path)
        if other and (matched := sorted(p for p in fs.glob(fs._strip_protocol(path)) if not fs.isdir(p))):
            raise InputError(f"input path {path!r} holds {other!r}, glob characters microagg does not expand "
                             f"(Dask expands only '*'); as a pattern it would match {len(matched)} file(s) "
                             f"(e.g. {matched[0]!r}): use '*', or give their directory")
        raise InputError(f"input path {path!r} does not exist (or the glob matches nothing)")
    inside = None
    if len(paths) == 1 and fs.isdir(paths[0]):
        inside = [p for p in fs.find(paths[0]) if not os.path.basename(p).startswith(("_", "."))]
    if is_local(path):
        _regular_files(path, inside if inside is not None else paths)
    if inside is not None:
        if not inside:
            raise InputError(f"input directory {path!r} holds no data files")
        if all(p.lower().endswith(_CSV_SUFFIXES) for p in inside):
            return "csv", glob.escape(path.rstrip("/")) + "/*"  # the directory's name is no pattern
        return "parquet", path
    names = [p.lower() for p in paths]
    if all(n.endswith(_CSV_SUFFIXES) for n in names):
        return "csv", path
    if all(n.endswith(_PARQUET_SUFFIXES) for n in names):
        return "parquet", path
    raise InputError(
        f"cannot tell the format of {path!r}: name CSV files *.csv (tab-separated: *.tsv) and Parquet files "
        f"*.parquet (or give a Parquet dataset directory)"
    )


def _regular_files(path, files):
    """Refuses a local input of which a file is a named pipe, a socket or a device: a job reads its input
    more than once (the columns' types, the statistics, the blocks), which such a file cannot give, and
    it waited for ever on a pipe no one wrote to, even past a SIGTERM."""
    odd = {}
    for name in files:
        try:
            mode = os.stat(name).st_mode
        except OSError:  # a link to nothing: the read names it
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            kind = ("a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
            odd.setdefault(name, kind)
    if odd:
        name, kind = next(iter(odd.items()))
        which = f"{name!r} is {kind}" if len(odd) == 1 else f"{len(odd)} of its files are not regular files " \
                                                            f"({name!r} is {kind})"
        raise InputError(f"input path {str(path)!r}: {which}: microagg reads its input more than once (its "
                         f"types, its statistics, its blocks), which a pipe or a device cannot give; write it "
                         f"to a file first")


def is_local(input_path):
    """Whether the input is on this machine's filesystem (not an ``example:`` or an object store URL)."""
    path = str(input_path)
    return not path.startswith("example:") and ("://" not in path or path.startswith("file://"))


def local_paths(input_path):
    """The local paths a local input names (a glob expanded; the path itself if it matches nothing)."""
    _, _, paths = fsspec.get_fs_token_paths(str(input_path))
    return paths or [str(input_path)]


def overlap(input_path, output):
    """Why ``output`` cannot be written for the local input ``input_path`` (a message), or None: it is
    the input, lies inside it (the next run would read the release as input) or holds it (the release
    would replace its own input). Symbolic links are followed; a glob is checked against what it matches."""
    path = str(input_path)
    if not is_local(path):
        return None
    out = os.path.realpath(output)
    for source in local_paths(path):
        source = os.path.realpath(source)
        if out == source or out.startswith(source.rstrip(os.sep) + os.sep):
            return (f"the output {str(output)!r} lies inside the input {path!r}; the next run would read the "
                    "release as input")
        if source.startswith(out.rstrip(os.sep) + os.sep):
            return f"the input {path!r} lies inside the output {str(output)!r}; the release would replace its own input"
    return None


def _data_files(urlpath):
    """``(filesystem, data files)`` of an input: the files of its paths and directories, in name order,
    without hidden and ``_``-prefixed ones (``_SUCCESS``, ``_metadata``, Spark's ``.crc``). Of a
    directory holding Parquet files, those named ``*.parquet`` (a README beside them is not data), or
    every file if none is (Hive names its files ``000000_0``): the files Dask reads."""
    fs, _, paths = fsspec.get_fs_token_paths(urlpath)
    found = [f for p in paths for f in (fs.find(p) if fs.isdir(p) else [p])]
    found = sorted(f for f in found if not os.path.basename(f).startswith(("_", ".")))
    named = [f for f in found if f.lower().endswith(_PARQUET_SUFFIXES)]
    return fs, named or found


HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
"""The directory value Hive and Spark give a partition of null keys."""


def partition_keys(urlpath, fs, names):
    """The Hive partition keys (``key=value`` directories) above the data files ``names`` of a
    directory input ``urlpath``, in order (none for another input). Refuses, naming a file of each kind,
    files under different keys (``x=1/a.parquet`` beside ``x=1/y=2/b.parquet``: Dask failed on
    them)."""
    root = fs._strip_protocol(urlpath).rstrip("/")
    if not names or any(not n.startswith(root + "/") for n in names):
        return ()
    layouts = {}
    for name in names:
        keys = tuple(p.split("=", 1)[0] for p in _directories(root, name) if "=" in p)
        layouts.setdefault(keys, []).append(name)
    if len(layouts) > 1:
        found = "; ".join(f"{len(v)} file(s) under {', '.join(k) if k else 'no key'} (e.g. {v[0]})"
                          for k, v in layouts.items())
        raise InputError(f"the input's files lie under different Hive partition keys: {found}; every file of an "
                         f"input must lie under the same key=value directories")
    return next(iter(layouts))


def _directories(root, name):
    """The directories between ``root`` and the file ``name`` below it."""
    return name[len(root) + 1:].split("/")[:-1]


def _integer_width(values):
    """32 or 64 if every one of ``values`` (directory names) is an integer of that many bits at most, as
    pyarrow infers a partition key's type; else None (also for no values)."""
    if not values or not all(re.fullmatch(r"[-+]?\d+", v) for v in values):
        return None
    low, high = min(int(v) for v in values), max(int(v) for v in values)
    return 32 if -2**31 <= low and high < 2**31 else 64 if -2**63 <= low and high < 2**63 else None


def null_partitioning(urlpath, fs, names, keys):
    """``(partitioning, integers, categories)`` for an input with a Hive partition of null keys
    (``x=__HIVE_DEFAULT_PARTITION__/``, as Hive and Spark write a null key), else None.

    Dask infers each key's type from one file's directories at a time and failed on such a partition
    (pyarrow: "No non-null segments were available"). Given the keys' types up front it reads the null
    directories as nulls. The types are those Dask gives the same directories without the null one,
    so a nightly export's columns keep their types on the day a null key appears: a key whose values
    are all integers is an ``int32`` (``int64`` if one needs it; read as pandas' nullable integer:
    ``integers``), any other a string, made pandas' categorical of its values as Dask reads it
    (``categories``: key -> sorted values; written as a dictionary of strings)."""
    import pyarrow as pa
    import pyarrow.dataset as pa_ds

    root = fs._strip_protocol(urlpath).rstrip("/")
    values = {key: set() for key in keys}
    for name in names:
        for part in _directories(root, name):
            key, _, value = part.partition("=")
            if key in values:
                values[key].add(value)
    if not any(HIVE_NULL in v for v in values.values()):
        return None
    fields, integers, categories = [], [], {}
    for key in keys:
        seen = sorted(values[key] - {HIVE_NULL})
        width = _integer_width(seen)
        if width:
            fields.append(pa.field(key, pa.int32() if width == 32 else pa.int64()))
            integers.append(key)
        else:
            fields.append(pa.field(key, pa.string()))
            categories[key] = seen
    return pa_ds.partitioning(pa.schema(fields), flavor="hive"), tuple(integers), categories


def hive_columns(keys, names, schemas):
    """Refuse a Hive partition key (``keys``: :func:`partition_keys`) that is also a column of the
    input's files (``names``, their Arrow ``schemas``): Dask could not tell the two apart (the read
    failed, an internal error)."""
    for key in keys:
        holding = [n for n, s in zip(names, schemas) if key in s.names]
        if holding:
            raise InputError(f"column {key!r} is both a Hive partition directory ({key}=...) and a column of "
                             f"{len(holding)} of the input's {len(names)} files (e.g. {holding[0]}); drop the "
                             f"column from the files, or rename it")


def input_bytes(path):
    """Bytes the input takes where it is stored (files or objects), without reading it."""
    fmt, urlpath = resolve_input(path)
    fs, names = _data_files(urlpath)
    return sum(fs.size(f) or 0 for f in names)


def parquet_rows(path):
    """A Parquet input's row count, from its files' footers (``len`` of a frame read from many small files
    reads their data: 4.3 s for a 10M-row release of 40 files)."""
    fs, names = _data_files(resolve_input(path)[1])
    return sum(footer.num_rows for footer in _footers(fs, names)[1])


def _footers(fs, names):
    """``(names, Parquet metadata: schema, row groups)`` of the data files ``names`` (of
    :func:`_data_files`), the footers read in parallel (a remote store answers each in tens of
    milliseconds)."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa
    import pyarrow.parquet as pq

    def footer(name):
        try:
            with fs.open(name, "rb") as fh:
                return pq.ParquetFile(fh).metadata
        except pa.ArrowInvalid as exc:  # not a Parquet file: no bytes, no footer (a writer that died)
            return exc

    with ThreadPoolExecutor(min(16, len(names))) as pool:
        found = list(pool.map(footer, names))
    bad = [(name, exc) for name, exc in zip(names, found) if isinstance(exc, Exception)]
    if bad and len(names) > 1:
        name, exc = bad[0]
        raise InputError(f"{len(bad)} of the input's {len(names)} files cannot be read as Parquet (e.g. {name}: "
                         f"{exc}); remove them, or write them again")
    if bad:
        raise bad[0][1]
    return names, found


def same_columns(names, columns):
    """Refuse input files (``names``) whose column names (``columns``, one list per file) are not the
    first file's, in any order, or name a column twice: an :class:`InputError` naming the column and
    the files."""
    for name, header in zip(names, columns):
        twice = [c for c, count in Counter(header).items() if count > 1]
        if twice:
            raise InputError(f"column {twice[0]!r} is named {Counter(header)[twice[0]]} times in {name}; "
                             "every column needs a name of its own")
    first = set(columns[0])
    for column in columns[0]:
        lacking = [n for n, c in zip(names, columns) if column not in c]
        if lacking:
            raise InputError(f"column {column!r} is missing from {len(lacking)} of {len(names)} input files "
                             f"(e.g. {lacking[0]}); every file of an input must have the same columns")
    for column in dict.fromkeys(c for header in columns[1:] for c in header if c not in first):
        having = [n for n, c in zip(names, columns) if column in c]
        raise InputError(f"column {column!r} is in {len(having)} of {len(names)} input files (e.g. {having[0]}) "
                         f"but not in the first, {names[0]}; every file of an input must have the same columns")


def csv_dialect(separator=None, decimal=None, encoding=None, thousands=None):
    """The ``pandas.read_csv`` options of a CSV dialect (``{}`` for the default: comma-separated,
    decimal point, UTF-8, no thousands separator). ``separator`` one character (``\\t`` or ``tab`` for
    a tab), ``decimal`` one character (the separator too: ``"1,5"`` quoted in a comma-separated file, as
    spreadsheets export decimal commas), ``encoding`` a name Python knows (``latin-1``,
    ``cp1252``...), ``thousands`` one character other than the decimal mark (``.`` in ``1.234,5``;
    ``,`` in ``"1,234"`` quoted in a comma-separated file). Raises :class:`InputError` naming the
    option."""
    dialect = {}
    if separator is not None:
        separator = {"\\t": "\t", "tab": "\t"}.get(separator, separator)
        if len(separator) != 1 or separator in "\"\r\n":
            raise InputError(f"the CSV separator must be one character (or \\t for a tab), got {separator!r}")
        dialect["sep"] = separator
    if decimal is not None:
        if len(decimal) != 1 or decimal.isdigit() or decimal in "\"\r\n":
            raise InputError(f"the CSV decimal mark must be one character other than the digits, a quote and a line "
                             f"break, got {decimal!r}")
        dialect["decimal"] = decimal
    if thousands is not None:  # it may be the field separator: "1,234" quoted in a comma-separated file
        if len(thousands) != 1 or thousands == dialect.get("decimal", ".") or thousands.isdigit() \
                or thousands in "\"\r\n":
            raise InputError(f"the CSV thousands separator must be one character other than the decimal mark and "
                             f"the digits, got {thousands!r}")
        dialect["thousands"] = thousands
    if encoding is not None:
        try:
            codecs.lookup(encoding)
        except LookupError:
            raise InputError(f"unknown CSV encoding {encoding!r} (e.g. utf-8, latin-1, cp1252)") from None
        dialect["encoding"] = encoding
    return dialect


_OTHER_SEPARATORS = (";", "\t", "|")


class _CSVFiles(NamedTuple):
    """The files of a CSV input (:func:`_csv_files`), in name order, each with its header, its size in
    bytes, whether it holds a row and whether its first row has a field before its header's columns
    (rows' names: :func:`_ends_in_a_separator`)."""

    names: list
    headers: list
    sizes: list
    rows: list
    named_rows: list

    def data(self):
        """The files that hold rows, as a :class:`_CSVFiles`: what Dask reads. A file with a header
        and no row (a warehouse's empty partition) adds nothing, and Dask would guess every column's
        type from it as text; a file of no bytes has not even a header."""
        kept = [i for i, rows in enumerate(self.rows) if rows]
        return _CSVFiles(*([column[i] for i in kept] for column in self))

    def patterns(self):
        """The files' names for Dask, which reads each as a glob: ``[``, ``*`` and ``?`` escaped."""
        return [glob.escape(name) for name in self.names]

    def compression(self, path):
        """The files' compression (``gzip``, ``bz2``... from their names; None for plain text): Dask
        reads every file with the first's. Files compressed otherwise (today's plain file beside
        yesterday's gzipped one) are refused (:class:`InputError`): they were an internal error, "Not a
        gzipped file"."""
        from fsspec.utils import infer_compression

        found = {}
        for name in self.names:
            found.setdefault(infer_compression(name) or "none", []).append(name)
        if len(found) > 1:
            shown = ", ".join(f"{kind}: {len(names)} (e.g. {names[0]})" for kind, names in found.items())
            raise InputError(f"the CSV files of {str(path)!r} are compressed in different ways ({shown}); "
                             f"compress them alike, or not at all")
        return None if "none" in found else next(iter(found))

    def whole(self, path, blocksize, warn=False):
        """Whether each file is read whole, as one block: if the files are compressed (they cannot be
        cut), or if a file large enough to be cut into blocks of ``blocksize`` ends its lines in a bare
        ``\r`` (:func:`_bare_cr`), a break no block's cut finds: Dask then read such a file once per
        block, every row as many times (300 rows released from a file of 100). ``warn``: log it."""
        from concurrent.futures import ThreadPoolExecutor

        from dask.utils import parse_bytes

        if self.compression(path) is not None:
            return True
        large = [name for name, size in zip(self.names, self.sizes) if size > parse_bytes(blocksize)]
        if not large:
            return False

        def scan():
            with ThreadPoolExecutor(min(16, len(large))) as pool:
                return [name for name, found in zip(large, pool.map(_bare_cr, large)) if found]

        fs = fsspec.core.url_to_fs(large[0])[0]
        bare = _BARE_CR.get(fs, [fs._strip_protocol(n) for n in large], (), scan)  # a job reads its input often
        if bare and warn:
            log.warning("input %s: the lines of %d file(s) end in a bare carriage return (\\r, as old Mac files), "
                        "for example %s: each file is read whole, in one block (convert their line ends to \\n "
                        "to read them in parallel blocks)", path, len(bare), bare[0])
        return bool(bare)


def _bare_cr(name):
    """Whether the lines of the (uncompressed) CSV file ``name`` end in a bare ``\r``: its first 64 KiB
    hold a ``\r`` and no ``\n``."""
    with fsspec.open(name, "rb") as fh:
        head = fh.read(1 << 16)
    return b"\r" in head and b"\n" not in head


def _with_tabs(dialect, paths):
    """``dialect`` with a tab for the separator if it names none and every file of ``paths`` is named
    ``*.tsv`` (or ``*.tab``, compressed or not)."""
    if "sep" not in dialect and paths and all(p.lower().endswith(_TSV_SUFFIXES) for p in paths):
        return {**dialect, "sep": "\t"}
    return dialect


def _csv_files(urlpath, dialect):
    """``(files, dialect)``: the files of a CSV input (:class:`_CSVFiles`; their headers and first rows
    read in parallel) in ``dialect`` (:func:`csv_dialect`), which takes a tab for the separator if it
    names none and every file is named ``*.tsv`` (or ``*.tab``, compressed or not): tab-separated
    exports (a database's ``COPY``, a spreadsheet's "text (tab delimited)") read without a flag."""
    import csv
    from concurrent.futures import ThreadPoolExecutor

    # the first row may hold a field beyond the csv module's default limit of 128 KiB (a JSON payload,
    # a long text), which pandas reads: the limit is raised for the whole process (it only guards memory)
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    fs, _, paths = fsspec.get_fs_token_paths(urlpath)
    dialect = _with_tabs(dialect, paths)
    if len(dialect.get("sep", ",").encode()) > 1:  # pandas' C reader takes one byte (it warned, then took this)
        dialect = {**dialect, "engine": "python"}
    encoding = dialect.get("encoding", "utf-8")
    # utf-8-sig: a spreadsheet's byte-order mark is not part of the first column's name (pandas drops it)
    encoding = "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding

    def header(name):
        with fsspec.open(name, "rt", encoding=encoding, compression="infer", newline="",
                         **fs.storage_options) as fh:
            reader = csv.reader(fh, delimiter=dialect.get("sep", ","))
            first = next(reader, [])
            return first, next((row for row in reader if row), None)  # the first row that is not blank

    paths = sorted(paths)
    names = [fs.unstrip_protocol(p) if "://" in urlpath else p for p in paths]
    with ThreadPoolExecutor(min(16, len(names))) as pool:
        found = list(pool.map(header, names))
    files = _CSVFiles(names, [h for h, _ in found], [fs.size(p) or 0 for p in paths],
                      [row is not None for _, row in found],
                      [row is not None and len(row) == len(h) + 1 and not _ends_in_a_separator(h, row)
                       for h, row in found])
    if any(_ends_in_a_separator(h, row) for h, row in found):
        dialect = {**dialect, "index_col": False}
    return files, dialect


def _ends_in_a_separator(header, row):
    """Whether a CSV file's first row (``row``, None: none) ends in a separator its header does not:
    one field more than the header, the last empty (an export that ends every row with a separator).
    pandas takes the first column of such rows for an index and shifts every other column's values
    one column to the left, silently: ``id`` held ``a``'s values, released unprotected, and the QIs
    ``a`` and ``b`` held ``b``'s and ``c``'s. Read with ``index_col=False``, such files' columns are
    their header's. (Rows of one field more whose last is not empty are left to pandas, which reads
    the first field as the rows' names, as R's ``write.table`` writes them: not released, said in
    the log.)"""
    return row is not None and len(row) == len(header) + 1 and not row[-1].strip()


def _csv_data_files(path, urlpath, dialect):
    """``(files, dialect)``: the files of a CSV input that hold rows (:meth:`_CSVFiles.data`), once
    every file with a header has been checked (its separator, the same columns as the others), and
    the dialect they are read in (:func:`_csv_files`). Raises :class:`InputError` if no file holds a
    row, or if a file cannot be read as text."""
    try:
        files, dialect = _csv_files(urlpath, dialect)
    except (OSError, ValueError) as exc:
        raise _unreadable(path, "csv", exc) from exc
    headed = [i for i, header in enumerate(files.headers) if header]  # a file of no bytes has none
    if headed:
        first = headed[0]
        _check_separator(files.names[first], files.headers[first], dialect.get("sep", ","))
        same_columns([files.names[i] for i in headed], [files.headers[i] for i in headed])
    data = files.data()
    if not data.names:
        n = len(files.names)
        what = ("a header and no row" if len(headed) == n else "nothing, not even a header" if not headed
                else "a header and no row, or nothing")
        held = "its CSV file holds" if n == 1 else f"its {n} CSV files hold"
        raise InputError(f"the input {str(path)!r} has no rows: {held} {what}; there is nothing to release")
    return data, dialect


def _unreadable(path, fmt, exc):
    """The :class:`InputError` of an input Dask or fsspec could not read."""
    hint = (" (give its encoding: --csv-encoding, [input] encoding in a job file)"
            if isinstance(exc, UnicodeDecodeError) else "")
    return InputError(f"cannot read {str(path)!r} as {fmt.upper()}: {exc}{hint}")


def common_schema(names, schemas):
    """The Arrow schema a Parquet input's files share: the first file's, with each column's type
    widened to hold every file's (int32 and int64 -> int64, int64 and double -> double, a
    dictionary-encoded and a plain string column -> string). Raises :class:`InputError` naming the
    column and the files if they differ in columns or hold types no one type holds (string and int64)."""
    import pyarrow as pa

    first = schemas[0]
    if all(s.equals(first) for s in schemas[1:]):
        return first
    same_columns(names, [s.names for s in schemas])
    fields = []
    for field in first:
        types = [s.field(field.name).type for s in schemas]
        if any(t != field.type for t in types):
            plain = [t.value_type if pa.types.is_dictionary(t) else t for t in types]
            try:
                widest = pa.unify_schemas([pa.schema([(field.name, t)]) for t in plain],
                                          promote_options="permissive").field(0).type
            except (pa.ArrowTypeError, pa.ArrowInvalid) as exc:
                seen = {}
                for name, t in zip(names, types):
                    seen.setdefault(str(t), []).append(name)
                found = ", ".join(f"{t} in {len(where)} file(s) (e.g. {where[0]})" for t, where in seen.items())
                raise InputError(f"column {field.name!r} has types no one type holds across the input files: "
                                 f"{found}; rewrite the files with one type for it") from exc
            field = field.with_type(widest)
        fields.append(field)
    return pa.schema(fields, metadata=first.metadata)


def unsigned_beyond(schema, names, footers, schemas):
    """Refuse a column of a Parquet input that some files store as uint64 and its common ``schema``
    (:func:`common_schema`) as a signed integer (Arrow widens uint64 and int64 to int64) if a value
    of it may not fit: a row group's maximum beyond 2**63 - 1, or none recorded. Such values failed
    the write, after the whole job (an internal error). ``names``, ``footers``, ``schemas``: the
    files', their footers and their Arrow schemas."""
    import pyarrow as pa

    signed = {f.name for f in schema if pa.types.is_signed_integer(f.type)}
    beyond = {}
    for name, footer, arrow in zip(names, footers, schemas):
        kinds = {}
        for field in arrow:  # (a name given twice is refused later, by the read)
            kinds.setdefault(field.name, field.type)
        for i in range(footer.num_row_groups):
            group = footer.row_group(i)
            for j in range(group.num_columns):
                chunk = group.column(j)
                column = chunk.path_in_schema
                if column not in signed or kinds.get(column) != pa.uint64() or not group.num_rows:
                    continue
                stats = chunk.statistics
                top = stats.max if stats is not None and stats.has_min_max else None
                if top is None or top > 2**63 - 1:
                    found = beyond.setdefault(column, [name, top])
                    if top is None or (found[1] is not None and top > found[1]):
                        found[1] = top
    for column, (name, top) in beyond.items():
        value = "values it holds no statistics for" if top is None else f"values up to {top:,}"
        raise InputError(f"column {column!r} is uint64 in some input files, with {value} (e.g. {name}), and a "
                         f"signed integer in others: no one type holds both (int64 stops at 2**63 - 1); rewrite "
                         f"the files with one type for it")


def output_schema(input_schema, meta, qi, text=()):
    """The Arrow schema a release is written with, for Dask's ``to_parquet(schema=...)``: every column
    of the input file's type (a dictionary-encoded, nullable-integer, date, narrow or nested column
    comes out as it went in, whatever pandas made of it between), the quasi-identifiers float64
    (their released values), the ``text`` columns (pseudonymised identifiers) string, and a column the
    files do not hold (a hive partition's, named by directories) of the type Arrow gives the released
    frame's (``meta``, Dask's ``_meta_nonempty``). Every column is nullable (``input_schema`` is one
    file's: another file may hold nulls where it has none). The whole schema is given, not Dask's
    ``{column: type}``: Dask infers the rest of such a dict from sample values, which fails for
    lists and structs. None without an input schema (CSV)."""
    import pyarrow as pa

    if input_schema is None:
        return None
    qi, text = set(qi), set(text)
    fields = []
    for name in meta.columns:
        if name in qi:
            kind = pa.float64()
        elif name in text:
            kind = pa.string()
        elif name in input_schema.names:
            kind = input_schema.field(name).type
        else:
            kind = pa.Schema.from_pandas(meta[[name]], preserve_index=False).field(0).type
        fields.append(pa.field(name, kind))
    return pa.schema(fields)


def exact_integers(kind):
    """The pandas type of an Arrow integer type ``kind`` (``to_pandas``' types_mapper): pandas' nullable
    integer of its width (None for any other type)."""
    import pandas as pd
    import pyarrow as pa

    if pa.types.is_integer(kind):
        return pd.api.types.pandas_dtype(f"{'U' if pa.types.is_unsigned_integer(kind) else ''}Int{kind.bit_width}")
    return None


EXACT_INTEGERS = "microagg_exact_integers"
"""The key, in the ``arrow_to_pandas`` options of a Parquet read, of the columns
:class:`ExactIntegersEngine` reads as pandas' nullable integers."""


EXACT_FLOATS = "microagg_exact_floats"
"""The key, in the ``arrow_to_pandas`` options of a Parquet read, of the floating-point columns
:class:`ExactIntegersEngine` reads as Arrow-backed pandas columns: columns released as they are,
whose NaNs pandas' float64 would not tell from their nulls (both NaN, written back as nulls)."""


PLAIN = "microagg_plain"
"""The key, in the ``arrow_to_pandas`` options of a Parquet read, of the columns that some files store
dictionary-encoded and others plain (:func:`plain_columns`): :class:`ExactIntegersEngine` decodes them,
so every partition holds them in the plain files' type (pandas' categorical in some partitions and
strings in others made the concatenation of adjacent small files fail, an internal error)."""


def plain_columns(schema, schemas):
    """The columns of a Parquet input's common ``schema`` (:func:`common_schema`) of a plain type that
    are dictionary-encoded in some of its files (``schemas``)."""
    import pyarrow as pa

    coded = {f.name for s in schemas for f in s if pa.types.is_dictionary(f.type)}
    return tuple(f.name for f in schema if f.name in coded and not pa.types.is_dictionary(f.type))


def _decoded(table, names):
    """``table`` with its dictionary-encoded columns among ``names`` decoded to their value type."""
    import pyarrow as pa

    for name in names:
        i = table.schema.get_field_index(name)
        field = table.schema.field(i)
        if pa.types.is_dictionary(field.type):
            table = table.set_column(i, field.with_type(field.type.value_type),
                                     table.column(i).cast(field.type.value_type))
    return table


def _is_local(fs):
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fs, LocalFileSystem)


class _NativeLocalFiles:
    """A local fsspec filesystem whose files open for writing as Arrow's own files (``pyarrow.OSFile``),
    which Parquet writes into without the interpreter lock; everything else is the filesystem's."""

    def __init__(self, fs):
        self._fs = fs

    def open(self, path, mode="rb", **kwargs):
        import pyarrow as pa

        return pa.OSFile(path, mode) if mode == "wb" and not kwargs else self._fs.open(path, mode, **kwargs)

    def __getattr__(self, name):
        return getattr(self._fs, name)


class ExactIntegersEngine(ArrowDatasetEngine):
    """Dask's pyarrow Parquet engine, reading the integer columns named in the ``arrow_to_pandas``
    options under :data:`EXACT_INTEGERS` (those that may hold a null: :func:`integers_with_nulls`) as
    pandas' nullable integers. Pandas reads integers with a null as float64, which holds them exactly
    only up to 2**53: a bigint key with a null (a warehouse's surrogate key, 2**62 + 1) was released
    rounded (2**62), one beyond 2**63 failed the write, and a hashed identifier's pseudonyms were those
    of 1.0, not 1, whenever its column held a null. Every other column is read as before: integers
    without a null stay NumPy integers. (A types mapper given to ``read_parquet`` instead maps every
    column of a type; and Dask 2026.8 writes its own into those options at each conversion, which could
    then no longer be tokenized. The options handed to Dask here are a fresh copy.) It also reads an
    input's INT96 timestamps in the unit of the dataset format given to ``read_parquet``
    (:func:`int96_unit`), and the floating-point columns named under :data:`EXACT_FLOATS` Arrow-backed,
    which it writes with the pandas metadata of NumPy floats."""

    @classmethod
    def _arrow_table_to_pandas(cls, arrow_table, categories, dtype_backend=None, convert_string=False, **kwargs):
        import pandas as pd

        options = dict(kwargs.get("arrow_to_pandas") or {})
        exact = [c for c in options.pop(EXACT_INTEGERS, ()) if c in arrow_table.column_names]
        floats = [c for c in options.pop(EXACT_FLOATS, ()) if c in arrow_table.column_names]
        plain = [c for c in options.pop(PLAIN, ()) if c in arrow_table.column_names]
        kwargs["arrow_to_pandas"] = options
        if plain:  # dictionary-encoded in this file, plain in another: read as the plain files are
            arrow_table = _decoded(arrow_table, plain)
            if isinstance(categories, dict):
                categories = {c: v for c, v in categories.items() if c not in plain} or None
            elif categories:
                categories = [c for c in categories if c not in plain] or None
        frame = super()._arrow_table_to_pandas(arrow_table, categories, dtype_backend=dtype_backend,
                                               convert_string=convert_string, **kwargs)
        for name in exact:
            if name in frame.columns:
                frame[name] = arrow_table.column(name).to_pandas(types_mapper=exact_integers).array
        for name in floats:
            if name in frame.columns:
                frame[name] = pd.arrays.ArrowExtensionArray(arrow_table.column(name))
        return frame

    @classmethod
    def write_partition(cls, df, path, fs, filename, partition_on, *args, **kwargs):
        # A local file is written through Arrow's own file, not fsspec's Python one: pyarrow takes the
        # interpreter lock for every page it hands to a Python file, and with the job's other threads
        # holding the lock half of the 10M release's encoding time went to waiting for it
        # (BENCHMARKS.md, forty-third session). The bytes are the same.
        if not partition_on and _is_local(fs):
            fs = _NativeLocalFiles(fs)
        return super().write_partition(df, path, fs, filename, partition_on, *args, **kwargs)

    @classmethod
    def _pandas_to_arrow_table(cls, df, preserve_index=False, schema=None):
        # a column read exactly (EXACT_FLOATS) is written with the pandas metadata of a float64 one (as
        # before: ``pandas.read_parquet`` of the release gives NumPy floats, not Arrow-backed ones)
        import json

        import pandas as pd
        import pyarrow as pa

        table = super()._pandas_to_arrow_table(df, preserve_index=preserve_index, schema=schema)
        exact = {str(c) for c, t in df.dtypes.items()
                 if isinstance(t, pd.ArrowDtype) and pa.types.is_floating(t.pyarrow_dtype)}
        metadata = table.schema.metadata or {}
        if not exact or b"pandas" not in metadata:
            return table
        pandas = json.loads(metadata[b"pandas"])
        for column in pandas["columns"]:
            if column["name"] in exact:
                column["numpy_type"] = column["pandas_type"]
        return table.replace_schema_metadata({**metadata, b"pandas": json.dumps(pandas).encode()})

    @classmethod
    def _read_table(cls, path_or_frag, fs, row_groups, columns, schema, filters, partitions, partition_keys,
                    **kwargs):
        # Dask reads a file by its path with pyarrow.parquet, which ignores the dataset's format and
        # its INT96 unit (:func:`int96_unit`): such a file is read as a fragment of that format, by
        # Dask if it is a hive partition's (as when it has yet to find the partition's keys), else here,
        # in the file's own types (as a read by path: Dask casts a fragment to the first file's)
        import pyarrow.dataset as pa_ds
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        form = kwargs.get("dataset", {}).get("format")
        unit = "ns" if form is None else form.read_options.coerce_int96_timestamp_unit
        if unit == "ns" or isinstance(path_or_frag, pa_ds.ParquetFileFragment) or columns is None:
            return super()._read_table(path_or_frag, fs, row_groups, columns, schema, filters, partitions,
                                       partition_keys, **kwargs)
        if partitions:
            return super()._read_table(path_or_frag, fs, row_groups, columns, schema, filters, partitions, None,
                                       **kwargs)
        fragment = form.make_fragment(path_or_frag, filesystem=PyFileSystem(FSSpecHandler(fs)))
        if row_groups != [None]:
            fragment = fragment.subset(row_group_ids=row_groups)
        return fragment.to_table(columns=[c for c in columns if c is not None], use_threads=False)


def int96_types(footers, unit="us"):
    """The columns that Parquet files (their ``footers``) store INT96 timestamps in, at the top level
    or nested in a struct, list or map, each with its Arrow type as read in ``unit`` (pyarrow reads an
    INT96 value as a timestamp without a time zone). In name order."""
    found = {}
    for footer in footers:
        flags = [footer.schema.column(i).physical_type == "INT96" for i in range(footer.num_columns)]
        if not any(flags):
            continue
        leaves = iter(flags)
        for field in footer.schema.to_arrow_schema():
            held = []
            kind = _leaves_typed(field.type, leaves, held, unit)
            if any(held):
                found.setdefault(field.name, kind)
    return dict(sorted(found.items()))


def _leaves_typed(kind, leaves, held, unit):
    """An Arrow type ``kind`` with each of its leaves (Parquet columns, depth first) that the next of
    ``leaves`` flags as INT96 typed as a timestamp in ``unit``; the flags it takes are added to ``held``."""
    import pyarrow as pa

    def typed(field):
        return field.with_type(_leaves_typed(field.type, leaves, held, unit))

    if pa.types.is_struct(kind):
        return pa.struct([typed(f) for f in kind])
    if pa.types.is_map(kind):
        return pa.map_(typed(kind.key_field), typed(kind.item_field), keys_sorted=kind.keys_sorted)
    if pa.types.is_fixed_size_list(kind):
        return pa.list_(typed(kind.value_field), kind.list_size)
    if pa.types.is_large_list(kind):
        return pa.large_list(typed(kind.value_field))
    if pa.types.is_list(kind):
        return pa.list_(typed(kind.value_field))
    held.append(next(leaves))
    return pa.timestamp(unit) if held[-1] else kind


def _int96_values(micros, nanos):
    """The INT96 timestamps of a column read twice, in microseconds and nanoseconds (two Arrow
    arrays): the pairs of leaf arrays whose types the two reads differ in."""
    import pyarrow as pa

    if micros.type == nanos.type:
        return []
    if pa.types.is_struct(micros.type):
        return [pair for a, b in zip(micros.flatten(), nanos.flatten()) for pair in _int96_values(a, b)]
    if pa.types.is_map(micros.type):
        return _int96_values(micros.keys, nanos.keys) + _int96_values(micros.items, nanos.items)
    if pa.types.is_list(micros.type) or pa.types.is_large_list(micros.type) or pa.types.is_fixed_size_list(
            micros.type):
        return _int96_values(micros.flatten(), nanos.flatten())
    return [(micros, nanos)]


class _PerVersion:
    """A few results of a scan of some files, each kept per version of the files (their fsspec
    ``ukey``: a time or size that changed scans again): a job reads its input two to five times."""

    def __init__(self, size=8):
        self.size, self.found = size, {}

    def get(self, fs, names, extra, scan):
        """``scan()``'s result for the files ``names`` of ``fs`` as they are now, and ``extra`` (what
        else the result depends on); an exception is not kept."""
        key = (tuple(names), tuple(fs.ukey(name) for name in names), extra)
        if key not in self.found:
            found = scan()
            if len(self.found) >= self.size:
                self.found.clear()
            self.found[key] = found
        return self.found[key]


_INT96_UNITS = _PerVersion()  # :func:`int96_unit`'s
_BARE_CR = _PerVersion()  # :meth:`_CSVFiles.whole`'s files whose lines end in a bare \r


def int96_unit(fs, names, footers):
    """The unit a Parquet input's INT96 timestamps are read in (Spark's default timestamp type, Hive's
    and Impala's): None, nanoseconds (pyarrow's default), if every value fits them; else "us". In
    nanoseconds pyarrow wraps a value beyond 1677-09-21..2262-04-11 silently: a warehouse's open-ended
    ``9999-12-31`` was released as ``1816-03-30``. The columns that hold INT96 values (nested in a
    struct, list or map too: :func:`int96_types`) are read in both units (one column pass over the
    input) to find out. Values that need microseconds and values with digits below the microsecond,
    in one column or two, have no unit that holds them all: :class:`InputError`. Scanned once per
    version of the files (:class:`_PerVersion`)."""
    columns = list(int96_types(footers))
    if not columns:
        return None
    return _INT96_UNITS.get(fs, names, (), lambda: _int96_scan(fs, names, columns))


def _int96_scan(fs, names, columns):
    """:func:`int96_unit` of the files ``names`` of ``fs``, whose ``columns`` hold INT96 values."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    low, high = np.iinfo(np.int64).min // 1000 + 1, np.iinfo(np.int64).max // 1000

    def scan(name):
        def read(unit):
            with fs.open(name, "rb") as fh:
                table = pq.ParquetFile(fh, coerce_int96_timestamp_unit=unit).read(columns=columns)
            return {c: table.column(c).combine_chunks() for c in columns}

        micros, nanos = read("us"), read("ns")
        found = {c: [0, 0] for c in columns}
        for c in columns:
            for us, ns in _int96_values(micros[c], nanos[c]):  # a nested column's INT96 leaves too
                us, ns = us.cast(pa.int64()), ns.cast(pa.int64())
                outside = pc.or_(pc.less(us, low), pc.greater(us, high))
                finer = pc.and_(pc.invert(outside), pc.not_equal(pc.multiply(us, 1000), ns))
                found[c][0] += pc.sum(outside).as_py() or 0
                found[c][1] += pc.sum(finer).as_py() or 0
        return found

    with ThreadPoolExecutor(min(16, len(names))) as pool:
        found = list(pool.map(scan, names))
    outside = {c: sum(f[c][0] for f in found) for c in columns}
    finer = {c: sum(f[c][1] for f in found) for c in columns}
    if not any(outside.values()):
        return None
    if any(finer.values()):
        wide = [f"{c!r} ({n} value(s))" for c, n in outside.items() if n]
        fine = [f"{c!r} ({n} value(s))" for c, n in finer.items() if n]
        raise InputError(f"the input's INT96 timestamps fit no one unit: column(s) {', '.join(wide)} hold dates "
                         f"outside 1677-09-21..2262-04-11, which need microseconds, and column(s) {', '.join(fine)} "
                         f"hold digits below the microsecond, which need nanoseconds; rewrite the files with "
                         f"INT64 timestamps (Spark: spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS)")
    return "us"


def integers_with_nulls(schema, footers):
    """The integer columns of a Parquet input (its common ``schema``, the files' ``footers``) that may
    hold a null: a null counted in a row group's statistics, or no count there (a row group without
    rows holds none: an empty file's)."""
    import pyarrow as pa

    candidates = {f.name for f in schema if pa.types.is_integer(f.type) and f.nullable}
    found = set()
    for footer in footers:
        for i in range(footer.num_row_groups):
            group = footer.row_group(i)
            if not group.num_rows:
                continue
            for j in range(group.num_columns):
                chunk = group.column(j)
                if chunk.path_in_schema in candidates and chunk.path_in_schema not in found:
                    stats = chunk.statistics
                    if stats is None or not stats.has_null_count or stats.null_count:
                        found.add(chunk.path_in_schema)
    return tuple(f.name for f in schema if f.name in found)


PARQUET_BLOCKSIZE = "128MiB"
"""Most uncompressed bytes of one partition of a Parquet input (Dask's ``blocksize`` with
``split_row_groups="infer"``): a large file is read as several partitions of whole row groups, about
a million rows of 16 numeric columns each. The largest tasks hold a whole input partition while they
route or write it (about 0.45 GiB per million rows: ``jobs.cluster.TASK_HEADROOM``). With Dask's
default, 256 MiB, a single 10M-row file of 1M-row row groups was read two row groups at a time, and
workers of 1.5 GiB were killed routing them (BENCHMARKS.md, twelfth session)."""

LARGE_ROW_GROUP = 2_000_000
"""Rows of a Parquet row group beyond which :func:`read_input` warns: a row group is never split, one
task reads it whole."""


CSV_BLOCKSIZE = "64MB"
"""Bytes of a CSV input per partition."""


SAMPLE_BYTES = 256_000
"""Bytes at the head of a CSV input's first file (then to the end of a line) in which
:func:`_sampled_integers` looks for whole numbers with empty cells: Dask's ``read_csv`` takes as many
and guesses the columns' types from their first ten rows."""


def whole_numbers(values):
    """A CSV column's values read as text (a pandas Series, an empty cell missing) as pandas' nullable
    Int64, exactly, if every value present is a whole number (``-12``, ``+7``, ``007``, spaces around)
    in int64's range; else None."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pc.utf8_trim_whitespace(pa.array(values.to_numpy(dtype=object, na_value=None), type=pa.string()))
    if pc.any(pc.invert(pc.match_substring_regex(text, r"^[+-]?[0-9]+$"))).as_py():
        return None
    try:
        numbers = pc.replace_substring_regex(text, r"^\+", "").cast(pa.int64())
    except pa.ArrowInvalid:  # beyond int64's range
        return None
    return pd.Series(numbers.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get), index=values.index,
                     name=values.name)


def _sampled_integers(files, dialect):
    """The columns of a CSV input (its data files, :class:`_CSVFiles`, in ``dialect``) that hold whole
    numbers and empty cells, or no value at all, in the first :data:`SAMPLE_BYTES` of its first file.
    Dask guesses such a column float64 if its first ten rows hold an empty cell, or if they hold no
    value at all (a sparse column), and float64 holds integers exactly only up to 2**53: a warehouse's
    nullable bigint key (2**62 + 1) was released rounded (2**62), and ``7`` as ``7.0``. They are read
    as pandas' nullable Int64 instead (:func:`_read_csv`); a column with no value in the sample whose
    later rows hold decimals, text or booleans is then read again with their type (at the cost of a
    type pass over the input, :func:`read_retyped`). A sample that pandas cannot parse (cut inside a
    quoted field) leaves Dask's guess."""
    from io import BytesIO

    import pandas as pd

    head = _head(files)
    try:
        frame, integers = _with_integers(lambda **options: _pandas_csv(BytesIO(head), **dialect, **options))
    except ValueError:
        return []
    return integers + [c for c in frame.columns if frame[c].dtype == np.float64 and frame[c].isna().all()]


def _head(files):
    """The first :data:`SAMPLE_BYTES` of a CSV input's first file (:class:`_CSVFiles`), to the end of
    the line they stop in."""
    with fsspec.open(files.names[0], "rb", compression="infer") as fh:
        head = fh.read(SAMPLE_BYTES)
        if len(head) == SAMPLE_BYTES:
            head += fh.readline()
    return head


def zero_padded(path, columns, csv=None):
    """The ``columns`` of a CSV input that hold a whole number written with leading zeros (``00123``, a
    postcode; ``0`` and ``0.5`` are not) in the first :data:`SAMPLE_BYTES` of its first file: numbers
    for pandas, which drops the zeros, text for the users who wrote them (:func:`read_input`'s
    ``text``). [] for a Parquet input, whose columns have their types."""
    from io import BytesIO

    fmt, urlpath = resolve_input(path)
    if fmt != "csv" or not columns:
        return []
    files, dialect = _csv_data_files(path, urlpath, csv or {})
    try:
        frame = _pandas_csv(BytesIO(_head(files)), **dialect, usecols=list(columns), dtype="string",
                            keep_default_na=False, na_values=[""])
    except ValueError:  # a sample pandas cannot parse (cut inside a quoted field): the whole read reports it
        return []
    return [c for c in columns if frame[c].str.fullmatch(PADDED).fillna(False).any()]


def _with_integers(read):
    """``(frame, columns)``: one piece of a CSV input as pandas reads it (``read(**options)``, its
    ``pandas.read_csv``), and its columns of whole numbers with empty cells, which pandas reads as
    float64 (read again as text, those :func:`whole_numbers` takes)."""
    frame = read()
    blanks = [c for c in frame.columns if frame[c].dtype == np.float64 and frame[c].isna().any()
              and frame[c].notna().any()]
    if not blanks:
        return frame, []
    written = read(usecols=blanks, dtype="string")
    return frame, [c for c in blanks if whole_numbers(written[c]) is not None]


_EXTRA = "\0 the field after the last column"
"""The name given, for a check, to the field after the header's last column of a CSV file whose rows
end in a separator (:func:`_ends_in_a_separator`; a name no header holds)."""


def _pandas_csv(source, **options):
    """``pandas.read_csv``; a CSV file whose rows end in a separator (``index_col=False``:
    :func:`_ends_in_a_separator`) is read with one more column for the last field, which must be empty:
    a row with a value there (pandas dropped it with a warning) raises a ``ParserError`` that gives
    its line as pandas gives those of rows with too many fields (a quoted field over several lines
    counting as one), for :func:`locate_parse_error`: it is a row of more fields than the header, as
    in any other file."""
    import pandas as pd

    if options.get("index_col") is not False:
        return pd.read_csv(source, **options)
    names = options.get("names")
    if names is None:  # the header's: read once
        position = source.tell()
        names = list(pd.read_csv(source, **{**options, "nrows": 0, "usecols": None}).columns)
        source.seek(position)
        header = 0
    else:
        header = options.get("header")
        header = None if header == "infer" else header
    dtype, nulls = options.get("dtype"), options.get("na_values")
    wider = {**options, "names": [*names, _EXTRA], "header": header,
             "dtype": {**dtype, _EXTRA: "string"} if isinstance(dtype, dict) else dtype,
             **({"na_values": {**nulls, _EXTRA: [""]}} if isinstance(nulls, dict) else {})}
    if options.get("usecols") is not None:
        wider["usecols"] = [*options["usecols"], _EXTRA]
    position = source.tell()
    frame = pd.read_csv(source, **wider)
    extra = frame.pop(_EXTRA)
    rows = np.flatnonzero(extra.notna().to_numpy())
    if not len(rows):
        return frame
    if options.get("skip_blank_lines", True):  # the line counts blank lines: read the last field again
        source.seek(position)
        extra = pd.read_csv(source, **{**wider, "usecols": [_EXTRA], "skip_blank_lines": False})[_EXTRA]
        rows = np.flatnonzero(extra.notna().to_numpy())
    line = int(rows[0]) + 1 + (header == 0)  # pandas counts a block's lines from 1, its header included
    raise _ValueAfterLastColumn(f"a value after the last column {names[-1]!r} in line {line}: the file's rows end "
                                f"in a separator the header does not have, so their last field must be empty",
                                len(rows))


class _ValueAfterLastColumn(ParserError):
    """:func:`_pandas_csv`'s error; ``rows``: how many rows of the part read hold such a value."""

    def __init__(self, message, rows):
        super().__init__(message)
        self.rows = rows


ZEROS = "microagg_zeros"
"""The option of :func:`_read_csv` (not pandas') that names the columns of whole numbers it checks for
numbers written with leading zeros (:func:`read_input`'s ``zeros``)."""

PADDED = r"\s*[+-]?0[0-9]+\s*"
"""A whole number written with leading zeros (``00123``, a postcode; ``0`` and ``0.5`` are not)."""


def _read_csv(source, **options):
    """``pandas.read_csv``, as Dask's reader of a CSV input's blocks. A column read as Int64 (whole
    numbers and empty cells in the first rows: :func:`_sampled_integers`) that holds another value in
    this block (a decimal, text, a number beyond int64) raises :class:`CSVTypeChange` naming it: the
    input is then read again with its columns' types from all their rows (:func:`read_retyped`); so
    does a column of :data:`ZEROS` that holds a whole number written with leading zeros in this block
    (:func:`_check_zeros`)."""
    zeros = options.pop(ZEROS, ())
    frame = _read_typed(source, **options)
    if zeros and "nrows" not in options:  # not Dask's read of the head for the types (zero_padded's)
        _check_zeros(frame, source, options, zeros)
    return frame


def _check_zeros(frame, source, options, zeros):
    """Raise :class:`CSVTypeChange` if a column of ``zeros`` that ``frame`` (pandas' read of the CSV
    bytes ``source``, a BytesIO, with ``options``) holds as numbers is written with leading zeros in a
    row (:func:`_padded_columns`): pandas dropped them (``01234`` read as 1234), the first rows had none."""
    padded = _padded_columns(frame, source, options, zeros)
    if padded:
        column, example = padded[0]
        raise CSVTypeChange(f"a CSV column changes type part-way through the input: column {column!r} holds whole "
                            f"numbers written with leading zeros, e.g. {example!r}, after its first rows")


def _padded_columns(frame, source, options, zeros):
    """``[(column, an example)]``: the columns of ``zeros`` that ``frame`` holds as whole numbers and
    that the CSV bytes ``source`` write with leading zeros in a row. A screen of the bytes
    (:func:`microagg.kernels.csvscan.padded_number`) finds most blocks clean; only a block it does not
    clear is read again, those columns as text."""
    import pandas as pd

    from ..kernels import csvscan

    zeros = [c for c in zeros if c in frame.columns and pd.api.types.is_integer_dtype(frame[c].dtype)]
    if not zeros or not hasattr(source, "getbuffer"):
        return []
    sep = options.get("sep", options.get("delimiter")) or ","
    view = source.getbuffer()
    try:
        hit = csvscan.padded_number(np.frombuffer(view, dtype=np.uint8), sep.encode()[-1])
    finally:
        view.release()
    if hit < 0:
        return []
    source.seek(0)
    dtypes = options.get("dtype") if isinstance(options.get("dtype"), dict) else {}
    written = _pandas_csv(source, **{**options, "usecols": zeros, "dtype": {**dtypes, **dict.fromkeys(zeros, object)}})
    found = []
    for column in zeros:
        padded = written[column].str.fullmatch(PADDED).fillna(False)
        if padded.any():
            found.append((column, written[column][padded].iloc[0]))
    return found


def _read_typed(source, **options):
    """:func:`_read_csv`'s read: its Int64 columns' check."""
    import pandas as pd

    try:
        return _pandas_csv(source, **options)
    except (TypeError, ValueError) as exc:
        dtypes = options.get("dtype") or {}
        integers = [c for c, t in dtypes.items() if t == "Int64"]
        if not integers or not hasattr(source, "seek"):
            raise
        source.seek(0)
        try:
            written = pd.read_csv(source, **{**options, "dtype": {**dtypes, **dict.fromkeys(integers, "string")}})
        except Exception:
            raise exc from None
        for column in integers:
            if whole_numbers(written[column]) is None:
                raise CSVTypeChange(f"a CSV column changes type part-way through the input: column {column!r} "
                                    f"holds whole numbers and empty cells in its first rows, other values "
                                    f"further on") from exc
        raise


_read_csv.__name__ = "read_csv"  # Dask names its reader in its messages


SCAN_BYTES = 8 << 20
"""Bytes of a CSV file read at a time by the scan for line breaks inside quoted fields
(:func:`_record_ends`)."""

_PIECES = _PerVersion()  # :func:`_csv_pieces`'


def _record_ends(name, start, end, sep):
    """Bytes ``start..end`` of a CSV file whose fields are separated by ``sep`` (bytes), read as
    pandas reads them from each state a reader may be in at ``start`` (:mod:`microagg.kernels.csvscan`:
    ``s`` in 0..3): ``(after, first, inner)``, for each ``s`` the state after them, the position of
    their first line break that ends a record and of their first one inside a quoted field (-1:
    none). A stretch without quotes is not followed byte by byte: its first line break ends a record
    unless the reader is inside a quoted field, where it stays."""
    from ..kernels import csvscan

    state, first, inner = list(range(csvscan.STATES)), [-1] * csvscan.STATES, [-1] * csvscan.STATES
    separator = np.frombuffer(sep, np.uint8)
    context = len(sep) - 1  # the bytes before a stretch that a separator can start in
    with fsspec.open(name, "rb") as fh:
        fh.seek(max(start - context, 0))
        before = fh.read(start - max(start - context, 0))
        at = start
        while at < end:
            chunk = fh.read(min(SCAN_BYTES, end - at))
            if not chunk:
                break
            if b'"' not in chunk:
                line_break = chunk.find(b"\n")
                after = csvscan.START if (before + chunk[-len(sep):]).endswith((b"\n", sep)) else csvscan.UNQUOTED
                for s in range(csvscan.STATES):
                    if state[s] == csvscan.QUOTED:
                        inner[s] = at + line_break if inner[s] < 0 <= line_break else inner[s]
                    else:
                        first[s] = at + line_break if first[s] < 0 <= line_break else first[s]
                        state[s] = after
            else:
                data = np.frombuffer(before + chunk, np.uint8)
                i, origin = len(before), at - len(before)
                while i < len(data):
                    followed = sorted(set(state))
                    states = np.array(followed, np.int64)
                    found, quoted = np.full(len(followed), -1, np.int64), np.full(len(followed), -1, np.int64)
                    i = csvscan.scan(data, i, separator, ord('"'), states, found, quoted)
                    for s in range(csvscan.STATES):
                        j = followed.index(state[s])
                        first[s] = origin + int(found[j]) if first[s] < 0 <= found[j] else first[s]
                        inner[s] = origin + int(quoted[j]) if inner[s] < 0 <= quoted[j] else inner[s]
                        state[s] = int(states[j])
            before = (before + chunk[-context:])[-context:] if context else b""
            at += len(chunk)
    return state, first, inner


def _csv_pieces(files, blocksize, dialect):
    """The pieces a CSV input (its data files, :class:`_CSVFiles`, uncompressed; ``dialect``: its
    :func:`csv_dialect`, for the separator and the encoding) is read in if a
    quoted field holds a line break (a comment, an address), or if a file read in blocks has its
    columns in another order than the first file; else None: Dask's blocks of ``blocksize`` bytes,
    cut at the first line break after each offset, each but a file's first read under the first
    file's header. Dask's cut could fall inside such a field: the job failed (an internal error,
    "EOF inside string"). And the first file's header put before a block of a file whose columns
    come in another order released one column's values under the other's name, silently. Each file
    of two blocks or more is scanned once (:func:`_record_ends`, in parallel; cached per file
    version), and cut at the first line break outside quotes after each offset: ``[(name, start,
    end, first)]``, in order (:class:`_CSVPieces` reads them). Quotes count as pandas counts them:
    around a field, doubled inside it; a quote inside an unquoted field (``12" pipe``) is a character
    like any other (counted as an opening quote, it put the later cuts inside quoted fields, and the
    job failed on a file pandas reads). In an encoding whose bytes the scan cannot read as ASCII
    (:func:`scans_as_ascii`: UTF-16, the "Unicode text" of spreadsheets, whose line breaks are not one
    byte; Shift-JIS separated by ``|``, whose ``ポ`` ends in the byte of ``|``) each file is one piece
    (Dask cut them at the bytes of a line break, also inside quoted fields, and the scan took ``ポ"``
    for a quoted field's start)."""
    from dask.utils import parse_bytes

    size = parse_bytes(blocksize)
    ranges = {}
    for name, total in zip(files.names, files.sizes):
        n = total // size
        if n >= 2:
            offsets = [total * i // n for i in range(n + 1)]
            ranges[name] = list(zip(offsets[:-1], offsets[1:]))
    if not ranges:  # every file read whole
        return None
    encoding = dialect.get("encoding", "utf-8")
    if not scans_as_ascii(encoding, dialect.get("sep", ",")):  # the scan reads bytes
        return [(name, 0, total, True) for name, total in zip(files.names, files.sizes)]  # each file whole
    fs = fsspec.core.url_to_fs(files.names[0])[0]
    sep = dialect.get("sep", ",").encode(encoding)
    return _PIECES.get(fs, [fs._strip_protocol(n) for n in ranges], (tuple(files.names), size, sep),
                       lambda: _cut(files, ranges, sep))


def scans_as_ascii(encoding, sep):
    """Whether a byte scan for the separator ``sep``, quotes and line breaks reads text in ``encoding``
    right: the ASCII characters are their own bytes, and no other character's bytes include one of
    those. True for UTF-8, Latin-1, the Windows code pages and EUC-JP, and for Shift-JIS, Big5 or GBK
    separated by commas, semicolons or tabs; False for UTF-16 and UTF-32 (a line break is two or four
    bytes), for Shift-JIS separated by ``|`` (``ポ`` is ``0x83 0x7C``), and for the ISO-2022 family and
    UTF-7 (characters written in ASCII bytes)."""
    watched = set((sep + '"\n\r').encode("latin-1", "replace"))
    return _ascii_as_itself(encoding) and not watched & _ascii_bytes_of_others(encoding)


@lru_cache(maxsize=None)
def _ascii_as_itself(encoding):
    ascii_chars = "".join(map(chr, range(128)))
    return codecs.encode(ascii_chars, encoding)[-128:] == ascii_chars.encode("ascii")


@lru_cache(maxsize=None)
def _ascii_bytes_of_others(encoding):
    """The bytes below 0x80 in the encoding of the characters of the Basic Multilingual Plane outside
    ASCII (all encoded in one call: a few milliseconds, once per encoding)."""
    others = "".join(chr(c) for c in range(128, 0x10000) if not 0xD800 <= c < 0xE000)
    return frozenset(b for b in codecs.encode(others, encoding, "ignore") if b < 0x80)


def _cut(files, ranges, sep):
    """:func:`_csv_pieces` of ``files``, whose files to cut are ``ranges``' (``{name: [(start, end)]}``,
    spans of one block each), scanned here; ``sep``: the separator's bytes."""
    from concurrent.futures import ThreadPoolExecutor

    from ..kernels.csvscan import START

    jobs = [(name, a, b) for name, spans in ranges.items() for a, b in spans]
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1, len(jobs) or 1)) as pool:
        found = dict(zip(jobs, pool.map(lambda job: _record_ends(*job, sep), jobs)))
    pieces, quoted = [], False
    for name, total in zip(files.names, files.sizes):
        if name not in ranges:
            pieces.append((name, 0, total, True))
            continue
        spans = ranges[name]
        starts, state = [], START
        for a, b in spans:  # the reader's state at each span's start, from the spans before it
            starts.append(state)
            state = found[name, a, b][0][state]
        quoted |= any(found[name, a, b][2][s] >= 0 for (a, b), s in zip(spans, starts))
        cuts = [0]
        for i in range(1, len(spans)):
            cut = next((found[name, a, b][1][s] + 1 for (a, b), s in zip(spans[i:], starts[i:])
                        if found[name, a, b][1][s] >= 0), total)
            cuts.append(max(cut, cuts[-1]))
        cuts.append(total)
        pieces += [(name, a, b, a == 0) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
    reordered = any(header != files.headers[0] for name, header in zip(files.names, files.headers) if name in ranges)
    return pieces if quoted or reordered else None


class _CSVPieces:
    """Reads one piece of a CSV input (:func:`_csv_pieces`: a file's bytes ``start..end``, cut at
    line breaks outside quotes) as Dask reads a block, but for the header put before a piece that
    does not start its file, its own file's (``headers``, ``{name: bytes}``): pandas' read
    (:func:`_read_csv`), the columns cast to the frame's types
    (:func:`dask.dataframe.io.csv.pandas_read_text`: its "Mismatched dtypes" too). A column
    projection of the frame reaches the reads (``columns``)."""

    def __init__(self, headers, options, dtypes, names):
        self.headers, self.options, self.dtypes, self.names = headers, options, dtypes, names

    def __dask_tokenize__(self):
        from dask.base import tokenize

        return "csv-pieces", tokenize(self.headers, self.options, self.dtypes), self.names

    def __call__(self, piece, columns=None):
        from dask.dataframe.io.csv import pandas_read_text

        name, start, end, first = piece
        data = _piece_bytes(name, start, end)
        options = dict(self.options)
        if not first:
            options.pop("header", None)
        frame = pandas_read_text(_read_csv, data, self.headers.get(name, b""), options, self.dtypes, self.names,
                                 not first)
        return frame if columns is None else frame[list(columns)]


def _piece_bytes(name, start, end):
    """Bytes ``start..end`` of a file."""
    with fsspec.open(name, "rb") as fh:
        fh.seek(start)
        return fh.read(end - start)


def _read_pieces(ddf, files, pieces, options):
    """A CSV input read in ``pieces`` (:func:`_csv_pieces`) in place of Dask's blocks (``ddf``, whose
    metadata it keeps), with the ``options`` Dask gives pandas."""
    from concurrent.futures import ThreadPoolExecutor

    def header(name):
        with fsspec.open(name, "rb") as fh:
            return fh.readline()

    names = sorted({name for name, _, _, first in pieces if not first})
    with ThreadPoolExecutor(min(16, len(names) or 1)) as pool:
        headers = dict(zip(names, pool.map(header, names)))
    read = _CSVPieces(headers, options, ddf._meta.dtypes.to_dict(), list(ddf._meta.columns))
    return dd.from_map(read, pieces, meta=ddf._meta, label="read-csv", enforce_metadata=False)


def text_nulls(meta, text=()):
    """The ``pandas.read_csv`` options that read a CSV input's text columns as written: the columns of
    ``meta`` (the input as Dask guessed it) that hold text, and those of ``text``, have only their empty
    cells missing, where pandas' defaults also read ``NA``, ``N/A``, ``NULL``, ``None``, ``nan``... as
    missing (Namibia's country code ``NA`` was released as a null). Other columns keep pandas' markers
    of missing numbers (``NA`` in a column of numbers, as R writes it). ``{}`` without text columns."""
    import pandas as pd
    from pandas._libs.parsers import STR_NA_VALUES

    columns = [str(c) for c in meta.columns]
    written = {c for c in columns if c in text or pd.api.types.is_object_dtype(meta[c].dtype)
               or pd.api.types.is_string_dtype(meta[c].dtype)}
    if not written:
        return {}
    markers = sorted(STR_NA_VALUES)
    return {"keep_default_na": False, "na_values": {c: [""] if c in written else markers for c in columns}}


def read_input(path, blocksize=None, dtypes=None, csv=None, text=(), floats=(), scan=True, warn=True, zeros=()):
    """A Dask DataFrame over the input; nothing is computed (schema only). CSV is read in blocks of
    ``blocksize`` bytes, Parquet in partitions of whole row groups up to :data:`PARQUET_BLOCKSIZE`.
    ``dtypes``: the types of a CSV input's columns (:func:`csv_types`), else guessed by Dask from
    the first rows; ``csv``: a CSV input's dialect (:func:`csv_dialect`; a Parquet input ignores it);
    ``text``: columns of a CSV input read as text, as written (identifiers: ``00123`` is not ``123``,
    and a column of whole numbers with an empty cell would be read as float64, ``123`` as ``123.0``);
    ``floats``: floating-point columns of a Parquet input read exactly, NaNs apart from nulls, as
    Arrow-backed pandas columns (:data:`EXACT_FLOATS`; columns released as they are, which no
    stage computes with); ``scan``: a large CSV input is scanned for line breaks inside quoted
    fields (:func:`_csv_pieces`; its bytes read once), False: its schema only, nothing read but its
    head; ``warn``: log what the read found in a CSV input's files (lines ended by a bare ``\r``, rows'
    names), False for a job's later reads of the same input; ``zeros``: columns of a CSV input read as
    whole numbers whose every block is checked for such numbers written with leading zeros, which the
    first rows did not have (a postcode ``01234`` further on; :func:`_check_zeros` raises
    :class:`CSVTypeChange`, and :func:`read_retyped` reads them as text)."""
    return read_input_and_schema(path, blocksize, dtypes, csv, text, floats, scan, warn, zeros)[0]


def read_input_and_schema(path, blocksize=None, dtypes=None, csv=None, text=(), floats=(), scan=True, warn=True,
                          zeros=()):
    """:func:`read_input`, and the Arrow schema of a Parquet input's files (:func:`common_schema`;
    None for CSV, or if a footer cannot be read): the types :func:`output_schema` keeps. Files that
    differ in columns, or in types no one type holds, are refused before anything is computed."""
    fmt, urlpath = resolve_input(path)
    blocksize = blocksize or CSV_BLOCKSIZE
    schema = problem = None
    exact = plain = ()
    read_options = {}
    if fmt == "csv":
        files, csv = _csv_data_files(path, urlpath, csv or {})
    else:
        files = _data_files(urlpath)
        keys = partition_keys(urlpath, *files)
        null_keys = null_partitioning(urlpath, *files, keys)
        try:
            names, footers = _footers(*files)
            schemas = [f.schema.to_arrow_schema() for f in footers]
            hive_columns(keys, names, schemas)
        except InputError:
            raise
        except Exception:  # unreadable footers fail the read itself, with its own message
            footers = None
        else:
            try:
                schema = common_schema(names, schemas)
            except Exception as exc:  # raised once the read itself has not failed first
                problem = exc
            else:
                exact = integers_with_nulls(schema, footers)
                plain = plain_columns(schema, schemas)
                try:
                    unsigned_beyond(schema, names, footers, schemas)
                except InputError as exc:
                    problem = exc
                unit = int96_unit(files[0], names, footers)
                if unit is not None:
                    import pyarrow as pa
                    import pyarrow.dataset as pa_ds

                    read_options = {"dataset": {"format": pa_ds.ParquetFileFormat(coerce_int96_timestamp_unit=unit)}}
                    fixed = int96_types(footers, unit)
                    schema = pa.schema([f.with_type(fixed[f.name]) if f.name in fixed else f for f in schema],
                                       metadata=schema.metadata)
    try:
        if fmt == "csv":
            whole = files.whole(path, blocksize, warn)  # a compressed file is not cut (nor one in \r)
            if warn and any(files.named_rows):
                log.warning("input %s: the first row of %d file(s) has one field more than the header (e.g. %s): "
                            "pandas reads each row's first field as the row's name, which is not a column and is "
                            "not released; name it in the header to keep it", path, sum(files.named_rows),
                            files.names[files.named_rows.index(True)])
            dtypes = {**(dtypes or {}), **dict.fromkeys(text, "string")}
            integers = [c for c, t in dtypes.items() if t == "Int64"]
            integers += [c for c in _sampled_integers(files, csv) if c not in dtypes]
            dtypes = {**dtypes, **dict.fromkeys(integers, "Int64")} or None
            watch = {ZEROS: tuple(c for c in zeros if c not in text)} if zeros else {}
            ddf = read_pandas(_read_csv, files.patterns(), blocksize=None if whole else blocksize, dtype=dtypes,
                              **csv, **watch)
            nulls = text_nulls(ddf._meta, text)
            if nulls:  # read again, with the text columns' cells as written
                ddf = read_pandas(_read_csv, files.patterns(), blocksize=None if whole else blocksize,
                                  dtype=dtypes, **csv, **nulls, **watch)
            pieces = None if whole or not scan else _csv_pieces(files, blocksize, csv)
            if pieces:  # a quoted field holds a line break, or a file read in blocks its columns in another order
                ddf = _read_pieces(ddf, files, pieces, {**csv, **nulls, **watch, "dtype": dtypes, "header": "infer"})
        else:
            # index=False: a column pandas stored as its index (``df.to_parquet`` of a named index) is a
            # column like any other, released unchanged, not an index the write would drop
            # files without a Parquet suffix (Hive's 000000_0): Dask, which filters by suffix, must read them all
            unnamed = not any(f.lower().endswith(_PARQUET_SUFFIXES) for f in files[1])
            if null_keys:  # a partition of null keys: the keys' types given (null_partitioning)
                read_options = {"dataset": {**read_options.get("dataset", {}), "partitioning": null_keys[0]}}
                exact = tuple(exact) + null_keys[1]
            ddf = dd.read_parquet(urlpath, split_row_groups="infer", blocksize=PARQUET_BLOCKSIZE, index=False,
                                  engine=ExactIntegersEngine, arrow_to_pandas={EXACT_INTEGERS: exact,
                                                                               EXACT_FLOATS: tuple(floats),
                                                                               PLAIN: plain},
                                  **read_options,
                                  **({"parquet_file_extension": None} if unnamed else {}))
            if null_keys and null_keys[2]:
                import pandas as pd

                ddf = ddf.astype({key: pd.CategoricalDtype(seen) for key, seen in null_keys[2].items()})
    except (OSError, ValueError) as exc:
        if fmt == "parquet" and "duplicate field" in str(exc):
            _refuse_duplicate_fields(*files)
        import pandas as pd

        if fmt == "csv" and isinstance(exc, pd.errors.ParserError):  # in the first file's head, read for the types
            raise _parse_error(files.names[0], _parser_message(exc)) from exc
        raise _unreadable(path, fmt, exc) from exc
    if fmt == "csv":
        if any(h != files.headers[0] for h in files.headers):  # the same columns in another order: each block
            ddf = ddf.map_partitions(_in_order, list(ddf.columns), meta=ddf._meta)  # in the first's
        return _coalesced(ddf, files.sizes, blocksize), None
    if footers is None:
        return ddf, None
    _warn_of_large_row_groups(names, footers)
    if problem is not None:
        raise problem
    unnamed = [c for c in schema.names if re.fullmatch(r"__index_level_\d+__", c)]
    if warn and unnamed:
        log.warning("input %s: its files store an unnamed pandas index (%s, as pandas' to_parquet writes an index "
                    "that is not a plain row number), which is not a column and is not released; name the index "
                    "(df.index.name = ...) or make it a column (df.reset_index()) before writing the input to "
                    "release it", path, ", ".join(unnamed))
    # the files' column order (Dask puts a stored index first), then any column Dask adds (a hive
    # partition's)
    names = [c for c in schema.names if c in ddf.columns]
    order = names + [c for c in ddf.columns if c not in schema.names]
    sizes = [sum(f.row_group(i).total_byte_size for i in range(f.num_row_groups)) for f in footers]
    ddf = ddf if order == list(ddf.columns) else ddf[order]
    numbers = _numeric_partitions(ddf._meta[order[len(names):]])
    return _coalesced(ddf.astype(numbers) if numbers else ddf, sizes, PARQUET_BLOCKSIZE), schema


def _numeric_partitions(meta):
    """``{column: type}`` of the Hive partition columns (``meta``: Dask's frame of them) whose
    directories name numbers (``year=2025``): read as those numbers, not as pandas' categorical of
    them, so that such a column can be a quasi-identifier (it is released in the same Arrow type)."""
    import pandas as pd

    return {c: t.categories.dtype for c, t in meta.dtypes.items()
            if isinstance(t, pd.CategoricalDtype) and pd.api.types.is_numeric_dtype(t.categories.dtype)
            and not pd.api.types.is_bool_dtype(t.categories.dtype)}


@contextlib.contextmanager
def first_pass():
    """Around the first pass over an input: a CSV column whose values change type part-way through
    raises :class:`CSVTypeChange` (the caller reads the input again with :func:`read_retyped`)."""
    try:
        yield
    except UnicodeDecodeError as exc:  # past the first block, which the read itself decoded
        found = f" ({exc})" if str(exc) else ""  # (the message is lost on its way back from a worker)
        raise InputError(f"the CSV input holds bytes that are not text in its encoding{found}; give its "
                         f"encoding: --csv-encoding (latin-1, cp1252...), [input] encoding in a job file") from exc
    except ValueError as exc:
        if "Mismatched dtypes" in str(exc):
            raise CSVTypeChange(f"a CSV column changes type part-way through the input: {exc}") from exc
        import pandas as pd

        if isinstance(exc, pd.errors.ParserError):  # a row with more fields than the header, a quote left open
            raise CSVParseError(f"the CSV input cannot be parsed: {_parser_message(exc)} (counted from the start "
                                f"of its file, or of its block of {CSV_BLOCKSIZE} in a larger file); fix or drop "
                                f"that row") from exc
        raise


def _parser_message(exc):
    """pandas' message of a ParserError, on one line and without its prefix."""
    return " ".join(str(exc).replace("Error tokenizing data. C error: ", "").split())


def _block_rows(block, names, first, dialect):
    """``(lines, None, 0)``: the lines pandas counts in one block of a CSV file (as :func:`_block_kinds`
    reads it: its rows and blank lines, a quoted field over several lines as one), or ``(None,
    pandas' message, rows)`` if it cannot be parsed (``rows``: of a value after the last column,
    :func:`_pandas_csv`, how many rows hold one; else 0)."""
    try:
        whole = {} if dialect.get("engine") == "python" else {"low_memory": False}  # the C reader's option
        frame = _read_block(block, names, first, dialect, skip_blank_lines=False, **whole)
    except ParserError as exc:
        return None, _parser_message(exc), getattr(exc, "rows", 0)
    return len(frame), None, 0


def _read_block(block, names, first, dialect, **options):
    """``pandas.read_csv`` of one block of a CSV file on its own: under its header if it starts the
    file (``first``), else under the file's column ``names``."""
    from io import BytesIO

    return _pandas_csv(BytesIO(block), header=0 if first else None, names=None if first else names, **dialect,
                       **options)


def locate_parse_error(path, error, blocksize=None, csv=None):
    """The :class:`CSVParseError` ``error`` of a CSV input, with the file and the line in it: every
    block is parsed again (the job fails anyway), and the rows of the file's blocks before the first
    that fails are added to pandas' line in that block (which it counts from the block's start).
    ``error`` itself if no block fails on its own, or if the input is not CSV."""
    import dask

    fmt, urlpath = resolve_input(path)
    if fmt != "csv":
        return error
    data, csv = _csv_data_files(path, urlpath, csv or {})
    blocks = _csv_blocks(data, blocksize or CSV_BLOCKSIZE, data.whole(path, blocksize or CSV_BLOCKSIZE), csv)
    read = dask.delayed(_block_rows, pure=True)
    found = dask.compute(*[read(block, header, first, csv) for _, block, header, first in blocks])
    before = {}
    for (name, _, _, first), (rows, message, extra) in zip(blocks, found):
        if message is None:
            before[name] = before.get(name, 0) + rows
        else:
            if extra:  # every block was read: count such rows in all
                message += f" ({sum(n for _, _, n in found):,} such row(s) in the input)"
            return _parse_error(name, message, before.get(name, 0), first)
    return error


def _parse_error(name, message, before=0, first=True):
    """The :class:`CSVParseError` of pandas' ``message`` for a block of the CSV file ``name`` that
    follows ``before`` of its rows (``first``: the block starts the file, with its header)."""
    # pandas counts a block's lines from 1 and its rows from 0, the header of a file's first block included
    line = re.search(r" in line (\d+)", message) or re.search(r" starting at row (\d+)", message)
    where = f"file {name}"
    if line:
        number = before + int(line.group(1)) + (0 if first else 1) + (0 if "line" in line.group(0) else 1)
        message = message.replace(line.group(0), "")
        if message.startswith("EOF inside string"):
            message += " (a quote opened on that line is never closed)"
        where += f", line {number:,} (the header is line 1; a quoted field over several lines counts as one)"
    else:
        where += f", after its first {before:,} rows"
    return CSVParseError(f"the CSV input cannot be parsed: {where}: {message}; fix or drop that row")


def _csv_blocks(data, blocksize, compressed, dialect):
    """The blocks of a CSV input's data files (read in ``dialect``) as its reads cut them: ``[(file
    name, delayed bytes, header (column names), whether the block starts its file)]``, in order."""
    import dask
    from dask.bytes import read_bytes

    pieces = None if compressed else _csv_pieces(data, blocksize, dialect)
    if pieces:  # cut at line breaks outside quotes
        headers = dict(zip(data.names, data.headers))
        piece = dask.delayed(_piece_bytes, pure=True)
        return [(name, piece(name, start, end), headers[name], first) for name, start, end, first in pieces]
    _, files = read_bytes(data.patterns(), delimiter=b"\n", blocksize=None if compressed else blocksize,
                          sample=False, compression="infer")
    return [(name, block, header, i == 0) for name, blocks, header in zip(data.names, files, data.headers)
            for i, block in enumerate(blocks)]


def _refuse_duplicate_fields(fs, files):
    """Name the column a Parquet file names twice (Arrow allows it; no reader can tell the two apart)."""
    names, footers = _footers(fs, files)
    for name, footer in zip(names, footers):
        seen = Counter(footer.schema.to_arrow_schema().names)
        twice = [column for column, count in seen.items() if count > 1]
        if twice:
            raise InputError(f"the Parquet file {name} names column(s) {', '.join(map(repr, twice))} more than once; "
                             f"rewrite it with one name per column")


class RowShape(NamedTuple):
    """What a whole row of a CSV input looks like, for :func:`swallowed_rows`: its field separator and
    decimal mark, its count of fields and how many of them hold numbers at least (its QIs)."""

    separator: str
    decimal: str
    fields: int
    numbers: int
    thousands: str = ""


def row_shape(path, csv, fields, numbers):
    """The :class:`RowShape` of the input at ``path`` if it is CSV (``csv``: its dialect), else None."""
    fmt, urlpath = resolve_input(path)
    if fmt != "csv":
        return None
    dialect = _with_tabs(csv or {}, fsspec.get_fs_token_paths(urlpath)[2])
    return RowShape(dialect.get("sep", ","), dialect.get("decimal", "."), fields, numbers, dialect.get("thousands", ""))


def python_number(text, thousands="", decimal="."):
    """A CSV field's text as Python writes numbers: the ``thousands`` separators dropped, the
    ``decimal`` mark a point (``1.234,5`` -> ``1234.5``)."""
    return (text.replace(thousands, "") if thousands else text).replace(decimal, ".")


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


_LINE_BREAK = re.compile(r"\r\n|\r|\n")
"""A line break inside a CSV value: a file's lines may end in ``\n``, ``\r\n`` or (old Mac files) ``\r``."""


def swallowed_rows(frame, shape):
    """Rows of a CSV input that a quote left open swallowed into one text value of ``frame`` (a
    partition): ``(count, column, example)``, ``(0, None, None)`` for none.

    A quote at a field's start opens a quoted field that runs, line breaks included, to the next
    quote; left open by mistake, the rows up to that quote become part of one value, and the file
    reads as fewer rows without any error. A value over several lines is legitimate (an address, a
    note); its inner lines are counted here only if each reads as a whole row of the file
    (``shape``): exactly its count of fields, and at least as many numbers as it has
    quasi-identifiers. The first and last lines of the value are parts of the rows the quote opened
    and closed in, never counted.
    """
    import pandas as pd

    count, column, example = 0, None, None
    for name in frame.columns:
        values = frame[name]
        if not (values.dtype == object or pd.api.types.is_string_dtype(values.dtype)):
            continue
        broken = values[values.astype("string").str.contains("[\r\n]", regex=True).fillna(False).to_numpy(bool)]
        for value in broken:
            lines = _LINE_BREAK.split(str(value))[1:-1]
            rows = 0
            for line in lines:
                pieces = line.split(shape.separator)
                if len(pieces) == shape.fields and sum(
                        _is_number(python_number(p.strip(), shape.thousands, shape.decimal)) for p in pieces
                ) >= max(shape.numbers, 1):
                    rows += 1
            if rows:
                count += rows
                if column is None:
                    column, example = str(name), str(value)
    return count, column, example


def swallowed_error(count, column, example):
    """The :class:`InputError` of :func:`swallowed_rows`' finding."""
    shown = example if len(example) <= 120 else example[:117] + "..."
    return InputError(f"the CSV input's column {column!r} holds a quoted value over several lines whose lines read "
                      f"as whole rows of the file: {count:,} row(s) in all are inside quoted values, as if a quote "
                      f"at the start of a field was left open (the first: {shown!r}); close or remove that quote "
                      f"(or, if such values are meant, give --allow-rows-in-quotes; [input] allow_rows_in_quotes = "
                      f"true in a job file)")


def _check_separator(name, header, separator):
    """Refuse a CSV file whose header reads as one column holding another usual separator (a file
    separated by semicolons, read as comma-separated), naming the option that reads it."""
    if len(header) != 1:
        return
    found = [s for s in _OTHER_SEPARATORS if s != separator and s in header[0]]
    if found:
        shown = "\\t" if found[0] == "\t" else found[0]
        raise InputError(f"the header of the CSV file {name} reads as one column, {header[0]!r}: it looks separated "
                         f"by {shown!r}, not {separator!r}; give --csv-separator '{shown}' ([input] separator in a "
                         f"job file), and --csv-decimal ',' if its numbers have decimal commas")


def compute_reading(*objs):
    """``dask.compute`` of a first pass over an input (:func:`first_pass`)."""
    import dask

    with first_pass():
        return dask.compute(*objs)


def _block_kinds(block, names, first, dialect, qi, zeros=()):
    """How pandas reads one block of a CSV file on its own: ``{column: kind}`` (the dtype's kind:
    ``i`` whole numbers, ``f`` numbers, ``b`` booleans, ``O`` text; ``n`` whole numbers and empty
    cells, which pandas reads as float64; ``e`` no value at all; ``z``, for a column of ``zeros``,
    whole numbers written with leading zeros, :func:`_padded_columns`) and, for each QI of ``qi`` read as
    text, ``(rows that are not numbers, the first)``."""
    from io import BytesIO

    import pandas as pd

    frame, integers = _with_integers(partial(_read_block, block, names, first, dialect))
    kinds = {c: "e" if frame[c].isna().all() else frame[c].dtype.kind for c in frame.columns}
    kinds.update(dict.fromkeys(integers, "n"))
    options = {**dialect, "header": 0 if first else None, "names": None if first else names}
    kinds.update({column: "z" for column, _ in _padded_columns(frame, BytesIO(block), options, zeros)})
    text = {}
    for column in qi:
        if kinds.get(column) not in ("i", "u", "f", "n", "e"):
            values = frame[column].astype(str).where(frame[column].notna()).map(
                partial(python_number, thousands=dialect.get("thousands", ""), decimal=dialect.get("decimal", ".")),
                na_action="ignore")
            bad = frame[column][pd.to_numeric(values, errors="coerce").isna() & frame[column].notna()]
            text[column] = (len(bad), bad.iloc[0] if len(bad) else None)
    return kinds, text


def _widened(guessed, kinds):
    """The type a CSV column needs for all its rows, read block by block as ``kinds`` (a set of
    :func:`_block_kinds`' kinds), when Dask guessed ``guessed`` from the first ones; None if the
    guess holds them."""
    import pandas as pd

    if pd.api.types.is_string_dtype(guessed) or guessed == object:
        return None
    values = set(kinds) - {"e"}
    if "O" in values or "z" in values or not values <= {"i", "u", "f", "b", "n"} or ("b" in values and len(values) > 1):
        return "string"
    if values == {"b"} and not pd.api.types.is_bool_dtype(guessed):  # no value in the sample: guessed Int64
        return "boolean"
    if pd.api.types.is_bool_dtype(guessed):
        return "boolean" if "e" in kinds else None
    if not pd.api.types.is_integer_dtype(guessed):
        return None
    missing = "n" in values or "e" in kinds
    if "f" in values or ("u" in values and missing):  # decimals, or beyond int64 with empty cells
        return "float64"
    if missing and guessed != pd.Int64Dtype():
        return "Int64"
    return None


def csv_types(path, numbers=None, blocksize=None, csv=None, zeros=()):
    """The types of a CSV input's columns that Dask's guess from the first rows does not hold, from
    one pass that reads every block as pandas does on its own: ``{column: dtype}`` for
    :func:`read_input`'s ``dtypes`` (text for a column whose later rows hold text, float64 for whole
    numbers with decimals further on, nullable integers for whole numbers with empty cells further on,
    nullable booleans). ``numbers``: the columns that must hold numbers, ``{column: its role}``
    ("quasi-identifier", "weights"); :class:`InputError` names each that holds text, with its role,
    its count of such rows and an example. ``zeros``: columns of whole numbers read as text if a row
    writes one with leading zeros (:func:`read_input`'s)."""
    import dask

    fmt, urlpath = resolve_input(path)
    if fmt != "csv":
        return None
    blocksize = blocksize or CSV_BLOCKSIZE
    guessed = read_input(path, blocksize, csv=csv, warn=False).dtypes
    data, dialect = _csv_data_files(path, urlpath, csv or {})
    blocks = _csv_blocks(data, blocksize, data.whole(path, blocksize), dialect)
    read = dask.delayed(_block_kinds, pure=True)
    numbers = dict(numbers or {})
    try:
        with first_pass():  # a row that does not fit the header
            found = dask.compute(*[read(block, header, first, dialect, tuple(numbers), tuple(zeros))
                                   for _, block, header, first in blocks])
    except CSVParseError as exc:
        raise locate_parse_error(path, exc, blocksize, csv) from exc
    bad = {}
    for _, text in found:
        for column, (count, example) in text.items():
            total, first = bad.get(column, (0, None))
            bad[column] = (total + count, first if first is not None else example)
    bad = {c: v for c, v in bad.items() if v[0]}
    if bad:
        shown = "; ".join(f"{c!r} ({numbers[c]}): {n} row(s), for example {e!r}" for c, (n, e) in bad.items())
        raise InputError(f"column(s) that must hold numbers hold values that are not numbers after their first "
                         f"rows: {shown}; clean the column(s), or leave them out of the options that name them")
    widened = {c: _widened(guessed[c], {kinds[c] for kinds, _ in found}) for c in guessed.index}
    return {c: t for c, t in widened.items() if t is not None}


def read_retyped(path, numbers, blocksize=None, csv=None, text=(), zeros=()):
    """``(frame, dtypes)``: a CSV input read again with its columns' types from all their rows
    (:func:`csv_types`; ``numbers``: the columns that must hold numbers, and their roles; ``text``:
    columns read as text all the same; ``zeros``: columns read as text if a row writes a whole number
    with leading zeros; see :func:`read_input`), after a first pass raised :class:`CSVTypeChange`;
    the change is logged."""
    dtypes = csv_types(path, numbers, blocksize, csv, zeros)
    dtypes = dtypes and {c: t for c, t in dtypes.items() if c not in text}
    if not dtypes:  # a Parquet input (or a CSV one Dask's guess holds)
        return read_input(path, blocksize, csv=csv, text=text, warn=False), dtypes
    log.warning("input %s: column(s) %s change type part-way through; read again as %s", path,
                ", ".join(map(repr, dtypes)), ", ".join(f"{c}: {t}" for c, t in dtypes.items()))
    return read_input(path, blocksize, dtypes, csv, text, warn=False), dtypes


def cluster_cores():
    """Threads of the current Dask client's workers, else the cores this process may run on."""
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        return usable_cores()
    return sum(w["nthreads"] for w in client.scheduler_info()["workers"].values()) or 1


def _coalesced(ddf, sizes, blocksize):
    """Many small files (thousands of hourly or per-task files) read as fewer partitions: each file
    is one partition, and every stage pays a task per partition and per pass (1M rows in 2,000
    Parquet files took 12.9x the time of the same rows in one file). Adjacent files are read
    together, about ``blocksize`` of data per partition (``sizes``: each file's bytes, a Parquet
    file's uncompressed), and at least two partitions per core. The rows and their order do not
    change, so neither does the release."""
    if ddf.npartitions != len(sizes):  # a file read in several parts: partitions are large already
        return ddf
    from dask.utils import parse_bytes

    target = max(2 * cluster_cores(), -(-sum(sizes) // parse_bytes(blocksize)))
    if 2 * target > ddf.npartitions:  # too few to be worth it
        return ddf
    cuts = np.linspace(0, ddf.npartitions, target + 1).round().astype(int)
    return dd.from_map(_ReadTogether(ddf), [range(a, b) for a, b in zip(cuts[:-1], cuts[1:])], meta=ddf._meta,
                       enforce_metadata=False)


class _ReadTogether:
    """Reads a run of the input's partitions (whole small files) in one task: Dask's own reads, one
    after the other in the task, concatenated (a task per file cost 5 ms of scheduling and transfer,
    more than reading the file). A column projection of the frame reaches the reads (``columns``)."""

    def __init__(self, ddf):
        self.ddf = ddf

    def __dask_tokenize__(self):
        return "read-together", self.ddf._name

    def __call__(self, parts, columns=None):
        frame = self.ddf if columns is None else self.ddf[list(columns)]
        return frame.partitions[list(parts)].compute(scheduler="sync")


def _in_order(part, columns):
    return part[columns]


def _warn_of_large_row_groups(names, footers):
    """Log a warning if a Parquet file of ``names`` (their ``footers``) has a row group of more than
    :data:`LARGE_ROW_GROUP` rows (naming the file with the largest)."""
    largest, name = max((max((f.row_group(i).num_rows for i in range(f.num_row_groups)), default=0), n)
                        for n, f in zip(names, footers))
    if largest > LARGE_ROW_GROUP:
        log.warning("input file %s has a row group of %s rows; a row group is never split: one task reads "
                    "and holds it whole. If workers run out of memory, rewrite the input with row groups of "
                    "at most about a million rows (pyarrow's row_group_size)", name, f"{largest:,}")


# --- atomic commit --------------------------------------------------------------------------------
# A release is written into a hidden sibling directory ``.NAME.microagg-tmp-HOST-PID-UUID`` and only
# renamed to NAME once complete and checked. A previous release at NAME (recognised by its _SUCCESS
# marker) is moved aside, replaced, then deleted. Temporary directories left by a job that was killed
# are removed by the next job writing the same output:
# - a job on this host is dead if its PID is gone, a zombie, or now a process that started after the
#   directory last changed (a reused PID: a restarted container's job is often PID 1 again);
# - a job on another host (a shared filesystem; a Kubernetes CronJob's pod has a new host name at
#   every run) cannot be checked by PID. While it runs, a thread of the job refreshes the mtime of its
#   lease file (``_LEASE`` in its temporary directory) every LEASE_REFRESH seconds; the directory is
#   stale once its lease is older than LEASE_EXPIRY, by the filesystem's own clock (the mtime of the
#   new job's just-made directory), so clock skew between hosts does not matter.
# The lease file is also the commit's proof that the directory is still the job's own: a job whose
# directory was removed meanwhile fails rather than committing what another job left of it.

SUCCESS_MARKER = "_SUCCESS"


def release_path(output):
    """Where a release at ``output`` lives: its absolute path, or, if ``output`` is a symbolic link
    (``latest -> 2026-11-25``), the directory it points to. The release replaces that directory and
    the link keeps pointing at it (renaming over the link would replace the link by a directory)."""
    output = os.path.abspath(output)
    return os.path.realpath(output) if os.path.islink(output) else output


def _tmp_prefix(output):
    head, name = os.path.split(output)
    return head, f".{name}.microagg-"


def prepare_output(output):
    """Check that OUTPUT can be (re)placed, clean stale temporaries; return a fresh temp directory."""
    if "://" in str(output):
        raise InputError(f"the output must be a local path, without a URL scheme (a release is committed by a local "
                         f"rename; a shared filesystem for a cluster), got {str(output)!r}")
    output = release_path(output)
    head, prefix = _tmp_prefix(output)
    if not os.path.isdir(head):
        raise InputError(f"the parent directory of the output, {head!r}, does not exist")
    if os.path.exists(output):
        if not os.path.isdir(output):
            raise InputError(f"output {output!r} exists and is a file; a release is a directory")
        if os.listdir(output) and not os.path.exists(os.path.join(output, SUCCESS_MARKER)):
            raise InputError(
                f"output {output!r} exists and is not a microagg release (no {SUCCESS_MARKER} marker); "
                f"remove it or choose another path"
            )
    host = socket.gethostname()
    tmp = os.path.join(head, f"{prefix}tmp-{host}-{os.getpid()}-{uuid.uuid4().hex[:12]}")
    os.mkdir(tmp)
    try:
        Lease(tmp)
        mine = _lease_order(tmp)
        now = os.stat(tmp).st_mtime  # the filesystem's clock
        for entry in sorted(os.listdir(head)):
            path = os.path.join(head, entry)
            if entry.startswith(prefix) and path != tmp and _recover_stale(path, entry[len(prefix):], host, output,
                                                                           now):
                other = _lease_order(path)
                if other is not None and other < mine:  # the earlier of two jobs goes on
                    raise OutputBusyError(
                        f"another microagg job on this host (PID {other[2]}) is writing {output} now; nothing was "
                        f"written. A second run of the same export (a scheduler firing twice?) waits for the first "
                        f"to end; a job that dies is recognised by the next run, which cleans up after it")
    except BaseException:
        discard_output(tmp)
        raise
    return tmp


def _recover_stale(path, tag, host, output, now):
    """Clean up after a job that died: drop its temporary, restore a moved-aside release. ``now``:
    the filesystem's clock. Returns True for the temporary directory of a job running on this host."""
    try:
        kind, rest = tag.split("-", 1)
        entry_host, pid, _ = rest.rsplit("-", 2)
        pid = int(pid)
    except ValueError:
        return
    if kind not in ("tmp", "old"):
        return
    changed = last_sign_of_life(path)
    if changed is None:
        return  # gone meanwhile
    if not job_gone(entry_host, pid, changed, host, now):
        return kind == "tmp" and entry_host == host  # another host's job may still run: not this host's
    if kind == "old" and not os.path.exists(output):
        log.warning("restoring the previous release %s moved aside by a job that did not finish", output)
        os.rename(path, output)
        return
    log.info("removing %s left by a job that did not finish", path)
    shutil.rmtree(path, ignore_errors=True)


CLOCK_SLACK = 5.0
"""Seconds by which a process may seem to have started after its own temporary directory last
changed (the boot time in /proc is whole seconds; a clock step): such a process still counts as
possibly that directory's job."""


def job_running(pid, changed):
    """Whether process ``pid`` may be the job whose temporary directory last changed at ``changed``
    (seconds since the epoch): the PID exists, is not a zombie and did not start after that."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    started = _process_start(pid)
    if started is None:
        return True  # no /proc: the PID is all there is to go by
    state, start = started
    return state != "Z" and start <= changed + CLOCK_SLACK


def job_gone(entry_host, pid, changed, host, now):
    """Whether the job of a directory left on a filesystem that hosts may share (process ``pid`` on ``entry_host``,
    its lease or the directory last changed at ``changed``) is over: on this ``host``, when
    :func:`job_running` says so; on another, when the lease was not refreshed for :data:`LEASE_EXPIRY`
    seconds by the filesystem's clock ``now`` (its PID means nothing here)."""
    if entry_host == host:
        return not job_running(pid, changed)
    return now - changed > LEASE_EXPIRY


def last_sign_of_life(path, renamed=True):
    """When the job of the directory ``path`` last showed it runs: its lease's last refresh; without a lease (not yet
    made; a moved-aside release; an earlier version's scratch directory) the directory's last change, a rename
    included (``renamed``: its ctime, else its mtime: what it holds last changed); None if the directory is gone."""
    for where, when in ((os.path.join(path, LEASE), "st_mtime"), (path, "st_ctime" if renamed else "st_mtime")):
        try:
            return getattr(os.stat(where), when)
        except OSError:
            continue
    return None


def filesystem_now(directory):
    """The clock of ``directory``'s filesystem (the mtime of a file just made there), which judges the leases of
    other hosts' jobs whatever the skew between the hosts' clocks; this host's clock if nothing can be made there."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".microagg-clock-", dir=directory)
    except OSError:
        return time.time()
    try:
        return os.fstat(fd).st_mtime
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.remove(probe)


def _process_start(pid):
    """``(state, start time in seconds since the epoch)`` of a process, from Linux's /proc; or None."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        with open("/proc/stat") as fh:
            boot = next(float(line.split()[1]) for line in fh if line.startswith("btime "))
        return fields[0], boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def write_atomically(path, data):
    """Write ``data`` (bytes) to the local file ``path`` atomically: a temporary file in the same
    directory (created exclusively, mode ``0666`` less the umask, so a report is as readable as the
    release beside it), flushed to disk, then renamed over ``path``; a failure leaves no partial file
    and no temporary. Returns ``path``."""
    import secrets

    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def commit_output(tmp, output):
    """Mark ``tmp`` complete and move it to ``output``, replacing a previous release."""
    interrupts.check()  # not once a signal asked the job to stop, even if its exception was dropped
    output = release_path(output)
    Lease.end(tmp)
    try:
        os.remove(os.path.join(tmp, LEASE))
    except FileNotFoundError:
        raise ReleaseGateError(
            f"the temporary directory {tmp} lost its lease file while the job ran (another job took it "
            f"for a dead job's and removed it?); nothing committed, the previous release, if any, is intact"
        ) from None
    with open(os.path.join(tmp, SUCCESS_MARKER), "w"):
        pass
    old = None
    if os.path.exists(output):
        before, _, after = tmp.rpartition(".microagg-tmp-")
        old = f"{before}.microagg-old-{after}"
        os.rename(output, old)
    os.rename(tmp, output)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def discard_output(tmp):
    """Remove the temporary directory ``tmp`` of a job that did not finish.

    It is renamed first (another temporary name of this job, which the next run cleans up if this one
    dies meanwhile) and removed under that name: a task still running when the job stopped (a file of
    ``generate`` or of the write being started) then fails to open its file instead of creating it in a
    directory being removed, which made the removal fail and left the directory to the next run."""
    Lease.end(tmp)
    head, name = os.path.split(tmp)
    doomed = os.path.join(head, f"{name.rsplit('-', 1)[0]}-{uuid.uuid4().hex[:12]}")
    try:
        os.rename(tmp, doomed)
    except OSError:  # gone already, or a filesystem that cannot: remove it where it is
        doomed = tmp
    shutil.rmtree(doomed, ignore_errors=True)


LEASE = "_LEASE"
"""A running job's lease on its temporary directory (readers of Parquet datasets skip ``_`` files)."""
LEASE_REFRESH = 60.0
"""Seconds between refreshes of a running job's lease."""
LEASE_EXPIRY = 3600.0
"""Seconds after which another host's temporary directory whose lease was not refreshed is stale.
Generous: removing a live job's directory costs that job (its commit then fails), and a dead job's
directory waits at most this long beyond the next run that finds it."""


def _lease_order(tmp):
    """``(start time, directory name, PID)`` of the job of the temporary directory ``tmp``, from its
    lease; None without one (not yet written: a job that started after this one's lease)."""
    try:
        with open(os.path.join(tmp, LEASE)) as fh:
            fields = fh.read().split()
        return float(fields[2]) if len(fields) > 2 else 0.0, os.path.basename(tmp), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


class Lease:
    """The lease file of a job's temporary directory, refreshed by a daemon thread until ``end``."""

    _running = {}
    _lock = threading.Lock()

    def __init__(self, tmp):
        self.path = os.path.join(tmp, LEASE)
        with open(self.path, "w") as fh:  # _lease_order reads it
            fh.write(f"{socket.gethostname()} {os.getpid()} {time.time()!r}\n")
        self.stop = threading.Event()
        with self._lock:
            self._running[tmp] = self
        self.thread = threading.Thread(target=self._refresh, name="microagg-lease", daemon=True)
        self.thread.start()

    def _refresh(self):
        while not self.stop.wait(LEASE_REFRESH):
            try:
                os.utime(self.path)
            except OSError:
                return  # the directory is gone: the commit will say so

    @classmethod
    def end(cls, tmp):
        with cls._lock:
            lease = cls._running.pop(tmp, None)
        if lease is not None:
            lease.stop.set()
            lease.thread.join(timeout=5)
