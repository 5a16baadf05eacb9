"""Local-search refinement of a microaggregation partition (never raises the SSE, keeps k..2k-1).

Starting from any partition with groups of at least k rows (none grows beyond ``max_size``), repeat sweeps over the groups in
a fixed order; for each group A and each of its nearest groups B (by centroid), apply the first
improving move found among:

* **move** one record from A to B (``|A| > k``, ``|B| < max_size``);
* **swap** one record of A with one record of B (the best swap of the pair);
* **dissolve** A: every member joins its nearest neighbouring group that still has room, when the
  total SSE drops (this frees records from exact-k configurations, like the Decompose step of the
  group-decomposition refinements).

Every change is evaluated exactly from group sums and sizes (``SSE = sum ||x||^2 - ||S||^2 / m``):
removing x from a group of m records with centroid c lowers its SSE by ``m/(m-1) ||x - c||^2``;
adding x raises it by ``m/(m+1) ||x - c||^2``; swapping x in A for y changes A's SSE by
``||y - c_A||^2 - ||x - c_A||^2 - ||x - y||^2 / m_A``. A move is applied only if it lowers the SSE by
more than a relative tolerance, so sweeps terminate; they stop when a sweep changes nothing or after
``max_sweeps``. Deterministic: groups and records are visited in index order.

Each group's nearest groups (by centroid) are found by scanning all pairs before the first sweep;
before each later one, only the lists touched by the groups that changed are brought up to date
(:func:`_update_lists`), with the same result: in the later sweeps of a search to convergence few
groups change, and the scans cost most of a sweep.

References
----------
Solanas, Martinez-Balleste, Domingo-Ferrer and Mateo-Sanz: the TFRP-2 and Decompose/Shrink
refinements (``shared/papers/iterative-group-decomposition-refinement.txt`` section 3); the record
moves and swaps are the classic exchange neighbourhood of k-means-style local search.
"""

import numpy as np

from ._jit import inline_jit, jit
from .mdav import _distances_to
from .select import keep_smallest, offer_in_order


@inline_jit
def _sq(Z, row, c):
    """``||Z[row] - c||^2``, the terms added in column order.

    Inlined, like the sweep's other small helpers (:func:`_sq_rows`, :func:`_move`, :func:`_idle`, ...):
    called, they cost one sweep 5 % more on real blocks (1.62 ms instead of 1.54 a block of 2,000 rows).
    Four such sums interleaved by hand, so that each addition need not wait for the previous one, were
    slower (the pairs' distances so: one sweep 1.72 ms instead of 1.63): the processor already overlaps
    consecutive sums, and the interleaving's bookkeeping costs.
    """
    d = Z.shape[1]
    s = 0.0
    for j in range(d):
        t = Z[row, j] - c[j]
        s += t * t
    return s


@inline_jit
def _sq_rows(Z, a, b):
    """``||Z[a] - Z[b]||^2``, the terms added in column order (inlined: see :func:`_sq`)."""
    d = Z.shape[1]
    s = 0.0
    for j in range(d):
        t = Z[a, j] - Z[b, j]
        s += t * t
    return s


@inline_jit
def _centroid(sums, size, g, out):
    for j in range(sums.shape[1]):
        out[j] = sums[g, j] / size[g]


LIST_SLACK = 4
"""Entries kept beyond the ``n_neighbors`` a sweep uses in each group's neighbour list, so that
:func:`_update_lists` can drop the groups that moved away and still know the nearest."""


UPDATE_SHARE = 3
"""With more than one group in ``UPDATE_SHARE`` changed, :func:`_update_lists` scans every list again
(3 rather than 4 since the scan and the updates got faster: a search to convergence on real blocks
1 % faster, 5.92 ms instead of 6.00 a block; 2: 6.07)."""


@jit
def _alive_centroids(sums, size, alive):
    """``(ids, cent)``: the alive groups in increasing order and their centroids stored column by column
    (``cent[:, i]`` is group ``ids[i]``'s), so one group's distances to all are whole vectors."""
    n_groups, d = sums.shape
    ids = np.empty(n_groups, dtype=np.int64)
    m = 0
    for g in range(n_groups):
        if alive[g]:
            ids[m] = g
            m += 1
    cent = np.empty((d, m))
    for i in range(m):
        g = ids[i]
        for j in range(d):
            cent[j, i] = sums[g, j] / size[g]
    return ids[:m], cent


@jit
def _row_distances(cent, i, dist, c):
    """``dist[b]``: the squared distance of the centroids ``cent[:, i]`` and ``cent[:, b]`` (inf for b = i);
    the same bits either way round, and as a sum over the columns in order."""
    d, m = cent.shape
    for j in range(d):
        c[j] = cent[j, i]
    _distances_to(cent, m, c, dist)
    dist[i] = np.inf


