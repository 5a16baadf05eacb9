"""Fixed-size microaggregation heuristics: MD, CBFS, TFRP (phase 1) and GSMS.

Each builds groups of exactly k records, one or two at a time, around a selected first record; they
differ in how that record is chosen (``shared/papers/iterative-group-decomposition-refinement.txt``
section 3.1) and in their end game. The group then grows by one of two rules: **NN** (the record and
its k-1 nearest remaining records) or **NC** (starting from the record, repeatedly add the remaining
record nearest to the group's running centroid until it has k records), where the literature defines
both (CBFS, TFRP; MDAV is in :mod:`.mdav`).

* **MD** (Maximum Distance; Mateo-Sanz and Domingo-Ferrer): while at least 2k records remain, take
  the two remaining records r, s farthest from each other and group each with its k-1 nearest
  remaining records (r first). Then k..2k-1 remaining records form the last group; fewer than k are
  each added to the group with the nearest centroid. NN growth only.
* **CBFS** (Centroid-Based Fixed-Size; Laszlo and Mukherjee): while at least k records remain, grow a
  group from the remaining record farthest from the centroid of the remaining records; the fewer
  than k left over join the group with the nearest centroid. The original CBFS is ``nc=True``.
* **TFRP** phase 1 (Two Fixed Reference Points; Chang, Li and Huang): the reference points are the
  per-attribute maxima and the per-attribute minima of the data (fixed). While at least k records
  remain, grow a group from the remaining record farthest from the current reference point, then
  switch to the other point (the maximum corner first). The fewer than k left over join the group
  with the nearest centroid. Phase 2 is the ``tfrp2`` refinement of :mod:`.decomposition`.
* **GSMS** (successive group selection; Panagiotakis and Tziritas), as the refinement paper defines
  it: every remaining record x has a candidate group p(x) = x and its k-1 nearest remaining
  records; while at least 2k records remain, the candidate with the smallest
  ``SSE(p) + SSE(T \\ p)`` is taken (T = the remaining records); the k..2k-1 left form the last
  group. NN growth only (the paper explains why it does not define GSMS-NC).

With these readings the published information loss of Khomnotai et al. (2018), Tables 3-4 (census
and EIA, unrefined rows), is reproduced to the third decimal for CBFS-NN/NC, TFRP-NN/NC and GSMS-NN
(all 24 figures but CBFS-NN, census, k=10: 14.007 against 14.001), and MD reproduces the MD column
of ``shared/papers/dbm-density-based-microaggregation.txt`` Table 1 (census 5.721 against 5.720 at
k=3). The choices the published numbers pin down: TFRP uses the per-attribute corners and starts at
the maximum corner (a scalar min/max over all attributes instead gives the census TFRP-1 figures of
``shared/papers/comparative-study-microaggregation.txt`` Table 6, 5.931 ... 14.442, but misses
Tables 3-4 by up to 1.7%); CBFS and TFRP attach the fewer than k left-over records to their nearest
groups.

GSMS selection rule, computed stably: splitting T into p (k records) and T \\ p,
``SSE(T) = SSE(p) + SSE(T \\ p) + k |T| / (|T| - k) * ||mean(p) - mean(T)||^2``, and SSE(T), k and
|T| are the same for every candidate, so the smallest ``SSE(p) + SSE(T \\ p)`` is the candidate
whose centroid is farthest from the centroid of T; that distance is what the kernel compares.
Candidates are cached (an ``(n, k)`` table and their sums, O(n (k + d)) memory) and only those that
lost a member are recomputed, which is exact: a record's k-1 nearest among fewer records are
unchanged unless one of them left.

Costs: MDAV-style O(n^2 d / k) scans for CBFS and TFRP (NC growth: O(n^2 d)); GSMS O(n^2 d / k)
for the selection plus the candidate refreshes; MD finds its farthest pair by scanning records in
decreasing distance from the centroid c, pairs each only with the records after it whose bound
``||x_i - c|| + ||x_j - c||`` (triangle inequality) still reaches the best pair, and stops when the
bound with the next record falls below it: exact, with O(n^2 d) per pair in the worst case but far
less on real data (1.3-1.6x faster on blocks of the synthetic extract than pairing each examined record
with every other; BENCHMARKS.md). Memory is O(n d) throughout; no distance matrix is formed.

Tie-breaking (deterministic): among records at equal distance, the lowest row index is the
farthest, respectively the nearest (candidates are scanned in row order and only strictly better
ones displace the incumbent); MD takes, among pairs at equal distance, the one with the lowest
(lower row, higher row) and grows the lower row's group first; GSMS takes, among candidates equally
good as computed, the one whose seed has the lowest row index (when 2k records are left, a candidate
and its complement tie mathematically and rounding decides which is numbered first); a left-over
record joins, among groups at equal distance, the lowest-numbered one. Groups are numbered in the
order they are formed.

References
----------
Khomnotai, L., Lin, J.-L., Peng, Z.-Q. and Santra, A. S. (2018). Iterative group decomposition for
refining microaggregation solutions. Symmetry 10(7), 262; section 3.1, section 5.2 and Table 1
(``shared/papers/iterative-group-decomposition-refinement.txt``).
Mateo-Sanz, J. M. and Domingo-Ferrer, J. (1999/2002): MD; see
``shared/papers/comparative-study-microaggregation.txt`` Table 3.
Laszlo, M. and Mukherjee, S. (2005). Minimum spanning tree partitioning algorithm for
microaggregation. IEEE TKDE 17(7), 902-911 (CBFS).
Chang, C.-C., Li, Y.-C. and Huang, W.-H. (2007). TFRP: an efficient microaggregation algorithm for
statistical disclosure control. J. Syst. Softw. 80(11), 1866-1878 (see
``shared/papers/comparative-study-microaggregation.txt`` section 3.5).
Panagiotakis, C. and Tziritas, G. (2013). Successive group selection for microaggregation. IEEE
TKDE 25(5), 1191-1195 (GSMS).
"""

