"""DBM: density-based microaggregation (Das and Borah), DBSCAN clusters split by MDAV.

The algorithm of ``shared/papers/dbm-density-based-microaggregation.txt`` section 3, ``DBM(Eps, k)``:

1. DBSCAN(Eps, MinPts = k) on the (standardized) records: clusters and noise (section 2.3; Ester,
   Kriegel, Sander and Xu, 1996). A record is a *core* record when its closed Eps-ball holds at
   least k records, itself included; a cluster is a maximal set of density-connected records.
2. Each noise record joins its nearest cluster "using k-nearest-neighbour": its k nearest clustered
   records (records DBSCAN put in a cluster; noise never votes for noise) vote, the cluster with
   the most votes wins, a tie goes to the tied cluster holding the nearest of those neighbours.
3. Each cluster of 2k or more records is split by MDAV (our :func:`.mdav.mdav` on the cluster's
   rows); a cluster of k..2k-1 records is a group as it stands.

Two cases the paper leaves open, settled here so that every group has k..2k-1 records:

* A DBSCAN cluster can hold fewer than k records: a border record reachable from two clusters goes
  to the one discovered first, so a later cluster may lose records a core record counted. A cluster
  still smaller than k after step 2 is dissolved and its records are assigned, by the vote of
  step 2, among the records of the clusters that have k or more.
* If DBSCAN finds no core record (Eps below every record's core radius), or no cluster reaches k
  records, the whole input is one cluster: DBM falls back to MDAV.

After step 3 every group has between k and 2k-1 records (MDAV's guarantee on each cluster of >= 2k,
the clusters of k..2k-1 as they are), so the method is *bounded*.

Default Eps. The paper leaves Eps to the user ("an approach to determine value of Eps is to be
integrated", section 5). The default follows the DBSCAN paper's own rule (Ester et al. 1996,
section 4.2): sort the records by their k-dist and take as Eps the k-dist at the threshold given
by an estimated noise percentage. A record's *core radius* is the distance to its (k-1)-th nearest
other record, the radius of the smallest ball around it holding k records (itself included): a
record is core exactly when its core radius is at most Eps. The default Eps is the nearest-rank
99% quantile of the core radii (the ``ceil(0.99 n)``-th smallest): 99% of the records or more are
core, an estimated 1% noise. Measured on the CASC files (IL, k = 3 / 5 / 10): this rule gives
census 5.796 / 9.088 / 14.156 and EIA 0.438 / 1.048 / 2.674; the knee of the sorted k-dist curve
(the point farthest below its chord, at about the 90% quantile on both files) gives census
5.657 / 8.950 / 14.156 but EIA 0.845 / 1.836 / 4.001, and smaller quantiles are worse still on EIA:
with many small dense clusters and hundreds of noise records joined to them, the clusters become
elongated and MDAV's fixed-size groups inside them lose more than it gains. The default is computed
per input (per block in the pipeline), from the block's own core radii.

Memory O(n d + n k): no neighbour lists are stored. DBSCAN's expansion recomputes a core record's
Eps-neighbourhood when it leaves the queue (each core record is expanded once), so the work is
O(n^2 d) for the core radii plus O(n^2 d) for the expansion, plus O(n_noise n d) for step 2.

Tie-breaking (deterministic, a function of the row order only): records are scanned in ascending
row index; a cluster starts at the lowest-index unlabelled core record and clusters are numbered in
order of discovery; a border record joins the first cluster that reaches it; among equidistant
neighbours the lower row index is nearer (:func:`.select.keep_smallest`); a cluster's rows are
passed to MDAV in ascending row order, so MDAV's ties also go to the lowest row index. Groups are
numbered cluster by cluster in discovery order, and within a cluster in MDAV's formation order.

References
----------
Das, S. K. and Borah, B. A density-based micro aggregation technique for privacy-preserving data
mining (shared/papers/dbm-density-based-microaggregation.txt).
Ester, M., Kriegel, H.-P., Sander, J. and Xu, X. (1996). A density-based algorithm for discovering
clusters in large spatial databases with noise. KDD-96, 226-231.
"""

import numpy as np

from ._jit import jit
from .mdav import _distances_to, column_major, mdav
from .select import keep_smallest

DEFAULT_CORE_QUANTILE = 0.99
"""Share of records that are core under the default Eps (an estimated 1% noise)."""


@jit
def core_radii2(Z, k):
    """Squared core radius of every row: the squared distance to its (k-1)-th nearest other row.

    Row ``i`` is a DBSCAN core record for ``MinPts = k`` exactly when ``core_radii2(Z, k)[i] <=
    Eps**2``. ``Z``: ``(n, d)`` float64 C-contiguous with ``n >= k >= 2``.
    """
    n, d = Z.shape
    Y = column_major(Z)
    dist = np.empty(n)
    need = k - 1
    best_d = np.empty(need)
    best_i = np.empty(need, dtype=np.int64)
    radii = np.empty(n)
    for i in range(n):
        _distances_to(Y, Y.shape[1], Z[i], dist)
        filled = 0
        for j in range(n):
            if j != i:
                filled = keep_smallest(best_d, best_i, filled, dist[j], j)
        radii[i] = best_d[need - 1]
    return radii


@jit
def default_eps2(radii2, quantile):
    """Squared default Eps: the nearest-rank ``quantile`` of the squared core radii.

    The ``ceil(quantile * n)``-th smallest value, so at least that share of the records is core.
    """
    n = radii2.shape[0]
    rank = int(np.ceil(quantile * n))
    if rank < 1:
        rank = 1
    if rank > n:
        rank = n
    return np.sort(radii2)[rank - 1]


