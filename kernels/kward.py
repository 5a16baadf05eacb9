"""k-Ward: Ward's hierarchical clustering constrained to groups of at least k records.

The algorithm of Domingo-Ferrer and Mateo-Sanz (2002), as ``shared/papers/
optimal-univariate-noise-microaggregation.txt`` section III (steps 1-3) and
``shared/papers/iterative-group-decomposition-refinement.txt`` section 3.1 describe it::

    1. form a group with the k records nearest one extreme of the data set, and a group with the
       k records nearest the other extreme
    2. Ward's method (merge the two clusters whose union increases the SSE least) from these two
       groups and the remaining records as singletons, until every cluster has k or more records;
       never join two clusters that both have k or more records
    3. apply the algorithm recursively to every resulting cluster of 2k or more records

The univariate paper's extremes are the k smallest and the k largest values. For multivariate data
we take MDAV's extremes: the record r farthest from the centroid and the record s farthest from r
(s among the records not in r's group); each group is the extreme and its k-1 nearest records. Step
1 makes every recursive call split its input into at least two clusters (the two extreme groups
already have k records and are never joined), so the recursion ends, and every final group has
k..2k-1 records.

Ward's merge cost of clusters a and b is ``n_a n_b / (n_a + n_b) ||c_a - c_b||^2`` (the SSE increase
of the union). Every admissible merge involves a cluster with fewer than k records, so only those
keep a nearest admissible partner (any other cluster) and its cost; the cheapest merge is the
cheapest of these. After a merge of a and b, Ward's reducibility (the cost from the union to any x is
at least ``min(cost(a, x), cost(b, x))``) means partners of other clusters stay nearest, except for
clusters whose partner was a or b: their old cost becomes a lower bound and they are rescanned only
when that bound reaches the top (a lazy update, as in generic agglomerative clustering). Memory is
O(n d): cluster centroids and sizes, no distance matrix (the pipeline runs k-Ward per block of
about 2,500 rows). Time O(n^2 d) for the first nearest partners plus O(n d) per merge and rescan.
The distances from one centroid to all others go through MDAV's column-by-column distance pass
(:func:`microagg.kernels.mdav._distances_to`), each the same bits as the pair-by-pair sum (2.6-2.9x
faster on blocks of the synthetic extract; BENCHMARKS.md); after a merge, one such pass serves the
other clusters' partners and the union's own.

Tie-breaking (deterministic, a function of the row order only): a cluster is named by its lowest
row index; among merges of equal cost the one whose small cluster (the lower-named one if both are
small) has the lowest name is made, with its lowest-named partner; the extremes and their nearest
records follow MDAV's rule (the lowest row index on ties). Groups are numbered by their lowest row
index. Up to rounding: a cost bound that rounding puts above the true cost could reorder two merges
of nearly equal cost, deterministically.

Copies of one record: a segment of the recursion that holds nothing else (zero-inflated extracts
have thousands of all-zero records) is split in closed form (:func:`_copies_split`), the groups its
passes would give: each pass only peeled one group of k off it, so thousands of copies took
O(n^3 / k) (66.5 s for 5,000 identical records; BENCHMARKS.md, thirty-fourth session).

k-Ward is not in the comparative study's Tables 5-7; ours, k = 3 / 5 / 10: census 5.991 / 9.110 /
14.111, EIA 0.415 / 0.917 / 2.218 (classic MDAV: 5.692 / 9.088 / 14.156 and 0.483 / 1.667 / 3.840).

References
----------
Domingo-Ferrer, J. and Mateo-Sanz, J. M. (2002). Practical data-oriented microaggregation for
statistical disclosure control. IEEE Transactions on Knowledge and Data Engineering 14(1), 189-201.
Ward, J. H. (1963). Hierarchical grouping to optimize an objective function. Journal of the American
Statistical Association 58, 236-244.
"""

import numpy as np

from ._jit import inline_jit, jit
from .mdav import _distances_to, column_major
from .select import keep_smallest
from .ties import _finite_row, _same_row


@inline_jit
def _ward_cost(size_a, size_b, dist):
    """The SSE increase of merging clusters of ``size_a`` and ``size_b`` records whose centroids
    lie ``dist`` (squared) apart."""
    return size_a * size_b / (size_a + size_b) * dist


