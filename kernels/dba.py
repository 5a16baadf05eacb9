"""DBA: the density-based algorithm of Lin, Wen, Hsieh and Chang, phases DBA-1 and DBA-2.

As ``shared/papers/comparative-study-microaggregation.txt`` section 3.3 describes it:

DBA-1 (:func:`dba1`). The *k-neighbourhood* of a record x is x and its k-1 nearest unassigned
records; the *k-density* of x is the inverse of the neighbourhood's SSE (the sum of squared distances
of its k records to their centroid). Repeatedly, the unassigned record with the highest k-density
among the unassigned records forms a group with its k-neighbourhood, until fewer than k records are
unassigned; these join the group with the nearest centroid. Densities are those *among the
unassigned records*: a record's neighbourhood, and so its density, is recomputed when one of its
neighbours is assigned.

DBA-2 (:func:`dba2`). The groups are visited once each, in the reverse order of their formation
(the last, sparsest groups of DBA-1 first). A group G is tentatively decomposed: each record of G
goes to the other group with the nearest centroid (centroids as they stand before the move); if
that lowers the total SSE the decomposition is kept (IL_after < IL_before, the paper's criterion),
otherwise G is restored. Groups that end up with 2k or more records are then split by MDAV: the
paper's "MDAV-1 [29]" is not defined in the comparative study, and we use our classic MDAV
(:func:`.mdav.mdav`) on the group's rows; the one-group-per-iteration variant gives the same IL on
census and EIA to three decimals.

Readings the published figures decide (Tables 6-7 of the comparative study quote Lin et al.):

* the density is 1 / SSE of the neighbourhood, recomputed among the unassigned records. With it
  DBA-1 reproduces every published cell: census k = 3 / 4 / 5 / 10: 6.145 / 9.128 / 10.842 / 15.785,
  EIA: 1.090 / 0.843 / 1.896 / 4.266. (The Das-Borah paper's Table 1 prints 17.785 for census
  k = 10; the comparative study's 15.785 is what the algorithm gives.) The other readings tried,
  1 / (sum of distances to the k-1 neighbours), squared or not, or 1 / (distance to the (k-1)-th
  neighbour), with densities computed once on the whole file or among the unassigned records, give
  6.356 to 7.835 on census at k = 3.
* DBA-2 in reverse order of formation (as Lin et al. describe DBA: groups are formed in descending
  order of density, then fine-tuned in reverse order). Ours: census 5.582 / 7.591 / 9.046 / 13.521,
  EIA 0.421 / 0.560 / 0.818 / 2.081 (published: the same except EIA k = 4, 0.559). In formation
  order instead: census 5.596 / 7.544 / 9.123 / 13.553.

Every group has k..2k-1 records: DBA-1 groups have k records plus at most k-1 leftovers in total,
and DBA-2's oversized groups are split by MDAV into groups of k..2k-1.

Memory O(n k + n d): each record keeps the ids of its 4(k-1) nearest records of its last scan (no
distance matrix). Time O(n^2 d) for the initial neighbourhoods, plus O(k) per neighbourhood recomputed
(about k-1 per assigned record) from that list, or O(n d) when fewer than k-1 of the list are left,
plus O(n^2 d / k) for DBA-2.

Tie-breaking (deterministic, a function of the row order only): among records at equal distance the
lower row index is nearer (:func:`.select.keep_smallest`); among equal densities the lowest row index
is chosen; a record at equal distance from two centroids joins the group formed first; a
decomposition that leaves the SSE unchanged is not kept. Groups are numbered in order of formation,
and a group split by MDAV takes the place of the group it comes from.

References
----------
Lin, J.-L., Wen, T.-H., Hsieh, J.-C. and Chang, P.-C. (2010). Density-based microaggregation for
statistical disclosure control. Expert Systems with Applications 37(4), 3256-3263. As described in
Chettri, Paul and Dutta, section 3.3 (shared/papers/comparative-study-microaggregation.txt) and
Khomnotai, Lin, Peng and Santra (2018), section 3
(shared/papers/iterative-group-decomposition-refinement.txt).
"""

