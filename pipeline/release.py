"""The distributed release behind ``microagg anonymize``: Dask stages around the same kernels.

Stages (each timed in the report):

1. validate: schema checks from metadata only (column names, dtypes), before any data is read;
2. statistics: one pass of exact column sums per partition (count, mean, std; NaN / inf counts;
   covariance for the report), so the standardization is bit-identical however the input is
   partitioned; partition lengths give every row its global row id (its position in the input);
3. blocks: a deterministic sample (rows chosen by hashing their row id with the seed) shapes a
   split tree (:mod:`pipeline.blocking`); every row is routed to its leaf (a block) in
   ``map_partitions``; one shuffle brings each task (a subtree of blocks) whole into one partition;
   per task, the method's kernel solves every block (rows in row-id order) and the groups are
   stitched across every split plane inside the task (:mod:`pipeline.stitch`); the groups near the
   split planes between tasks travel (a small second shuffle) to one partition per plane and are
   stitched there, in parallel;
4. gate: per partition, every group has >= k rows and every row carries exactly its group's
   released tuple (else the tuples are counted exactly), and the row count matches; every group
   lies inside one partition, so a release that passes is k-anonymous, and one that fails is
   never written;
5. write: the released QI values travel back by row id (the second shuffle of QI columns) and are
   joined to the input rows; identifiers dropped or pseudonymised, other columns unchanged, rows in
   input order, files cut at fixed row-id ranges (so the files do not depend on the input
   partitioning or the number of workers); written to a temporary directory and renamed into place.

Library code owns no cluster: it runs on the active Dask client or scheduler.
"""

import hmac
import json
import logging
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd

from .. import kernels
from . import blocking, io, stats, stitch
from .api import centroids
from .errors import InputError, ReleaseGateError
from .solver import Solver
from .validation import (
    check_aggregate,
    check_blocking,
    check_finite,
    check_k,
    non_numeric_error,
    resolve_columns,
)

log = logging.getLogger(__name__)

ROW_ID = "_microagg_row_id"
GROUP_ID = "_microagg_group_id"
LOSS = "_microagg_loss"
LEAF = "_microagg_block"
TASK = "_microagg_task"
PLANE = "_microagg_plane"
GAIN = "_microagg_stitch_gain"


@dataclass(frozen=True)
class ReleaseOptions:
    """What to release; validated by :func:`plan`."""

    k: int
    method: str = "mdav"
    quasi_identifiers: tuple | None = None
    identifiers: tuple = ()
    aggregate: str = "mean"
    rows_per_file: int = 1_000_000
    order: str = "kd"
    block_size: int = 5000
    blocks_per_task: int = 16           # blocks solved and stitched together in one Dask task
    seed: int = 0
    refine: str = "none"                # a refinement of pipeline.methods.REFINERS, applied per block
    method_options: tuple = ()          # (name, value) pairs, e.g. (("grow", "nc"),)
    refine_options: tuple = ()
    stitch: str = "light"               # pipeline.stitch.STITCHING
    sample_rows: int | None = None      # default: about 256 sample rows per block (at least 20,000)
    hash_identifiers: bool = False      # replace identifiers by a keyed HMAC instead of dropping them


@dataclass
class Timings:
    seconds: dict = field(default_factory=dict)

    @contextmanager
    def stage(self, name):
        start = time.perf_counter()
        log.info("stage %s ...", name)
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.seconds[name] = round(self.seconds.get(name, 0.0) + elapsed, 4)  # a stage may resume
            log.info("stage %s done in %.2f s", name, elapsed)


def solver_of(options):
    """The block solver of a job (checked: unknown methods, refinements or options raise)."""
    return Solver.build(options.method, dict(options.method_options), options.refine, dict(options.refine_options),
                        options.seed)


# --- stage 1: plan from metadata -------------------------------------------------------------------

