"""A released piece's evidence for the gate and the report, in one pass over its rows.

A released piece (:class:`microagg.pipeline.release.Released`) is a task's rows: their original
values ``X``, their groups' released tuples ``table`` and each row's group. The gate needs the SSE
of the standardized errors and how many rows carry each tuple; the report's data summary needs each
column's histogram of ``X``, its sum of squared errors and its sum. In NumPy every step made a
temporary ``(n, d)`` array (the masked rows, their errors, the scaled errors, their squares), about
20 ms a piece of 50,000 rows, a tenth of a block task's time at 10M rows (BENCHMARKS.md, fortieth
session); here the rows are read once and nothing of their size is allocated.
"""

import numpy as np

from ._jit import jit
from .histogram import bin_of, bin_scales


@jit
def piece_errors(X, table, labels, std, edges, counts):
    """``(sse, sq_diff, col_sum)`` of the rows ``X`` (``(n, d)``) released as ``table[labels]``.

    ``sse``: the sum over the observed cells (neither the value nor its group's is missing) of
    ``((x - m) / std_j) ** 2``, a column of ``std_j == 0`` adding nothing; ``sq_diff[j]``: the sum of
    ``(x - m) ** 2`` over the same cells; ``col_sum[j]``: the sum of column j (NaN if a value is
    missing). Each finite value of ``X`` adds one to its bin of ``edges`` in ``counts`` (``(d, bins)``
    int64; :func:`microagg.kernels.histogram.bin_counts`'s bins), unless ``counts`` has no bins.
    Every sum runs over the rows in order, column by column; ``sse`` adds the columns' sums in order.
    """
    n, d = X.shape
    sq_diff = np.zeros(d)
    scaled = np.zeros(d)
    col_sum = np.zeros(d)
    count = counts.shape[1] > 0
    scale = bin_scales(edges) if count else np.empty(0)
    for i in range(n):
        g = labels[i]
        for j in range(d):
            x = X[i, j]
            col_sum[j] += x
            e = x - table[g, j]
            if e == e:  # neither is missing
                sq_diff[j] += e * e
                if std[j] > 0:
                    t = e / std[j]
                    scaled[j] += t * t
            if count and np.isfinite(x):
                counts[j, bin_of(x, edges, j, scale[j])] += 1
    sse = 0.0
    for j in range(d):
        sse += scaled[j]
    return sse, sq_diff, col_sum


@jit
def tuple_counts(table, sizes, hashes):
    """How many rows carry each group's tuple, from the tuples' 64-bit ``hashes``.

    Returns ``(counts, distinct, exact)``: ``counts[g]``, the sum of ``sizes`` over the groups whose
    row of ``table`` equals ``table[g]`` value by value (a missing value equal to a missing value);
    ``distinct``, the distinct hashes in increasing order; ``exact`` False if two different tuples
    share a hash (never seen: the caller then counts by a full sort, and ``counts`` is not set).
    The tuples are sorted by hash (stable) and each run of equal hashes is compared with its first.
    """
    g, d = table.shape
    counts = np.zeros(g, dtype=np.int64)
    order = np.argsort(hashes, kind="mergesort")
    distinct = np.empty(g, dtype=np.uint64)
    n_distinct = 0
    s = 0
    while s < g:
        first = order[s]
        h = hashes[first]
        e = s + 1
        while e < g and hashes[order[e]] == h:
            e += 1
        total = 0
        for t in range(s, e):
            r = order[t]
            for j in range(d):
                a = table[r, j]
                b = table[first, j]
                if a != b and not (a != a and b != b):
                    return counts, distinct[:0], False
            total += sizes[r]
        for t in range(s, e):
            counts[order[t]] = total
        distinct[n_distinct] = h
        n_distinct += 1
        s = e
    return counts, distinct[:n_distinct], True
