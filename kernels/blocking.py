"""Kernels of the spatial blocking: a deterministic row sample and routing rows down a split tree."""

import numpy as np

from ._jit import inline_jit, jit
from .eigen import principal_axis

_U64 = np.uint64


@jit
def splitmix64(x):
    """The splitmix64 finaliser: a well-mixed 64-bit hash of a 64-bit integer."""
    z = x + _U64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    return z ^ (z >> _U64(31))


@jit
def sample_mask(row_ids, seed, threshold):
    """``True`` for the rows whose hash of (global row id, seed) falls below ``threshold`` (uint64).

    Depends only on the row id and the seed: the same rows are sampled however the input is split.
    """
    n = row_ids.shape[0]
    out = np.empty(n, dtype=np.bool_)
    s = splitmix64(_U64(seed))
    for i in range(n):
        out[i] = splitmix64(_U64(row_ids[i]) ^ s) < threshold
    return out


@jit
def row_hashes(X, seed):
    """A 64-bit hash of every row's values and ``seed``: equal rows hash equally (``-0.0`` as ``0.0``,
    they compare equal), wherever they are. The hash chains splitmix64 over the bits of every value in
    column order."""
    n, d = X.shape
    out = np.empty(n, dtype=np.uint64)
    s = splitmix64(_U64(seed))
    bits = np.empty(1, dtype=np.float64)
    word = bits.view(np.uint64)
    for i in range(n):
        h = s
        for j in range(d):
            bits[0] = X[i, j] + 0.0
            h = splitmix64(h ^ word[0])
        out[i] = h
    return out


@jit
def rows_equal_first(X, codes, first):
    """Whether every row of ``X`` equals, value by value, the first row of its code (``X[first[codes[i]]]``):
    the check that a grouping by hash put only equal rows together."""
    n, d = X.shape
    for i in range(n):
        f = first[codes[i]]
        for j in range(d):
            if X[i, j] != X[f, j]:
                return False
    return True


ROUTE_BATCH = 8
"""Rows that descend the split tree side by side. One row's descent is a chain of dependent dot
products and branches; eight independent chains keep the core busy (route_raw on 1M rows x 13
columns, 8,192 leaves: 0.108 s against 0.255 s one row at a time; 4 rows 0.120 s, 16 or more 0.11 s)."""


@inline_jit
def _descend(Z, first, m, directions, thresholds, left, right, node, leaves, out):
    """Leaf ids of rows ``first..first + m - 1`` of ``Z`` into ``leaves[out..out + m - 1]`` (see
    :func:`route`), the rows descending side by side; ``node``: scratch of at least m ints."""
    for r in range(m):
        node[r] = 0
    active = m
    while active > 0:
        active = 0
        for r in range(m):
            t = node[r]
            if t < 0:
                continue
            p = 0.0
            for j in range(Z.shape[1]):
                p += Z[first + r, j] * directions[t, j]
            nxt = left[t] if p <= thresholds[t] else right[t]
            if nxt < 0:
                leaves[out + r] = -1 - nxt
                node[r] = -1
            else:
                node[r] = nxt
                active += 1


@jit
def route(Z, directions, thresholds, left, right):
    """Leaf id of every row of ``Z`` in a binary split tree.

    Node ``t`` sends a row left when ``z . directions[t] <= thresholds[t]``; ``left[t]`` /
    ``right[t]`` are child node ids, or ``-1 - leaf`` for a leaf. The dot product runs over the
    columns in order, so a row is routed the same way wherever it is processed.
    """
    n = Z.shape[0]
    leaves = np.zeros(n, dtype=np.int64)
    if thresholds.shape[0] == 0:
        return leaves
    node = np.empty(ROUTE_BATCH, dtype=np.int64)
    for start in range(0, n, ROUTE_BATCH):
        _descend(Z, start, min(ROUTE_BATCH, n - start), directions, thresholds, left, right, node, leaves, start)
    return leaves


