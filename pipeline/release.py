"""The distributed release behind ``microagg anonymize``: Dask stages around the same kernels.

Stages (each timed; one ``compute`` or ``persist`` each):

1. read and validate: schema checks from metadata only (column names, dtypes), before any data is read;
2. statistics: one pass of exact column sums per partition (count, mean, std; NaN / inf counts),
   so the standardization is bit-identical however the input is partitioned; partition lengths give
   every row a global row id;
3. blocks: the QI columns and the row id are gathered into blocks, each block sorted by row id and
   solved by the method's kernel (today the whole extract is one block: exact global microaggregation);
4. gate: per block, group sizes and the count of every released QI tuple; a tuple seen >= k times in
   every block where it occurs is seen >= k times overall, so a release that is not k-anonymous is
   refused here, before anything is written;
5. write: released QI values are joined back to the original rows by row id, identifiers dropped, other
   columns unchanged, rows in input order, files cut at fixed row-id ranges (so the files do not
   depend on the input partitioning), written to a temporary directory and renamed into place.

Library code owns no cluster: it runs on the active Dask client or scheduler.
"""

import json
import logging
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import dask
import numpy as np
import pandas as pd

from .. import kernels
from . import io, stats
from .api import centroids
from .errors import InputError, ReleaseGateError
from .methods import get_method
from .validation import (
    check_aggregate,
    check_finite,
    check_k,
    non_numeric_error,
    resolve_columns,
)

log = logging.getLogger(__name__)

ROW_ID = "_microagg_row_id"
GROUP_ID = "_microagg_group_id"
LOSS = "_microagg_loss"


@dataclass(frozen=True)
class ReleaseOptions:
    """What to release; validated by :func:`plan`."""

    k: int
    method: str = "mdav"
    quasi_identifiers: tuple | None = None
    identifiers: tuple = ()
    aggregate: str = "mean"
    rows_per_file: int = 1_000_000


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
            self.seconds[name] = round(time.perf_counter() - start, 4)
            log.info("stage %s done in %.2f s", name, self.seconds[name])


# --- stage 1: plan from metadata -------------------------------------------------------------------

def plan(ddf, options):
    """Validate options and columns from the schema alone; returns ``(qi, identifiers)``."""
    check_k(options.k)
    check_aggregate(options.aggregate)
    get_method(options.method)
    if options.rows_per_file < 1:
        raise InputError(f"rows per file must be >= 1, got {options.rows_per_file}")
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
        X = part[qi].to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"a quasi-identifier column holds non-numeric values: {exc}") from exc
    return stats.chunk(np.ascontiguousarray(X))


def column_statistics(ddf, qi):
    """Per-partition exact sums, computed in one pass; raises on non-finite values."""
    try:
        chunks = dask.compute(*[dask.delayed(_partition_sums)(p, qi) for p in ddf.to_delayed()])
    except ValueError as exc:
        if "Mismatched dtypes" in str(exc):
            raise InputError(
                "a CSV column changes type part-way through the file (a text value in a numeric "
                f"column?): {exc}"
            ) from exc
        raise
    total = stats.combine(chunks)
    check_finite(qi, total)
    mean, std = stats.finalize(total)
    lengths = [c.rows for c in chunks]
    return total.rows, mean, std, lengths


def _attach_row_id(part, offsets, partition_info=None):
    start = offsets[partition_info["number"]]
    return part.assign(**{ROW_ID: np.arange(start, start + len(part), dtype=np.int64)})


def with_row_ids(ddf, lengths):
    """Each row's global row id (its position in the input), independent of the partitioning."""
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    meta = ddf._meta.assign(**{ROW_ID: np.array([], dtype=np.int64)})
    return ddf.map_partitions(_attach_row_id, offsets, meta=meta)


# --- stage 3: blocks and kernels -------------------------------------------------------------------

def _solve_block(part, qi, mean, std, k, method, aggregate, partition_info=None):
    """Run the method's kernel on one block (rows in global row-id order) and release centroids."""
    block = partition_info["number"] if partition_info else 0
    part = part.sort_values(ROW_ID, kind="stable")
    X = np.ascontiguousarray(part[qi].to_numpy(dtype=np.float64))
    Z = kernels.standardize(X, mean, std)
    labels = get_method(method).partition(Z, k)
    n_groups = int(labels.max()) + 1 if len(labels) else 0
    released = centroids(X, labels, n_groups, aggregate)[labels]
    scale = np.where(std > 0, std, np.inf)
    loss = (((X - released) / scale) ** 2).sum(axis=1)
    out = {ROW_ID: part[ROW_ID].to_numpy(), GROUP_ID: (np.int64(block) << 32) | labels}
    out.update({name: released[:, j] for j, name in enumerate(qi)})
    out[LOSS] = loss
    return pd.DataFrame(out)


def solve_blocks(frame, qi, mean, std, options):
    """Blocks of whole rows (QIs + row id) solved by the kernel; returns the lazy solved frame.

    The extract is one block: exact global microaggregation by the chosen method.
    """
    blocks = frame[[ROW_ID, *qi]].repartition(npartitions=1)
    meta = pd.DataFrame({ROW_ID: np.array([], np.int64), GROUP_ID: np.array([], np.int64)}
                        | {name: np.array([], np.float64) for name in qi} | {LOSS: np.array([], np.float64)})
    return blocks.map_partitions(
        _solve_block, qi, mean, std, options.k, options.method, options.aggregate, meta=meta
    )


