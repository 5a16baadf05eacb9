"""Optimal partition of an ordered sequence into contiguous groups of k..2k-1 records.

Hansen and Mukherjee (2003) showed that optimal univariate microaggregation is a shortest path over
the sorted values: node i is "the first i values are grouped", an edge i -> j (k <= j - i <= 2k-1)
is the group of values i..j-1 and costs that group's SSE. MHM (Domingo-Ferrer, Martinez-Balleste,
Mateo-Sanz and Sebe, 2006) applies the same shortest path to records in a multivariate ordering,
the edge cost being the multivariate SSE of the segment: this kernel serves both (``d == 1`` for
the univariate case) and is the engine of the projection methods (PCP, Z-scores).

Cost of a segment in O(d): for a fixed segment end ``j`` the candidate starts are visited from
``j`` backwards, keeping running sums of ``x`` and ``||x||^2`` of the segment, so every new start
adds one record in O(d), exactly what differences of prefix sums give. The running sums are taken
relative to the segment's last record, so the costs do not suffer the cancellation that global
prefix sums of ``x^2`` suffer on millions of records (their totals grow with n while segment costs
stay small). Total work O(n k d), memory O(n).

Tie-breaking: among optimal predecessors the shortest segment (the latest start) wins, so the
result is a deterministic function of the ordered input.

References
----------
Hansen, S. L. and Mukherjee, S. (2003). A polynomial algorithm for optimal univariate
microaggregation. IEEE TKDE 15(4), 1043-1044.
Domingo-Ferrer, J., Martinez-Balleste, A., Mateo-Sanz, J. M. and Sebe, F. (2006). Efficient
multivariate data-oriented microaggregation. The VLDB Journal 15(4), 355-369.
"""

import numpy as np

from ._jit import jit


@jit
def optimal_contiguous(Z, order, k):
    """Optimal contiguous k..2k-1 partition of the records of ``Z`` taken in ``order``.

    Parameters
    ----------
    Z : (n, d) float64, C-contiguous
    order : (n,) int64, a permutation of ``0..n-1`` (row indices in sequence order)
    k : int, ``2 <= k <= n``

    Returns
    -------
    labels : (n,) int64, groups numbered ``0..g-1`` along the order
    cost : float, the total within-group SSE of the optimum
    """
    n, d = Z.shape
    big = 2 * k - 1
    best = np.full(n + 1, np.inf)
    pred = np.full(n + 1, -1, dtype=np.int64)
    best[0] = 0.0
    s = np.empty(d)
    for j in range(k, n + 1):          # the segment is order[i:j]
        last = order[j - 1]
        for t in range(d):
            s[t] = 0.0
        q = 0.0
        lo = j - big
        if lo < 0:
            lo = 0
        for i in range(j - 1, lo - 1, -1):
            row = order[i]
            for t in range(d):
                x = Z[row, t] - Z[last, t]
                s[t] += x
                q += x * x
            size = j - i
            if size < k or best[i] == np.inf:
                continue
            ss = 0.0
            for t in range(d):
                ss += s[t] * s[t]
            cost = q - ss / size
            if cost < 0.0:
                cost = 0.0
            total = best[i] + cost
            if total < best[j]:
                best[j] = total
                pred[j] = i
    labels = np.empty(n, dtype=np.int64)
    # walk the predecessors back from n, then renumber groups along the order
    n_groups = 0
    j = n
    while j > 0:
        n_groups += 1
        j = pred[j]
    g = n_groups - 1
    j = n
    while j > 0:
        i = pred[j]
        for t in range(i, j):
            labels[order[t]] = g
        g -= 1
        j = i
    return labels, best[n]


@jit
def univariate_optimal(x, k):
    """Optimal univariate microaggregation of the values ``x`` (1-D float64): labels and SSE.

    Values are sorted (stable, so equal values keep their input order) and the Hansen-Mukherjee
    shortest path is taken over the sorted sequence.
    """
    order = np.argsort(x, kind="mergesort")
    Z = x.reshape((x.shape[0], 1)).copy()
    return optimal_contiguous(Z, order, k)
