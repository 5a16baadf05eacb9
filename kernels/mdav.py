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
is O(n d), never O(n^2). The k-1 nearest are a partial selection, not a sort: a bound from the
smallest distance of each block of records, then the candidates within it kept in a small sorted
buffer (:func:`_nearest_into`). The record farthest from the centroid is mostly found without a pass
over all records: the centroid moves little from one iteration to the next, and the distances to an
earlier centroid bound the current ones (:func:`_listed_farthest`). Both give exactly the records a
full scan gives.

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

BLOCK = 64
"""Records per block of :func:`_nearest_into`'s bound: the block minima are one vectorized pass (64 was
faster than 32 and 128 on blocks of 2,000 rows)."""

INF_BITS = 0x7FF0000000000000
"""The bits of +inf read as int64. Distances are sums of squares, +0 to +inf or NaN, and from +0 to +inf
their bits read as int64 order like the values: the smallest and the largest distance are integer
minima and maxima, which the compiler vectorizes (float ones it does not without fastmath, as they
must keep NaN's rules). A NaN's bits are above this or negative."""

LIST_WIDTH = 0.05
"""The records :func:`_listed_farthest` keeps after a full pass: those within this fraction of the largest
distance to the centroid (the fastest of 0.02, 0.03, 0.04, 0.05, 0.07, 0.1 and 0.15 on blocks of 2,000
rows: a wider list lasts longer but costs more to scan)."""


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
    """Position of the largest distance among alive records (first one on ties).

    The largest is an integer maximum of the distances' bits (:data:`INF_BITS`), one vectorized pass,
    then its first alive position, 16 records at a time: 0.35 us a scan of 1,000 records instead of
    0.95 for the plain scan, whose branch on each record mispredicted at the dead ones and at each new
    maximum. With a NaN among the alive records, or none alive, it is the plain scan (a NaN is never
    the farthest)."""
    bits = dist.view(np.int64)
    top = -1
    for i in range(m):
        v = bits[i]
        top = max(top, v if alive[i] else -1)
    if top < 0 or top > INF_BITS:
        best = -1
        best_d = -1.0
        for i in range(m):
            if alive[i] and dist[i] > best_d:
                best_d = dist[i]
                best = i
        return best
    return _first_at(bits, alive, m, top)


@jit
def _first_at(bits, alive, m, top):
    """The first alive position whose distance has the bits ``top`` (-1 if none), 16 at a time."""
    c = 0
    while c + 16 <= m:
        hit = False
        for j in range(16):
            hit |= bits[c + j] == top
        if hit:
            break
        c += 16
    for i in range(c, m):
        if bits[i] == top and alive[i]:
            return i
    return -1


@jit
def _farthest_but(dist, alive, m, top, members):
    """:func:`_farthest` after the group ``members`` was removed, given ``top``, the bits of the largest
    distance among the alive records before (:func:`_nearest_into` found it): unless a member had it,
    it is still the largest, and only its first position is searched (0.18 us instead of 0.34 in MDAV's
    loop)."""
    bits = dist.view(np.int64)
    for t in range(members.shape[0]):
        if bits[members[t]] == top:
            return _farthest(dist, alive, m)
    return _first_at(bits, alive, m, top)


@jit
def _nearest(dist, alive, m, center, k, out):
    """Fill ``out`` with ``center`` and the ``k - 1`` alive records nearest to it (partial selection).

    The result is that of a scan of the candidates in storage order (increasing row index) in which a
    candidate only displaces a strictly farther one: equal distances are resolved in favour of the
    lower row index.
    """
    _nearest_into(dist, alive, m, center, out, np.empty(k - 1), np.empty(k - 1, dtype=np.int64),
                  _block_scratch(m))