@jit
def _partner(size, active, x, dist, nn, nn_cost):
    """Nearest partner of cluster ``x`` among all other active clusters (the lowest name on ties),
    from ``dist``: the squared distances from its centroid to every cluster's."""
    best = -1
    best_c = np.inf
    for y in range(dist.shape[0]):
        if active[y] and y != x:
            c = _ward_cost(size[x], size[y], dist[y])
            if c < best_c:
                best_c = c
                best = y
    nn[x] = best
    nn_cost[x] = best_c


@jit
def _rescan(Y, cent, size, active, x, nn, nn_cost, dist):
    """:func:`_partner` of ``x``, its distances computed here by MDAV's distance pass (``Y``: the
    centroids column by column; ``dist``: scratch)."""
    _distances_to(Y, cent.shape[0], cent[x], dist)
    _partner(size, active, x, dist, nn, nn_cost)


@jit
def _extreme_group(Z, rows, taken, p, k, dist, best_d, best_i):
    """Mark ``p`` and its k-1 nearest untaken rows (positions in ``rows``) as taken; returns them."""
    m = rows.shape[0]
    d = Z.shape[1]
    for t in range(m):
        s = 0.0
        for j in range(d):
            u = Z[rows[t], j] - Z[rows[p], j]
            s += u * u
        dist[t] = s
    filled = 0
    for t in range(m):
        if not taken[t] and t != p:
            filled = keep_smallest(best_d, best_i, filled, dist[t], t)
    out = np.empty(k, dtype=np.int64)
    out[0] = p
    taken[p] = True
    for t in range(k - 1):
        out[t + 1] = best_i[t]
        taken[best_i[t]] = True
    return out


@jit
def _split(Z, rows, k):
    """One k-Ward pass on ``Z[rows]`` (``len(rows) >= 2k``, rows ascending): cluster labels
    ``0..c-1`` per position, numbered by lowest position; every cluster has >= k records."""
    m = rows.shape[0]
    d = Z.shape[1]
    cent = np.empty((m, d))
    size = np.ones(m)
    for t in range(m):
        for j in range(d):
            cent[t, j] = Z[rows[t], j]
    Y = column_major(cent)  # the centroids column by column, for the distance passes
    dist = np.empty(m)
    root = np.arange(m)  # cluster name (slot) of each position, resolved through the merges below
    # step 1: the two extreme groups
    mean = np.zeros(d)
    for t in range(m):
        for j in range(d):
            mean[j] += cent[t, j]
    for j in range(d):
        mean[j] /= m
    r = -1
    r_d = -1.0
    for t in range(m):
        s = 0.0
        for j in range(d):
            u = cent[t, j] - mean[j]
            s += u * u
        if s > r_d:
            r_d = s
            r = t
    taken = np.zeros(m, dtype=np.bool_)
    best_d = np.empty(k - 1)
    best_i = np.empty(k - 1, dtype=np.int64)
    first = _extreme_group(Z, rows, taken, r, k, dist, best_d, best_i)
    s_pos = -1
    s_d = -1.0
    for t in range(m):  # dist holds the distances to r
        if not taken[t] and dist[t] > s_d:
            s_d = dist[t]
            s_pos = t
    second = _extreme_group(Z, rows, taken, s_pos, k, dist, best_d, best_i)
    active = np.ones(m, dtype=np.bool_)
    for grp in (first, second):
        name = grp.min()
        for j in range(d):
            acc = 0.0
            for t in range(k):
                acc += Z[rows[grp[t]], j]
            cent[name, j] = acc / k
            Y[j, name] = cent[name, j]
        size[name] = k
        for t in range(k):
            if grp[t] != name:
                active[grp[t]] = False
                root[grp[t]] = name
    # step 2: constrained Ward
    nn = np.full(m, -1, dtype=np.int64)
    nn_cost = np.full(m, np.inf)
    stale = np.zeros(m, dtype=np.bool_)
    for x in range(m):
        if active[x] and size[x] < k:
            _rescan(Y, cent, size, active, x, nn, nn_cost, dist)
    while True:
        x = -1
        x_c = np.inf
        for y in range(m):
            if active[y] and size[y] < k:
                if nn_cost[y] < x_c:  # strict: the lowest name wins ties
                    x_c = nn_cost[y]
                    x = y
        if x < 0:
            break
        if stale[x]:
            _rescan(Y, cent, size, active, x, nn, nn_cost, dist)
            stale[x] = False
            continue
        y = nn[x]
        a = min(x, y)
        b = max(x, y)
        total = size[a] + size[b]
        for j in range(d):
            cent[a, j] = (size[a] * cent[a, j] + size[b] * cent[b, j]) / total
            Y[j, a] = cent[a, j]
        size[a] = total
        active[b] = False
        root[b] = a
        _distances_to(Y, m, cent[a], dist)  # the union's distances: for the partners below, and its own
        for z in range(m):
            if not active[z] or size[z] >= k or z == a:
                continue
            if nn[z] == x or nn[z] == y:
                stale[z] = True  # its cost stays as a lower bound (reducibility)
            elif not stale[z]:
                c = _ward_cost(size[z], size[a], dist[z])
                if c < nn_cost[z] or (c == nn_cost[z] and a < nn[z]):
                    nn_cost[z] = c
                    nn[z] = a
        if size[a] < k:
            _partner(size, active, a, dist, nn, nn_cost)
            stale[a] = False
    # resolve every position to its cluster's name, then number the clusters by name
    for t in range(m):
        q = t
        while root[q] != q:
            q = root[q]
        root[t] = q
    number = np.full(m, -1, dtype=np.int64)
    n_clusters = 0
    labels = np.empty(m, dtype=np.int64)
    for t in range(m):
        q = root[t]
        if number[q] < 0:
            number[q] = n_clusters
            n_clusters += 1
        labels[t] = number[q]
    return labels