BOUND_LANES = 16
"""Lanes of :func:`_select_row`'s bound (it serves capacities up to this many): the fastest of 8, 12, 16,
24 and 32 at capacities 6 and 12. Its pass over the distances is written out for sixteen lanes."""


INF_BITS = np.uint64(0x7FF0000000000000)
"""The bits of +inf read as uint64; from +0 to +inf a distance's bits order as its value, and a NaN's are
above (either sign)."""


@jit
def _select_row(dist, ids, keys, near, g, low, cand):
    """Row g of ``keys`` / ``near``: the nearest of the groups ``ids`` at distances ``dist``, sorted by
    distance (ties to the lower id), up to the rows' capacity; returns how many (``low``: scratch of
    ``BOUND_LANES``, ``cand``: of the number of groups).

    Offered in id order, which is unrelated to distance, the candidates entered the sorted buffer 41
    times a row (390 groups, capacity 6, real blocks), each time with mispredicted branches. So the
    distances first give a bound: read as rows of ``BOUND_LANES``, each column's minimum, then the
    capacity-th smallest of those minima, the distances of as many distinct groups. A candidate farther
    than the bound cannot be kept: only the others are offered (7.5 a row, 7.2 insertions), still in id
    order, so the buffer is the full scan's, bit for bit, ties included. A bound from a sample (every
    8th candidate's capacity nearest) was slower than none: the sample costs insertions of its own. With
    fewer groups than lanes or a capacity above them, every candidate is offered.

    The column minima are sixteen scalars, which the compiler keeps in registers and vectorizes (0.016
    ms for all rows of a block; minima in an array: 0.070, their bits in an array: 0.100); the
    capacity-th smallest is counted on their bits (0.03 ms less than with float comparisons); the
    candidates within the bound are first listed without a branch (a mispredicted test per candidate
    cost more than the list). All rows of a block of 2,000 rows take 0.23 ms instead of 0.33 (capacity
    12: 0.35 instead of 0.46). Testing sixteen distances at once and scanning only the rows of sixteen
    with a candidate was slower than the list.
    """
    capacity = keys.shape[1]
    m = ids.shape[0]
    row_keys = keys[g]
    row_near = near[g]
    filled = 0
    if capacity > BOUND_LANES:  # no bound: every candidate is offered
        worst = np.inf
        for b in range(m):
            if dist[b] < worst:
                filled = keep_smallest(row_keys, row_near, filled, dist[b], ids[b])
                if filled == capacity:
                    worst = row_keys[capacity - 1]
        return filled
    # each lane's minimum (a NaN, never kept, stays out), in sixteen scalars: the compiler keeps them in
    # registers and vectorizes the pass (an array of minima: 4.5x slower)
    l0 = l1 = l2 = l3 = l4 = l5 = l6 = l7 = l8 = l9 = l10 = l11 = l12 = l13 = l14 = l15 = np.inf
    for t in range(m // BOUND_LANES):
        o = BOUND_LANES * t
        x = dist[o]
        l0 = x if x < l0 else l0
        x = dist[o + 1]
        l1 = x if x < l1 else l1
        x = dist[o + 2]
        l2 = x if x < l2 else l2
        x = dist[o + 3]
        l3 = x if x < l3 else l3
        x = dist[o + 4]
        l4 = x if x < l4 else l4
        x = dist[o + 5]
        l5 = x if x < l5 else l5
        x = dist[o + 6]
        l6 = x if x < l6 else l6
        x = dist[o + 7]
        l7 = x if x < l7 else l7
        x = dist[o + 8]
        l8 = x if x < l8 else l8
        x = dist[o + 9]
        l9 = x if x < l9 else l9
        x = dist[o + 10]
        l10 = x if x < l10 else l10
        x = dist[o + 11]
        l11 = x if x < l11 else l11
        x = dist[o + 12]
        l12 = x if x < l12 else l12
        x = dist[o + 13]
        l13 = x if x < l13 else l13
        x = dist[o + 14]
        l14 = x if x < l14 else l14
        x = dist[o + 15]
        l15 = x if x < l15 else l15
    low[0], low[1], low[2], low[3], low[4], low[5], low[6], low[7] = l0, l1, l2, l3, l4, l5, l6, l7
    low[8], low[9], low[10], low[11] = l8, l9, l10, l11
    low[12], low[13], low[14], low[15] = l12, l13, l14, l15
    low_bits = low.view(np.uint64)
    at = -1
    bound = INF_BITS
    for j in range(BOUND_LANES):  # the smallest minimum with capacity minima at most as large
        below = 0
        for u in range(BOUND_LANES):
            below += low_bits[u] <= low_bits[j]
        if below >= capacity and low_bits[j] < bound:
            bound = low_bits[j]
            at = j
    worst = np.nextafter(low[at] if at >= 0 else np.inf, np.inf)  # candidates at the bound are offered
    n_cand = 0
    for b in range(m):  # the candidates within, in id order (branch-free)
        cand[n_cand] = b
        n_cand += dist[b] < worst
    for u in range(n_cand):
        b = cand[u]
        if dist[b] < worst:  # then the buffer's largest key once full
            filled = keep_smallest(row_keys, row_near, filled, dist[b], ids[b])
            if filled == capacity:
                worst = row_keys[capacity - 1]
    return filled


@jit
def _neighbour_lists(sums, size, alive, capacity):
    """Every alive group's ``capacity`` nearest groups: ``(keys, near, filled, whole)``, ``whole[g]``
    when g's list holds every other alive group."""
    n_groups = sums.shape[0]
    lists = (np.empty((n_groups, capacity)), np.full((n_groups, capacity), -1, dtype=np.int64),
             np.zeros(n_groups, dtype=np.int64), np.zeros(n_groups, dtype=np.bool_))
    _scan_all(lists, sums, size, alive)
    return lists


SCAN_TILE = 16
"""Rows of :func:`_scan_all`'s tiles (8 and 16 alike, 32 slower)."""

SCAN_MATRIX = 1024
"""Up to this many alive groups, :func:`_scan_all` computes each pair's distance once (in a matrix of at
most 8 MB); beyond, each row's distances are computed on their own."""


@jit
def _distances_from(cent, i, lo, out):
    """``out[b]``: the squared distance of the centroids ``cent[:, i]`` and ``cent[:, b]`` for b from
    ``lo``, bit for bit as :func:`_row_distances`: the passes of
    :func:`microagg.kernels.mdav._distances_to`, on views that start at ``lo`` (indexed from ``lo``,
    the loops were not vectorized: 3.7x slower; ``_distances_to`` on the 2-d view ``cent[:, lo:]``:
    2.8x slower)."""
    d, m = cent.shape
    n = m - lo
    dist = out[lo:]
    if d == 0:
        dist[:] = 0.0
        return
    a = cent[0, i]
    ra = cent[0, lo:]
    for b in range(n):
        u = ra[b] - a
        dist[b] = u * u
    j = 1
    while j + 3 < d:
        a, e, f, h = cent[j, i], cent[j + 1, i], cent[j + 2, i], cent[j + 3, i]
        ra, re, rf, rh = cent[j, lo:], cent[j + 1, lo:], cent[j + 2, lo:], cent[j + 3, lo:]
        for b in range(n):
            u = ra[b] - a
            v = re[b] - e
            w = rf[b] - f
            x = rh[b] - h
            dist[b] = (((dist[b] + u * u) + v * v) + w * w) + x * x
        j += 4
    while j < d:
        a = cent[j, i]
        ra = cent[j, lo:]
        for b in range(n):
            u = ra[b] - a
            dist[b] += u * u
        j += 1


@jit
def _scan_all(lists, sums, size, alive):
    """Every alive group's list of :func:`_neighbour_lists`, from all its distances.

    A pair's distance has the same bits either way round, so it is computed once: by tiles of
    ``SCAN_TILE`` rows, each row's distances to the groups from the tile's first on, the ones before
    copied from the earlier rows (by squares of ``SCAN_TILE``). The lists of a block of 2,000 rows
    take 0.43 ms instead of 0.47 (capacity 10: 0.51 instead of 0.56).
    """
    keys, near, filled, whole = lists
    ids, cent = _alive_centroids(sums, size, alive)
    m = ids.shape[0]
    low = np.empty(BOUND_LANES)
    cand = np.empty(m, dtype=np.int64)
    filled[:] = 0
    if m <= SCAN_MATRIX:
        D = np.empty((m, m))
        for i0 in range(0, m, SCAN_TILE):
            i1 = min(i0 + SCAN_TILE, m)
            for i in range(i0, i1):
                _distances_from(cent, i, i0, D[i])
            for b0 in range(0, i0, SCAN_TILE):  # the columns before the tile: earlier rows, transposed
                for i in range(i0, i1):
                    row = D[i, b0:b0 + SCAN_TILE]
                    for t in range(SCAN_TILE):
                        row[t] = D[b0 + t, i]
            for i in range(i0, i1):
                D[i, i] = np.inf
                g = ids[i]
                filled[g] = _select_row(D[i], ids, keys, near, g, low, cand)
                whole[g] = filled[g] == m - 1
        return
    dist = np.empty(m)
    c = np.empty(cent.shape[0])
    for i in range(m):
        g = ids[i]
        _row_distances(cent, i, dist, c)
        filled[g] = _select_row(dist, ids, keys, near, g, low, cand)
        whole[g] = filled[g] == m - 1


@jit
def _first_neighbours(lists, alive, n_neighbors):
    """The first ``n_neighbors`` of each alive group's list (-1 beyond its length, and for the dead)."""
    _, near, filled, _ = lists
    nb = np.full((near.shape[0], n_neighbors), -1, dtype=np.int64)
    for g in range(near.shape[0]):
        if alive[g]:
            for u in range(min(n_neighbors, filled[g])):
                nb[g, u] = near[g, u]
    return nb


@jit
def _update_lists(lists, sums, size, alive, version, seen, n_neighbors):
    """Bring the lists of :func:`_neighbour_lists` up to date after groups changed; each list's first
    ``n_neighbors`` are then those a full scan gives, bit for bit.

    ``seen`` holds each group's ``version`` when the lists were made (updated here). When many groups
    changed, every list is scanned again. Otherwise each changed group's list is (its distances to
    all), and those distances are offered to the other groups' lists. An unchanged group's list is an
    exact prefix of its neighbours by (distance, id): its unchanged entries keep their distances, and
    every unchanged group missing from it is farther than its last entry. Its changed and dead
    entries are dropped, the changed groups come back at their new distances, and the entries up to
    the old last one are again an exact prefix. One left with fewer than ``n_neighbors`` (while more
    groups are alive) is scanned in full.

    A changed group beyond the old last entry is not offered to a list that does not hold every group:
    it would be dropped with the entries past the prefix, and it can displace only entries beyond
    itself. With the lists short of their dropped entries, most changed groups used to be offered
    (62 offers a changed group on real blocks, now 9): each changed group's update takes 2.5 us
    instead of 4.5.
    """
    keys, near, filled, whole = lists
    capacity = keys.shape[1]
    ids, cent = _alive_centroids(sums, size, alive)
    m = ids.shape[0]
    stale = np.empty(sums.shape[0], dtype=np.bool_)  # changed or dead since the lists were made
    for g in range(sums.shape[0]):
        stale[g] = version[g] != seen[g] or not alive[g]
        seen[g] = version[g]
        if not alive[g]:
            filled[g] = 0
    moved = np.empty(m, dtype=np.bool_)
    n_moved = 0
    for i in range(m):
        moved[i] = stale[ids[i]]
        n_moved += moved[i]
    if n_moved * UPDATE_SHARE > m:
        _scan_all(lists, sums, size, alive)
        return
    last_key = np.empty(m)
    last_id = np.empty(m, dtype=np.int64)
    for i in range(m):  # the unchanged groups' lists without their changed and dead entries
        g = ids[i]
        if moved[i]:
            continue
        n_old = filled[g]
        last_key[i] = keys[g, n_old - 1] if n_old else np.inf
        last_id[i] = near[g, n_old - 1] if n_old else -1
        kept = 0
        for u in range(n_old):
            h = near[g, u]
            if not stale[h]:
                keys[g, kept] = keys[g, u]
                near[g, kept] = h
                kept += 1
        filled[g] = kept
    dist = np.empty(m)
    c = np.empty(cent.shape[0])
    low = np.empty(BOUND_LANES)
    cand = np.empty(m, dtype=np.int64)
    for o in range(m):
        if not moved[o]:
            continue
        h = ids[o]
        _row_distances(cent, o, dist, c)
        filled[h] = _select_row(dist, ids, keys, near, h, low, cand)
        whole[h] = filled[h] == m - 1
        for i in range(m):
            g = ids[i]
            if moved[i]:
                continue
            if not whole[g] and (dist[i] > last_key[i] or (dist[i] == last_key[i] and h > last_id[i])):
                continue  # beyond the exact prefix: dropped below, and it displaces nothing within
            if filled[g] < capacity or dist[i] <= keys[g, capacity - 1]:
                filled[g] = offer_in_order(keys[g], near[g], filled[g], dist[i], h)
    for i in range(m):
        g = ids[i]
        if moved[i]:
            continue
        kept = filled[g]
        if not whole[g]:
            valid = 0
            while valid < kept and (keys[g, valid] < last_key[i]
                                    or (keys[g, valid] == last_key[i] and near[g, valid] <= last_id[i])):
                valid += 1
            kept = valid
        filled[g] = kept
        whole[g] = whole[g] or kept == m - 1
        if not whole[g] and kept < n_neighbors:
            _row_distances(cent, i, dist, c)
            filled[g] = _select_row(dist, ids, keys, near, g, low, cand)
            whole[g] = filled[g] == m - 1


@inline_jit
def _set_centroids(sums, size, cent, a, b):
    """Refresh the cached centroids of groups a and b after their sums changed (an empty group keeps its last)."""
    for g in (a, b):
        if size[g] > 0:
            _centroid(sums, size, g, cent[g])


@inline_jit
def _move(Z, members, size, sums, cent, labels, a, slot, b, version):
    """Move the record at ``members[a, slot]`` from group a to group b; their cached centroids follow."""
    version[a] += 1
    version[b] += 1
    row = members[a, slot]
    last = size[a] - 1
    members[a, slot] = members[a, last]
    size[a] = last
    members[b, size[b]] = row
    size[b] += 1
    labels[row] = b
    for j in range(Z.shape[1]):
        sums[a, j] -= Z[row, j]
        sums[b, j] += Z[row, j]
    _set_centroids(sums, size, cent, a, b)


@inline_jit
def _idle(idle, idle_version, version, a, b):
    """Whether the pair (a, b) was evaluated, in either order, without an improving move or swap,
    and neither group has changed since: the same evaluation would find nothing again."""
    for g, h in ((a, b), (b, a)):
        for u in range(idle.shape[1]):
            if idle[g, u] == h and idle_version[g, u, 0] == version[g] and idle_version[g, u, 1] == version[h]:
                return True
    return False


@inline_jit
def _remember_idle(idle, idle_version, idle_next, version, a, b):
    """Record that the pair (a, b) offers no improving move or swap in the groups' current versions
    (in the slot of an older record of the pair, else in a's next slot, round robin)."""
    slots = idle.shape[1]
    at = -1
    for u in range(slots):
        if idle[a, u] == b:
            at = u
            break
    if at < 0:
        at = idle_next[a] % slots
        idle_next[a] += 1
    idle[a, at] = b
    idle_version[a, at, 0] = version[a]
    idle_version[a, at, 1] = version[b]


@inline_jit
def _own_distances(Z, members, size, g, own, own_root, ca):
    """``own[row] = ||x_row - c_g||^2`` for the members of group g (``ca``: its centroid), and
    ``own_root[row]`` its root."""
    for t in range(size[g]):
        row = members[g, t]
        own[row] = _sq(Z, row, ca)
        own_root[row] = np.sqrt(own[row])


@inline_jit
def _dissolve_idle(seen, near, near_version, version, nb, a):
    """Whether dissolving a was evaluated without effect with the same neighbours, and neither a nor any
    of them has changed since: the same evaluation would find nothing again."""
    if seen[a] != version[a]:
        return False
    for u in range(nb.shape[1]):
        b = nb[a, u]
        if near[a, u] != b or (b >= 0 and near_version[a, u] != version[b]):
            return False
    return True


@inline_jit
def _remember_dissolve_idle(seen, near, near_version, version, nb, a):
    """Record that dissolving a offers nothing with its current neighbours in their current versions."""
    seen[a] = version[a]
    for u in range(nb.shape[1]):
        b = nb[a, u]
        near[a, u] = b
        if b >= 0:
            near_version[a, u] = version[b]


@inline_jit
def _dissolve_cost(Z, members, size, cent, nb, a, target, near_buf, extra, spread, spread_sq):
    """The exact SSE that dissolving a adds to its neighbours: member t joins neighbour ``target[t]``
    (``extra[u]`` members join neighbour u; ``near_buf[u, t] = ||x_t - c_u||^2``). s members of sum-offset
    ``D = sum (x - c)`` joining a group of m records of centroid c add ``sum ||x - c||^2 - ||D||^2 / (m + s)``;
    the sweep's running sum of ``m / (m + 1) ||x - c||^2`` is this for s = 1 only, and could accept a
    dissolution that raised the SSE when two or more members joined one group."""
    d = Z.shape[1]
    for u in range(extra.shape[0]):
        spread_sq[u] = 0.0
        for j in range(d):
            spread[u, j] = 0.0
    for t in range(size[a]):
        u = target[t]
        b = nb[a, u]
        row = members[a, t]
        spread_sq[u] += near_buf[u, t]
        for j in range(d):
            spread[u, j] += Z[row, j] - cent[b, j]
    cost = 0.0
    for u in range(extra.shape[0]):
        if extra[u] > 0:
            norm = 0.0
            for j in range(d):
                norm += spread[u, j] * spread[u, j]
            cost += spread_sq[u] - norm / (size[nb[a, u]] + extra[u])
    return cost


TOL = 1e-12
"""The default relative tolerance of :func:`refine`."""


@jit
def refine(Z, labels, k, max_size, n_neighbors=8, max_sweeps=20, tol=TOL, rescan=False):
    """Improve ``labels`` in place by local search; returns the number of applied changes.

    Parameters
    ----------
    Z : (n, d) float64 C-contiguous (standardized)
    labels : (n,) int64, groups ``0..g-1`` of at least k rows; relabelled compactly on return
    k, max_size : group size bounds: no group grows beyond ``max_size`` (``>= 2k - 1`` keeps every
        move available); a group given larger may only shrink
    n_neighbors : candidate groups per group (nearest centroids)
    max_sweeps : upper bound on sweeps over all groups
    tol : a change must lower the SSE by more than ``tol`` times the mean squared norm of a row
    rescan : scan every pair of groups for their neighbour lists at each sweep, instead of bringing
        the lists up to date (:func:`_update_lists`): the same groups, slower (a check and a baseline)

    Notes
    -----
    What a sweep skips, with the same changes bit for bit (numbers: real blocks of 2,000 rows):

    * Dissolving a: its members' distances to its neighbours' centroids are computed first, into a
      buffer, and the cost is summed from it as before, stopping once it reaches the gain (the terms
      are not negative: the sum can only grow; 28 % of the members' choices skipped). The buffer is then
      the ``||x - c_b||^2`` of a's pair evaluations while neither group has changed (1,283 of 2,192
      evaluations in one sweep). An evaluation without effect is remembered with the versions of a
      and of its neighbours, like the idle pairs, and not repeated while they are unchanged: in a
      search to convergence the dissolutions take 0.93 ms instead of 1.59.
    * A swap's ``||x - y||`` is bounded through either centroid, the smaller of ``||x - c_a|| +
      ||y - c_a||`` and ``||x - c_b|| + ||y - c_b||``: 5,600 distances computed in a sweep instead of
      10,400, and the roots of the ``||x - c||^2`` are kept with them: the swap search 0.31 ms instead
      of 0.41. A bound for a whole row of pairs skipped 29 % of the rows but was slower (its branch
      mispredicted).
    """
    return _refine(Z, labels, k, max_size, n_neighbors, max_sweeps, tol, rescan)[0]


@jit
def refine_sse(Z, labels, k, max_size, n_neighbors, max_sweeps, tol):
    """:func:`refine` (bringing its neighbour lists up to date) returning ``(changes, drop)``: ``drop`` is
    how much the SSE fell, the sum of the changes' own exact deltas (each move's, swap's and dissolution's,
    as the search computes them to choose it), so no SSE pass before and after is needed to know it (two
    of them cost the 10M job's block sweeps 1.1 thread-s)."""
    return _refine(Z, labels, k, max_size, n_neighbors, max_sweeps, tol, False)


@jit
def _refine(Z, labels, k, max_size, n_neighbors, max_sweeps, tol, rescan):
    """:func:`refine`, returning ``(changes, drop)`` (:func:`refine_sse`)."""
    n, d = Z.shape
    n_groups = 0
    for i in range(n):
        if labels[i] + 1 > n_groups:
            n_groups = labels[i] + 1
    if n_groups < 2:
        return 0, 0.0
    n_neighbors = min(n_neighbors, n_groups - 1)
    size = np.zeros(n_groups, dtype=np.int64)
    for i in range(n):
        size[labels[i]] += 1
    # a group already above max_size (from a method without that bound) may stay as large, never grow
    capacity = max(max_size, size.max())
    size[:] = 0
    members = np.empty((n_groups, capacity), dtype=np.int64)
    sums = np.zeros((n_groups, d))
    scale = 0.0
    for i in range(n):
        g = labels[i]
        members[g, size[g]] = i
        size[g] += 1
        for j in range(d):
            sums[g, j] += Z[i, j]
            scale += Z[i, j] * Z[i, j]
    eps = tol * max(scale / n, 1e-300)
    alive = np.ones(n_groups, dtype=np.bool_)
    cent = np.empty((n_groups, d))           # each group's centroid, refreshed when its sums change
    for g in range(n_groups):
        _centroid(sums, size, g, cent[g])
    extra = np.zeros(n_neighbors, dtype=np.int64)
    spread = np.empty((n_neighbors, d))      # a dissolution's exact cost (_dissolve_cost)
    spread_sq = np.empty(n_neighbors)
    target = np.empty(capacity, dtype=np.int64)
    xb_buf = np.empty(capacity)
    ya_buf = np.empty(capacity)
    yr_buf = np.empty(capacity)
    yo_buf = np.empty(capacity)
    yg_buf = np.empty(capacity)
    own = np.empty(n)                        # squared distance of each row to its group's centroid
    own_root = np.empty(n)                   # and its square root (the swaps' bounds)
    fresh = np.zeros(n_groups, dtype=np.bool_)  # own[] is current for the group's members
    # Pairs known to offer nothing: ``version[g]`` counts the changes of group g; ``idle[a, u] = b``
    # with ``idle_version[a, u]`` = the versions of a and b when the pair was last evaluated
    # without an improving move or swap (``idle_next[a]``: a's next slot to reuse). Such
    # a pair is skipped, within a sweep (from b's side, after a's) and in later sweeps: every
    # quantity of its evaluation (members, sizes, sums, centroids) is what it was then.
    version = np.zeros(n_groups, dtype=np.int64)
    idle = np.full((n_groups, n_neighbors), -1, dtype=np.int64)
    idle_version = np.zeros((n_groups, n_neighbors, 2), dtype=np.int64)
    idle_next = np.zeros(n_groups, dtype=np.int64)
    # Dissolutions known to offer nothing: ``dissolve_seen[a]`` = a's version when dissolving it was
    # last evaluated without effect, with its neighbours then and their versions (-1: never).
    dissolve_seen = np.full(n_groups, -1, dtype=np.int64)
    dissolve_near = np.full((n_groups, n_neighbors), -1, dtype=np.int64)
    dissolve_version = np.zeros((n_groups, n_neighbors), dtype=np.int64)
    # ``near_buf[u, t]``: the distance of a's t-th member to the centroid of its u-th neighbour, with
    # the versions of a (``near_va``) and of the neighbour (``near_version[u]``) it was computed at
    near_buf = np.empty((n_neighbors, capacity))
    near_version = np.zeros(n_neighbors, dtype=np.int64)
    near_va = -1
    changes = 0
    drop = 0.0
    # the neighbour lists, kept a little longer than needed when they are to be brought up to date
    lists = _neighbour_lists(sums, size, alive, n_neighbors if max_sweeps == 1 else n_neighbors + LIST_SLACK)
    seen = version.copy()
    for sweep in range(max_sweeps):
        if sweep and rescan:
            _scan_all(lists, sums, size, alive)
        elif sweep:
            _update_lists(lists, sums, size, alive, version, seen, n_neighbors)
        nb = _first_neighbours(lists, alive, n_neighbors)
        changed = 0
        for a in range(n_groups):
            if not alive[a]:
                continue
            # --- dissolve a into its neighbours (first: it changes the most) ---
            near_filled = False
            if not _dissolve_idle(dissolve_seen, dissolve_near, dissolve_version, version, nb, a):
                if not fresh[a]:
                    _own_distances(Z, members, size, a, own, own_root, cent[a])
                    fresh[a] = True
                gain = 0.0
                for t in range(size[a]):
                    gain += own[members[a, t]]
                # cost of adding each member to its nearest neighbour with room (sizes as they fill)
                room = 0
                for t in range(n_neighbors):
                    b = nb[a, t]
                    if b >= 0 and alive[b]:
                        room += max(0, max_size - size[b])
                if room >= size[a]:
                    for u in range(n_neighbors):
                        b = nb[a, u]
                        if b >= 0 and alive[b]:
                            near_version[u] = version[b]
                            for t in range(size[a]):
                                near_buf[u, t] = _sq(Z, members[a, t], cent[b])
                    near_filled = True
                    near_va = version[a]
                    cost = 0.0
                    for u in range(n_neighbors):
                        extra[u] = 0
                    for t in range(size[a]):
                        best_c = np.inf
                        best_b = -1
                        for u in range(n_neighbors):
                            b = nb[a, u]
                            if b < 0 or not alive[b] or size[b] + extra[u] >= max_size:
                                continue
                            m = size[b]
                            c = m / (m + 1.0) * near_buf[u, t]
                            if c < best_c:
                                best_c = c
                                best_b = u
                        if best_b < 0:
                            cost = np.inf
                            break
                        extra[best_b] += 1
                        target[t] = best_b
                        cost += best_c
                        if cost >= gain - eps:  # the terms are >= 0: the sum can only grow
                            break
                    if cost < gain - eps:  # the summed costs take each member alone: the exact cost decides
                        cost = _dissolve_cost(Z, members, size, cent, nb, a, target, near_buf, extra, spread, spread_sq)
                    if cost < gain - eps:
                        drop += gain - cost
                        while size[a] > 0:
                            t = size[a] - 1
                            _move(Z, members, size, sums, cent, labels, a, t, nb[a, target[t]], version)
                            fresh[nb[a, target[t]]] = False
                        alive[a] = False
                        changed += 1
                        continue
                _remember_dissolve_idle(dissolve_seen, dissolve_near, dissolve_version, version, nb, a)
            for u in range(n_neighbors):
                b = nb[a, u]
                if b < 0 or not alive[b] or not alive[a]:
                    continue
                if _idle(idle, idle_version, version, a, b):
                    continue
                ca = cent[a]
                cb = cent[b]
                if not fresh[a]:
                    _own_distances(Z, members, size, a, own, own_root, ca)
                    fresh[a] = True
                if not fresh[b]:
                    _own_distances(Z, members, size, b, own, own_root, cb)
                    fresh[b] = True
                ma = size[a]
                mb = size[b]
                if near_filled and version[a] == near_va and version[b] == near_version[u]:
                    for s in range(ma):
                        xb_buf[s] = near_buf[u, s]
                else:
                    for s in range(ma):
                        xb_buf[s] = _sq(Z, members[a, s], cb)
                for t in range(mb):
                    ya_buf[t] = _sq(Z, members[b, t], ca)
                # --- single-record moves a -> b, then b -> a (the first that improves) ---
                src = -1
                slot = -1
                delta = 0.0
                if ma > k and mb < max_size:
                    for s in range(ma):
                        x = members[a, s]
                        delta = mb / (mb + 1.0) * xb_buf[s] - ma / (ma - 1.0) * own[x]
                        if delta < -eps:
                            src, slot = a, s
                            break
                if src < 0 and mb > k and ma < max_size:
                    for t in range(mb):
                        y = members[b, t]
                        delta = ma / (ma + 1.0) * ya_buf[t] - mb / (mb - 1.0) * own[y]
                        if delta < -eps:
                            src, slot = b, t
                            break
                if src >= 0:
                    drop -= delta
                    _move(Z, members, size, sums, cent, labels, src, slot, b if src == a else a, version)
                    fresh[a] = False
                    fresh[b] = False
                    changed += 1
                    continue
                # --- best swap between a and b ---
                # delta(x, y) = (ya - xa) + (xb - yb) - ||x - y||^2 (1/ma + 1/mb), and
                # ||x - y|| <= ||x - c|| + ||y - c|| for c = c_a and c = c_b: a pair whose bound cannot
                # beat the best delta so far is skipped without computing ||x - y||.
                w = 1.0 / ma + 1.0 / mb
                for t in range(mb):
                    y = members[b, t]
                    yr_buf[t] = np.sqrt(ya_buf[t])
                    yo_buf[t] = own_root[y]
                    yg_buf[t] = ya_buf[t] - own[y]
                best_delta = -eps
                best_s = -1
                best_t = -1
                for s in range(ma):
                    x = members[a, s]
                    gain_x = xb_buf[s] - own[x]
                    root_x = own_root[x]
                    root_xb = np.sqrt(xb_buf[s])
                    for t in range(mb):
                        base = yg_buf[t] + gain_x
                        reach = min(root_x + yr_buf[t], root_xb + yo_buf[t])
                        if base - w * reach * reach * (1.0 + 1e-12) >= best_delta:
                            continue
                        y = members[b, t]
                        delta = base - w * _sq_rows(Z, x, y)
                        if delta < best_delta:
                            best_delta = delta
                            best_s = s
                            best_t = t
                if best_s >= 0:
                    drop -= best_delta
                    x = members[a, best_s]
                    y = members[b, best_t]
                    members[a, best_s] = y
                    members[b, best_t] = x
                    labels[x] = b
                    labels[y] = a
                    for j in range(d):
                        sums[a, j] += Z[y, j] - Z[x, j]
                        sums[b, j] += Z[x, j] - Z[y, j]
                    _set_centroids(sums, size, cent, a, b)
                    version[a] += 1
                    version[b] += 1
                    fresh[a] = False
                    fresh[b] = False
                    changed += 1
                else:
                    _remember_idle(idle, idle_version, idle_next, version, a, b)
        changes += changed
        if changed == 0:
            break
    # relabel compactly, in order of first appearance
    remap = np.full(n_groups, -1, dtype=np.int64)
    nxt = 0
    for i in range(n):
        g = labels[i]
        if remap[g] < 0:
            remap[g] = nxt
            nxt += 1
        labels[i] = remap[g]
    return changes, drop