@jit
def _block_scratch(m):
    """The ``low`` of :func:`_nearest_into` for ``m`` stored records."""
    return np.empty(m // BLOCK + 1, dtype=np.int64)


@jit
def _nearest_into(dist, alive, m, center, out, best_d, best_i, low):
    """:func:`_nearest` of ``len(out)`` records with the selection's buffers (``len(out) - 1`` each) and
    ``low`` (:func:`_block_scratch`) given: MDAV's loop calls it twice per iteration, and allocating
    them each time cost about 6 % of its time on blocks of 2,000 rows.

    Offered in storage order, which is unrelated to distance, the candidates entered the sorted buffer
    about 25 times a scan (k = 5, 1,000 records), each time with mispredicted branches. So the distances
    first give a bound: each block of :data:`BLOCK` records' smallest distance among the candidates
    (one vectorized pass over the bits, :data:`INF_BITS`), then the (k-1)-th smallest of those minima,
    the distances of as many distinct candidates. A candidate farther than the bound cannot be kept:
    only the blocks with a minimum within it are read, 16 distances at a time, and their candidates
    within it offered, still in storage order, so the buffer is the full scan's, bit for bit, ties
    included: 4 of 18 blocks read and 4.6 offers a scan, 0.9 us a scan in MDAV's loop on blocks of
    1,950 rows instead of 1.1 (:func:`_offer_all`) and 2.0 (each candidate offered). With a NaN among
    the candidates (whose place in the buffer depends on the order of the offers) or fewer blocks than
    k - 1, every candidate is offered.

    Returns the bits of the largest distance among the candidates, which the pass finds too (for
    :func:`_farthest_but`), or -1 when it did not run.
    """
    capacity = best_d.shape[0]
    top = -1
    if 0 < capacity <= m // BLOCK and center >= 0:
        top = _block_minima(dist, alive, m, center, low)
    bound = _kth_smallest(low, m // BLOCK + 1, best_i) if top >= 0 else -1
    if bound >= 0:
        _offer_within(dist, alive, m, center, best_d, best_i, low, bound)
    else:
        _offer_all(dist, alive, m, center, best_d, best_i)
    out[0] = center
    for t in range(capacity):
        out[t + 1] = best_i[t]
    return top


@jit
def _block_minima(dist, alive, m, center, low):
    """``low[b]``: the bits of the smallest distance among the candidates (alive, not ``center``) of
    block b (the last one partial), the largest int64 for a block without one. Returns the bits of the
    largest (0 without candidates), or -1 when a candidate's distance is NaN, whose bits do not order
    like the distances."""
    bits = dist.view(np.int64)
    none = np.iinfo(np.int64).max
    was = alive[center]
    alive[center] = False  # the centre is no candidate (a test of the position would not vectorize)
    top = 0
    n_blocks = m // BLOCK
    for b in range(n_blocks):
        lo = none
        for i in range(BLOCK * b, BLOCK * b + BLOCK):  # a constant count: vectorized whole
            v = bits[i]
            lo = min(lo, v if alive[i] else none)
            top = max(top, v if alive[i] else 0)
        low[b] = lo
    lo = none
    for i in range(BLOCK * n_blocks, m):
        v = bits[i]
        lo = min(lo, v if alive[i] else none)
        top = max(top, v if alive[i] else 0)
    low[n_blocks] = lo
    alive[center] = was
    bottom = none
    for b in range(n_blocks + 1):
        bottom = min(bottom, low[b])
    return top if bottom >= 0 and top <= INF_BITS else -1


@jit
def _kth_smallest(low, n_blocks, best_i):
    """The ``len(best_i)``-th smallest of the block minima ``low[:n_blocks]`` (bits), -1 when fewer blocks
    have a candidate. ``best_i``, the selection's buffer, is scratch here: it keeps the smallest so far,
    sorted, each minimum passed down it by compare-exchanges (branch-free; a sorted buffer's insertions
    mispredicted, and counting for each minimum those below it was quadratic in the blocks)."""
    none = np.iinfo(np.int64).max
    capacity = best_i.shape[0]
    best_i[:] = none
    for b in range(n_blocks):
        v = low[b]
        for p in range(capacity):
            w = best_i[p]
            best_i[p] = min(w, v)
            v = max(w, v)
    bound = best_i[capacity - 1]
    return bound if bound != none else -1


@jit
def _offer_within(dist, alive, m, center, best_d, best_i, low, bound):
    """Offer the candidates at most ``bound`` (bits) in storage order, from the blocks whose minimum
    ``low`` is within it, 16 distances at a time (one vectorized test, a branch on the few within)."""
    bits = dist.view(np.int64)
    filled = 0
    n_blocks = m // BLOCK
    for b in range(n_blocks):
        if low[b] > bound:
            continue
        for c in range(BLOCK * b, BLOCK * b + BLOCK, 16):
            hit = False
            for j in range(16):
                hit |= bits[c + j] <= bound
            if hit:
                for i in range(c, c + 16):
                    if bits[i] <= bound and alive[i] and i != center:
                        filled = keep_smallest(best_d, best_i, filled, dist[i], i)
    if low[n_blocks] <= bound:
        for i in range(BLOCK * n_blocks, m):
            if bits[i] <= bound and alive[i] and i != center:
                filled = keep_smallest(best_d, best_i, filled, dist[i], i)


@jit
def _offer_all(dist, alive, m, center, best_d, best_i):
    """Offer every candidate in storage order (the plain scan), except those the full buffer rejects,
    tested first against a local copy of its largest key (1.1 us a scan in MDAV's loop instead of 2.0
    with each candidate offered)."""
    capacity = best_d.shape[0]
    filled = 0
    worst = np.nan  # until the buffer is full: not x >= NaN holds for every x, an infinite one too
    for i in range(m):
        x = dist[i]
        if not x >= worst and alive[i] and i != center:  # a NaN is offered too, as keep_smallest takes it
            filled = keep_smallest(best_d, best_i, filled, x, i)
            if filled == capacity:
                worst = best_d[capacity - 1]


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
    ``best_i`` of k-1 each) or, if ``nc``, NC growth (scratch ``work`` and ``running``). MDAV's own
    loop makes the same choice itself, with its scratch for :func:`_nearest_into` (through this
    function it took 2.5 % longer)."""
    if nc:
        _grow_nc(Y, alive, m, seed, members, work, running)
    else:
        _nearest_into(dist, alive, m, seed, members, best_d, best_i, _block_scratch(m))


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
def _list_far(dist, alive, ids, m, r, rows, far):
    """After a full pass (``dist``: the distances to the centroid, ``r``: the farthest), list the alive
    records within :data:`LIST_WIDTH` of the largest distance for :func:`_listed_farthest`: their rows
    ``rows[:listed]`` (in storage order, so increasing) and distances ``far[:listed]``. Returns
    ``(listed, cutoff)``: every alive record not listed is closer than ``cutoff``. Nothing is listed
    when the largest distance is 0, not finite or missing (``r`` -1)."""
    top = np.sqrt(dist[r]) * (1.0 - LIST_WIDTH) if r >= 0 else 0.0
    cutoff = top * top
    if not 0.0 < cutoff < np.inf:
        return 0, cutoff
    listed = 0
    for i in range(m):  # branch-free: every record written, the alive ones within kept
        rows[listed] = ids[i]
        far[listed] = dist[i]
        listed += alive[i] & (not dist[i] < cutoff)  # a NaN is listed
    return listed, cutoff


@jit
def _listed_farthest(Z, ids, m, labels, c, anchor, rows, far, listed, cutoff):
    """The alive record farthest from the centroid ``c`` (its storage position; the first one on
    ties), found among those :func:`_list_far` listed after the full pass to ``anchor``, and the list's
    new length (the records grouped since are dropped). Position -1 when the list cannot decide: a full
    pass is needed.

    The centroid moves little from one iteration to the next, and a record's distance (not squared) to
    ``c`` is within ``delta = |c - anchor|`` of its distance to the anchor (triangle inequality). With
    ``cur0`` the squared distance to ``c`` of the alive listed record farthest from the anchor, a record
    with ``sqrt(far) + delta < sqrt(cur0)`` is closer to ``c`` than that one: it can neither be the
    farthest nor tie with it. So the candidates are the records at least ``thr = (sqrt(cur0) - delta)^2``
    from the anchor, all listed when ``thr >= cutoff``; their distances to ``c`` are summed as
    :func:`_distances_to` sums them, bit for bit, and the farthest (the lowest row, so the first stored,
    on ties) is the full pass's record. ``thr`` is lowered by a relative ``(d + 8) 2^-52`` per rounded
    quantity, more than the rounding error of a sum of d squares (gamma_(d+2), Higham), so the
    inequality holds for the floating-point distances too; a threshold near 0 or not finite gives up.
    On blocks of 1,950 rows: a list of 20 records and 6 candidates per iteration, a full pass in 34
    iterations of 194: choosing r takes 0.15 ms a block instead of 0.38 (a pass and :func:`_farthest`
    each iteration).
    """
    d = Z.shape[1]
    y0 = -1
    top = -1.0
    kept = 0
    for t in range(listed):  # drop the grouped records; y0: the farthest from the anchor
        row = rows[t]
        if labels[row] < 0:
            rows[kept] = row
            far[kept] = far[t]
            if far[t] > top:
                top = far[t]
                y0 = row
            kept += 1
    if y0 < 0:
        return -1, kept
    cur0 = _distance_row(Z, y0, c)
    delta2 = 0.0
    for j in range(d):
        u = c[j] - anchor[j]
        delta2 += u * u
    slack = (d + 8) * 2.0 ** -52
    root = np.sqrt(cur0) * (1.0 - slack) - np.sqrt(delta2) * (1.0 + slack)
    if not 1e-100 < root < np.inf:  # near 0 the relative bounds would not cover underflow
        return -1, kept
    thr = root * root * (1.0 - slack)
    if not thr >= cutoff:
        return -1, kept
    best = y0
    best_d = cur0
    for t in range(kept):
        if not far[t] < thr:
            row = rows[t]
            x = _distance_row(Z, row, c)
            if x > best_d or (x == best_d and row < best):
                best_d = x
                best = row
    return np.searchsorted(ids[:m], best), kept


@jit
def _distance_row(Z, row, p):
    """Squared distance of ``Z[row]`` to ``p``, the terms added left to right from the first, as
    :func:`_distances_to` adds them (the same bits)."""
    d = Z.shape[1]
    if d == 0:
        return 0.0
    u = Z[row, 0] - p[0]
    s = u * u
    for j in range(1, d):
        u = Z[row, j] - p[j]
        s += u * u
    return s


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
    low = _block_scratch(n)
    point = np.empty(d)
    rows, far, anchor = np.empty(n, dtype=np.int64), np.empty(n), np.empty(d)  # _listed_farthest's list
    listed = 0
    cutoff = 0.0
    m = n
    n_alive = n
    group = 0
    while n_alive >= 3 * k:
        for j in range(d):
            point[j] = total[j] / n_alive
        r = -1
        if listed > 0:
            r, listed = _listed_farthest(Z, ids, m, labels, point, anchor, rows, far, listed, cutoff)
        if r < 0:  # a full pass, and a new list from it
            _distances_to(Y, m, point, dist)
            r = _farthest(dist, alive, m)
            listed, cutoff = _list_far(dist, alive, ids, m, r, rows, far)
            anchor[:] = point
        _copy_record(Y, r, point)
        _distances_to(Y, m, point, dist)
        top = -1
        if nc:
            _grow_nc(Y, alive, m, r, members, work, running)
        else:
            top = _nearest_into(dist, alive, m, r, members, best_d, best_i, low)
        _take_group(members, alive, ids, Z, labels, total, group)
        n_alive -= k
        group += 1
        # dist still holds the distances to r: s is the remaining record farthest from r
        s = _farthest_but(dist, alive, m, top, members) if top >= 0 else _farthest(dist, alive, m)
        _copy_record(Y, s, point)
        _distances_to(Y, m, point, dist)
        if nc:
            _grow_nc(Y, alive, m, s, members, work, running)
        else:
            _nearest_into(dist, alive, m, s, members, best_d, best_i, low)
        _take_group(members, alive, ids, Z, labels, total, group)
        n_alive -= k
        group += 1
        # dead records still cost a distance each per pass: compact when they exceed 1/8 (1/16 was the
        # best with three passes an iteration; with two, 1/8 takes 1.36 ms a block of 2,000 rows, 1/16
        # 1.43, 1/12 1.41, 1/6 1.38, 1/4 1.38; BENCHMARKS.md, thirty-ninth session)
        if 8 * (m - n_alive) > m:
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
