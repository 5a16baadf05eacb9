"""V-MDAV (variable-size MDAV) of Solanas and Martinez-Balleste, with gain factor gamma.

The algorithm of ``shared/papers/comparative-study-microaggregation.txt`` section 3.6 (also
``shared/papers/optimal-univariate-noise-microaggregation.txt`` section F)::

    c = centroid of the whole data set (computed once)
    while at least k records are unassigned:
        e = the unassigned record farthest from c
        group e with its k-1 nearest unassigned records
        extend the group: while it has fewer than 2k-1 records,
            u     = the unassigned record nearest to the group (to its nearest member): d_in
            d_out = the distance from u to its nearest other unassigned record
            if d_in < gamma * d_out: add u to the group, else stop extending
    each remaining unassigned record (fewer than k) joins the group with the nearest centroid

gamma = 0 never extends (fixed-size groups of k, one per iteration, around the farthest record from
the *fixed* centroid); the paper recommends gamma = 0.2 for scattered data (census) and gamma = 1.1
for clustered data (EIA). The default is 0.2.

Two readings the published figures decide (Tables 6 and 7 of the comparative study, which quote
Solanas and Martinez-Balleste 2006):

* The centroid is that of the whole data set, computed once (step 2 of the paper's listing comes
  before the loop of steps 3-5). With gamma = 0 this reproduces the paper's own MDAV row, census
  5.66 / 7.51 / 9.01 / 14.07 and EIA 0.49 / 0.67 / 1.78 / 3.54 (ours: 5.662 / 7.514 / 9.007 /
  14.073 and 0.488 / 0.673 / 1.775 / 3.547); recomputing the centroid of the unassigned records
  each time, as classic MDAV does, gives 5.654 / 7.441 / 8.884 / 14.007 instead.
* d_in and d_out are *squared* Euclidean distances (the test is d_in^2 < gamma d_out^2). With plain
  distances and gamma = 0.2 no census group is ever extended (IL 5.662 / 9.007 / 14.073 at
  k = 3 / 5 / 10, the gamma = 0 figures), while the published V-MDAV row differs from the
  published MDAV row; with squared distances the census figures are reproduced.

Reproduction (IL = 100 SSE / SST on z-scores; published: comparative study Tables 6-7):
census (gamma = 0.2) k = 3 / 4 / 5 / 10: 5.689 / 7.518 / 8.978 / 14.043 (published 5.69 / 7.52 /
8.98 / 14.07); EIA (gamma = 1.1): 0.506 / 0.969 / 1.297 / 2.823 (published 0.53 / 0.75 / 1.30 /
2.82). EIA at k = 3 and 4 is not reproduced (4.5% and 29% off): on EIA the result jumps with small
changes of the rule (at k = 4 the IL is 0.763 at gamma = 0.9 and 0.962 at gamma = 1.0), and none of
the other readings tried (candidate nearest to the seed record or to the group centroid, non-strict
comparison, the last instead of the first record on ties, leftovers to the group of their nearest
record) reproduces those two cells while keeping the others. The Das-Borah paper
(``dbm-density-based-microaggregation.txt`` Table 2) quotes SSEs for the same method that agree
with ours on census (798.70 vs 798.49 at k = 3, 1260.56 vs 1260.56 at k = 5) and at EIA k = 10
(1270.90 vs 1270.90), but its EIA k = 5 SSE (511.20, IL 1.136) contradicts the comparative study's
1.30, which ours matches.

Groups have k..2k-1 records when formed, but the final step can add leftover records to a group
that already has 2k-1: the method does not promise an upper bound (``bounded=False``).

Memory O(n d): distances are computed on the fly (the paper's distance matrix is not stored);
time O(n^2 d), the paper's O(n^2).

Tie-breaking (deterministic, a function of the row order only): among records at equal distance the
one with the lowest row index is the farthest, the nearest, and the extension candidate; a leftover
record at equal distance from two centroids joins the group formed first. Groups are numbered in
order of formation.

References
----------
Solanas, A. and Martinez-Balleste, A. (2006). V-MDAV: a multivariate microaggregation with variable
group size. COMPSTAT 2006, 917-925. As described in Chettri, Paul and Dutta, A comparative study on
microaggregation techniques for microdata protection, section 3.6
(shared/papers/comparative-study-microaggregation.txt).
"""

import numpy as np

from ._jit import jit
from .groups import attach_leftovers
from .mdav import _compact_carrying, _distances_to
from .select import keep_smallest


@jit
def vmdav(Z, k, gamma):
    """V-MDAV labels for ``Z`` (``(n, d)`` float64, C-contiguous, ``n >= k >= 2``), gain ``gamma >= 0``.

    Returns int64 labels ``0..g-1`` numbered in order of formation; every group has at least k
    records (at most 2k-1 when formed; leftovers can push one past it).
    """
    n, d = Z.shape
    labels = np.full(n, -1, dtype=np.int64)
    if n < 2 * k:
        labels[:] = 0
        return labels
    Y = np.empty((d, n))
    centroid = np.zeros(d)
    for i in range(n):
        for j in range(d):
            Y[j, i] = Z[i, j]
            centroid[j] += Z[i, j]
    for j in range(d):
        centroid[j] /= n
    far = np.empty(n)  # squared distance to the fixed centroid, compacted with the records
    _distances_to(Y, n, centroid, far)
    ids = np.arange(n)
    alive = np.ones(n, dtype=np.bool_)
    dist = np.empty(n)
    near = np.empty(n)  # squared distance to the nearest member of the group being extended
    work = np.empty(n)
    best_d = np.empty(k - 1)
    best_i = np.empty(k - 1, dtype=np.int64)
    m = n
    left = n
    group = 0
    while left >= k:
        e = -1
        e_d = -1.0
        for i in range(m):
            if alive[i] and far[i] > e_d:  # strict: the lowest row index is the farthest on ties
                e_d = far[i]
                e = i
        _distances_to(Y, m, Y[:, e].copy(), dist)
        filled = 0
        for i in range(m):
            if alive[i] and i != e:
                filled = keep_smallest(best_d, best_i, filled, dist[i], i)
        alive[e] = False
        labels[ids[e]] = group
        for t in range(k - 1):
            alive[best_i[t]] = False
            labels[ids[best_i[t]]] = group
        if gamma > 0.0:  # the distances to the group's nearest member, for the extension
            for i in range(m):
                near[i] = dist[i]
            for t in range(k - 1):
                _distances_to(Y, m, Y[:, best_i[t]].copy(), work)
                for i in range(m):
                    if work[i] < near[i]:
                        near[i] = work[i]
        left -= k
        size = k
        while gamma > 0.0 and size < 2 * k - 1 and left > 0:
            u = -1
            d_in = np.inf
            for i in range(m):
                if alive[i] and near[i] < d_in:  # strict: the lowest row index wins ties
                    d_in = near[i]
                    u = i
            _distances_to(Y, m, Y[:, u].copy(), work)
            d_out = np.inf  # no other unassigned record: u has no neighbour outside the group
            for i in range(m):
                if alive[i] and i != u and work[i] < d_out:
                    d_out = work[i]
            if not d_in < gamma * d_out:
                break
            alive[u] = False
            labels[ids[u]] = group
            left -= 1
            size += 1
            for i in range(m):
                if work[i] < near[i]:
                    near[i] = work[i]
        group += 1
        # assigned records still cost a distance each per pass: compact when they exceed 1/8
        if 8 * (m - left) > m:
            m = _compact_carrying(Y, ids, far, alive, m)
    if left > 0:
        attach_leftovers(Z, labels, group)
    return labels
