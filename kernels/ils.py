"""Iterated local search (ILS) for microaggregation: descend, perturb a region, descend again.

Starting from any partition with group sizes in ``[k, 2k-1]``:

1. *descent*: the local search of :mod:`kernels.refine` (record moves, swaps, dissolution of a
   group into its neighbours) to a local optimum;
2. *perturbation*: a random group and its ``region - 1`` nearest groups (by centroid) are pooled
   and re-partitioned from a random start: a random pooled record takes its k-1 nearest pooled
   records, then the pooled record farthest from that group's centroid does the same, until
   fewer than 2k remain (they form the last group);
3. descent again; the new partition replaces the current one if its SSE is not higher (plateau moves
   keep the search moving), and the best partition seen is kept.

Randomness comes only from ``seed`` (numba's generator, seeded inside the kernel), so a run repeats
bit for bit for the same seed and iteration count. The kernel runs a fixed number of iterations;
the anytime driver (:func:`microagg.pipeline.methods` ``ils``) calls it in rounds until its time
budget is spent, each round seeded from (seed, round), so the result depends only on the seed and
the number of rounds completed (which the caller reports).

References
----------
Lourenco, Martin and Stuetzle (2003), Iterated local search, in Handbook of Metaheuristics. The
descent moves are those of the Decompose / Shrink refinements of
``shared/papers/iterative-group-decomposition-refinement.txt`` (section 3) and of exchange-based
k-means local search.
"""

import numpy as np

from ._jit import jit
from .refine import refine
from .stats import sse


@jit
def _perturb(Z, labels, n_groups, k, region, work):
    """Re-partition a random group and its ``region - 1`` nearest groups from a random start."""
    n, d = Z.shape
    sums = np.zeros((n_groups, d))
    size = np.zeros(n_groups, dtype=np.int64)
    for i in range(n):
        g = labels[i]
        size[g] += 1
        for j in range(d):
            sums[g, j] += Z[i, j]
    a = np.random.randint(n_groups)
    # the region: a and its nearest groups by centroid
    dist = np.empty(n_groups)
    for g in range(n_groups):
        s = 0.0
        for j in range(d):
            t = sums[g, j] / size[g] - sums[a, j] / size[a]
            s += t * t
        dist[g] = s
    chosen = np.argsort(dist, kind="mergesort")[:min(region, n_groups)]
    in_region = np.zeros(n_groups, dtype=np.bool_)
    for g in chosen:
        in_region[g] = True
    m = 0
    for i in range(n):
        if in_region[labels[i]]:
            work[m] = i
            m += 1
    pool = work[:m]
    alive = np.ones(m, dtype=np.bool_)
    left = m
    used = 0  # new groups formed: the i-th takes chosen[i], or a fresh label past n_groups
    pd = np.empty(m)
    centre = np.empty(d)
    seed_pos = np.random.randint(m)
    while left >= 2 * k:
        # group the seed record with its k-1 nearest alive pooled records
        for t in range(m):
            if alive[t]:
                s = 0.0
                for j in range(d):
                    u = Z[pool[t], j] - Z[pool[seed_pos], j]
                    s += u * u
                pd[t] = s
            else:
                pd[t] = np.inf
        members = np.argsort(pd, kind="mergesort")[:k]
        label = chosen[used] if used < len(chosen) else n_groups + used
        used += 1
        centre[:] = 0.0
        for t in members:
            alive[t] = False
            labels[pool[t]] = label
            for j in range(d):
                centre[j] += Z[pool[t], j] / k
        left -= k
        # the next seed: the alive pooled record farthest from the group just formed
        best = -1.0
        for t in range(m):
            if alive[t]:
                s = 0.0
                for j in range(d):
                    u = Z[pool[t], j] - centre[j]
                    s += u * u
                if s > best:
                    best = s
                    seed_pos = t
    label = chosen[used] if used < len(chosen) else n_groups + used
    for t in range(m):
        if alive[t]:
            labels[pool[t]] = label
    # the region may now hold fewer or more groups: relabel compactly
    remap = np.full(n_groups + m // k + 1, -1, dtype=np.int64)
    g = 0
    for i in range(n):
        if remap[labels[i]] < 0:
            remap[labels[i]] = g
            g += 1
        labels[i] = remap[labels[i]]
    return g


REGION = 4
"""The default groups perturbed together by :func:`ils`."""
NEIGHBORS = 8
"""The default candidate groups per group of :func:`ils`'s descent."""


@jit
def ils(Z, labels, k, iterations, seed, region=REGION, n_neighbors=NEIGHBORS):
    """Improve ``labels`` (groups of ``k..2k-1``) by ``iterations`` rounds of perturbation and descent.

    Returns ``(best_labels, best_sse)``; ``labels`` is not modified.
    """
    np.random.seed(seed)
    n = Z.shape[0]
    max_size = 2 * k - 1
    current = labels.copy()
    refine(Z, current, k, max_size, n_neighbors, 1000)
    n_groups = current.max() + 1
    current_sse = sse(Z, current, n_groups)
    best = current.copy()
    best_sse = current_sse
    work = np.empty(n, dtype=np.int64)
    trial = np.empty(n, dtype=np.int64)
    if n_groups < 2:
        return best, best_sse
    for _ in range(iterations):
        trial[:] = current
        g = _perturb(Z, trial, n_groups, k, region, work)
        refine(Z, trial, k, max_size, n_neighbors, 1000)
        g = trial.max() + 1
        trial_sse = sse(Z, trial, g)
        if trial_sse <= current_sse * (1.0 + 1e-12):
            current[:] = trial
            current_sse = trial_sse
            n_groups = g
            if trial_sse < best_sse:
                best[:] = trial
                best_sse = trial_sse
    return best, best_sse