def plan(ddf, options):
    """Validate options and columns from the schema alone; returns ``(qi, identifiers)``."""
    check_k(options.k)
    check_aggregate(options.aggregate)
    if options.rows_per_file < 1:
        raise InputError(f"rows per file must be >= 1, got {options.rows_per_file}")
    solver_of(options)
    if options.stitch not in stitch.STITCHING:
        raise InputError(f"unknown stitching {options.stitch!r}; choose one of: {', '.join(stitch.STITCHING)}")
    check_blocking(options.block_size, options.blocks_per_task, options.order, options.k)
    reserved = [c for c in ddf.columns if str(c).startswith("_microagg_")]
    if reserved:
        raise InputError(f"input column(s) {reserved} use the reserved prefix '_microagg_'; rename them")
    qi, ids, non_numeric = resolve_columns(ddf.dtypes, options.quasi_identifiers, options.identifiers)
    if non_numeric:
        column = non_numeric[0]
        raise non_numeric_error(column, ddf[column].head(1000))  # first partition only
    return qi, ids


# --- stage 2: statistics ---------------------------------------------------------------------------

def _partition_sums(part, qi):
    try:
        X = np.ascontiguousarray(part[qi].to_numpy(dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise InputError(f"a quasi-identifier column holds non-numeric values: {exc}") from exc
    sums = stats.chunk(X)
    finite = np.isfinite(X).all(axis=1)
    F = X[finite]
    return sums, F.sum(axis=0), F.T @ F  # plain float cross-products: for the reported covariance only


def column_statistics(ddf, qi):
    """One pass: exact sums (mean, std), non-finite checks, partition lengths and the covariance.

    Returns ``(rows, mean, std, lengths, covariance)``; the covariance (population, of the raw QIs)
    is reported, never used to decide anything, so its last bits may depend on the partitioning.
    """
    try:
        parts = dask.compute(*[dask.delayed(_partition_sums)(p, qi) for p in ddf.to_delayed()])
    except ValueError as exc:
        if "Mismatched dtypes" in str(exc):
            raise InputError(
                "a CSV column changes type part-way through the file (a text value in a numeric "
                f"column?): {exc}"
            ) from exc
        raise
    chunks = [p[0] for p in parts]
    total = stats.combine(chunks)
    check_finite(qi, total)
    mean, std = stats.finalize(total)
    lengths = [c.rows for c in chunks]
    n = max(total.rows, 1)
    first = np.sum([p[1] for p in parts], axis=0)
    covariance = np.sum([p[2] for p in parts], axis=0) / n - np.outer(first, first) / n**2
    return total.rows, mean, std, lengths, covariance


def _attach_row_id(part, offsets, lengths, partition_info=None):
    number = partition_info["number"]
    if len(part) != lengths[number]:
        raise ReleaseGateError(
            f"input partition {number} has {len(part)} rows, but the statistics pass counted "
            f"{lengths[number]}: the input changed during the job or was partitioned differently; nothing written"
        )
    start = offsets[number]
    return part.assign(**{ROW_ID: np.arange(start, start + len(part), dtype=np.int64)})


def with_row_ids(ddf, lengths):
    """Each row's global row id (its position in the input), independent of the partitioning."""
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    meta = ddf._meta.assign(**{ROW_ID: np.array([], dtype=np.int64)})
    return ddf.map_partitions(_attach_row_id, offsets, np.asarray(lengths, dtype=np.int64), meta=meta)


# --- stage 3: sample, split tree, blocks, kernels, stitching ----------------------------------------

def _sample_rows(part, qi, seed, threshold):
    if threshold is None:
        return part[[ROW_ID, *qi]]
    mask = kernels.sample_mask(part[ROW_ID].to_numpy(dtype=np.int64), seed, threshold)
    return part.loc[mask, [ROW_ID, *qi]]


def draw_sample(frame, qi, n_rows, options):
    """The deterministic sample behind the split tree: ``(fraction, rows sorted by row id)``."""
    fraction, threshold = blocking.sample_plan(n_rows, options.block_size, options.sample_rows)
    meta = frame._meta[[ROW_ID, *qi]]
    sample = frame.map_partitions(_sample_rows, qi, options.seed, threshold, meta=meta).compute()
    return fraction, sample.sort_values(ROW_ID, kind="stable")


def _standardized(part, qi, mean, std):
    X = np.ascontiguousarray(part[qi].to_numpy(dtype=np.float64))
    return X, kernels.standardize(X, mean, std)


def _route(part, qi, mean, std, tree):
    _, Z = _standardized(part, qi, mean, std)
    leaf = tree.route(Z)
    return part[[ROW_ID, *qi]].assign(**{LEAF: leaf, TASK: tree.leaf_task[leaf]})


def _solved_frame(row_id, group, plane, leaf, released, loss, gain, qi):
    out = {ROW_ID: row_id, GROUP_ID: group, PLANE: plane, LEAF: leaf}
    out.update({name: released[:, j] for j, name in enumerate(qi)})
    out[LOSS] = loss
    gains = np.zeros(len(row_id))
    if len(gains):
        gains[0] = gain  # the partition's stitching gain, carried once
    out[GAIN] = gains
    return pd.DataFrame(out)


def _empty_solved(qi):
    return _solved_frame(*([np.array([], np.int64)] * 4), np.empty((0, len(qi))), np.array([]), 0.0, qi)


def _release_values(X, labels, std, aggregate):
    """Released centroids and each row's standardized squared loss."""
    released = centroids(X, labels, int(labels.max()) + 1, aggregate)[labels]
    scale = np.where(std > 0, std, np.inf)
    return released, (((X - released) / scale) ** 2).sum(axis=1)


def _keyed_rows(part, qi, mean, std):
    """A shuffled partition's key (its index value), its rows in row-id order, their X and Z."""
    key = int(part.index[0])
    part = part.sort_values(ROW_ID, kind="stable")
    X, Z = _standardized(part, qi, mean, std)
    return key, part, X, Z


def _solve_task(part, qi, mean, std, tree, options):
    """One task (a subtree of leaves): solve, stitch its planes, release the groups that stay."""
    if not len(part):
        return _empty_solved(qi)
    task, part, X, Z = _keyed_rows(part, qi, mean, std)
    labels, plane, gain = stitch.solve_task(Z, part[LEAF].to_numpy(), tree, task, options.k, solver_of(options),
                                            stitch.STITCHING[options.stitch])
    released, loss = _release_values(X, labels, std, options.aggregate)
    boundary = plane >= 0
    released[boundary] = X[boundary]  # released by the upper stitching stage
    loss[boundary] = 0.0
    group = stitch.task_group(task, labels)
    return _solved_frame(part[ROW_ID].to_numpy(), group, plane, part[LEAF].to_numpy(), released, loss, gain, qi)


def _stitch_upper(part, qi, mean, std, tree, options):
    """The groups of every task near one upper split plane, re-solved together and released."""
    if not len(part):
        return _empty_solved(qi)
    position, part, X, Z = _keyed_rows(part, qi, mean, std)
    labels, gain = stitch.stitch_upper(Z, part[GROUP_ID].to_numpy(), options.k, solver_of(options),
                                       stitch.STITCHING[options.stitch])
    released, loss = _release_values(X, labels, std, options.aggregate)
    group = stitch.upper_group(tree, position, labels)
    plane = np.full(len(part), -1, dtype=np.int64)
    return _solved_frame(part[ROW_ID].to_numpy(), group, plane, part[LEAF].to_numpy(), released, loss, gain, qi)


def _client():
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def persisted(frame):
    """Persist ``frame`` and wait for it, so stage timings measure the work, not its submission."""
    frame = frame.persist()
    if _client() is not None:
        from distributed import wait

        wait(frame)
    return frame


def shuffle_method():
    """Dask's task-based shuffle, on every scheduler.

    Measured on 2 workers (BENCHMARKS.md): against peer-to-peer shuffling, the release of 1M rows
    took 8.7 s instead of 10.6 s (its write stage 1.1 s instead of 3.1 s: the final shuffle into few
    output files) and 10M rows 88 s against 87 s, with the same peak memory.
    """
    return "tasks"


def _by_key(frame, column, n_keys):
    """One partition per key value ``0..n_keys-1`` (a shuffle with known divisions)."""
    divisions = [0, 0] if n_keys == 1 else list(range(n_keys)) + [n_keys - 1]
    return frame.set_index(column, divisions=divisions, shuffle_method=shuffle_method())


def solve_blocks(frame, qi, n_rows, mean, std, options):
    """Sample -> split tree -> route -> one partition per task -> kernels -> stitched release.

    Returns ``(released, tree)``: a lazy frame of ``ROW_ID, GROUP_ID, PLANE, LEAF, *qi, LOSS,
    GAIN`` in which every group lies wholly inside one partition, and the split tree.
    """
    start = time.perf_counter()
    fraction, sample = draw_sample(frame, qi, n_rows, options)
    _, Zs = _standardized(sample, qi, mean, std)
    task_rows = options.blocks_per_task * options.block_size
    tree = blocking.build_tree(Zs, fraction, options.block_size, task_rows, options.k, options.order)
    log.info("split tree: %d blocks in %d tasks, %d upper planes (sample of %d rows) in %.2f s",
             tree.n_leaves, tree.n_tasks, len(tree.upper), len(sample), time.perf_counter() - start)
    meta_routed = frame._meta[[ROW_ID, *qi]].assign(**{LEAF: np.array([], np.int64), TASK: np.array([], np.int64)})
    routed = frame[[ROW_ID, *qi]].map_partitions(_route, qi, mean, std, tree, meta=meta_routed)
    tasks = _by_key(routed, TASK, tree.n_tasks)
    meta = _empty_solved(qi)
    solved = tasks.map_partitions(_solve_task, qi, mean, std, tree, options, meta=meta)
    if not len(tree.upper):
        return solved, tree
    solved = persisted(solved)
    log.info("tasks solved and stitched in %.2f s", time.perf_counter() - start)
    core = solved[solved[PLANE] < 0]
    boundary = _by_key(solved[solved[PLANE] >= 0], PLANE, len(tree.upper))
    stitched = boundary.map_partitions(_stitch_upper, qi, mean, std, tree, options, meta=meta)
    return dd.concat([core, stitched]), tree


# --- stage 4: the gate -----------------------------------------------------------------------------

def tuple_counts(values):
    """Occurrence count of every distinct row of ``values`` (2-D float64), exactly.

    Rows are bucketed by a 64-bit hash, then every row is compared with its bucket's first row; only
    if two different rows share a hash (never seen in practice) does it fall back to a full sort.
    """
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    hashes = pd.util.hash_pandas_object(pd.DataFrame(values), index=False).to_numpy()
    order = np.argsort(hashes, kind="stable")
    h = hashes[order]
    starts = np.flatnonzero(np.r_[True, h[1:] != h[:-1]])
    first = np.repeat(order[starts], np.diff(np.r_[starts, len(h)]))
    same = (values[order] == values[first]) | (np.isnan(values[order]) & np.isnan(values[first]))
    if not same.all():
        return np.unique(values, axis=0, return_counts=True)[1]
    return np.diff(np.r_[starts, len(h)])


def tuples_through_groups(values, dense, sizes):
    """Occurrence counts of the released tuples, proved through the groups when possible.

    ``dense`` numbers each row's group ``0..g-1`` and ``sizes`` counts them. If every row carries
    exactly its group's first row's tuple, each row's tuple occurs at least as often as its group
    has rows: the group sizes are returned (a lower bound of the tuple counts, exact unless two
    groups share a tuple, which only raises the counts). Otherwise the exact counts of
    :func:`tuple_counts`.
    """
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    first = np.empty(len(sizes), dtype=np.int64)
    first[dense[::-1]] = np.arange(len(dense) - 1, -1, -1)  # the last write is each group's first row
    if (values == values[first[dense]]).all():
        return sizes
    return tuple_counts(values)


def _block_summary(part, qi, k):
    _, dense = np.unique(part[GROUP_ID].to_numpy(), return_inverse=True)
    sizes = np.bincount(dense)
    tuples = tuples_through_groups(part[qi].to_numpy(dtype=np.float64), dense, sizes)
    blocks = part[LEAF].value_counts()
    return pd.DataFrame({
        "rows": [len(part)],
        "groups": [len(sizes)],
        "min_group_size": [int(sizes.min()) if len(sizes) else 0],
        "max_group_size": [int(sizes.max()) if len(sizes) else 0],
        "min_tuple_count": [int(tuples.min()) if len(tuples) else 0],
        "rows_in_small_tuples": [int(tuples[tuples < k].sum()) if len(tuples) else 0],
        "sse": [float(part[LOSS].sum())],
        "stitch_gain": [float(part[GAIN].sum())],
        "block_ids": [blocks.index.to_numpy()],
        "block_rows": [blocks.to_numpy()],
    })


def gate(solved, qi, k, n_rows):
    """Per-partition summary and block sizes; raises :class:`ReleaseGateError` unless the release is
    k-anonymous. Every group lies wholly inside one partition, so a tuple seen >= k times in every
    partition where it occurs is seen >= k times in the release."""
    meta = _block_summary(solved._meta, qi, k).iloc[:0]
    blocks = solved.map_partitions(_block_summary, qi, k, meta=meta).compute()
    # a block's rows can sit in several partitions (its groups near an upper plane moved)
    block_sizes = pd.Series(np.concatenate(blocks["block_rows"].to_list()),
                            index=np.concatenate(blocks["block_ids"].to_list())).groupby(level=0).sum()
    blocks = blocks[blocks["rows"] > 0]  # a shuffle can leave partitions empty
    rows = int(blocks["rows"].sum())
    bad = int(blocks["rows_in_small_tuples"].sum())
    if rows != n_rows:
        raise ReleaseGateError(f"the release has {rows} rows but the input has {n_rows}; nothing written")
    smallest = int(blocks["min_group_size"].min())
    if bad or smallest < k:
        raise ReleaseGateError(
            f"the release is not {k}-anonymous: {bad} row(s) carry a quasi-identifier tuple seen fewer "
            f"than k={k} times (smallest group {smallest}); nothing written"
        )
    return blocks, block_sizes.to_numpy()


# --- stage 5: back to input order, write -----------------------------------------------------------

def _pseudonyms(values, key):
    """HMAC-SHA256 (hex) of each value's text under ``key``: stable pseudonyms, unlinkable without it."""
    return np.array([hmac.digest(key, str(v).encode(), "sha256").hex() for v in values], dtype=object)


def _replace_qis(original, released, qi, identifiers, key=None):
    if not original.index.equals(released.index):
        raise ReleaseGateError("released rows do not match the input rows by row id; nothing written")
    if key is None:
        out = original.drop(columns=list(identifiers))
    else:
        out = original.copy()
        for name in identifiers:
            out[name] = pd.array(_pseudonyms(out[name].to_numpy(), key), dtype="string")
    for name in qi:
        out[name] = released[name].to_numpy()
    return out.reset_index(drop=True)


def file_divisions(n_rows, rows_per_file):
    """Row-id boundaries of the output files: fixed ranges, whatever the input partitioning."""
    starts = list(range(0, n_rows, rows_per_file))
    if len(starts) > 1 and starts[-1] == n_rows - 1:
        starts.pop()  # a one-row last file would repeat the final division
    return tuple(starts) + (n_rows - 1,)


def restore_order(frame, solved, lengths, qi, ids, n_rows, rows_per_file, key=None):
    """The released frame: input rows in input order with QIs replaced, identifiers dropped (or
    pseudonymised with the HMAC ``key``)."""
    keep = [i for i, n in enumerate(lengths) if n]
    frame = frame.partitions[keep]
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])[keep]
    in_div = tuple(int(o) for o in offsets) + (n_rows - 1,)
    out_div = file_divisions(n_rows, rows_per_file)
    original = frame.set_index(ROW_ID, sorted=True, divisions=in_div).repartition(divisions=out_div)
    released = solved[[ROW_ID, *qi]].set_index(ROW_ID, divisions=out_div, shuffle_method=shuffle_method())
    meta = _replace_qis(original._meta, released._meta, qi, ids, key)
    return original.map_partitions(_replace_qis, released, qi, ids, key, meta=meta, align_dataframes=False)