import numpy as np

from ._jit import jit
from .groups import attach_leftovers
from .mdav import _compact, _distances_to, _farthest, _grow, _group_around_farthest_from, _take_group
from .select import keep_smallest
from .ties import copy_classes


@jit
def _column_major(Z):
    """``Z`` stored column by column (``(d, n)``) and its column sums."""
    n, d = Z.shape
    Y = np.empty((d, n))
    total = np.zeros(d)
    for i in range(n):
        for j in range(d):
            Y[j, i] = Z[i, j]
            total[j] += Z[i, j]
    return Y, total


@jit
def _label_rest(alive, ids, m, labels, group):
    for i in range(m):
        if alive[i]:
            labels[ids[i]] = group


@jit
def _seeded(Z, k, nc, tfrp):
    """CBFS (``tfrp=False``) or TFRP phase 1 (``tfrp=True``): one group per step, grown from the
    record farthest from the remaining records' centroid, respectively from the current reference
    point; the fewer than k left over join their nearest groups."""
    n, d = Z.shape
    labels = np.full(n, -1, dtype=np.int64)
    if n < 2 * k:
        labels[:] = 0
        return labels
    Y, total = _column_major(Z)
    ref = np.empty((2, d))  # TFRP: per-attribute maxima, then minima
    for j in range(d):
        hi = -np.inf
        lo = np.inf
        row = Y[j]
        for i in range(n):
            hi = max(hi, row[i])
            lo = min(lo, row[i])
        ref[0, j] = hi
        ref[1, j] = lo
    ids = np.arange(n)
    alive = np.ones(n, dtype=np.bool_)
    dist = np.empty(n)
    work = np.empty(n if nc else 0)
    running = np.empty(d)
    members = np.empty(k, dtype=np.int64)
    best_d, best_i = np.empty(k - 1), np.empty(k - 1, dtype=np.int64)
    c = np.empty(d)
    m = n
    n_alive = n
    group = 0
    while n_alive >= k:
        if tfrp:
            c[:] = ref[group % 2]
        else:
            for j in range(d):
                c[j] = total[j] / n_alive
        _group_around_farthest_from(Y, ids, alive, m, c, Z, labels, total, dist, members, group, nc, work, running,
                                    best_d, best_i)
        n_alive -= k
        group += 1
        if 8 * (m - n_alive) > m:
            m = _compact(Y, ids, alive, m)
    if n_alive > 0:
        attach_leftovers(Z, labels, group)
    return labels


