"""Group bookkeeping kernels for the stitching stage: relabelling, group shapes, member lists.

Each runs in one or two passes over the rows (no sorting), so stitching a split plane costs time
linear in the rows below it.
"""

import numpy as np

from ._jit import jit


@jit
def compact_labels(labels):
    """``(local, g)``: ``labels`` (any non-negative int64) renumbered ``0..g-1`` in order of first
    appearance."""
    n = labels.shape[0]
    top = 0
    for i in range(n):
        if labels[i] > top:
            top = labels[i]
    remap = np.full(top + 1, -1, dtype=np.int64)
    local = np.empty(n, dtype=np.int64)
    g = 0
    for i in range(n):
        old = labels[i]
        if remap[old] < 0:
            remap[old] = g
            g += 1
        local[i] = remap[old]
    return local, g


@jit
def group_shape(Z, labels, n_groups, at=None):
    """Per group: ``(centroids, radius, sizes)``, the radius being the RMS distance to the centroid.

    ``at``: row ``i`` (label ``labels[i]``) is ``Z[at[i]]``, the rows summed in ``i``'s order (the
    shape of rows stored in another order, bit for bit as if they were stored in this one)."""
    n, d = labels.shape[0], Z.shape[1]
    centroids = np.zeros((n_groups, d))
    sizes = np.zeros(n_groups, dtype=np.int64)
    for i in range(n):
        g = labels[i]
        r = i if at is None else at[i]
        sizes[g] += 1
        for j in range(d):
            centroids[g, j] += Z[r, j]
    for g in range(n_groups):
        for j in range(d):
            centroids[g, j] /= sizes[g]
    spread = np.zeros(n_groups)
    for i in range(n):
        g = labels[i]
        r = i if at is None else at[i]
        s = 0.0
        for j in range(d):
            t = Z[r, j] - centroids[g, j]
            s += t * t
        spread[g] += s
    radius = np.empty(n_groups)
    for g in range(n_groups):
        radius[g] = np.sqrt(spread[g] / sizes[g])
    return centroids, radius, sizes


@jit
def group_members(labels, n_groups):
    """Member lists as ``(start, rows)``: group g's rows, ascending, are ``rows[start[g]:start[g+1]]``."""
    n = labels.shape[0]
    start = np.zeros(n_groups + 1, dtype=np.int64)
    for i in range(n):
        start[labels[i] + 1] += 1
    for g in range(n_groups):
        start[g + 1] += start[g]
    fill = start[:-1].copy()
    rows = np.empty(n, dtype=np.int64)
    for i in range(n):
        g = labels[i]
        rows[fill[g]] = i
        fill[g] += 1
    return start, rows


@jit
def attach_leftovers(Z, labels, n_groups):
    """Each unlabelled row (``-1``) joins the group with the nearest centroid (centroids of the
    labelled rows, computed once; the lowest group number on ties)."""
    n, d = Z.shape
    cent = np.zeros((n_groups, d))
    counts = np.zeros(n_groups)
    for i in range(n):
        g = labels[i]
        if g >= 0:
            counts[g] += 1.0
            for j in range(d):
                cent[g, j] += Z[i, j]
    for g in range(n_groups):
        for j in range(d):
            cent[g, j] /= counts[g]
    for i in range(n):
        if labels[i] < 0:
            best = -1
            best_d = np.inf
            for g in range(n_groups):
                s = 0.0
                for j in range(d):
                    t = Z[i, j] - cent[g, j]
                    s += t * t
                if s < best_d:
                    best_d = s
                    best = g
            labels[i] = best


@jit
def scatter_rows(rows, seen, start, block, row_id, group, table):
    """Released values of a piece's rows put back at their positions, row-major: for every row i of the
    piece (``row_id`` ascending, or every one of them in range) whose row id lies in ``start..start + n - 1``,
    ``rows[row_id[i] - start, j] = table[group[i], j]`` and ``seen[row_id[i] - start, block] += 1`` (the count
    that lets the caller check every row was released exactly once). The rows are found by binary search:
    the work is that of the rows in range, however large the piece.

    Row-major, a row's values fill one or two cache lines. Written straight into a file's columns (13 of them,
    each a stream of its own), every row touched 13 lines, each of them again by the next piece's rows: an
    output file of 250,000 rows from 128 pieces took 28 ms that way, and 14 ms row-major with
    :func:`transpose_into` after (BENCHMARKS.md, sixty-third session)."""
    n = rows.shape[0]
    width = table.shape[1]
    a = np.searchsorted(row_id, start)
    b = np.searchsorted(row_id, start + n)
    for i in range(a, b):
        r = row_id[i] - start
        seen[r, block] += 1
        g = group[i]
        for j in range(width):
            rows[r, j] = table[g, j]