def _enough_partitions(ddf):
    """Split an input read as fewer partitions than twice the cores (one large file, say), so the
    reading and statistics passes run in parallel. Row ids stay global positions, so the release
    does not change."""
    client = _client()
    cores = sum(w["nthreads"] for w in client.scheduler_info()["workers"].values()) if client else os.cpu_count()
    if ddf.npartitions < 2 * (cores or 1):
        return ddf.repartition(npartitions=2 * (cores or 1))
    return ddf


def build_release(ddf, options, timings=None, identifier_key=None, columns=None):
    """All stages but the write: ``(released, report)``.

    ``released`` is a lazy Dask DataFrame of the input rows in input order (QIs replaced by group
    centroids, identifiers dropped or, with ``options.hash_identifiers``, replaced by their HMAC under
    ``identifier_key``), already checked by the gate; ``report`` describes it. ``columns`` is
    ``plan(ddf, options)`` when the caller has already validated.
    """
    from .. import __version__

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
        # partitions, and a different expression of the same input (a column projection, say)
        # may be partitioned differently by Dask's optimizer. On a cluster the input is read once
        # and kept in memory (spilled if need be) for every pass, the final write included.
        # (Local schedulers re-read: persisting a Parquet read there loses partitions in dask 2026.8.)
        source = persisted(ddf) if _client() is not None else ddf
        n_rows, mean, std, lengths, covariance = column_statistics(source, qi)
        check_k(options.k, n_rows)
        frame = with_row_ids(source, lengths)
    with timings.stage("blocks"):
        solved, tree = solve_blocks(frame, qi, n_rows, mean, std, options)
        solved = persisted(solved)
    with timings.stage("gate"):
        blocks, block_sizes = gate(solved, qi, options.k, n_rows)
    sse = float(blocks["sse"].sum())
    sst = float(n_rows * np.count_nonzero(std > 0))
    report = {
        "rows": n_rows,
        "k": options.k,
        "method": options.method,
        "refine": options.refine,
        "method_options": dict(options.method_options),
        "refine_options": dict(options.refine_options),
        "stitch": options.stitch,
        "aggregate": options.aggregate,
        "order": options.order,
        "seed": options.seed,
        "quasi_identifiers": qi,
        "statistics": {"mean": mean.tolist(), "std": std.tolist(), "covariance": covariance.tolist()},
        "identifiers_dropped": [] if options.hash_identifiers else ids,
        "identifiers_hashed": ids if options.hash_identifiers else [],
        "groups": int(blocks["groups"].sum()),
        "min_group_size": int(blocks["min_group_size"].min()),
        "max_group_size": int(blocks["max_group_size"].max()),
        "information_loss": 100.0 * sse / sst if sst > 0 else 0.0,
        "sse": sse,
        "sst": sst,
        "k_anonymity_verified": True,
        "min_tuple_count": int(blocks["min_tuple_count"].min()),
        "blocks": tree.n_leaves,
        "block_size_target": options.block_size,
        "block_sizes": _distribution(block_sizes),
        "tasks": tree.n_tasks,
        "upper_planes": len(tree.upper),
        "stitch_sse_gain": float(blocks["stitch_gain"].sum()),
        "options": asdict(options),
        "version": __version__,
    }
    key = identifier_key if options.hash_identifiers else None
    released = restore_order(frame, solved, lengths, qi, ids, n_rows, options.rows_per_file, key)
    return released, report


