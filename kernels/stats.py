"""Standardization, group sums, SSE / SST / information loss and centroid (aggregation) kernels.

All kernels take C-contiguous float64 arrays of shape ``(n, d)`` and int64 labels ``0..g-1``; the
pipeline converts and validates before calling them. Sums run over the rows in array order, so a
result depends only on the data and its row order, never on how the work was split.

References
----------
Domingo-Ferrer, J. and Mateo-Sanz, J. M. (2002). Practical data-oriented microaggregation for
statistical disclosure control. IEEE TKDE 14(1). (IL = 100 * SSE / SST; see
``shared/papers/comparative-study-microaggregation.txt`` section 2.)
"""

import numpy as np

from ._jit import jit


@jit
def standardize(X, mean, std):
    """Z-scores ``(x - mean) / std``; a column with ``std == 0`` becomes all zeros."""
    n, d = X.shape
    scale = np.empty(d)
    for j in range(d):
        scale[j] = std[j] if std[j] > 0.0 else np.inf  # x / inf == 0: no branch in the loop below
    Z = np.empty((n, d))
    for i in range(n):
        for j in range(d):
            Z[i, j] = (X[i, j] - mean[j]) / scale[j]
    return Z


@jit
def group_sums(X, labels, n_groups):
    """Per-group column sums and row counts."""
    n, d = X.shape
    sums = np.zeros((n_groups, d))
    counts = np.zeros(n_groups, dtype=np.int64)
    for i in range(n):
        g = labels[i]
        counts[g] += 1
        for j in range(d):
            sums[g, j] += X[i, j]
    return sums, counts


@jit
def group_means(X, labels, n_groups):
    """Per-group arithmetic means (the classic centroid)."""
    sums, counts = group_sums(X, labels, n_groups)
    d = X.shape[1]
    for g in range(n_groups):
        for j in range(d):
            sums[g, j] /= counts[g]
    return sums


@jit
def group_medians(X, labels, n_groups):
    """Per-group column medians (mean of the two middle values for an even-sized group)."""
    n, d = X.shape
    order = np.argsort(labels, kind="mergesort")
    out = np.empty((n_groups, d))
    start = 0
    while start < n:
        g = labels[order[start]]
        stop = start
        while stop < n and labels[order[stop]] == g:
            stop += 1
        m = stop - start
        buf = np.empty(m)
        for j in range(d):
            for t in range(m):
                buf[t] = X[order[start + t], j]
            out[g, j] = np.median(buf)
        start = stop
    return out


@jit
def sse(X, labels, n_groups):
    """Within-group sum of squared Euclidean distances to the group means."""
    n, d = X.shape
    means = group_means(X, labels, n_groups)
    total = 0.0
    for i in range(n):
        g = labels[i]
        for j in range(d):
            t = X[i, j] - means[g, j]
            total += t * t
    return total


@jit
def sst(X):
    """Total sum of squared Euclidean distances to the global mean."""
    n, d = X.shape
    mean = np.zeros(d)
    for i in range(n):
        for j in range(d):
            mean[j] += X[i, j]
    for j in range(d):
        mean[j] /= n
    total = 0.0
    for i in range(n):
        for j in range(d):
            t = X[i, j] - mean[j]
            total += t * t
    return total


@jit
def information_loss(Z, labels, n_groups):
    """``(IL, SSE, SST)`` with IL = 100 * SSE / SST, on already-standardized data ``Z``.

    IL is 0 when SST is 0 (every column constant: nothing to lose).
    """
    e = sse(Z, labels, n_groups)
    t = sst(Z)
    il = 100.0 * e / t if t > 0.0 else 0.0
    return il, e, t


# --- exact column sums -------------------------------------------------------------------------
# Means and standard deviations feed the standardization, and a last-bit difference there can change
# a group. Partial sums that depend on how the rows were split into partitions would make the release
# depend on the partitioning, so the statistics pass accumulates *exact* sums: each column's sum of
# x and of x^2 is kept as a Shewchuk expansion (non-overlapping float64 partials whose exact sum is
# the exact total, as in Python's math.fsum), x^2 itself split exactly into two floats (Dekker). The
# pipeline adds the partials of all partitions exactly (fractions) and rounds once.

_MAX_PARTIALS = 64
_SPLITTER = 134217729.0  # 2**27 + 1
HUGE = 1e150
"""Magnitude above which a value's square could overflow the exact sums: reported, not summed."""


@jit
def _grow(partials, count, x):
    """Add ``x`` to the expansion ``partials[:count]`` exactly; returns the new count."""
    i = 0
    for t in range(count):
        y = partials[t]
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo != 0.0:
            partials[i] = lo
            i += 1
        x = hi
    partials[i] = x
    return i + 1


@jit
def _two_square(x):
    """``(p, e)`` with ``p + e == x * x`` exactly (Dekker's product, no FMA needed)."""
    p = x * x
    c = _SPLITTER * x
    hi = c - (c - x)
    lo = x - hi
    e = ((hi * hi - p) + 2.0 * hi * lo) + lo * lo
    return p, e


@jit
def exact_column_sums(X):
    """Exact per-column sums of x and x^2 over the finite values, plus counts of unusable values.

    Returns ``(sum_partials, sum_counts, sq_partials, sq_counts, nan_counts, inf_counts,
    huge_counts)``: row ``j`` of ``sum_partials[:, :sum_counts[j]]`` is an expansion whose exact sum
    is the column's sum; values with ``|x| > HUGE`` are counted in ``huge_counts`` and not summed.
    """
    n, d = X.shape
    sp = np.zeros((d, _MAX_PARTIALS))
    qp = np.zeros((d, _MAX_PARTIALS))
    sc = np.zeros(d, dtype=np.int64)
    qc = np.zeros(d, dtype=np.int64)
    nans = np.zeros(d, dtype=np.int64)
    infs = np.zeros(d, dtype=np.int64)
    huge = np.zeros(d, dtype=np.int64)
    for i in range(n):
        for j in range(d):
            x = X[i, j]
            if np.isnan(x):
                nans[j] += 1
                continue
            if np.isinf(x):
                infs[j] += 1
                continue
            if abs(x) > HUGE:
                huge[j] += 1
                continue
            sc[j] = _grow(sp[j], sc[j], x)
            p, e = _two_square(x)
            qc[j] = _grow(qp[j], qc[j], p)
            if e != 0.0:
                qc[j] = _grow(qp[j], qc[j], e)
    return sp, sc, qp, qc, nans, infs, huge
