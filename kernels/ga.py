"""The MDAV / genetic-algorithm hybrid of Solanas (2008): macro-groups by MDAV, a GA inside each.

The hybrid of ``shared/papers/comparative-study-microaggregation.txt`` section 3.1::

    1. a small k (e.g. k = 3)
    2. K larger than k, divisible by k, small enough for the GA (e.g. K = 21)
    3. MDAV builds a k-partition of the data set
    4. MDAV on the k-partition's average vectors builds macro-groups of K/k average vectors
    5. each macro-group's average vectors are replaced by their k original records: a K-partition
    6. the GA k-partitions each macro-group; the union of these is the k-partition of the data set

Here K/k is the option ``macro`` (default 7: K = 21 at k = 3, K = 7k in general). MDAV's last group
and MDAV's last macro-group can be larger (up to 2k-1 records, 2 macro - 1 average vectors), so a
macro-group has between K and about 2K records. MDAV is our classic kernel (:func:`.mdav.mdav`) for
both steps (it is run unweighted on the average vectors, as step 4 says).

The GA (Solanas' modified GA with N-ary coding, section 3.1): a chromosome has one gene per record of
the macro-group, the gene's value is the record's group, at most ``floor(m / k)`` groups for ``m``
records; the fitness is the SSE (lower is fitter). The comparative study fixes none of the GA's
parameters besides the coding; ours (options, with defaults):

* ``population`` (50) chromosomes: the MDAV k-partition of the macro-group (the hybrid's starting
  point) and random k-partitions (a random permutation cut into groups of k, the remainder spread
  one record at a time over random groups);
* ``generations`` (300); each keeps the fittest chromosome (elitism) and breeds the others: two
  parents by binary tournament, one-point crossover with probability ``crossover`` (0.5), each gene
  reassigned to a random group with probability ``mutation`` (0.02), then a repair;
* the repair makes every group k..2k-1 records: a group below k takes, one at a time, the record
  nearest its centroid among groups above k, or is dissolved (each record to the nearest centroid)
  when no group has a record to spare; a group above 2k-1 gives away the record farthest from its
  centroid with its k-1 nearest records as a new group, until it has 2k-1 or fewer; groups are then
  numbered by their lowest record (a canonical form, so that crossover exchanges comparable genes).

With elitism and the MDAV chromosome in the first population, the result is never worse than MDAV on
any macro-group. The whole partition is bounded: every group has k..2k-1 records.

Randomness: the generator of macro-group ``g`` is ``numpy.random.Generator(PCG64(SeedSequence((seed,
g))))``, used inside the Numba kernel; results depend only on ``(seed, data, options)`` and repeat
bit for bit. Macro-groups are numbered in MDAV's order on the average vectors, groups in the output
by macro-group, then by lowest record within it.

There is no published IL for this hybrid on census or EIA (the comparative study's Tables 5-7 do not
list it). Ours, with the defaults, k = 3 / 5 / 10: census 5.398 / 8.662 / 13.445 (MDAV: 5.692 /
9.088 / 14.156), EIA 0.438 / 1.575 / 3.204 (MDAV: 0.483 / 1.667 / 3.840), in about 1 s (census)
and 5 s (EIA) per k on one core; the comparative study's claim, a lower SSE than MDAV, holds. Cost: O(generations x population x m d) per macro-group of m records, linear in n;
memory O(population x m) per macro-group besides MDAV's O(n d).

References
----------
Solanas, A. (2008). Privacy protection with genetic algorithms. In Yang, Shan and Bui (eds.), Success
in Evolutionary Computation, Studies in Computational Intelligence 92, Springer, 215-237. As
described in Chettri, Paul and Dutta, section 3.1 (shared/papers/comparative-study-microaggregation.txt).
"""

import numpy as np

from ._jit import jit
from .mdav import mdav
from .stats import group_means


@jit
def _canonical(labels, n_groups, number):
    """Renumber ``labels`` by each group's lowest index, in place; returns the number of groups."""
    for g in range(n_groups):
        number[g] = -1
    nxt = 0
    for i in range(labels.shape[0]):
        g = labels[i]
        if number[g] < 0:
            number[g] = nxt
            nxt += 1
        labels[i] = number[g]
    return nxt


