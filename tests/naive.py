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


# --- evaluation measures (pipeline/metrics.py) ----------------------------------------------------


def links(Z, Zm):
    """Brute-force record linkage through the full ``(m, n)`` matrix of squared distances between
    masked rows ``Zm`` and original rows ``Z``: per masked row ``i``, the smallest distance, the number
    of originals at exactly that distance, and whether original ``i`` is one of them. Distances are
    accumulated column by column (the kernel's order of operations), so ties are the kernel's ties."""
    Z = np.asarray(Z, dtype=np.float64)
    Zm = np.asarray(Zm, dtype=np.float64)
    D = np.zeros((Zm.shape[0], Z.shape[0]))
    for j in range(Z.shape[1]):
        D += (Z[None, :, j] - Zm[:, j, None]) ** 2
    best = D.min(axis=1) if Z.shape[0] else np.full(Zm.shape[0], np.inf)
    at_best = D == best[:, None]
    count = at_best.sum(axis=1)
    own = np.array([i < Z.shape[0] and at_best[i, i] for i in range(Zm.shape[0])], dtype=bool)
    return best, count, own


def dld(X, Xm, columns=None):
    """DLD by definition: z-score both files with the original's mean and population std, link each
    masked record to its nearest originals (full distance matrix), credit 1/t when record i is among
    the t originals at the minimal distance; 100 * credits / n."""
    X = np.asarray(X, dtype=np.float64)
    Xm = np.asarray(Xm, dtype=np.float64)
    mean, std = X.mean(axis=0), X.std(axis=0)
    scale = np.where(std > 0, std, np.inf)
    Z, Zm = (X - mean) / scale, (Xm - mean) / scale
    if columns is not None:
        Z, Zm = Z[:, columns], Zm[:, columns]
    _, count, own = links(Z, Zm)
    return 100.0 * sum(1.0 / count[i] for i in range(len(own)) if own[i]) / X.shape[0]


def information_loss_family(X, Xm):
    """The four components of Domingo-Ferrer and Torra (2001), term by term (a term with a zero
    denominator is skipped), each x 100, and their mean."""
    X = np.asarray(X, dtype=np.float64)
    Xm = np.asarray(Xm, dtype=np.float64)
    n, p = X.shape
    V, Vm = np.cov(X, rowvar=False).reshape(p, p), np.cov(Xm, rowvar=False).reshape(p, p)

    def corr(C):
        R = np.zeros((p, p))
        for a in range(p):
            for b in range(p):
                if C[a, a] > 0 and C[b, b] > 0:
                    R[a, b] = C[a, b] / np.sqrt(C[a, a] * C[b, b])
        return R

    R, Rm = corr(V), corr(Vm)
    x_terms = [abs(X[i, j] - Xm[i, j]) / abs(X[i, j]) for i in range(n) for j in range(p) if X[i, j] != 0]
    v_terms = [abs(V[j, k] - Vm[j, k]) / abs(V[j, k]) for k in range(p) for j in range(k + 1) if V[j, k] != 0]
    s_terms = [abs(V[j, j] - Vm[j, j]) / abs(V[j, j]) for j in range(p) if V[j, j] != 0]
    r_terms = [abs(R[j, k] - Rm[j, k]) for k in range(p) for j in range(k)]
    out = {"X-X'": 100 * np.mean(x_terms), "V-V'": 100 * np.mean(v_terms), "S-S'": 100 * np.mean(s_terms),
           "R-R'": 100 * np.mean(r_terms) if r_terms else np.nan}
    out["IL"] = np.nanmean(list(out.values()))
    return out


def il1s(X, Xm):
    """IL1s = 1/(p n) sum_j sum_i |x_ij - x'_ij| / (sqrt(2) S_j), S_j the sample std (ddof=1); constant
    columns skipped."""
    X = np.asarray(X, dtype=np.float64)
    Xm = np.asarray(Xm, dtype=np.float64)
    n, p = X.shape
    total, used = 0.0, 0
    for j in range(p):
        s = X[:, j].std(ddof=1)
        if s > 0:
            used += 1
            total += sum(abs(X[i, j] - Xm[i, j]) / (np.sqrt(2) * s) for i in range(n))
    return total / (n * used) if used else 0.0


def sse_il(X, Xm):
    """SSE between the z-scored original and masked files (original's mean and population std),
    SST of the z-scored original, IL = 100 SSE / SST."""
    X = np.asarray(X, dtype=np.float64)
    Xm = np.asarray(Xm, dtype=np.float64)
    mean, std = X.mean(axis=0), X.std(axis=0)
    scale = np.where(std > 0, std, np.inf)
    Z, Zm = (X - mean) / scale, (Xm - mean) / scale
    e = float(((Z - Zm) ** 2).sum())
    t = sst(Z)
    return {"SSE": e, "SST": t, "IL": 100 * e / t if t > 0 else 0.0}


