"""Fixed-edge histograms of every column of a matrix in one pass (the report's distributions).

A value's bin is decided by the edges alone (``edges[j, b] <= v < edges[j, b + 1]``, the last bin
closed), as ``np.histogram`` decides it for an array of edges: the guess from the bin width is only a
starting point, corrected against the edges themselves. So a value has the same bin whatever the
chunk it sits in, and the counts of disjoint chunks add up to those of the whole column.
"""

import numpy as np

from ._jit import inline_jit, jit


@jit
def bin_counts(A, edges, weight):
    """Per column ``j`` of ``A`` (``(n, d)``, float64), the weighted counts of its values in the bins
    of ``edges[j]`` (``(d, bins + 1)``, increasing): ``(d, bins)`` int64, row ``i`` counted
    ``weight[i]`` times (int64). Non-finite values are not counted; a value below ``edges[j, 0]``
    is counted in the first bin and one above ``edges[j, -1]`` in the last."""
    n, d = A.shape
    bins = edges.shape[1] - 1
    counts = np.zeros((d, bins), dtype=np.int64)
    scale = bin_scales(edges)
    for i in range(n):
        w = weight[i]
        for j in range(d):
            v = A[i, j]
            if np.isfinite(v):
                counts[j, bin_of(v, edges, j, scale[j])] += w
    return counts


@jit
def bin_scales(edges):
    """Bins per unit of each column's range: :func:`bin_of`'s first guess."""
    d = edges.shape[0]
    bins = edges.shape[1] - 1
    scale = np.empty(d)
    for j in range(d):
        scale[j] = bins / (edges[j, bins] - edges[j, 0])
    return scale


@inline_jit
def bin_of(v, edges, j, scale):
    """The bin of the finite value ``v`` in the edges of column ``j`` (``scale``: its :func:`bin_scales`)."""
    bins = edges.shape[1] - 1
    guess = (v - edges[j, 0]) * scale
    b = bins - 1
    if guess < bins:
        b = max(int(guess), 0) if guess > 0.0 else 0
    while b > 0 and v < edges[j, b]:
        b -= 1
    while b < bins - 1 and v >= edges[j, b + 1]:
        b += 1
    return b


LINEAR_SEARCH = 32
"""A search among at most this many values counts those not larger one by one: no branch to mispredict (a
binary search among the 14 window ends of the quantiles took 28 ns a value, the count 21)."""


@inline_jit
def count_not_above(values, first, last, v):
    """How many of the increasing ``values[first:last]`` are not larger than ``v``."""
    if last - first <= LINEAR_SEARCH:
        count = 0
        for t in range(first, last):
            count += values[t] <= v
        return count
    lo, hi = first, last
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] <= v:
            lo = mid + 1
        else:
            hi = mid
    return lo - first


@jit
def sorted_bins(x, edges, coarse):
    """Per value of ``x``, its bin among the increasing ``edges``: how many edges are not larger
    (``np.searchsorted(edges, x, side="right")``, int64; a negative zero is a zero). Found in two
    searches: among the edges at the increasing positions ``coarse`` first, then among the edges between
    the two it fell between. The bins are those of one search over every edge, whatever ``coarse`` holds;
    a value between two consecutive positions of ``coarse`` (a wide bin of few edges) is placed by the
    first search alone, which is what the quantiles' windows make of most values
    (:func:`microagg.pipeline.columns.window_bins`)."""
    n = x.shape[0]
    m = edges.shape[0]
    c = coarse.shape[0]
    ends = np.empty(c)
    for t in range(c):
        ends[t] = edges[coarse[t]]
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        v = x[i]
        at = count_not_above(ends, 0, c, v)
        first = coarse[at - 1] + 1 if at > 0 else 0  # every edge before it is not larger
        last = coarse[at] if at < c else m  # it and every edge after it are larger
        out[i] = first + count_not_above(edges, first, last, v)
    return out


@jit
def within_ranges(x, lo, hi):
    """Whether each value of ``x`` lies in one of the ranges ``[lo[i], hi[i])`` (ascending and disjoint; a
    range may end where the next starts)."""
    out = np.empty(x.shape[0], dtype=np.bool_)
    for i in range(x.shape[0]):
        at = count_not_above(lo, 0, lo.shape[0], x[i])  # the last range that starts at or below the value
        out[i] = at > 0 and x[i] < hi[at - 1]
    return out