@jit
def _sse(Z, labels, n_groups, sums, counts):
    """Within-group SSE of ``labels`` (values below ``n_groups``); ``sums``/``counts`` are scratch."""
    m, d = Z.shape
    for g in range(n_groups):
        counts[g] = 0
        for j in range(d):
            sums[g, j] = 0.0
    for i in range(m):
        g = labels[i]
        counts[g] += 1
        for j in range(d):
            sums[g, j] += Z[i, j]
    total = 0.0
    for i in range(m):
        g = labels[i]
        for j in range(d):
            t = Z[i, j] - sums[g, j] / counts[g]
            total += t * t
    return total


@jit
def _sq_to_centroid(Z, i, sums, counts, g):
    s = 0.0
    for j in range(Z.shape[1]):
        t = Z[i, j] - sums[g, j] / counts[g]
        s += t * t
    return s


@jit
def _move(Z, labels, sums, counts, i, g):
    h = labels[i]
    for j in range(Z.shape[1]):
        sums[h, j] -= Z[i, j]
        sums[g, j] += Z[i, j]
    counts[h] -= 1
    counts[g] += 1
    labels[i] = g


@jit
def _repair(Z, labels, k, n_groups, sums, counts, order, target):
    """Make every group of ``labels`` (values below ``n_groups = floor(m / k)``) k..2k-1 records."""
    m, d = Z.shape
    for g in range(n_groups):
        counts[g] = 0
        for j in range(d):
            sums[g, j] = 0.0
    for i in range(m):
        g = labels[i]
        counts[g] += 1
        for j in range(d):
            sums[g, j] += Z[i, j]
    # groups below k: fill from groups above k, else dissolve
    while True:
        q = -1
        for g in range(n_groups):
            if 0 < counts[g] < k and (q < 0 or counts[g] < counts[q]):
                q = g
        if q < 0:
            break
        donor = -1
        donor_d = np.inf
        for i in range(m):
            if counts[labels[i]] > k:
                s = _sq_to_centroid(Z, i, sums, counts, q)
                if s < donor_d:
                    donor_d = s
                    donor = i
        if donor >= 0:
            _move(Z, labels, sums, counts, donor, q)
            continue
        n_members = 0
        for i in range(m):
            if labels[i] == q:
                order[n_members] = i
                n_members += 1
        for t in range(n_members):  # targets from the centroids before the dissolution
            i = order[t]
            best = -1
            best_d = np.inf
            for g in range(n_groups):
                if g != q and counts[g] > 0:
                    s = _sq_to_centroid(Z, i, sums, counts, g)
                    if s < best_d:
                        best_d = s
                        best = g
            target[t] = best
        for t in range(n_members):
            _move(Z, labels, sums, counts, order[t], target[t])
    # groups above 2k-1: split off the farthest record with its k-1 nearest, MDAV-style
    for g in range(n_groups):
        while counts[g] > 2 * k - 1:
            free = 0
            while counts[free] > 0:
                free += 1
            r = -1
            r_d = -1.0
            for i in range(m):
                if labels[i] == g:
                    s = _sq_to_centroid(Z, i, sums, counts, g)
                    if s > r_d:
                        r_d = s
                        r = i
            _move(Z, labels, sums, counts, r, free)
            for t in range(k - 1):
                best = -1
                best_d = np.inf
                for i in range(m):
                    if labels[i] == g:
                        s = 0.0
                        for j in range(d):
                            u = Z[i, j] - Z[r, j]
                            s += u * u
                        if s < best_d:
                            best_d = s
                            best = i
                _move(Z, labels, sums, counts, best, free)


@jit
def _random_partition(rng, m, k, n_groups, out):
    """A random k-partition: a random permutation cut into ``n_groups`` groups of k, the remainder
    (fewer than k records) spread one record at a time over random groups."""
    perm = np.arange(m)
    for i in range(m - 1, 0, -1):  # Fisher-Yates
        j = rng.integers(0, i + 1)
        t = perm[i]
        perm[i] = perm[j]
        perm[j] = t
    for t in range(n_groups * k):
        out[perm[t]] = t // k
    for t in range(n_groups * k, m):
        out[perm[t]] = rng.integers(0, n_groups)


@jit
def _tournament(rng, fitness):
    a = rng.integers(0, fitness.shape[0])
    b = rng.integers(0, fitness.shape[0])
    if fitness[b] < fitness[a] or (fitness[b] == fitness[a] and b < a):
        return b
    return a


