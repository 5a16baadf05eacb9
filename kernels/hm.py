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
    Zo = np.empty((n, d))
    for i in range(n):
        for t in range(d):
            Zo[i, t] = Z[order[i], t]
    best = np.full(n + 1, np.inf)
    pred = np.full(n + 1, -1, dtype=np.int64)
    best[0] = 0.0
    shortest_path_step(Zo, np.zeros(n, dtype=np.int64), best, pred, 0, k, False, -1)
    nodes = walk_back(pred, n, 0)  # n, ..., 0
    labels = np.empty(n, dtype=np.int64)
    n_groups = nodes.shape[0] - 1
    for g in range(n_groups):
        for t in range(nodes[n_groups - g], nodes[n_groups - g - 1]):
            labels[order[t]] = g
    return labels, best[n]


@jit
def shortest_path_step(Zo, stratum, best, pred, start, k, fixed, next_stratum):
    """Extend the shortest path over the ordered rows ``Zo`` from node ``start`` to node ``len(Zo)``.

    Node ``j`` means "the first j rows of ``Zo`` are grouped"; an edge ``i -> j`` is the group of rows
    ``i..j-1`` (k..2k-1 of them, all of one ``stratum``: the sequence is sorted by stratum first,
    so no group crosses a stratum boundary). ``best[:start + 1]`` must hold the path costs of the
    nodes already solved (``inf``: unreachable); ``best[start + 1:]`` and ``pred[start + 1:]`` are
    filled. The rows before ``start`` may be the tail of a previous chunk of the same sequence: a
    node depends only on the 2k-1 rows and nodes before it, so solving a long sequence chunk by chunk
    (each chunk preceded by the previous chunk's last 2k-2 rows and 2k-1 nodes) gives bitwise the
    same costs and predecessors as solving it at once.

    ``fixed``: the classic fixed-size grouping instead of the optimum: groups of exactly k from each
    stratum's start, the last group of a stratum taking the remainder (k..2k-1 rows).
    ``next_stratum``: the stratum of the row after ``Zo`` (-1: none, the sequence ends here), which
    tells whether node ``len(Zo)`` closes a stratum.
    """
    n, d = Zo.shape
    big = 2 * k - 1
    s = np.empty(d)
    for j in range(start + 1, n + 1):
        best[j] = np.inf
        pred[j] = -1
        if fixed:
            # a stratum's end accepts its one reachable k..2k-1 segment; any other node only size k
            if j < n:
                closes = stratum[j] != stratum[j - 1]
            else:
                closes = next_stratum != stratum[n - 1]
            shortest = big if closes else k
        else:
            shortest = big
        last = j - 1
        for t in range(d):
            s[t] = 0.0
        q = 0.0
        lo = j - shortest
        if lo < 0:
            lo = 0
        for i in range(j - 1, lo - 1, -1):  # the segment is rows i..j-1, visited from its end
            if stratum[i] != stratum[last]:
                break
            for t in range(d):
                x = Zo[i, t] - Zo[last, t]
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


@jit
def walk_back(pred, end, stop):
    """The nodes met following the predecessors from node ``end`` while above node ``stop``: the
    group boundaries ``end > pred[end] > ... >= the first node <= stop`` (all of them kept, the last
    one included), in that descending order."""
    count = 1
    j = end
    while j > stop:
        j = pred[j]
        count += 1
    nodes = np.empty(count, dtype=np.int64)
    j = end
    nodes[0] = j
    for t in range(1, count):
        j = pred[j]
        nodes[t] = j
    return nodes


@jit
def univariate_optimal(x, k):
    """Optimal univariate microaggregation of the values ``x`` (1-D float64): labels and SSE.

    Values are sorted (stable, so equal values keep their input order) and the Hansen-Mukherjee
    shortest path is taken over the sorted sequence.
    """
    order = np.argsort(x, kind="mergesort")
    Z = x.reshape((x.shape[0], 1)).copy()
    return optimal_contiguous(Z, order, k)
