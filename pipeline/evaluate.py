"""The distributed evaluation behind ``microagg evaluate``: utility and risk of an (original, masked) pair.

The measures are those of :mod:`pipeline.metrics` (written for two drivers); this module is the Dask
driver. Row ``i`` of the masked file is the masked version of row ``i`` of the original: rows are
identified by their global position (the release pipeline's row ids), whatever the files' formats and
partitionings. Library code owns no cluster: everything runs on the active Dask client or scheduler,
through ``to_delayed()`` partitions and explicit delayed task graphs.

Stages (each timed under ``timings``):

1. validate: from metadata only: every QI column in both files (naming the file that lacks one), QI
   dtypes numeric (a text column is refused with its count of non-numeric values and an example),
   ``k``, ``known`` subsets, ``id_percent``; with :func:`run` on two Parquet inputs, the row counts
   from the Parquet footers;
2. statistics: one pass over the partitions of both files (read once and kept in memory, or, in a large
   evaluation, read again by the next stage: :func:`scratch_directory`): exact sums
   of the original QIs (:mod:`pipeline.stats`, so the standardization is bit-identical to the release
   pipeline's and to :mod:`pipeline.metrics`'s), partition lengths, NaN / inf / huge counts per column
   of both files; different row counts and non-finite QIs are refused here (counts per column);
3. align: both files cut at the union of their partition boundaries and of a fixed row-id grid
   (``piece_rows``) into aligned pieces (:class:`Pair`: the QIs of both files as float64 arrays), kept
   in memory, or in a large evaluation in files that every later pass reads (the worker's memory then
   holds neither file: 1.7 GiB at 30M rows x 13 QIs instead of 12.8, and at 100M; the later passes' own
   exchanges go through files there too); the non-QI columns present in both files are compared here
   (differing rows per column);
4. columns: interval disclosure and quantiles, exact, from every column of both files cut into
   buckets of consecutive ranks (:mod:`pipeline.columns`: no task holds a whole column);
5. information loss: :func:`metrics.moments` per piece, merged with :func:`metrics.combine_moments`
   -> the IL family and IL1s; the SSE on z-scores of the original's exact mean and population std;
6. classes: the equivalence classes of the released QI tuples by a distributed exact group count:
   per piece the distinct tuples and their counts, sent by tuple hash to one of several buckets, where
   the counts of equal tuples (compared by value, not by hash) are added;
7. linkage: the DLD of every scenario (all QIs, then each ``known`` subset), exact and distributed
   (see :func:`record_linkage`); with ``dld_records``, over a deterministic sample of the masked
   records (each sampled record's links still exact: the DLD is then an estimate with an interval).

The report (a JSON-serializable dict; NaN is written as ``None``):

``rows``, ``qi``, ``k`` (or ``None``), ``known`` (the subsets, in QI order), ``statistics``
(``mean``, ``std``: the original QIs' exact mean and population std),

``information_loss``: ``sse``, ``sst``, ``il`` (= 100 SSE / SST on z-scores of the original's mean and
population std, as ``microagg anonymize`` reports it; SST = rows x non-constant QIs), ``family`` (the
score's IL: ``X-X'``, ``V-V'``, ``S-S'``, ``R-R'``, ``IL``, ``undefined_terms``;
:func:`metrics.information_loss_family`), ``il1s`` (:func:`metrics.il1s`), ``attributes`` (one record
per attribute and statistic: ``attribute``, ``statistic`` in ``mean``, ``variance``, ``q0.01``, ...,
``original``, ``masked``, ``relative_change``; :func:`metrics.attribute_changes`), ``quantiles`` (how
they were computed);

``disclosure_risk``: ``dld`` and ``id`` (all QIs known), ``dld_records`` (the masked records whose links
were searched: all of them, or a sample with ``dld_records``), ``dld_interval`` (the DLD's 95 %
interval for a sample; None when exact), ``dr`` = 0.5 DLD + 0.5 ID, ``id_percent``,
``id_per_attribute`` (QI -> percent), ``scenarios`` (one per known set, all QIs first: ``columns``,
``dld``, ``dld_records``, ``dld_interval``, ``id`` = the mean of ``id_per_attribute`` over them, and
``linkage``: ``blocks``,
``distinct_queries`` (distinct masked tuples searched), ``second_round_queries`` (searches in a block
other than the tuple's own: one per tuple and block asked), ``seconds``); ID is exact (see stage 4);

``score`` = 0.5 ``family.IL`` + 0.5 ``dr`` (:func:`metrics.score`, the Mic1D paper's score);

``anonymity``: ``k_prime`` (records / distinct released QI tuples), ``classes``, ``min_class_size``,
``class_sizes`` (class size -> number of classes), ``records``;

``checks``: ``rows`` (``original``, ``masked``, ``match``), ``k_anonymity`` (``k``,
``rows_in_small_classes``, ``passed``; ``None`` without ``k``), ``unchanged_columns`` (non-QI column in
both files -> number of rows whose value differs; missing equals missing), ``not_compared`` (the
``changed`` columns in both files), ``columns_only_in_original``,
``columns_only_in_masked``, ``passed`` (k-anonymity, if asked, and every shared column unchanged);

``pieces`` (aligned pieces), ``aligned_pieces`` (``memory``, or ``files``: :func:`scratch_directory`),
``timings`` (seconds per stage), ``version``; :func:`run` adds
``original``, ``masked`` and ``report`` (the paths).

References
----------
Domingo-Ferrer, J. and Torra, V. (2001). A quantitative comparison of disclosure control methods for
microdata. In Confidentiality, Disclosure and Data Access, Elsevier, 111-133.
``shared/papers/mic1d-one-dimension-microaggregation.txt`` section 2.3 (the score, DLD, ID, k').
"""

import json
import logging
import math
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from typing import NamedTuple

import dask
import numpy as np
import pandas as pd
from dask import delayed

from .. import kernels
from ..kernels import groups, histogram, linkage
from ..kernels.stats import HUGE
from . import columns, graph, io, metrics, stats, transit
from .blocking import sample_plan
from .errors import CSVParseError, CSVTypeChange, InputError
from .release import Timings, parts_of, persisted, transit_directory
from .release import html_path as release_html_path
from .validation import as_written, check_k, non_numeric_error, non_numeric_values, spaced_names

log = logging.getLogger(__name__)

BLOCK_ROWS = 100_000
"""Originals per record-linkage block (the target; the split tree is shaped on a sample)."""
PIECE_ROWS = 250_000
"""Largest aligned piece: the files are also cut at multiples of this row id."""
MIN_BLOCK_SAMPLE = 8
QUERY_SALT = 0x1E3779B97F4A7C15
"""Mixed into the seed of the sample of masked records searched (:func:`query_sample`), so that it is
not the sample that shapes the linkage blocks."""
HELD = 2.5
"""The memory an evaluation holds, in times both files' QIs, when they are not in files: both files read and
kept until aligned, the aligned pieces, the linkage's trees (4.6-4.7 GiB at 10M rows x 13 QIs, whose QIs are
2.1 GB). Through files the same evaluation took 1.7-1.8 GiB and no longer (89-97 s against 93-102 s;
BENCHMARKS.md, fifty-fifth session)."""
SCRATCH_ROOM = 2.5
"""The scratch files' largest size, in times both files' QIs (16 bytes a cell): the pieces' (1), and one known
set's routed rows (the originals', 8 bytes a cell and 16 a row, besides a sample of the masked records) and block
trees (about as much again) before the routed rows are removed: 2.2 times at 13 QIs."""
PAIR_FILE = "pair-"
"""In the name of an aligned piece's file (:class:`Pair`), and of no other file in the scratch directory."""
BLOCK_FILE = "block-"
"""In the name of a linkage block's file (:func:`_block_tree_read`), and of no other file in its directory."""
REQUESTS_FILE = "requests-"
REPLIES_FILE = "replies-"
"""Names of a linkage's round-2 files: one block's requests cut by block asked, its answers by block asking."""
CREDIT_ROWS = 1 << 20
"""The DLD's credits are made and summed in pieces of at most this many rows (:func:`credit_sum`)."""
QUANTILE_METHOD = ("exact: np.quantile's linear interpolation (Hyndman-Fan type 7) between order statistics of "
                   "each whole column, ranked in buckets")


# --- stage 1: plan from metadata ---------------------------------------------------------------------


def _names(value, option):
    """Column names: a comma-separated string's, spaces around them removed, or a sequence's, as they are
    (a column may be named ``' income'``: :func:`pipeline.validation.spaced_names`)."""
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
    names = [str(v) for v in value if str(v).strip()]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"{option} names column(s) {', '.join(map(repr, twice))} twice")
    return names


def _is_numeric(dtype):
    return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)


