"""Mic1D-k (``--method mic1d``): one-dimension microaggregation of all quasi-identifier values.

``shared/papers/mic1d-one-dimension-microaggregation.txt`` section 3, step by step:

1. *Vectorization*: the N = rows x attributes values become one vector; value ``(row, j)`` is the
   cell ``row * width + j``.
2. *Sorting and partitioning*: the vector sorted increasingly (ties by cell), cut into runs of k
   consecutive values by global rank; when k does not divide N the last run holds the remaining
   ``r < k`` values (``remainder="separate"``, the paper), or with ``remainder="merge"`` the last full
   run takes them (k..2k-1 values, so no value is released from fewer than k).
3. *Normalization*: every run min-max normalized to [0, 1] (0.5 when its values are all equal).
4. *Re-sorting and re-normalization*: the normalized values sorted again (ties by cell), cut into
   runs of k again and normalized again.
5. *Mean value computation*: every value of a second-pass run replaced by the run's mean, then both
   normalizations undone (each value with its own first-pass run's minimum and maximum) and put back
   at its cell.

Values are the raw QI values (the per-run normalization is the paper's answer to attributes of
different scales). A constant column (every value equal) is released as it is and left out of the
vector (:func:`constant_columns`): in the paper's vector its values share runs with other columns'
values and come back changed (a constant 0.1 released as 0.10014 in some rows), a loss that protects
nothing, since every record holds that value. The vector is the other columns' values; the paper's
CASC files have no constant column, so its tables are unchanged. With strata, the vector is ordered
by stratum first and the runs restart in every stratum, so no run mixes strata.

What Mic1D-k guarantees is about values, not records: every released value is computed from a run
of k values (the remainder run aside). Records are not k-anonymous (values of one record fall in
different runs); the report gives the real anonymity k' (records / distinct released records) as
the paper's Tables 4-5 do.

Distributed (:func:`microagg.pipeline.release.solve_mic1d`): every input partition is melted into
cells and range-partitioned at splitters drawn from the deterministic sample; each bucket is sorted;
the bucket sizes give every value's global rank, and the sorted buckets are re-cut at the run
boundaries nearest their edges so that each task holds whole runs (a run crossing a bucket edge
travels whole to one task); the second pass does the same on the normalized values, with splitters
from every ``stride``-th value of the first; the protected values go back to the output files by
cell. Each run is processed by one kernel call that sums its values in sequence order, so the result
is bitwise the in-memory :func:`protect`.
"""

from typing import NamedTuple

import numpy as np

from ..kernels import mic1d as kernel
from .errors import InputError
from .sequence import take

REMAINDERS = ("separate", "merge")


def is_mic1d(method):
    return method == "mic1d"


def merge_of(method_options):
    """True if the last run of a stratum takes the remainder (``remainder="merge"``; the option is
    checked as the catalogue entry of mic1d declares it)."""
    from .methods import METHODS  # the catalogue imports this module

    return METHODS["mic1d"].option_value("remainder", method_options) == "merge"


def check_mic1d(method, refine, aggregate, weights, noise, release_where):
    """Options Mic1D-k cannot take, refused before any work."""
    if not is_mic1d(method):
        return
    refused = [(refine not in (None, "none"), f"--refine {refine}"), (aggregate != "mean", f"--aggregate {aggregate}"),
               (weights is not None, "--weights"), (noise not in (None, "none"), f"--noise {noise}"),
               (bool(release_where), "--release-where")]
    for bad, flag in refused:
        if bad:
            raise InputError(f"{flag} does not apply to --method mic1d: Mic1D-k releases run means of normalized "
                             "values, not groups of records")


class Cells(NamedTuple):
    """Values in transit: their cells (``row_id * width + column``), raw values, strata (or None),
    and after the first pass the normalized values and each value's first-pass run range."""

    cell: np.ndarray
    value: np.ndarray
    stratum: np.ndarray | None = None
    normalized: np.ndarray | None = None
    low: np.ndarray | None = None
    high: np.ndarray | None = None


