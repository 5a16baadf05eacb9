"""The distributed release behind ``microagg anonymize``: Dask stages around the same kernels.

Stages (each timed in the report):

1. validate: schema checks from metadata only (column names, dtypes), before any data is read;
2. statistics: one pass of exact column sums per partition (count, mean, std; NaN / inf counts;
   covariance for the report), so the standardization is bit-identical however the input is
   partitioned; partition lengths give every row its global row id (its position in the input);
3. blocks: a deterministic sample (rows chosen by hashing their row id with the seed) shapes a
   split tree (:mod:`pipeline.blocking`); every input partition routes its rows to their leaves
   (blocks) and is cut into one piece per task (a subtree of blocks); per task, the method's kernel
   solves every block (rows in row-id order) and the groups are stitched across every split plane
   inside the task (:mod:`pipeline.stitch`); the groups near the split planes between tasks travel
   to one task per plane and are stitched there, in parallel. Rows travel as NumPy arrays
   (:class:`Rows`) in an explicit task graph: no DataFrame shuffle, nothing sorted but row ids (in one
   process with memory to spare, each task reads its pieces from the whole outputs of the tasks before
   it: :func:`_shares_outputs`);
4. gate: every released piece (:class:`Released`: one tuple per group and each row's group) carries
   its evidence: rows, group sizes and how often each released tuple occurs; every group lies inside
   one piece, so a release whose pieces all pass is k-anonymous, and one that fails is never
   written; the row count must match;
5. write: the released values are scattered back by row id into one piece per output file (fixed
   row-id ranges, so the files do not depend on the input partitioning or the number of workers)
   and joined to the input rows; identifiers dropped or pseudonymised, other columns unchanged,
   rows in input order; written to a temporary directory and renamed into place.

Library code owns no cluster: it runs on the active Dask client or scheduler.
"""

import atexit
import hmac
import importlib
import json
import logging
import os
import pickle
import threading
import time
from collections import Counter
from contextlib import ExitStack, contextmanager
from functools import partial, reduce
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import NamedTuple

import dask
import dask.dataframe as dd
from dask import delayed
import numpy as np
import pandas as pd

from .. import kernels
from ..kernels import groups
from ..kernels import histogram
from ..kernels import missing as missing_kernels
from ..kernels import released as released_kernels
from . import blocking, drawing, graph, interrupts, io, metrics, mic1d, sequence, stats, stitch, transit
from .sequence import check_sequence
from .strata import check_strata, partition_counts, plan_strata
from .api import released_table, where_mask
from .errors import CSVParseError, CSVTypeChange, InputError, ReleaseGateError, ScratchSpaceError, StorageError
from .solver import Solver
from .methods import describe_picks
from .validation import (
    check_aggregate,
    check_blocking,
    check_finite,
    check_missing,
    attribute_blocks,
    check_noise,
    check_release_where,
    check_weight_values,
    check_weights,
    check_k,
    non_numeric_error,
    resolve_columns,
    as_written,
    spaced_names,
)

log = logging.getLogger(__name__)

ROW_ID = "_microagg_row_id"


@dataclass(frozen=True)
class ReleaseOptions:
    """What to release; validated by :func:`plan`."""

    k: int
    method: str = "mdav"
    quasi_identifiers: tuple | None = None
    identifiers: tuple = ()
    aggregate: str = "mean"
    rows_per_file: int = 250_000        # a file is one write task: 1M-row files made 1.5 GiB workers restart (BENCHMARKS.md)
    order: str = "kd"
    block_size: int | None = None       # largest block of the split tree; None: blocking.default_block_size(k)
    blocks_per_task: int = 32           # blocks solved and stitched together in one Dask task
    one_block_rows: int = 5000          # an input (a stratum) of at most this many rows is one block
    seed: int = 0
    refine: str = "none"                # a refinement of pipeline.methods.REFINERS, applied per block
    method_options: tuple = ()          # (name, value) pairs, e.g. (("grow", "nc"),)
    refine_options: tuple = ()
    stitch: str = "light"               # pipeline.stitch.STITCHING
    sample_rows: int | None = None      # default: about 128 sample rows per block (at least 20,000)
    hash_identifiers: bool = False      # replace identifiers by a keyed HMAC instead of dropping them
    noise: str = "none"                 # "laplace": noise on each released group value (kernels/noise.py)
    epsilon: float | None = None        # the noise's privacy budget
    release_where: str | None = None    # release only the rows whose released QI values meet this condition
    weights: str | None = None          # a survey-weight column weighting the aggregate
    strata: tuple = ()                  # columns whose distinct values are solved separately
    small_strata: str = "error"         # a stratum below k rows: "error" or "merge" (into the nearest)
    attribute_blocks: tuple = ()        # attribute blocks, each microaggregated on its own (tuples of names)
    missing: str = "error"              # a missing QI value: "error", or "centroid" (kernels/missing.py)

    def __post_init__(self):
        if self.block_size is None:  # Mic1D-k's runs are not blocks: its k does not size them
            size = blocking.BLOCK_SIZE if mic1d.is_mic1d(self.method) else blocking.default_block_size(self.k)
            object.__setattr__(self, "block_size", size)


@dataclass
class Timings:
    seconds: dict = field(default_factory=dict)

    @contextmanager
    def stage(self, name):
        start = time.perf_counter()
        log.info("stage %s ...", name)
        try:
            interrupts.check()  # a signal whose exception Python dropped (pipeline/interrupts.py)
            yield
            interrupts.check()
        except BaseException as exc:
            log.info("stage %s %s after %.2f s", name,
                     "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed", time.perf_counter() - start)
            raise
        elapsed = time.perf_counter() - start
        self.seconds[name] = round(self.seconds.get(name, 0.0) + elapsed, 4)  # a stage may resume
        log.info("stage %s done in %.2f s", name, elapsed)


def solver_of(options):
    """The block solver of a job (checked: unknown methods, refinements or options raise)."""
    return Solver.build(options.method, dict(options.method_options), options.refine, dict(options.refine_options),
                        options.seed)


# --- stage 1: plan from metadata -------------------------------------------------------------------

def _kept_floats(ddf, options, columns):
    """The floating-point columns of an input that the release keeps as they are (no role: not a QI,
    an identifier, the weights or a stratum), read exactly (:func:`pipeline.io.read_input`'s ``floats``)."""
    roles = {*columns[0], *columns[1], options.weights, *(options.strata or ())}
    return tuple(c for c, t in ddf.dtypes.items() if c not in roles and pd.api.types.is_float_dtype(t))


def without_dropped_identifiers(ddf, identifiers):
    """A Parquet input's frame without the identifiers the release drops: never read, nor kept in
    memory. A Parquet file stores its columns apart, and an identifier of distinct values is costly to
    decode: the 10M extract's person id took a fifth of the reading's CPU (BENCHMARKS.md, forty-fifth
    session). A CSV input keeps
    them: its every field is parsed anyway, and a quote left open may swallow rows into an identifier's
    value (:func:`pipeline.io.swallowed_rows`)."""
    return ddf.drop(columns=list(identifiers))


def named_as_written(options, columns, evaluation=None, text=()):
    """``(options, evaluation, text)`` with each column they name that is no input column, but one whose
    name has spaces around it (a CSV header written ``id, income, age``: ``--qi income,age``), named as
    the input writes it (:func:`pipeline.validation.spaced_names`; logged). The release keeps the
    input's names. ``evaluation``: the evaluation's options, whose ``known`` sets name columns too;
    ``text``: the columns read as text (``--csv-text``)."""
    text = tuple(text)
    spaced = spaced_names(columns)
    if not spaced:
        return options, evaluation, text
    blocks = options.attribute_blocks
    if isinstance(blocks, str):
        blocks = [b.split(",") for b in blocks.split(";")]
    named = replace(options, quasi_identifiers=as_written(options.quasi_identifiers, spaced),
                    identifiers=as_written(options.identifiers, spaced), strata=as_written(options.strata, spaced),
                    weights=spaced.get(options.weights, options.weights),
                    attribute_blocks=tuple(as_written(tuple(c.strip() for c in b if c.strip()), spaced)
                                           for b in blocks))
    known = (evaluation or {}).get("known") or ()
    if known:
        evaluation = {**evaluation, "known": [as_written(list(s), spaced) for s in known]}
    requested = {*as_written(options.quasi_identifiers or (), {}), *as_written(options.identifiers, {}),
                 *options.strata, options.weights, *(c.strip() for b in blocks for c in b),
                 *(c for s in known for c in s), *text}
    used = sorted(spaced[n] for n in requested if n in spaced)
    if used:
        log.warning("input column(s) %s have spaces around their names (a CSV header written 'a, b'): the options "
                    "name them without, and the release keeps their names as written",
                    ", ".join(map(repr, used)))
    return named, evaluation, as_written(text, spaced)


def plan(ddf, options):
    """Validate options and columns from the schema alone; returns ``(qi, identifiers)``."""
    check_k(options.k)
    check_aggregate(options.aggregate)
    check_noise(options.noise, options.epsilon)
    if options.rows_per_file < 1:
        raise InputError(f"rows per file must be >= 1, got {options.rows_per_file}")
    solver_of(options)
    if options.stitch not in stitch.STITCHING:
        raise InputError(f"unknown stitching {options.stitch!r}; choose one of: {', '.join(stitch.STITCHING)}")
    check_blocking(options.block_size, options.blocks_per_task, options.order,
                   1 if mic1d.is_mic1d(options.method) else options.k,  # Mic1D-k's runs are not blocks
                   options.one_block_rows)
    reserved = [c for c in ddf.columns if str(c).startswith("_microagg_")]
    if reserved:
        raise InputError(f"input column(s) {reserved} use the reserved prefix '_microagg_'; rename them")
    blocks, named = attribute_blocks(options.attribute_blocks, options.quasi_identifiers,
                                     [str(c) for c in ddf.columns])
    if blocks and options.release_where:
        raise InputError("--release-where cannot be combined with --blocks: a condition on one block's values "
                         "would split the groups of the other blocks")
    qi, ids, non_numeric = resolve_columns(ddf.dtypes, named, options.identifiers, (options.weights, *options.strata))
    if non_numeric:
        column = non_numeric[0]
        raise non_numeric_error(column, ddf[column])
    check_release_where(options.release_where, qi, ddf._meta)
    check_weights(options.weights, ddf.dtypes, qi, ids)
    check_strata(options.strata, options.small_strata, ddf.dtypes, qi, ids)
    check_sequence(options.method, options.refine, options.attribute_blocks)
    mic1d.check_mic1d(options.method, options.refine, options.aggregate, options.weights, options.noise,
                      options.release_where)
    mic1d.merge_of(options.method_options)
    check_missing(options.missing, options.method, options.method_options, options.aggregate, options.weights,
                  options.noise)
    return qi, ids


# --- stage 2: statistics ---------------------------------------------------------------------------

def _partition_sums(part, qi, weights=None, strata=(), shape=None):
    try:
        X = stats.contiguous(part[qi].to_numpy(dtype=np.float64))  # a view of the partition's block
    except (TypeError, ValueError) as exc:
        raise InputError(f"a quasi-identifier column holds non-numeric values: {exc}") from exc
    sums = stats.chunk(X)
    # the exact sums counted every NaN and infinity: without any, the complete rows are all rows
    clean = not (sums.nans.any() or sums.infs.any())
    F = X if clean else X[np.isfinite(X).all(axis=1)]
    bad = 0
    if weights is not None:
        w = part[weights].to_numpy(dtype=np.float64, na_value=np.nan)
        bad = int((~(np.isfinite(w) & (w > 0))).sum())
    evidence = partition_counts(part, strata, qi) if strata else None
    empty = int(np.isnan(X).all(axis=1).sum()) if X.shape[1] and sums.nans.any() else 0  # rows with no observed QI
    # the complete rows' centred cross-products (the reported covariance, the report's correlations)
    # and each column's observed extremes (the report's histogram edges, found by the exact sums)
    swallowed = io.swallowed_rows(part, shape) if shape is not None else (0, None, None)
    return sums, *_comoments(F), bad, evidence, empty, sums.lo, sums.hi, swallowed


COMOMENT_ROWS = 16_384
"""Rows centred at a time by :func:`_comoments`, in one buffer reused (about 1.7 MB at 13 columns)."""


def _comoments(A):
    """``(rows, column means, centred cross-products)`` of the rows of ``A`` (``(n, d)``).

    The rows are centred :data:`COMOMENT_ROWS` at a time into one buffer, not all at once: a centred
    copy of a million-row partition was 104 MB of fresh memory, 0.07-0.09 s a partition once warm and
    0.3-0.4 s in a fresh process (0.06-0.07 s by blocks; BENCHMARKS.md, forty-first session)."""
    n, d = A.shape
    if not n:
        return 0, np.zeros(d), np.zeros((d, d))
    with np.errstate(over="ignore", invalid="ignore"):  # values too large to square: refused by check_finite
        mean = A.mean(axis=0)
        return n, mean, _centred_products(A, mean)


def _centred_products(A, mean):
    """``(A - mean).T @ (A - mean)``, the rows centred :data:`COMOMENT_ROWS` at a time in one buffer."""
    n, d = A.shape
    buffer = np.empty((min(n, COMOMENT_ROWS), d))
    products = np.zeros((d, d))
    for start in range(0, n, COMOMENT_ROWS):
        C = np.subtract(A[start:start + COMOMENT_ROWS], mean, out=buffer[:min(COMOMENT_ROWS, n - start)])
        products += C.T @ C
    return products


def _merge_comoments(parts):
    """:func:`_comoments` of the union of disjoint chunks, from theirs (the pairwise update of
    :func:`metrics.combine_moments`)."""
    n, mean, C = parts[0]
    for nb, mb, Cb in parts[1:]:
        if nb == 0:
            continue
        total = n + nb
        delta = mb - mean
        mean = mean + delta * (nb / total)
        C = C + Cb + np.outer(delta, delta) * (n * nb / total)
        n = total
    return n, mean, C


def column_statistics(ddf, qi, weights=None, strata=(), missing="error", shape=None):
    """One pass: exact sums (mean, std), non-finite checks (and of the ``weights`` column), partition
    lengths, the covariance and, with ``strata`` columns, the rows and QI sums of every stratum.

    Returns ``(rows, mean, std, lengths, covariance, strata_evidence, missing cells per column,
    minimum, maximum, complete rows)``; the covariance (population, of the raw QIs, over the complete
    rows) and each column's minimum and maximum (of its observed values: the edges of the report's
    histograms) are reported, never used to decide anything, so the covariance's last bits may
    depend on the partitioning. ``shape``: a CSV input's :class:`pipeline.io.RowShape`, to refuse rows
    swallowed by a quote left open (:func:`pipeline.io.swallowed_rows`).
    """
    parts = io.compute_reading(*[dask.delayed(_partition_sums)(p, qi, weights, tuple(strata), shape)
                                 for p in parts_of(ddf)])
    swallowed = [p[9] for p in parts if p[9][0]]
    if swallowed:
        raise io.swallowed_error(sum(c for c, _, _ in swallowed), *swallowed[0][1:])
    chunks = [p[0] for p in parts]
    total = stats.combine(chunks)
    check_finite(qi, total, missing, sum(p[6] for p in parts))
    check_weight_values(weights, sum(p[4] for p in parts))
    mean, std = stats.finalize(total)
    lengths = [c.rows for c in chunks]
    complete, _, comoment = _merge_comoments([p[1:4] for p in parts])
    covariance = comoment / max(complete, 1)
    lo = np.min([p[7] for p in parts], axis=0)
    hi = np.max([p[8] for p in parts], axis=0)
    return (total.rows, mean, std, lengths, covariance, [p[5] for p in parts] if strata else None,
            np.asarray(total.nans, dtype=np.int64), lo, hi, complete)


def _attach_row_id(part, offsets, lengths, partition_info=None):
    number = partition_info["number"]
    if len(part) != lengths[number]:
        raise ReleaseGateError(
            f"input partition {number} has {len(part)} rows, but the statistics pass counted "
            f"{lengths[number]}: the input changed during the job or was partitioned differently; nothing written"
        )
    start = offsets[number]
    return part.assign(**{ROW_ID: np.arange(start, start + len(part), dtype=np.int64)})


