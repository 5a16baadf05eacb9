"""Local-search refinement of a microaggregation partition (never raises the SSE, keeps k..2k-1).

Starting from any partition with group sizes in ``[k, max_size]``, repeat sweeps over the groups in
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

References
----------
Solanas, Martinez-Balleste, Domingo-Ferrer and Mateo-Sanz: the TFRP-2 and Decompose/Shrink
refinements (``shared/papers/iterative-group-decomposition-refinement.txt`` section 3); the record
moves and swaps are the classic exchange neighbourhood of k-means-style local search.
"""

import numpy as np

from ._jit import jit
from .select import keep_smallest


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


@jit
def _nearest_groups(sums, size, alive, n_neighbors):
    """For each alive group, the ``n_neighbors`` nearest alive groups by centroid (brute force)."""
    n_groups, d = sums.shape
    cent = np.empty((n_groups, d))
    for g in range(n_groups):
        if alive[g]:
            for j in range(d):
                cent[g, j] = sums[g, j] / size[g]
    nb = np.full((n_groups, n_neighbors), -1, dtype=np.int64)
    best = np.empty(n_neighbors)
    for a in range(n_groups):
        if not alive[a]:
            continue
        filled = 0
        for b in range(n_groups):
            if b == a or not alive[b]:
                continue
            dist = 0.0
            for j in range(d):
                t = cent[a, j] - cent[b, j]
                dist += t * t
            filled = keep_smallest(best, nb[a], filled, dist, b)
    return nb


@jit
def _move(Z, members, size, sums, labels, a, slot, b):
    """Move the record at ``members[a, slot]`` from group a to group b."""
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


@jit
def _first_improving_move(Z, members, size, sums, labels, src, dst, c_src, c_dst, k, max_size, eps):
    """Move the first record of ``src`` whose move to ``dst`` lowers the SSE by more than ``eps``."""
    m_src = size[src]
    m_dst = size[dst]
    if m_src <= k or m_dst >= max_size:
        return False
    for t in range(m_src):
        row = members[src, t]
        delta = m_dst / (m_dst + 1.0) * _sq(Z, row, c_dst) - m_src / (m_src - 1.0) * _sq(Z, row, c_src)
        if delta < -eps:
            _move(Z, members, size, sums, labels, src, t, dst)
            return True
    return False


@jit
def refine(Z, labels, k, max_size, n_neighbors=8, max_sweeps=20, tol=1e-12):
    """Improve ``labels`` in place by local search; returns the number of applied changes.

    Parameters
    ----------
    Z : (n, d) float64 C-contiguous (standardized)
    labels : (n,) int64, groups ``0..g-1`` of sizes in ``[k, max_size]``; relabelled compactly on return
    k, max_size : group size bounds (``max_size >= 2k - 1`` keeps every move available)
    n_neighbors : candidate groups per group (nearest centroids)
    max_sweeps : upper bound on sweeps over all groups
    tol : a change must lower the SSE by more than ``tol`` times the mean squared norm of a row
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
    members = np.empty((n_groups, max_size), dtype=np.int64)
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
    ca = np.empty(d)
    cb = np.empty(d)
    cn = np.empty((n_neighbors, d))          # neighbour centroids for the dissolve test
    extra = np.zeros(n_neighbors, dtype=np.int64)
    target = np.empty(max_size, dtype=np.int64)
    xa_buf = np.empty(max_size)
    xb_buf = np.empty(max_size)
    ya_buf = np.empty(max_size)
    yb_buf = np.empty(max_size)
    changes = 0
    for _ in range(max_sweeps):
        nb = _nearest_groups(sums, size, alive, n_neighbors)
        changed = 0
        for a in range(n_groups):
            if not alive[a]:
                continue
            # --- dissolve a into its neighbours (first: it changes the most) ---
            gain = 0.0
            _centroid(sums, size, a, ca)
            for t in range(size[a]):
                gain += _sq(Z, members[a, t], ca)
            # cost of adding each member to its nearest neighbour with room (sizes as they fill)
            room = 0
            for t in range(n_neighbors):
                b = nb[a, t]
                if b >= 0 and alive[b]:
                    room += max_size - size[b]
            if room >= size[a]:
                cost = 0.0
                for u in range(n_neighbors):
                    extra[u] = 0
                    b = nb[a, u]
                    if b >= 0 and alive[b]:
                        for j in range(d):
                            cn[u, j] = sums[b, j] / size[b]
                for t in range(size[a]):
                    row = members[a, t]
                    best_c = np.inf
                    best_b = -1
                    for u in range(n_neighbors):
                        b = nb[a, u]
                        if b < 0 or not alive[b] or size[b] + extra[u] >= max_size:
                            continue
                        m = size[b]
                        c = m / (m + 1.0) * _sq(Z, row, cn[u])
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
                        _move(Z, members, size, sums, labels, a, t, nb[a, target[t]])
                    alive[a] = False
                    changed += 1
                    continue
            for u in range(n_neighbors):
                b = nb[a, u]
                if b < 0 or not alive[b] or not alive[a]:
                    continue
                _centroid(sums, size, a, ca)
                _centroid(sums, size, b, cb)
                ma = size[a]
                mb = size[b]
                # --- single-record moves a -> b and b -> a ---
                moved = _first_improving_move(Z, members, size, sums, labels, a, b, ca, cb, k, max_size, eps)
                if not moved:
                    moved = _first_improving_move(Z, members, size, sums, labels, b, a, cb, ca, k, max_size, eps)
                if moved:
                    changed += 1
                    continue
                # --- best swap between a and b ---
                for s in range(ma):
                    x = members[a, s]
                    xa_buf[s] = _sq(Z, x, ca)
                    xb_buf[s] = _sq(Z, x, cb)
                for t in range(mb):
                    y = members[b, t]
                    ya_buf[t] = _sq(Z, y, ca)
                    yb_buf[t] = _sq(Z, y, cb)
                best_delta = -eps
                best_s = -1
                best_t = -1
                for s in range(ma):
                    x = members[a, s]
                    for t in range(mb):
                        xy = _sq_rows(Z, x, members[b, t])
                        delta = (ya_buf[t] - xa_buf[s] - xy / ma) + (xb_buf[s] - yb_buf[t] - xy / mb)
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
                    changed += 1
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
