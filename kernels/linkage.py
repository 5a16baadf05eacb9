"""Exact nearest-original search for distance-based record linkage (DLD): a kd-tree in Numba.

Distance-based record linkage (Pagliuca and Seri, 1999; the DLD of Domingo-Ferrer and Torra, 2001)
links each masked record to the original record(s) nearest to it. These kernels answer, for every
query (masked record), three things about a set of originals:

* ``best``: the smallest squared Euclidean distance from the query to an original;
* ``count``: how many originals are at exactly that distance;
* ``own``: whether the query's own record (same id) is one of them.

The answer is exact, and it is *mergeable*: the answer against a union of disjoint sets of originals
is :func:`combine_links` of the answers against each set (smaller distance wins; equal distances add
their counts and OR their flags). A distributed driver therefore lets each spatial block of originals
answer the queries routed to it and merges the results; a query needs to visit a block only when
:func:`box_lower_bound` of the block's bounding box is ``<=`` the query's current best (``<=``, not
``<``: an original at exactly the best distance changes the count).

Exactness in floating point. The squared distance of a point ``x`` to a query ``q`` is always
computed the same way, ``sum_j (x_j - q_j)**2`` accumulated from 0.0 in column order, so it does not
depend on the tree, the block or the order of the work; two originals tie when these computed values
are equal (exact duplicates always tie). The box bound accumulates, in the same order, the squares of
``lo_j - q_j`` or ``q_j - hi_j`` (0 inside the slab). Rounded subtraction, squaring and addition of
non-negative numbers are monotone, so for every point inside the box the computed bound is ``<=``
the computed distance: pruning a box whose bound is ``> best`` never drops an original at distance
``<= best``. The scan of a point stops as soon as its partial sum exceeds ``best`` (the remaining
terms are non-negative, so the full sum would too). No ``fastmath`` (it would allow reassociation).

The ``own`` flag compares ids, so it is meaningful when each tree point is one original; a tree
over collapsed duplicates (``weights`` > 1) counts originals correctly and leaves ``own`` to the
caller, who decides it exactly as ``paired_distances(own original, query) == best``.

The tree. Built by recursive median splits (iteratively, with an explicit stack) along the widest
side of each node's bounding box, until a node holds at most ``leaf_size`` points or all its points
coincide; every node keeps the tight bounding box of its points. Points are stored in tree order
(each node covers a contiguous row range), so a leaf scan reads consecutive memory. Queries descend
branch-and-bound, nearer child first. Memory is O(n d); no n x n matrix is ever formed.

References
----------
Pagliuca, D. and Seri, G. (1999). Some results of individual ranking method on the system of
enterprise accounts annual survey. Esprit SDC Project, Deliverable MI-3/D2.
Domingo-Ferrer, J. and Torra, V. (2001). A quantitative comparison of disclosure control methods for
microdata. In Confidentiality, Disclosure and Data Access, Elsevier, 111-133 (see
``shared/papers/mic1d-one-dimension-microaggregation.txt`` section 2.3).
Friedman, J. H., Bentley, J. L. and Finkel, R. A. (1977). An algorithm for finding best matches in
logarithmic expected time. ACM TOMS 3(3), 209-226.
"""

import numpy as np

from ._jit import jit

LEAF_SIZE = 32
"""Default largest number of points in a leaf. Measured on 1M clustered records x 13 columns: 32 was
fastest for self-linkage with noise (16 and 64: ~1.3x slower), 16 ~15% faster for centroid queries."""

_STACK = 256  # a median split halves a node, so the depth is < 64 + 1 even for 2**63 points


