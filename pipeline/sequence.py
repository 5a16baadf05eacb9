"""Sequence methods: one global ordering of the records, then one contiguous partition along it.

``pcp`` and ``zscore`` are the projected microaggregation of ``shared/papers/mic1d-one-dimension-
microaggregation.txt`` Algorithm 1: the (standardized) QIs projected on their first principal
component or summed as z-scores, the records sorted by that score, and the optimal contiguous
k..2k-1 partition whose edge costs are the multivariate SSE of the segment in QI space (the
Hansen-Mukherjee shortest path of :mod:`microagg.kernels.hm`). ``univariate`` is individual ranking
(``shared/papers/optimal-univariate-noise-microaggregation.txt`` sections II-III): every QI on its
own (one attribute block per column), sorted, grouped either in runs of k (``grouping="fixed"``, the
last run of a stratum taking the remainder) or optimally (``grouping="optimal"``, Hansen-Mukherjee).

The order is by ``(stratum, score, row id)``, so ties never depend on the input's partitioning, and
no group crosses a stratum. The principal direction of ``pcp`` is that of the deterministic sample
behind the pipeline's split tree (every row when the input has at most 20,000), so the in-memory and
the distributed release order the records identically.

Distributed (:func:`solve_sequence`): the rows are range-partitioned by their ``(stratum, score)``
into buckets at splitters taken from the sample, each bucket sorted in its own task, and the
shortest path is extended bucket by bucket in a chain of tasks, each receiving the previous one's
last 2k-2 rows and 2k-1 path costs (:func:`microagg.kernels.hm.shortest_path_step`): the costs and
predecessors are bitwise those of the in-memory computation, so the partition is exactly the
in-memory optimum. The predecessors are then walked back from the last bucket to the first (a
second, cheap chain), and each bucket releases the groups that end in it, those that start in the
previous bucket included (at most 2k-2 rows, carried in the chain).
"""

from typing import NamedTuple

import numpy as np
from dask import delayed

from .. import kernels
from ..kernels import hm
from .blocking import principal_direction
from .errors import InputError

SEQUENCE_METHODS = ("pcp", "zscore", "univariate")
GROUPINGS = ("optimal", "fixed")


def is_sequence(method):
    return method in SEQUENCE_METHODS


def grouping_of(method, method_options):
    """The contiguous grouping of a sequence method: ``univariate`` takes ``grouping`` (one of
    ``GROUPINGS``, checked as its catalogue entry declares it); pcp and zscore are always optimal."""
    if method != "univariate":
        return "optimal"
    from .methods import METHODS  # the catalogue imports this module

    return METHODS["univariate"].option_value("grouping", method_options)


def check_sequence(method, refine, attribute_blocks):
    """Options a sequence method cannot take, refused before any work."""
    if not is_sequence(method):
        return
    if refine not in (None, "none"):
        raise InputError(f"--refine {refine} does not apply to --method {method}: its partition is the optimum "
                         "along its ordering (refinements improve the block methods' groups)")
    if method == "univariate" and attribute_blocks:
        raise InputError("--method univariate microaggregates every quasi-identifier on its own; it takes no --blocks")


def direction(method, Z_sample):
    """What the score needs from the sample: the principal direction for ``pcp``, else None."""
    if method == "pcp":
        return principal_direction(np.ascontiguousarray(Z_sample)) if len(Z_sample) > 1 else \
            np.full(Z_sample.shape[1], 1.0 / np.sqrt(Z_sample.shape[1]))
    return None


def scores(method, Z, direction=None):
    """Each row's position on the line: a row-wise function of that row alone (so a row scores the
    same wherever it is processed)."""
    if method == "pcp":
        return kernels.project(np.ascontiguousarray(Z), direction)
    if method == "zscore":
        return kernels.project(np.ascontiguousarray(Z), np.ones(Z.shape[1]))
    return np.ascontiguousarray(Z[:, 0], dtype=np.float64)


