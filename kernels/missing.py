"""Missing quasi-identifier values (``--missing centroid``): distances over the observed coordinates.

A missing value is NaN. The distance between a record and a point uses only the coordinates
observed in both, rescaled to the full dimension: ``d / m * sum over those m coordinates of
(x_j - p_j)^2`` (the usual treatment of incomplete records in distance-based microaggregation,
e.g. sdcMicro's); with no coordinate in common the distance is unknown and counts as infinite.
A group's centroid is the mean of its observed values, column by column, and a missing value is
released as its group's centroid.

:func:`mdav_missing` is classic MDAV (:mod:`microagg.kernels.mdav`, the same choices of r and s,
the same tie rule: the lowest row index) with these distances and centroids. After a block is
solved, :func:`fill_missing` puts each group's observed mean into its missing cells, so that the
stitching and the local search, which need complete records, see every missing cell exactly at its
group's centroid: the completed SSE then equals the SSE over the observed cells, and any change they
accept lowers both.
"""

import numpy as np

from ._jit import jit
from .mdav import _farthest, _nearest, column_major


@jit
def observed_distances(Y, m, p, dist, count):
    """``dist[i]``: the rescaled squared distance of stored record ``i`` (column-major ``Y``) to ``p``
    over the coordinates observed in both, ``inf`` when there is none; ``count`` is scratch."""
    d = Y.shape[0]
    dist[:m] = 0.0
    count[:m] = 0.0
    for j in range(d):
        a = p[j]
        if a != a:
            continue
        row = Y[j]
        for i in range(m):
            v = row[i]
            if v == v:
                u = v - a
                dist[i] += u * u
                count[i] += 1.0
    for i in range(m):
        dist[i] = dist[i] * d / count[i] if count[i] > 0 else np.inf


@jit
def _centroid(total, seen, c):
    for j in range(total.shape[0]):
        c[j] = total[j] / seen[j] if seen[j] > 0 else np.nan


@jit
def _take(members, alive, Z, labels, total, seen, group):
    for t in range(members.shape[0]):
        row = members[t]
        alive[row] = False
        labels[row] = group
        for j in range(Z.shape[1]):
            v = Z[row, j]
            if v == v:
                total[j] -= v
                seen[j] -= 1.0


@jit
def mdav_missing(Z, k):
    """MDAV labels of ``Z`` (n, d) with NaN for missing values; groups of k..2k-1 in order of formation."""
    n, d = Z.shape
    labels = np.full(n, -1, dtype=np.int64)
    if n < 2 * k:
        labels[:] = 0
        return labels
    Y = column_major(Z)
    alive = np.ones(n, dtype=np.bool_)
    total = np.zeros(d)
    seen = np.zeros(d)
    for i in range(n):
        for j in range(d):
            v = Z[i, j]
            if v == v:
                total[j] += v
                seen[j] += 1.0
    dist = np.empty(n)
    count = np.empty(n)
    members = np.empty(k, dtype=np.int64)
    c = np.empty(d)
    n_alive = n
    group = 0
    while n_alive >= 2 * k:
        _centroid(total, seen, c)
        observed_distances(Y, n, c, dist, count)
        r = _farthest(dist, alive, n)
        observed_distances(Y, n, Y[:, r].copy(), dist, count)
        _nearest(dist, alive, n, r, k, members)
        _take(members, alive, Z, labels, total, seen, group)
        n_alive -= k
        group += 1
        if n_alive < 2 * k:
            break
        s = _farthest(dist, alive, n)  # dist holds the distances to r
        observed_distances(Y, n, Y[:, s].copy(), dist, count)
        _nearest(dist, alive, n, s, k, members)
        _take(members, alive, Z, labels, total, seen, group)
        n_alive -= k
        group += 1
    for i in range(n):
        if alive[i]:
            labels[i] = group
    return labels


@jit
def observed_means(X, labels, n_groups, fallback):
    """``(n_groups, d)`` means of each group's observed values per column (``fallback[j]`` where a
    group has none)."""
    n, d = X.shape
    sums = np.zeros((n_groups, d))
    counts = np.zeros((n_groups, d))
    for i in range(n):
        g = labels[i]
        for j in range(d):
            v = X[i, j]
            if v == v:
                sums[g, j] += v
                counts[g, j] += 1.0
    for g in range(n_groups):
        for j in range(d):
            sums[g, j] = sums[g, j] / counts[g, j] if counts[g, j] > 0 else fallback[j]
    return sums


@jit
def fill_missing(Z, labels, n_groups):
    """Put each group's observed mean (0, the column mean in z-scores, where it has none) into its
    missing cells of ``Z``, in place."""
    means = observed_means(Z, labels, n_groups, np.zeros(Z.shape[1]))
    for i in range(Z.shape[0]):
        for j in range(Z.shape[1]):
            if Z[i, j] != Z[i, j]:
                Z[i, j] = means[labels[i], j]