@jit
def _select(keys, idx, start, end, kth):
    """Reorder ``keys[start:end]`` (and ``idx`` alongside) so that position ``kth`` holds the value
    it would hold sorted, with no larger key before it and no smaller one after (Hoare's select,
    median-of-three pivot; deterministic)."""
    lo = start
    hi = end - 1
    while hi > lo:
        a = keys[lo]
        b = keys[(lo + hi) // 2]
        c = keys[hi]
        if a > b:
            a, b = b, a
        if b > c:
            b = c
        pivot = a if a > b else b  # the median of the three
        i = lo
        j = hi
        while i <= j:
            while keys[i] < pivot:
                i += 1
            while keys[j] > pivot:
                j -= 1
            if i <= j:
                keys[i], keys[j] = keys[j], keys[i]
                idx[i], idx[j] = idx[j], idx[i]
                i += 1
                j -= 1
        # now keys[lo..j] <= pivot, keys[i..hi] >= pivot and keys[j+1..i-1] == pivot
        if kth <= j:
            hi = j
        elif kth >= i:
            lo = i
        else:
            return


@jit
def _bounding_box(P, idx, start, end, lo, hi, node):
    d = P.shape[1]
    for j in range(d):
        lo[node, j] = np.inf
        hi[node, j] = -np.inf
    for t in range(start, end):
        r = idx[t]
        for j in range(d):
            v = P[r, j]
            if v < lo[node, j]:
                lo[node, j] = v
            if v > hi[node, j]:
                hi[node, j] = v


@jit
def build_tree(P, ids, weights, leaf_size):
    """A kd-tree over the rows of ``P`` (C-contiguous float64 ``(n, d)``, ``n`` may be 0).

    ``ids`` (int64, ``(n,)``) are the rows' record ids (global row ids in a distributed driver);
    ``weights`` (int64, ``(n,)``) the number of originals each row stands for (1, or the
    multiplicity of a distinct tuple when duplicates were collapsed: a leaf of thousands of identical
    points would otherwise be scanned by every query near it). Returns ``(points, point_ids,
    point_weights, start, end, left, right, lo, hi)``: the points, ids and weights in tree order;
    per node the row range ``[start, end)`` it covers, its children (``-1`` for a leaf) and its
    bounding box ``lo``/``hi`` (``(nodes, d)``). Node 0 is the root; an empty tree has one leaf with
    an empty box (``lo = +inf``, ``hi = -inf``), which every query prunes.
    """
    n, d = P.shape
    leaf_size = max(leaf_size, 1)
    # both halves of a split node hold more than leaf_size / 2 points: at most 4n / leaf_size + 1 nodes
    max_nodes = 4 * (n // leaf_size + 1) + 1
    start = np.empty(max_nodes, dtype=np.int64)
    end = np.empty(max_nodes, dtype=np.int64)
    left = np.full(max_nodes, -1, dtype=np.int64)
    right = np.full(max_nodes, -1, dtype=np.int64)
    lo = np.empty((max_nodes, d))
    hi = np.empty((max_nodes, d))
    idx = np.arange(n)
    keys = np.empty(n)
    todo = np.empty(_STACK, dtype=np.int64)
    start[0] = 0
    end[0] = n
    nodes = 1
    todo[0] = 0
    top = 1
    while top > 0:
        top -= 1
        node = todo[top]
        s = start[node]
        e = end[node]
        _bounding_box(P, idx, s, e, lo, hi, node)
        if e - s <= leaf_size:
            continue
        dim = 0
        spread = hi[node, 0] - lo[node, 0]
        for j in range(1, d):
            w = hi[node, j] - lo[node, j]
            if w > spread:
                spread = w
                dim = j
        if not spread > 0.0:  # every point of the node coincides: nothing to split
            continue
        for t in range(s, e):
            keys[t] = P[idx[t], dim]
        mid = s + (e - s) // 2
        _select(keys, idx, s, e, mid)
        a = nodes
        b = nodes + 1
        nodes += 2
        start[a] = s
        end[a] = mid
        start[b] = mid
        end[b] = e
        left[node] = a
        right[node] = b
        todo[top] = b
        todo[top + 1] = a
        top += 2
    points = np.empty((n, d))
    point_ids = np.empty(n, dtype=np.int64)
    point_weights = np.empty(n, dtype=np.int64)
    for t in range(n):
        r = idx[t]
        point_ids[t] = ids[r]
        point_weights[t] = weights[r]
        for j in range(d):
            points[t, j] = P[r, j]
    return (points, point_ids, point_weights, start[:nodes].copy(), end[:nodes].copy(), left[:nodes].copy(),
            right[:nodes].copy(), lo[:nodes].copy(), hi[:nodes].copy())


@jit
def _node_bound(q, lo, hi, node):
    """Squared distance from ``q`` to the box of ``node`` (see the module notes on exactness)."""
    s = 0.0
    for j in range(q.shape[0]):
        if q[j] < lo[node, j]:
            t = lo[node, j] - q[j]
            s += t * t
        elif q[j] > hi[node, j]:
            t = q[j] - hi[node, j]
            s += t * t
    return s


@jit
def box_lower_bound(q, lo, hi):
    """Squared Euclidean distance from the point ``q`` (``(d,)``) to the box ``[lo, hi]``: 0 inside,
    and never more than the distance :func:`query_tree` computes to any point of the box."""
    s = 0.0
    for j in range(q.shape[0]):
        if q[j] < lo[j]:
            t = lo[j] - q[j]
            s += t * t
        elif q[j] > hi[j]:
            t = q[j] - hi[j]
            s += t * t
    return s


@jit
def box_lower_bounds(Q, lo, hi):
    """:func:`box_lower_bound` of every row of ``Q`` (``(m, d)``) to one box: the routing test of a
    distributed driver (send query ``i`` to the block with box ``[lo, hi]`` iff ``bound[i] <= best[i]``)."""
    m = Q.shape[0]
    out = np.empty(m)
    for i in range(m):
        out[i] = box_lower_bound(Q[i], lo, hi)
    return out


@jit
def query_tree(points, point_ids, point_weights, start, end, left, right, lo, hi,  # the tree
               Q, qids, bound):
    """Exact nearest originals of each query: ``(best, count, own)`` for the rows of ``Q`` (``(m, d)``).

    ``best[i]``: smallest squared distance from ``Q[i]`` to a point of the tree, if it is at most
    ``bound[i]``; ``count[i]``: number of originals at exactly that distance (the sum of the points'
    weights); ``own[i]``: whether a point with id ``qids[i]`` is among them. Points farther than
    ``bound[i]`` are not looked for: when none is within the bound the answer is
    ``(bound[i], 0, False)``, which :func:`combine_links` merges correctly with the answer that set
    the bound. So ``bound`` may be ``inf`` (a plain search), the best distance found so far in other
    blocks (a distributed driver), or the distance to any point known to be in the tree
    (:func:`paired_distances`); a tighter bound prunes more. The tree arrays
    are those of :func:`build_tree`.
    """
    m, d = Q.shape
    best = np.empty(m)
    count = np.zeros(m, dtype=np.int64)
    own = np.zeros(m, dtype=np.bool_)
    stack_node = np.empty(_STACK, dtype=np.int64)
    stack_bound = np.empty(_STACK)
    for i in range(m):
        q = Q[i]
        qid = qids[i]
        b = bound[i]
        c = 0
        o = False
        stack_node[0] = 0
        stack_bound[0] = _node_bound(q, lo, hi, 0)
        top = 1
        while top > 0:
            top -= 1
            node = stack_node[top]
            if stack_bound[top] > b:
                continue
            a = left[node]
            if a < 0:
                for t in range(start[node], end[node]):
                    s = 0.0
                    j = 0
                    while j < d:  # a check every 4 terms: 1.5x faster than every term at d = 13
                        stop = min(j + 4, d)
                        while j < stop:
                            u = points[t, j] - q[j]
                            s += u * u
                            j += 1
                        if s > b:
                            break
                    if s < b:
                        b = s
                        c = point_weights[t]
                        o = point_ids[t] == qid
                    elif s == b:
                        c += point_weights[t]
                        if point_ids[t] == qid:
                            o = True
                continue
            z = right[node]
            ba = _node_bound(q, lo, hi, a)
            bz = _node_bound(q, lo, hi, z)
            if bz < ba:  # visit the nearer child first: push it last
                a, z = z, a
                ba, bz = bz, ba
            if bz <= b:
                stack_node[top] = z
                stack_bound[top] = bz
                top += 1
            if ba <= b:
                stack_node[top] = a
                stack_bound[top] = ba
                top += 1
        best[i] = b
        count[i] = c
        own[i] = o
    return best, count, own


@jit
def route_cells(Z, dim, threshold, left, right):
    """The cell of every row of ``Z`` in a tree of axis-aligned splits: from node 0, a row goes to
    ``left[node]`` if ``Z[row, dim[node]] <= threshold[node]`` (a NaN goes right), else to ``right[node]``; a
    child ``c < 0`` is cell ``-1 - c``. No node: every row is in cell 0. Row by row, one pass (the NumPy
    version walked the rows level by level, gathering the rows still inside at each level: 3 of the 10M-row
    evaluation's thread-seconds, BENCHMARKS.md, sixtieth session)."""
    n = Z.shape[0]
    out = np.zeros(n, dtype=np.int64)
    if threshold.shape[0] == 0:
        return out
    for i in range(n):
        node = 0
        while True:
            child = left[node] if Z[i, dim[node]] <= threshold[node] else right[node]
            if child < 0:
                out[i] = -1 - child
                break
            node = child
    return out


@jit
def paired_distances(A, B):
    """``sum_j (A[i, j] - B[i, j])**2`` per row, computed exactly as :func:`query_tree` computes the
    distance from query ``B[i]`` to the point ``A[i]`` (same operations, same order): a valid
    starting ``bound`` for the queries whose own record ``A[i]`` is in the tree."""
    m, d = A.shape
    out = np.empty(m)
    for i in range(m):
        s = 0.0
        for j in range(d):
            u = A[i, j] - B[i, j]
            s += u * u
        out[i] = s
    return out


@jit
def combine_links(best_a, count_a, own_a, best_b, count_b, own_b):
    """Merge two answers for the same queries against disjoint sets of originals, elementwise: the
    smaller distance wins; at equal distances the counts add and the own flags are OR-ed. Associative
    and commutative, so any merge order of any split gives the one-shot answer exactly."""
    m = best_a.shape[0]
    best = np.empty(m)
    count = np.empty(m, dtype=np.int64)
    own = np.empty(m, dtype=np.bool_)
    for i in range(m):
        if best_a[i] < best_b[i]:
            best[i] = best_a[i]
            count[i] = count_a[i]
            own[i] = own_a[i]
        elif best_b[i] < best_a[i]:
            best[i] = best_b[i]
            count[i] = count_b[i]
            own[i] = own_b[i]
        else:
            best[i] = best_a[i]
            count[i] = count_a[i] + count_b[i]
            own[i] = own_a[i] or own_b[i]
    return best, count, own