@jit
def route_raw(X, mean, std, directions, thresholds, left, right):
    """:func:`route` of the z-scores of the raw rows ``X``, computed row by row instead of as a whole
    array: ``z = (x - mean) / std`` (0 where ``std == 0``), a missing z at 0 (the column mean), with the
    arithmetic of :func:`microagg.kernels.stats.standardize`, so every row goes to the leaf it reaches
    standardized first. ``X`` may be stored in either order."""
    n, d = X.shape
    scale = np.empty(d)
    for j in range(d):
        scale[j] = std[j] if std[j] > 0.0 else np.inf  # as standardize: x / inf == 0
    leaves = np.zeros(n, dtype=np.int64)
    if thresholds.shape[0] == 0:
        return leaves
    z = np.empty((ROUTE_BATCH, d))
    node = np.empty(ROUTE_BATCH, dtype=np.int64)
    for start in range(0, n, ROUTE_BATCH):
        m = min(ROUTE_BATCH, n - start)
        for r in range(m):
            for j in range(d):
                v = (X[start + r, j] - mean[j]) / scale[j]
                z[r, j] = 0.0 if np.isnan(v) else v
        _descend(z, 0, m, directions, thresholds, left, right, node, leaves, start)
    return leaves


@jit
def project(Z, direction):
    """``Z @ direction`` with a fixed summation order (the same arithmetic as :func:`route`)."""
    n, d = Z.shape
    out = np.empty(n)
    for i in range(n):
        p = 0.0
        for j in range(d):
            p += Z[i, j] * direction[j]
        out[i] = p
    return out


@inline_jit
def _at_or_below(s_first, s_second, j, a, b):
    """Whether splitter ``j`` is at or below the pair ``(a, b)``: a smaller first, or the same and a second
    not larger (bitwise: both sides evaluated, no branch)."""
    return (s_first[j] < a) | ((s_first[j] == a) & (s_second[j] <= b))


@jit
def pair_buckets(first, second, s_first, s_second):
    """The bucket of every pair ``(first[i], second[i])``: how many splitters ``(s_first, s_second)``
    (sorted by first, then second) are at or below it, so equal pairs share a bucket. It serves the
    sequence methods' ``(stratum, score)`` and the interval disclosure's ``(masked value, row id)``.

    A branchless binary search: every search takes ``ceil(log2 m)`` halvings whatever the data, and each
    halving a conditional move instead of a jump the processor mispredicts half the time. On 250,000
    values and 39 splitters, 13-19 ns a value against 27 ns with a branch and 47-72 ns for NumPy's
    ``searchsorted`` and its tie pass (BENCHMARKS.md, sixtieth session). Every comparison with a NaN is false
    (a pair whose first is NaN is in bucket 0); the interval disclosure refuses NaN before it gets here."""
    n = first.shape[0]
    m = s_first.shape[0]
    out = np.zeros(n, dtype=np.int64)
    if m == 0:
        return out
    for i in range(n):
        a = first[i]
        b = second[i]
        base = 0
        size = m
        while size > 1:  # the first splitter above the pair is in base .. base + size
            half = size >> 1
            base = base + half if _at_or_below(s_first, s_second, base + half, a, b) else base
            size -= half
        out[i] = base + _at_or_below(s_first, s_second, base, a, b)
    return out


@jit
def _cell_split(W, s, e, p, fraction, block_size, one_block_rows, min_child, fixed, root):
    """Whether :func:`grow_tree` splits the cell of rows ``W[s:e]`` (``root``: the whole input), and
    how: ``(split, direction, threshold, left rows, estimate)``, the rows' projections left in
    ``p[:e - s]``."""
    m = e - s
    estimate = m / fraction
    v = fixed
    threshold = 0.0
    n_left = 0
    if estimate > block_size and not (root and estimate <= one_block_rows) and m >= 2 * min_child:
        if fixed.shape[0] == 0:
            v = principal_axis(W, np.arange(s, e))
        d = W.shape[1]
        for i in range(m):
            acc = 0.0
            for j in range(d):
                acc += W[s + i, j] * v[j]
            p[i] = acc
        threshold = np.median(p[:m])
        for i in range(m):
            if p[i] <= threshold:
                n_left += 1
    return min_child <= n_left <= m - min_child, v, threshold, n_left, estimate