def _kept_sources(ddf, solving, writing, keep, whole=False):
    """``(solve's frame, write's frame)``: what the passes read. Kept in memory (``keep``, on a cluster), the solve's
    columns (``solving``) and the write's (``writing``) are persisted as two frames (:data:`UNTUNED`, so both keep
    the input's partitions; Dask reads each partition once and cuts it in two), and the solve's can go as soon as the
    blocks stage has routed them, while the write's stay: the 10M-row job held both, and the rows routed from them,
    at its peak (BENCHMARKS.md, sixty-sixth session). ``whole`` (a CSV input, whose rows' shape the statistics pass
    checks on all their fields): the whole input kept as one frame, both. Not kept: ``ddf``, each pass reading its
    columns."""
    if not keep:
        return ddf, ddf
    if whole:
        source = dask.persist(ddf)[0]
        return source, source
    with dask.config.set(UNTUNED):
        return dask.persist(projected(ddf, solving), projected(ddf, writing))


def _without_empty_partitions(ddf, lengths):
    """``(ddf, lengths)`` without the empty partitions (an empty input file, a split of a tiny
    input): the release's divisions need every partition to hold a row. They are dropped before the
    row ids are attached, whose partition numbers must be those the statistics pass counted."""
    keep = [i for i, n in enumerate(lengths) if n]
    if len(keep) == len(lengths):
        return ddf, lengths
    return ddf.partitions[keep], [lengths[i] for i in keep]


def with_row_ids(ddf, lengths):
    """Each row's global row id (its position in the input), independent of the partitioning."""
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    meta = ddf._meta.assign(**{ROW_ID: np.array([], dtype=np.int64)})
    return ddf.map_partitions(_attach_row_id, offsets, np.asarray(lengths, dtype=np.int64), meta=meta)


UNTUNED = {"optimization.tune.active": False}
"""Dask's optimizer without its tuning pass, for the graphs of the input's passes: tuned, a read of only some
columns has its partitions fused by the share of the columns it reads (dask-expr's ``FusedParquetIO``: the 10M
extract's 10 partitions became 3 for its 3 non-QI columns), and the row ids are positions within the
partitions. Untuned, every pass can read only the columns it needs (:func:`projected`) over the same partitions;
each partition's row count is checked against the statistics pass's all the same (:func:`with_row_ids`)."""


def projected(ddf, columns):
    """The columns ``columns`` of ``ddf`` (in ``ddf``'s order), for a pass that needs only those: optimized
    :data:`UNTUNED` (:func:`parts_of`, :func:`draw_sample`), the read reads only them, partitioned as the whole."""
    wanted = set(columns)
    keep = [c for c in ddf.columns if c in wanted]
    return ddf if len(keep) == len(ddf.columns) else ddf[keep]


def write_columns(columns, qi, dropped=()):
    """The input's columns the write reads (:func:`restore_order`): all but the QIs, whose released values
    replace theirs, and the ``dropped`` identifiers (a CSV input's are read; a Parquet input's never are); one QI
    if nothing else is left (a read of no column would not know its rows)."""
    skipped = set(qi) | set(dropped)
    rest = [c for c in columns if c not in skipped]
    return rest or [next(c for c in columns if c in set(qi))]


def parts_of(ddf):
    """``ddf.to_delayed()``, optimized :data:`UNTUNED`: a projected read keeps its partitions."""
    with dask.config.set(UNTUNED):
        return ddf.to_delayed()


# --- stage 3: sample, split tree, blocks, kernels, stitching ----------------------------------------

def _sample_rows(part, columns, seed, threshold):
    if threshold is None:
        return part[columns]
    mask = kernels.sample_mask(part[ROW_ID].to_numpy(dtype=np.int64), seed, threshold)
    return part.loc[mask, columns]


def draw_sample(frame, qi, n_rows, options):
    """The deterministic sample behind the split tree: ``(fraction, rows sorted by row id)``, with
    the QIs and the strata columns."""
    fraction, threshold = blocking.sample_plan(n_rows, options.block_size, options.sample_rows)
    columns = [ROW_ID, *qi, *options.strata]
    meta = frame._meta[columns]
    with dask.config.set(UNTUNED):
        sample = frame.map_partitions(_sample_rows, columns, options.seed, threshold, meta=meta).compute()
    return fraction, sample.sort_values(ROW_ID, kind="stable")


def _standardized(part, qi, mean, std):
    X = np.ascontiguousarray(part[qi].to_numpy(dtype=np.float64))
    return X, kernels.standardize(X, mean, std)


@dataclass(frozen=True)
class _Job:
    """What every block task needs: one object, shipped once per worker."""

    qi: tuple
    mean: np.ndarray
    std: np.ndarray
    forest: blocking.Forest
    options: ReleaseOptions
    strata: object = None               # pipeline.strata.Strata, or None
    first_column: int = 0               # position of qi[0] among all QIs (attribute blocks)
    direction: np.ndarray | None = None  # a sequence method's projection (pipeline.sequence)
    # histogram edges of every QI of the release (rows first_column.. are this job's), for the
    # report's data summary (:func:`summarize`); None: not summarized
    edges: np.ndarray | None = None
    # files' path prefix for the rows a block task sends to its upper planes (:mod:`pipeline.transit`),
    # or None: they travel in memory
    transit: str | None = None
    # the output files' first row ids, when the released pieces go through files too (:class:`FiledRelease`)
    release_files: np.ndarray | None = None


def _shipped(job):
    """A :class:`_Job` as one Dask object (sent once per worker). Not traversed for Dask collections,
    which it holds none of: Dask walks dataclasses and lists, and a forest of 50,000 strata's trees
    took 11.5 s to walk."""
    return delayed(job, name=f"microagg-job-{uuid.uuid4().hex}", traverse=False)


GRAPH_WARNING = "distributed.admin.large-graph-warning-threshold"


@contextmanager
def _graph_holding(objects):
    """Dask's warning threshold for a graph sent to the scheduler (:data:`GRAPH_WARNING`, 10 MB: data embedded
    by mistake) raised by the pickled size of ``objects``, which the graph holds once on purpose: the blocks
    stage's split trees (:func:`_shipped`; 10.2 MB pickled at 100M rows, of an 11.6 MB graph). As a literal in
    the graph the scheduler gives a tree again to a worker that replaces a killed one; data scattered to the
    workers would be lost with them."""
    extra = sum(len(pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL)) for o in objects)
    with dask.config.set({GRAPH_WARNING: dask.utils.parse_bytes(dask.config.get(GRAPH_WARNING, "10MB")) + extra}):
        yield


class Rows(NamedTuple):
    """Rows in transit to their task, as arrays (no DataFrame shuffles): global row ids, leaves,
    raw QI values, on their way to an upper plane their task's release-wide group ids, and their
    survey weights if the aggregate is weighted."""

    row_id: np.ndarray
    leaf: np.ndarray
    values: np.ndarray
    group: np.ndarray | None = None
    weight: np.ndarray | None = None


class Released(NamedTuple):
    """Released rows: row ``i`` (global row id ``row_id[i]``, increasing) carries the tuple
    ``table[group[i]]`` of its group. Storing one tuple per group keeps the persisted release about
    ten times smaller than one tuple per row. ``summary``: the gate's evidence (:func:`summarize`)."""

    row_id: np.ndarray
    group: np.ndarray
    table: np.ndarray
    summary: dict


class FiledRelease(NamedTuple):
    """A :class:`Released` piece whose rows went to a file (:mod:`pipeline.transit`), each row with its released
    values, cut by output file (key ``f``: the rows of the file that starts at row id ``starts[f]``), so that
    the write reads each file's rows alone (:func:`_file_rows`) and nothing of the release stays in memory but
    its ``summary`` (:class:`Released`'s). ``width``: its values' columns."""

    written: object  # pipeline.transit.Written
    starts: np.ndarray
    width: int
    summary: dict


RELEASED_FILE = "-released-"
"""In the name of a released piece's file (:func:`_filed`), and of no other file in the scratch directory."""


def _filed(released, job):
    """``released`` written to a file as a :class:`FiledRelease` when the job's released pieces go through files
    (``job.release_files``), else as it is."""
    starts = job.release_files
    if starts is None:
        return released
    key = np.searchsorted(starts, released.row_id, side="right") - 1
    values = released.table[released.group]  # each row's tuple: a file's rows then need no table
    written = transit.write_rows(f"{job.transit}{RELEASED_FILE}{uuid.uuid4().hex}", key, len(starts),
                                 [released.row_id, values])
    return FiledRelease(written, starts, released.table.shape[1], released.summary)


def _file_rows(piece, start):
    """``(row ids, groups, group table)`` of a released piece (:class:`Released` or :class:`FiledRelease`) for the
    output file whose first row id is ``start``: a Released whole (the file's rows are found in it by binary
    search), a FiledRelease's rows of that file read from its file, each row a group of its own (ascending
    within each piece; a merged file's (:func:`_merged`) are not, but all lie in the file's range, which is
    all :func:`microagg.kernels.groups.scatter_rows` needs of them)."""
    if not isinstance(piece, FiledRelease):
        return piece.row_id, piece.group, piece.table
    arrays = transit.read_keys([(piece.written, int(np.searchsorted(piece.starts, start, side="right")) - 1)])
    if arrays is None:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty((0, piece.width))
    row_id, values = arrays
    return row_id, np.arange(len(row_id), dtype=np.int64), values


def _concat(pieces, width):
    """One :class:`Rows` from pieces, in row-id order."""
    pieces = [p for p in pieces if len(p.row_id)]
    if not pieces:
        return Rows(np.empty(0, np.int64), np.empty(0, np.int64), np.empty((0, width)))
    return _in_row_order(Rows(*[None if f is None else np.concatenate([p[i] for p in pieces])
                                for i, f in enumerate(pieces[0])]))


def _in_row_order(rows):
    """``rows`` (:class:`Rows`) sorted by row id (stable), or as they are if already."""
    if (np.diff(rows.row_id) > 0).all():
        return rows
    return sequence.take(rows, np.argsort(rows.row_id, kind="stable"))