@jit
def cbfs(Z, k, nc):
    """CBFS labels (``nc``: NC growth, the original CBFS; otherwise NN). Groups of k..2k-1."""
    return _seeded(Z, k, nc, False)


@jit
def tfrp(Z, k, nc):
    """TFRP phase-1 labels (``nc``: NC growth; otherwise NN, the original TFRP-1). Groups of k..2k-1."""
    return _seeded(Z, k, nc, True)


@jit
def _farthest_pair(Y, alive, m, total, n_alive, rad, order, Z, ids, cls, seen, finite):
    """Storage positions ``(r, s)``, ``r < s``, of the two alive records farthest from each other.

    Records are examined in decreasing distance from the centroid c: a record x_t is paired only with
    the records after it in that order, and only while ``||x_t - c|| + ||x_u - c||`` (a bound on their
    distance, by the triangle inequality, which falls along the order) reaches the best squared
    distance found, with a relative slack for rounding; the scan stops at the first record whose bound
    with the next one does not. Pairs so skipped are strictly shorter than the farthest pair (ties
    included), so the result is the exhaustive search's.

    If every record and the centroid are finite (``finite``: the records; so every distance is a
    number or infinite), only the first copy of each class of identical records (``cls``, by row:
    :func:`.ties.copy_classes`) is examined; ``seen`` (per class) is scratch. Copies are at the same
    distance from c, so the sort (stable) puts them in storage order, and a later copy's pairs are
    the first copy's at the same distances, which lose the tie to it. If then
    no pair is found farther than 0, all the alive records are at distance 0 from each other, and the
    exhaustive search's pair is the two lowest storage positions. Without this, the records left after
    a zero-inflated input's other records are grouped (thousands of copies) cost a scan of every pair
    for each group: 7.4 s for 5,000 rows with 90 % zeros.
    """
    d = Y.shape[0]
    c = np.empty(d)
    for j in range(d):
        c[j] = total[j] / n_alive
    finite = finite and np.isfinite(c).all()
    _distances_to(Y, m, c, rad)
    cnt = 0
    for i in range(m):
        if alive[i]:
            order[cnt] = i
            cnt += 1
    keys = np.empty(cnt)
    for t in range(cnt):
        keys[t] = -rad[order[t]]
    cand = order[:cnt][np.argsort(keys, kind="mergesort")]
    if finite:  # else a distance may be NaN, and copies out of storage order in this sort
        first = 0
        for t in range(cnt):  # the first copy of each class in the order
            c_t = cls[ids[cand[t]]]
            if seen[c_t] != n_alive:  # n_alive falls at every call: a fresh stamp
                seen[c_t] = n_alive
                cand[first] = cand[t]
                first += 1
        cnt = first
    root = np.empty(cnt)
    for t in range(cnt):
        root[t] = np.sqrt(rad[cand[t]])
    best = -1.0
    bi = -1
    bj = -1
    for t in range(cnt - 1):
        reach = root[t] + root[t + 1]
        if reach * reach * (1.0 + 1e-9) < best:
            break
        i = cand[t]
        row_i = ids[i]
        for u in range(t + 1, cnt):
            reach = root[t] + root[u]
            if reach * reach * (1.0 + 1e-9) < best:
                break
            j = cand[u]
            row_j = ids[j]
            dd = 0.0
            for col in range(d):
                w = Z[row_j, col] - Z[row_i, col]
                dd += w * w
            a = min(i, j)
            b = max(i, j)
            if dd > best or (dd == best and (a < bi or (a == bi and b < bj))):
                best = dd
                bi = a
                bj = b
    if finite and best <= 0.0:
        bi = -1
        for i in range(m):
            if alive[i]:
                if bi < 0:
                    bi = i
                else:
                    return bi, i
    return bi, bj


