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

from ._jit import jit
from .mdav import _distances_to
from .select import keep_smallest, offer_in_order


@jit
def _sq(Z, row, c):
    d = Z.shape[1]
    s = 0.0
    for j in range(d):
        t = Z[row, j] - c[j]
        s += t * t
    return s


@jit
def _sq_rows(Z, a, b):
    d = Z.shape[1]
    s = 0.0
    for j in range(d):
        t = Z[a, j] - Z[b, j]
        s += t * t
    return s


@jit
def _centroid(sums, size, g, out):
    for j in range(sums.shape[1]):
        out[j] = sums[g, j] / size[g]


LIST_SLACK = 4
"""Entries kept beyond the ``n_neighbors`` a sweep uses in each group's neighbour list, so that
:func:`_update_lists` can drop the groups that moved away and still know the nearest."""


UPDATE_SHARE = 4
"""With more than one group in ``UPDATE_SHARE`` changed, :func:`_update_lists` scans every list again."""


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
24 and 32 at capacities 6 and 12."""


@jit
def _select_row(dist, ids, keys, near, g, low):
    """Row g of ``keys`` / ``near``: the nearest of the groups ``ids`` at distances ``dist``, sorted by
    distance (ties to the lower id), up to the rows' capacity; returns how many (``low``: scratch of
    ``BOUND_LANES``).

    Offered in id order, which is unrelated to distance, the candidates entered the sorted buffer 41
    times a row (390 groups, capacity 6, real blocks), each time with mispredicted branches. So the
    distances first give a bound: read as rows of ``BOUND_LANES``, each column's minimum (one
    branch-free pass, the minima in registers), then the capacity-th smallest of those minima, the
    distances of as many distinct groups. A candidate farther than the bound cannot be kept: only the
    others are offered (7.5 a row, 7.2 insertions), still in id order, so the buffer is the full scan's,
    bit for bit, ties included. The selection takes 0.24 ms instead of 0.37 on a block of 1,950 rows
    (capacity 12: 28 candidates within the bound, 0.33 ms instead of 0.56). A bound from a sample (every
    8th candidate's capacity nearest) was slower than none: the sample costs insertions of its own. With
    fewer groups than lanes or a capacity above them, every candidate is offered.
    """
    capacity = keys.shape[1]
    m = ids.shape[0]
    worst = np.inf  # offered: the candidates closer than this
    if capacity <= BOUND_LANES:
        n_rows = m // BOUND_LANES
        rows = dist[:n_rows * BOUND_LANES].reshape((n_rows, BOUND_LANES))
        low[:] = np.inf
        for t in range(n_rows):
            for j in range(BOUND_LANES):
                x = rows[t, j]
                low[j] = x if x < low[j] else low[j]  # a NaN, never kept, stays out
        bound = np.inf
        for j in range(BOUND_LANES):  # the smallest minimum with capacity minima at most as large
            below = 0
            for u in range(BOUND_LANES):
                below += low[u] <= low[j]
            bound = low[j] if below >= capacity and low[j] < bound else bound
        worst = np.nextafter(bound, np.inf)  # the next double up: candidates at the bound are offered
    row_keys = keys[g]
    row_near = near[g]
    filled = 0
    for b in range(m):
        if dist[b] < worst:  # then the buffer's largest key once full: most candidates fail this one test
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


@jit
def _scan_all(lists, sums, size, alive):
    """Every alive group's list of :func:`_neighbour_lists`, from all its distances."""
    keys, near, filled, whole = lists
    ids, cent = _alive_centroids(sums, size, alive)
    m = ids.shape[0]
    dist = np.empty(m)
    c = np.empty(cent.shape[0])
    low = np.empty(BOUND_LANES)
    filled[:] = 0
    for i in range(m):
        g = ids[i]
        _row_distances(cent, i, dist, c)
        filled[g] = _select_row(dist, ids, keys, near, g, low)
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
    for o in range(m):
        if not moved[o]:
            continue
        h = ids[o]
        _row_distances(cent, o, dist, c)
        filled[h] = _select_row(dist, ids, keys, near, h, low)
        whole[h] = filled[h] == m - 1
        for i in range(m):
            g = ids[i]
            if not moved[i] and (filled[g] < capacity or dist[i] <= keys[g, capacity - 1]):
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
            filled[g] = _select_row(dist, ids, keys, near, g, low)
            whole[g] = filled[g] == m - 1


@jit
def _set_centroids(sums, size, cent, a, b):
    """Refresh the cached centroids of groups a and b after their sums changed (an empty group keeps its last)."""
    for g in (a, b):
        if size[g] > 0:
            _centroid(sums, size, g, cent[g])


@jit
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


@jit
def _idle(idle, idle_version, version, a, b):
    """Whether the pair (a, b) was evaluated, in either order, without an improving move or swap,
    and neither group has changed since: the same evaluation would find nothing again."""
    for g, h in ((a, b), (b, a)):
        for u in range(idle.shape[1]):
            if idle[g, u] == h and idle_version[g, u, 0] == version[g] and idle_version[g, u, 1] == version[h]:
                return True
    return False


@jit
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


@jit
def _own_distances(Z, members, size, g, own, ca):
    """``own[row] = ||x_row - c_g||^2`` for the members of group g (``ca``: its centroid)."""
    for t in range(size[g]):
        row = members[g, t]
        own[row] = _sq(Z, row, ca)


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
    """
    n, d = Z.shape
    n_groups = 0
    for i in range(n):
        if labels[i] + 1 > n_groups:
            n_groups = labels[i] + 1
    if n_groups < 2:
        return 0
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
    target = np.empty(capacity, dtype=np.int64)
    xb_buf = np.empty(capacity)
    ya_buf = np.empty(capacity)
    yr_buf = np.empty(capacity)
    own = np.empty(n)                        # squared distance of each row to its group's centroid
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
    changes = 0
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
            if not fresh[a]:
                _own_distances(Z, members, size, a, own, cent[a])
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
                cost = 0.0
                for u in range(n_neighbors):
                    extra[u] = 0
                for t in range(size[a]):
                    row = members[a, t]
                    best_c = np.inf
                    best_b = -1
                    for u in range(n_neighbors):
                        b = nb[a, u]
                        if b < 0 or not alive[b] or size[b] + extra[u] >= max_size:
                            continue
                        m = size[b]
                        c = m / (m + 1.0) * _sq(Z, row, cent[b])
                        if c < best_c:
                            best_c = c
                            best_b = u
                    if best_b < 0:
                        cost = np.inf
                        break
                    extra[best_b] += 1
                    target[t] = best_b
                    cost += best_c
                if cost < gain - eps:
                    while size[a] > 0:
                        t = size[a] - 1
                        _move(Z, members, size, sums, cent, labels, a, t, nb[a, target[t]], version)
                        fresh[nb[a, target[t]]] = False
                    alive[a] = False
                    changed += 1
                    continue
            for u in range(n_neighbors):
                b = nb[a, u]
                if b < 0 or not alive[b] or not alive[a]:
                    continue
                if _idle(idle, idle_version, version, a, b):
                    continue
                ca = cent[a]
                cb = cent[b]
                if not fresh[a]:
                    _own_distances(Z, members, size, a, own, ca)
                    fresh[a] = True
                if not fresh[b]:
                    _own_distances(Z, members, size, b, own, cb)
                    fresh[b] = True
                ma = size[a]
                mb = size[b]
                for s in range(ma):
                    xb_buf[s] = _sq(Z, members[a, s], cb)
                for t in range(mb):
                    ya_buf[t] = _sq(Z, members[b, t], ca)
                # --- single-record moves a -> b, then b -> a (the first that improves) ---
                src = -1
                slot = -1
                if ma > k and mb < max_size:
                    for s in range(ma):
                        x = members[a, s]
                        if mb / (mb + 1.0) * xb_buf[s] - ma / (ma - 1.0) * own[x] < -eps:
                            src, slot = a, s
                            break
                if src < 0 and mb > k and ma < max_size:
                    for t in range(mb):
                        y = members[b, t]
                        if ma / (ma + 1.0) * ya_buf[t] - mb / (mb - 1.0) * own[y] < -eps:
                            src, slot = b, t
                            break
                if src >= 0:
                    _move(Z, members, size, sums, cent, labels, src, slot, b if src == a else a, version)
                    fresh[a] = False
                    fresh[b] = False
                    changed += 1
                    continue
                # --- best swap between a and b ---
                # delta(x, y) = (ya - xa) + (xb - yb) - ||x - y||^2 (1/ma + 1/mb), and
                # ||x - y|| <= ||x - c_a|| + ||y - c_a||: a pair whose bound cannot beat the best
                # delta so far is skipped without computing ||x - y||.
                w = 1.0 / ma + 1.0 / mb
                for t in range(mb):
                    yr_buf[t] = np.sqrt(ya_buf[t])
                best_delta = -eps
                best_s = -1
                best_t = -1
                for s in range(ma):
                    x = members[a, s]
                    gain_x = xb_buf[s] - own[x]
                    root_x = np.sqrt(own[x])
                    for t in range(mb):
                        y = members[b, t]
                        base = ya_buf[t] - own[y] + gain_x
                        reach = root_x + yr_buf[t]
                        if base - w * reach * reach * (1.0 + 1e-12) >= best_delta:
                            continue
                        delta = base - w * _sq_rows(Z, x, y)
                        if delta < best_delta:
                            best_delta = delta
                            best_s = s
                            best_t = t
                if best_s >= 0:
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
    return changes