def _split(rows, key, n_keys):
    """``rows`` cut into ``n_keys`` pieces by ``key`` (0..n_keys-1), each keeping the rows' order."""
    bounds, order = groups.group_members(np.ascontiguousarray(key, dtype=np.int64), n_keys)  # a counting sort
    return [sequence.take(rows, order[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _routed(part, job):
    """An input partition's rows routed to their leaves: ``(rows, pack of each row)``."""
    X = np.ascontiguousarray(part[list(job.qi)].to_numpy(dtype=np.float64))  # the rows travel: one per row
    leaf = job.forest.route_raw(X, job.mean, job.std, job.strata.codes(part) if job.strata else None)
    weights = job.options.weights
    weight = None if weights is None else part[weights].to_numpy(dtype=np.float64)
    return Rows(part[ROW_ID].to_numpy(dtype=np.int64), leaf, X, None, weight), job.forest.leaf_pack[leaf]


def _route(part, job):
    """An input partition's rows, routed to their leaves and cut into one piece per task."""
    rows, pack = _routed(part, job)
    return _split(rows, pack, job.forest.n_packs)


def _route_to_file(part, job, path):
    """:func:`_route` written to the file ``path``, each pack's rows a contiguous range
    (:func:`pipeline.transit.write_rows`): only where they are travels."""
    rows, pack = _routed(part, job)
    return transit.write_rows(path, pack, job.forest.n_packs, rows)


def _release(rows, labels, job, gain, picks=None):
    """:class:`Released` for ``rows`` grouped by ``labels`` (``0..g-1``) with the job's aggregate (a
    :class:`FiledRelease` when the job's released pieces go through files); ``picks``: ``auto``'s race counts
    of the task(s) that solved them."""
    return _filed(_released(rows, labels, job, gain, picks), job)


def _released(rows, labels, job, gain, picks=None):
    """:func:`_release`'s :class:`Released`."""
    if not len(labels):
        return Released(rows.row_id, labels, np.empty((0, len(job.qi))),
                        summarize(rows, labels, None, job, gain, picks))
    o = job.options
    if o.missing == "centroid" and np.isnan(rows.values).any():  # each group's observed means
        table = missing_kernels.observed_means(rows.values, labels, int(labels.max()) + 1, job.mean)
        return Released(rows.row_id, labels, table, summarize(rows, labels, table, job, gain, picks))
    table = released_table(rows.values, labels, rows.row_id, o.k, o.aggregate, o.noise, o.epsilon, o.seed,
                           rows.weight, job.first_column)
    return Released(rows.row_id, labels, table, summarize(rows, labels, table, job, gain, picks))


def _solve_pack(job, pack, *pieces):
    """One pack of tasks (:meth:`pipeline.blocking.Forest._packs`): a task of its own
    (:func:`_solve_task`), or trees of one task each (small strata), each solved on its own and
    released together: ``[released]``."""
    return _solve_pack_rows(job, pack, _concat(pieces, len(job.qi)))


def _solve_pack_rows(job, pack, rows):
    """:func:`_solve_pack` of the pack's rows (:class:`Rows`, in row-id order)."""
    tasks = job.forest.pack_tasks(pack)
    if len(tasks) == 1:
        return _solve_task_rows(job, tasks[0], rows)
    labels = np.empty(len(rows.row_id), dtype=np.int64)
    groups_before, gain, picks = 0, 0.0, None
    bounds, order = groups.group_members(job.forest.leaf_task[rows.leaf] - tasks[0], len(tasks))
    for task, a, b in zip(tasks, bounds[:-1], bounds[1:]):
        if b > a:
            found, _, found_gain, found_picks = _task_labels(job, task, sequence.take(rows, order[a:b]))
            labels[order[a:b]] = found + groups_before
            groups_before += int(found.max()) + 1
            gain += found_gain
            if found_picks is not None:
                picks = found_picks if picks is None else picks + found_picks
    return [_release(rows, labels, job, gain, picks)]


def _task_labels(job, task, rows):
    """``(labels, plane, gain, picks)`` of one task's rows (:func:`pipeline.stitch.solve_task`), the
    planes release-wide."""
    forest, options = job.forest, job.options
    tree, local, leaf_offset, tag_offset = forest.local_task(task)
    labels, plane, gain, picks = stitch.solve_task(rows.values, rows.leaf - leaf_offset, tree, local, options.k,
                                                   solver_of(options), stitch.STITCHING[options.stitch], tag_offset,
                                                   scale=(job.mean, job.std))
    return labels, np.where(plane < 0, -1, plane + forest.upper_offset[forest.task_stratum[task]]), gain, picks


def _solve_task(job, task, *pieces):
    """One task (a subtree of leaves): solve, stitch its planes, release the groups that stay.

    Returns ``[released, piece for its first upper ancestor plane, ...]``: the rows whose groups
    lie near an upper split plane go, unreleased, to that plane's stitching task.
    """
    return _solve_task_rows(job, task, _concat(pieces, len(job.qi)))


def _solve_task_rows(job, task, rows):
    """:func:`_solve_task` of the task's rows (:class:`Rows`, in row-id order)."""
    forest = job.forest
    ancestors = forest.task_ancestors[task]
    path = f"{job.transit}-upper-{task}" if job.transit and len(ancestors) else None
    if not len(rows.row_id):
        released = _release(rows, rows.leaf, job, 0.0)
        if path:  # an empty file, of the layout of the others
            return [released, transit.write_rows(path, rows.leaf, len(ancestors), rows._replace(group=rows.leaf))]
        return [released] + [rows] * len(ancestors)
    labels, plane, gain, picks = _task_labels(job, task, rows)
    slot = np.zeros(max(forest.n_upper, 1), dtype=np.int64)
    slot[np.asarray(ancestors, dtype=np.int64)] = np.arange(1, len(ancestors) + 1)
    key = np.where(plane < 0, 0, slot[np.maximum(plane, 0)])  # 0: released here; 1 + i: i-th ancestor plane
    rows = rows._replace(group=stitch.task_group(task, labels))
    if path:  # the rows for the upper planes through a file, key i: the i-th ancestor plane
        upper = key > 0
        written = transit.write_rows(path, key[upper] - 1, len(ancestors), sequence.take(rows, np.flatnonzero(upper)))
        out = [sequence.take(rows, np.flatnonzero(~upper)), written]
    else:
        out = _split(rows, key, len(ancestors) + 1)
    out[0] = _release(out[0]._replace(group=None), stitch.compact(labels[plane < 0]), job, gain, picks)
    return out


def _stitch_upper(job, position, *pieces):
    """The groups of every task near one upper split plane, re-solved together and released."""
    return _stitch_upper_rows(job, _concat(pieces, len(job.qi)))


def _stitch_upper_read(job, position, keys, *written):
    """:func:`_stitch_upper` over the rows the block tasks below the plane wrote to their files for it (key
    ``keys[i]`` of ``written[i]``: a :class:`pipeline.transit.Written`, or a block task's whole output, whose
    item 1 it is), read straight into their arrays."""
    files = [w if isinstance(w, transit.Written) else w[1] for w in written]
    arrays = transit.read_keys(list(zip(files, keys)))
    if arrays is None:
        return _stitch_upper(job, position)
    return _stitch_upper_rows(job, _rows_read(arrays, grouped=True))


def _rows_read(arrays, grouped):
    """:class:`Rows` (in row-id order) of the arrays read from files written from :class:`Rows`
    (:func:`pipeline.transit.read_keys`: row ids, leaves, values, groups if ``grouped``, weights if any)."""
    fields = list(arrays) if grouped else [*arrays[:3], None, *arrays[3:]]
    return _in_row_order(Rows(*fields))


def _stitch_upper_rows(job, rows):
    """:func:`_stitch_upper` of the plane's rows (:class:`Rows`, in row-id order)."""
    if not len(rows.row_id):
        return _release(rows, rows.leaf, job, 0.0)
    options = job.options
    Z = kernels.standardize(rows.values, job.mean, job.std)
    labels, gain = stitch.stitch_upper(Z, rows.group, options.k, solver_of(options), stitch.STITCHING[options.stitch])
    return _release(rows, labels, job, gain)


def _client():
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def persisted(*objs):
    """Persist Dask collections and wait for them, so stage timings measure the work."""
    return _wait(dask.persist(*objs))


def _wait(objs):
    """Wait for persisted collections (on a cluster; local schedulers persist synchronously)."""
    if _client() is not None:
        from distributed import futures_of, wait

        wait(futures_of(objs))
    return objs


def solve_blocks(frame, qi, n_rows, mean, std, options, strata=None, first_column=0, sample=None, edges=None,
                 transit_dir=None, release_files=False):
    """Sample -> split tree -> route -> one task per subtree -> kernels -> stitched release.

    The rows travel between stages as arrays (:class:`Rows`) in explicit task graphs: every input
    partition is cut into one piece per task, every task into its released rows plus one piece per
    upper plane above it. ``sample``: :func:`draw_sample`'s result, if the caller has it. With ``strata``
    (:class:`pipeline.strata.Strata`) each stratum has its own tree. ``transit_dir``: a scratch directory
    (:func:`transit_directory`) through which the rows in transit go; ``release_files``: the released pieces
    too (:class:`FiledRelease`; the directory must then outlive the release's write). Returns ``(released,
    forest)``: a list of delayed :class:`Released` or :class:`FiledRelease` (every group lies wholly inside one
    of them) and the :class:`pipeline.blocking.Forest`.
    """
    start = time.perf_counter()
    fraction, sample = sample or draw_sample(frame, qi, n_rows, options)
    Zs = _standardized(sample, qi, mean, std)[1]  # the sample's values are not kept beside their z-scores
    task_rows = options.blocks_per_task * options.block_size
    codes = strata.codes(sample) if strata else None
    tree = blocking.build_forest(Zs, codes, strata.n_trees if strata else 1, fraction, options.block_size,
                                 task_rows, options.k, options.order, options.one_block_rows,
                                 strata.tree_rows if strata else None)
    log.info("split tree: %d blocks in %d tasks (%d packs), %d upper planes (sample of %d rows) in %.2f s",
             tree.n_leaves, tree.n_tasks, tree.n_packs, tree.n_upper, len(sample), time.perf_counter() - start)
    layer = graph.Layer("microagg-blocks")
    job = _shipped(_Job(tuple(qi), mean, std, tree, options, strata, first_column, edges=edges,
                        transit=os.path.join(transit_dir, layer.name) if transit_dir else None,
                        release_files=np.asarray(file_divisions(n_rows, options.rows_per_file)[:-1], dtype=np.int64)
                        if transit_dir and release_files else None))
    columns = [ROW_ID, *qi] + ([options.weights] if options.weights else []) + list(options.strata)
    parts = parts_of(frame[columns])
    shared = _shares_outputs(n_rows, len(qi))
    if transit_dir:  # the routed rows through files, not memory: every task reads its own from them
        routed = [layer.task(("route", i), _route_to_file, part, job, os.path.join(transit_dir, f"{layer.name}-{i}"))
                  for i, part in enumerate(parts)]
        bundles = layer.bundles("routed", routed, kept=False)
        packs = [layer.task(("solve", p), _solve_pack_read, job, p, *bundles) for p in range(tree.n_packs)]
    elif shared:
        routed = [layer.task(("route", i), _route, part, job) for i, part in enumerate(parts)]
        bundles = layer.bundles("routed", routed, kept=False)  # not tasks x partitions dependencies
        packs = [layer.task(("solve", p), _solve_pack_from, job, p, *bundles) for p in range(tree.n_packs)]
    else:
        routed = [layer.task(("route", i), _route, part, job) for i, part in enumerate(parts)]
        inbound = layer.exchange("rows", routed, tree.n_packs, partial(_concat, width=len(qi)), rows=n_rows)
        packs = [layer.task(("solve", p), _solve_pack, job, p, *inbound[p]) for p in range(tree.n_packs)]
    released = [layer.item(p, 0) for p in packs]
    if tree.n_upper:
        below = [[] for _ in range(tree.n_upper)]  # (pack, slot of its output) per upper plane
        for t, pack in enumerate(tree.task_pack):  # a task below an upper plane has a pack of its own
            for slot, position in enumerate(tree.task_ancestors[t]):
                below[position].append((packs[pack], 1 + slot))
        if transit_dir:  # from each block task's file: whole outputs in one worker, else the file's description
            released += [layer.task(("upper", p), _stitch_upper_read, job, p, tuple(s - 1 for _, s in below[p]),
                                    *[pack if shared else layer.item(pack, 1) for pack, _ in below[p]])
                         for p in range(tree.n_upper)]
        elif shared:
            released += [layer.task(("upper", p), _stitch_upper_from, job, p, tuple(s for _, s in below[p]),
                                    *[pack for pack, _ in below[p]]) for p in range(tree.n_upper)]
        else:
            released += [layer.task(("upper", p), _stitch_upper, job, p,
                                    *[layer.item(pack, slot) for pack, slot in below[p]]) for p in range(tree.n_upper)]
    return layer.delayed(released), tree


SHARED_OUTPUTS_BYTES = 40
"""Worker memory per input cell (row x QI column) from which :func:`_shares_outputs` lets tasks read whole
outputs: about four times a row's arrays in transit (its QI values, row id, leaf and group: 10 bytes a cell at
13 QIs), since Dask counts a whole output until its last reader has run (the routed rows until the last block
task; the pieces themselves go as they are read, :func:`_taken`), and spills it whole (a block task's with its
released piece in it). The default local
cluster at 10M rows x 13 QIs needs 5.2 GB; a worker of 1.5 GiB shares them up to 3M rows."""


def _shares_outputs(n_rows, width):
    """Whether each block task may take its rows from the routing tasks' whole outputs, and each upper plane's
    task its pieces from the block tasks', instead of through one task per piece: when every task runs in one
    process (nothing travels) whose memory is roomy for the rows (no limit, or at least
    :data:`SHARED_OUTPUTS_BYTES` per cell). At 10M rows on 2 cores the 2,304 piece tasks (1,280 routed pieces,
    1,024 pieces of the block tasks' outputs) each left a thread idle 1.3-1.7 ms before it: about 3.5 s of the
    threads' time; the blocks stage took about 0.9 s less without them (BENCHMARKS.md, forty-second session)."""
    if not _one_process():
        return False
    client = _client()  # None: the synchronous scheduler, this process without a limit
    workers = [] if client is None else client.scheduler_info()["workers"].values()
    return all(not w.get("memory_limit") or w["memory_limit"] >= SHARED_OUTPUTS_BYTES * n_rows * max(width, 1)
               for w in workers)


TRANSIT_MEMORY_SHARE = 0.1
"""The share of the job process's memory (its workers' memory limits; without limits, the machine's) that the rows
in transit (8 bytes per cell of their QI values, row ids and leaves: 1.2 GB at 10M rows x 13 QIs) may take: beyond
it, when the tasks run in the job's process, they go through files (:mod:`pipeline.transit`), from the routing to
the block tasks and from these to the upper planes' tasks, and the worker's memory no longer grows with them. Not
for less: on this project's host, the files' fresh pages cost the 10M-row job 3-4 s of system time (BENCHMARKS.md,
fifty-fourth session)."""


def trim_heap():
    """glibc's ``malloc_trim(0)``: the free pages inside this process's heaps given back to the system. Freed
    memory that is not at a heap's top otherwise stays resident (a process's RSS does not fall when its
    data go). 1 if memory was given back, 0 if not or without glibc."""
    import ctypes

    try:
        return int(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):  # no glibc (macOS, musl)
        return 0


def return_freed_memory():
    """:func:`trim_heap` in every worker process and in this one: between two stages of a job, so that the
    second's memory starts from what the first still holds, not from its high-water mark. The 10M-row
    job's evaluation peaked at 2.23-2.24 GiB, at 1.96-2.03 after a trim, the release's own peak
    (BENCHMARKS.md, sixty-sixth session). Never fails the job."""
    client = _client()
    if client is not None:
        try:
            client.run(trim_heap)
        except Exception as exc:  # a worker gone: nothing to give back there
            log.debug("trimming the workers' heaps failed: %s", exc)
    trim_heap()


def _memory_limits():
    """Each worker's memory limit (0: none); no worker on a local scheduler."""
    client = _client()
    return [] if client is None else [w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values()]


def _process_memory():
    """The memory of the job's process: its workers' memory limits, or the machine's (cgroup-aware)."""
    from distributed.system import MEMORY_LIMIT

    limits = _memory_limits()
    return sum(limits) if limits and all(limits) else MEMORY_LIMIT


MEMORY_FALLBACK_SHARE = 0.5
"""The most of the job's memory (:func:`_process_memory`) that data kept in memory for want of disk room
(:func:`transit_directory`) may take; beyond it the job stops before the stage (:class:`ScratchSpaceError`)
instead of running out of memory in it, with the rest of the job's data beside it."""


def _refuse_beyond_memory(held_bytes, what, disk_bytes):
    """Raise :class:`ScratchSpaceError` if ``held_bytes`` (what ``what`` would take in memory) exceed
    :data:`MEMORY_FALLBACK_SHARE` of the job's memory, the scratch directory lacking the ``disk_bytes`` they need
    there."""
    memory = _process_memory()
    if held_bytes <= MEMORY_FALLBACK_SHARE * memory:
        return
    root = transit.scratch_root()
    raise ScratchSpaceError(
        f"scratch space for {what}: {disk_bytes / 1e9:.1f} GB needed, {root} has {transit.free_space(root) / 1e9:.1f} "
        f"GB free; in memory they would take {held_bytes / 1e9:.1f} GB, more than {MEMORY_FALLBACK_SHARE:.0%} of the "
        f"job's {memory / 1e9:.1f} GB. Free space there, set Dask's temporary-directory (DASK_TEMPORARY_DIRECTORY) "
        f"to a larger filesystem, or give the workers more memory.")


@contextmanager
def transit_directory(n_rows, cells, wanted=True, what="rows in transit", room=None, held=1.0):
    """A scratch directory for ``n_rows`` rows of ``cells`` 8-byte cells in transit (:func:`solve_blocks`), removed
    on exit; None (the rows travel in memory) when the tasks run in one process and the rows would take at most
    :data:`TRANSIT_MEMORY_SHARE` of the memory, or when a worker (another process: :func:`_unseen_by_workers`)
    cannot see the directory, or without the disk room for them if they take at most :data:`MEMORY_FALLBACK_SHARE`
    of the memory (beyond, :class:`ScratchSpaceError` before the stage). Between worker processes the rows go through
    files whatever their size: in memory they travel between the workers, whose exchanges hold them more than
    once (at 10M rows on 2 worker processes here: 53-56 s and 2.2 GiB a worker in memory, 51 s and 1.3 GiB
    through files; at 1M rows the same time and memory either way; BENCHMARKS.md, fifty-seventh session).
    ``what``: their name in the log; ``room``: the free disk space needed, in times their size
    (default :data:`pipeline.transit.ROOM`); ``held``: the memory they would take, in times their size."""
    transit.clean()  # a killed job's files
    n_bytes = 8 * n_rows * cells
    if not wanted or not n_rows or ((_in_this_process() or _one_process())
                                    and held * n_bytes <= TRANSIT_MEMORY_SHARE * _process_memory()):
        yield None
        return
    with transit.scratch(n_bytes, room, what) as path:
        if path is None:  # no room for them on disk: in memory, if it can hold them
            _refuse_beyond_memory(held * n_bytes, what, n_bytes * (transit.ROOM if room is None else room))
        unseen = _unseen_by_workers(path) if path else 0
        if unseen:
            log.info("%s kept in memory: %d Dask worker(s) cannot see the scratch directory %s (set Dask's "
                     "temporary-directory to a filesystem they share)", what, unseen, path)
            path = None
        elif path:
            log.info("%s through files under %s (%.2f GB)", what, path, n_bytes / 1e9)
        yield path


def _unseen_by_workers(path):
    """How many workers do not see ``path`` (a new directory of a random name: on another host it is not there)."""
    return len(_unseen(path))


@contextmanager
def _transit_for(scratch, n_rows, cells, wanted, released_cells):
    """``(directory, whether the released pieces go through it)``: :func:`transit_directory` entered on
    ``scratch`` (an ``ExitStack`` of :func:`run`'s, closed after the write, which reads the released pieces),
    or, without one (a library caller computes the release later), for the blocks stage alone. The released
    pieces (``released_cells`` 8-byte cells a row: row id, group, a share of their group's tuple) go through
    it when they too would take more than :data:`TRANSIT_MEMORY_SHARE` of the memory: written, each row with
    its values, they are three times their size in memory, which cost the 30M-row job 3-5 s (4 %) here for
    0.5 GiB (BENCHMARKS.md, fifty-fourth session). Between worker processes they go through it whenever the rows
    in transit do: in memory they would reach the write's file tasks through an exchange of per-file cuts,
    which held them two or three times over (at 30M rows the workers' peak, 2.9 GiB, was in the write)."""
    if scratch is not None:
        path = scratch.enter_context(transit_directory(n_rows, cells, wanted))
        yield path, bool(path) and (not _one_process()
                                    or 8 * n_rows * released_cells > TRANSIT_MEMORY_SHARE * _process_memory())
        return
    with transit_directory(n_rows, cells, wanted) as path:
        yield path, False


def _taken(outputs, slots):
    """The pieces ``outputs[i][slots[i]]``, each cleared from its output as it is taken.

    A shared output (:func:`_shares_outputs`) is held until its last reader has run: the routed rows until
    the last block task, a block task's pieces until its last upper plane. Every piece has exactly one
    reader, which runs once (one process: nothing is lost and recomputed without its producer), so the
    reader clears it: its memory goes back as its reader ends, and the next tasks allocate into it. At 10M
    rows the peak RSS went from 3.4 to 2.8 GiB and the system CPU time from 9-12 to 6-8 s
    (BENCHMARKS.md, fifty-third session)."""
    pieces = []
    for out, slot in zip(outputs, slots):
        pieces.append(out[slot])
        out[slot] = None
    return pieces


def _solve_pack_from(job, pack, *bundles):
    """:func:`_solve_pack` over its pieces ``out[pack]`` of the whole outputs of the routing tasks, in bundles
    (:meth:`pipeline.graph.Layer.bundles`; in one process: :func:`_shares_outputs`), taken (:func:`_taken`)."""
    outputs = [out for bundle in bundles for out in bundle]
    return _solve_pack(job, pack, *_taken(outputs, [pack] * len(outputs)))


def _solve_pack_read(job, pack, *bundles):
    """:func:`_solve_pack` over the pack's rows in the routing tasks' files (:func:`_route_to_file`), read
    straight into its arrays (:func:`pipeline.transit.read_key`), in bundles of their descriptions."""
    arrays = transit.read_key([written for bundle in bundles for written in bundle], pack)
    if arrays is None:
        return _solve_pack(job, pack)
    return _solve_pack_rows(job, pack, _rows_read(arrays, grouped=False))


def _stitch_upper_from(job, position, slots, *outputs):
    """:func:`_stitch_upper` over the pieces ``outputs[i][slots[i]]`` (whole outputs of the block tasks
    below the plane, in one process: :func:`_shares_outputs`), taken (:func:`_taken`)."""
    return _stitch_upper(job, position, *_taken(outputs, slots))


class _Shape(NamedTuple):
    """The report's view of how a sequence method split the work (like a split forest's)."""

    n_leaves: int
    n_tasks: int
    n_upper: int = 0


def _route_sequence(part, job, splitters, n_buckets):
    """An input partition's rows, scored and cut into one piece per bucket of the sequence."""
    X, Z = _standardized(part, list(job.qi), job.mean, job.std)
    stratum = (job.strata.codes(part) if job.strata else np.zeros(len(part), dtype=np.int64)).astype(np.int64)
    score = sequence.scores(job.options.method, Z, job.direction)
    bucket = kernels.pair_buckets(stratum, score, *splitters)
    weights = job.options.weights
    weight = None if weights is None else part[weights].to_numpy(dtype=np.float64)
    return _split(sequence.Bucket(part[ROW_ID].to_numpy(dtype=np.int64), stratum, X, Z, weight), bucket, n_buckets)


def _release_sequence(job, b, frontier, bucket, nodes):
    """The groups of the sequence that end in bucket ``b``, released (rows in row-id order)."""
    rows, labels = sequence.bucket_release_rows(frontier, bucket, nodes)
    order = np.argsort(rows.row_id, kind="stable")
    released = Rows(rows.row_id[order], np.full(len(order), b, dtype=np.int64), rows.values[order], None,
                    None if rows.weight is None else rows.weight[order])
    return _release(released, stitch.compact(labels[order]) if len(order) else labels, job, 0.0)


def solve_sequence(frame, qi, n_rows, mean, std, options, strata=None, first_column=0, sample=None, edges=None):
    """A sequence method (:mod:`pipeline.sequence`) on the cluster: score, range-partition into buckets,
    sort each, chain the shortest path through them, release each bucket's groups. Returns
    ``(released, shape)`` like :func:`solve_blocks`."""
    fraction, sample = sample or draw_sample(frame, qi, n_rows, options)
    Zs = _standardized(sample, qi, mean, std)[1]
    direction = sequence.direction(options.method, Zs)
    s_stratum = (strata.codes(sample) if strata else np.zeros(len(sample), dtype=np.int64)).astype(np.int64)
    s_score = sequence.scores(options.method, Zs, direction)
    # buckets of a block task's rows whatever the input's size: the exchange goes two levels when
    # partitions x buckets grows large (graph.Layer.exchange), and the groups do not depend on the cuts
    n_buckets = max(1, -(-n_rows // (options.block_size * options.blocks_per_task)))
    splitters = sequence.splitters(s_stratum, s_score, sample[ROW_ID].to_numpy(dtype=np.int64), n_buckets)
    job = _shipped(_Job(tuple(qi), mean, std, None, options, strata, first_column, direction, edges))
    columns = [ROW_ID, *qi] + ([options.weights] if options.weights else []) + list(options.strata)
    layer = graph.Layer("microagg-sequence")
    routed = [layer.task(("route", i), _route_sequence, part, job, splitters, n_buckets)
              for i, part in enumerate(parts_of(frame[columns]))]
    inbound = layer.exchange("rows", routed, n_buckets, partial(sequence.concat, width=len(qi)), rows=n_rows)
    buckets = layer.delayed([layer.task(("sort", b), sequence.sort_bucket, len(qi), options.method, direction,
                                        *inbound[b]) for b in range(n_buckets)])
    fixed = sequence.grouping_of(options.method, options.method_options) == "fixed"
    chain = sequence.graph(buckets, len(qi), options.k, fixed)
    released = [delayed(_release_sequence, pure=True)(job, b, *links) for b, links in enumerate(chain)]
    return released, _Shape(n_buckets, n_buckets)


MIC1D_BUCKET_ROWS = 25
"""Values per Mic1D-k bucket, in rows of a block task: about 2M values (30 MB in transit) at the
default block size and blocks per task."""


def _route_mic1d(part, job, split, n_buckets):
    """An input partition melted into cells and cut into one piece per bucket of the first sort."""
    X = np.ascontiguousarray(part[list(job.qi)].to_numpy(dtype=np.float64))
    stratum = job.strata.codes(part) if job.strata else None
    cells = mic1d.melt(X, part[ROW_ID].to_numpy(dtype=np.int64), stratum)
    return _split(cells, mic1d.route(cells, "value", split, n_buckets), n_buckets)


def _route_normalized(cells, split, n_buckets):
    return _split(cells, mic1d.route(cells, "normalized", split, n_buckets), n_buckets)


def _cut(cells, a, b):
    return type(cells)(*(None if f is None else f[a:b] for f in cells))


def _length(cells):
    return len(cells.cell)


def _every(cells, lo, stride):
    """The cells at sequence positions ``lo, lo+1, ...`` that are multiples of ``stride``."""
    return sequence.take(cells, np.arange(-lo % stride, len(cells.cell), stride))


def _mic1d_second(job, lo, hi, bounds, merge, *slices):
    """A stretch of whole runs of the second sort: the protected values, one :class:`Released` piece
    per QI column (rows in row-id order, one value each), and the gate's evidence."""
    width = len(job.qi)
    cells = mic1d.concat(slices)
    values, runs = mic1d.second_pass(cells, lo, hi, bounds, job.options.k, merge)
    order = np.argsort(cells.cell, kind="stable")
    cell, values, raw = cells.cell[order], values[order], cells.value[order]
    column = cell % width
    scale = np.where(job.std > 0, job.std, np.inf)[column]
    bounds_, index = groups.group_members(np.ascontiguousarray(column), width)
    pieces, data = [], None
    if job.edges is not None:  # the report's data summary: per column, histogram counts and SSE
        edges = job.edges[job.first_column:job.first_column + width]
        data = {"counts_x": np.zeros((width, edges.shape[1] - 1), dtype=np.int64), "sq_diff": np.zeros(width)}
        data["counts_m"] = data["counts_x"].copy()
    for j, (a, b) in enumerate(zip(bounds_[:-1], bounds_[1:])):
        rows = index[a:b]
        pieces.append(Released(cell[rows] // width, np.arange(b - a, dtype=np.int64), values[rows][:, None], {}))
        if data is not None:
            ones = np.ones(b - a, dtype=np.int64)
            for name, v in (("counts_x", raw[rows]), ("counts_m", values[rows])):
                data[name][j] = histogram.bin_counts(np.ascontiguousarray(v[:, None]), edges[j:j + 1], ones)[0]
            data["sq_diff"][j] = float(((raw[rows] - values[rows]) ** 2).sum())
    evidence = {"values": len(cell), "runs": len(runs), "min_run": int(runs.min()), "max_run": int(runs.max()),
                "short_runs": int(np.count_nonzero(runs < job.options.k)),
                "sse": float((((raw - values) / scale) ** 2).sum()), "columns": np.diff(bounds_), "data": data}
    return [*pieces, evidence]


def _stretches(buckets, bounds, k, merge):
    """The sorted buckets re-cut into stretches of whole runs: ``(lo, hi, slices)`` per stretch."""
    sizes = dask.compute(*[delayed(_length, pure=True)(b) for b in buckets])
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    if offsets[-1] != bounds[-1]:
        raise ReleaseGateError(f"Mic1D-k sorted {offsets[-1]} values but the input has {bounds[-1]}: the input "
                               "changed during the job; nothing written")
    return [(lo, hi, [delayed(_cut, pure=True)(buckets[b], a, z) for b, a, z in slices])
            for lo, hi, slices in mic1d.targets(offsets, bounds, k, merge)]


def _sort_cells(key, *pieces):
    return mic1d.sort_cells(pieces, key)


def _sorted_buckets(key, producers, n_buckets, values):
    """Persisted buckets of cells sorted by ``key``: each producer ``(func, *args)`` cuts its cells
    into one piece per bucket; the pieces travel through :meth:`graph.Layer.exchange` (two levels
    when producers x buckets is large; a bucket's order does not depend on its pieces' order)."""
    layer = graph.Layer(f"microagg-mic1d-{key}")
    routed = [layer.task(("route", i), *producer) for i, producer in enumerate(producers)]
    inbound = layer.exchange("cells", routed, n_buckets, mic1d.concat, rows=values)
    return dask.persist(*layer.delayed([layer.task(("sort", b), _sort_cells, key, *inbound[b])
                                        for b in range(n_buckets)]))


def _mic1d_bounds(strata, n_rows, width):
    """Where each stratum's values start in the Mic1D-k sequence of a block of ``width`` columns."""
    if strata is None:
        return mic1d.stratum_bounds([n_rows * width])
    return mic1d.stratum_bounds(strata.tree_rows * width)


def solve_mic1d(frame, qi, n_rows, mean, std, options, strata=None, first_column=0, sample=None, edges=None):
    """Mic1D-k (:mod:`pipeline.mic1d`) on the cluster: melt, sort, normalize run by run, sort again,
    protect run by run. Returns ``(pieces per QI column, evidence pieces, buckets per sort)``."""
    width, k = len(qi), options.k
    total = n_rows * width
    merge = mic1d.merge_of(options.method_options)
    bounds = _mic1d_bounds(strata, n_rows, width)
    _, sample = sample or draw_sample(frame, qi, n_rows, options)
    s_cells = mic1d.melt(sample[qi].to_numpy(dtype=np.float64), sample[ROW_ID].to_numpy(dtype=np.int64),
                         strata.codes(sample) if strata else None)
    n_buckets = max(1, -(-total // (options.block_size * options.blocks_per_task * MIC1D_BUCKET_ROWS)))
    split = mic1d.splitters(s_cells, "value", n_buckets)
    job = _shipped(_Job(tuple(qi), mean, std, None, options, strata, first_column, edges=edges))
    columns = [ROW_ID, *qi] + list(options.strata)
    # Each stage is submitted, then the references to its inputs dropped before waiting, so that on a
    # cluster every input is freed as soon as its last consumer has run (at 10M rows a copy of the
    # cells in transit is 5 GB).
    buckets = _sorted_buckets("value", [(_route_mic1d, part, job, split, n_buckets)
                                        for part in parts_of(frame[columns])], n_buckets, total)
    _wait(buckets)
    stretches = _stretches(buckets, bounds, k, merge)
    lows = [lo for lo, _, _ in stretches]
    first = dask.persist(*[delayed(mic1d.first_pass, pure=True)(delayed(mic1d.concat, pure=True)(cuts), lo, hi,
                                                               bounds, k, merge)
                           for lo, hi, cuts in stretches])
    del buckets, stretches
    _wait(first)
    stride = max(1, total // max(len(s_cells.cell), 1))  # about as many values as the first sample
    sampled = dask.compute(*[delayed(_every, pure=True)(c, lo, stride) for c, lo in zip(first, lows)])
    split = mic1d.splitters(mic1d.concat(sampled), "normalized", n_buckets)
    buckets = _sorted_buckets("normalized", [(_route_normalized, c, split, n_buckets) for c in first], n_buckets,
                              total)
    del first
    _wait(buckets)
    out = [delayed(_mic1d_second, pure=True, nout=width + 1)(job, lo, hi, bounds, merge, *cuts)
           for lo, hi, cuts in _stretches(buckets, bounds, k, merge)]
    return [[o[j] for o in out] for j in range(width)], [o[width] for o in out], n_buckets


# --- stage 4: the gate -----------------------------------------------------------------------------

def tuple_hashes(table):
    """64-bit hash of each row of ``table`` (a released tuple): :func:`microagg.kernels.row_hashes`,
    every missing value hashed as the same NaN."""
    table = np.ascontiguousarray(table, dtype=np.float64)
    if np.isnan(table).any():
        table = np.where(np.isnan(table), np.nan, table)
    return kernels.row_hashes(table, 0)


def tuple_counts(table, sizes, hashes=None):
    """Rows carrying each group's tuple: for group ``g``, the sum of ``sizes`` over the groups whose
    tuple (row of ``table``, float64) equals ``table[g]``, exactly (:func:`_tuple_evidence`)."""
    return _tuple_evidence(table, sizes, hashes)[0]


def _tuple_evidence(table, sizes, hashes=None):
    """``(counts, distinct)``: :func:`tuple_counts` and the tuples' distinct hashes, sorted.

    Tuples are bucketed by a 64-bit hash (``hashes``: :func:`tuple_hashes`, if the caller has them)
    and compared with their bucket's first tuple (:func:`microagg.kernels.released.tuple_counts`);
    only if two different tuples share a hash (never seen in practice) does it fall back to a full sort.
    """
    if not len(table):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)
    table = np.ascontiguousarray(table, dtype=np.float64)
    hashes = tuple_hashes(table) if hashes is None else hashes
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    counts, distinct, exact = released_kernels.tuple_counts(table, sizes, hashes)
    if exact:
        return counts, distinct
    _, inverse = np.unique(table, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    return np.bincount(inverse, weights=sizes).astype(np.int64)[inverse], _sorted_unique(hashes)


def summarize(rows, labels, table, job, gain, picks=None):
    """The gate's evidence for one released piece (a dict): rows, groups, group sizes, how often
    the released tuples occur (:func:`tuple_counts`), the standardized SSE, rows per block; and, if
    the job has histogram edges, the piece's part of the report's data summary (``data``:
    :func:`_piece_data`). The SSE and the data summary's sums over the rows come from one pass
    (:func:`microagg.kernels.released.piece_errors`)."""
    k = job.options.k
    sizes = np.bincount(labels) if len(labels) else np.zeros(0, dtype=np.int64)
    if table is None:
        counts, distinct = sizes, np.zeros(0, dtype=np.uint64)
    else:
        table = np.ascontiguousarray(table, dtype=np.float64)
        counts, distinct = _tuple_evidence(table, sizes)
    sse = 0.0
    data = None
    if table is not None and len(labels):
        edges = getattr(job, "edges", None)
        width = len(job.qi)
        edges = (np.zeros((width, 1)) if edges is None else  # no bins: nothing counted
                 np.ascontiguousarray(edges[job.first_column:job.first_column + width]))
        counts_x = np.zeros((width, edges.shape[1] - 1), dtype=np.int64)
        X = np.ascontiguousarray(rows.values, dtype=np.float64)
        sse, sq_diff, col_sum = released_kernels.piece_errors(X, table, np.ascontiguousarray(labels, dtype=np.int64),
                                                              np.ascontiguousarray(job.std, dtype=np.float64), edges,
                                                              counts_x)
        if counts_x.shape[1]:
            data = _piece_data(X, labels, table, sizes, edges, counts_x, sq_diff, col_sum,
                               job.options.missing == "error")  # else a value may be missing
    block_ids, block_rows = np.unique(rows.leaf, return_counts=True)
    released = len(labels)
    if job.options.release_where and table is not None and len(table):
        keep = where_mask(pd.DataFrame(table, columns=list(job.qi)), job.options.release_where)
        released = int(sizes[keep].sum())
    return {
        "rows": len(labels),
        "rows_released": released,
        "groups": len(sizes),
        "min_group_size": int(sizes.min()) if len(sizes) else None,
        "max_group_size": int(sizes.max()) if len(sizes) else 0,
        "min_tuple_count": int(counts.min()) if len(counts) else None,
        "rows_in_small_tuples": int(sizes[counts < k].sum()),
        "sse": float(sse),
        "stitch_gain": float(gain),
        "auto_picks": picks,  # auto's race counts (pipeline.methods.Race.picks), or None
        "block_ids": block_ids,
        "block_rows": block_rows,
        "data": data,
        "tuple_hashes": distinct,  # the real anonymity k' (records / distinct released tuples)
    }


def _auto_portfolio(summaries):
    """The report's ``auto_portfolio`` (:func:`pipeline.methods.describe_picks`) if ``auto`` raced
    its portfolio over the blocks, else None."""
    picks = [s["auto_picks"] for s in summaries if s.get("auto_picks") is not None]
    return describe_picks(sum(picks)) if picks else None


def _merged_data(summaries):
    """The data summaries of one attribute block's released pieces (:func:`_piece_data`) added up:
    ``(original counts, masked counts, moments, groups per size)``; None if a piece has none."""
    data = [s.get("data") for s in summaries]
    if not data or any(d is None for d in data):
        return None
    return (sum(d["counts_x"] for d in data), sum(d["counts_m"] for d in data),
            reduce(metrics.combine_moments, [d["moments"] for d in data]),
            sum((Counter(d["sizes"]) for d in data), Counter()))


def _data_summary(qi, edges, data, n_rows, complete, covariance, masked=None):
    """The report's data summary (:func:`pipeline.report.summary_from`) from every attribute block's
    merged pieces (:func:`_merged_data`); None if a block has none.

    One block: its pieces' moments, but for the original's co-moments when no row misses a value: those
    of the statistics pass (the same rows, which the pieces no longer sum again). Several (attribute
    blocks, univariate, Mic1D-k's columns): each
    QI's counts and SSE from its block, the original's correlations from the statistics pass (its
    ``complete`` rows) and the masked ones from ``masked``, the released values' centred
    cross-products (the real-anonymity pass: no block's pieces hold another block's values), else
    not computed; the group sizes of every block together (none for Mic1D-k, whose runs are of
    values). With missing values the masked correlations cover every row, the original's the
    complete rows. The histograms' edges are the original's range (masked values outside it are
    counted in the end bins: :func:`pipeline.report.bin_counts`).
    """
    from .report import summary_from

    if not data or any(d is None for d in data):
        return None
    counts_x = np.concatenate([d[0] for d in data])
    counts_m = np.concatenate([d[1] for d in data])
    sizes = sum((d[3] for d in data), Counter())
    whole = len(data) == 1 and "comoment_m" in data[0][2]  # one block of whole records
    if whole:
        moments = data[0][2]
        if complete == n_rows:  # every row: the statistics pass's co-moments (the pieces' hold none)
            moments = {**moments, "comoment_x": covariance * complete}
    else:
        width = len(qi)
        moments = {"n": complete, "comoment_x": covariance * complete,
                   "comoment_m": np.zeros((width, width)) if masked is None else masked,
                   "sq_diff": np.concatenate([block[2]["sq_diff"] for block in data])}
    summary = summary_from(qi, moments, edges, counts_x, counts_m, sizes, "groups", rows=n_rows, rows_used=n_rows)
    if not whole and masked is None:
        summary["correlation"]["masked"] = None
    return summary


def _piece_data(X, labels, table, sizes, edges, counts_x, sq_diff, col_sum, complete=True):
    """One released piece's part of the report's data summary (:mod:`pipeline.report`), from the
    arrays its task holds: the counts of the original ``X`` (``counts_x``) and the masked values in
    the bins of ``edges`` (the masked ones from the group ``table``, each tuple counted once per row of
    its group), the moments of the row pairs the summary needs (:func:`_piece_moments`) and the number
    of groups of each size. ``sq_diff`` and ``col_sum`` are :func:`microagg.kernels.released.piece_errors`'s.
    ``complete``: no value is missing (else the moments are those of the complete rows). The pieces
    add exactly: counts and sizes by sums, moments by ``metrics.combine_moments``."""
    counts_m = histogram.bin_counts(table, edges, sizes.astype(np.int64))
    if complete:
        moments = _piece_moments(X, table, sizes, sq_diff, col_sum)
    else:
        rows = np.isfinite(X).all(axis=1) & np.isfinite(table).all(axis=1)[labels]
        moments = metrics.moments(X[rows], table[labels[rows]])
    size, number = np.unique(sizes, return_counts=True)
    return {"counts_x": counts_x, "counts_m": counts_m, "moments": moments,
            "sizes": dict(zip(size.tolist(), number.tolist()))}


def _piece_moments(X, table, sizes, sq_diff, col_sum):
    """The part of :func:`metrics.moments` of the rows ``X`` (none of them missing a value) and their
    released values the report's summary uses (``n``, means, the masked co-moment, ``sq_diff``): the
    masked co-moment from the group ``table`` weighted by the group ``sizes`` (as many rows as groups:
    the piece's rows hold one tuple per group); ``sq_diff`` and the column sums ``col_sum`` as the rows'
    one pass found them. The original's co-moment is zeros: :func:`_data_summary` takes the statistics
    pass's, of the same rows."""
    n, d = X.shape
    mean_x = col_sum / n
    mean_m = (sizes @ table) / n
    T = table - mean_m
    return {"n": n, "mean_x": mean_x, "mean_m": mean_m, "comoment_x": np.zeros((d, d)),
            "comoment_m": (T * sizes[:, None]).T @ T, "sq_diff": sq_diff}


def _summary(released):
    """A piece's :func:`summarize` evidence without its tuples' hashes (:func:`gate` counts them apart)."""
    return {key: value for key, value in released.summary.items() if key != "tuple_hashes"}


def _union(*arrays):
    """The distinct values of sorted distinct ``arrays``, sorted."""
    return _sorted_unique(np.concatenate(arrays))


def _gathered(tuples, *parts):
    """Released pieces, or outputs of this function, merged: ``(their summaries in order, with
    ``tuples`` the distinct hashes of their tuples, else None)``."""
    parts = [([_summary(p)], p.summary["tuple_hashes"] if tuples else None) if hasattr(p, "summary") else p
             for p in parts]
    distinct = _union(np.zeros(0, np.uint64), *(h for _, h in parts)) if tuples else None
    return [s for summaries, _ in parts for s in summaries], distinct


def _counted(gathered):
    summaries, distinct = gathered
    return summaries, None if distinct is None else len(distinct)


def gate(released, k, n_rows, tuples=False, filed=False):
    """``(summaries of the released pieces, the rows per block, distinct released tuples)``; raises
    :class:`ReleaseGateError` unless the release is k-anonymous. Every group lies wholly inside one
    piece, so a tuple seen >= k times in every piece where it occurs is seen >= k times in the release.

    With ``tuples``, the distinct tuples of all pieces are counted (k', the real anonymity) from the
    pieces' 64-bit hashes, else the count is None. On a cluster the pieces' evidence meets on the workers
    in a tree (:meth:`graph.Layer.reduce`, 133 merges for the 4,095 pieces of 100M rows) and only the
    summaries and the count reach the client: at 100M rows the hashes were three quarters of the 200 MB of
    evidence. ``filed``: the pieces are :class:`FiledRelease` descriptions, which the tree's first merges take
    whole; pieces held in memory are first reduced to their evidence where they are (one task each), so
    that no merge fetches a piece's rows."""
    if _in_this_process() or not released:  # the pieces are in this process's memory: no task to read them
        summaries, distinct = _counted(_gathered(tuples, *dask.compute(*released)))
    else:
        layer = graph.Layer("microagg-gate")
        merge = partial(_gathered, tuples)
        if len(released) == 1 or not filed:  # a task per piece where it lies (a lone piece: reduce would keep it)
            released = [layer.task(("piece", i), merge, r) for i, r in enumerate(released)]
        root = layer.task("counted", _counted, layer.reduce("gather", released, merge))
        summaries, distinct = dask.compute(layer.delayed([root])[0])[0]
    # a block's rows can sit in several pieces (its groups near an upper plane moved)
    block_sizes = pd.Series(np.concatenate([s["block_rows"] for s in summaries]),
                            index=np.concatenate([s["block_ids"] for s in summaries])).groupby(level=0).sum()
    picks = [s["auto_picks"] for s in summaries if s.get("auto_picks") is not None]
    summaries = [s for s in summaries if s["rows"]]
    if picks and summaries:  # auto's race counts of every piece (an empty one too), carried by the first
        summaries = [{**s, "auto_picks": sum(picks) if i == 0 else None} for i, s in enumerate(summaries)]
    rows = sum(s["rows"] for s in summaries)
    bad = sum(s["rows_in_small_tuples"] for s in summaries)
    if rows != n_rows:
        raise ReleaseGateError(f"the release has {rows} rows but the input has {n_rows}; nothing written")
    smallest = min(s["min_group_size"] for s in summaries)
    if bad or smallest < k:
        raise ReleaseGateError(
            f"the release is not {k}-anonymous: {bad} row(s) carry a quasi-identifier tuple seen fewer "
            f"than k={k} times (smallest group {smallest}); nothing written"
        )
    return summaries, block_sizes.to_numpy(), distinct


# --- stage 5: back to input order, write -----------------------------------------------------------

def _pseudonyms(column, key):
    """HMAC-SHA256 (hex) of each value's text under ``key``: stable pseudonyms, unlinkable without it.
    A missing value stays missing: one pseudonym shared by every record that lacks the identifier
    would link them as one person."""
    present = column.notna().to_numpy(dtype=bool)
    out = np.full(len(column), None, dtype=object)
    out[present] = [hmac.digest(key, str(v).encode(), "sha256").hex() for v in column[present].to_numpy()]
    return pd.array(out, dtype="string")


def _replace_qis(original, released, qi, identifiers, key=None, where=None, order=None):
    """Input rows with their released QI values; identifiers dropped or pseudonymised; with
    ``where``, only the rows whose released values meet it (whole groups). ``order``: the input's columns
    in order (default ``original``'s), of which ``original`` needs only those that are no QI."""
    if not original.index.equals(released.index):
        raise ReleaseGateError("released rows do not match the input rows by row id; nothing written")
    released_qi, ids = set(qi), set(identifiers)
    columns = {}
    for name in order or original.columns:  # one new frame over the columns: no block splitting or copies
        if name in released_qi:
            columns[name] = released[name].to_numpy()
        elif name not in ids:
            columns[name] = original[name].array
        elif key is not None:
            columns[name] = _pseudonyms(original[name], key)
    out = pd.DataFrame(columns, index=pd.RangeIndex(len(original)), copy=False)
    if where:
        out = out[where_mask(out, where)].reset_index(drop=True)
    return out


MAX_OUTPUT_FILES = 100_000
"""Most Parquet files one release may have (a typo in ``--rows-per-file`` would flood the filesystem)."""


def check_file_count(n_rows, rows_per_file):
    """Refuse a ``rows_per_file`` that would cut the release into more than :data:`MAX_OUTPUT_FILES`."""
    files = -(-n_rows // rows_per_file)
    if files > MAX_OUTPUT_FILES:
        raise InputError(f"--rows-per-file {rows_per_file} would cut the {n_rows:,} rows into {files:,} files, more "
                         f"than {MAX_OUTPUT_FILES:,}; give at least {-(-n_rows // MAX_OUTPUT_FILES):,} rows per file "
                         f"(default {ReleaseOptions.rows_per_file:,})")


def file_divisions(n_rows, rows_per_file):
    """Row-id boundaries of the output files: fixed ranges, whatever the input partitioning."""
    starts = list(range(0, n_rows, rows_per_file))
    if len(starts) > 1 and starts[-1] == n_rows - 1:
        starts.pop()  # a one-row last file would repeat the final division
    return tuple(starts) + (n_rows - 1,)


def _by_file(released, starts):
    """Released rows cut into one ``(row ids, groups, group table)`` piece per output file (``starts``:
    first row ids).

    A piece whose rows go to several files gives each file only the groups its rows carry: every
    piece is then counted (and, on a cluster, spilled or sent) at its own size, not with the whole
    table again (at 100M rows the repeated tables made the worker think it held 20 GB).
    """
    if isinstance(released, FiledRelease):  # already cut by file
        return [_file_rows(released, start) for start in starts]
    row_id, group, table = released.row_id, released.group, released.table
    cuts, rank, ids, id_bounds = groups.file_pieces(row_id, np.ascontiguousarray(group, dtype=np.int64), len(table),
                                                    np.asarray(starts, dtype=np.int64))
    if np.count_nonzero(np.diff(cuts)) <= 1:
        return [(row_id[a:b], group[a:b], table) for a, b in zip(cuts[:-1], cuts[1:])]
    return [(row_id[a:b], rank[a:b], table[ids[c:d]])
            for a, b, c, d in zip(cuts[:-1], cuts[1:], id_bounds[:-1], id_bounds[1:])]


def _merge_file_pieces(pieces):
    """:func:`_by_file` pieces of one file (one attribute block) as one: rows concatenated, each
    piece's group indices shifted past the tables before it (the merge of a two-level exchange)."""
    full = [p for p in pieces if len(p[0])]
    if len(full) <= 1:
        return full[0] if full else pieces[0]
    offsets = np.cumsum([0] + [len(table) for _, _, table in full[:-1]])
    return (np.concatenate([row_id for row_id, _, _ in full]),
            np.concatenate([group + o for (_, group, _), o in zip(full, offsets)]),
            np.concatenate([table for _, _, table in full]))


def _scatter(start, stop, width, slots, pieces):
    """Released values of rows ``start..stop-1``, column by column (``(width, n)``), from ``pieces``
    (``(row ids, groups, group table)``; rows outside the range are ignored) whose values fill the QI
    columns ``slots[i]`` (one attribute block's, consecutive); every cell exactly once, or the release
    is refused. Each attribute block's pieces are scattered row by row, then its columns written out
    (:func:`microagg.kernels.groups.scatter_rows`, :func:`~microagg.kernels.groups.transpose_into`)."""
    n = stop - start
    values = np.empty((width, n))  # columns contiguous: a DataFrame over them needs no copy
    blocks = sorted({slot[0] for slot in slots})
    seen = np.zeros((n, max(len(blocks), 1)), dtype=np.int64)
    scattered = {}  # first column of an attribute block -> its rows, row-major
    for (row_id, group, table), slot in zip(pieces, slots):
        rows = scattered.get(slot[0])
        if rows is None:
            rows = scattered[slot[0]] = np.empty((n, len(slot)))
        groups.scatter_rows(rows, seen, start, blocks.index(slot[0]), row_id,
                            np.ascontiguousarray(group, dtype=np.int64), np.ascontiguousarray(table, dtype=np.float64))
    if width and (seen != 1).any():
        wrong = int((seen != 1).any(axis=1).sum())
        raise ReleaseGateError(f"rows {start}..{stop - 1}: the released values do not cover every row and "
                               f"column exactly once ({wrong} row(s) wrong); nothing written")
    for first, rows in scattered.items():
        groups.transpose_into(rows, values, first)
    return values


def _assemble(start, stop, qi, slots, *pieces):
    """One output file's released QIs, indexed by row id ``start..stop-1``, scattered from the pieces."""
    values = _scatter(start, stop, len(qi), slots, pieces)
    return pd.DataFrame(values.T, columns=list(qi), index=pd.RangeIndex(start, stop, name=ROW_ID), copy=False)


def _distinct_tuples(start, stop, width, subsets, slots, *pieces):
    """Per subset of QI columns, the distinct released tuples of these rows: the values themselves for
    one column, else their 64-bit hashes (:func:`tuple_hashes`, as the pieces count k'); last, a list
    holding the :func:`_comoments` of the released values (the report's masked correlations, which no
    attribute block's pieces can give)."""
    values = _scatter(start, stop, width, slots, pieces)
    return [_sorted_unique(values[cols[0]]) if len(cols) == 1 else
            _sorted_unique(tuple_hashes(values[list(cols)].T))
            for cols in subsets] + [[_comoments(values.T)]]


def _sorted_unique(values):
    """Distinct values of a 1-D array, by one in-place sort (faster than ``np.unique``'s hashing here)."""
    values = np.sort(values)
    return values[np.r_[True, values[1:] != values[:-1]]] if len(values) else values


def released_bytes(n_rows, width, k):
    """About the bytes of ``n_rows`` released rows of ``width`` columns cut by output file (:func:`_by_file`): each
    row's id and group, and its group's tuple once per group of k rows or more."""
    return 16 * n_rows - (-8 * width * n_rows // max(k, 1))


def _per_file(released, n_rows, rows_per_file, func, *args, inputs=None, filed=False, k=2):
    """``(output divisions, [func(start, stop, *args, slots, *pieces) per output file])``: one
    delayed task per output file over the released pieces of every attribute block that hold its
    rows (``released``: one ``(column positions, pieces)`` pair per block; ``slots``: each piece's
    column positions). ``inputs``: None, or one delayed object per output file, whose value the file's
    task passes first (``func(input, start, stop, ...)``). ``filed``: the pieces are :class:`FiledRelease`
    descriptions, which every worker may take whole (each file's task reads its own rows). ``k``: the pieces'
    smallest group (the exchange's bytes: :func:`released_bytes`)."""
    out_div = file_divisions(n_rows, rows_per_file)
    starts = np.asarray(out_div[:-1], dtype=np.int64)
    stops = [*out_div[1:-1], n_rows]
    layer = graph.Layer(f"microagg-{func.__name__.strip('_')}")
    if filed or _one_process():
        # every piece is in this one process's memory, or is a file's description: each file task takes its
        # rows from the whole pieces (a binary search each, or its rows read from each file) instead of an
        # exchange of per-file cuts, whose two thousand small tasks at 10M rows kept the scheduler, not the
        # cores, busy (BENCHMARKS.md), and which between worker processes held the pieces two or three times
        # (at 30M rows 2.9 GiB a worker); through bundles of pieces, not every piece, since files x pieces
        # dependencies grow with the square
        pieces = layer.bundles("pieces", [p for _, block_pieces in released for p in block_pieces])
        places = tuple(tuple(int(c) for c in positions) for positions, block_pieces in released for _ in block_pieces)
        files = [layer.task(("file", i), _from_pieces, func, lead, int(a), int(b), args, places, *pieces)
                 for i, (lead, a, b) in enumerate(zip(_leads(inputs, len(starts)), starts, stops))]
        return out_div, layer.delayed(files)
    inbound = [[] for _ in starts]
    slots = [[] for _ in starts]
    for block, (positions, pieces) in enumerate(released):  # an exchange per attribute block: one slot per piece
        cut = [layer.task(("cut", block, i), _by_file, r, starts) for i, r in enumerate(pieces)]
        for i, refs in enumerate(layer.exchange(("files", block), cut, len(starts), _merge_file_pieces,
                                                nbytes=released_bytes(n_rows, len(positions), k))):
            inbound[i] += refs
            slots[i] += [tuple(int(c) for c in positions)] * len(refs)
    files = [layer.task(("file", i), _led, func, lead, int(a), int(b), *args, tuple(slots[i]), *inbound[i])
             for i, (lead, a, b) in enumerate(zip(_leads(inputs, len(starts)), starts, stops))]
    return out_div, layer.delayed(files)


CHUNK_ROWS = 128
"""Below this many rows of an output file, on average, in each released piece's file, the pieces' files are
merged first (:func:`_merged`): at 100M rows each of the 400 files' tasks read about 60 rows from each of the
4,095 pieces' files, 1.6M small reads, with their calls, that took about 120 of the write's 270 thread-seconds
(merged: 24 s less). At 30M rows on worker processes, about 240 rows a read, merging gained nothing."""

MERGE_BYTES = 64 << 20
"""About the bytes of released rows that one merge of pieces' files (:func:`_merged`) holds."""


def _merged(layer, block, pieces, width, n_rows, n_files):
    """The filed released pieces of one attribute block (``width`` columns) for ``n_files`` output files' tasks
    (the write's, the real anonymity's): as they are, or, when each file would read fewer than :data:`CHUNK_ROWS` rows from each piece on
    average, merged, consecutive pieces into one file of about :data:`MERGE_BYTES`
    (:func:`pipeline.transit.merge`): every file task then reads one range of each merged file, the same rows
    in the same order. The batches depend on the rows and pieces alone, not on the workers."""
    if len(pieces) < 2 or n_rows >= CHUNK_ROWS * len(pieces) * n_files:
        return pieces
    piece_bytes = 8 * (1 + width) * n_rows / len(pieces)
    batch = max(2, int(MERGE_BYTES // piece_bytes))
    return [layer.task(("merged", block, i), _merge_pieces, *pieces[a:a + batch])
            for i, a in enumerate(range(0, len(pieces), batch))]


def _for_files(solved, blocks, n_rows, rows_per_file):
    """The filed released pieces of each attribute block (``solved``, persisted; ``blocks``: their columns) as the
    output files' tasks read them: merged where :func:`_merged` says so, persisted once for every pass over the
    files (the write, the real anonymity of attribute blocks)."""
    layer = graph.Layer("microagg-merged")
    n_files = len(file_divisions(n_rows, rows_per_file)) - 1
    merged = [_merged(layer, b, pieces, len(block), n_rows, n_files) for b, (block, pieces) in enumerate(zip(blocks, solved))]
    if all(m is pieces for m, pieces in zip(merged, solved)):
        return solved
    flat = iter(dask.persist(*layer.delayed([r for m, pieces in zip(merged, solved) if m is not pieces for r in m])))
    return [pieces if m is pieces else [next(flat) for _ in m] for m, pieces in zip(merged, solved)]


def _merge_pieces(*pieces):
    """:class:`FiledRelease` pieces' files merged into one (:func:`pipeline.transit.merge`), beside the first."""
    first = pieces[0]
    written = transit.merge(f"{first.written.path}-merged-{uuid.uuid4().hex}", [p.written for p in pieces])
    return FiledRelease(written, first.starts, first.width, None)


def _leads(inputs, n_files):
    """Each file task's input (:func:`_per_file`), None for none."""
    if inputs is None:
        return [None] * n_files
    if len(inputs) != n_files:
        raise ValueError(f"{len(inputs)} inputs for {n_files} output files")
    return inputs


def _led(func, lead, *args):
    """``func(*args)``, or ``func(lead, *args)`` when the file task has an input (``lead``, not None)."""
    return func(*args) if lead is None else func(lead, *args)


def _from_pieces(func, lead, start, stop, args, places, *bundles):
    """:func:`_led` ``func(start, stop, *args, places, *pieces)`` over whole released pieces (in
    :class:`pipeline.graph.Bundle` objects; ``places``: each piece's column positions), whose rows outside
    ``start..stop-1`` :func:`_scatter` skips by binary search (the one-process form of :func:`_per_file`)."""
    return _led(func, lead, start, stop, *args, places, *[_file_rows(p, start) for b in bundles for p in b])


def _one_process():
    """Whether the tasks run in one process (a local scheduler, or a cluster of one worker)."""
    client = _client()
    return client is None or len(client.scheduler_info()["workers"]) == 1


def _in_this_process():
    """Whether the tasks run in this process (a local scheduler, or workers that are its threads)."""
    client = _client()
    return client is None or all(a.startswith("inproc://") for a in client.scheduler_info()["workers"])


def _missing(paths):
    return [p for p in paths if not os.path.exists(p)]


def _unseen(path):
    """``{worker: [path]}`` for the workers (other processes, perhaps other hosts) that do not see ``path`` at the
    job's path; none when the tasks run in this process."""
    client = _client()
    if client is None or _in_this_process():
        return {}
    return {worker: gone for worker, gone in client.run(_missing, [os.path.abspath(path)]).items() if gone}


def _workers_see(path):
    """Refuse a cluster whose workers (other processes, perhaps other hosts) do not see ``path``, a
    local input or the release's temporary directory, at the job's path: they read the one and write
    into the other."""
    unseen = _unseen(path)
    if unseen:
        worker, gone = min(unseen.items())
        raise InputError(f"{len(unseen)} Dask worker(s) cannot see {gone[0]!r} (e.g. {worker}), which this job sees: "
                         "the workers must see the input and the output at the same paths as the job (a shared "
                         "filesystem; or an object store URL for the input). Nothing was written.")


def restore_order(frame, released, lengths, qi, ids, n_rows, rows_per_file, key=None, where=None, filed=False, k=2,
                  order=None):
    """The released frame: input rows in input order with QIs replaced, identifiers dropped (or
    pseudonymised with the HMAC ``key``), only the rows meeting ``where`` if given. ``released``: one
    ``(column positions, delayed Released pieces)`` pair per attribute block (``filed``: :class:`FiledRelease`
    pieces). ``lengths``: of the frame's partitions, none of them empty. ``k``: the pieces' smallest group.
    ``order``: the input's columns in order, when ``frame`` holds only some (:func:`write_columns`: the QIs'
    input values are not read again)."""
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    in_div = tuple(int(o) for o in offsets) + (n_rows - 1,)
    out_div = file_divisions(n_rows, rows_per_file)
    original = frame.set_index(ROW_ID, sorted=True, divisions=in_div).repartition(divisions=out_div)
    # each file's released values are scattered in the task that writes them into its input rows: as a
    # task of their own, needing only the persisted pieces, they were ready at once and ran ahead of the
    # input's reading (at 10M rows with the input re-read, 31 files' values waited at once: 0.8 GB)
    order = tuple(order or original.columns)
    _, files = _per_file(released, n_rows, rows_per_file, _replaced, tuple(qi), tuple(ids), key, where, order,
                         inputs=parts_of(original), filed=filed, k=k)
    meta = _replace_qis(original._meta, _assemble(0, 0, tuple(qi), ()), qi, ids, key, where, order)
    with dask.config.set({"dataframe.convert-string": False}):  # an object column (lists, structs) stays as read
        return dd.from_delayed(files, meta=meta, divisions=out_div, verify_meta=False)


def _replaced(original, start, stop, qi, ids, key, where, order, slots, *pieces):
    """:func:`_replace_qis` of one output file's input rows (``original``, row ids ``start..stop-1``) with
    their released values, scattered from the pieces (:func:`_assemble`)."""
    return _replace_qis(original, _assemble(start, stop, qi, slots, *pieces), qi, ids, key, where, order)


def real_anonymity(released, width, n_rows, rows_per_file, subsets, filed=False):
    """k' = records / distinct released records over each subset of QI columns (the Mic1D paper's
    real anonymity), distinct tuples counted by 64-bit hashes across all output files (the files'
    distinct tuples meet on the workers in a tree, :meth:`graph.Layer.reduce`: the client receives
    the counts). Returns ``(k' per subset, the centred cross-products of the released values)``.
    ``filed``: as :func:`_per_file`'s."""
    _, files = _per_file(released, n_rows, rows_per_file, _distinct_tuples, width, subsets, filed=filed)
    layer = graph.Layer("microagg-real-anonymity")
    root = layer.reduce("union", files, _union_each)
    counts, comoments = dask.compute(layer.delayed([layer.task("distinct", _distinct_counts, root)])[0])[0]
    return [n_rows / count for count in counts], _merge_comoments(comoments)[2]


def _union_each(*parts):
    """:func:`_distinct_tuples`'s outputs of consecutive files merged: each subset's distinct tuples, and
    the files' :func:`_comoments` kept in order."""
    return [_union(*(p[i] for p in parts)) for i in range(len(parts[0]) - 1)] + [[c for p in parts for c in p[-1]]]


def _distinct_counts(merged):
    return [len(distinct) for distinct in merged[:-1]], merged[-1]


def _attribute_block_report(blocks, per_block, std, starts, n_rows, solved, rows_per_file, filed=False):
    """Per attribute block: columns, groups, smallest group, IL; and the real anonymity k' of the
    whole record and of every pair and triple of blocks (k-anonymity holds per block only). Returns
    ``(that dict, the released values' centred cross-products)``."""
    from itertools import combinations

    out = {"blocks": []}
    for b, (block, (summaries, *_)) in enumerate(zip(blocks, per_block)):
        sst = float(n_rows * np.count_nonzero(std[starts[b]:starts[b + 1]] > 0))
        out["blocks"].append({
            "columns": block,
            "groups": sum(s["groups"] for s in summaries),
            "min_group_size": min(s["min_group_size"] for s in summaries),
            "information_loss": 100.0 * sum(s["sse"] for s in summaries) / sst if sst else 0.0,
        })
    names = {}
    for size in (2, 3) if len(blocks) <= 6 else (1,):  # many blocks (univariate): each alone, and all
        for combo in combinations(range(len(blocks)), size):
            if size < len(blocks):
                names["+".join(str(i + 1) for i in combo)] = combo
    names["all"] = tuple(range(len(blocks)))
    subsets = [tuple(c for b in combo for c in range(starts[b], starts[b + 1])) for combo in names.values()]
    by_block = [(range(starts[b], starts[b + 1]), pieces) for b, pieces in enumerate(solved)]
    k_prime, comoment = real_anonymity(by_block, int(starts[-1]), n_rows, rows_per_file, subsets, filed)
    out["real_anonymity"] = dict(zip(names, k_prime))
    return out, comoment


def _enough_partitions(ddf):
    """Split an input read as fewer partitions than twice the cores (one large file, say), so the
    reading and statistics passes run in parallel. Row ids stay global positions, so the release
    does not change."""
    cores = io.cluster_cores()
    if ddf.npartitions < 2 * cores:
        return ddf.repartition(npartitions=2 * cores)
    return ddf


_ASIDE = []  # the threads of _aside still running, joined at exit


def _aside(name, work):
    """Run ``work()`` in a thread of its own named ``microagg-{name}``, its errors ignored (the caller's
    own call raises them again, where they are handled). The process's exit handlers wait for the
    thread (``microagg`` leaves with ``os._exit`` after them): a first import of matplotlib writes its
    font cache, a first kernel call on a machine without Numba's cache writes that, neither to be cut
    short."""

    def run():
        try:
            work()
        except Exception:
            pass

    _ASIDE[:] = [t for t in _ASIDE if t.is_alive()]
    thread = threading.Thread(target=run, name=f"microagg-{name}", daemon=True)
    _ASIDE.append(thread)
    thread.start()
    return thread


def _import_aside(name):
    """Start importing the module ``name`` aside (:func:`_aside`); an import of it elsewhere waits for
    that one to end (Python's import lock per module).

    The report's module imported matplotlib: 0.5-1 s of one core while the workers waited, before the
    statistics pass began (BENCHMARKS.md, thirty-fifth session). Its figures' modules are now imported
    only by the jobs that draw the page (:func:`_import_figure_modules`)."""
    return _aside(f"import-{name}", partial(importlib.import_module, name))


def _import_figure_modules():
    """The report module's and its figures' matplotlib modules (:data:`pipeline.report.FIGURE_MODULES`),
    imported aside by a job that draws the page."""
    from . import report

    report.import_figure_modules()


def warm_kernels_aside():
    """Start Numba's code generator aside (:func:`_aside`), by a first kernel call on one value with the
    statistics pass's argument types. The first kernel a process loads from Numba's cache starts it:
    about 0.3 s, during which every other thread that needs a kernel waits (at 10M rows both worker
    threads, at the statistics pass's first tasks). For kernels that run in this process (workers that
    are its threads, the synchronous scheduler), called while the cluster starts (BENCHMARKS.md,
    forty-third session)."""
    return _aside("warm-kernels", _warm_sums)


def _warm_sums():
    """The exact sums on both layouts they run on: a partition's column-major block (the statistics pass)
    and a row-major array (the in-memory API)."""
    stats.chunk(np.zeros((2, 2), order="F"))
    stats.chunk(np.zeros((2, 2)))


@atexit.register
def _join_aside():
    for thread in list(_ASIDE):
        thread.join()


def build_release(ddf, options, timings=None, identifier_key=None, columns=None, keep_input=True, row_check=None,
                  scratch=None):
    """All stages but the write: ``(released, report)``.

    ``released`` is a lazy Dask DataFrame of the input rows in input order (QIs replaced by group
    centroids, identifiers dropped or, with ``options.hash_identifiers``, replaced by their HMAC under
    ``identifier_key``), already checked by the gate; ``report`` describes it. ``columns`` is
    ``plan(ddf, options)`` when the caller has already validated. ``keep_input``: on a cluster, read
    the input once and keep it in memory, its QIs until routed and its other columns until the write
    (:func:`_kept_sources`); False re-reads it in each pass (for an input larger than the workers' memory). ``row_check``: the :class:`pipeline.io.RowShape` of a CSV input
    (:func:`pipeline.io.row_shape`), whose rows swallowed by a quote left open are refused. ``scratch``: an
    ``ExitStack`` the caller closes once the release is written: the rows in transit's files, the released
    pieces' among them, live until then (:func:`_transit_for`).
    """
    from .. import __version__

    _import_aside(__package__ + ".report")  # while the statistics pass reads
    timings = timings or Timings()
    with timings.stage("validate"):
        qi, ids = columns or plan(ddf, options)
        ddf = _enough_partitions(ddf)
        if options.hash_identifiers and not identifier_key:
            raise InputError("hashing identifiers needs a secret key (the CLI reads it from the environment "
                             "variable MICROAGG_HMAC_KEY)")
        if options.hash_identifiers and not ids:
            raise InputError("hashing identifiers needs --identifiers to name them")
    with timings.stage("statistics"):
        # Every later stage derives from this one frame: the row ids are positions within its
        # partitions, which a column projection keeps only when Dask's optimizer runs untuned, as it
        # does for every pass's read (UNTUNED, parts_of). On a cluster the input is read once
        # and kept in memory (spilled if need be): the solve's columns until the blocks stage has
        # routed them, the write's until the write (_kept_sources).
        # (Local schedulers re-read: persisting a Parquet read there loses partitions in dask 2026.8.)
        # Not waited for: a partition's sums run as soon as it is read, beside the last reads.
        solving = [*qi, *([options.weights] if options.weights else []), *options.strata]  # what the solve reads
        dropped = () if options.hash_identifiers else ids
        kept = _kept_sources(ddf, solving, write_columns(ddf.columns, qi, dropped),
                             _client() is not None and keep_input, whole=row_check is not None)
        n_rows, mean, std, lengths, covariance, evidence, missing, lo, hi, complete = column_statistics(
            kept[0] if row_check else projected(kept[0], solving),  # a CSV row's shape is checked on all its fields
            qi, options.weights, options.strata, options.missing, row_check)
        from . import report as report_page  # imported aside meanwhile (or waits for that import to end)

        edges = report_page.histogram_edges(lo, hi)  # the report's histograms: the original's range
        # Mic1D-k's k counts values (each block's rows x columns), every other method's rows
        blocks = [list(b) for b in options.attribute_blocks] or (
            [[c] for c in qi] if options.method == "univariate" else [list(qi)])  # individual ranking: column by column
        starts = np.cumsum([0] + [len(b) for b in blocks])
        constant = mic1d.constant_columns(lo, hi)  # Mic1D-k releases these as they are
        width = mic1d.vector_width([len(b) for b in blocks], constant) if mic1d.is_mic1d(options.method) else 1
        check_k(options.k, n_rows * width)
        check_file_count(n_rows, options.rows_per_file)
        strata = (plan_strata(options.strata, evidence, qi, mean, std, -(-options.k // width), options.small_strata)
                  if options.strata else None)
        (solve_source, _), (write_source, lengths) = [_without_empty_partitions(k, lengths) for k in kept]
        del kept  # the solve's columns are let go once routed (below), the write's kept until the write
        frame = with_row_ids(projected(solve_source, solving), lengths)  # the sample's and the blocks' columns
        rest = with_row_ids(projected(write_source, write_columns(ddf.columns, qi, dropped)), lengths)  # the write's
        order = tuple(ddf.columns)
        del solve_source, write_source
    if mic1d.is_mic1d(options.method):
        return _build_mic1d(frame, options, timings, identifier_key, qi, ids, blocks, starts, n_rows, mean, std,
                            covariance, lengths, strata, np.where(constant, lo, np.nan), edges, complete,
                            (rest, order))
    by_tree = not sequence.is_sequence(options.method)
    cells = len(qi) + (2 + bool(options.weights)) * len(blocks)  # QI values, row ids, leaves (and weights)
    released_cells = 2 * len(blocks) + len(qi) / options.k  # row ids, groups; tuples of k rows or more
    with timings.stage("blocks"), _transit_for(scratch, n_rows, cells, by_tree, released_cells) as (transit_dir,
                                                                                                   release_files):
        solved, forests, through_files = [], [], transit_dir is not None
        release_files = through_files and release_files
        sample = draw_sample(frame, qi, n_rows, options)  # one sample serves every attribute block
        for block, first in zip(blocks, starts):
            cols = np.arange(first, first + len(block))
            solve = solve_blocks if by_tree else solve_sequence
            pieces, forest = solve(frame, block, n_rows, mean[cols], std[cols], options, strata, int(first), sample,
                                   edges, **({"transit_dir": transit_dir, "release_files": release_files}
                                             if by_tree else {}))
            solved.append(pieces)
            forests.append(forest)
        del sample  # (about 2M rows at most) not held through the stage, the gate and the write
        with _graph_holding(forests):
            flat = dask.persist(*[p for pieces in solved for p in pieces])
        cuts = np.cumsum([0] + [len(p) for p in solved])
        solved = [list(flat[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
        # nothing here holds the input's solved columns now: kept in memory, each partition goes once its rows
        # are routed (the graphs of the stage, which held them, are persisted; the routed copies remain)
        del frame, pieces
        # what the output files' tasks read (the write's, and the real anonymity's with attribute blocks)
        readable = _for_files(solved, blocks, n_rows, options.rows_per_file) if release_files else solved
        # the release's graph is built while the workers solve (it is computed only after the gate)
        key = identifier_key if options.hash_identifiers else None
        by_block = [(range(starts[b], starts[b + 1]), pieces) for b, pieces in enumerate(readable)]
        released = restore_order(rest, by_block, lengths, qi, ids, n_rows, options.rows_per_file, key,
                                 options.release_where, release_files, options.k, order)
        _wait(flat)
        if release_files:  # the rows in transit are solved: only the released pieces' files are read again
            transit.remove_files(transit_dir, keep=RELEASED_FILE)
    with timings.stage("gate"):
        k_prime = len(blocks) == 1 and not options.release_where  # else real_anonymity counts the files' tuples
        per_block = [gate(pieces, options.k, n_rows, k_prime, release_files)  # k-anonymous block by block
                     for pieces in solved]
        data = [_merged_data(block_summaries) for block_summaries, *_ in per_block]
    summaries = [s for block_summaries, *_ in per_block for s in block_summaries]
    block_sizes = np.concatenate([sizes for _, sizes, _ in per_block])
    sse = sum(s["sse"] for s in summaries)
    sst = float(((n_rows - missing) * (std > 0)).sum())  # over the observed cells
    report = {
        "rows": n_rows,
        "k": options.k,
        "method": options.method,
        "refine": options.refine,
        "method_options": dict(options.method_options),
        "refine_options": dict(options.refine_options),
        "stitch": options.stitch,
        "aggregate": options.aggregate,
        "weights": options.weights,
        "order": options.order,
        "seed": options.seed,
        "quasi_identifiers": qi,
        "statistics": {"mean": mean.tolist(), "std": std.tolist(), "covariance": covariance.tolist()},
        "identifiers_dropped": [] if options.hash_identifiers else ids,
        "identifiers_hashed": ids if options.hash_identifiers else [],
        "groups": sum(s["groups"] for s in summaries),
        "min_group_size": min(s["min_group_size"] for s in summaries),
        "max_group_size": max(s["max_group_size"] for s in summaries),
        "information_loss": 100.0 * sse / sst if sst > 0 else 0.0,
        "sse": sse,
        "sst": sst,
        "k_anonymity_verified": True,
        "k_anonymity_scope": ("each attribute block" if options.attribute_blocks else
                              "each quasi-identifier" if options.method == "univariate" else "all quasi-identifiers"),
        "min_tuple_count": min(s["min_tuple_count"] for s in summaries),
        "blocks": sum(f.n_leaves for f in forests),
        "block_size_target": options.block_size,
        "block_sizes": _distribution(block_sizes),
        "tasks": sum(f.n_tasks for f in forests),
        "upper_planes": sum(f.n_upper for f in forests),
        "rows_in_transit": "files" if through_files else "memory",
        "released_pieces": "files" if release_files else "memory",
        "strata": strata.describe() if strata else None,
        "stitch_sse_gain": sum(s["stitch_gain"] for s in summaries),
        "auto_portfolio": _auto_portfolio(summaries),
        "noise": options.noise,
        "epsilon": options.epsilon,
        "release_where": options.release_where,
        "missing": options.missing,
        "imputed_cells": dict(zip(qi, missing.tolist())),
        "rows_released": sum(s["rows_released"] for s in per_block[0][0]),
        "options": asdict(options),
        "version": __version__,
    }
    masked = None
    if k_prime:
        # k' = records / distinct released tuples, the tuples counted by their 64-bit hashes, as
        # real_anonymity does across files (one group table per piece: no pass over the rows)
        report["real_anonymity"] = {"all": n_rows / max(per_block[0][2], 1)}
    if len(blocks) > 1:
        with timings.stage("real anonymity"):
            report["attribute_blocks"], masked = _attribute_block_report(blocks, per_block, std, starts, n_rows,
                                                                         readable, options.rows_per_file, release_files)
    report["summary"] = _data_summary(qi, edges, data, n_rows, complete, covariance, masked)
    return released, report


def _mic1d_gate(evidence, n_rows, width, bounds, k, merge):
    """Checks of a Mic1D-k attribute block's evidence: every cell released exactly once, and the only
    runs shorter than k the remainder runs the method makes (none with ``remainder="merge"``).
    Returns the block's totals."""
    columns = np.sum([e["columns"] for e in evidence], axis=0)
    if (columns != n_rows).any():
        wrong = int(np.count_nonzero(columns != n_rows))
        raise ReleaseGateError(f"Mic1D-k released {columns.tolist()} values per column for {n_rows} rows "
                               f"({wrong} column(s) wrong); nothing written")
    short = sum(e["short_runs"] for e in evidence)
    expected = mic1d.expected_short_runs(bounds, k, merge)
    if short != expected:
        raise ReleaseGateError(f"Mic1D-k made {short} run(s) of fewer than k={k} values where it makes "
                               f"{expected}; nothing written")
    data = [e.get("data") for e in evidence]
    if data and all(d is not None for d in data):  # the report's data summary: no group sizes (runs of values)
        data = (sum(d["counts_x"] for d in data), sum(d["counts_m"] for d in data),
                {"sq_diff": sum(d["sq_diff"] for d in data)}, Counter())
    else:
        data = None
    return {"runs": sum(e["runs"] for e in evidence), "min_run": min(e["min_run"] for e in evidence),
            "max_run": max(e["max_run"] for e in evidence), "short_runs": short,
            "sse": sum(e["sse"] for e in evidence), "data": data}


def _constant_pieces(lengths, value):
    """A constant column's released pieces (Mic1D-k releases it as it is): one per input partition of
    ``lengths`` rows, every row carrying ``value``, built from the row ids alone."""
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return [delayed(_constant_piece, pure=True)(int(a), int(b), float(value))
            for a, b in zip(offsets[:-1], offsets[1:])]


def _constant_piece(start, stop, value):
    return Released(np.arange(start, stop, dtype=np.int64), np.zeros(stop - start, dtype=np.int64),
                    np.array([[value]]), {})


def _mic1d_data(totals, vectors, fixed, edges, n_rows):
    """The report's data summary of a Mic1D-k release, all QIs in order: each vector's counts and SSE
    in its columns' rows, a constant column's counts from its one value (``fixed``: the value, NaN for
    the vectorized columns); None if a vector has none."""
    if edges is None or any(t["data"] is None for t in totals):
        return [None]
    width, bins = edges.shape[0], edges.shape[1] - 1
    counts_x, counts_m = np.zeros((width, bins), dtype=np.int64), np.zeros((width, bins), dtype=np.int64)
    sq_diff = np.zeros(width)
    for cols, total in zip(vectors, totals):
        counts_x[cols], counts_m[cols], moments, _ = total["data"]
        sq_diff[cols] = moments["sq_diff"]
    for c in np.flatnonzero(~np.isnan(fixed)):
        counts_x[c] = counts_m[c] = histogram.bin_counts(np.array([[fixed[c]]]), edges[c:c + 1],
                                                         np.array([n_rows], dtype=np.int64))[0]
    return [(counts_x, counts_m, {"sq_diff": sq_diff}, Counter())]


def _build_mic1d(frame, options, timings, identifier_key, qi, ids, blocks, starts, n_rows, mean, std, covariance,
                 lengths, strata, fixed, edges=None, complete=0, write=None):
    """:func:`build_release` for Mic1D-k: every attribute block's (by default all QIs') varying columns
    vectorized and protected on their own, its constant columns released as they are (``fixed``: their
    value, NaN for the others); the gate checks the runs; the report gives k' for the whole record,
    each block and each QI. ``write``: ``(frame, column order)`` the write reads (default ``frame``, all of
    the input's columns)."""
    from .. import __version__

    merge = mic1d.merge_of(options.method_options)
    constant = ~np.isnan(fixed)
    with timings.stage("blocks"):
        sample = draw_sample(frame, qi, n_rows, options)
        columns, evidence, vectors, buckets = {}, [], [], 0
        for first, last in zip(starts[:-1], starts[1:]):
            cols = first + np.flatnonzero(~constant[first:last])
            if not len(cols):
                continue
            pieces, proof, n_buckets = solve_mic1d(frame, [qi[c] for c in cols], n_rows, mean[cols], std[cols],
                                                   options, strata, 0, sample, None if edges is None else edges[cols])
            flat = persisted(*[p for column in pieces for p in column], *proof)
            per = len(pieces[0])
            columns.update({int(c): list(flat[j * per:(j + 1) * per]) for j, c in enumerate(cols)})
            evidence.append(list(flat[len(cols) * per:]))
            vectors.append(cols)
            buckets += n_buckets
        columns.update({int(c): _constant_pieces(lengths, fixed[c]) for c in np.flatnonzero(constant)})
    with timings.stage("gate"):
        totals = []
        for cols, proof in zip(vectors, evidence):
            bounds = _mic1d_bounds(strata, n_rows, len(cols))
            totals.append(_mic1d_gate(dask.compute(*proof), n_rows, len(cols), bounds, options.k, merge))
    columns = [columns[j] for j in range(len(qi))]
    by_column = [(range(j, j + 1), pieces) for j, pieces in enumerate(columns)]
    with timings.stage("real anonymity"):
        subsets = {"all": tuple(range(len(qi)))}
        if len(blocks) > 1:
            subsets.update({f"block {b + 1}": tuple(range(starts[b], starts[b + 1])) for b in range(len(blocks))})
        subsets.update({name: (j,) for j, name in enumerate(qi)})
        k_prime, comoment = real_anonymity(by_column, len(qi), n_rows, options.rows_per_file, list(subsets.values()))
        k_prime = dict(zip(subsets, k_prime))
    sse = sum(t["sse"] for t in totals)
    sst = float(n_rows * np.count_nonzero(std > 0))
    report = {
        "rows": n_rows,
        "k": options.k,
        "method": options.method,
        "method_options": dict(options.method_options),
        "refine": options.refine,
        "refine_options": {},
        "stitch": None,
        "order": "value",
        "aggregate": options.aggregate,
        "seed": options.seed,
        "quasi_identifiers": qi,
        "statistics": {"mean": mean.tolist(), "std": std.tolist(), "covariance": covariance.tolist()},
        "identifiers_dropped": [] if options.hash_identifiers else ids,
        "identifiers_hashed": ids if options.hash_identifiers else [],
        "values": n_rows * sum(len(cols) for cols in vectors),  # the vectors' values
        "constant_columns": [qi[c] for c in np.flatnonzero(constant)],  # released as they are
        "groups": sum(t["runs"] for t in totals),  # runs of the second sort: the released means
        "min_group_size": min((t["min_run"] for t in totals), default=None),
        "max_group_size": max((t["max_run"] for t in totals), default=None),
        "remainder_runs": sum(t["short_runs"] for t in totals),
        "remainder": "merge" if merge else "separate",
        "information_loss": 100.0 * sse / sst if sst > 0 else 0.0,
        "sse": sse,
        "sst": sst,
        "k_anonymity_verified": False,
        "k_anonymity_scope": ("values: every released value is computed from a run of k values (Mic1D-k); "
                              "records are not k-anonymous, see real_anonymity"),
        "real_anonymity": k_prime,
        "min_tuple_count": None,
        "blocks": len(blocks),
        "attribute_blocks": {"blocks": [{"columns": b} for b in blocks]} if len(blocks) > 1 else None,
        "tasks": buckets,
        "rows_in_transit": "memory",
        "released_pieces": "memory",
        "strata": strata.describe() if strata else None,
        "noise": options.noise,
        "epsilon": options.epsilon,
        "release_where": options.release_where,
        "rows_released": n_rows,
        "options": asdict(options),
        "version": __version__,
    }
    report["summary"] = _data_summary(qi, edges, _mic1d_data(totals, vectors, fixed, edges, n_rows), n_rows,
                                      complete, covariance, comoment)
    key = identifier_key if options.hash_identifiers else None
    rest, order = write or (frame, None)
    released = restore_order(rest, by_column, lengths, qi, ids, n_rows, options.rows_per_file, key, None, order=order)
    return released, report


def _distribution(sizes):
    sizes = np.asarray(sizes)
    if not len(sizes):
        return {}
    q = np.quantile(sizes, [0.0, 0.1, 0.5, 0.9, 1.0])
    return {"min": int(q[0]), "p10": float(q[1]), "median": float(q[2]), "p90": float(q[3]), "max": int(q[4]),
            "mean": float(sizes.mean())}


def not_evaluable(options):
    """Why a release made with ``options`` cannot be evaluated against its input row by row (the
    evaluation pairs row i of the input with row i of the release, on complete QIs), or None."""
    if options.release_where:
        return "with --release-where (release_where) its rows do not pair with the input's"
    if options.missing == "centroid":
        return "with --missing centroid (missing = \"centroid\") the input's QIs may be incomplete"
    return None


EVALUATION_KEYS = ("information_loss", "disclosure_risk", "score", "anonymity", "checks", "known", "timings",
                   "aligned_pieces")
"""What a release report keeps, under ``evaluation``, of :func:`pipeline.evaluate.evaluate`'s report."""


def check_text_columns(text, options, columns):
    """``--csv-text``'s columns (``text``, named as the input writes them): input columns, none of them
    a quasi-identifier or the weights column, which must hold numbers."""
    unknown = [c for c in text if c not in columns]
    if unknown:
        raise InputError(f"--csv-text names {len(unknown)} column(s) not in the input: "
                         f"{', '.join(map(repr, unknown))}; the input has: {', '.join(columns)}")
    blocks, named = attribute_blocks(options.attribute_blocks, options.quasi_identifiers, columns)
    numbers = {*(as_written(named, {}) or ()), options.weights}
    both = [c for c in text if c in numbers]
    if both:
        raise InputError(f"--csv-text names column(s) {', '.join(map(repr, both))} that must hold numbers "
                         f"(quasi-identifiers or the weights); leave them out of --csv-text")


def run(input_path, output, options, report_path=None, identifier_key=None, report_extra=None, html=True,
        evaluation=None, csv=None, rows_in_quotes=False, text_columns=()):
    """Read, anonymize, check and atomically write a release; returns the report (a dict).

    ``report_extra``, if given, is called after the write and its dict merged into the report.
    ``html``: also write the report as an HTML page with the data summary's plots
    (:mod:`pipeline.report`; the summary is the report's ``summary``), at :func:`html_path`: inside
    the release, committed with it, or beside ``report_path``, written after the commit as the JSON.
    ``evaluation``: None, or the options of :func:`pipeline.evaluate.evaluate` (``known``,
    ``id_percent``, ``block_rows``...) to evaluate the written release against the input before the
    commit (disclosure risk: DLD, ID, k'; the report's ``evaluation``; the page shows its measures).
    ``csv``: a CSV input's dialect (:func:`pipeline.io.csv_dialect`), kept in the report.
    ``rows_in_quotes``: do not refuse a CSV input's quoted values whose lines read as whole rows
    (:func:`pipeline.io.swallowed_rows`); kept in the report if set. ``text_columns``: a CSV input's
    columns read as text, as written (``--csv-text``); kept columns of whole numbers written with
    leading zeros in the input's first rows are (:func:`pipeline.io.zero_padded`), and the
    identifiers; the report lists the first two as ``text_columns``.
    """
    timings = Timings()
    # identifiers are dropped or hashed: a CSV input's as written (io.read_input)
    text = (*options.identifiers, *text_columns)
    with timings.stage("read"):
        ddf, input_schema = io.read_input_and_schema(input_path, csv=csv, text=text)
    with timings.stage("validate"):
        options, evaluation, text_columns = named_as_written(options, ddf.columns, evaluation, text_columns)
        is_csv = io.resolve_input(input_path)[0] == "csv"
        if is_csv:
            check_text_columns(text_columns, options, [str(c) for c in ddf.columns])
        else:  # a Parquet input's columns have their types
            text_columns = ()
        columns = plan(ddf, options)  # fail on bad options before touching the output location
        floats = _kept_floats(ddf, options, columns) if input_schema is not None else ()  # Parquet's
        if floats:  # their NaNs apart from their nulls
            ddf, input_schema = io.read_input_and_schema(input_path, csv=csv, text=text, floats=floats)
        zeros = ()
        if is_csv:
            roles = {*columns[0], *columns[1], options.weights, *options.strata, *text_columns}
            whole = [c for c, t in ddf.dtypes.items() if c not in roles and pd.api.types.is_integer_dtype(t)]
            padded = io.zero_padded(input_path, whole, csv)
            if padded:
                log.warning("input %s: column(s) %s hold whole numbers written with leading zeros (00123): read "
                            "as text, as written", input_path, ", ".join(map(repr, padded)))
            text_columns = (*text_columns, *padded)
            zeros = tuple(c for c in whole if c not in padded)  # checked in every block (io._check_zeros)
            if set(text) != {*columns[1], *text_columns} or zeros:
                text = (*columns[1], *text_columns)
                ddf, input_schema = io.read_input_and_schema(input_path, csv=csv, text=text, warn=False, zeros=zeros)
        if not is_csv and columns[1] and not options.hash_identifiers:
            ddf = without_dropped_identifiers(ddf, columns[1])
        page = html_path(output, report_path) if html else None
        # written after the commit: a path that cannot be written fails now (one directly in the release,
        # whose directory the commit makes, can be written then)
        if report_path is not None and os.path.dirname(os.path.abspath(report_path)) != os.path.abspath(output):
            from .evaluate import check_report_path

            check_report_path(report_path)
        if clash := io.overlap(input_path, output):
            raise InputError(clash)
        if io.is_local(input_path):
            _workers_see(io.local_paths(input_path)[0])
    size = _stored_bytes(input_path)
    with _page_helper(size, page) as helper:
        tmp = io.prepare_output(output)
        scratch = ExitStack()  # the rows in transit's files (build_release), removed once the release is written
        try:
            _workers_see(tmp)  # the release's temporary directory, which the workers write into
            keep = _fits_in_memory(size)
            started = time.perf_counter()
            row_check = None if rows_in_quotes else io.row_shape(input_path, csv, len(ddf.columns), len(columns[0]))
            try:
                released, report = build_release(ddf, options, timings, identifier_key, columns, keep, row_check,
                                                 scratch)
                dtypes = None
            except CSVTypeChange:  # in the statistics pass, the first over every row
                with timings.stage("csv types"):
                    numbers = {**dict.fromkeys(columns[0], "quasi-identifier"),
                               **({options.weights: "weights"} if options.weights else {})}
                    ddf, dtypes = io.read_retyped(input_path, numbers, csv=csv, text=text, zeros=zeros)
                timings.seconds["csv types"] = round(time.perf_counter() - started, 4)  # the failed pass's time too
                released, report = build_release(ddf, options, timings, identifier_key, columns, keep, row_check,
                                                 scratch)
                report["input_types_widened"] = dtypes
            except CSVParseError as exc:  # a malformed row: name its file and line
                raise io.locate_parse_error(input_path, exc, csv=csv) from exc
            report["input_kept_in_memory"] = keep
            report.update(input=str(input_path), output=str(output))
            if csv:
                report["csv"] = csv
            if text_columns:
                report["text_columns"] = list(text_columns)
            if rows_in_quotes:
                report["rows_in_quotes_allowed"] = True
            # the page's data figures are drawn now (only the timings' come later)
            figures = _draw_figures(report, timings, helper) if page is not None else None
            with timings.stage("write"):
                metadata = {k: report[k] for k in ("k", "method", "method_options", "refine", "refine_options",
                                                   "stitch", "aggregate", "order", "seed", "noise", "epsilon",
                                                   "release_where",
                                                   "quasi_identifiers", "information_loss", "version")}
                schema = io.output_schema(input_schema, released._meta_nonempty, report["quasi_identifiers"],
                                          report["identifiers_hashed"])
                released.to_parquet(
                    tmp,
                    engine=io.ExactIntegersEngine,  # the pandas metadata of columns read exactly (io.EXACT_FLOATS)
                    write_index=False,
                    schema="infer" if schema is None else schema,
                    name_function=lambda i: f"part-{i:05d}.parquet",
                    custom_metadata={b"microagg": json.dumps(metadata, sort_keys=True).encode()},
                    write_metadata_file=False,
                    # released QIs repeat each value only k..2k-1 times: their dictionaries fill up
                    # and fall back to plain encoding (measured: a third of the encoding time, for
                    # files 4% smaller); the other columns keep pyarrow's default
                    use_dictionary=[c for c in released.columns if c not in report["quasi_identifiers"]],
                )
            # the release's graph holds the input and the released pieces in the workers' memory (on a
            # cluster): let them go before the evaluation reads both files
            del released
            scratch.close()
            if evaluation is not None:
                return_freed_memory()  # the release's, before the evaluation's own
                report["evaluation"] = _evaluate_written(input_path, tmp, report, evaluation, options.seed, timings,
                                                         dtypes, csv, text, floats)
            report["timings"] = timings.seconds
            if report_extra:
                report.update(report_extra())
            default_report = report_path is None
            report["report"] = str(report_path) if report_path else str(f"{output}/_report.json")
            report["html"] = page
            if default_report:
                if page is not None:
                    _write_page(f"{tmp}/_report.html", report, timings, figures, helper)
                _write_json(f"{tmp}/_report.json", report)
            io.commit_output(tmp, output)
        except BaseException:
            io.discard_output(tmp)
            raise
        finally:
            scratch.close()
        if not default_report:
            try:
                if page is not None:
                    _write_page(page, report, timings, figures, helper)
                _write_json(report_path, report)
            except OSError as exc:
                raise StorageError(f"the release is committed at {output}, but its report could not be written to "
                                   f"{report_path}: {exc}") from exc
        return report


@contextmanager
def _page_helper(size, page):
    """The job's :class:`pipeline.drawing.PageHelper` if it writes a ``page`` and its input of ``size``
    stored bytes is large (:func:`pipeline.drawing.start`; unknown: drawn here), closed at the end; else
    None, the figures' modules then imported aside here while the statistics pass reads."""
    if page is None:
        yield None
        return
    helper = drawing.start(size or 0)
    if helper is None:
        _aside("import-figures", _import_figure_modules)
    try:
        yield helper
    finally:
        if helper is not None:
            helper.close()


def html_path(output, report_path=None):
    """Where :func:`run` writes the HTML page: ``OUTPUT/_report.html``, or beside ``report_path`` (its
    suffix replaced by ``.html``)."""
    if report_path is None:
        return f"{output}/_report.html"
    path = os.path.splitext(os.fspath(report_path))[0] + ".html"
    if os.path.abspath(path) == os.path.abspath(os.fspath(report_path)):
        raise InputError(f"the JSON report {os.fspath(report_path)!r} ends with .html, where the HTML page goes; "
                         "name it *.json (or turn the page off)")
    return path


def _evaluate_written(input_path, written, report, evaluation, seed, timings, dtypes=None, csv=None, text=(),
                      floats=()):
    """:func:`pipeline.evaluate.evaluate` of the release files at ``written`` against the input (rows
    pair by position; ``dtypes``, ``csv``, ``text``: a CSV input's types, dialect and text columns, as
    the release read it; ``floats``: the floating-point columns read exactly, in both): the parts of its
    report named by :data:`EVALUATION_KEYS`."""
    from . import evaluate

    with timings.stage("evaluate"):
        # k-anonymity of whole released tuples is the release's guarantee only without attribute blocks
        k = report["k"] if report.get("k_anonymity_scope") == "all quasi-identifiers" else None
        options = dict(evaluation)
        # hashed identifiers differ on purpose: not compared with the input's
        result = evaluate.evaluate(io.read_input(input_path, dtypes=dtypes, csv=csv, text=text, floats=floats,
                                                 warn=False),
                                   io.read_input(written, floats=floats),
                                   list(report["quasi_identifiers"]),
                                   k, seed=seed, changed=report.get("identifiers_hashed") or (), rows=report["rows"],
                                   columnar=io.resolve_input(input_path)[0] == "parquet", **options)
    return {key: result[key] for key in EVALUATION_KEYS if key in result}


def _draw_figures(report, timings, helper=None):
    """The HTML page's data figures (``render_html``'s ``figures`` cache), drawn before the write, or by
    the job's ``helper`` (:class:`pipeline.drawing.PageHelper`) beside it.

    Not in a thread beside the write: drawing holds the interpreter lock, and the write's tasks (threads
    of this process on the local default) then wait for it at every step. Measured at 1M rows: the
    write stage took 2.2-2.7 s with the drawing beside it, 0.7-0.9 s after it (the drawing: 1.6-1.8 s);
    at 10M, write and drawing together 8.7-9.9 s against 9.9-10.0 s (BENCHMARKS.md)."""
    from .report import render_html

    figures = {}
    if helper is not None:
        helper.draw(report)
        return figures
    with timings.stage("html"):
        try:
            # the figures' modules in the order the aside thread imports them (run), so that this thread
            # waits for that import instead of importing other modules of the same package meanwhile
            _import_figure_modules()
            render_html(report, report.get("summary"), figures)
        except Exception:  # the final render draws what is missing, and reports any error itself
            pass
    return figures


def _write_page(path, report, timings, figures=None, helper=None):
    """The HTML page at ``path``; ``figures``: :func:`_draw_figures`'s result, if drawn; ``helper``: the
    job's :class:`pipeline.drawing.PageHelper`, whose page it is unless the helper failed."""
    with timings.stage("html"):
        page = None if helper is None else helper.page(report)
        if page is None:
            if helper is not None:
                _import_figure_modules()
            page = drawing.render_page(report, figures)
        io.write_atomically(path, page.encode("utf-8"))


INPUT_EXPANSION = 6
"""Memory per byte of stored (compressed Parquet) input, measured on the benchmark extracts: pandas
frames with string columns take about 5-6 times their snappy Parquet size."""


def _stored_bytes(input_path):
    """:func:`pipeline.io.input_bytes` of the input, or None if its filesystem cannot tell."""
    try:
        return io.input_bytes(input_path)
    except Exception:  # an exotic filesystem
        return None


def _fits_in_memory(size):
    """Whether the input of ``size`` stored bytes (:func:`_stored_bytes`), held in memory for every pass,
    takes at most 40% of the workers' memory (else every pass re-reads it: slower, but memory no longer
    grows with the input). An input of unknown size is kept (the former behaviour)."""
    limits = _memory_limits()
    return size is None or not limits or not all(limits) or INPUT_EXPANSION * size <= 0.4 * sum(limits)


def _write_json(path, data):
    io.write_atomically(path, (json.dumps(data, indent=2, sort_keys=True, default=str) + "\n").encode("utf-8"))
