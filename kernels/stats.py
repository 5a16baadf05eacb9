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

import math

import numpy as np

from ._jit import jit


@jit
def standardize(X, mean, std, rows=None):
    """Z-scores ``(x - mean) / std``; a column with ``std == 0`` becomes all zeros. ``rows``: the
    z-scores of the rows ``X[rows]`` only, in that order (one pass, no copy of ``X[rows]`` first)."""
    n, d = X.shape
    if rows is not None:
        n = rows.shape[0]
    scale = np.empty(d)
    for j in range(d):
        scale[j] = std[j] if std[j] > 0.0 else np.inf  # x / inf == 0: no branch in the loop below
    Z = np.empty((n, d))
    for i in range(n):
        r = i if rows is None else rows[i]
        for j in range(d):
            Z[i, j] = (X[r, j] - mean[j]) / scale[j]
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


def group_medians(X, labels, n_groups):
    """Per-group column medians (mean of the two middle values for an even-sized group)."""
    return group_weighted(X, np.ones(X.shape[0]), labels, n_groups, 1)


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
# depend on the partitioning, so the statistics pass accumulates *exact* sums of x and x^2 per column;
# the pipeline adds those of all partitions exactly (as fractions) and rounds once.
#
# The sums live in a superaccumulator of int64 buckets, one per binary exponent. A finite float64 is
# +-m * 2**(e - SUM_BIAS) with an integer mantissa m < 2**53 and its biased exponent e (1 for
# subnormals), both read from its bits; adding x is adding +-m to bucket e: one exact integer add, no
# data-dependent loop (a Shewchuk expansion costs a pass over its partials per value). The square is
# m^2 * 2**(2e - SQUARE_BIAS), also exact in integers: with m = mh * 2**26 + ml, the products mh^2,
# 2*mh*ml and ml^2 (each below 2**54) go to square buckets 2e + 52, 2e + 26 and 2e. No float product
# is formed, so squares of tiny and subnormal values do not underflow. Every _BLOCK rows a column's
# used buckets are carried (each keeps its low 32 bits, the rest moves 32 buckets up), which keeps
# every bucket far from overflow; at the end each column's buckets become one two's-complement
# integer, packed into little-endian 64-bit words.

HUGE = 1e150
"""Magnitude above which a value is counted, not summed: squares near float64's limit would overflow
the variance (validation refuses such columns)."""

SUM_BIAS = 1075
"""Bit ``k`` of a column's packed sum weighs ``2**(k - SUM_BIAS)`` (the smallest subnormal is 2**-1074)."""
SQUARE_BIAS = 2 * SUM_BIAS
"""Bit ``k`` of a column's packed sum of squares weighs ``2**(k - SQUARE_BIAS)``."""

_SUM_WORDS = 34  # 2176 buckets: exponents up to 2046, 64 for carries, 64 more until the sign settles
_SQUARE_WORDS = 67  # 4288 buckets: up to 2 * 2046 + 52, then the same margins
_BLOCK = 511  # rows between carries: a bucket then holds < 2**32 + 2**31 + 511 * 2**54 < 2**63
_ABS_BITS = 0x7FFF_FFFF_FFFF_FFFF
_FRACTION_BITS = (1 << 52) - 1
_IMPLICIT_BIT = 1 << 52
_HUGE_BITS = int(np.float64(HUGE).view(np.int64))  # bit order is value order for floats >= 0
_INF_BITS = int(np.float64(np.inf).view(np.int64))  # above it: NaNs


@jit
def _carry(buckets, low, high):
    """Carry ``buckets[low:high + 33]`` exactly: each keeps its low 32 bits and adds the rest to the
    bucket 32 above. ``high`` is the highest bucket that received values, so every large carry lands
    inside the range and is reduced too; what moves past it is at most 1 in magnitude."""
    for k in range(low, high + 33):
        c = buckets[k] >> 32
        buckets[k] -= c << 32
        buckets[k + 32] += c


@jit
def _pack(buckets, start, words):
    """Write the exact integer ``sum(buckets[k] << k)`` into ``words`` as two's complement, bit ``k``
    in bit ``k % 64`` of word ``k // 64``; ``buckets`` below ``start`` must be zero."""
    carry = 0
    for k in range(start, buckets.shape[0]):
        t = buckets[k] + carry
        words[k >> 6] |= (t & 1) << (k & 63)
        carry = t >> 1


