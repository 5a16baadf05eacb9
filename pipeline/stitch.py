"""Solving a task's blocks and stitching the groups across split planes (NumPy glue over kernels).

A block is solved by the method's kernel (optionally refined). Blocking puts records that are close
but on opposite sides of a split plane into different groups; stitching wins that loss back: the
groups of both sides whose centroids lie within a band around the plane form a *window*; the window
is re-solved twice (its groups improved by the local-search kernel, and the window re-partitioned
by the method and then improved) and the better result is kept only if it lowers the window's SSE.
Neither step can raise the SSE or produce a group smaller than k.

Windows larger than ``window_rows`` are cut into sub-windows of whole groups by recursive median
splits of the group centroids along the window's principal direction, so the cost stays linear.

Everything here is deterministic: rows are visited in global row-id order, groups in id order.
"""

from dataclasses import dataclass

import numpy as np

from .. import kernels
from ..kernels import refine
from .blocking import principal_direction

NEIGHBORS = 8  # candidate groups per group in the local search


@dataclass(frozen=True)
class Refinement:
    """How hard blocks and stitching windows are worked.

    block_sweeps : local-search sweeps inside each block after the method (0: the method as is)
    band : a group is near a plane if ``|centroid - plane| <= band * (its RMS radius + the median
        RMS radius)``
    window_sweeps : local-search sweeps per stitching window
    repartition : also re-partition each window from scratch by the method (keep the better)
    window_rows : largest window re-solved at once
    upper_band : the band of the split planes between tasks (their groups travel to another task)
    """

    block_sweeps: int = 0
    band: float = 0.5
    window_sweeps: int = 1
    repartition: bool = False
    window_rows: int = 2000
    upper_band: float = 0.25


REFINEMENTS = {
    # each block exactly as the method builds it; a light stitching pass across every split plane
    "none": Refinement(),
    # local search to a local optimum inside every block, wider and deeper stitching
    "local": Refinement(block_sweeps=20, band=1.0, window_sweeps=4, repartition=True, window_rows=4000,
                        upper_band=0.5),
}


def compact(labels):
    """Relabel to ``0..g-1`` in order of first appearance."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse].astype(np.int64)


def solve_block(Z, k, method, sweeps):
    """Labels of one block: the method's kernel, then ``sweeps`` of local-search refinement."""
    labels = np.ascontiguousarray(method.partition(Z, k), dtype=np.int64)
    if sweeps:
        refine(Z, labels, k, 2 * k - 1, NEIGHBORS, sweeps)
    return labels


def group_shape(Z, labels):
    """Per group (labels ``0..g-1``): centroid and RMS radius."""
    n_groups = int(labels.max()) + 1
    sums, counts = kernels.group_sums(Z, labels, n_groups)
    centroids = sums / counts[:, None]
    spread = ((Z - centroids[labels]) ** 2).sum(axis=1)
    radius = np.sqrt(np.bincount(labels, weights=spread, minlength=n_groups) / counts)
    return centroids, radius


def plane_distance(centroids, direction, threshold):
    return np.abs(centroids @ direction - threshold)


def near_plane(distance, radius, band):
    """Groups within the band around a plane (scale taken from the groups themselves)."""
    return distance <= band * (radius + np.median(radius))


def improve_window(Z, labels, k, method, settings):
    """Best of (local search on ``labels``) and (re-partition by ``method`` + local search).

    ``labels`` are ``0..g-1`` for the rows of ``Z``; returns ``(labels, gain)``: the better
    labels (``0..g'-1``) and the SSE they win, or the input labels and 0.
    """
    g = int(labels.max()) + 1
    before = kernels.sse(Z, labels, g)
    kept = labels.copy()
    refine(Z, kept, k, 2 * k - 1, NEIGHBORS, settings.window_sweeps)
    kept_sse = kernels.sse(Z, kept, int(kept.max()) + 1)
    best, best_sse = kept, kept_sse
    if settings.repartition:
        fresh = solve_block(Z, k, method, settings.window_sweeps)
        fresh_sse = kernels.sse(Z, fresh, int(fresh.max()) + 1)
        if fresh_sse < kept_sse:
            best, best_sse = fresh, fresh_sse
    if best_sse < before:
        return best, before - best_sse
    return labels, 0.0