@jit
def split_cell(Z, fraction, block_size, one_block_rows, min_child, fixed, root):
    """The split :func:`grow_tree` makes of the cell of all rows of ``Z`` (``root``: the whole
    input): ``(split, direction, threshold, estimate, goes_left)``, ``goes_left[i]`` whether row i is
    on the split's left side (all False when there is no split). Growing each side's rows (in the
    same order) with ``root=False`` then gives that cell's subtrees."""
    n = Z.shape[0]
    p = np.empty(n)
    split, v, threshold, _, estimate = _cell_split(Z, 0, n, p, fraction, block_size, one_block_rows, min_child,
                                                   fixed, root)
    goes_left = np.zeros(n, dtype=np.bool_)
    if split:
        for i in range(n):
            goes_left[i] = p[i] <= threshold
    return split, v.copy(), threshold, estimate, goes_left


@jit
def grow_tree(Z, fraction, block_size, one_block_rows, min_child, fixed, root=True):
    """The split tree's nodes, grown from the sample ``Z`` (rows in row-id order) by recursive median
    splits (see :mod:`microagg.pipeline.blocking`).

    A cell of m sample rows stands for ``m / fraction`` input rows; it is split while that estimate
    exceeds ``block_size`` (the root not at all when it is at most ``one_block_rows``) and it has at
    least ``2 * min_child`` rows, at the median of its rows' projection on ``fixed`` (if given, else
    on the cell's own first principal direction); a split leaving fewer than ``min_child`` rows on a
    side is not made. Nodes and leaves are numbered in depth-first pre-order (left first), a cell's
    rows kept in row-id order. ``root=False``: ``Z`` is a cell below the root (a subtree, see
    :func:`split_cell`), to which the root's rule does not apply.

    Returns ``(directions, thresholds, left, right, estimates, n_leaves)``; ``left`` / ``right`` hold a
    child node id or ``-1 - leaf``.
    """
    n, d = Z.shape
    W = Z.copy()  # the rows, moved with every partition so that each cell's rows are contiguous
    spare = np.empty((n, d))
    p = np.empty(n)
    cap = n // max(min_child, 1) + 1  # every node has at least 2 * min_child rows, nodes nest
    directions = np.empty((cap, d))
    thresholds = np.empty(cap)
    left = np.empty(cap, dtype=np.int64)
    right = np.empty(cap, dtype=np.int64)
    estimates = np.empty(cap)
    stack = np.empty((cap + 2, 4), dtype=np.int64)  # (start, end, parent, side: 0 root, 1 left, 2 right)
    stack[0, 0] = 0
    stack[0, 1] = n
    stack[0, 2] = -1
    stack[0, 3] = 0
    top = 1
    n_nodes = 0
    n_leaves = 0
    while top > 0:
        top -= 1
        s, e, parent, side = stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3]
        m = e - s
        split, v, threshold, n_left, estimate = _cell_split(W, s, e, p, fraction, block_size, one_block_rows,
                                                            min_child, fixed, root and side == 0)
        if split:
            ref = n_nodes
            n_nodes += 1
            directions[ref] = v
            thresholds[ref] = threshold
            estimates[ref] = estimate
            a = s
            b = s + n_left
            for i in range(m):  # stable partition: each side keeps row-id order
                t = a
                if p[i] <= threshold:
                    a += 1
                else:
                    t = b
                    b += 1
                for j in range(d):
                    spare[t, j] = W[s + i, j]
            W[s:e] = spare[s:e]
            stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3] = s + n_left, e, ref, 2
            stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2], stack[top + 1, 3] = s, s + n_left, ref, 1
            top += 2
        else:
            ref = -1 - n_leaves
            n_leaves += 1
        if side == 1:
            left[parent] = ref
        elif side == 2:
            right[parent] = ref
    return (directions[:n_nodes].copy(), thresholds[:n_nodes].copy(), left[:n_nodes].copy(),
            right[:n_nodes].copy(), estimates[:n_nodes].copy(), n_leaves)
