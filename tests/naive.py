"""Slow, obviously-correct NumPy references for the kernels (plain numpy and python, no numba).

Each function follows its textbook definition as literally as possible; the property tests in
``test_kernels.py`` compare the fast kernels with them on Hypothesis-drawn inputs. Nothing here is
meant to be fast: the brute-force optimal partitions enumerate every admissible partition and are
only for a dozen or so records.
"""

import numpy as np


def sse(X, labels):
    """Within-group SSE: sum over groups of the squared distances of its rows to the group's mean."""
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(labels)
    total = 0.0
    for g in np.unique(labels):
        rows = X[labels == g]
        total += float(((rows - rows.mean(axis=0)) ** 2).sum())
    return total


def sst(X):
    """Total sum of squares: sum of the squared distances of all rows to the global mean."""
    X = np.asarray(X, dtype=np.float64)
    return float(((X - X.mean(axis=0)) ** 2).sum())


def zscores(X):
    """``(X - mean) / std`` per column with the population std (ddof=0); a constant column -> zeros."""
    X = np.asarray(X, dtype=np.float64)
    mean = X.mean(axis=0)
    std = X.std(axis=0)
    Z = np.zeros_like(X)
    for j in range(X.shape[1]):
        if std[j] > 0:
            Z[:, j] = (X[:, j] - mean[j]) / std[j]
    return Z


def information_loss(X, labels):
    """IL = 100 * SSE / SST on the z-scored ``X`` (0 when SST is 0)."""
    Z = zscores(X)
    total = sst(Z)
    if total == 0:
        return 0.0
    return 100.0 * sse(Z, labels) / total


def _squared_distances(X, p):
    """Squared Euclidean distances of every row of ``X`` to the point ``p``, one column at a time.

    Accumulating column by column in column order performs the same floating-point operations as
    the kernel, so on small-integer data the two agree to the last bit.
    """
    d = np.zeros(X.shape[0])
    for j in range(X.shape[1]):
        d += (X[:, j] - p[j]) ** 2
    return d


def _farthest(X, remaining, p):
    """The record of ``remaining`` (ascending row indices) farthest from ``p``; lowest index on ties."""
    d = _squared_distances(X, p)[remaining]
    return remaining[int(np.argmax(d))]  # argmax returns the first maximum


def _group_around(X, remaining, center, k):
    """``center`` and its ``k - 1`` nearest records among ``remaining``; lowest index on ties."""
    others = remaining[remaining != center]
    d = _squared_distances(X, X[center])[others]
    nearest = others[np.argsort(d, kind="stable")[: k - 1]]
    return np.concatenate(([center], nearest))


def mdav(X, k):
    """Textbook classic MDAV (Domingo-Ferrer and Torra, 2005), labels numbered in order of formation.

    While at least 3k records remain: c = centroid of the remaining records, r = the record farthest
    from c, group r with its k-1 nearest; s = the remaining record farthest from r, group s with its
    k-1 nearest. Then if at least 2k remain: one more group around the record farthest from the
    centroid. The rest is the last group. Ties go to the lowest row index.
    """
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    remaining = np.arange(n)
    group = 0

    def take(members):
        nonlocal remaining, group
        labels[members] = group
        group += 1
        remaining = remaining[~np.isin(remaining, members)]

    def around_farthest_from_centroid():
        centroid = X[remaining].sum(axis=0) / remaining.shape[0]
        r = _farthest(X, remaining, centroid)
        take(_group_around(X, remaining, r, k))
        return r

    while remaining.shape[0] >= 3 * k:
        r = around_farthest_from_centroid()
        s = _farthest(X, remaining, X[r])
        take(_group_around(X, remaining, s, k))
    if remaining.shape[0] >= 2 * k:
        around_farthest_from_centroid()
    if remaining.shape[0]:
        labels[remaining] = group
    return labels


def _compositions(n, k):
    """Every tuple of group sizes in ``k..2k-1`` that sums to ``n`` (recursive enumeration)."""
    if n == 0:
        yield ()
        return
    for size in range(k, min(2 * k - 1, n) + 1):
        for rest in _compositions(n - size, k):
            yield (size,) + rest


def _segment_sse(rows):
    return float(((rows - rows.mean(axis=0)) ** 2).sum())


def optimal_contiguous(X, order, k):
    """Brute-force minimal SSE over every partition of the rows taken in ``order`` into contiguous
    groups of k..2k-1 rows (every composition is tried; only for small n)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    Y = X[np.asarray(order)]
    best = np.inf
    for sizes in _compositions(Y.shape[0], k):
        cost, start = 0.0, 0
        for size in sizes:
            cost += _segment_sse(Y[start:start + size])
            start += size
        best = min(best, cost)
    return best


def optimal_univariate(x, k):
    """Brute-force optimal univariate microaggregation: minimal SSE over every partition of the
    sorted values into contiguous groups of k..2k-1 values (Hansen and Mukherjee's search space)."""
    x = np.sort(np.asarray(x, dtype=np.float64))
    return optimal_contiguous(x[:, None], np.arange(x.shape[0]), k)


def group_medians(X, labels):
    """Per-group, per-column ``np.median``; row ``g`` is the median of group ``g``."""
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(labels)
    groups = np.unique(labels)
    out = np.empty((groups.max() + 1, X.shape[1]))
    for g in groups:
        out[g] = np.median(X[labels == g], axis=0)
    return out