TRANSPOSE_ROWS = 64
"""Rows of :func:`transpose_into`'s tiles: a tile's rows (at 13 columns, 6.5 kB) stay in the first-level cache
while each of its columns is written out."""


@jit
def transpose_into(rows, values, first):
    """``values[first + j, r] = rows[r, j]`` for every row r and column j of ``rows``, tile by tile."""
    n, width = rows.shape
    for r0 in range(0, n, TRANSPOSE_ROWS):
        r1 = min(r0 + TRANSPOSE_ROWS, n)
        for j in range(width):
            out = values[first + j]
            for r in range(r0, r1):
                out[r] = rows[r, j]


@jit
def file_pieces(row_id, group, n_groups, starts):
    """A released piece's rows (``row_id`` ascending, ``group`` in ``0..n_groups-1``) cut by output file
    (``starts``: each file's first row id, ascending), each file's groups renumbered in id order.

    Returns ``(cuts, rank, ids, id_bounds)``: file f holds rows ``cuts[f]:cuts[f + 1]``, row i's group is
    number ``rank[i]`` of that file's groups, which are ``ids[id_bounds[f]:id_bounds[f + 1]]``.
    """
    n = row_id.shape[0]
    files = starts.shape[0]
    cuts = np.empty(files + 1, dtype=np.int64)
    cuts[0] = 0
    at = 0
    for f in range(files - 1):
        while at < n and row_id[at] < starts[f + 1]:
            at += 1
        cuts[f + 1] = at
    cuts[files] = n
    rank = np.empty(n, dtype=np.int64)
    used = np.zeros(n_groups, dtype=np.bool_)
    index = np.empty(n_groups, dtype=np.int64)
    ids = np.empty(min(n, n_groups * files), dtype=np.int64)  # a group is used at most once per file
    id_bounds = np.empty(files + 1, dtype=np.int64)
    id_bounds[0] = 0
    t = 0
    for f in range(files):
        for i in range(cuts[f], cuts[f + 1]):
            used[group[i]] = True
        for g in range(n_groups):
            if used[g]:
                used[g] = False
                index[g] = t - id_bounds[f]
                ids[t] = g
                t += 1
        id_bounds[f + 1] = t
        for i in range(cuts[f], cuts[f + 1]):
            rank[i] = index[group[i]]
    return cuts, rank, ids[:t], id_bounds


@jit
def record_groups(Z, labels, rows, lo, hi, centroids, radius, sizes, start, count, pool, top, head):
    """Record the groups ``lo..hi-1``, whose rows are ``rows`` (ascending, every one labelled with one
    of them), in a task's group table; returns the pool's new top.

    The table, indexed by group id: ``centroids``, ``radius`` and ``sizes`` of :func:`group_shape` (each
    group's rows summed in ascending order, as over any range of rows that holds it);
    ``pool[start[g]:start[g] + count[g]]``, the group's rows ascending (written from ``top`` on);
    ``head[i]``, the group whose first row is ``i``, else -1. The groups of a range of rows, in order of
    first appearance, are then the ``head`` entries of the range that are not -1, and their shapes are
    the table's: no pass over every row of a split tree's node at each of its planes.
    """
    n = rows.shape[0]
    g = hi - lo
    local = np.empty(n, dtype=np.int64)
    for t in range(n):
        local[t] = labels[rows[t]] - lo
        head[rows[t]] = -1
    shape_centroids, shape_radius, shape_sizes = group_shape(Z, local, g, rows)
    member_start, members = group_members(local, g)
    for u in range(g):
        group = lo + u
        centroids[group] = shape_centroids[u]
        radius[group] = shape_radius[u]
        sizes[group] = shape_sizes[u]
        start[group] = top + member_start[u]
        count[group] = member_start[u + 1] - member_start[u]
        head[rows[members[member_start[u]]]] = group
    for p in range(n):
        pool[top + p] = rows[members[p]]
    return top + n


@jit
def gather_groups(start, count, pool, groups):
    """The rows (ascending) of the groups ``groups``, group g's being ``pool[start[g]:start[g] + count[g]]``
    (:func:`record_groups`' table, or :func:`group_members`' lists with ``count = diff(start)``)."""
    total = 0
    for g in groups:
        total += count[g]
    out = np.empty(total, dtype=np.int64)
    t = 0
    for g in groups:
        for p in range(start[g], start[g] + count[g]):
            out[t] = pool[p]
            t += 1
    out.sort()
    return out