def plan(original, masked, qi, k=None, known=(), id_percent=metrics.ID_PERCENT, changed=()):
    """Validate from the schemas alone. Returns ``(qi, scenarios, shared)``: the QI names, the known
    sets as tuples of QI positions (all QIs first, then each distinct ``known`` subset in QI order)
    and the non-QI columns present in both files that are compared (all but ``changed``: columns the
    release changes on purpose, such as hashed identifiers)."""
    qi = _names(qi or [], "--qi")
    if not qi:
        raise InputError("name the quasi-identifier columns to compare (--qi A,B,C)")
    for which, frame in (("original", original), ("masked", masked)):
        columns = [str(c) for c in frame.columns]
        missing = [c for c in qi if c not in columns]
        if missing:
            raise InputError(f"quasi-identifier column(s) {', '.join(map(repr, missing))} not in the {which} "
                             f"file; it has: {', '.join(columns)}")
    for which, frame in (("original", original), ("masked", masked)):
        for column in qi:
            if not _is_numeric(frame.dtypes[column]):
                raise non_numeric_error(column, frame[column], which)
    if k is not None:
        check_k(k)
    ps = np.atleast_1d(np.asarray(id_percent, dtype=np.float64))
    if ps.size == 0 or not np.isfinite(ps).all() or (ps <= 0).any() or (ps > 100).any():
        raise InputError(f"the interval disclosure percentage must be in (0, 100], got {id_percent}")
    scenarios = [tuple(range(len(qi)))]
    for subset in known or ():
        names = _names(subset, "--known")
        if not names:
            raise InputError("--known needs at least one column")
        outside = [c for c in names if c not in qi]
        if outside:
            raise InputError(f"--known names column(s) {', '.join(map(repr, outside))} that are not "
                             f"quasi-identifiers; the quasi-identifiers are: {', '.join(qi)}")
        cols = tuple(sorted(qi.index(c) for c in names))
        if cols not in scenarios:
            scenarios.append(cols)
    changed = set(_names(changed, "changed columns")) if changed else set()
    shared = [c for c in original.columns if c in set(masked.columns) and c not in qi and c not in changed]
    return qi, scenarios, shared


# --- stage 2: statistics -------------------------------------------------------------------------------


def _float_matrix(part, qi, which):
    """The QIs of a partition as C-contiguous float64; a text value names its column."""
    try:
        return np.ascontiguousarray(part[qi].to_numpy(dtype=np.float64))
    except (TypeError, ValueError):
        for column in qi:
            count, example = non_numeric_values(part[column])
            if count:
                raise InputError(f"quasi-identifier column {column!r} of the {which} file holds {count} value(s) "
                                 f"that are not numbers in one partition, for example {example!r}") from None
        raise


def _pass(part, qi, which):
    """A partition's rows and exact column sums (with its counts of unusable values and extremes)."""
    return len(part), stats.chunk(_float_matrix(part, qi, which))


def check_rows(n_original, n_masked):
    if n_original != n_masked:
        where = "missing from" if n_masked < n_original else "extra in"
        raise InputError(f"the original file has {n_original} rows and the masked file {n_masked} "
                         f"({abs(n_original - n_masked)} row(s) {where} the masked file): row i of the masked "
                         f"file must be the masked version of row i of the original")


def _check_values(qi, per_file):
    """``per_file``: ``(which, nans, infs, huge)``; raise naming every column and its count."""
    problems = []
    for which, nans, infs, huge in per_file:
        for name, a, b, c in zip(qi, nans, infs, huge):
            if a:
                problems.append(f"{which} file, column {name!r}: {int(a)} row(s) with a missing (NaN) value")
            if b:
                problems.append(f"{which} file, column {name!r}: {int(b)} row(s) with an infinite value")
            if c:
                problems.append(f"{which} file, column {name!r}: {int(c)} row(s) with a magnitude above {HUGE:g}")
    if problems:
        raise InputError("quasi-identifiers must be finite numbers in both files: " + "; ".join(problems))


def column_statistics(original_parts, masked_parts, qi):
    """One pass over both files' partitions: ``(lengths of the original's, of the masked's, mean, std,
    minimum, maximum)``, after the row-count and finiteness checks; the minimum and maximum of each QI
    over both files are the edges of the report's histograms."""
    found = dask.compute(*[delayed(_pass, pure=True)(p, qi, "original") for p in original_parts],
                         *[delayed(_pass, pure=True)(p, qi, "masked") for p in masked_parts])
    first, second = found[:len(original_parts)], found[len(original_parts):]
    lengths_o = [f[0] for f in first]
    lengths_m = [f[0] for f in second]
    check_rows(sum(lengths_o), sum(lengths_m))
    return (lengths_o, lengths_m, *_finished(qi, sum(lengths_o), [f[1] for f in first], [f[1] for f in second]))


def _finished(qi, n_rows, original_sums, masked_sums):
    """``(mean, std, minimum, maximum)`` from both files' chunks' :class:`pipeline.stats.ColumnSums`, after the
    finiteness checks (:func:`column_statistics`)."""
    total = stats.combine(original_sums) if original_sums else None
    if total is None or total.rows < 2:
        raise InputError(f"the files have {n_rows} row(s); the measures need at least 2")
    masked = stats.combine(masked_sums)  # as many rows as the original: not empty
    _check_values(qi, [("original", total.nans, total.infs, total.huge),
                       ("masked", masked.nans, masked.infs, masked.huge)])
    mean, std = stats.finalize(total)
    return mean, std, np.minimum(total.lo, masked.lo), np.maximum(total.hi, masked.hi)


def partition_lengths(original, masked, column):
    """The rows of every partition of both files, from a read of one ``column`` (a columnar file reads it
    alone), each partitioned as a read of more of its columns (:func:`pipeline.release.parts_of`)."""
    found = dask.compute(*[delayed(len, pure=True)(p) for frame in (original, masked)
                           for p in parts_of(frame[[column]])])
    n = original.npartitions
    lengths_o, lengths_m = list(found[:n]), list(found[n:])
    check_rows(sum(lengths_o), sum(lengths_m))
    return lengths_o, lengths_m


def pair_statistics(pairs, qi):
    """:func:`column_statistics`' ``(mean, std, minimum, maximum)`` from the aligned pieces' own sums (pieces
    aligned with ``sums``: :func:`align`)."""
    found = dask.compute(*[delayed(_sums_of, pure=True)(p) for p in pairs])
    return _finished(qi, sum(f[0].rows for f in found), [f[0] for f in found], [f[1] for f in found])


def _sums_of(pair):
    return pair.sums


# --- stage 3: aligned pieces ------------------------------------------------------------------------------


class Pair(NamedTuple):
    """Rows ``start .. start + len(X) - 1`` of both files: the QIs (float64), and per shared non-QI
    column the number of those rows whose value differs. In a large evaluation (:func:`scratch_directory`)
    the QIs are in the file ``path`` (``X`` and ``Xm`` None), column by column
    (:func:`pipeline.transit.store_columns`): every task reads its piece's (:meth:`loaded`), or a few of its
    columns (:meth:`columns`), and the worker's memory no longer holds both files."""

    start: int
    X: np.ndarray | None
    Xm: np.ndarray | None
    differing: np.ndarray
    path: str | None = None
    shape: tuple = ()  # (rows, QIs) of a piece in a file
    marks: tuple | None = None  # of a piece in a file: its columns.piece_marks, taken before it was written
    sums: tuple | None = None  # both files' stats.ColumnSums of its rows, if aligned with them (pair_statistics)

    @property
    def rows(self):
        return self.shape[0] if self.path else self.X.shape[0]

    def loaded(self):
        """This piece with its QIs in memory (as C-contiguous arrays, read from its file if it has one)."""
        if self.path is None:
            return self
        n, d = self.shape
        both = transit.read_columns(self.path, n, range(2 * d))
        return self._replace(X=np.ascontiguousarray(both[:d].T), Xm=np.ascontiguousarray(both[d:].T), path=None,
                             shape=())

    def matrix(self, side):
        """The masked (``side`` 0) or original (1) QIs, C-contiguous (only those read from a file)."""
        if self.path is None:
            return self.Xm if side == 0 else self.X
        return np.ascontiguousarray(self._read(side, range(self.shape[1])).T)

    def columns(self, side, columns):
        """Columns ``columns`` of the masked (``side`` 0) or original (1) QIs: a list of 1-D arrays."""
        if self.path is None:
            matrix = self.Xm if side == 0 else self.X
            return [matrix[:, j] for j in columns]
        return list(self._read(side, columns))

    def _read(self, side, columns):
        """Columns of one file's QIs read from the piece's file: ``(len(columns), rows)``."""
        n, d = self.shape
        return transit.read_columns(self.path, n, [j + (d if side == 0 else 0) for j in columns])


def _plain(series):
    """Values comparable across files: categoricals and extension arrays as plain objects / numbers."""
    values = series.reset_index(drop=True)
    if isinstance(values.dtype, pd.CategoricalDtype):
        values = values.astype(object)
    return values


def _equal(x, y):
    """Whether two values of an object column are equal, element by element for a list, an array or
    a struct (a dict): the values of nested Parquet columns."""
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_equal(x[key], y[key]) for key in x)
    if isinstance(x, (list, tuple, np.ndarray)) and isinstance(y, (list, tuple, np.ndarray)):
        return len(x) == len(y) and all(_equal(u, v) for u, v in zip(x, y))
    try:
        return bool(x == y) or bool(pd.isna(x) and pd.isna(y))
    except (TypeError, ValueError):
        return False