def order_of(stratum, score, row_id):
    """Sequence order: by stratum, then score, then row id."""
    return np.lexsort((row_id, score, stratum))


def _groups_from_nodes(nodes):
    """Labels ``0..g-1`` along the sequence from the descending group boundaries ``nodes`` (n ... 0)."""
    bounds = nodes[::-1]
    return np.repeat(np.arange(len(bounds) - 1, dtype=np.int64), np.diff(bounds))


def partition_sequence(Z, k, method, grouping="optimal", stratum=None, direction_=None):
    """In-memory labels of a sequence method on standardized rows ``Z`` (row ids ``0..n-1``; one column
    for univariate, which orders by it alone: on several it ordered by the first and costed them all)."""
    if method == "univariate" and Z.shape[1] != 1:
        raise InputError(f"univariate microaggregation partitions one column at a time; got {Z.shape[1]} columns "
                         "(microagg.anonymize applies it to every quasi-identifier)")
    n = Z.shape[0]
    stratum = np.zeros(n, dtype=np.int64) if stratum is None else np.asarray(stratum, dtype=np.int64)
    order = order_of(stratum, scores(method, Z, direction_), np.arange(n))
    Zo = np.ascontiguousarray(Z[order])
    best = np.full(n + 1, np.inf)
    pred = np.full(n + 1, -1, dtype=np.int64)
    best[0] = 0.0
    hm.shortest_path_step(Zo, np.ascontiguousarray(stratum[order]), best, pred, 0, k, grouping == "fixed", -1)
    if not np.isfinite(best[n]):
        raise InputError(f"no contiguous partition into groups of {k}..{2 * k - 1} records exists (a stratum "
                         f"with fewer than {k} rows?)")
    labels = np.empty(n, dtype=np.int64)
    labels[order] = _groups_from_nodes(hm.walk_back(pred, n, 0))
    return labels


# --- distributed ---------------------------------------------------------------------------------

class Bucket(NamedTuple):
    """Rows of one bucket in sequence order: global row ids, strata, raw and standardized values,
    survey weights (or None)."""

    row_id: np.ndarray
    stratum: np.ndarray
    values: np.ndarray
    Z: np.ndarray
    weight: np.ndarray | None


class Frontier(NamedTuple):
    """What the next bucket's step needs: the sequence's last rows (at most 2k-2) and the path costs
    of its last nodes (one more), and the number of rows so far."""

    rows: Bucket
    best: np.ndarray
    position: int


def splitters(stratum, score, row_id, n_buckets):
    """``(strata, scores)`` of the ``n_buckets - 1`` splitters: the sample's sequence at equal steps."""
    order = order_of(stratum, score, row_id)
    at = (np.arange(1, n_buckets) * len(order)) // n_buckets
    return np.ascontiguousarray(stratum[order][at], dtype=np.int64), np.ascontiguousarray(score[order][at])


def take(rows, index):
    """The rows ``index`` of any tuple of per-row arrays (a :class:`Bucket`, the pipeline's ``Rows``)."""
    return type(rows)(*(None if f is None else np.take(f, index, axis=0) for f in rows))


def concat(parts, width):
    parts = [p for p in parts if p is not None and len(p.row_id)]
    if not parts:
        return Bucket(np.empty(0, np.int64), np.empty(0, np.int64), np.empty((0, width)), np.empty((0, width)), None)
    return Bucket(*(None if parts[0][i] is None else np.concatenate([p[i] for p in parts])
                    for i in range(len(Bucket._fields))))


def sort_bucket(width, method, direction_, *pieces):
    """One bucket's pieces in sequence order (any order of the pieces gives the same result)."""
    rows = concat(pieces, width)
    return take(rows, order_of(rows.stratum, scores(method, rows.Z, direction_), rows.row_id))


def first_frontier(width):
    return Frontier(concat([], width), np.zeros(1), 0)