import numpy as np

from ._jit import jit
from .mdav import _distances_to, column_major, mdav
from .groups import attach_leftovers
from .select import keep_smallest
from .ties import copy_classes


@jit
def _nearest_alive(Y, x, skip, alive, dist, cand_d, cand):
    """Scan every alive record but ``skip`` (-1: none): the ``len(cand)`` nearest of record ``x`` into
    ``cand`` (sorted by distance, then row; ``cand_d`` as long), ``dist`` receiving the distances.
    Returns how many were kept.

    The distances are MDAV's (:func:`.mdav._distances_to`: four columns per pass, each a plain sum over
    the columns in order), and a candidate no nearer than the full list's last is turned away before
    the call that would refuse it (its own test), so the lists are those of one column per pass and
    one call per candidate, bit for bit."""
    d, n = Y.shape
    p = np.empty(d)
    for j in range(d):
        p[j] = Y[j, x]
    _distances_to(Y, n, p, dist)
    capacity = cand.shape[0]
    filled = 0
    worst = np.inf
    for i in range(n):
        if alive[i] and i != skip and (filled < capacity or not dist[i] >= worst):  # keep_smallest's own test
            filled = keep_smallest(cand_d, cand, filled, dist[i], i)
            if filled == capacity:
                worst = cand_d[capacity - 1]
    return filled


@jit
def _neighbourhood(Y, x, alive, cand, filled, neighbours):
    """The k-1 nearest alive records of ``x`` into ``neighbours``, taken in order from its candidate
    list ``cand[:filled]`` (which may hold ``x`` itself: the list of its class of copies, skipped);
    returns the neighbourhood's SSE, or -1 if fewer than k-1 candidates are alive and the list may
    have left nearer alive records out (it was full: rescan).

    The list holds the nearest alive records of ``x`` as they were when it was scanned, sorted by
    distance and then row; records only ever leave the alive set, so its alive entries, in order,
    are the nearest alive records now, in the order a new scan would give them, as long as k-1 of
    them remain (or the list held every other alive record): the same neighbours and the same SSE,
    bit for bit, as a scan of every record.
    """
    d = Y.shape[0]
    size = neighbours.shape[0] + 1
    got = 0
    for t in range(filled):
        if alive[cand[t]] and cand[t] != x:
            neighbours[got] = cand[t]
            got += 1
            if got == size - 1:
                break
    if got < size - 1:
        return -1.0
    total = 0.0
    for j in range(d):
        row = Y[j]
        c = row[x]
        for t in range(size - 1):
            c += row[neighbours[t]]
        c /= size
        s = row[x] - c
        total += s * s
        for t in range(size - 1):
            s = row[neighbours[t]] - c
            total += s * s
    return total


@jit
def _list_of(i, cls, first, size):
    """Where record ``i``'s candidate list is kept: its own row, or its class's first row if it has
    copies (one list for the class, which holds the copies themselves)."""
    c = cls[i]
    return first[c] if size[c] > 1 else i


@jit
def _rescan(Y, i, cls, first, size, alive, dist, cand_d, cand, filled, width):
    """Scan record ``i``'s candidate list again: every alive record but ``i`` (``width`` kept), or for
    a class of copies every alive record (``width + 1`` kept, ``i`` and its copies among them)."""
    at = _list_of(i, cls, first, size)
    if at == i and size[cls[i]] == 1:
        filled[at] = _nearest_alive(Y, i, i, alive, dist, cand_d[:width], cand[at, :width])
    else:
        filled[at] = _nearest_alive(Y, at, -1, alive, dist, cand_d, cand[at])