@jit
def md(Z, k):
    """MD (Maximum Distance) labels, NN growth. Groups of k..2k-1, numbered in order of formation."""
    n, d = Z.shape
    labels = np.full(n, -1, dtype=np.int64)
    if n < 2 * k:
        labels[:] = 0
        return labels
    Y, total = _column_major(Z)
    cls, first, _ = copy_classes(Z)
    seen = np.zeros(len(first), dtype=np.int64)
    finite = np.isfinite(Z).all()
    ids = np.arange(n)
    alive = np.ones(n, dtype=np.bool_)
    dist = np.empty(n)
    rad = np.empty(n)
    order = np.empty(n, dtype=np.int64)
    work = np.empty(0)
    running = np.empty(d)
    members = np.empty(k, dtype=np.int64)
    best_d, best_i = np.empty(k - 1), np.empty(k - 1, dtype=np.int64)
    m = n
    n_alive = n
    group = 0
    while n_alive >= 2 * k:
        r, s = _farthest_pair(Y, alive, m, total, n_alive, rad, order, Z, ids, cls, seen, finite)
        _distances_to(Y, m, Y[:, r].copy(), dist)
        _grow(Y, alive, m, r, dist, members, False, work, running, best_d, best_i)
        _take_group(members, alive, ids, Z, labels, total, group)
        n_alive -= k
        group += 1
        if not alive[s]:  # only with ties: s joined r's group; take the record farthest from r
            s = _farthest(dist, alive, m)
        _distances_to(Y, m, Y[:, s].copy(), dist)
        _grow(Y, alive, m, s, dist, members, False, work, running, best_d, best_i)
        _take_group(members, alive, ids, Z, labels, total, group)
        n_alive -= k
        group += 1
        if 8 * (m - n_alive) > m:
            m = _compact(Y, ids, alive, m)
    if n_alive >= k:
        _label_rest(alive, ids, m, labels, group)
    elif n_alive > 0:
        attach_leftovers(Z, labels, group)
    return labels


@jit
def _candidate(Y, ids, alive, m, Z, pos, x, k, dist, best_d, best_i, cand, csum):
    """``cand[x]`` = row x and its k-1 nearest alive rows (lowest rows on ties); ``csum[x]`` their sum."""
    d = Y.shape[0]
    p = pos[x]
    _distances_to(Y, m, Y[:, p].copy(), dist)
    filled = 0
    for i in range(m):
        if alive[i] and i != p:
            filled = keep_smallest(best_d, best_i, filled, dist[i], i)
    for t in range(k - 1):
        cand[x, t + 1] = ids[best_i[t]]
    _candidate_sum(Z, x, k, cand, csum)


@jit
def _candidate_sum(Z, x, k, cand, csum):
    """``cand[x, 0]`` = row x (its k-1 nearest already in ``cand[x, 1:]``); ``csum[x]`` = their sum."""
    cand[x, 0] = x
    for j in range(Z.shape[1]):
        csum[x, j] = 0.0
    for t in range(k):
        row = cand[x, t]
        for j in range(Z.shape[1]):
            csum[x, j] += Z[row, j]


@jit
def _shared_candidate(Y, ids, alive, row_alive, m, Z, x, k, shared, lists, listed, dist, list_d, list_i, cand,
                      csum):
    """:func:`_candidate` for a record ``x`` with copies: its k-1 nearest alive rows taken in order from
    the list of its class (``lists[shared]``, rows, ``listed[shared]`` of them), skipping ``x``; the
    list is scanned again, from the copies' common point, once fewer than k-1 of it are alive.

    The list holds the class's nearest alive rows when it was scanned, sorted by distance and then row
    (the copies themselves first), one more than it needs for any copy; rows only die, so its alive
    entries but ``x`` are, in order, the nearest alive rows of ``x`` now: the same candidate, bit for
    bit, as a scan from ``x``."""
    d = Y.shape[0]
    for attempt in range(2):
        got = 0
        for t in range(listed[shared]):
            row = lists[shared, t]
            if row_alive[row] and row != x:
                cand[x, got + 1] = row
                got += 1
                if got == k - 1:
                    break
        if got == k - 1:
            break
        p = np.empty(d)
        for j in range(d):
            p[j] = Z[x, j]
        _distances_to(Y, m, p, dist)
        filled = 0
        for i in range(m):
            if alive[i]:
                filled = keep_smallest(list_d, list_i, filled, dist[i], i)
        for t in range(filled):
            lists[shared, t] = ids[list_i[t]]
        listed[shared] = filled
    _candidate_sum(Z, x, k, cand, csum)