def differing_rows(a, b):
    """Rows where two columns differ (two missing values are equal; uncomparable types differ)."""
    if _categories_alike(a, b):
        return _differing_codes(a.array, b.array)
    a, b = _plain(a), _plain(b)
    try:
        same = (a == b).fillna(False).to_numpy(dtype=bool)
    except (TypeError, ValueError):  # lists, structs, mixed types: value by value
        same = np.array([_equal(x, y) for x, y in zip(a.astype(object), b.astype(object))], dtype=bool)
    both_missing = (a.isna() & b.isna()).to_numpy(dtype=bool) | (_nans(a) & _nans(b))
    return int((~(same | both_missing)).sum())


def _categories_alike(a, b):
    """Whether two columns are categorical with categories of one dtype that is not floating-point (strings,
    integers...), whose values are equal exactly when a hash lookup finds one among the other's."""
    return (isinstance(a.dtype, pd.CategoricalDtype) and isinstance(b.dtype, pd.CategoricalDtype)
            and a.dtype.categories.dtype == b.dtype.categories.dtype
            and not pd.api.types.is_float_dtype(a.dtype.categories.dtype))


def _differing_codes(a, b):
    """:func:`differing_rows` of two categorical arrays (:func:`_categories_alike`) from their codes, without a
    value as a Python object: each of ``b``'s categories is looked up among ``a``'s once. A missing value (code
    -1) equals only a missing value; a category ``a`` lacks equals nothing. At 10M rows the objects' comparison
    was 2 of the evaluation's thread-seconds (BENCHMARKS.md, sixtieth session)."""
    where = a.categories.get_indexer(b.categories).astype(np.int64)
    where[where < 0] = -3
    codes_b = np.asarray(b.codes, dtype=np.int64)
    mapped = np.full(len(codes_b), -1, dtype=np.int64)
    present = codes_b >= 0
    mapped[present] = where[codes_b[present]]
    return int(np.count_nonzero(mapped != np.asarray(a.codes, dtype=np.int64)))


def _nans(values):
    """Which values are NaN in a floating-point column read exactly (Arrow-backed: a NaN is a value,
    apart from the nulls); none in any other column (where ``isna`` holds them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(values.dtype, pd.ArrowDtype) and pa.types.is_floating(values.dtype.pyarrow_dtype):
        return pc.is_nan(pa.chunked_array([pa.array(values.array)])).fill_null(False).to_numpy()
    return np.zeros(len(values), dtype=bool)


def _pair(start, original, a, b, masked, c, d, qi, shared, directory=None, sums=False):
    o = original.iloc[a:b]
    m = masked.iloc[c:d]
    X = _float_matrix(o, qi, "original")
    Xm = _float_matrix(m, qi, "masked")
    differing = np.array([differing_rows(o[col], m[col]) for col in shared], dtype=np.int64)
    found = (stats.chunk(X), stats.chunk(Xm)) if sums else None
    if directory is None:
        return Pair(start, X, Xm, differing, sums=found)
    path = os.path.join(directory, f"{PAIR_FILE}{start}")
    transit.store_columns(path, [X, Xm])
    return Pair(start, None, None, differing, path, X.shape, columns.piece_marks(Pair(start, X, Xm, differing)), found)


def piece_bounds(lengths_o, lengths_m, piece_rows):
    """Aligned pieces ``(start, stop, original partition, masked partition)``: the union of both
    files' partition boundaries and of the multiples of ``piece_rows``."""
    off_o = np.concatenate([[0], np.cumsum(lengths_o)]).astype(np.int64)
    off_m = np.concatenate([[0], np.cumsum(lengths_m)]).astype(np.int64)
    n = int(off_o[-1])
    cuts = np.unique(np.concatenate([off_o, off_m, np.arange(0, n, max(int(piece_rows), 1))]))
    out = []
    for s, e in zip(cuts[:-1], cuts[1:]):
        i = int(np.searchsorted(off_o, s, side="right") - 1)
        j = int(np.searchsorted(off_m, s, side="right") - 1)
        out.append((int(s), int(e), i, j, int(off_o[i]), int(off_m[j])))
    return out


def align(original_parts, masked_parts, lengths_o, lengths_m, qi, shared, piece_rows=PIECE_ROWS, directory=None,
          sums=False):
    """The aligned pieces (delayed :class:`Pair`), persisted; their QIs in files under ``directory`` if given;
    with ``sums``, each with both files' sums of its rows (:func:`pair_statistics`)."""
    pieces = [delayed(_pair, pure=True)(s, original_parts[i], s - oo, e - oo, masked_parts[j], s - om, e - om,
                                        qi, shared, directory, sums)
              for s, e, i, j, oo, om in piece_bounds(lengths_o, lengths_m, piece_rows)]
    return list(persisted(*pieces))


# --- stage 4: information loss ---------------------------------------------------------------------------


def _pair_loss(pair, std, edges):
    pair = pair.loaded()
    scale = np.where(std > 0, std, np.inf)
    sse = float((((pair.X - pair.Xm) / scale) ** 2).sum())
    ones = np.ones(len(pair.X), dtype=np.int64)
    counts = (histogram.bin_counts(pair.X, edges, ones), histogram.bin_counts(pair.Xm, edges, ones))
    return metrics.moments(pair.X, pair.Xm), sse, pair.differing, counts


def information_loss(pairs, qi, std, quantiles, q_original, q_masked, edges):
    """The ``information_loss`` entry of the report, the shared columns' differing-row counts and the
    report's data summary pieces: ``(merged moments, original counts, masked counts)`` in the bins of
    ``edges`` (:func:`pipeline.report.bin_counts`)."""
    edges = np.ascontiguousarray(edges, dtype=np.float64)
    found = dask.compute(*[delayed(_pair_loss, pure=True)(p, std, edges) for p in pairs])
    m = found[0][0]
    for other, *_ in found[1:]:
        m = metrics.combine_moments(m, other)
    sse = sum(f[1] for f in found)
    sst = float(m["n"] * np.count_nonzero(std > 0))
    changes = metrics.attribute_changes_from(m, qi, quantiles, q_original, q_masked)
    return {
        "sse": sse,
        "sst": sst,
        "il": 100.0 * sse / sst if sst > 0 else 0.0,
        "family": metrics.information_loss_family_from(m),
        "il1s": metrics.il1s_from(m),
        "attributes": changes.to_dict(orient="records"),
        "quantiles": QUANTILE_METHOD,
    }, np.sum([f[2] for f in found], axis=0), (m, sum(f[3][0] for f in found), sum(f[3][1] for f in found))


# --- stage 5: equivalence classes ---------------------------------------------------------------------------


def _distinct_tuples(pair, n_buckets):
    """The distinct released tuples of a piece, their counts and the bucket of each (by tuple hash)."""
    A = pair.matrix(0) + 0.0  # -0.0 and 0.0 are one value
    codes, first = metrics._row_codes(A)
    counts = np.bincount(codes, minlength=len(first)).astype(np.int64)
    tuples = np.ascontiguousarray(A[first])
    return (kernels.row_hashes(tuples, 1) % np.uint64(n_buckets)).astype(np.int64), tuples, counts


def _tuple_buckets(pair, n_buckets):
    """The distinct released tuples of a piece and their counts, cut into ``n_buckets`` by tuple hash."""
    bucket, tuples, counts = _distinct_tuples(pair, n_buckets)
    bounds, order = groups.group_members(bucket, n_buckets)
    tuples, counts = tuples[order], counts[order]
    return [(tuples[s:e], counts[s:e]) for s, e in zip(bounds[:-1], bounds[1:])]


def _tuple_buckets_to_file(pair, n_buckets, path):
    """:func:`_tuple_buckets` into a file cut by bucket (:func:`pipeline.transit.write_rows`)."""
    bucket, tuples, counts = _distinct_tuples(pair, n_buckets)
    return transit.write_rows(path, bucket, n_buckets, [tuples, counts])


def _class_sizes(width, *parts):
    """Sizes of the classes of one bucket: equal tuples (by value) add their counts."""
    parts = [p for p in parts if len(p[1])]
    if not parts:
        return np.zeros(0, dtype=np.int64)
    tuples = np.concatenate([p[0] for p in parts]).reshape(-1, width)
    counts = np.concatenate([p[1] for p in parts])
    codes, first = metrics._row_codes(tuples)
    return np.bincount(codes, weights=counts, minlength=len(first)).astype(np.int64)


def _class_sizes_read(width, b, *bundles):
    """:func:`_class_sizes` of bucket ``b``'s tuples in the pieces' files, in their order."""
    arrays = transit.read_key([written for bundle in bundles for written in bundle], b)
    return _class_sizes(width, *([] if arrays is None else [arrays]))


