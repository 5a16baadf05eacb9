"""Stitching windows in one kernel: cut the groups near a split plane into windows, improve each.

The stitching stage (:mod:`microagg.pipeline.stitch`) re-solves the groups near a split plane.
Too many groups for one window are cut by recursive median splits of their centroids along the
centroids' first principal direction, until every window holds at most ``window_rows`` rows; each
window is then improved by the local search (:func:`microagg.kernels.refine.refine_sse`) and kept
if the search changed it (every change it applies lowers the SSE). Doing the whole loop here
instead of in Python removes a few NumPy calls per window (a principal direction, a sort, a gather,
two SSEs), which at a million rows cost about half as much as the local search they serve
(BENCHMARKS.md, tenth session).
"""

import numpy as np

from ._jit import jit
from .eigen import principal_axis
from .groups import compact_labels, gather_groups, record_groups
from .refine import TOL, refine_sse


@jit
def plane_candidates(centroids, radius, head, s, e, direction, threshold, band):
    """The groups whose first row is in ``s..e-1`` (``head``: a group table's, :func:`record_groups`) near the
    plane ``x . direction = threshold``: those whose centroid's distance to it is at most ``band * (its
    radius + the median radius of those groups)``, in order of first row.

    The projections are summed in column order, as the split tree's routing does
    (:func:`microagg.kernels.blocking.project`): a BLAS product chose its order by the machine's CPU, so
    a group at the band's edge could be a candidate on one worker and not on another. In one pass, no
    gathered copy of the centroids (2.2 of the 10M job's 40 thread-s in the block tasks went to these
    selections in NumPy)."""
    m = 0
    for i in range(s, e):
        m += head[i] >= 0
    ids = np.empty(m, dtype=np.int64)
    r = np.empty(m)
    m = 0
    for i in range(s, e):
        if head[i] >= 0:
            ids[m] = head[i]
            r[m] = radius[head[i]]
            m += 1
    if m == 0:
        return ids
    median = np.median(r)
    d = centroids.shape[1]
    n = 0
    for t in range(m):
        g = ids[t]
        p = 0.0
        for j in range(d):
            p += centroids[g, j] * direction[j]
        if abs(p - threshold) <= band * (radius[g] + median):
            ids[n] = g
            n += 1
    return ids[:n]


@jit
def split_windows(centroids, candidates, sizes, window_rows):
    """Cut the groups ``candidates`` into windows of whole groups of at most ``window_rows`` rows.

    A set of groups larger than that (and of at least 4 groups) is sorted by the projection of its
    centroids on their first principal direction (stable) and halved by count, recursively.
    Returns ``(order, bounds)``: window w is ``order[bounds[w]:bounds[w + 1]]``, windows depth-first.
    """
    m = candidates.shape[0]
    order = candidates.copy()
    bounds = np.zeros(m + 1, dtype=np.int64)
    n_windows = 0
    stack = np.empty((2 * m + 2, 2), dtype=np.int64)
    stack[0, 0] = 0
    stack[0, 1] = m
    top = 1
    d = centroids.shape[1]
    while top > 0:
        top -= 1
        s = stack[top, 0]
        e = stack[top, 1]
        rows = 0
        for i in range(s, e):
            rows += sizes[order[i]]
        if rows <= window_rows or e - s < 4:
            bounds[n_windows + 1] = e
            n_windows += 1
            continue
        part = order[s:e].copy()
        v = principal_axis(centroids, part)
        p = np.empty(e - s)
        for i in range(e - s):
            acc = 0.0
            for j in range(d):
                acc += centroids[part[i], j] * v[j]
            p[i] = acc
        rank = np.argsort(p, kind="mergesort")
        for i in range(e - s):
            order[s + i] = part[rank[i]]
        half = s + (e - s) // 2
        stack[top, 0] = half  # the right half after the left one
        stack[top, 1] = e
        stack[top + 1, 0] = s
        stack[top + 1, 1] = half
        top += 2
    return order, bounds[: n_windows + 1]


@jit
def _improve_window(Z, labels, members, k, max_size, n_neighbors, sweeps):
    """The local search on the groups of rows ``members`` (ascending): ``(local, n_new, gain)``, the
    window's new labels ``0..n_new-1`` (rows in ascending order, groups in order of first appearance)
    if the search changed them (``gain`` > 0, the SSE it won), else ``gain`` 0.

    The gain is the sum of the applied changes' own exact deltas (:func:`microagg.kernels.refine.refine_sse`),
    each below minus the search's tolerance: an SSE pass before the search and one after (7 % of a
    window's time on windows of 2,000 rows) only repeated it, less exactly."""
    m = members.shape[0]
    d = Z.shape[1]
    sub = np.empty((m, d))
    old = np.empty(m, dtype=np.int64)
    for t in range(m):
        old[t] = labels[members[t]]
        for j in range(d):
            sub[t, j] = Z[members[t], j]
    local, _ = compact_labels(old)
    changes, drop = refine_sse(sub, local, k, max_size, n_neighbors, sweeps, TOL)
    top = 0
    for t in range(m):
        if local[t] > top:
            top = local[t]
    return local, top + 1, drop if changes > 0 else 0.0


@jit
def improve_recorded_windows(Z, labels, candidates, centroids, radius, sizes, start, count, pool, top, head,
                             next_id, k, max_size, n_neighbors, sweeps, window_rows):
    """Improve the groups ``candidates`` of a group table (:func:`microagg.kernels.groups.record_groups`'
    table, indexed by group id) window by window (:func:`split_windows`) by local search; a window is kept
    only if the search changed it. ``labels`` (group ids, rows of ``Z``) are changed in place, an improved
    window's groups get fresh ids from ``next_id`` up and are recorded in the table (the pool from ``top`` on, with
    room for every candidate row; the table with room for a group of k rows each). A window's rows are
    visited in ascending order, its groups in order of first appearance, so the result does not depend on
    how the groups were numbered.

    Returns ``(gain, next_id, top)``: ``gain`` is the SSE won.
    """
    order, bounds = split_windows(centroids, candidates, sizes, window_rows)
    gain = 0.0
    for w in range(bounds.shape[0] - 1):
        members = gather_groups(start, count, pool, order[bounds[w]:bounds[w + 1]])
        local, n_new, won = _improve_window(Z, labels, members, k, max_size, n_neighbors, sweeps)
        if won > 0.0:
            if next_id + n_new > sizes.shape[0] or top + members.shape[0] > pool.shape[0]:
                raise ValueError("the group table has no room for a window's new groups")
            gain += won
            for t in range(members.shape[0]):
                labels[members[t]] = local[t] + next_id
            top = record_groups(Z, labels, members, next_id, next_id + n_new, centroids, radius, sizes, start,
                                count, pool, top, head)
            next_id += n_new
    return gain, next_id, top
