"""Interval disclosure and quantiles of whole columns, distributed: no task holds a whole column.

The rank-based interval disclosure (:func:`metrics.interval_disclosure`) needs, for every record and
QI, the order statistics of the whole masked column at ranks ``L - h`` and ``R - 1 + h`` around the
record's masked value (``L`` / ``R``: how many masked values are smaller / not larger); the
quantiles need a few order statistics of both files' columns. Collected in one task, a column of 30M
rows and its sort (about 40 bytes per row) take most of a worker of 1.5 GiB, and that memory cannot
be spilled.

Interval disclosure, in batches of columns (at most :data:`BATCH_VALUES` records x columns each, so
that a batch's records in transit stay a bounded, spillable amount):

1. splitters: every aligned piece gives evenly spaced marks ``(value, row id)`` of each masked column;
   per column the marks, sorted by value then row id, give ``m - 1`` splitters (``m`` buckets of about
   :data:`BUCKET_ROWS` records). Ties are ordered by row id, so a value that holds much of a column
   (the zeros of a zero-inflated amount, a large class's centroid) is spread over several buckets
   instead of filling one;
2. route: each piece sends every record to the bucket of its masked value, its original value beside
   it, column by column: one all-to-all exchange (:meth:`graph.Layer.exchange`) per batch;
3. buckets: a bucket reduces each column to its *summary*, the distinct masked values and their
   counts; the client collects each bucket's size and first and last value with their counts, which
   gives every bucket's first rank and the global ranks ``L`` of its first and ``R`` of its last value
   (a value may span buckets);
4. hits: each bucket reads the order statistics it needs from the summaries of the buckets holding
   those ranks (the ranks ``L - h`` of its values form a range as long as the bucket, shifted by
   ``h``: a few buckets) and counts its records' hits.

In a large evaluation (:func:`pipeline.evaluate.scratch_directory`) steps 2-4 go through files instead of
memory: each piece writes a batch's records to one file cut by column and bucket
(:func:`pipeline.transit.write_rows`), each bucket task reads its records from every piece's file and
writes its summaries and its records' positions among them to files, and each hits task reads its own
and the summaries it needs. Nothing of the column then stays in memory, where a batch's routed records
and buckets take 16 bytes per record and column (1.6 GB for one column of 100M rows).

Quantiles of the masked file: the order statistics at the wanted ranks are read from the same
buckets' summaries (each bucket holds a known range of ranks). Quantiles of the original, by
selection: per column, value bins cut at :data:`SELECTION_BINS` marks, kept only near the ranks the marks
predict and merged elsewhere (:func:`window_bins`); one pass counts each piece's values per bin (two
searches per value, :func:`microagg.kernels.histogram.sorted_bins`), the client finds the bin holding each
wanted rank, a second pass returns the pieces' values in those bins only, and the client picks the order
statistics. A rank in a merged bin sends its column to a second round over all its bins.

Exact: the hits are those of :func:`metrics.interval_hits` over the whole sorted column, so the rates
are :func:`metrics.interval_disclosure_rates`'s; the quantiles are ``np.quantile``'s linear
interpolation (Hyndman-Fan type 7) between the same order statistics, with NumPy's arithmetic. A
negative zero counts as zero (its quantile is reported as ``0.0``).

References
----------
Domingo-Ferrer, J. and Torra, V. (2001). A quantitative comparison of disclosure control methods for
microdata. In Confidentiality, Disclosure and Data Access, Elsevier, 111-133.
``shared/papers/mic1d-one-dimension-microaggregation.txt`` section 2.3.
"""

import logging
import os
import shutil
from typing import NamedTuple

import dask
import numpy as np
import pandas as pd
from dask import delayed

from .. import kernels
from ..kernels import groups, histogram
from . import graph, metrics, transit
from .release import persisted

log = logging.getLogger(__name__)

