"""Classic MDAV (Maximum Distance to Average Vector), fixed group size k, and its NC growth variant.

The algorithm, as in ``shared/papers/dbm-density-based-microaggregation.txt`` section 2.4 and
``shared/papers/mic1d-one-dimension-microaggregation.txt`` Algorithm 2 (the mu-Argus / sdcMicro
formulation of Domingo-Ferrer and Torra, 2005)::

    while at least 3k records remain:
        c = centroid of the remaining records
        r = the remaining record farthest from c
        group r with its k-1 nearest remaining records; remove them
        s = the remaining record farthest from r
        group s with its k-1 nearest remaining records; remove them
    if at least 2k records remain:
        c = centroid; r = farthest from c; group r with its k-1 nearest; remove them
    the remaining records (k..2k-1 of them) form the last group

Distances are squared Euclidean distances on the (standardized) input, computed on the fly: memory
is O(n d), never O(n^2). The k-1 nearest are found by one scan that keeps the best k-1 candidates
in a small sorted buffer (a partial selection, not a sort).

Tie-breaking rule (deterministic, independent of how the input was split): among records at equal
distance, the one that comes first in the input (the lowest row index; in the pipeline, the lowest
global row id) is the farthest, respectively the nearest. Groups are numbered in the order they are
formed.

Growth rules (``shared/papers/iterative-group-decomposition-refinement.txt`` section 3.1): ``mdav``
grows each group by *nearest neighbours* (NN: the selected record and its k-1 nearest remaining
records, the classic algorithm above); ``mdav_nc`` grows it *nearest to centre* (NC: starting from
the selected record, repeatedly add the remaining record nearest to the group's running centroid
until the group has k records; ties again to the lowest row index). Everything else (the choice of
r and s, the end game) is the same, so MDAV-NC groups also have k..2k-1 records.

References
----------
Domingo-Ferrer, J. and Torra, V. (2005). Ordinal, continuous and heterogeneous k-anonymity through
microaggregation. Data Mining and Knowledge Discovery 11(2), 195-212.
"""

import numpy as np

from ._jit import jit
from .select import keep_smallest


@jit
def column_major(Z):
    """``Z`` (n, d) stored column by column, ``(d, n)``: distance passes then run over contiguous rows."""
    n, d = Z.shape
    Y = np.empty((d, n))
    for i in range(n):
        for j in range(d):
            Y[j, i] = Z[i, j]
    return Y


@jit
def _distances_to(Y, m, p, dist):
    """``dist[i] = ||Y[:, i] - p||^2`` for the first ``m`` stored records (column-major ``Y``).

    Four columns per pass over ``dist`` (1.6x faster than one at 13 columns: ``dist`` stays in
    registers for four terms), the terms still added one at a time in column order, so every distance
    is bitwise the plain left-to-right sum.
    """
    d = Y.shape[0]
    if d == 0:
        dist[:m] = 0.0
        return
    a = p[0]
    ra = Y[0]
    for i in range(m):
        u = ra[i] - a
        dist[i] = u * u
    j = 1
    while j + 3 < d:
        a, b, c, e = p[j], p[j + 1], p[j + 2], p[j + 3]
        ra, rb, rc, re = Y[j], Y[j + 1], Y[j + 2], Y[j + 3]
        for i in range(m):
            u = ra[i] - a
            v = rb[i] - b
            w = rc[i] - c
            x = re[i] - e
            dist[i] = (((dist[i] + u * u) + v * v) + w * w) + x * x
        j += 4
    while j < d:
        a = p[j]
        ra = Y[j]
        for i in range(m):
            u = ra[i] - a
            dist[i] += u * u
        j += 1


@jit
def _farthest(dist, alive, m):
    """Position of the largest distance among alive records (first one on ties)."""
    best = -1
    best_d = -1.0
    for i in range(m):
        if alive[i] and dist[i] > best_d:
            best_d = dist[i]
            best = i
    return best