@jit
def dba1(Z, k, reserve=4):
    """DBA-1 labels for ``Z`` (``(n, d)`` float64, C-contiguous, ``n >= k >= 2``), in formation order.

    Each record keeps its ``reserve * (k - 1)`` nearest alive records from its last scan; when a
    neighbour is assigned, its neighbourhood is taken from that list, and the record is scanned
    again only once fewer than k-1 of the list are alive (:func:`_neighbourhood`). The groups are
    those of a scan per recomputed neighbourhood, bit for bit; on blocks of 2,500 rows of the
    synthetic extract, k = 5, DBA-1 takes 38 ms instead of 95 ms (BENCHMARKS.md).

    Identical records (:func:`.ties.copy_classes`; finite ones) share one list, one more entry long,
    scanned from their common point: a copy's nearest alive records are that list's alive entries but
    itself, the same records in the same order (distances to copies are equal, bit for bit, and ties
    go by row). Without it, each of a zero-inflated input's thousands of zero records scanned every
    record again every few groups (5.3 s for 5,000 rows with 90 % zeros).
    """
    n, d = Z.shape
    labels = np.full(n, -1, dtype=np.int64)
    if n < 2 * k:
        labels[:] = 0
        return labels
    Y = column_major(Z)
    cls, first, size = copy_classes(Z)
    if not np.isfinite(Z).all():  # a NaN distance does not order: every record keeps its own list
        size[:] = 1
    alive = np.ones(n, dtype=np.bool_)
    neighbours = np.empty((n, k - 1), dtype=np.int64)
    width = min(n - 1, reserve * (k - 1))
    cand = np.empty((n, width + 1), dtype=np.int64)
    filled = np.zeros(n, dtype=np.int64)
    spread = np.empty(n)  # SSE of the k-neighbourhood: the inverse of the k-density
    dist = np.empty(n)
    cand_d = np.empty(width + 1)
    for i in range(n):
        at = _list_of(i, cls, first, size)
        if at == i:  # a record of its own, or the first of its class
            _rescan(Y, i, cls, first, size, alive, dist, cand_d, cand, filled, width)
        spread[i] = _neighbourhood(Y, i, alive, cand[at], filled[at], neighbours[i])
    left = n
    group = 0
    while left >= k:
        x = -1
        x_s = np.inf
        for i in range(n):
            if alive[i] and spread[i] < x_s:  # strict: the lowest row index wins ties
                x_s = spread[i]
                x = i
        alive[x] = False
        labels[x] = group
        for t in range(k - 1):
            p = neighbours[x, t]
            alive[p] = False
            labels[p] = group
        left -= k
        group += 1
        if left < k:
            break
        for i in range(n):
            if alive[i]:
                for t in range(k - 1):
                    if not alive[neighbours[i, t]]:
                        at = _list_of(i, cls, first, size)
                        value = _neighbourhood(Y, i, alive, cand[at], filled[at], neighbours[i])
                        if value < 0.0:
                            _rescan(Y, i, cls, first, size, alive, dist, cand_d, cand, filled, width)
                            value = _neighbourhood(Y, i, alive, cand[at], filled[at], neighbours[i])
                        spread[i] = value
                        break
    if left > 0:
        attach_leftovers(Z, labels, group)
    return labels


@jit
def _group_sse(Z, rows, count):
    """SSE of the rows ``rows[:count]`` around their own mean."""
    d = Z.shape[1]
    total = 0.0
    for j in range(d):
        c = 0.0
        for t in range(count):
            c += Z[rows[t], j]
        c /= count
        for t in range(count):
            s = Z[rows[t], j] - c
            total += s * s
    return total


@jit
def _split_large(Z, labels, n_groups, k):
    """Split every group of 2k or more rows by MDAV; relabel ``0..g'-1`` keeping the group order."""
    n = Z.shape[0]
    counts = np.zeros(n_groups, dtype=np.int64)
    for i in range(n):
        counts[labels[i]] += 1
    start = np.zeros(n_groups + 1, dtype=np.int64)
    for g in range(n_groups):
        start[g + 1] = start[g] + counts[g]
    rows = np.empty(n, dtype=np.int64)
    fill = start[:-1].copy()
    for i in range(n):  # rows grouped by label, ascending within a group
        g = labels[i]
        rows[fill[g]] = i
        fill[g] += 1
    out = np.empty(n, dtype=np.int64)
    nxt = 0
    for g in range(n_groups):
        if counts[g] == 0:
            continue
        members = rows[start[g]:start[g + 1]]
        if counts[g] < 2 * k:
            for t in range(members.shape[0]):
                out[members[t]] = nxt
            nxt += 1
        else:
            sub = mdav(Z[members], k)
            top = 0
            for t in range(members.shape[0]):
                out[members[t]] = nxt + sub[t]
                if sub[t] > top:
                    top = sub[t]
            nxt += top + 1
    return out