def _distribution(sizes):
    sizes = np.asarray(sizes)
    if not len(sizes):
        return {}
    q = np.quantile(sizes, [0.0, 0.1, 0.5, 0.9, 1.0])
    return {"min": int(q[0]), "p10": float(q[1]), "median": float(q[2]), "p90": float(q[3]), "max": int(q[4]),
            "mean": float(sizes.mean())}


def run(input_path, output, options, report_path=None, identifier_key=None, report_extra=None):
    """Read, anonymize, check and atomically write a release; returns the report (a dict).

    ``report_extra``, if given, is called after the write and its dict merged into the report.
    """
    timings = Timings()
    with timings.stage("read"):
        ddf = io.read_input(input_path)
    with timings.stage("validate"):
        columns = plan(ddf, options)  # fail on bad options before touching the output location
    tmp = io.prepare_output(output)
    try:
        released, report = build_release(ddf, options, timings, identifier_key, columns)
        report.update(input=str(input_path), output=str(output))
        with timings.stage("write"):
            metadata = {k: report[k] for k in ("k", "method", "method_options", "refine", "refine_options",
                                               "stitch", "aggregate", "order", "seed",
                                               "quasi_identifiers", "information_loss", "version")}
            released.to_parquet(
                tmp,
                write_index=False,
                name_function=lambda i: f"part-{i:05d}.parquet",
                custom_metadata={b"microagg": json.dumps(metadata, sort_keys=True).encode()},
                write_metadata_file=False,
            )
        report["timings"] = timings.seconds
        if report_extra:
            report.update(report_extra())
        default_report = report_path is None
        report["report"] = str(report_path) if report_path else str(f"{output}/_report.json")
        if default_report:
            _write_json(f"{tmp}/_report.json", report)
        io.commit_output(tmp, output)
    except BaseException:
        io.discard_output(tmp)
        raise
    if not default_report:
        _write_json(report_path, report)
    return report


def _write_json(path, data):
    with open(path, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True, default=str)
        fh.write("\n")