def class_sizes(pairs, width, directory=None):
    """Sizes of all equivalence classes of the released QI tuples (a distributed exact group count): the
    pieces' distinct tuples reach their buckets through :meth:`pipeline.graph.Layer.exchange` (two levels
    past 4,096 pieces: at 30M rows the direct graph's 14,400 pieces took most of the stage's 52 s), or with
    ``directory`` through files there (one per piece, cut by bucket), removed after."""
    n_buckets = max(1, len(pairs))
    layer = graph.Layer("microagg-classes")
    if directory:
        cut = [layer.task(("cut", i), _tuple_buckets_to_file, p, n_buckets, os.path.join(directory, f"classes-{i}"))
               for i, p in enumerate(pairs)]
        bundles = layer.bundles("cuts", cut, kept=False)
        sizes = [layer.task(("sizes", b), _class_sizes_read, width, b, *bundles) for b in range(n_buckets)]
    else:
        cut = [layer.task(("cut", i), _tuple_buckets, p, n_buckets) for i, p in enumerate(pairs)]
        pieces = layer.exchange("buckets", cut, n_buckets, graph.concatenate_fields)
        sizes = [layer.task(("sizes", b), _class_sizes, width, *pieces[b]) for b in range(n_buckets)]
    sizes = dask.compute(*layer.delayed(sizes))
    if directory:
        transit.remove_files(directory, keep=PAIR_FILE)
    return np.concatenate(sizes)


# --- stage 7: distributed exact record linkage (DLD) ---------------------------------------------------------


class LinkPartition(NamedTuple):
    """Axis-aligned median splits of the standardized originals into blocks: node ``i`` sends a row
    left iff ``Z[dim[i]] <= threshold[i]``; a child ``< 0`` is block ``-1 - child``."""

    dim: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    n_blocks: int

    def route(self, Z):
        """Block of every row of ``Z`` (a deterministic function of the row's values)."""
        return linkage.route_cells(np.ascontiguousarray(Z, dtype=np.float64), self.dim, self.threshold, self.left,
                                   self.right)


def link_partition(Zs, fraction, block_rows):
    """A :class:`LinkPartition` shaped on the sample ``Zs`` (drawn with probability ``fraction``): a
    cell is split at the median of its widest coordinate until it holds about ``block_rows`` originals.
    Axis-aligned cells have disjoint bounding boxes, so a record near one block is rarely near many."""
    dims, thresholds, lefts, rights = [], [], [], []
    n_blocks = 0

    def grow(idx):
        nonlocal n_blocks
        if len(idx) / fraction > block_rows and len(idx) >= 2 * MIN_BLOCK_SAMPLE:
            cell = Zs[idx]
            spread = cell.max(axis=0) - cell.min(axis=0)
            for dim in np.argsort(-spread, kind="stable"):
                if not spread[dim] > 0.0:
                    break
                threshold = float(np.median(cell[:, dim]))
                go_left = cell[:, dim] <= threshold
                if MIN_BLOCK_SAMPLE <= go_left.sum() <= len(idx) - MIN_BLOCK_SAMPLE:
                    node = len(thresholds)
                    dims.append(int(dim))
                    thresholds.append(threshold)
                    lefts.append(0)
                    rights.append(0)
                    lefts[node] = grow(idx[go_left])
                    rights[node] = grow(idx[~go_left])
                    return node
        n_blocks += 1
        return -n_blocks

    grow(np.arange(Zs.shape[0]))
    return LinkPartition(np.array(dims, dtype=np.int64), np.array(thresholds, dtype=np.float64),
                         np.array(lefts, dtype=np.int64), np.array(rights, dtype=np.int64), n_blocks)


class _LinkJob(NamedTuple):
    """What every linkage task needs (shipped once per worker); ``queries``: ``(seed, threshold)`` of
    the sample of masked records whose links are searched, or None (all)."""

    mean: np.ndarray
    std: np.ndarray
    columns: np.ndarray
    partition: LinkPartition
    queries: tuple | None = None


class _Block(NamedTuple):
    """A block's kd-tree, and where each of its originals (by row id, ascending) sits in the tree."""

    tree: metrics.LinkTree
    row_id: np.ndarray
    position: np.ndarray


class _Home(NamedTuple):
    """The masked records routed to a block: their row ids, distinct tuple of each, distance to their
    own original, sampling unit of each (:func:`query_sample`; zeros when every record is searched);
    the distinct tuples (queries) and their round-1 links against the block."""

    row_id: np.ndarray
    codes: np.ndarray
    own_distance: np.ndarray
    unit: np.ndarray
    queries: np.ndarray
    links: metrics.Links


class Linked(NamedTuple):
    """Final links of the masked records routed to one block (``row_id`` their global positions,
    ``unit`` the sampling unit of each: the hash of its whole masked tuple)."""

    row_id: np.ndarray
    distance: np.ndarray
    count: np.ndarray
    own: np.ndarray
    queries: int
    second_round: int
    unit: np.ndarray


def _by_block(n_blocks, block, *arrays):
    """``arrays`` cut by ``block`` into ``n_blocks`` lists of pieces, rows in their order."""
    bounds, order = groups.group_members(np.ascontiguousarray(block, dtype=np.int64), n_blocks)
    return [tuple(a[order[s:e]] for a in arrays) for s, e in zip(bounds[:-1], bounds[1:])]


def _links_routed(pair, job):
    """A piece's originals and its masked records searched, each with the block containing it: ``(blocks,
    row ids, standardized tuples)`` and ``(blocks, row ids, standardized tuples, distance to their own
    original, sampling unit)``."""
    pair = pair.loaded()
    cols = job.columns
    Z = np.ascontiguousarray(kernels.standardize(pair.X, job.mean, job.std)[:, cols])
    row_id = np.arange(pair.start, pair.start + Z.shape[0], dtype=np.int64)
    Xm, masked_id = pair.Xm, row_id
    unit = np.zeros(len(row_id), dtype=np.uint64)
    if job.queries is not None:  # the masked records of the sampled tuples only (see query_sample)
        seed, threshold = job.queries
        unit = kernels.row_hashes(pair.Xm, seed)
        searched = unit < threshold
        Xm, masked_id, unit = Xm[searched], row_id[searched], unit[searched]
    Zm = np.ascontiguousarray(kernels.standardize(Xm, job.mean, job.std)[:, cols])
    own = linkage.paired_distances(np.ascontiguousarray(Z[masked_id - pair.start]), Zm)
    return (job.partition.route(Z), row_id, Z), (job.partition.route(Zm), masked_id, Zm, own, unit)


def _route_links(pair, job):
    """A piece's originals (row id, standardized tuple) to the block containing each, and its masked
    records (row id, standardized tuple, distance to their own original, sampling unit) to the block
    containing each: two lists of ``n_blocks`` pieces."""
    (to_o, *originals), (to_m, *masked) = _links_routed(pair, job)
    nb = job.partition.n_blocks
    return _by_block(nb, to_o, *originals), _by_block(nb, to_m, *masked)


def _route_links_to_file(pair, job, path):
    """:func:`_route_links` into two files cut by block (:func:`pipeline.transit.write_rows`), the originals'
    and the masked records': their :class:`pipeline.transit.Written`."""
    (to_o, *originals), (to_m, *masked) = _links_routed(pair, job)
    nb = job.partition.n_blocks
    return (transit.write_rows(f"{path}-originals", to_o, nb, originals),
            transit.write_rows(f"{path}-masked", to_m, nb, masked))


def _read_block(bundles, side, b, empty):
    """Block ``b``'s rows in the routing tasks' files (``side`` 0: originals, 1: masked records; None: the
    tasks wrote one file each), or ``empty``."""
    arrays = transit.read_key([written if side is None else written[side] for bundle in bundles
                               for written in bundle], b)
    return empty if arrays is None else arrays


def _block_tree(width, *pieces):
    """The kd-tree of one block's originals, duplicate tuples collapsed into weighted points."""
    row_id = np.concatenate([np.empty(0, np.int64)] + [p[0] for p in pieces])
    Z = np.concatenate([np.empty((0, width))] + [p[1] for p in pieces])
    return _tree_of(row_id, Z)


def _tree_of(row_id, Z):
    codes, first = metrics._row_codes(Z)
    tree = metrics.build_link_tree(Z[first], weights=np.bincount(codes, minlength=len(first)))
    position = np.empty(len(first), dtype=np.int64)
    position[tree.ids] = np.arange(len(first))  # tree.ids: the distinct tuples, in tree order
    order = np.argsort(row_id, kind="stable")
    return _Block(tree, row_id[order], position[codes[order]])


class _FiledBlock(NamedTuple):
    """A :class:`_Block` in a file (its tree's arrays, row ids and positions), and its box."""

    stored: object  # pipeline.transit.Stored
    lo: np.ndarray
    hi: np.ndarray


def _block_tree_read(width, b, path, *bundles):
    """:func:`_block_tree` of block ``b``'s originals in the routing tasks' files, itself written to ``path``."""
    block = _tree_of(*_read_block(bundles, 0, b, (np.empty(0, np.int64), np.empty((0, width)))))
    return _FiledBlock(transit.store(path, [*block.tree, block.row_id, block.position]), *_box(block))