def melt(X, row_id, stratum=None):
    """The cells of rows ``X`` (n, width) with global row ids ``row_id``, row by row."""
    n, width = X.shape
    cell = (np.asarray(row_id, dtype=np.int64)[:, None] * width + np.arange(width, dtype=np.int64)).reshape(-1)
    return Cells(cell, np.ascontiguousarray(X, dtype=np.float64).reshape(-1),
                 None if stratum is None else np.repeat(np.asarray(stratum, dtype=np.int64), width))


def concat(parts):
    parts = [p for p in parts if p is not None and len(p.cell)]
    if not parts:
        return Cells(np.empty(0, np.int64), np.empty(0))
    return Cells(*(None if parts[0][i] is None else np.concatenate([p[i] for p in parts])
                   for i in range(len(Cells._fields))))


def sort_key(cells, key):
    """Sequence order of ``cells`` by ``(stratum, key, cell)``; ``key`` is "value" or "normalized"."""
    values = getattr(cells, key)
    keys = (cells.cell, values) if cells.stratum is None else (cells.cell, values, cells.stratum)
    return np.lexsort(keys)


def sort_cells(pieces, key):
    cells = concat(pieces)
    return take(cells, sort_key(cells, key))


def stratum_bounds(values_per_stratum):
    """Sequence positions where each stratum starts, and N at the end."""
    return np.concatenate([[0], np.cumsum(np.asarray(values_per_stratum, dtype=np.int64))])


def _last_run(n, k, merge):
    """Index of the last run of a stratum of ``n`` values."""
    runs, rest = divmod(n, k)
    if runs == 0:
        return 0
    return runs if rest and not merge else runs - 1