@jit
def dbscan(Z, eps2, radii2):
    """DBSCAN cluster of every row (``-1`` for noise) and the number of clusters.

    ``radii2`` from :func:`core_radii2` with ``MinPts = k`` decides the core records
    (``radii2 <= eps2``). Rows are scanned in ascending index; clusters are numbered in discovery
    order; a border row joins the first cluster that reaches it.
    """
    n, d = Z.shape
    Y = column_major(Z)
    dist = np.empty(n)
    cluster = np.full(n, -1, dtype=np.int64)
    queue = np.empty(n, dtype=np.int64)
    n_clusters = 0
    for i in range(n):
        if cluster[i] != -1 or radii2[i] > eps2:
            continue
        cluster[i] = n_clusters
        head = 0
        tail = 1
        queue[0] = i
        while head < tail:
            p = queue[head]
            head += 1
            if radii2[p] > eps2:       # a border record: reached, but it does not expand
                continue
            _distances_to(Y, Y.shape[1], Z[p], dist)
            for j in range(n):
                if cluster[j] == -1 and dist[j] <= eps2:
                    cluster[j] = n_clusters
                    queue[tail] = j
                    tail += 1
        n_clusters += 1
    return cluster, n_clusters


@jit
def _vote(Y, Z, row, voters, cluster, k, dist, best_d, best_i):
    """Cluster chosen by the ``k`` nearest rows among ``voters`` (a mask) for ``row``.

    Majority vote; on a tie, the tied cluster of the nearest neighbour (lowest row index among
    equidistant rows).
    """
    n = Y.shape[1]
    _distances_to(Y, Y.shape[1], Z[row], dist)
    filled = 0
    for j in range(n):
        if voters[j] and j != row:
            filled = keep_smallest(best_d, best_i, filled, dist[j], j)
    winner = -1
    winner_votes = 0
    for t in range(filled):
        c = cluster[best_i[t]]
        votes = 0
        for u in range(filled):
            if cluster[best_i[u]] == c:
                votes += 1
        if votes > winner_votes:       # strict: the earlier (nearer) cluster keeps a tie
            winner_votes = votes
            winner = c
    return winner


@jit
def _assign(Y, Z, rows, voters, cluster, k, target):
    """``target[row]`` = the vote of :func:`_vote` for each of ``rows``, voters' clusters read from ``cluster``."""
    n = Y.shape[1]
    dist = np.empty(n)
    best_d = np.empty(k)
    best_i = np.empty(k, dtype=np.int64)
    for t in range(rows.shape[0]):
        row = rows[t]
        target[row] = _vote(Y, Z, row, voters, cluster, k, dist, best_d, best_i)


@jit
def _attach_noise(Z, cluster, n_clusters, k):
    """Steps 2 and the size repair: every row in a cluster of at least ``k`` rows (or all in one)."""
    n = Z.shape[0]
    Y = column_major(Z)
    if n_clusters == 0:
        return np.zeros(n, dtype=np.int64), 1
    voters = cluster >= 0
    noise = np.flatnonzero(~voters)
    assigned = cluster.copy()
    _assign(Y, Z, noise, voters, cluster, k, assigned)
    sizes = np.bincount(assigned, minlength=n_clusters)
    small = sizes[assigned] < k
    if small.any():
        voters = ~small
        if not voters.any():
            return np.zeros(n, dtype=np.int64), 1
        before = assigned.copy()
        _assign(Y, Z, np.flatnonzero(small), voters, before, k, assigned)
    # renumber the surviving clusters in discovery order
    sizes = np.bincount(assigned, minlength=n_clusters)
    new_id = np.full(n_clusters, -1, dtype=np.int64)
    m = 0
    for c in range(n_clusters):
        if sizes[c] > 0:
            new_id[c] = m
            m += 1
    for i in range(n):
        assigned[i] = new_id[assigned[i]]
    return assigned, m


@jit
def _split(Z, clusters, n_clusters, k):
    """Step 3: group labels, clusters of >= 2k rows split by MDAV on their rows (ascending order)."""
    n, d = Z.shape
    counts = np.bincount(clusters, minlength=n_clusters)
    start = np.zeros(n_clusters + 1, dtype=np.int64)
    for c in range(n_clusters):
        start[c + 1] = start[c] + counts[c]
    rows = np.empty(n, dtype=np.int64)
    fill = start[:n_clusters].copy()
    for i in range(n):
        c = clusters[i]
        rows[fill[c]] = i
        fill[c] += 1
    labels = np.empty(n, dtype=np.int64)
    group = 0
    for c in range(n_clusters):
        members = rows[start[c]:start[c + 1]]
        m = members.shape[0]
        if m >= 2 * k:
            sub = np.empty((m, d))
            for t in range(m):
                for j in range(d):
                    sub[t, j] = Z[members[t], j]
            inner = mdav(sub, k)
            top = 0
            for t in range(m):
                labels[members[t]] = group + inner[t]
                if inner[t] > top:
                    top = inner[t]
            group += top + 1
        else:
            for t in range(m):
                labels[members[t]] = group
            group += 1
    return labels


@jit
def dbm(Z, k, eps2):
    """DBM labels for ``Z`` (``(n, d)`` float64, C-contiguous, ``n >= k >= 2``).

    ``eps2`` is the squared Eps; a negative value asks for the default (see the module docstring).
    Returns int64 labels ``0..g-1``; every group has between k and 2k-1 records.
    """
    n = Z.shape[0]
    if n < 2 * k:
        return np.zeros(n, dtype=np.int64)
    radii2 = core_radii2(Z, k)
    if eps2 < 0.0:
        eps2 = default_eps2(radii2, DEFAULT_CORE_QUANTILE)
    cluster, n_clusters = dbscan(Z, eps2, radii2)
    clusters, n_clusters = _attach_noise(Z, cluster, n_clusters, k)
    return _split(Z, clusters, n_clusters, k)