def _in_memory(block):
    """A :class:`_Block`, read back from its file if it is a :class:`_FiledBlock`."""
    if not isinstance(block, _FiledBlock):
        return block
    arrays = transit.load(block.stored)
    return _Block(metrics.LinkTree(*arrays[:-2]), arrays[-2], arrays[-1])


def _box(block):
    lo, hi = (block.lo, block.hi) if isinstance(block, _FiledBlock) else block.tree.box
    return lo.copy(), hi.copy()


def _home(width, block, *pieces):
    """Round 1: each distinct masked tuple routed here, searched in this block within the distance of
    the nearest own original of its records (a bound attained by an original somewhere). The searches
    run in the tree order of the records' own originals (those in this block; the others last): measured
    twice as fast as in row order on a block of 125,000 records, the tree's memory being read in order."""
    row_id = np.concatenate([np.empty(0, np.int64)] + [p[0] for p in pieces])
    Zm = np.concatenate([np.empty((0, width))] + [p[1] for p in pieces])
    own = np.concatenate([np.empty(0)] + [p[2] for p in pieces])
    unit = np.concatenate([np.empty(0, np.uint64)] + [p[3] for p in pieces])
    return _home_of(_in_memory(block), row_id, Zm, own, unit)


def _home_read(width, block, b, *bundles):
    """:func:`_home` of block ``b``'s masked records in the routing tasks' files."""
    empty = (np.empty(0, np.int64), np.empty((0, width)), np.empty(0), np.empty(0, np.uint64))
    return _home_of(_in_memory(block), *_read_block(bundles, 1, b, empty))


def _home_of(block, row_id, Zm, own, unit):
    codes, first = metrics._row_codes(Zm)
    at = np.minimum(np.searchsorted(block.row_id, row_id), max(len(block.row_id) - 1, 0))
    here = block.row_id[at] == row_id if len(block.row_id) else np.zeros(len(row_id), dtype=bool)
    key = np.full(len(first), np.iinfo(np.int64).max)
    np.minimum.at(key, codes[here], block.position[at[here]])
    order = np.argsort(key, kind="stable")
    rank = np.empty(len(first), dtype=np.int64)
    rank[order] = np.arange(len(first))
    codes = rank[codes]
    seed = np.full(len(first), np.inf)
    np.minimum.at(seed, codes, own)
    queries = np.ascontiguousarray(Zm[first[order]])
    links = metrics.query_links(block.tree, queries, np.full(len(first), -1, dtype=np.int64), seed)
    return _Home(row_id, codes, own, unit, queries, links)


def _asks(home, b_self, lo, hi):
    """Round 2: the other blocks whose box (``lo[b]``, ``hi[b]``) is no farther than the best distance so far
    of some query, and those queries: ``[(block, indices)]``."""
    out = []
    if len(home.queries):
        for b in range(len(lo)):
            if b != b_self:
                idx = np.flatnonzero(metrics.box_lower_bounds(home.queries, lo[b], hi[b]) <= home.links.distance)
                if len(idx):
                    out.append((b, idx))
    return out


def _send(home, b_self, lo, hi):
    """Round 2 requests (:func:`_asks`), one list per block: ``[(home, indices, queries, bounds)]`` to each
    block asked, ``[]`` to the others."""
    out = [[] for _ in range(len(lo))]
    for b, idx in _asks(home, b_self, lo, hi):
        out[b].append((b_self, idx, home.queries[idx], home.links.distance[idx]))
    return out


def _send_to_file(home, b_self, lo, hi, path):
    """:func:`_send` into one file cut by the block asked (:func:`pipeline.transit.write_rows`): per request
    the asking block, the query's index, the query and its bound."""
    asks = _asks(home, b_self, lo, hi)
    idx = np.concatenate([np.empty(0, np.int64)] + [i for _, i in asks])
    asked = np.repeat(np.array([b for b, _ in asks], dtype=np.int64), [len(i) for _, i in asks])
    return transit.write_rows(path, asked, len(lo), [np.full(len(idx), b_self, dtype=np.int64), idx,
                                                     home.queries[idx], home.links.distance[idx]])


def _flat(lists):
    """Lists concatenated: the merge of round 2's exchanges, whose pieces are lists."""
    return [x for part in lists for x in part]


def _answer(block, b_self, n_blocks, *requests):
    """Round 2 in one block: every request it received answered (within its bound), in one query; the
    answers go back as one list per asking block: ``[(this block, indices, Links)]``."""
    asks = _flat(requests)
    out = [[] for _ in range(n_blocks)]
    if not asks:
        return out
    links = _answered(block, np.concatenate([a[2] for a in asks]), np.concatenate([a[3] for a in asks]))
    at = 0
    for home, idx, _, _ in asks:
        m = len(idx)
        out[home].append((b_self, idx, metrics.Links(*(f[at:at + m] for f in links))))
        at += m
    return out


def _answered(block, queries, bounds):
    """The :class:`metrics.Links` of ``queries`` in a block, each searched within its bound."""
    return metrics.query_links(_in_memory(block).tree, queries, np.full(len(bounds), -1, dtype=np.int64), bounds)


def _answer_read(block, b_self, n_blocks, path, *bundles):
    """:func:`_answer` of the requests to block ``b_self`` in the asking blocks' files (in their order), into
    one file cut by asking block (:func:`pipeline.transit.write_rows`): per answer this block, the query's
    index, its distance and count."""
    width = block.lo.shape[0]
    home, idx, queries, bounds = _read_block(bundles, None, b_self, (np.empty(0, np.int64), np.empty(0, np.int64),
                                                                     np.empty((0, width)), np.empty(0)))
    links = _answered(block, queries, bounds) if len(idx) else metrics.no_links(0)
    return transit.write_rows(path, home, n_blocks, [np.full(len(idx), b_self, dtype=np.int64), idx,
                                                     links.distance, links.count])


def _finish_read(home, h, *bundles):
    """:func:`_finish` of the answers to block ``h`` in the answering blocks' files (in block order)."""
    block, idx, distance, count = _read_block(bundles, None, h, (np.empty(0, np.int64), np.empty(0, np.int64),
                                                                 np.empty(0), np.empty(0, np.int64)))
    ends = np.concatenate([[0], np.flatnonzero(np.diff(block)) + 1, [len(block)]]) if len(block) else [0]
    return _finish(home, [(int(block[a]), idx[a:b], metrics.Links(distance[a:b], count[a:b], np.zeros(b - a, bool)))
                          for a, b in zip(ends[:-1], ends[1:])])


def _finish(home, *replies):
    """Merge round 2 into round 1 (:func:`metrics.combine_links`: the blocks are disjoint) and spread the
    distinct tuples' answers over their records; a record's own original is among its nearest iff its
    distance equals the best (the distances are computed identically everywhere)."""
    distance = home.links.distance.copy()
    count = home.links.count.copy()
    visits = 0
    for _, idx, links in sorted(_flat(replies), key=lambda reply: reply[0]):  # in block order
        current = metrics.Links(distance[idx], count[idx], np.zeros(len(idx), dtype=bool))
        merged = metrics.combine_links(current, links)
        distance[idx] = merged.distance
        count[idx] = merged.count
        visits += len(idx)
    best = distance[home.codes]
    return Linked(home.row_id, best, count[home.codes], home.own_distance == best, len(home.queries), visits,
                  home.unit)


def _credits(linked, sampled):
    """What the report needs of a block's links: the own-linked records and their tie counts, the
    block's distinct queries, second-round searches and masked records searched, and for a sample
    the credit ``c_t`` and records ``m_t`` of each of its sampling units (whole masked tuples: the
    records of one all come to the same block, whatever the known attributes)."""
    own = linked.own
    tuples = None
    if sampled:
        unit = pd.factorize(linked.unit)[0]
        tuples = (np.bincount(unit, weights=np.where(own, 1.0 / np.maximum(linked.count, 1), 0.0)),
                  np.bincount(unit).astype(np.float64))
    return linked.row_id[own], linked.count[own], linked.queries, linked.second_round, len(linked.row_id), tuples


def _pair_sample(pair, seed, threshold):
    X = pair.matrix(1)
    if threshold is None:
        return X
    row_id = np.arange(pair.start, pair.start + X.shape[0], dtype=np.int64)
    return X[kernels.sample_mask(row_id, seed, threshold)]


def draw_sample(pairs, n_rows, block_rows, seed):
    """``(fraction, raw original QIs of the sample rows)``: rows chosen by hashing their row id with the
    seed (as the release pipeline samples), so the blocks do not depend on the partitioning."""
    fraction, threshold = sample_plan(n_rows, block_rows)
    parts = dask.compute(*[delayed(_pair_sample, pure=True)(p, seed, threshold) for p in pairs])
    return fraction, np.concatenate(parts)