# --- stage 4: the gate -----------------------------------------------------------------------------

def _block_summary(part, qi, k):
    sizes = part[GROUP_ID].value_counts()
    tuples = part.groupby(qi, sort=False).size() if len(part) else pd.Series([], dtype=np.int64)
    return pd.DataFrame({
        "rows": [len(part)],
        "groups": [len(sizes)],
        "min_group_size": [int(sizes.min()) if len(sizes) else 0],
        "max_group_size": [int(sizes.max()) if len(sizes) else 0],
        "min_tuple_count": [int(tuples.min()) if len(tuples) else 0],
        "rows_in_small_tuples": [int(tuples[tuples < k].sum())],
        "sse": [float(part[LOSS].sum())],
    })


def gate(solved, qi, k, n_rows):
    """Per-block summary; raises :class:`ReleaseGateError` unless the release is k-anonymous."""
    meta = _block_summary(pd.DataFrame({GROUP_ID: [], LOSS: []} | {q: [] for q in qi}), qi, k).iloc[:0]
    blocks = solved.map_partitions(_block_summary, qi, k, meta=meta).compute()
    rows = int(blocks["rows"].sum())
    bad = int(blocks["rows_in_small_tuples"].sum())
    if rows != n_rows:
        raise ReleaseGateError(f"the release has {rows} rows but the input has {n_rows}; nothing written")
    if bad or int(blocks["min_group_size"].min()) < k:
        raise ReleaseGateError(
            f"the release is not {k}-anonymous: {bad} row(s) carry a quasi-identifier tuple seen fewer "
            f"than k={k} times (smallest group {int(blocks['min_group_size'].min())}); nothing written"
        )
    return blocks


# --- stage 5: back to input order, write -----------------------------------------------------------

def _replace_qis(original, released, qi, drop):
    if not original.index.equals(released.index):
        raise ReleaseGateError("released rows do not match the input rows by row id; nothing written")
    out = original.drop(columns=list(drop))
    for name in qi:
        out[name] = released[name].to_numpy()
    return out.reset_index(drop=True)


def file_divisions(n_rows, rows_per_file):
    """Row-id boundaries of the output files: fixed ranges, whatever the input partitioning."""
    starts = list(range(0, n_rows, rows_per_file))
    if len(starts) > 1 and starts[-1] == n_rows - 1:
        starts.pop()  # a one-row last file would repeat the final division
    return tuple(starts) + (n_rows - 1,)


def restore_order(frame, solved, lengths, qi, ids, n_rows, rows_per_file):
    """The released frame: input rows in input order with QIs replaced, identifiers dropped."""
    keep = [i for i, n in enumerate(lengths) if n]
    frame = frame.partitions[keep]
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])[keep]
    in_div = tuple(int(o) for o in offsets) + (n_rows - 1,)
    out_div = file_divisions(n_rows, rows_per_file)
    original = frame.set_index(ROW_ID, sorted=True, divisions=in_div).repartition(divisions=out_div)
    released = solved[[ROW_ID, *qi]].set_index(ROW_ID, divisions=out_div)
    meta = _replace_qis(original._meta, released._meta, qi, ids)
    return original.map_partitions(_replace_qis, released, qi, ids, meta=meta, align_dataframes=False)


def run(input_path, output, options, report_path=None):
    """Read, anonymize, check and atomically write a release; returns the report (a dict)."""
    from .. import __version__

    timings = Timings()
    with timings.stage("read_validate"):
        ddf = io.read_input(input_path)
        qi, ids = plan(ddf, options)
        tmp = io.prepare_output(output)
    try:
        with timings.stage("statistics"):
            n_rows, mean, std, lengths = column_statistics(ddf, qi)
            check_k(options.k, n_rows)
            frame = with_row_ids(ddf, lengths)
        with timings.stage("blocks"):
            solved = solve_blocks(frame, qi, mean, std, options).persist()
        with timings.stage("gate"):
            blocks = gate(solved, qi, options.k, n_rows)
        sse = float(blocks["sse"].sum())
        sst = float(n_rows * np.count_nonzero(std > 0))
        report = {
            "rows": n_rows,
            "k": options.k,
            "method": options.method,
            "aggregate": options.aggregate,
            "quasi_identifiers": qi,
            "identifiers_dropped": ids,
            "groups": int(blocks["groups"].sum()),
            "min_group_size": int(blocks["min_group_size"].min()),
            "max_group_size": int(blocks["max_group_size"].max()),
            "information_loss": 100.0 * sse / sst if sst > 0 else 0.0,
            "sse": sse,
            "sst": sst,
            "k_anonymity_verified": True,
            "min_tuple_count": int(blocks["min_tuple_count"].min()),
            "blocks": len(blocks),
            "input": str(input_path),
            "output": str(output),
            "options": asdict(options),
            "version": __version__,
        }
        with timings.stage("write"):
            released = restore_order(frame, solved, lengths, qi, ids, n_rows, options.rows_per_file)
            metadata = {k: report[k] for k in ("k", "method", "aggregate", "quasi_identifiers",
                                               "information_loss", "version")}
            released.to_parquet(
                tmp,
                write_index=False,
                name_function=lambda i: f"part-{i:05d}.parquet",
                custom_metadata={b"microagg": json.dumps(metadata, sort_keys=True).encode()},
                write_metadata_file=False,
            )
        report["timings"] = timings.seconds
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
