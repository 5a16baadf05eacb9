"""The split tree that puts similar records into the same block.

Built on the client from a deterministic sample of the standardized QIs (rows chosen by hashing
their global row id with the seed), by recursive median splits:

* ``kd`` (default): each cell is split at the median of its own first principal direction (a
  principal-direction k-d tree). Measured while planning on 100k x 13 clustered rows, k=5: +7.8% IL
  at 5,000-row cells, against +11.8% for splits along the axis of largest variance and +25% for 1-D
  slabs; the stitching of :mod:`pipeline.stitch` then wins the loss back.
* ``pca``: every split along the global first principal component: 1-D slabs in PCP order
  (``shared/papers/mic1d-one-dimension-microaggregation.txt``, principal component projection).
* ``zscore``: every split along the sum of z-scores (the Z-score projection of the same paper).

A cell becomes a leaf (a block) once its estimated row count is at most ``block_size``; an input of
at most ``one_block_rows`` rows is not split at all (one block: the method exactly as published, as
on the CASC files). Leaves are
grouped into *tasks*: the largest subtrees of at most ``task_rows`` estimated rows; a task is one
Dask partition, solved and stitched internally. The split planes above the task level (the
*upper* nodes) are stitched across tasks in a second stage.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .. import kernels
from .._cpu import usable_cores

ORDERS = ("kd", "pca", "zscore")
BLOCK_SIZE = 2500
"""The default largest block of the split tree (BENCHMARKS.md: block size), unless k needs more."""


def default_block_size(k):
    """The block size when none is given: :data:`BLOCK_SIZE`, or 2k for a k above half of it (a
    block holds at least two groups); ``k`` as given (checked later)."""
    return max(BLOCK_SIZE, 2 * k) if isinstance(k, int) and not isinstance(k, bool) else BLOCK_SIZE
MIN_LEAF_SAMPLE = 8
PARALLEL_SAMPLE = 100_000
"""A sample of at least this many rows grows its split tree on several of the client's cores
(:func:`grow_tree`)."""


@dataclass
class SplitTree:
    """Arrays of a binary split tree (see :func:`microagg.kernels.blocking.route`)."""

    directions: np.ndarray          # (nodes, d)
    thresholds: np.ndarray          # (nodes,)
    left: np.ndarray                # (nodes,) child node id or -1 - leaf
    right: np.ndarray
    leaf_task: np.ndarray           # (leaves,) task of each leaf
    task_root: np.ndarray           # (tasks,) node id, or -1 - leaf for a one-leaf task
    upper: np.ndarray               # node ids above the task level, in pre-order
    task_ancestors: list = field(default_factory=list)  # per task: positions in ``upper``, root first
    block_size: int = 0             # the largest block the tree aims at
    largest: int = 0                # a leaf with more rows is cut where it is solved (cut_plan); 0: never

    @property
    def n_leaves(self):
        return len(self.leaf_task)

    @property
    def n_tasks(self):
        return len(self.task_root)

    @cached_property
    def leaf_counts(self):
        """``(leaves of each task, leaves below each upper plane)``."""
        task_leaves = np.bincount(self.leaf_task, minlength=self.n_tasks)
        plane_leaves = np.zeros(len(self.upper), dtype=np.int64)
        for t, ancestors in enumerate(self.task_ancestors):
            plane_leaves[np.asarray(ancestors, dtype=np.int64)] += task_leaves[t]
        return task_leaves, plane_leaves

    def route(self, Z):
        if len(self.thresholds) == 0:
            return np.zeros(Z.shape[0], dtype=np.int64)
        return kernels.route(Z, self.directions, self.thresholds, self.left, self.right)

    def children(self, ref):
        """``(left, right)`` child references of node ``ref`` (>= 0)."""
        return int(self.left[ref]), int(self.right[ref])

    def subtree_leaves(self, ref):
        if ref < 0:
            return [-1 - ref]
        a, b = self.children(ref)
        return self.subtree_leaves(a) + self.subtree_leaves(b)


def sample_plan(n_rows, block_size, sample_rows=None):
    """``(fraction, threshold)`` of the deterministic sample behind the split tree: about 128 sample
    rows per block (at least 20,000, at most 2,000,000) unless ``sample_rows`` says otherwise; a row is
    sampled when the hash of its row id and the seed is below ``threshold`` (None: every row)."""
    target = sample_rows or min(2_000_000, max(20_000, 128 * n_rows // block_size))
    fraction = min(1.0, target / max(n_rows, 1))
    threshold = None if fraction >= 1.0 else np.uint64(min(2**64 - 1, int(fraction * 2.0**64)))
    return fraction, threshold


def principal_direction(Z):
    """Unit first principal direction of the rows of ``Z`` (sign: largest entry positive)."""
    centred = Z - Z.mean(axis=0)
    _, vectors = np.linalg.eigh(centred.T @ centred)
    v = np.ascontiguousarray(vectors[:, -1])
    if v[np.argmax(np.abs(v))] < 0:
        v = -v
    return v


def grow_tree(Z, fraction, block_size, one_block_rows, min_child, fixed, threads=None, depth=None):
    """:func:`microagg.kernels.grow_tree` (same arguments, the same arrays) on up to ``threads`` of the
    client's cores (default: its cores, at most 8): the top ``depth`` levels of cells are split one
    level at a time (:func:`microagg.kernels.split_cell`, each level's cells side by side), the
    subtrees below grown side by side, and their nodes and leaves renumbered into the one tree's
    depth-first pre-order. ``depth`` (default: enough levels for ``threads`` subtrees, none for a
    sample under :data:`PARALLEL_SAMPLE` rows) is a parameter for the tests.

    The sample behind the tree grows with the input (up to 2M rows at 40M input rows and more), and the
    tree is grown while every worker waits: at 10M rows, 512,881 sample rows, about 1.2 s on one core.
    """
    threads = threads or min(8, usable_cores())
    if depth is None:
        depth = int(np.ceil(np.log2(threads))) if threads > 1 and len(Z) >= PARALLEL_SAMPLE else 0
    if depth == 0:  # every argument passed: a default left to Numba takes the dispatcher's compile path
        return kernels.grow_tree(Z, fraction, block_size, one_block_rows, min_child, fixed, True)
    cells = {(): (Z, True)}    # path from the root (0 left, 1 right) -> (rows, whether the root)
    splits = {}                # path -> (direction, threshold, estimate) of a split cell
    grown = {}                 # path -> kernels.grow_tree of a subtree
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in range(depth):
            level = list(cells.items())
            cells = {}
            for (path, (rows, root)), (split, v, threshold, estimate, goes_left) in zip(level, pool.map(
                    lambda c: kernels.split_cell(c[1][0], fraction, block_size, one_block_rows, min_child, fixed,
                                                 c[1][1]), level)):
                if split:
                    splits[path] = (v, threshold, estimate)
                    cells[path + (0,)] = (np.ascontiguousarray(rows[goes_left]), False)
                    cells[path + (1,)] = (np.ascontiguousarray(rows[~goes_left]), False)
                else:
                    grown[path] = None  # a leaf
        level = list(cells.items())
        grown.update(zip([path for path, _ in level], pool.map(
            lambda c: kernels.grow_tree(c[1][0], fraction, block_size, one_block_rows, min_child, fixed, c[1][1]),
            level)))
    nodes = []       # (direction, threshold, estimate, left, right) in pre-order, children filled in later
    n_leaves = 0

    def emit(path):
        nonlocal n_leaves
        if path in splits:
            ref = len(nodes)
            nodes.append([*splits[path], 0, 0])
            nodes[ref][3] = emit(path + (0,))
            nodes[ref][4] = emit(path + (1,))
            return ref
        sub = grown[path]
        if sub is None or not len(sub[1]):
            n_leaves += 1
            return -n_leaves  # -1 - leaf
        first_node, first_leaf = len(nodes), n_leaves
        directions, thresholds, left, right, estimates, leaves = sub
        shift = [np.where(child >= 0, child + first_node, child - first_leaf) for child in (left, right)]
        nodes.extend(zip(directions, thresholds, estimates, *shift))
        n_leaves += leaves
        return first_node

    emit(())
    d = Z.shape[1]
    if not nodes:
        return np.empty((0, d)), np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), n_leaves
    directions, thresholds, estimates, left, right = zip(*nodes)
    return (np.array(directions, dtype=np.float64).reshape(-1, d), np.array(thresholds, dtype=np.float64),
            np.array(left, dtype=np.int64), np.array(right, dtype=np.int64), np.array(estimates, dtype=np.float64),
            n_leaves)


def build_tree(Z, fraction, block_size, task_rows, k, order="kd", one_block_rows=0):
    """Split tree from the sample ``Z`` (rows in row-id order) drawn with probability ``fraction``;
    a cell is split while its estimated rows exceed ``block_size``, but not at all (one block) when
    the whole input is estimated at most ``one_block_rows``."""
    if order not in ORDERS:
        raise ValueError(order)
    d = Z.shape[1]
    fixed = None
    if order == "pca":
        fixed = principal_direction(Z)
    elif order == "zscore":
        fixed = np.full(d, 1.0 / np.sqrt(d))
    min_child = max(MIN_LEAF_SAMPLE, k)
    directions, thresholds, left, right, estimates, n_leaves = grow_tree(
        np.ascontiguousarray(Z, dtype=np.float64), fraction, float(block_size), float(one_block_rows), min_child,
        np.empty(0) if fixed is None else np.ascontiguousarray(fixed, dtype=np.float64))
    root = 0 if len(thresholds) else -1
    tree = SplitTree(
        directions=directions,
        thresholds=thresholds,
        left=left,
        right=right,
        leaf_task=np.zeros(n_leaves, dtype=np.int64),
        task_root=np.zeros(0, dtype=np.int64),
        upper=np.zeros(0, dtype=np.int64),
        block_size=int(block_size),
        # twice the block size: a leaf the sample misjudged that much could not be split (identical
        # records); never a whole input meant as one block
        largest=max(2 * int(block_size), int(one_block_rows)),
    )
    roots, upper, ancestors = [], [], []

    def assign(ref, path):
        if ref < 0 or estimates[ref] <= task_rows:
            task = len(roots)
            roots.append(ref)
            ancestors.append(list(path))
            for leaf in tree.subtree_leaves(ref):
                tree.leaf_task[leaf] = task
            return
        position = len(upper)
        upper.append(ref)
        a, b = tree.children(ref)
        assign(a, path + [position])
        assign(b, path + [position])

    assign(root, [])
    tree.task_root = np.array(roots, dtype=np.int64)
    tree.upper = np.array(upper, dtype=np.int64)
    tree.task_ancestors = ancestors
    return tree


@dataclass
class Forest:
    """One split tree per stratum, numbered as one: the leaves, tasks and upper planes of stratum
    ``s`` follow those of the strata before it, so ids are release-wide. Without strata it is one
    tree and every id is the tree's own (releases without strata do not change).
    """

    trees: list
    tree_rows: np.ndarray | None = None  # each tree's rows (exactly: its strata's), to pack small trees
    task_rows: int = 0                   # the most rows of such a pack

    def __post_init__(self):
        self.leaf_offset = np.cumsum([0] + [t.n_leaves for t in self.trees])
        self.task_offset = np.cumsum([0] + [t.n_tasks for t in self.trees])
        self.upper_offset = np.cumsum([0] + [len(t.upper) for t in self.trees])
        # seed tags of a tree range over its leaves and nodes (a small leaf joining its sibling)
        self.tag_offset = np.cumsum([0] + [t.n_leaves + len(t.thresholds) for t in self.trees])
        self.leaf_task = np.concatenate([t.leaf_task + o for t, o in zip(self.trees, self.task_offset)])
        self.task_ancestors = [[int(p) + int(o) for p in path]
                               for t, o in zip(self.trees, self.upper_offset) for path in t.task_ancestors]
        self.task_stratum = np.repeat(np.arange(len(self.trees)), [t.n_tasks for t in self.trees])
        self.task_pack = self._packs()
        self.leaf_pack = self.task_pack[self.leaf_task]

    def _packs(self):
        """The pack (Dask partition) each task is solved in, in task order: a tree of one task (a
        stratum of at most about ``task_rows`` rows, so no upper plane) shares its pack with the trees
        of one task next to it, up to ``task_rows`` rows in all; every other task has a pack of its
        own (and so every task without strata). Each task of a pack is solved on its own
        (:func:`pipeline.release._solve_pack`). One task per stratum made as many tasks as strata, and
        as many pieces per input partition: 1M rows in 19,445 strata (a zipf-like spread, most of
        them small) took 82.6 s, against 7.3 s unstratified (BENCHMARKS.md, many small strata)."""
        pack = []
        filled, open_ = 0, False
        for s, tree in enumerate(self.trees):
            small = self.tree_rows is not None and tree.n_tasks == 1
            rows = int(self.tree_rows[s]) if small else 0
            if small and open_ and filled + rows <= self.task_rows:
                pack.append(pack[-1])
                filled += rows
                continue
            first = pack[-1] + 1 if pack else 0
            pack.extend(range(first, first + tree.n_tasks))
            open_, filled = small, rows
        return np.array(pack, dtype=np.int64)

    @property
    def n_packs(self):
        return int(self.task_pack[-1]) + 1 if len(self.task_pack) else 0

    def pack_tasks(self, pack):
        """The release-wide tasks of ``pack``, in order."""
        a, b = np.searchsorted(self.task_pack, [pack, pack + 1])
        return range(int(a), int(b))

    @property
    def n_leaves(self):
        return int(self.leaf_offset[-1])

    @property
    def n_tasks(self):
        return int(self.task_offset[-1])

    @property
    def n_upper(self):
        return int(self.upper_offset[-1])

    def route(self, Z, stratum=None):
        """Release-wide leaf of every row; ``stratum`` (int codes) is required with several trees."""
        Z = at_mean(Z)
        if len(self.trees) == 1:
            return self.trees[0].route(Z)
        leaf = np.empty(Z.shape[0], dtype=np.int64)
        for s, rows in enumerate(by_stratum(stratum, len(self.trees))):
            if len(rows):
                leaf[rows] = self.leaf_offset[s] + self.trees[s].route(np.ascontiguousarray(Z[rows]))
        return leaf

    def route_raw(self, X, mean, std, stratum=None):
        """:meth:`route` of the raw rows ``X``, standardized by ``mean`` and ``std`` on the way (one
        tree: row by row, no standardized copy of ``X``)."""
        if len(self.trees) > 1:
            return self.route(kernels.standardize(np.ascontiguousarray(X), mean, std), stratum)
        tree = self.trees[0]
        return kernels.route_raw(X, mean, std, tree.directions, tree.thresholds, tree.left, tree.right)

    def local_task(self, task):
        """``(tree, its task id, leaf offset, seed-tag offset)`` of release-wide task ``task``."""
        s = int(self.task_stratum[task])
        return self.trees[s], task - int(self.task_offset[s]), int(self.leaf_offset[s]), int(self.tag_offset[s])

    def local_plane(self, position):
        """``(tree, its position in tree.upper)`` of release-wide upper plane ``position``."""
        s = int(np.searchsorted(self.upper_offset, position, side="right") - 1)
        return self.trees[s], position - int(self.upper_offset[s])


def cut_plan(Z, size):
    """How to cut the rows of a block far above ``size`` rows as the split tree cuts a cell, but on
    the rows themselves: median splits along each piece's own first principal direction (ties in row
    order) until every piece holds at most ``size`` rows. Returns ``(order, steps)``: ``order`` puts
    every piece's rows together (each piece's in increasing position), and ``steps``, children before
    their parent, are ``(a, b, None, None)`` for a piece ``order[a:b]`` and ``(a, b, direction,
    threshold)`` for a split of ``order[a:b]`` (its plane, to stitch across).

    For the leaves the sample cannot split: thousands of identical records (the zeros of
    zero-inflated tax data) fall on one side of every split, and a leaf of 943,877 rows took MDAV's
    O(n^2) 12 minutes."""
    Z = at_mean(Z)
    order = np.arange(Z.shape[0])
    steps = []

    def cut(a, b):
        if b - a <= size:
            steps.append((a, b, None, None))
            return
        rows = order[a:b]
        Zr = Z[rows]
        direction = principal_direction(Zr)
        projection = Zr @ direction
        ranked = np.argsort(projection, kind="stable")
        half = (b - a) // 2
        threshold = 0.5 * (projection[ranked[half - 1]] + projection[ranked[half]])
        order[a:a + half], order[a + half:b] = np.sort(rows[ranked[:half]]), np.sort(rows[ranked[half:]])
        cut(a, a + half)
        cut(a + half, b)
        steps.append((a, b, direction, threshold))

    cut(0, Z.shape[0])
    return order, steps


def at_mean(Z):
    """``Z`` with its missing (NaN) z-scores at 0, the column mean: where blocking places an incomplete
    record (the block's method then measures distances over its observed coordinates only)."""
    if not np.isnan(Z).any():
        return Z
    return np.ascontiguousarray(np.where(np.isnan(Z), 0.0, Z))


def by_stratum(stratum, n_strata):
    """The positions of each stratum's rows (``stratum``: codes ``0..n_strata-1``), each in increasing
    order: one sort, where a mask per stratum made thousands of strata cost seconds."""
    order = np.argsort(stratum, kind="stable")
    bounds = np.searchsorted(stratum[order], np.arange(n_strata + 1))
    return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def build_forest(Z, stratum, n_strata, fraction, block_size, task_rows, k, order="kd", one_block_rows=0,
                 tree_rows=None):
    """A :class:`Forest` from the sample ``Z`` (rows in row-id order) and the sample rows' strata
    (``stratum``, codes ``0..n_strata-1``; None: one stratum); see :func:`build_tree`. ``tree_rows``:
    the rows of each stratum, by which trees of one task are packed (:meth:`Forest._packs`)."""
    Z = at_mean(Z)
    if stratum is None:
        return Forest([build_tree(Z, fraction, block_size, task_rows, k, order, one_block_rows)])
    trees = []
    for rows in by_stratum(stratum, n_strata):
        rows = np.ascontiguousarray(Z[rows])
        trees.append(build_tree(rows, fraction, block_size, task_rows, k, order if len(rows) > 1 else "kd",
                                one_block_rows))
    return Forest(trees, tree_rows, task_rows)