@jit
def exact_column_sums(X):
    """Exact per-column sums of x and x^2 over the finite values, plus counts of unusable values.

    Returns ``(sums, squares, nan_counts, inf_counts, huge_counts, lowest, highest)``. Row ``j`` of
    ``sums`` (int64, ``(d, 34)``) holds the column's exact sum as a little-endian two's-complement
    integer scaled by ``2**-SUM_BIAS``; row ``j`` of ``squares`` (``(d, 67)``) its sum of squares scaled by
    ``2**-SQUARE_BIAS``. Values with ``|x| > HUGE`` are counted in ``huge_counts`` and not summed.
    ``lowest`` / ``highest``: each column's smallest and largest value, NaN skipped, infinities and
    huge values counted (``+inf`` / ``-inf`` for a column without any), found in the same pass
    (NumPy's ``min(axis=0)`` and ``max(axis=0)`` of a 1M x 13 block took another 0.06 s).
    """
    n, d = X.shape
    bits = X.view(np.int64)
    sum_buckets = np.zeros((d, 64 * _SUM_WORDS), dtype=np.int64)
    square_buckets = np.zeros((d, 64 * _SQUARE_WORDS), dtype=np.int64)
    lowest = np.full(d, 2047, dtype=np.int64)  # the range of exponents each column has used
    highest = np.zeros(d, dtype=np.int64)
    nans = np.zeros(d, dtype=np.int64)
    infs = np.zeros(d, dtype=np.int64)
    huge = np.zeros(d, dtype=np.int64)
    lo = np.full(d, np.inf)
    hi = np.full(d, -np.inf)
    # rows outer, columns inner: consecutive additions hit different columns' buckets, so they do
    # not wait on each other (measured ~10% faster than a column at a time within a block)
    for start in range(0, n, _BLOCK):
        for i in range(start, min(start + _BLOCK, n)):
            for j in range(d):
                b = bits[i, j]
                magnitude = b & _ABS_BITS
                if magnitude > _INF_BITS:
                    nans[j] += 1
                    continue
                lo[j] = min(lo[j], X[i, j])
                hi[j] = max(hi[j], X[i, j])
                if magnitude > _HUGE_BITS:
                    if magnitude == _INF_BITS:
                        infs[j] += 1
                    else:
                        huge[j] += 1
                    continue
                biased = magnitude >> 52
                m = magnitude & _FRACTION_BITS
                if biased != 0:
                    m |= _IMPLICIT_BIT
                e = max(biased, 1)
                # a zero adds nothing; keeping it out of the exponent range without a branch keeps
                # zero-heavy columns as fast as others (a mispredicted branch costs more)
                zero = (magnitude == 0) * 4096
                lowest[j] = min(lowest[j], e + zero)
                highest[j] = max(highest[j], e - zero)
                sign = b >> 63  # 0 or -1: (m ^ sign) - sign is m or -m
                sum_buckets[j, e] += (m ^ sign) - sign
                mh = m >> 26
                ml = m & 0x3FF_FFFF
                square_buckets[j, 2 * e] += ml * ml
                square_buckets[j, 2 * e + 26] += 2 * mh * ml
                square_buckets[j, 2 * e + 52] += mh * mh
        for j in range(d):
            if lowest[j] <= highest[j]:
                _carry(sum_buckets[j], lowest[j], highest[j])
                _carry(square_buckets[j], 2 * lowest[j], 2 * highest[j] + 52)
    sums = np.zeros((d, _SUM_WORDS), dtype=np.int64)
    squares = np.zeros((d, _SQUARE_WORDS), dtype=np.int64)
    for j in range(d):
        if lowest[j] <= highest[j]:
            _pack(sum_buckets[j], lowest[j], sums[j])
            _pack(square_buckets[j], 2 * lowest[j], squares[j])
    return sums, squares, nans, infs, huge, lo, hi


TRIM = 0.2  # share of a group's weight trimmed from each end by the "trimmed" aggregate


@jit
def group_weighted(X, weights, labels, n_groups, kind):
    """Per-group, per-column weighted aggregate: ``kind`` 0 mean, 1 median, 2 trimmed mean.

    * mean: ``sum(w x) / sum(w)``;
    * median: the smallest value at which the cumulative weight (values ascending) reaches half the
      group's weight; exactly half is averaged with the next value, so unit weights give the usual
      median (the mean of the two middle values of an even-sized group);
    * trimmed: the weighted mean of the central ``1 - 2 TRIM`` of the group's weight; a record at
      either cut counts with the part of its weight inside (unit weights and a group of 5: the mean
      of the 3 middle values).

    Ties in value are ordered by row index, so the result does not depend on how rows were split.
    Each group's weights are scaled by the power of two that brings its largest into [0.5, 1): exact
    (but for a weight below 2**-1022 times the largest, which loses digits), so the result is that
    of the weights as given, but neither the group's total weight overflows (weights near the
    largest float) nor its weighted values underflow (weights near the smallest).
    """
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
        rows = order[start:stop]
        largest = 0.0
        for t in range(m):
            largest = max(largest, weights[rows[t]])
        exponent = math.frexp(largest)[1]
        w = np.empty(m)
        total = 0.0
        for t in range(m):
            w[t] = math.ldexp(weights[rows[t]], -exponent)
            total += w[t]
        vals = np.empty(m)
        wts = np.empty(m)
        for j in range(d):
            if kind == 0:
                s = 0.0
                for t in range(m):
                    s += w[t] * X[rows[t], j]
                out[g, j] = s / total
                continue
            for t in range(m):
                vals[t] = X[rows[t], j]
            rank = np.argsort(vals, kind="mergesort")
            for t in range(m):
                wts[t] = w[rank[t]]
            if kind == 1:
                half = 0.5 * total
                cum = 0.0
                for t in range(m):
                    cum += wts[t]
                    if cum >= half:
                        if cum == half and t + 1 < m:
                            out[g, j] = 0.5 * (vals[rank[t]] + vals[rank[t + 1]])
                        else:
                            out[g, j] = vals[rank[t]]
                        break
            else:
                low = TRIM * total
                high = total - low
                cum = 0.0
                s = 0.0
                kept = 0.0
                for t in range(m):
                    a = cum
                    cum += wts[t]
                    inside = min(cum, high) - max(a, low)
                    if inside > 0.0:
                        s += inside * vals[rank[t]]
                        kept += inside
                out[g, j] = s / kept
        start = stop
    return out