@jit
def _all_copies(Z, rows):
    """Whether the rows are all copies of one finite record (:mod:`.ties`' rule: ``==`` column by column)."""
    if not _finite_row(Z, rows[0]):
        return False
    for t in range(1, rows.shape[0]):
        if not _same_row(Z, rows[0], rows[t]):
            return False
    return True


@jit
def _copies_split(rows, k):
    """The final groups of ``len(rows) >= 2k`` copies of one record, as :func:`_split`'s passes and
    the recursion over them end, in closed form: every merge costs 0, so each pass keeps its second
    extreme group (positions k..2k-1) and merges every other record into the first one (positions
    0..k-1: the lowest name wins the ties), which the next pass splits again; what is left at the
    end is the first k rows and the last ``len(rows) mod k``. Labels: k rows in row order per group,
    the last ``len(rows) mod k`` rows in the first group (every group under 2k: none is split again).
    (Where rounding puts a centroid of copies a bit away from them, :func:`_split` merges the
    records among themselves first, and the leftover rows end in another group; any of these
    partitions has no loss.)"""
    m = rows.shape[0]
    full = m // k
    labels = np.empty(m, dtype=np.int64)
    for t in range(m):
        labels[t] = t // k if t < full * k else 0
    return labels


@jit
def kward(Z, k):
    """k-Ward labels for ``Z`` (``(n, d)`` float64, C-contiguous, ``n >= k >= 2``).

    Returns int64 labels ``0..g-1`` numbered by each group's lowest row index; every group has
    k..2k-1 records.
    """
    n = Z.shape[0]
    labels = np.zeros(n, dtype=np.int64)
    if n < 2 * k:
        return labels
    rows = np.arange(n)  # segments of rows still to split, each ascending
    seg_start = np.empty(n // k + 1, dtype=np.int64)
    seg_end = np.empty(n // k + 1, dtype=np.int64)
    seg_start[0] = 0
    seg_end[0] = n
    top = 1
    group = 0
    while top > 0:
        top -= 1
        s = seg_start[top]
        e = seg_end[top]
        sub = rows[s:e].copy()
        local = _copies_split(sub, k) if _all_copies(Z, sub) else _split(Z, sub, k)
        n_local = local.max() + 1
        counts = np.zeros(n_local + 1, dtype=np.int64)
        for t in range(sub.shape[0]):
            counts[local[t] + 1] += 1
        for c in range(n_local):
            counts[c + 1] += counts[c]
        fill = counts[:-1].copy()
        for t in range(sub.shape[0]):  # stable: each cluster's rows stay ascending
            c = local[t]
            rows[s + fill[c]] = sub[t]
            fill[c] += 1
        for c in range(n_local):
            a = s + counts[c]
            b = s + counts[c + 1]
            if b - a >= 2 * k:
                seg_start[top] = a
                seg_end[top] = b
                top += 1
            else:
                for t in range(a, b):
                    labels[rows[t]] = group
                group += 1
    # number the groups by their lowest row index
    number = np.full(group, -1, dtype=np.int64)
    nxt = 0
    for i in range(n):
        g = labels[i]
        if number[g] < 0:
            number[g] = nxt
            nxt += 1
        labels[i] = number[g]
    return labels