@jit
def dba2(Z, labels, k):
    """DBA-2 on a k-partition ``labels`` (``0..g-1``, in formation order) of ``Z``; new labels.

    The input labels are not modified. Every output group has k..2k-1 records.
    """
    n, d = Z.shape
    labels = labels.copy()
    n_groups = 0
    for i in range(n):
        if labels[i] + 1 > n_groups:
            n_groups = labels[i] + 1
    sums = np.zeros((n_groups, d))
    counts = np.zeros(n_groups, dtype=np.int64)
    for i in range(n):
        g = labels[i]
        counts[g] += 1
        for j in range(d):
            sums[g, j] += Z[i, j]
    cent = np.empty((n_groups, d))  # sums / counts, refreshed when a group receives records
    for g in range(n_groups):
        if counts[g] > 0:
            for j in range(d):
                cent[g, j] = sums[g, j] / counts[g]
    members = np.empty(n, dtype=np.int64)
    target = np.empty(n, dtype=np.int64)
    added = np.zeros((n_groups, d))  # per receiving group: the sum of the records it would receive
    n_added = np.zeros(n_groups, dtype=np.int64)
    touched = np.empty(n_groups, dtype=np.int64)
    received = np.empty(n, dtype=np.int64)
    for g in range(n_groups - 1, -1, -1):
        if counts[g] == 0:
            continue
        size = 0
        for i in range(n):
            if labels[i] == g:
                members[size] = i
                size += 1
        n_touched = 0
        for t in range(size):
            i = members[t]
            best = -1
            best_d = np.inf
            for h in range(n_groups):
                if h == g or counts[h] == 0:
                    continue
                s = 0.0
                for j in range(d):
                    u = Z[i, j] - cent[h, j]
                    s += u * u
                if s < best_d:
                    best_d = s
                    best = h
            target[t] = best
            if n_added[best] == 0:
                touched[n_touched] = best
                n_touched += 1
            n_added[best] += 1
            for j in range(d):
                added[best, j] += Z[i, j]
        if n_touched == 0:  # g is the only group
            break
        # SSE change: -SSE(G) + sum over receiving H of SSE(A_H) + |H||A_H| / (|H| + |A_H|) ||c_H - c_A||^2
        delta = -_group_sse(Z, members, size)
        for a in range(n_touched):
            h = touched[a]
            count = 0
            for t in range(size):
                if target[t] == h:
                    received[count] = members[t]
                    count += 1
            delta += _group_sse(Z, received, count)
            s = 0.0
            for j in range(d):
                u = sums[h, j] / counts[h] - added[h, j] / count
                s += u * u
            delta += counts[h] * count / (counts[h] + count) * s
        if delta < 0.0:
            for t in range(size):
                i = members[t]
                h = target[t]
                labels[i] = h
                counts[h] += 1
                for j in range(d):
                    sums[h, j] += Z[i, j]
            counts[g] = 0
            for j in range(d):
                sums[g, j] = 0.0
            for a in range(n_touched):
                h = touched[a]
                for j in range(d):
                    cent[h, j] = sums[h, j] / counts[h]
        for a in range(n_touched):
            h = touched[a]
            n_added[h] = 0
            for j in range(d):
                added[h, j] = 0.0
    return _split_large(Z, labels, n_groups, k)


@jit
def dba(Z, k):
    """DBA labels for ``Z`` (``(n, d)`` float64, C-contiguous, ``n >= k >= 2``): DBA-1, then DBA-2.

    Returns int64 labels ``0..g-1``; every group has k..2k-1 records.
    """
    return dba2(Z, dba1(Z, k), k)