BUCKET_ROWS = 250_000
"""Records per bucket of a column, on average (a bucket holds 16 bytes per record and column of its
batch, and the sort of its distinct values)."""
BATCH_VALUES = 40_000_000
"""Most (record, column) pairs in one batch of columns: the routed records of a batch (16 bytes each)
are in memory or spilled at once (13 QIs: 10M rows in four batches, 30M one column at a time)."""
MARKS = 256
"""Marks per piece and column for the splitters (at 10M rows: 10,240 marks for 40 buckets)."""
BATCH_DIRECTORY = "columns"
"""The subdirectory of a scratch directory that holds a batch's files (:func:`_buckets_in_files`), removed after it."""
ROUTED_FILE = "records-"
SUMMARY_FILE = "summary-"
"""Names of a batch's files: a piece's records cut by column and bucket; a bucket's summaries (and, with
``-records`` after, its records' positions and original values)."""
SELECTION_BINS = 16_384
"""Value bins per column for the quantiles' order statistics (each about ``rows / 16,384`` records,
at most the marks allow)."""
WINDOW_REACH = 4.0
"""How far to either side of a wanted rank the quantiles' first round keeps its column's bins, in standard errors
of the marks' estimate of the rank (:func:`window_bins`)."""
COARSE_STEP = 64
"""The quantiles' second round, over all of a column's bins, searches every ``COARSE_STEP``-th edge first."""


class Bucket(NamedTuple):
    """One bucket of every column of a batch (lists indexed by column): ``masked[j]`` is the summary
    ``(distinct masked values, counts)`` of the bucket; ``position[j]`` gives, for every record in it,
    the index of its masked value in ``masked[j][0]``, and ``x[j]`` its original value."""

    masked: list
    position: list
    x: list


class Ranks(NamedTuple):
    """Where the buckets of one masked column lie in its ranks (arrays over the ``m`` buckets):
    ``start`` (``m + 1``: bucket ``b`` holds ranks ``start[b] .. start[b + 1] - 1``), ``below_first``
    (how many values are smaller than the bucket's first value), ``through_last`` (how many are not
    larger than its last value)."""

    start: np.ndarray
    below_first: np.ndarray
    through_last: np.ndarray

    def bucket(self, rank):
        """The bucket holding ``rank`` (never an empty one)."""
        return int(np.searchsorted(self.start, rank, side="right") - 1)


class Plan(NamedTuple):
    """What bucket ``b``'s hits task needs, per column ``j`` of its batch: the rank of its first
    record and the global ranks of its first and last values (``masked[j]``, a triple), and the
    buckets whose summaries it reads with their first ranks (``reads[j]``: ``(bucket, start)``)."""

    masked: list
    reads: list