@jit
def _nearest(dist, alive, m, center, k, out):
    """Fill ``out`` with ``center`` and the ``k - 1`` alive records nearest to it (partial selection).

    Candidates are scanned in storage order (increasing row index) and a candidate only displaces a
    strictly farther one, so equal distances are resolved in favour of the lower row index.
    """
    _nearest_into(dist, alive, m, center, out, np.empty(k - 1), np.empty(k - 1, dtype=np.int64))


@jit
def _nearest_into(dist, alive, m, center, out, best_d, best_i):
    """:func:`_nearest` of ``len(out)`` records with the selection's buffers (``len(out) - 1`` each)
    given: MDAV's loop calls it twice per iteration, and allocating them each time cost about 6 % of
    its time on blocks of 2,000 rows."""
    filled = 0
    for i in range(m):
        if alive[i] and i != center:
            filled = keep_smallest(best_d, best_i, filled, dist[i], i)
    out[0] = center
    for t in range(best_d.shape[0]):
        out[t + 1] = best_i[t]


@jit
def _grow_nc(Y, alive, m, seed, members, dist, running):
    """NC growth: ``members[0] = seed``, then the alive record nearest to the running centroid of the
    members so far, until ``members`` is full. Members are marked dead as they join (the caller's
    ``_take_group`` marks them again); ``dist`` and ``running`` are scratch buffers."""
    d = Y.shape[0]
    members[0] = seed
    alive[seed] = False
    for j in range(d):
        running[j] = Y[j, seed]
    centroid = np.empty(d)
    for t in range(1, members.shape[0]):
        for j in range(d):
            centroid[j] = running[j] / t
        _distances_to(Y, m, centroid, dist)
        best = -1
        best_d = np.inf
        for i in range(m):
            if alive[i] and dist[i] < best_d:  # strict: the lowest position (row index) wins ties
                best_d = dist[i]
                best = i
        members[t] = best
        alive[best] = False
        for j in range(d):
            running[j] += Y[j, best]


@jit
def _grow(Y, alive, m, seed, dist, members, nc, work, running, best_d, best_i):
    """Fill ``members`` (capacity k) with ``seed`` and k-1 alive records: its nearest neighbours
    (``dist`` must hold the distances to ``seed``; it is left unchanged; scratch ``best_d`` and
    ``best_i`` of k-1 each) or, if ``nc``, NC growth (scratch ``work`` and ``running``)."""
    if nc:
        _grow_nc(Y, alive, m, seed, members, work, running)
    else:
        _nearest_into(dist, alive, m, seed, members, best_d, best_i)


@jit
def _take_group(members, alive, ids, Z, labels, total, group):
    """Label ``members`` (storage positions) as ``group``, mark them dead, update the running sum."""
    d = Z.shape[1]
    for t in range(members.shape[0]):
        p = members[t]
        alive[p] = False
        row = ids[p]
        labels[row] = group
        for j in range(d):
            total[j] -= Z[row, j]


@jit
def _compact_carrying(Y, ids, carry, alive, m):
    """Stable compaction of the alive records to the front of the storage, moving the per-record
    values ``carry`` along; returns the new count.

    Column by column (each a contiguous row of ``Y``): moving a record's ``d`` values at once wrote
    ``d`` rows ``n`` apart, and MDAV's compactions cost more than the dead records they drop."""
    keep = np.empty(m, dtype=np.int64)
    w = 0
    for i in range(m):
        if alive[i]:
            keep[w] = i
            w += 1
    for j in range(Y.shape[0]):
        row = Y[j]
        for t in range(w):
            row[t] = row[keep[t]]
    for t in range(w):
        ids[t] = ids[keep[t]]
        carry[t] = carry[keep[t]]
        alive[t] = True
    for i in range(w, m):
        alive[i] = False
    return w


@jit
def _compact(Y, ids, alive, m):
    """Stable compaction of the alive records to the front of the storage; returns the new count."""
    return _compact_carrying(Y, ids, ids, alive, m)  # ids carried twice: nothing else to move