@jit
def evolve(Z, k, start, rng, population, generations, crossover, mutation):
    """The GA on one macro-group ``Z`` (``(m, d)``, ``m >= k``) from the k-partition ``start``.

    Returns the fittest chromosome's labels ``0..g-1`` (groups numbered by their lowest record);
    every group has k..2k-1 records. ``rng`` is a ``numpy.random.Generator``.
    """
    m, d = Z.shape
    if m < 2 * k:
        return np.zeros(m, dtype=np.int64)
    n_groups = m // k
    sums = np.empty((n_groups, d))
    counts = np.empty(n_groups, dtype=np.int64)
    order = np.empty(m, dtype=np.int64)
    target = np.empty(m, dtype=np.int64)
    number = np.empty(n_groups, dtype=np.int64)
    pop = np.empty((population, m), dtype=np.int64)
    fitness = np.empty(population)
    pop[0] = start
    for p in range(population):
        if p > 0:
            _random_partition(rng, m, k, n_groups, pop[p])
        _repair(Z, pop[p], k, n_groups, sums, counts, order, target)
        _canonical(pop[p], n_groups, number)
        fitness[p] = _sse(Z, pop[p], n_groups, sums, counts)
    nxt = np.empty((population, m), dtype=np.int64)
    nxt_fitness = np.empty(population)
    for _ in range(generations):
        best = 0
        for p in range(1, population):
            if fitness[p] < fitness[best]:
                best = p
        nxt[0] = pop[best]
        nxt_fitness[0] = fitness[best]
        for c in range(1, population):
            child = nxt[c]
            a = _tournament(rng, fitness)
            b = _tournament(rng, fitness)
            cut = m
            if rng.random() < crossover:
                cut = rng.integers(1, m)
            for i in range(cut):
                child[i] = pop[a, i]
            for i in range(cut, m):
                child[i] = pop[b, i]
            for i in range(m):
                if rng.random() < mutation:
                    child[i] = rng.integers(0, n_groups)
            _repair(Z, child, k, n_groups, sums, counts, order, target)
            _canonical(child, n_groups, number)
            nxt_fitness[c] = _sse(Z, child, n_groups, sums, counts)
        pop, nxt = nxt, pop
        fitness, nxt_fitness = nxt_fitness, fitness
    best = 0
    for p in range(1, population):
        if fitness[p] < fitness[best]:
            best = p
    return pop[best].copy()


@jit
def macro_groups(Z, k, macro):
    """Steps 3-5: the MDAV k-partition of ``Z`` and each k-group's macro-group (MDAV with group
    size ``macro`` on the k-groups' average vectors). Returns ``(labels, macro_of_group)``."""
    labels = mdav(Z, k)
    n_groups = labels.max() + 1
    if macro < 2:
        return labels, np.arange(n_groups)
    centroids = group_means(Z, labels, n_groups)
    return labels, mdav(centroids, macro)


def ga(Z, k, seed=0, macro=7, population=50, generations=300, crossover=0.5, mutation=0.02):
    """MDAV/GA hybrid labels for ``Z`` (``(n, d)`` float64, C-contiguous, ``n >= k >= 2``).

    Options as in the module docstring (already validated: ``seed >= 0``, ``macro >= 1``,
    ``population >= 1``, ``generations >= 0``, rates in [0, 1]). Returns int64 labels ``0..g-1``;
    every group has k..2k-1 records.
    """
    n = Z.shape[0]
    base, macro_of_group = macro_groups(Z, k, macro)
    macro_of_row = macro_of_group[base]
    order = np.argsort(macro_of_row, kind="stable")  # rows by macro-group, ascending within one
    bounds = np.searchsorted(macro_of_row[order], np.arange(macro_of_group.max() + 2))
    labels = np.empty(n, dtype=np.int64)
    nxt = 0
    for g in range(bounds.shape[0] - 1):
        rows = order[bounds[g]:bounds[g + 1]]
        start = np.unique(base[rows], return_inverse=True)[1].astype(np.int64)
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence((seed, g))))
        best = evolve(np.ascontiguousarray(Z[rows]), k, start, rng, population, generations,
                      crossover, mutation)
        labels[rows] = best + nxt
        nxt += int(best.max()) + 1
    return labels