def query_sample(n_rows, records, seed):
    """``(seed, threshold)`` of the deterministic sample of about ``records`` masked records whose links
    are searched, or None: every record (``records`` None, or at least ``n_rows``).

    The sample is one of distinct masked tuples (a tuple is in it when :func:`kernels.row_hashes` of its
    values and ``seed ^``:data:`QUERY_SALT` falls below the threshold, each with probability ``records /
    n_rows``, whatever its position), and takes every record of a sampled tuple: the search costs one
    query per tuple, so a record sample of a k-anonymous release would cost about k times more
    searches for the same records. Records of one tuple share their links, and at most a few of them
    are linked to their own original, so a tuple's credit varies less than its records' do."""
    if records is None:
        return None
    fraction, threshold = sample_plan(n_rows, 1, records)
    return None if threshold is None else (int(seed) ^ QUERY_SALT, threshold)


def record_linkage(pairs, mean, std, columns, sample, block_rows=BLOCK_ROWS, queries=None, directory=None):
    """The distributed, exact record linkage of one known set: a list of delayed :class:`Linked` (one per
    block; every masked record searched in exactly one) and the :class:`LinkPartition`. ``queries``:
    :func:`query_sample`'s sample of the masked records to search, or None (all); the originals are
    always all of them, so a sampled record's links are exact.

    Scheme. A split tree shaped on a deterministic sample of the standardized originals
    (:func:`link_partition`) cuts the originals into blocks; each block's task builds one kd-tree
    (:func:`metrics.build_link_tree`, duplicates collapsed). Every masked record is routed by the same
    tree to the block containing it (its *home*), where each distinct masked tuple is searched within the
    distance ``s`` to its records' nearest own original (round 1). The home then asks every other block
    whose bounding box (:func:`metrics.box_lower_bounds`) is no farther than the round-1 best ``b``
    (``<=``: an original at exactly ``b`` changes the count); that block searches within ``b`` (round 2),
    and the answers are merged with :func:`metrics.combine_links`.

    ``directory``: a scratch directory of this known set's own (a large evaluation's; :func:`scratch_directory`):
    the routing tasks write their rows there, cut by block (:func:`pipeline.transit.write_rows`), which the block
    and home tasks read; each block task writes its tree there, which the tasks that search it read back; round
    2's requests and answers go through files there too, one per block, instead of two all-to-all exchanges
    (at 100M rows, 1,024 blocks: 137,000 tasks, which took the scheduler most of the round's 265 s and up to
    3.6 GiB). The routed rows' files are removed once the blocks and homes are persisted; the others stay
    until the caller removes the directory, after :func:`dld_of`.

    The graph. Blocks and homes are persisted after round 1 and the blocks' boxes collected (small
    arrays). The rows reach the blocks, round 2's requests the blocks and its answers the homes, through
    :meth:`pipeline.graph.Layer.exchange`: past 4,096 pieces in two levels, so 128 blocks (10M rows)
    make about 3,000 tasks per exchange instead of 16,384 (in 13 dimensions a home asks most other
    blocks: 12,246 of the 16,256 pairs at 10M rows).

    Exactness. Let ``g`` be the true smallest distance (as the kernels compute it: the same operations
    in the same order everywhere, so a distance does not depend on the block). ``g <= s`` (the own
    original is at ``s``) and round 1 gives ``b`` with ``g <= b <= s``. Every block holding an original at
    ``g`` either is the home (searched within ``s >= g``) or has a box bound ``<= g <= b`` and is searched
    in round 2 within ``b >= g``; a search within a bound ``>= g`` finds and counts every original at
    ``g`` (the kernels never prune a box or a partial sum that is ``<= g``). Blocks with nothing within
    their bound answer ``(bound, 0)``, which the merge ignores (or adds 0 to) since ``bound >= g``. So the
    merged answer is ``g`` and the exact number of originals at ``g``, whatever the blocks: one extra
    round always suffices. ``own`` is decided as in :func:`metrics.record_linkage` (own distance ``==
    g``), so the links, and the DLD summed over them in row order, equal :func:`metrics.dld`'s bit for bit.
    """
    columns = np.asarray(columns, dtype=np.int64)
    width = len(columns)
    Zs = np.ascontiguousarray(kernels.standardize(np.ascontiguousarray(sample[1]), mean, std)[:, columns])
    partition = link_partition(Zs, sample[0], block_rows)
    nb = partition.n_blocks
    job = delayed(_LinkJob(mean, std, columns, partition, queries), name=f"microagg-linkjob-{uuid.uuid4().hex}")
    layer = graph.Layer("microagg-linkage")
    if directory:  # through files: the rows routed, cut by block, and the blocks' trees
        routed = [layer.task(("route", i), _route_links_to_file, p, job, os.path.join(directory, f"routed-{i}"))
                  for i, p in enumerate(pairs)]
        bundles = layer.bundles("routed", routed, kept=False)
        blocks = [layer.task(("block", b), _block_tree_read, width, b, os.path.join(directory, f"{BLOCK_FILE}{b}"),
                             *bundles) for b in range(nb)]
        homes = [layer.task(("home", b), _home_read, width, blocks[b], b, *bundles) for b in range(nb)]
    else:
        routed = [layer.task(("route", i), _route_links, p, job) for i, p in enumerate(pairs)]
        originals = layer.exchange("originals", [layer.item(r, 0) for r in routed], nb, graph.concatenate_fields)
        masked = layer.exchange("masked", [layer.item(r, 1) for r in routed], nb, graph.concatenate_fields)
        blocks = [layer.task(("block", b), _block_tree, width, *originals[b]) for b in range(nb)]
        homes = [layer.task(("home", b), _home, width, blocks[b], *masked[b]) for b in range(nb)]
    blocks, homes = persisted(layer.delayed(blocks), layer.delayed(homes))
    if directory:  # the routed rows are in the blocks and homes
        transit.remove_files(directory, keep=BLOCK_FILE)
    boxes = dask.compute(*[delayed(_box, pure=True)(block) for block in blocks])
    lo, hi = np.array([box[0] for box in boxes]), np.array([box[1] for box in boxes])
    second = graph.Layer("microagg-linkage-round-2")
    if directory:  # through files: the requests cut by block asked, the answers by block asking
        sends = [second.task(("send", h), _send_to_file, homes[h], h, lo, hi,
                             os.path.join(directory, f"{REQUESTS_FILE}{h}")) for h in range(nb)]
        requests = second.bundles("requests", sends, kept=False)
        answers = [second.task(("answer", b), _answer_read, blocks[b], b, nb,
                               os.path.join(directory, f"{REPLIES_FILE}{b}"), *requests) for b in range(nb)]
        replies = second.bundles("replies", answers, kept=False)
        finals = [second.task(("finish", h), _finish_read, homes[h], h, *replies) for h in range(nb)]
    else:
        sends = [second.task(("send", h), _send, homes[h], h, lo, hi) for h in range(nb)]
        requests = second.exchange("requests", sends, nb, _flat)
        answers = [second.task(("answer", b), _answer, blocks[b], b, nb, *requests[b]) for b in range(nb)]
        replies = second.exchange("replies", answers, nb, _flat)
        finals = [second.task(("finish", h), _finish, homes[h], *replies[h]) for h in range(nb)]
    return second.delayed(finals), partition


class Linkage(NamedTuple):
    """:func:`dld_of`'s summary of one known set: the DLD (percent) over the ``records`` searched, its
    95 % interval (None when every record was searched: the DLD is then exact), the distinct queries
    and the second-round searches."""

    dld: float
    records: int
    interval: tuple | None
    queries: int
    second_round: int


def dld_of(finals, n_rows, sampled=False):
    """:class:`Linkage` from :func:`record_linkage`'s blocks: the credits of the own-linked records,
    summed over all records in row order exactly as :func:`metrics.dld_from_links` sums them (a record
    not searched credits nothing) and divided by the records searched.

    For a sample (:func:`query_sample`: whole masked tuples, the sampling units, drawn independently
    with probability ``f``), the DLD is the ratio ``R = sum c_t / sum m_t`` over the sampled units
    (credits ``c_t``, records ``m_t``), and its interval the normal one of the linearized ratio under
    Poisson sampling: ``Var(R) = (1 - f) sum (c_t - R m_t)^2 / (sum m_t)^2``
    (Sarndal, Swensson and Wretman, 1992, Model Assisted Survey Sampling, section 5.6), its sums
    correctly rounded (``math.fsum``), so that it does not depend on how the tuples fell into blocks.
    ``sampled``: whether :func:`record_linkage` searched a sample (the tuples' credits are then
    collected)."""
    found = dask.compute(*[delayed(_credits, pure=True)(f, sampled) for f in finals])
    row_id = np.concatenate([np.empty(0, np.int64)] + [f[0] for f in found])
    credit = 1.0 / np.maximum(np.concatenate([np.empty(0, np.int64)] + [f[1] for f in found]), 1)
    records = sum(f[4] for f in found)
    dld = 100.0 * credit_sum(row_id, credit, n_rows) / records if records else 0.0
    del row_id, credit
    interval = None
    if sampled and records < n_rows:
        credit = np.concatenate([f[5][0] for f in found])
        tuple_records = np.concatenate([f[5][1] for f in found])
        residual = credit - dld / 100.0 * tuple_records
        squares = math.fsum((residual * residual).tolist())
        half = 100.0 * 1.959963984540054 * math.sqrt((1.0 - records / n_rows) * squares) / max(records, 1)
        interval = (max(dld - half, 0.0), min(dld + half, 100.0))
    return Linkage(dld, records, interval, sum(f[2] for f in found), sum(f[3] for f in found))