def _windows(centroids, groups, sizes, window_rows):
    """Split ``groups`` (ids) into sub-windows of whole groups of at most ``window_rows`` rows."""
    if sizes[groups].sum() <= window_rows or len(groups) < 4:
        return [groups]
    c = np.ascontiguousarray(centroids[groups])
    p = kernels.project(c, principal_direction(c))
    order = np.argsort(p, kind="stable")
    half = len(groups) // 2
    return (_windows(centroids, groups[order[:half]], sizes, window_rows)
            + _windows(centroids, groups[order[half:]], sizes, window_rows))


def improve_groups(Z, local, candidates, k, method, settings):
    """Re-solve the groups ``candidates`` of ``local`` (labels ``0..g-1`` of ``Z``) window by window.

    Returns ``(new_local, gain)``: improved windows get fresh labels above ``local.max()``.
    """
    local = local.copy()
    n_groups = int(local.max()) + 1
    sums, sizes = kernels.group_sums(Z, local, n_groups)
    centroids = sums / sizes[:, None]
    gain = 0.0
    next_id = n_groups
    for window in _windows(centroids, np.asarray(candidates, dtype=np.int64), sizes, settings.window_rows):
        members = np.flatnonzero(np.isin(local, window))
        Zw = np.ascontiguousarray(Z[members])
        new, won = improve_window(Zw, compact(local[members]), k, method, settings)
        if won > 0:
            gain += won
            local[members] = new + next_id
            next_id += int(new.max()) + 1
    return local, gain


def stitch(Z, labels, rows, direction, threshold, k, method, settings):
    """Stitch the groups of ``rows`` (positions into ``Z``) across one plane; updates ``labels``.

    ``labels`` are task-wide group ids; changed groups get fresh ids above the current maximum.
    Returns the SSE gain.
    """
    local = compact(labels[rows])
    Zr = np.ascontiguousarray(Z[rows])
    centroids, radius = group_shape(Zr, local)
    distance = plane_distance(centroids, direction, threshold)
    candidates = np.flatnonzero(near_plane(distance, radius, settings.band))
    if len(candidates) < 2:
        return 0.0
    new, gain = improve_groups(Zr, local, candidates, k, method, settings)
    if gain > 0:
        labels[rows] = new + int(labels.max()) + 1
    return gain


def solve_task(Z, leaf, tree, task, k, method, settings):
    """Labels (``0..g-1``) of one task's rows: its leaves solved, its planes stitched bottom-up.

    A leaf with fewer than k rows (possible when routing by a sample) is merged with its sibling
    before the kernel runs. Returns ``(labels, stitch_gain)``.
    """
    n = Z.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    state = {"next": 0, "gain": 0.0}

    def solve(rows):
        block = solve_block(np.ascontiguousarray(Z[rows]), k, method, settings.block_sweeps)
        labels[rows] = block + state["next"]
        state["next"] += int(block.max()) + 1

    def visit(ref):
        if ref < 0:
            rows = np.flatnonzero(leaf == -1 - ref)
            if len(rows) < k:
                return rows, False
            solve(rows)
            return rows, True
        a, b = tree.children(ref)
        rows_a, solved_a = visit(a)
        rows_b, solved_b = visit(b)
        rows = np.sort(np.concatenate([rows_a, rows_b]))
        if not (solved_a and solved_b):
            if len(rows) < k:
                return rows, False
            solve(rows)  # a small leaf joins its sibling
            return rows, True
        state["gain"] += stitch(Z, labels, rows, tree.directions[ref], tree.thresholds[ref], k, method,
                                settings)
        state["next"] = int(labels.max()) + 1
        return rows, True

    rows, solved = visit(int(tree.task_root[task]))
    if not solved:
        labels[rows] = 0  # fewer than k rows in the whole task: the release gate will refuse it
    return compact(labels), state["gain"]


def assign_upper(Z, labels, tree, task, settings):
    """For each group of a task, the upper split plane (its position in ``tree.upper``) it will be
    stitched across, or -1.

    A group near several planes goes to the nearest, so the upper stitching windows are disjoint
    and every upper plane can be stitched in parallel.
    """
    centroids, radius = group_shape(Z, labels)
    plane = np.full(len(radius), -1, dtype=np.int64)
    best = np.full(len(radius), np.inf)
    for position in tree.task_ancestors[task]:
        node = tree.upper[position]
        distance = plane_distance(centroids, tree.directions[node], tree.thresholds[node])
        better = near_plane(distance, radius, settings.upper_band) & (distance < best)
        plane[better] = position
        best[better] = distance[better]
    return plane