def interval_disclosure(X, Xm, p=10):
    """Rank-based interval disclosure by definition: per attribute, rank the masked values 0..n-1
    (ties occupy a block of ranks); around record r's masked value take every masked value whose rank
    is within h of the block (2h < p n / 100); r counts if its original value lies between the
    smallest and the largest of them. Percentage of (record, attribute) pairs counted."""
    X = np.asarray(X, dtype=np.float64)
    Xm = np.asarray(Xm, dtype=np.float64)
    n, d = X.shape
    h = max(int(np.ceil(p * n / 200)) - 1, 0)
    hits = 0
    for j in range(d):
        ranked = sorted(Xm[:, j])
        for r in range(n):
            v = Xm[r, j]
            block = [i for i in range(n) if ranked[i] == v]
            window = [ranked[i] for i in range(n) if block[0] - h <= i <= block[-1] + h]
            hits += min(window) <= X[r, j] <= max(window)
    return 100.0 * hits / (n * d)


def mic1d_paper(X, k, merge=False):
    """Mic1D-k exactly as the paper's section 3 reads: vectorize, sort, partitions of k (the last with
    the remainder, or merged into the one before), normalize each, re-sort, re-normalize, partition
    means, de-normalize both steps, put every value back at its cell."""
    X = np.asarray(X, dtype=float)
    values = X.reshape(-1)
    N = len(values)

    def partitions(n):
        bounds = list(range(0, n, k)) + [n]
        if merge and len(bounds) > 2 and n % k:
            bounds.pop(-2)
        return list(zip(bounds[:-1], bounds[1:]))

    def normalize(v):
        lo, hi = v.min(), v.max()
        return (np.full(len(v), 0.5) if hi == lo else (v - lo) / (hi - lo)), lo, hi

    order1 = sorted(range(N), key=lambda c: (values[c], c))
    vbar = np.empty(N)
    range1 = {}
    for a, b in partitions(N):
        cells = order1[a:b]
        normalized, lo, hi = normalize(values[cells])
        for c, v in zip(cells, normalized):
            vbar[c] = v
            range1[c] = (lo, hi)
    order2 = sorted(range(N), key=lambda c: (vbar[c], c))
    out = np.empty(N)
    for a, b in partitions(N):
        cells = order2[a:b]
        normalized, lo2, hi2 = normalize(vbar[cells])
        level = lo2 + (hi2 - lo2) * normalized.mean()
        for c in cells:
            lo, hi = range1[c]
            out[c] = lo + (hi - lo) * level
    return out.reshape(X.shape)


def split_tree(Z, fraction, block_size, one_block_rows, min_child, fixed=None):
    """The split tree of ``microagg.kernels.grow_tree`` by plain recursion with NumPy's eigh:
    ``(directions, thresholds, left, right, estimates, n_leaves)``, nodes and leaves in pre-order."""
    directions, thresholds, left, right, estimates = [], [], [], [], []
    n_leaves = 0

    def direction(cell):
        centred = cell - cell.mean(axis=0)
        vector = np.linalg.eigh(centred.T @ centred)[1][:, -1]
        return vector if vector[np.argmax(np.abs(vector))] >= 0 else -vector

    def grow(idx, root=False):
        nonlocal n_leaves
        estimate = len(idx) / fraction
        if estimate > block_size and not (root and estimate <= one_block_rows) and len(idx) >= 2 * min_child:
            v = direction(Z[idx]) if fixed is None else fixed
            p = Z[idx] @ v
            threshold = np.median(p)
            go_left = p <= threshold
            if min_child <= go_left.sum() <= len(idx) - min_child:
                node = len(thresholds)
                directions.append(v)
                thresholds.append(threshold)
                estimates.append(estimate)
                left.append(0)
                right.append(0)
                left[node] = grow(idx[go_left])
                right[node] = grow(idx[~go_left])
                return node
        n_leaves += 1
        return -n_leaves

    grow(np.arange(len(Z)), root=True)
    d = Z.shape[1]
    return (np.array(directions).reshape(-1, d), np.array(thresholds), np.array(left, dtype=np.int64),
            np.array(right, dtype=np.int64), np.array(estimates), n_leaves)


def route(Z, directions, thresholds, left, right):
    """Leaf of each row of ``Z`` in a split tree, one row at a time (the dot product summed over the
    columns in order, as the kernel does)."""
    leaves = np.zeros(len(Z), dtype=np.int64)
    for i, z in enumerate(Z):
        node = 0
        while len(thresholds):
            p = 0.0
            for j in range(len(z)):
                p += float(z[j]) * float(directions[node, j])
            nxt = left[node] if p <= thresholds[node] else right[node]
            if nxt < 0:
                leaves[i] = -1 - nxt
                break
            node = nxt
    return leaves