def run_starts(lo, hi, bounds, k, merge):
    """Global sequence positions of the runs that start in ``[lo, hi)``, increasing."""
    out = []
    for s in range(len(bounds) - 1):
        first, end = int(bounds[s]), int(bounds[s + 1])
        if end <= first or end <= lo or first >= hi:
            continue
        j0 = max(0, -(-(lo - first) // k))
        j1 = min(_last_run(end - first, k, merge), (hi - 1 - first) // k)
        if j0 <= j1:
            out.append(first + k * np.arange(j0, j1 + 1, dtype=np.int64))
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


def next_run_start(position, bounds, k, merge):
    """The first run start at or after ``position`` (N if none)."""
    total = int(bounds[-1])
    if position >= total:
        return total
    s = int(np.searchsorted(bounds, position, side="right")) - 1
    first, end = int(bounds[s]), int(bounds[s + 1])
    j = -(-(position - first) // k)
    return first + j * k if j <= _last_run(end - first, k, merge) else end


def first_pass(cells, lo, hi, bounds, k, merge):
    """Normalize the cells at sequence positions ``lo..hi-1`` (sorted, whole runs) run by run."""
    starts = np.append(run_starts(lo, hi, bounds, k, merge) - lo, hi - lo)
    n = hi - lo
    normalized, low, high = np.empty(n), np.empty(n), np.empty(n)
    kernel.normalize_runs(np.ascontiguousarray(cells.value), starts, normalized, low, high)
    return cells._replace(normalized=normalized, low=low, high=high)


def second_pass(cells, lo, hi, bounds, k, merge):
    """Protected values of the cells at second-pass positions ``lo..hi-1`` (sorted, whole runs), and
    the run sizes."""
    starts = np.append(run_starts(lo, hi, bounds, k, merge) - lo, hi - lo)
    out = np.empty(hi - lo)
    kernel.protect_runs(np.ascontiguousarray(cells.normalized), np.ascontiguousarray(cells.low),
                        np.ascontiguousarray(cells.high), starts, out)
    return out, np.diff(starts)


def expected_short_runs(bounds, k, merge):
    """Runs with fewer than k values that Mic1D-k makes: the remainder run of each stratum (separate)."""
    sizes = np.diff(bounds)
    sizes = sizes[sizes > 0]
    short = sizes % k != 0
    if merge:
        short &= sizes < k
    return int(np.count_nonzero(short))


def constant_columns(lo, hi):
    """Columns whose smallest value ``lo`` equals their largest ``hi`` (arrays, one per column):
    Mic1D-k releases them as they are, outside the vector."""
    return np.asarray(lo) == np.asarray(hi)


def vector_width(sizes, constant):
    """Values per row of the smallest Mic1D-k vector among attribute blocks of ``sizes`` columns (one
    after the other, as ``constant`` orders the QIs): a block's columns that are not ``constant``; 1
    if none varies (nothing is vectorized, every record is released as it is). Mic1D-k's k counts
    values: rows x this width."""
    starts = np.cumsum([0, *sizes])
    widths = [int(np.count_nonzero(~np.asarray(constant)[a:b])) for a, b in zip(starts[:-1], starts[1:])]
    return min([w for w in widths if w], default=1)


def protect(X, k, stratum=None, merge=False):
    """In-memory Mic1D-k of the rows ``X`` (n, width): the protected values, same shape.

    ``stratum`` (int codes, optional) microaggregates each stratum's values on their own. Constant
    columns come back as they are (:func:`constant_columns`); the others are the vector.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    if not len(X):
        raise InputError(f"Mic1D-k needs at least k={k} values; the data has none")
    varying = np.flatnonzero(~constant_columns(X.min(axis=0), X.max(axis=0)))
    out = X.copy()
    if len(varying):
        out[:, varying] = _protect(np.ascontiguousarray(X[:, varying]), k, stratum, merge)
    return out


def _protect(X, k, stratum, merge):
    """:func:`protect` of the varying columns ``X``: the paper's steps."""
    n, width = X.shape
    if n * width < k:
        raise InputError(f"Mic1D-k needs at least k={k} values; the data has {n * width}")
    cells = melt(X, np.arange(n), stratum)
    counts = [n * width] if stratum is None else np.bincount(cells.stratum)
    bounds = stratum_bounds(counts)
    total = n * width
    first = first_pass(take(cells, sort_key(cells, "value")), 0, total, bounds, k, merge)
    second = take(first, sort_key(first, "normalized"))
    values, _ = second_pass(second, 0, total, bounds, k, merge)
    out = np.empty(total)
    out[second.cell] = values
    return out.reshape(n, width)


def targets(offsets, bounds, k, merge):
    """Re-cut of sorted buckets (bucket ``b`` holds positions ``offsets[b]..offsets[b+1]-1``) into
    stretches of whole runs: per target, ``(lo, hi, [(bucket, a, b), ...])`` with local slices."""
    total = int(offsets[-1])
    edges = [0] + [next_run_start(int(o), bounds, k, merge) for o in offsets[1:-1]] + [total]
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        if hi <= lo:
            continue
        slices = []
        for b in range(len(offsets) - 1):
            a, z = max(lo, int(offsets[b])), min(hi, int(offsets[b + 1]))
            if a < z:
                slices.append((b, a - int(offsets[b]), z - int(offsets[b])))
        out.append((lo, hi, slices))
    return out


def splitters(cells, key, n_buckets):
    """``n_buckets - 1`` splitter triples ``(strata, keys, cells)``: a sample's sequence at equal steps."""
    order = sort_key(cells, key)
    at = (np.arange(1, n_buckets) * len(order)) // max(n_buckets, 1)
    pick = order[at] if len(order) else order
    stratum = np.zeros(len(pick), dtype=np.int64) if cells.stratum is None else cells.stratum[pick]
    return (np.ascontiguousarray(stratum, dtype=np.int64), np.ascontiguousarray(getattr(cells, key)[pick]),
            np.ascontiguousarray(cells.cell[pick]))


def route(cells, key, split, n_buckets):
    """Bucket of every cell by ``(stratum, key, cell)`` among the splitters."""
    stratum = np.zeros(len(cells.cell), dtype=np.int64) if cells.stratum is None else cells.stratum
    return kernel.lex_bucket(stratum, np.ascontiguousarray(getattr(cells, key)), cells.cell, *split)