def credit_sum(row_id, credit, n_rows, piece_rows=None):
    """The sum of ``n_rows`` credits, ``credit`` at the rows ``row_id`` (distinct) and zero elsewhere, bit for bit
    as NumPy sums the whole array (:func:`metrics.dld_from_links`), without making it (8 bytes a row: 0.8 GB at
    100M rows): NumPy's pairwise summation cuts an array in two halves, the first a multiple of 8 long, until a
    half is short; the same halves are followed here down to ``piece_rows`` (default :data:`CREDIT_ROWS`), and
    each is made and summed by NumPy."""
    piece_rows = CREDIT_ROWS if piece_rows is None else piece_rows
    order = np.argsort(row_id, kind="stable")
    row_id, credit = row_id[order], credit[order]

    def total(start, n):
        if n > piece_rows:
            half = n // 2 - (n // 2) % 8
            return total(start, half) + total(start + half, n - half)
        a, b = np.searchsorted(row_id, [start, start + n])
        piece = np.zeros(n)
        piece[row_id[a:b] - start] = credit[a:b]
        return float(np.add.reduce(piece))

    return total(0, n_rows)


def links_in_row_order(finals, n_rows):
    """:class:`metrics.Links` of every masked record, in row order (collects O(n) arrays: for tests
    and small data)."""
    found = dask.compute(*finals)
    distance = np.empty(n_rows)
    count = np.empty(n_rows, dtype=np.int64)
    own = np.empty(n_rows, dtype=bool)
    for f in found:
        distance[f.row_id], count[f.row_id], own[f.row_id] = f.distance, f.count, f.own
    return metrics.Links(distance, count, own)


# --- the driver ------------------------------------------------------------------------------------------------


class Prepared(NamedTuple):
    """Validated, counted and aligned inputs."""

    qi: list
    scenarios: list
    shared: list
    n_rows: int
    mean: np.ndarray
    std: np.ndarray
    pairs: list
    lo: np.ndarray | None = None  # each QI's minimum and maximum over both files
    hi: np.ndarray | None = None


def prepare(original, masked, qi, k=None, known=(), id_percent=metrics.ID_PERCENT, piece_rows=PIECE_ROWS,
            timings=None, changed=(), directory=None, columnar=False):
    """Stages 1-3: plan, statistics, aligned pieces (persisted; their QIs in files under ``directory`` if
    given: :func:`scratch_directory`). ``columnar``: both files are read a column at a time (Parquet): each
    partition's rows are counted from one column and the QIs read once, by the aligned pieces, which also sum
    them (:func:`pair_statistics`), instead of a statistics pass over both files before them (3 of the 10M
    evaluation's 45 s, BENCHMARKS.md, sixty-seventh session)."""
    timings = timings or Timings()
    with timings.stage("validate"):
        qi, scenarios, shared = plan(original, masked, qi, k, known, id_percent, changed)
    if columnar:
        with timings.stage("align"):
            lengths_o, lengths_m = partition_lengths(original, masked, qi[0])
            pairs = align(parts_of(original[qi + shared]), parts_of(masked[qi + shared]), lengths_o, lengths_m, qi,
                          shared, piece_rows, directory, sums=True)
        with timings.stage("statistics"):
            mean, std, lo, hi = pair_statistics(pairs, qi)
        return Prepared(qi, scenarios, shared, int(sum(lengths_o)), mean, std, pairs, lo, hi)
    with timings.stage("statistics"), io.first_pass():  # a CSV column changing type: CSVTypeChange
        original_parts = original[qi + shared].to_delayed()
        masked_parts = masked[qi + shared].to_delayed()
        if directory is None:
            # both files read once and kept until aligned: every pass sees the same partitions (a local
            # scheduler reads them here, a cluster in the statistics' compute)
            original_parts = list(persisted(*original_parts))
            masked_parts = list(persisted(*masked_parts))
        # else read twice, here and by the aligned pieces, each partition held only until its pieces are in files
        lengths_o, lengths_m, mean, std, lo, hi = column_statistics(original_parts, masked_parts, qi)
    with timings.stage("align"):
        pairs = align(original_parts, masked_parts, lengths_o, lengths_m, qi, shared, piece_rows, directory)
        del original_parts, masked_parts
    return Prepared(qi, scenarios, shared, int(sum(lengths_o)), mean, std, pairs, lo, hi)


@contextmanager
def scratch_directory(rows, width):
    """A scratch directory for an evaluation of ``rows`` rows of ``width`` QIs, removed on exit, or None: the
    rule of the release's rows in transit (:func:`pipeline.release.transit_directory`), for what an evaluation
    in memory holds (:data:`HELD` times both files' QIs, 16 bytes a row and QI: 5.2 GB at 10M rows x 13 QIs).
    Through it go the aligned pieces' QIs (:class:`Pair`), read by every pass, the interval disclosure's
    records and bucket summaries (:func:`pipeline.columns.interval_hits`), the class count's distinct tuples
    (:func:`class_sizes`) and each linkage's routed rows, block trees and round-2 requests and answers
    (:func:`record_linkage`): the worker's memory no longer holds the files. None without ``rows`` (a library
    caller's DataFrames of unknown length). Its disk must have :data:`SCRATCH_ROOM` times the QIs' size free."""
    with transit_directory(rows or 0, 2 * width, rows is not None, "both files' QIs", SCRATCH_ROOM, HELD) as path:
        yield path


def _linkage_directory(directory, scenario):
    """A subdirectory of ``directory`` for one known set's linkage (None without ``directory``)."""
    if directory is None:
        return None
    path = os.path.join(directory, f"linkage-{scenario}")
    os.mkdir(path)
    return path


def evaluate(original, masked, qi, k=None, known=(), id_percent=metrics.ID_PERCENT, *, quantiles=metrics.QUANTILES,
             block_rows=BLOCK_ROWS, piece_rows=PIECE_ROWS, seed=0, dld_records=None, changed=(), timings=None,
             rows=None, columnar=False):
    """Utility and disclosure risk of ``masked`` as a release of ``original`` (Dask DataFrames, rows
    corresponding by position), on the active Dask client or scheduler. Returns the report (see the
    module docstring).

    Parameters
    ----------
    original, masked : dask.dataframe.DataFrame
    qi : quasi-identifier names (a list or ``"A,B,C"``), present and numeric in both
    k : the k to check k-anonymity of the released QI tuples against (optional)
    known : sets of QIs the intruder may know (each a list or ``"A,B"``); the DLD and ID are also
        reported for each (all QIs always)
    id_percent : ``p`` of the rank-based interval disclosure (or a sequence, averaged)
    quantiles : levels of the per-attribute quantiles
    block_rows : originals per record-linkage block (smaller: more, smaller tasks)
    piece_rows : largest aligned piece
    seed : seed of the sample that shapes the linkage blocks (the results do not depend on it) and of
        the sample of masked records searched
    dld_records : None: the links of every masked record are searched (the exact DLD); a number: of
        about that many, a deterministic sample (:func:`query_sample`), each record's links exact and
        the DLD their mean credit, reported with its 95 % interval
    changed : non-QI columns the release changes on purpose (hashed identifiers): not compared, listed
        under ``checks.not_compared``
    timings : a :class:`pipeline.release.Timings` to add the stage times to
    rows : the files' row count, when known before reading them (Parquet footers, a release's rows): with
        it, a large evaluation keeps both files' QIs in files, not in memory (:func:`scratch_directory`)
    columnar : both are read a column at a time (Parquet files): the QIs are read once (:func:`prepare`)
    """
    timings = timings or Timings()
    quantiles = tuple(float(q) for q in quantiles)
    if block_rows < 1 or piece_rows < 1:
        raise InputError(f"block and piece rows must be >= 1, got {block_rows} and {piece_rows}")
    if dld_records is not None and dld_records < 1:
        raise InputError(f"the records searched for the DLD must be >= 1 (or all), got {dld_records}")
    with scratch_directory(rows, len(_names(qi, "--qi"))) as directory:
        return _evaluated(original, masked, qi, k, known, id_percent, quantiles, block_rows, piece_rows, seed,
                          dld_records, changed, timings, directory, columnar)