def piece_marks(pair):
    """About :data:`MARKS` evenly spaced ``(masked values, original values, row ids)`` of a piece (taken
    when it was aligned, if its QIs went to a file)."""
    if pair.marks is not None:
        return pair.marks
    n = pair.X.shape[0]
    at = np.arange(0, n, max(1, n // MARKS))
    return pair.Xm[at] + 0.0, pair.X[at] + 0.0, pair.start + at


def splitters(marks, n_buckets):
    """Per masked column, the ``n_buckets - 1`` splitters ``(values, row ids)``, sorted by value then
    row id, from the pieces' :func:`piece_marks`."""
    rows = np.concatenate([mk[2] for mk in marks])
    values = np.concatenate([mk[0] for mk in marks])
    cut = (np.arange(1, n_buckets) * len(rows)) // n_buckets
    out = []
    for j in range(values.shape[1]):
        order = np.lexsort((rows, values[:, j]))[cut]
        out.append((values[order, j], rows[order]))
    return out


def bucket_of(values, rows, split):
    """The bucket of every ``(value, row id)``: how many splitters are not larger (value first), by
    :func:`microagg.kernels.pair_buckets` (finite values: the evaluation refuses others)."""
    split_values, split_rows = split
    return kernels.pair_buckets(np.ascontiguousarray(values, dtype=np.float64),
                                np.ascontiguousarray(rows, dtype=np.int64),
                                np.ascontiguousarray(split_values, dtype=np.float64),
                                np.ascontiguousarray(split_rows, dtype=np.int64))


def _route(pair, split, batch, n_buckets):
    """A piece's records cut by bucket, for the columns ``batch``: per bucket the masked values (one
    field per column) and the original values beside them (one field per column)."""
    rows = np.arange(pair.start, pair.start + pair.rows, dtype=np.int64)
    masked, beside = [], []
    for j, xm, x in zip(batch, pair.columns(0, batch), pair.columns(1, batch)):
        xm = xm + 0.0
        bounds, order = groups.group_members(bucket_of(xm, rows, split[j]).astype(np.int64), n_buckets)
        for field, column in ((masked, xm), (beside, x)):
            column = column[order]
            field.append([column[a:b] for a, b in zip(bounds[:-1], bounds[1:])])
    return [tuple(f[i][b] for f in (masked, beside) for i in range(len(batch))) for b in range(n_buckets)]


def _route_to_file(pair, split, batch, n_buckets, path):
    """:func:`_route` into one file (:func:`pipeline.transit.write_rows`): key ``i * n_buckets + b`` holds the
    records of bucket ``b`` of column ``batch[i]``, their masked and original values."""
    rows = np.arange(pair.start, pair.start + pair.rows, dtype=np.int64)
    keys, masked = [], []
    for i, (j, xm) in enumerate(zip(batch, pair.columns(0, batch))):
        xm = xm + 0.0
        keys.append(bucket_of(xm, rows, split[j]) + i * n_buckets)
        masked.append(xm)
    beside = np.concatenate(list(pair.columns(1, batch)))
    return transit.write_rows(path, np.concatenate(keys), len(batch) * n_buckets, [np.concatenate(masked), beside])


def _read_bucket(bundles, i, b, n_buckets):
    """Column ``i``'s ``(masked values, original values)`` of bucket ``b`` in the routing tasks' files."""
    arrays = transit.read_key([written for bundle in bundles for written in bundle], i * n_buckets + b)
    return (np.empty(0), np.empty(0)) if arrays is None else arrays


def distinct_sorted(values):
    """``np.unique(values, return_inverse=True, return_counts=True)`` of a float column without ``-0.0``
    or NaN, by hashing first: the distinct values (ascending), each value's index among them, their
    counts. Twice as fast as ``np.unique``'s sort of every value when values repeat (a released column
    repeats each value k times or more), 1.6 times slower when all are distinct (measured, 250,000
    values). The distinct values are sorted by NumPy's default sort, not a stable one: they are all
    different, so every sort gives the one order, and on a processor with AVX-512 NumPy's default is a
    vectorized sort (0.9 ms against 5.5 ms for 60,000 values here, BENCHMARKS.md, sixtieth session)."""
    codes, distinct = pd.factorize(values, sort=False)
    order = np.argsort(distinct)
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[order] = np.arange(len(distinct))
    at = rank[codes]
    return distinct[order], at, np.bincount(at, minlength=len(distinct)).astype(np.int64)


def _bucket(width, *pieces):
    """A :class:`Bucket` of ``width`` columns from its pieces (in producer order)."""
    fields = graph.concatenate_fields(pieces)
    masked, position = [], []
    for j in range(width):
        values, at, counts = distinct_sorted(fields[j])
        masked.append((values, counts))
        position.append(at)
    return Bucket(masked, position, list(fields[width:]))


def _ends(summary):
    """``(size, first value, its count, last value, its count)`` of a summary."""
    values, counts = summary
    if not len(values):
        return 0, 0.0, 0, 0.0, 0
    return int(counts.sum()), float(values[0]), int(counts[0]), float(values[-1]), int(counts[-1])


def _edges(bucket):
    return [_ends(s) for s in bucket.masked]


def _summaries(bucket):
    return bucket.masked


def _summary_to_file(width, b, n_buckets, path, *bundles):
    """Bucket ``b`` of the ``width`` columns of a batch, from the routing tasks' files, written to two files:
    its summaries at ``path`` and its records' positions and original values (the rest of its :class:`Bucket`)
    at ``path-records``. Returns their :class:`pipeline.transit.Stored` and :func:`_edges`."""
    read = [_read_bucket(bundles, i, b, n_buckets) for i in range(width)]
    bucket = _bucket(width, tuple(xm for xm, _ in read) + tuple(x for _, x in read))
    records = [a for at, x in zip(bucket.position, bucket.x) for a in (at.astype(np.int32), x)]  # (< 2**31 a bucket)
    return (transit.store(path, [a for summary in bucket.masked for a in summary]),
            transit.store(f"{path}-records", records), _edges(bucket))


def _summary_of(summaries):
    """A bucket's summaries, read back from their file if they are a :class:`pipeline.transit.Stored`."""
    if not isinstance(summaries, transit.Stored):
        return summaries
    arrays = transit.load(summaries)
    return list(zip(arrays[0::2], arrays[1::2]))


def ranks_of(edges):
    """:class:`Ranks` of one masked column from its buckets' :func:`_ends`."""
    size = np.array([e[0] for e in edges], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(size)]).astype(np.int64)
    below, through = start[:-1].copy(), start[1:].copy()
    m = len(edges)
    for b in range(m):
        if not size[b]:
            continue
        c = b - 1  # earlier buckets ending with this bucket's first value
        while c >= 0 and (not size[c] or edges[c][3] == edges[b][1]):
            below[b] -= edges[c][4] if size[c] else 0
            c -= 1
        c = b + 1  # later buckets starting with its last value
        while c < m and (not size[c] or edges[c][1] == edges[b][3]):
            through[b] += edges[c][2] if size[c] else 0
            c += 1
    return Ranks(start, below, through)


def _reads(ranks, b, n, hs):
    """The buckets whose summaries bucket ``b`` reads: those holding the ranks ``L - h`` and
    ``R - 1 + h`` of its values, for every ``h`` (none for an empty bucket)."""
    if ranks.start[b + 1] == ranks.start[b]:
        return []
    need = set()
    for h in hs:
        for lo, hi in ((ranks.below_first[b] - h, ranks.start[b + 1] - 1 - h),
                       (ranks.start[b] + h, ranks.through_last[b] - 1 + h)):
            lo, hi = min(max(lo, 0), n - 1), min(max(hi, 0), n - 1)
            need.update(c for c in range(ranks.bucket(lo), ranks.bucket(hi) + 1)
                        if ranks.start[c + 1] > ranks.start[c])
    return [(c, int(ranks.start[c])) for c in sorted(need)]


def _hits(n, hs, plan, bucket, *read):
    """Bucket ``b``'s interval-disclosure hits per column of its batch and ``h`` (``(width,
    len(hs))`` counts); ``read``: ``(bucket, its summaries)`` pairs."""
    lookup = {c: _summary_of(summaries) for c, summaries in read}
    hits = np.zeros((len(bucket.masked), len(hs)), dtype=np.int64)
    for j, (values, counts) in enumerate(bucket.masked):
        if not len(values):
            continue
        start, below_first, through_last = plan.masked[j]
        through = start + np.cumsum(counts)
        below = through - counts
        below[0], through[-1] = below_first, through_last
        table = [lookup[c][j] for c, _ in plan.reads[j]]
        table_values = np.concatenate([t[0] for t in table])
        table_ends = np.concatenate([s + np.cumsum(t[1]) for t, (_, s) in zip(table, plan.reads[j])])
        at, x = bucket.position[j], bucket.x[j]
        for i, h in enumerate(hs):
            lo = table_values[np.searchsorted(table_ends, np.clip(below - h, 0, n - 1), side="right")]
            hi = table_values[np.searchsorted(table_ends, np.clip(through - 1 + h, 0, n - 1), side="right")]
            ok = through - 1 + h >= below - h
            hits[j, i] = np.count_nonzero((lo[at] <= x) & (x <= hi[at]) & ok[at])
    return hits


def _hits_read(n, hs, plan, stored, records, read):
    """:func:`_hits` of a bucket in files: its summaries ``stored`` and its records' positions and original
    values ``records`` (:func:`_summary_to_file`)."""
    arrays = transit.load(records)
    return _hits(n, hs, plan, Bucket(_summary_of(stored), arrays[0::2], arrays[1::2]), *read)


def _order_statistics(summaries, wanted):
    """Values of one bucket's summaries at local ranks: ``wanted`` is ``[(column, local ranks)]``."""
    out = []
    summaries = _summary_of(summaries)
    for j, local in wanted:
        values, counts = summaries[j]
        out.append(values[np.searchsorted(np.cumsum(counts), local, side="right")])
    return out


def _statistics_tasks(ranks, summaries, wanted_ranks):
    """Delayed tasks giving the order statistics ``wanted_ranks`` of each column of a batch (from its
    buckets' summaries), and how to read them: ``(tasks, where)`` with ``where[j][i] = (task, part,
    position)`` of rank ``wanted_ranks[i]`` of column ``j``."""
    requests = {}
    where = []
    for j, r in enumerate(ranks):
        where.append([])
        for rank in wanted_ranks:
            b = r.bucket(int(rank))
            column_requests = requests.setdefault(b, {}).setdefault(j, [])
            where[j].append((b, j, len(column_requests)))
            column_requests.append(int(rank - r.start[b]))
    order = sorted(requests)
    tasks = [delayed(_order_statistics, pure=True)(summaries[b], [(j, np.array(requests[b][j], dtype=np.int64))
                                                                  for j in sorted(requests[b])])
             for b in order]
    slot = {b: i for i, b in enumerate(order)}
    parts = {b: {j: i for i, j in enumerate(sorted(requests[b]))} for b in order}
    return tasks, [[(slot[b], parts[b][j], at) for b, j, at in column] for column in where]


def _buckets_in_memory(pairs, split, batch, m, n):
    """A batch's buckets through one all-to-all exchange, persisted: per bucket its :class:`Bucket` (for
    its hits task), its summaries (delayed) and :func:`_edges`."""
    layer = graph.Layer("microagg-columns")
    routed = [layer.task(("route", i), _route, p, split, batch, m) for i, p in enumerate(pairs)]
    pieces = layer.exchange("buckets", routed, m, graph.concatenate_fields, rows=n * len(batch))
    buckets = persisted(*layer.delayed([layer.task(("bucket", b), _bucket, len(batch), *pieces[b])
                                        for b in range(m)]))
    edges = dask.compute(*[delayed(_edges, pure=True)(b) for b in buckets])
    return buckets, [delayed(_summaries, pure=True)(b) for b in buckets], edges


def _buckets_in_files(pairs, split, batch, m, directory):
    """A batch's buckets through files in ``directory``: each piece writes its records there cut by column
    and bucket, each bucket task reads its records from every piece's file and writes its summaries and its
    records' positions to two files (:func:`_summary_to_file`); the pieces' files are then removed. Per
    bucket: its records' and its summaries' :class:`pipeline.transit.Stored`, and :func:`_edges`."""
    layer = graph.Layer("microagg-columns")
    routed = [layer.task(("route", i), _route_to_file, p, split, batch, m, os.path.join(directory, f"{ROUTED_FILE}{i}"))
              for i, p in enumerate(pairs)]
    bundles = layer.bundles("routed", routed, kept=False)
    filed = dask.compute(*layer.delayed([layer.task(("bucket", b), _summary_to_file, len(batch), b, m,
                                                    os.path.join(directory, f"{SUMMARY_FILE}{b}"), *bundles)
                                         for b in range(m)]))
    for i in range(len(pairs)):
        os.remove(os.path.join(directory, f"{ROUTED_FILE}{i}"))
    return [records for _, records, _ in filed], [stored for stored, _, _ in filed], [edges for _, _, edges in filed]


def interval_hits(pairs, n, hs, marks, bucket_rows=BUCKET_ROWS, batch_values=BATCH_VALUES, wanted_ranks=(),
                  directory=None):
    """Per QI and half-width ``h`` of ``hs``, how many records' original value lies in the rank
    interval around their masked value (:func:`metrics.interval_hits` over the whole sorted masked
    column), in batches of columns; and the masked columns' order statistics at ``wanted_ranks`` (read
    from the same buckets' summaries: ``(len(wanted_ranks), d)``). ``directory``: a scratch directory
    through which a batch's records and its buckets' summaries go (:func:`_buckets_in_files`, in its
    subdirectory :data:`BATCH_DIRECTORY`, removed after each batch), instead of memory."""
    width = marks[0][0].shape[1]
    m = max(1, -(-n // bucket_rows))
    split = delayed(splitters(marks, m), pure=True)
    n_batches = -(-width // max(1, batch_values // max(n, 1)))
    hits = []
    statistics = np.empty((len(wanted_ranks), width))
    for batch in np.array_split(np.arange(width), n_batches):
        batch = batch.tolist()
        if directory:
            batch_directory = os.path.join(directory, BATCH_DIRECTORY)
            os.makedirs(batch_directory, exist_ok=True)
            buckets, summaries, edges = _buckets_in_files(pairs, split, batch, m, batch_directory)
        else:
            buckets, summaries, edges = _buckets_in_memory(pairs, split, batch, m, n)
        ranks = [ranks_of([e[j] for e in edges]) for j in range(len(batch))]
        tasks = []
        for b in range(m):
            reads = [_reads(r, b, n, hs) for r in ranks]
            plan = Plan([(int(r.start[b]), int(r.below_first[b]), int(r.through_last[b])) for r in ranks], reads)
            read = [(c, summaries[c]) for c in sorted({c for per_column in reads for c, _ in per_column})]
            if directory:
                tasks.append(delayed(_hits_read, pure=True)(n, hs, plan, summaries[b], buckets[b], read))
            else:
                tasks.append(delayed(_hits, pure=True)(n, hs, plan, buckets[b], *read))
        selections, where = _statistics_tasks(ranks, summaries, wanted_ranks)
        found = dask.compute(*tasks, *selections)
        hits.append(sum(found[:len(tasks)]))
        found = found[len(tasks):]
        for j, column in zip(batch, where):
            statistics[:, j] = [found[task][part][at] for task, part, at in column]
        del buckets, summaries, tasks, selections
        if directory:
            shutil.rmtree(batch_directory, ignore_errors=True)
    return np.concatenate(hits), statistics


# --- order statistics by selection: the quantiles ------------------------------------------------------


def quantile_ranks(n, quantiles):
    """``np.quantile``'s linear method: for each level the ranks below and above its virtual index and
    the interpolation weight."""
    virtual = (n - 1) * np.asarray(quantiles, dtype=np.float64)
    below = np.floor(virtual)
    weight = virtual - below
    below = below.astype(np.int64)
    above = below + 1
    top = virtual >= n - 1
    below[top] = n - 1
    above[top] = n - 1
    return below, above, weight


def lerp(a, b, t):
    """NumPy's interpolation between order statistics (``numpy.quantile``'s ``_lerp``)."""
    diff = b - a
    out = a + diff * t
    return np.where(t >= 0.5, b - diff * (1 - t), out)


def selection_edges(marks, side, bins=SELECTION_BINS):
    """Per column of one file (``side`` 0: masked, 1: original), at most ``bins - 1`` distinct values
    from the marks: the bins of the selection."""
    values = np.concatenate([mk[side] for mk in marks])
    out = []
    for j in range(values.shape[1]):
        v = np.sort(values[:, j])
        out.append(np.unique(v[(np.arange(1, bins) * len(v)) // bins]))
    return out


class Bins(NamedTuple):
    """One column's bins in a round of the selection: the increasing ``edges`` (bin ``i`` holds the values in
    ``[edges[i-1], edges[i])``, the first and last open), the positions ``coarse`` of the edges searched first
    (:func:`microagg.kernels.histogram.sorted_bins`), and per bin whether it ``merged`` several bins of the
    column's :func:`selection_edges` (a gap between two windows: its values are never picked)."""

    edges: np.ndarray
    coarse: np.ndarray
    merged: np.ndarray


def full_bins(edges, step=COARSE_STEP):
    """Every bin of :func:`selection_edges`, every ``step``-th edge searched first."""
    return Bins(edges, np.arange(0, len(edges), step, dtype=np.int64), np.zeros(len(edges) + 1, dtype=bool))


def mark_weights(marks, n):
    """The rows each mark stands for: its piece's rows over its piece's marks (a piece holds the rows from
    its first mark's row id to the next piece's)."""
    starts = np.array([int(mk[2][0]) for mk in marks] + [n], dtype=np.int64)
    return np.concatenate([np.full(len(mk[2]), (b - a) / len(mk[2])) for mk, a, b in zip(marks, starts[:-1],
                                                                                           starts[1:])])


def window_bins(edges, values, weights, ranks, n, reach=WINDOW_REACH):
    """The bins of :func:`selection_edges` ``edges`` near the ranks ``ranks`` of one column of ``n`` values,
    the rest merged into the gaps between them: the first round of the selection. ``values``: the column's
    marks, each standing for ``weights`` rows, by which the rank of every edge is estimated; a window
    reaches ``reach`` standard errors of that estimate (a systematic sample of as many marks) to either side
    of its rank, and two marks' weight more. A rank the estimate misses lands in a gap: its column goes to a
    second round over all its bins (:func:`quantiles_of`), so the windows decide the time, never the result."""
    order = np.argsort(values, kind="stable")
    below = np.concatenate([[0.0], np.cumsum(weights[order])])[np.searchsorted(values[order], edges, side="left")]
    keep = np.zeros(len(edges), dtype=bool)
    p = np.clip(np.asarray(ranks, dtype=np.float64) / max(n, 1), 0.0, 1.0)
    reach_rows = reach * n * np.sqrt(p * (1 - p) / len(values)) + 2 * weights.max()
    for r, delta in zip(ranks, reach_rows):
        lo = max(int(np.searchsorted(below, r - delta, side="left")) - 1, 0)
        hi = min(int(np.searchsorted(below, r + delta, side="right")) + 1, len(edges))
        keep[lo:hi] = True
    at = np.flatnonzero(keep)
    ends = np.concatenate([[-1], at, [len(edges)]])
    breaks = np.flatnonzero(np.diff(at) > 1)  # a gap between edges breaks[i] and breaks[i] + 1
    coarse = np.unique(np.concatenate([[0], breaks, breaks + 1, [len(at) - 1]])) if len(at) else at
    return Bins(edges[at], coarse.astype(np.int64), np.diff(ends) > 1)


def _plan_columns(pair, plan):
    """The piece's column of each entry ``(side, column, ...)`` of ``plan``, each side's read in one call (a
    piece in a file is opened once per side, not once per column)."""
    read = {}
    for side in dict.fromkeys(side for side, _, _ in plan):
        js = [j for s, j, _ in plan if s == side]
        read.update(zip(((side, j) for j in js), pair.columns(side, js)))
    return [np.ascontiguousarray(read[side, j], dtype=np.float64) for side, j, _ in plan]


def _bin_counts(pair, plan):
    """Per entry ``(side, column, Bins)`` of ``plan``, how many of the piece's values fall in each bin."""
    out = []
    for (_, _, bins), x in zip(plan, _plan_columns(pair, plan)):
        at = histogram.sorted_bins(x, bins.edges, bins.coarse)
        out.append(np.bincount(at, minlength=len(bins.edges) + 1))
    return out


def _sum_counts(*counts):
    return [sum(c[i] for c in counts) for i in range(len(counts[0]))]


def _bin_values(pair, plan, ranges):
    """Per entry of ``plan``, the piece's distinct values in the value ranges ``ranges`` (``(lo, hi)``: the
    wanted bins, :func:`_bounds`) and their counts, picked unsorted (a sort of every column of every piece was
    a third of the exact columns' CPU time at 10M rows)."""
    out = []
    for x, (lo, hi) in zip(_plan_columns(pair, plan), ranges):
        out.append(np.unique(x[histogram.within_ranges(x, lo, hi)] + 0.0, return_counts=True))
    return out


def _select(pairs, ranks, plan, fan_in):
    """One round of the selection: per entry ``(side, column, Bins)`` of ``plan``, ``{rank: value}`` of the
    order statistics ``ranks``, or None if one of them lies in a merged bin."""
    layer = graph.Layer("microagg-quantile-bins")  # a tree of sums: the client receives one count per bin
    counted = layer.reduce("sum", [layer.task(("count", i), _bin_counts, p, plan) for i, p in enumerate(pairs)],
                           _sum_counts, fan_in)
    (totals,) = dask.compute(layer.delayed([counted])[0])
    cum = [np.cumsum(c) for c in totals]
    wanted = [np.unique(np.searchsorted(c, ranks, side="right")) for c in cum]
    missed = [bins.merged[w].any() for (_, _, bins), w in zip(plan, wanted)]  # a wanted rank in a merged bin
    selected = [(entry, c, w) for entry, c, w, m in zip(plan, cum, wanted, missed) if not m]
    ranges = [_bounds(bins.edges, w) for (_, _, bins), _, w in selected]
    picked = dask.compute(*[delayed(_bin_values, pure=True)(p, [e for e, _, _ in selected], ranges) for p in pairs])
    out = [None] * len(plan)
    slots = [i for i, m in enumerate(missed) if not m]
    for k, (i, ((_, _, bins), c, w)) in enumerate(zip(slots, selected)):
        values, at = np.unique(np.concatenate([f[k][0] for f in picked]), return_inverse=True)
        counts = np.bincount(at, weights=np.concatenate([f[k][1] for f in picked])).astype(np.int64)
        first = np.concatenate([[0], c])[w]  # rank of each wanted bin's first value
        lo, hi = ranges[k]
        ends = np.concatenate([f + np.cumsum(counts[(values >= a) & (values < b)]) for f, a, b in zip(first, lo, hi)])
        chosen = np.concatenate([values[(values >= a) & (values < b)] for a, b in zip(lo, hi)])
        out[i] = dict(zip(ranks.tolist(), chosen[np.searchsorted(ends, ranks, side="right")].tolist()))
    return out


def quantiles_of(pairs, n, quantiles, marks, bins=SELECTION_BINS, fan_in=32, sides=(0, 1), reach=WINDOW_REACH):
    """``(quantiles of the original (len(quantiles), d), of the masked)``, as ``np.quantile`` of each
    whole column: each order statistic is selected from the few values of its bin. ``sides``: the
    files to select in (0: masked, 1: original); the other's quantiles are None.

    Two passes over the pieces count each column's values per bin and then return those of the bins
    holding the wanted ranks. The bins are :func:`selection_edges`' near the ranks the marks predict
    (:func:`window_bins`, ``reach``), the rest merged into a few: most values are placed in a few
    comparisons, not sorted (a sort of every piece's column was 7 of the 10M evaluation's 90
    thread-seconds, BENCHMARKS.md, sixty-seventh session). A column whose rank the windows missed is
    selected again over all its bins."""
    below, above, weight = quantile_ranks(n, quantiles)
    ranks = np.unique(np.concatenate([below, above]))
    width = marks[0][0].shape[1]
    weights = mark_weights(marks, n)
    edges = {side: selection_edges(marks, side, bins) for side in sides}
    plan = [(side, j, window_bins(edges[side][j], np.concatenate([mk[side][:, j] for mk in marks]), weights, ranks, n,
                                  reach))
            for side in sides for j in range(width)]
    found = _select(pairs, ranks, plan, fan_in)
    missed = [i for i, f in enumerate(found) if f is None]
    if missed:
        log.info("quantiles: %d of %d column(s) selected again over all their bins", len(missed), len(plan))
        again = _select(pairs, ranks, [(side, j, full_bins(edges[side][j])) for side, j, _ in (plan[i] for i in missed)],
                        fan_in)
        for i, f in zip(missed, again):
            found[i] = f
    out = {}
    for (side, j, _), at_rank in zip(plan, found):
        q = out.setdefault(side, np.empty((len(below), width)))
        q[:, j] = lerp(np.array([at_rank[r] for r in below.tolist()]), np.array([at_rank[r] for r in above.tolist()]),
                       weight) + 0.0
    return out.get(1), out.get(0)


def _bounds(edges, bins):
    """Value ranges ``[lo, hi)`` of the bins ``bins`` (bin ``i`` holds values in ``[edges[i-1], edges[i])``)."""
    full = np.concatenate([[-np.inf], edges, [np.inf]])
    return full[bins], full[bins + 1]


def column_measures(pairs, width, n, ps, quantiles, bucket_rows=BUCKET_ROWS, batch_values=BATCH_VALUES,
                    directory=None):
    """``(ID rate per QI, quantiles of the original (len(quantiles), d), of the masked)``, exactly as
    :func:`metrics.interval_disclosure_rates` and ``np.quantile`` compute them over whole columns.
    ``directory``: the scratch directory of a large evaluation, through which the interval disclosure's
    records go (:func:`interval_hits`)."""
    marks = dask.compute(*[delayed(piece_marks, pure=True)(p) for p in pairs])
    hs = [metrics.rank_half_width(n, q) for q in ps]
    below, above, weight = quantile_ranks(n, quantiles)
    hits, masked_statistics = interval_hits(pairs, n, hs, marks, bucket_rows, batch_values,
                                            np.concatenate([below, above]), directory)
    rates = np.zeros(width)
    for i in range(len(hs)):
        rates += hits[:, i] / n
    q_masked = lerp(masked_statistics[:len(below)], masked_statistics[len(below):], weight[:, None]) + 0.0
    q_original, _ = quantiles_of(pairs, n, quantiles, marks, sides=(1,))
    return 100.0 * rates / len(ps), q_original, q_masked
