"""Record orderings for MHM: a path through the records, then the optimal contiguous partition.

MHM (Domingo-Ferrer, Martinez-Balleste, Mateo-Sanz and Sebe, 2006) turns a multivariate data set
into a sequence and hands it to the Hansen-Mukherjee shortest path (:func:`.hm.optimal_contiguous`).
This module builds the sequences:

``npn_order``
    Nearest point next: start at the record farthest from the centroid of the data, then repeatedly
    step to the nearest record not yet visited (as ``shared/papers/optimal-univariate-noise-
    microaggregation.txt`` section II.B describes it).

``group_order``
    The ordering derived from any partition whose groups are numbered in formation order (our
    MDAV, MD, CBFS... kernels all number them so): the groups one after the other in label order,
    and within a group the records nearer the previous group first and those nearer the next group
    last. Precisely, a record ``x`` of group ``g`` is keyed by ``||x - c[g-1]||^2 - ||x - c[g+1]||^2``
    (``c`` the group centroids; the first group uses its own centroid in place of ``c[-1]``, the last
    group in place of ``c[g+1]``), which is linear in ``x``: the records are sorted by their
    projection on the line from the previous to the next centroid. The path thus enters each group
    on the side of its predecessor and leaves it on the side of its successor, so the records the
    Hansen-Mukherjee partition may move across a group boundary sit next to that boundary.

Because every group of the source partition is a contiguous run of the ordering, the source
partition itself is one of the contiguous partitions the shortest path considers: when its groups
have k..2k-1 records (as MDAV's do), MHM on its ordering never has a higher SSE than the source.
Measured on the CASC files it finds exactly MDAV's partition (IL census 5.692 / 9.088 / 14.156, EIA
0.483 / 1.667 / 3.840 for k = 3 / 5 / 10): MDAV forms its groups in pairs at opposite ends of the
remaining data, so consecutive groups are far apart and no boundary can move profitably. The 2006
paper reports EIA 0.408 / 1.256 / 3.773 for MDAV-MHM with an MDAV-based ordering that our sources do
not specify.

Distances are squared Euclidean, computed on the fly (memory O(n d), never O(n^2)); work is O(n^2 d)
for ``npn_order`` and O(n d + n log n) for ``group_order``.

Tie-breaking (deterministic): the farthest and the nearest record are the first in row order among
equals (lowest row index), and equal keys within a group keep ascending row order (stable sort).

References
----------
Domingo-Ferrer, J., Martinez-Balleste, A., Mateo-Sanz, J. M. and Sebe, F. (2006). Efficient
multivariate data-oriented microaggregation. The VLDB Journal 15(4), 355-369.
"""

import numpy as np

from ._jit import jit
from .mdav import _distances_to, column_major


@jit
def npn_order(Z):
    """Nearest-point-next path through the rows of ``Z`` (``(n, d)`` float64, C-contiguous, n >= 1).

    Returns an int64 permutation of ``0..n-1``: the row farthest from the centroid, then at each
    step the unvisited row nearest to the last one (lowest row index on ties).
    """
    n, d = Z.shape
    Y = column_major(Z)
    c = np.zeros(d)
    for i in range(n):
        for j in range(d):
            c[j] += Z[i, j]
    for j in range(d):
        c[j] /= n
    dist = np.empty(n)
    _distances_to(Y, Y.shape[1], c, dist)
    cur = 0
    for i in range(1, n):
        if dist[i] > dist[cur]:
            cur = i
    visited = np.zeros(n, dtype=np.bool_)
    order = np.empty(n, dtype=np.int64)
    for t in range(n):
        order[t] = cur
        visited[cur] = True
        if t == n - 1:
            break
        _distances_to(Y, Y.shape[1], Z[cur], dist)
        best = -1
        best_d = np.inf
        for i in range(n):
            if not visited[i] and dist[i] < best_d:
                best_d = dist[i]
                best = i
        cur = best
    return order


@jit
def group_order(Z, labels):
    """The ordering derived from ``labels`` (int64 ``0..g-1``, groups numbered in formation order).

    Groups follow one another in label order; within group ``g`` rows are sorted by
    ``||x - c[g-1]||^2 - ||x - c[g+1]||^2`` (stable: ascending row index on equal keys), see the
    module docstring. Returns an int64 permutation of ``0..n-1``.
    """
    n, d = Z.shape
    g = 0
    for i in range(n):
        if labels[i] + 1 > g:
            g = labels[i] + 1
    counts = np.zeros(g, dtype=np.int64)
    centroids = np.zeros((g, d))
    for i in range(n):
        h = labels[i]
        counts[h] += 1
        for j in range(d):
            centroids[h, j] += Z[i, j]
    for h in range(g):
        for j in range(d):
            centroids[h, j] /= counts[h]
    start = np.zeros(g + 1, dtype=np.int64)
    for h in range(g):
        start[h + 1] = start[h] + counts[h]
    order = np.empty(n, dtype=np.int64)
    fill = start[:g].copy()
    for i in range(n):                 # counting sort by label: ascending row index within a group
        h = labels[i]
        order[fill[h]] = i
        fill[h] += 1
    for h in range(g):
        a = start[h]
        b = start[h + 1]
        prev = h - 1 if h > 0 else h
        nxt = h + 1 if h + 1 < g else h
        keys = np.empty(b - a)
        for t in range(a, b):
            row = order[t]
            s = 0.0
            for j in range(d):
                u = Z[row, j] - centroids[prev, j]
                v = Z[row, j] - centroids[nxt, j]
                s += u * u - v * v
            keys[t - a] = s
        perm = np.argsort(keys, kind="mergesort")
        members = order[a:b].copy()
        for t in range(b - a):
            order[a + t] = members[perm[t]]
    return order