def _evaluated(original, masked, qi, k, known, id_percent, quantiles, block_rows, piece_rows, seed, dld_records,
               changed, timings, directory, columnar=False):
    """:func:`evaluate`'s work, its pieces' QIs in files under ``directory`` if given."""
    from .. import __version__
    from . import report as report_page

    prep = prepare(original, masked, qi, k, known, id_percent, piece_rows, timings, changed, directory, columnar)
    qi, pairs, n, d = prep.qi, prep.pairs, prep.n_rows, len(prep.qi)
    ps = [float(p) for p in np.atleast_1d(np.asarray(id_percent, dtype=np.float64))]
    with timings.stage("columns"):
        rates, q_original, q_masked = columns.column_measures(pairs, d, n, ps, quantiles, directory=directory)
    with timings.stage("information loss"):
        edges = report_page.histogram_edges(prep.lo, prep.hi)
        loss, differing, (m, counts_x, counts_m) = information_loss(pairs, qi, prep.std, quantiles, q_original,
                                                                     q_masked, edges)
    with timings.stage("classes"):
        summary = metrics.class_size_summary(class_sizes(pairs, d, directory))
    scenarios = []
    with timings.stage("linkage"):
        sample = draw_sample(pairs, n, block_rows, seed)
        queries = query_sample(n, dld_records, seed)
        for scenario, cols in enumerate(prep.scenarios):
            start = time.perf_counter()
            links = _linkage_directory(directory, scenario)
            finals, partition = record_linkage(pairs, prep.mean, prep.std, cols, sample, block_rows, queries, links)
            linked = dld_of(finals, n, queries is not None)
            if links:  # its blocks' trees
                shutil.rmtree(links, ignore_errors=True)
            seconds = time.perf_counter() - start
            log.info("DLD over %d column(s): %.4f %% (%d of %d records searched; %d blocks, %d distinct queries, "
                     "%d second-round) in %.2f s", len(cols), linked.dld, linked.records, n, partition.n_blocks,
                     linked.queries, linked.second_round, seconds)
            scenarios.append({
                "columns": [qi[j] for j in cols],
                "dld": linked.dld,
                "dld_records": linked.records,
                "dld_interval": linked.interval,
                "id": float(rates[list(cols)].mean()),
                "linkage": {"blocks": partition.n_blocks, "distinct_queries": int(linked.queries),
                            "second_round_queries": int(linked.second_round), "seconds": round(seconds, 4)},
            })
    dld_all, id_all = scenarios[0]["dld"], scenarios[0]["id"]
    small = None
    if k is not None:
        sizes_small = sum(int(size) * count for size, count in summary["histogram"].items() if size < k)
        small = {"k": int(k), "rows_in_small_classes": sizes_small, "passed": sizes_small == 0}
    unchanged = dict(zip(prep.shared, (int(v) for v in np.atleast_1d(differing)))) if prep.shared else {}
    report = {
        "rows": n,
        "qi": qi,
        "k": None if k is None else int(k),
        "known": [[qi[j] for j in cols] for cols in prep.scenarios[1:]],
        "statistics": {"mean": prep.mean.tolist(), "std": prep.std.tolist()},
        "information_loss": loss,
        "disclosure_risk": {
            "dld": dld_all,
            "dld_records": scenarios[0]["dld_records"],
            "dld_interval": scenarios[0]["dld_interval"],
            "id": id_all,
            "dr": metrics.disclosure_risk(dld_all, id_all),
            "id_percent": ps[0] if len(ps) == 1 else ps,
            "id_per_attribute": dict(zip(qi, rates.tolist())),
            "scenarios": scenarios,
        },
        "score": metrics.score(loss["family"]["IL"], dld_all, id_all),
        "anonymity": {"k_prime": summary["k_prime"], "classes": summary["classes"],
                      "min_class_size": summary["min"], "class_sizes": summary["histogram"],
                      "records": summary["records"]},
        "checks": {
            "rows": {"original": n, "masked": n, "match": True},
            "k_anonymity": small,
            "unchanged_columns": unchanged,
            "not_compared": [c for c in original.columns if c in set(masked.columns) and c not in qi
                             and c not in prep.shared],
            "columns_only_in_original": [c for c in original.columns if c not in set(masked.columns)],
            "columns_only_in_masked": [c for c in masked.columns if c not in set(original.columns)],
            "passed": (small is None or small["passed"]) and not any(unchanged.values()),
        },
        "pieces": len(pairs),
        "aligned_pieces": "memory" if directory is None else "files",
        "timings": timings.seconds,
        "version": __version__,
        # the page's plots (pipeline/report.py): the same dict as report.summary_data of both files
        "summary": report_page.summary_from(qi, m, edges, counts_x, counts_m, summary["histogram"], "classes",
                                            rows=n, rows_used=n),
    }
    return _json_safe(report)


def _json_safe(value):
    """NumPy scalars as Python numbers, NaN / inf as None, dict keys as strings (strict JSON)."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_json_safe(v) for v in value.tolist()]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    return value


def row_counts_from_metadata(original_path, masked_path):
    """Refuse files of different lengths before any data is read, when both are Parquet (their footers
    hold the row counts): returns the row count, or None (CSV lengths are counted by the statistics pass)."""
    if io.resolve_input(original_path)[0] == "parquet" and io.resolve_input(masked_path)[0] == "parquet":
        rows = io.parquet_rows(original_path)
        check_rows(rows, io.parquet_rows(masked_path))
        return rows
    return None


def check_report_path(path, html=False):
    """Refuse a report path that cannot be written (and, with ``html``, one ending with ``.html``,
    where the page goes: :func:`html_path`)."""
    head = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(head):
        raise InputError(f"the directory of the report, {head!r}, does not exist")
    if os.path.isdir(path):
        raise InputError(f"the report path {path!r} is a directory; give a file name")
    if html:
        html_path(path)


def html_path(report_path):
    """Where :func:`run` writes the HTML page: beside the JSON report, its suffix replaced by ``.html``."""
    return release_html_path(None, report_path)


def write_report(path, report):
    """Write the JSON report atomically (:func:`pipeline.io.write_atomically`)."""
    text = json.dumps(report, indent=2, sort_keys=True, allow_nan=False) + "\n"
    io.write_atomically(os.path.abspath(path), text.encode("utf-8"))


def run(original_path, masked_path, qi, report_path, k=None, known=(), id_percent=metrics.ID_PERCENT, html=True,
        csv=None, text_columns=(), **options):
    """Read both files, evaluate, write the report to ``report_path``; returns the report. ``html``: also
    write it as an HTML page with the data summary's plots (:mod:`pipeline.report`) beside it
    (:func:`html_path`), before the JSON; each file is written aside and renamed into place. ``csv``:
    the dialect of the files that are CSV (:func:`pipeline.io.csv_dialect`); ``text_columns``: their
    columns read as text, as written (``--csv-text``), as are those text in one file and whole numbers
    in the other (a release keeps a CSV input's ``00123`` as text)."""
    timings = Timings()
    check_report_path(report_path, html)
    text = tuple(text_columns)
    with timings.stage("read"):
        original = io.read_input(original_path, csv=csv, text=text)
        masked = io.read_input(masked_path, csv=csv, text=text)
    with timings.stage("validate"):
        spaced = {n: c for n, c in spaced_names(original.columns).items() if c in masked.columns}
        qi, known = as_written(qi, spaced), [as_written(s, spaced) for s in known or ()]
        plan(original, masked, qi, k, known, id_percent)
        rows = row_counts_from_metadata(original_path, masked_path)
        names = set(_names(qi, "--qi"))
        shared = [c for c in original.columns if c in masked.columns and c not in names]
        integer, string = pd.api.types.is_integer_dtype, pd.api.types.is_string_dtype
        text += tuple(c for c in shared if c not in text and {integer(original[c].dtype), integer(masked[c].dtype)}
                      == {True, False} and (string(original[c].dtype) or string(masked[c].dtype)))
        floats = tuple(c for c, t in original.dtypes.items()
                       if c in shared and c not in text and pd.api.types.is_float_dtype(t))
        if floats or text != tuple(text_columns):  # floats compared exactly: a NaN released as a null differs
            original = io.read_input(original_path, csv=csv, text=text, floats=floats)
            masked = io.read_input(masked_path, csv=csv, text=text, floats=floats)
    try:
        report = evaluate(original, masked, qi, k, known, id_percent, timings=timings, rows=rows,
                          columnar=rows is not None, **options)
    except CSVTypeChange:  # in the statistics pass, the first over every row
        numbers = dict.fromkeys(_names(qi, "--qi"), "quasi-identifier")
        original, widened = io.read_retyped(original_path, numbers, csv=csv, text=text)
        masked, masked_widened = io.read_retyped(masked_path, numbers, csv=csv, text=text)
        report = evaluate(original, masked, qi, k, known, id_percent, timings=timings, rows=rows, **options)
        report["input_types_widened"] = {"original": widened, "masked": masked_widened}
    except CSVParseError as exc:  # a malformed row: name its file and line
        for path in (original_path, masked_path):
            if (located := io.locate_parse_error(path, exc, csv=csv)) is not exc:
                raise located from exc
        raise
    page = html_path(report_path) if html else None
    report.update(original=str(original_path), masked=str(masked_path), report=str(report_path), html=page)
    if page is not None:
        from .report import write_html

        write_html(page, report, report.get("summary"))
    write_report(report_path, report)
    return report