@jit
def gsms(Z, k, reserve=4):
    """GSMS labels (NN candidates). Groups of k..2k-1, numbered in order of selection.

    Identical records (:func:`.ties.copy_classes`; finite ones) take their candidates from one list
    per class of ``reserve * (k - 1) + 1`` rows (:func:`_shared_candidate`) instead of a scan each:
    the same candidates, and the copies of a zero-inflated input no longer scan every record each
    time a group takes some of them (11 s for 5,000 rows with 90 % zeros)."""
    n, d = Z.shape
    labels = np.full(n, -1, dtype=np.int64)
    if n < 2 * k:
        labels[:] = 0
        return labels
    Y, total = _column_major(Z)
    ids = np.arange(n)        # storage position -> row
    pos = np.arange(n)        # row -> storage position
    alive = np.ones(n, dtype=np.bool_)      # by storage position
    row_alive = np.ones(n, dtype=np.bool_)  # by row
    dist = np.empty(n)
    best_d = np.empty(k - 1)
    best_i = np.empty(k - 1, dtype=np.int64)
    cand = np.empty((n, k), dtype=np.int64)
    csum = np.empty((n, d))
    stale = np.ones(n, dtype=np.bool_)
    cls, first, size = copy_classes(Z)
    shared = np.full(len(first), -1, dtype=np.int64)  # each class of copies' list
    n_shared = 0
    if np.isfinite(Z).all():  # a NaN distance does not order: every record scans for itself
        for c_ in range(len(first)):
            if size[c_] > 1:
                shared[c_] = n_shared
                n_shared += 1
    width = min(n, reserve * (k - 1) + 1)
    lists = np.empty((n_shared, width), dtype=np.int64)
    listed = np.zeros(n_shared, dtype=np.int64)
    list_d = np.empty(width)
    list_i = np.empty(width, dtype=np.int64)
    c = np.empty(d)
    m = n
    n_alive = n
    group = 0
    while n_alive >= 2 * k:
        for x in range(n):
            if row_alive[x] and stale[x]:
                if shared[cls[x]] >= 0:
                    _shared_candidate(Y, ids, alive, row_alive, m, Z, x, k, shared[cls[x]], lists, listed, dist,
                                      list_d, list_i, cand, csum)
                else:
                    _candidate(Y, ids, alive, m, Z, pos, x, k, dist, best_d, best_i, cand, csum)
                stale[x] = False
        for j in range(d):
            c[j] = total[j] / n_alive
        # smallest SSE(p) + SSE(T \ p)  <=>  centroid of p farthest from the centroid of T
        best = -1.0
        chosen = -1
        for x in range(n):
            if row_alive[x]:
                s = 0.0
                for j in range(d):
                    t = csum[x, j] / k - c[j]
                    s += t * t
                if s > best:
                    best = s
                    chosen = x
        for t in range(k):
            row = cand[chosen, t]
            alive[pos[row]] = False
            row_alive[row] = False
            labels[row] = group
            for j in range(d):
                total[j] -= Z[row, j]
        n_alive -= k
        group += 1
        for x in range(n):
            if row_alive[x] and not stale[x]:
                for t in range(1, k):
                    if not row_alive[cand[x, t]]:
                        stale[x] = True
                        break
        if 8 * (m - n_alive) > m:
            m = _compact(Y, ids, alive, m)
            for i in range(m):
                pos[ids[i]] = i
    for x in range(n):
        if row_alive[x]:
            labels[x] = group
    return labels