def step(frontier, bucket, k, fixed, next_stratum):
    """Extend the shortest path over one bucket. Returns ``(frontier after it, predecessors of its
    nodes as global node numbers)``."""
    F, m = len(frontier.rows.row_id), len(bucket.row_id)
    rows = concat([frontier.rows, bucket], bucket.Z.shape[1])
    best = np.concatenate([frontier.best, np.full(m, np.inf)])
    pred = np.full(F + m + 1, -1, dtype=np.int64)
    if m:
        hm.shortest_path_step(np.ascontiguousarray(rows.Z), np.ascontiguousarray(rows.stratum), best, pred, F, k,
                              fixed, next_stratum)
    base = frontier.position - F  # global node number of local node 0
    keep = min(2 * k - 2, F + m)
    tail = take(rows, np.arange(F + m - keep, F + m))
    out = Frontier(tail, best[len(best) - keep - 1:], frontier.position + m)
    return out, np.where(pred[F + 1:] < 0, -1, pred[F + 1:] + base)


def walk(pred, start, end_node):
    """Group boundaries inside one bucket (its nodes ``start + 1 .. start + len(pred)``, ``pred`` their
    predecessors as global node numbers), walked back from ``end_node``: ``(nodes, next end node)``,
    ``nodes`` descending, the last one at or below ``start`` (where the previous bucket goes on)."""
    if end_node <= start:
        return np.array([end_node], dtype=np.int64), end_node
    local = np.empty(end_node - start + 1, dtype=np.int64)
    local[0] = -1
    local[1:] = pred[: end_node - start] - start
    nodes = hm.walk_back(local, end_node - start, 0) + start
    return nodes, int(nodes[-1])


def position(frontier):
    return frontier.position


@delayed(pure=True)
def _first_stratum(bucket):
    return int(bucket.stratum[0]) if len(bucket.row_id) else None


def next_strata(firsts):
    """For every bucket, the stratum of the first row after it (-1: the sequence ends there)."""
    out, following = [], -1
    for f in reversed(firsts):
        out.append(following)
        if f is not None:
            following = f
    return out[::-1]


def bucket_release_rows(frontier, bucket, nodes):
    """The rows a bucket releases (sequence positions ``nodes[-1] .. nodes[0] - 1``) and their labels."""
    F = len(frontier.rows.row_id)
    base = frontier.position - F
    lo, hi = int(nodes[-1]), int(nodes[0])
    rows = take(concat([frontier.rows, bucket], bucket.Z.shape[1]), np.arange(lo - base, hi - base))
    labels = _groups_from_nodes(nodes - lo)
    return rows, labels


def graph(buckets, width, k, fixed):
    """The delayed chain over ``buckets`` (delayed :class:`Bucket` in sequence order, each sorted):
    path steps, the walk back. Returns per bucket ``(frontier in, bucket, nodes)`` as delayed
    objects. The shortest path is exact across the buckets (a frontier carries the last 2k-2 nodes
    and their costs), so the groups do not depend on where the buckets are cut."""
    n_buckets = len(buckets)
    nexts = delayed(next_strata, pure=True)([_first_stratum(b) for b in buckets])
    frontier = delayed(first_frontier, pure=True)(width)
    fronts, preds = [], []
    for b in range(n_buckets):
        fronts.append(frontier)
        out = delayed(step, pure=True, nout=2)(frontier, buckets[b], k, fixed, nexts[b])
        frontier, pred = out
        preds.append(pred)
    end = delayed(position, pure=True)(frontier)  # N: the last node
    walks = [None] * n_buckets
    for b in reversed(range(n_buckets)):
        start = delayed(position, pure=True)(fronts[b])
        nodes, end = delayed(walk, pure=True, nout=2)(preds[b], start, end)
        walks[b] = nodes
    return [(fronts[b], buckets[b], walks[b]) for b in range(n_buckets)]