@jit
def _group_around_farthest_from_centroid(Y, ids, alive, m, n_alive, Z, labels, total, dist,
                                         members, group, nc, work, running, best_d, best_i, c):
    """Centroid -> farthest record r -> group of r; returns r's storage position (``c``: scratch of d)."""
    for j in range(Y.shape[0]):
        c[j] = total[j] / n_alive
    return _group_around_farthest_from(Y, ids, alive, m, c, Z, labels, total, dist, members, group, nc, work,
                                       running, best_d, best_i)


@jit
def _group_around_farthest_from(Y, ids, alive, m, c, Z, labels, total, dist, members, group, nc, work, running,
                                best_d, best_i):
    """Farthest alive record r from the point ``c`` -> group of r (grown by NN or NC), labelled and
    removed; ``dist`` is left holding the distances to r, ``c`` r's values. Returns r's storage
    position."""
    _distances_to(Y, m, c, dist)
    r = _farthest(dist, alive, m)
    _copy_record(Y, r, c)
    _distances_to(Y, m, c, dist)
    _grow(Y, alive, m, r, dist, members, nc, work, running, best_d, best_i)
    _take_group(members, alive, ids, Z, labels, total, group)
    return r


@jit
def _copy_record(Y, r, out):
    """``out[:] = Y[:, r]`` (column-major ``Y``), without the allocation of a slice's copy."""
    for j in range(Y.shape[0]):
        out[j] = Y[j, r]


@jit
def mdav(Z, k):
    """Classic MDAV labels for ``Z`` (``(n, d)`` float64, C-contiguous, ``n >= k >= 2``).

    Returns int64 group labels ``0..g-1`` numbered in order of formation. Every group has between
    k and 2k-1 records.
    """
    return _mdav(Z, k, False)


@jit
def mdav_nc(Z, k):
    """MDAV-NC labels: as :func:`mdav`, but each group grows nearest to its running centroid (NC).

    References
    ----------
    Khomnotai, Lin, Peng and Santra (2018), Iterative group decomposition for refining
    microaggregation solutions, Symmetry 10(7) 262, section 3.1 and Table 1 (MDAV-NC).
    """
    return _mdav(Z, k, True)


@jit
def _mdav(Z, k, nc):
    n, d = Z.shape
    labels = np.full(n, -1, dtype=np.int64)
    if n < 2 * k:
        labels[:] = 0
        return labels
    Y = np.empty((d, n))
    for i in range(n):
        for j in range(d):
            Y[j, i] = Z[i, j]
    ids = np.arange(n)
    alive = np.ones(n, dtype=np.bool_)
    total = np.zeros(d)
    for i in range(n):
        for j in range(d):
            total[j] += Z[i, j]
    dist = np.empty(n)
    members = np.empty(k, dtype=np.int64)
    work = np.empty(n if nc else 0)
    running = np.empty(d)
    best_d, best_i = np.empty(k - 1), np.empty(k - 1, dtype=np.int64)
    point = np.empty(d)
    m = n
    n_alive = n
    group = 0
    while n_alive >= 3 * k:
        _group_around_farthest_from_centroid(Y, ids, alive, m, n_alive, Z, labels, total, dist,
                                             members, group, nc, work, running, best_d, best_i, point)
        n_alive -= k
        group += 1
        # dist still holds the distances to r: s is the remaining record farthest from r
        s = _farthest(dist, alive, m)
        _copy_record(Y, s, point)
        _distances_to(Y, m, point, dist)
        _grow(Y, alive, m, s, dist, members, nc, work, running, best_d, best_i)
        _take_group(members, alive, ids, Z, labels, total, group)
        n_alive -= k
        group += 1
        # dead records still cost a distance each per pass: compact when they exceed 1/16 (1/8 and
        # 1/32 were slower on blocks of 2,000 rows; BENCHMARKS.md, thirty-ninth session)
        if 16 * (m - n_alive) > m:
            m = _compact(Y, ids, alive, m)
    if n_alive >= 2 * k:
        _group_around_farthest_from_centroid(Y, ids, alive, m, n_alive, Z, labels, total, dist,
                                             members, group, nc, work, running, best_d, best_i, point)
        n_alive -= k
        group += 1
    for i in range(m):
        if alive[i]:
            labels[ids[i]] = group
    return labels
