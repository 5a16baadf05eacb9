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
