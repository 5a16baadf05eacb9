"""Solving a task's blocks and stitching the groups across split planes (NumPy glue over kernels).

A block is solved by the job's solver (a method's kernel, then its refinement, if any). Blocking puts records that are close
but on opposite sides of a split plane into different groups; stitching wins that loss back: the
groups of both sides whose centroids lie within a band around the plane form a *window*; the window
is re-solved twice (its groups improved by the local-search kernel, and the window re-partitioned
by the solver and then improved) and the better result is kept only if it lowers the window's SSE.
Neither step can raise the SSE or produce a group smaller than k. Before any plane is stitched,
each block's own groups may get ``block_sweeps`` sweeps of the same local search (when the input is
cut into blocks at all), which makes the bands that the stitching needs narrower for the same loss.

Windows larger than ``window_rows`` are cut into sub-windows of whole groups by recursive median
splits of the group centroids along the window's principal direction, so the cost stays linear.

Inside a task the rows are ordered by leaf (depth-first) so that every node of the split tree is a
contiguous range of rows, and every group is recorded once in a table (its shape, its rows, its first
row: :func:`microagg.kernels.groups.record_groups`) when it is formed, so stitching a plane reads the
shapes of the groups below it from the table and computes only those of the groups it forms.

Everything here is deterministic: rows are visited in leaf order and, inside a leaf, in global
row-id order; groups in id order.
"""

import functools
from dataclasses import dataclass

import numpy as np

from .. import kernels
from ..kernels import groups, refine, windows
from ..kernels.refine import TOL, refine_sse
from ..kernels.missing import fill_missing
from . import blocking

NEIGHBORS = 6  # candidate groups per group in the local search (8: +18% CPU, same IL; BENCHMARKS.md)
# The local search is called with every argument (its tolerance TOL, no rescan): a call that left a
# kernel's defaults to Numba went through its dispatcher's compile path (about 0.4 ms a call, once
# per block; BENCHMARKS.md).


@dataclass(frozen=True)
class Stitching:
    """How hard the stitching windows are worked.

    band : a group is near a plane if ``|centroid - plane| <= band * (its RMS radius + the median
        RMS radius)``
    window_sweeps : local-search sweeps per stitching window
    repartition : also re-partition each window from scratch by the block solver (keep the better)
    window_rows : largest window re-solved at once
    upper_band : the band of the split planes between tasks (their groups travel to another task)
    neighbors : candidate groups per group in the local search
    block_sweeps : local-search sweeps over each block's own groups before its planes are stitched
        (only when the input is cut into blocks: one block is the method's partition as it is)
    """

    band: float = 0.25
    window_sweeps: int = 1
    repartition: bool = False
    window_rows: int = 2000
    upper_band: float = 0.25
    neighbors: int = NEIGHBORS
    block_sweeps: int = 1


STITCHING = {
    # the defaults: one local-search sweep over each block's groups, then a light pass across every
    # split plane: the same information loss as the pass alone with a wider band (0.5 / 0.25) in
    # about 7 % less CPU (BENCHMARKS.md, eighteenth session)
    "light": Stitching(),
    # no block sweeps, fewer candidate groups, a narrower band between tasks: about a quarter less CPU
    # in the block tasks than light for about 4.4 % more information loss at 1M rows: below global
    # MDAV's at 100k rows, above it at 1M (0.7426 against 0.7286 %, where light gives 0.7113 %;
    # BENCHMARKS.md, fifteenth and eighteenth sessions)
    "fast": Stitching(upper_band=0.15, neighbors=4, block_sweeps=0),
    # wider bands, local search to convergence, windows also re-partitioned from scratch
    "deep": Stitching(band=1.0, window_sweeps=4, repartition=True, window_rows=4000, upper_band=0.5, block_sweeps=0),
}


def compact(labels):
    """Relabel to ``0..g-1`` in order of first appearance (any int64 ids, dense or sparse)."""
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    if len(labels) and labels.min() >= 0 and labels.max() < max(4 * len(labels), 1 << 20):
        return groups.compact_labels(labels)[0]  # ids below a bound: one pass (and an 8 MiB table at most)
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse].astype(np.int64)


def solve_block(Z, k, solver, tag=0, race=None):
    """Labels of one block by ``solver`` (a :class:`pipeline.solver.Solver`); ``tag`` seeds it,
    ``race`` is its task's :meth:`Solver.race <pipeline.solver.Solver.race>`."""
    return np.ascontiguousarray(solver.partition(Z, k, tag, race), dtype=np.int64)


def duplicate_groups(Z, k):
    """``(labels, g)``: the rows of ``Z`` whose whole tuple occurs at least ``k`` times, grouped
    among themselves (each tuple's rows in row order, in groups of k, the last of k..2k-1), labels
    ``0..g-1`` in the tuples' sorted order; -1 for the other rows. Such groups cost nothing.

    The blocked solve takes them out before the method runs: exact ties made Ward's merges (``kward``,
    and so ``auto``), DBA, GSMS and MD's farthest-pair scan quadratic or worse (a block of 2,500
    identical records: 17 s in kward against 0.18 s for distinct ones), and zero-inflated extracts
    have blocks of identical records by the thousand."""
    labels = np.full(Z.shape[0], -1, dtype=np.int64)
    if Z.shape[0] < k or not _may_repeat(Z, k):
        return labels, 0
    _, inverse, counts = np.unique(Z, axis=0, return_inverse=True, return_counts=True)
    frequent = np.flatnonzero(counts >= k)
    if not len(frequent):
        return labels, 0
    order = np.argsort(inverse.ravel(), kind="stable")  # each tuple's rows together, in row order
    starts = np.concatenate([[0], np.cumsum(counts)])
    g = 0
    for t in frequent:
        members = order[starts[t]:starts[t + 1]]
        n_groups = len(members) // k
        labels[members] = g + np.minimum(np.arange(len(members)) // k, n_groups - 1)
        g += n_groups
    return labels, g


@functools.lru_cache(maxsize=64)
def _projection_weights(d):
    """:func:`_may_repeat`'s projection, made once per width (``np.linspace`` took a quarter of its time)."""
    weights = np.linspace(1.0, 2.0, d)
    weights.flags.writeable = False
    return weights


def _may_repeat(Z, k):
    """False if no row of ``Z`` can occur ``k`` times: no value of one projection of the rows does
    (equal rows project equally). A sort of one column, where ``np.unique(Z, axis=0)`` sorts whole
    rows: 0.1 against 1.5 ms for a block of 2,500 x 13, on every block of every job. False with a
    missing value (NaN: rows with one are left to the method)."""
    projection = np.sort(Z @ _projection_weights(Z.shape[1]))
    if np.isnan(projection[-1]):
        return False
    return bool((projection[k - 1:] == projection[:len(projection) - k + 1]).any())


def solve_without_duplicates(Z, k, solver, tag=0, race=None):
    """:func:`solve_block` of the rows of ``Z`` left once :func:`duplicate_groups` has grouped the
    frequent tuples; fewer than k rows left join the nearest of those groups."""
    labels, g = duplicate_groups(Z, k)
    if not g:
        return solve_block(Z, k, solver, tag, race)
    rest = np.flatnonzero(labels < 0)
    if len(rest) >= k:
        labels[rest] = solve_block(np.ascontiguousarray(Z[rest]), k, solver, tag, race) + g
    elif len(rest):
        groups.attach_leftovers(np.ascontiguousarray(Z), labels, g)
    return labels


def plane_distance(centroids, direction, threshold):
    """Each centroid's distance to the plane ``x . direction = threshold``, the projection summed in column
    order (:func:`microagg.kernels.blocking.project`, as :func:`microagg.kernels.windows.plane_candidates`):
    the same bits on every CPU, which a BLAS product does not promise."""
    return np.abs(kernels.project(np.ascontiguousarray(centroids, dtype=np.float64),
                                  np.ascontiguousarray(direction, dtype=np.float64)) - threshold)


def near_plane(distance, radius, band):
    """Groups within the band around a plane (scale taken from the groups themselves). The block tasks'
    planes apply the same rule inside :func:`microagg.kernels.windows.plane_candidates`; a test holds the two
    to the same groups."""
    return distance <= band * (radius + np.median(radius))


def improve_window(Z, labels, k, solver, settings):
    """Best of (local search on ``labels``) and (re-partition by ``solver`` + local search).

    ``labels`` are ``0..g-1`` for the rows of ``Z``; returns ``(labels, gain)``: the better
    labels (``0..g'-1``) and the SSE they win, or the input labels and 0.
    """
    g = int(labels.max()) + 1
    before = kernels.sse(Z, labels, g)
    kept = labels.copy()
    refine(Z, kept, k, 2 * k - 1, settings.neighbors, settings.window_sweeps, TOL, False)
    kept_sse = kernels.sse(Z, kept, int(kept.max()) + 1)
    best, best_sse = kept, kept_sse
    if settings.repartition:
        fresh = solve_block(Z, k, solver)
        refine(Z, fresh, k, 2 * k - 1, settings.neighbors, settings.window_sweeps, TOL, False)
        fresh_sse = kernels.sse(Z, fresh, int(fresh.max()) + 1)
        if fresh_sse < kept_sse:
            best, best_sse = fresh, fresh_sse
    if best_sse < before:
        return best, before - best_sse
    return labels, 0.0


def improve_groups(Z, local, n_groups, candidates, k, solver, settings, shape=None):
    """Re-solve the groups ``candidates`` of ``local`` (labels ``0..n_groups-1`` of ``Z``) window by
    window (:func:`microagg.kernels.windows.split_windows`), each window by :func:`improve_window` (the
    local search, and a re-partition by the solver: the stitching that re-partitions; the local search
    alone runs on a :class:`GroupTable`). ``shape`` is ``groups.group_shape(Z, local, n_groups)`` if the
    caller has it.

    Returns ``(new_local, gain)``: improved windows get fresh labels from ``n_groups`` up.
    """
    centroids, _, sizes = shape or groups.group_shape(Z, local, n_groups)
    candidates = np.ascontiguousarray(candidates, dtype=np.int64)
    start, rows = groups.group_members(local, n_groups)
    order, bounds = windows.split_windows(centroids, candidates, sizes, settings.window_rows)
    local = local.copy()
    gain = 0.0
    next_id = n_groups
    for w in range(len(bounds) - 1):
        members = groups.gather_groups(start, np.diff(start), rows, order[bounds[w]:bounds[w + 1]])
        new, won = improve_window(np.ascontiguousarray(Z[members]), compact(local[members]), k, solver, settings)
        if won > 0:
            gain += won
            local[members] = new + next_id
            next_id += int(new.max()) + 1
    return local, gain


def task_order(leaf, tree, task):
    """Row order that makes every node of the task's subtree a contiguous range.

    Returns ``(order, bounds)``: ``order`` sorts the rows by leaf in depth-first order (stable, so
    rows keep their row-id order inside a leaf); ``bounds[i]:bounds[i + 1]`` is the range of the
    ``i``-th leaf of ``tree.subtree_leaves(tree.task_root[task])``.
    """
    leaves = tree.subtree_leaves(int(tree.task_root[task]))
    rank = np.full(tree.n_leaves, len(leaves), dtype=np.int64)
    rank[leaves] = np.arange(len(leaves))
    start, order = groups.group_members(rank[leaf], len(leaves) + 1)  # a stable counting sort
    return order, start[: len(leaves) + 1]


class GroupTable:
    """Every group of a set of rows, recorded once when it forms (:func:`microagg.kernels.groups.record_groups`:
    its shape, its member rows, its first row), so that re-solving the groups near a plane reads their shapes
    and members from the table instead of relabelling and measuring every row below the plane (4 of the 10M
    job's 19 CPU-s of stitching inside the tasks; BENCHMARKS.md, forty-ninth session). A group keeps its id
    until a window changes it. Holds ``labels`` (group ids, -1 until labelled) of the rows of ``Z``, the array
    itself, not a copy: rows not labelled yet may be reordered in place.
    """

    first_room = 2
    """The table's first size: ``first_room`` groups per k rows, and a pool of ``first_room`` times the rows.
    The blocks' groups take about half of it, the groups the stitching forms the rest; it doubles when they
    need more."""

    def __init__(self, Z, k):
        n, d = Z.shape
        self.Z = Z
        self.labels = np.full(n, -1, dtype=np.int64)
        self.next = 0
        # centroids, radius, sizes, start, count (by group id); member rows; first rows
        self.table = (np.empty((0, d)), np.empty(0), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64),
                      np.empty(0, dtype=np.int64))
        self.pool = np.empty(0, dtype=np.int64)
        self.top = 0
        self.head = np.full(n, -1, dtype=np.int64)
        self._room(self.first_room * (n // max(k, 1)) + 1, self.first_room * n + 1)

    def _room(self, groups_more, rows_more):
        """Grow the table to hold ``groups_more`` more groups and the pool ``rows_more`` more rows."""
        need = self.next + groups_more
        if need > len(self.table[1]):
            size = max(need, 2 * len(self.table[1]))
            grown = tuple(np.empty((size,) + a.shape[1:], dtype=a.dtype) for a in self.table)
            for a, b in zip(self.table, grown):
                b[:len(a)] = a
            self.table = grown
        need = self.top + rows_more
        if need > len(self.pool):
            pool = np.empty(max(need, 2 * len(self.pool)), dtype=np.int64)
            pool[:self.top] = self.pool[:self.top]
            self.pool = pool

    def label(self, s, e, labels, g):
        """Rows ``s:e`` take the new groups ``labels`` (``0..g-1``), recorded in the table."""
        self.labels[s:e] = labels + self.next
        self._room(g, e - s)
        self.top = groups.record_groups(self.Z, self.labels, np.arange(s, e), self.next, self.next + g, *self.table,
                                        self.pool, self.top, self.head)
        self.next += g

    def groups_of(self, s, e):
        """The groups of rows ``s:e`` (holding all their rows), in order of first appearance."""
        head = self.head[s:e]
        return head[head >= 0]

    def improve(self, candidates, k, settings):
        """The groups ``candidates`` re-solved window by window by the local search
        (:func:`microagg.kernels.windows.improve_recorded_windows`): improved windows' groups take fresh ids
        and are recorded. Returns the SSE won."""
        rows = int(self.table[2][candidates].sum())
        self._room(rows // k + 1, rows)  # every group of a window has k rows or more
        gain, self.next, self.top = windows.improve_recorded_windows(
            self.Z, self.labels, candidates, *self.table, self.pool, self.top, self.head, self.next, k, 2 * k - 1,
            settings.neighbors, settings.window_sweeps, settings.window_rows)
        return gain


class _TaskSolver:
    """Solves the leaves of one task and stitches its planes bottom-up on contiguous row ranges, its groups
    recorded in a :class:`GroupTable`."""

    def __init__(self, Z, bounds, tree, k, solver, settings, tag_offset=0):
        self.Z, self.bounds, self.tree, self.tag_offset = Z, bounds, tree, tag_offset
        self.k, self.solver, self.settings = k, solver, settings
        self.groups = GroupTable(Z, k)
        self.labels = self.groups.labels
        self.position = np.arange(Z.shape[0])  # where each row came from (solve reorders a leaf's rows)
        self.missing = bool(np.isnan(Z).any())
        self.leaf_rank = 0
        self.gain = 0.0
        self.race = solver.race()  # auto's portfolio raced over this task's blocks

    def solve(self, s, e, tag):
        """Solve rows ``s:e`` as one block; if they are far more than the tree's blocks (its sample
        could not split them), group their frequent tuples with themselves first, then cut the rest
        by :func:`pipeline.blocking.cut_plan` and stitch its pieces as the tree's."""
        if not self.tree.largest or e - s <= self.tree.largest:
            self._solve(self.Z[s:e], slice(s, e), tag, self.tree.n_leaves > 1)
            return
        local, g = duplicate_groups(self.Z[s:e], self.k)
        if g:
            rest = np.flatnonzero(local < 0)
            if len(rest) < self.k:  # none, or too few for a group of their own: the nearest takes them
                groups.attach_leftovers(np.ascontiguousarray(self.Z[s:e]), local, g)
                self.groups.label(s, e, local, g)
                return
            grouped = np.flatnonzero(local >= 0)
            self._reorder(s, e, np.concatenate([grouped, rest]))
            self.groups.label(s, s + len(grouped), local[grouped], g)
            s += len(grouped)
            if e - s <= self.tree.largest:
                self._solve(self.Z[s:e], slice(s, e), tag, True)
                return
        order, steps = blocking.cut_plan(self.Z[s:e], self.tree.block_size)
        self._reorder(s, e, order)
        for a, b, direction, threshold in steps:
            if direction is None:
                self._solve(self.Z[s + a:s + b], slice(s + a, s + b), tag, True)
            else:
                self.stitch(s + a, s + b, direction, threshold)

    def _reorder(self, s, e, order):
        """Rows ``s:e`` (not labelled yet) put in ``order`` (positions from ``s``)."""
        self.Z[s:e] = self.Z[s:e][order]
        self.position[s:e] = self.position[s:e][order]

    def _solve(self, Zb, rows, tag, sweep):
        """``sweep``: a block of the blocked solve, not the whole input as one block (the method's own
        partition, as published): its frequent tuples are grouped first, then it gets the local search."""
        solve = solve_without_duplicates if sweep else solve_block
        block = solve(Zb, self.k, self.solver, self.tag_offset + tag, self.race if sweep else None)
        g = int(block.max()) + 1
        if self.missing:  # stitching sees every missing cell at its group's observed mean
            fill_missing(Zb, block, g)
        if self.settings.block_sweeps and sweep:  # one block as a whole: the method's partition as it is
            _, drop = refine_sse(Zb, block, self.k, 2 * self.k - 1, self.settings.neighbors,
                                 self.settings.block_sweeps, TOL)
            g = int(block.max()) + 1  # a dissolved group leaves fewer (relabelled compactly)
            self.gain += drop
        self.groups.label(rows.start, rows.stop, block, g)

    def visit(self, ref):
        """Solve the subtree ``ref``; returns ``(start, end, solved)`` of its row range."""
        if ref < 0:
            s, e = self.bounds[self.leaf_rank], self.bounds[self.leaf_rank + 1]
            self.leaf_rank += 1
            if e - s < self.k:
                return s, e, False
            self.solve(s, e, -1 - ref)  # the leaf id
            return s, e, True
        a, b = self.tree.children(ref)
        s, _, solved_a = self.visit(a)
        _, e, solved_b = self.visit(b)
        if not (solved_a and solved_b):
            if e - s < self.k:
                return s, e, False
            self.solve(s, e, self.tree.n_leaves + ref)  # a small leaf joins its sibling
            return s, e, True
        self.stitch(s, e, self.tree.directions[ref], self.tree.thresholds[ref])
        return s, e, True

    def stitch(self, s, e, direction, threshold):
        """Stitch the groups of rows ``s:e`` across one plane."""
        centroids, radius, sizes = self.groups.table[:3]
        candidates = windows.plane_candidates(centroids, radius, self.groups.head, s, e,
                                              np.ascontiguousarray(direction, dtype=np.float64), float(threshold),
                                              float(self.settings.band))
        if len(candidates) < 2:
            return
        if self.settings.repartition:  # windows also re-partitioned by the solver: the node relabelled
            ids = self.groups.groups_of(s, e)
            local, g = groups.compact_labels(self.labels[s:e])
            rank = np.empty(self.groups.next, dtype=np.int64)
            rank[ids] = np.arange(len(ids))
            new, gain = improve_groups(self.Z[s:e], local, g, rank[candidates], self.k, self.solver, self.settings,
                                       (centroids[ids], radius[ids], sizes[ids]))
            if gain > 0:
                self.groups.label(s, e, *groups.compact_labels(new))
                self.gain += gain
            return
        self.gain += self.groups.improve(candidates, self.k, self.settings)


def solve_task(Z, leaf, tree, task, k, solver, settings, tag_offset=0, rows=None, scale=None):
    """One task's rows (in row-id order): its leaves solved, its planes stitched bottom-up.

    ``tag_offset`` shifts the blocks' seed tags (each stratum's tree of a forest has its own range).
    ``rows``: the task's rows are ``Z[rows]`` (default: all of ``Z``); ``scale``: ``(mean, std)`` of
    raw rows, standardized as they are gathered in the task's order (default: ``Z`` is standardized).
    Either way the task's rows are copied once.

    A leaf with fewer than k rows (possible when routing by a sample) is merged with its sibling
    before the kernel runs. Returns ``(labels, plane, stitch_gain, picks)``: labels ``0..g-1`` in the
    rows' order, per row the upper split plane (position in ``tree.upper``) its group will be
    stitched across, or -1 (see :func:`assign_upper`), and ``auto``'s race counts
    (:attr:`pipeline.methods.Race.picks`), or None without a race.
    """
    order, bounds = task_order(leaf, tree, task)
    at = order if rows is None else np.ascontiguousarray(rows)[order]
    # standardized rows are gathered as they are: (z - 0) / 1 is z, bit for bit (NaN and -0.0 too)
    mean, std = scale if scale is not None else (np.zeros(Z.shape[1]), np.ones(Z.shape[1]))
    run = _TaskSolver(kernels.standardize(np.ascontiguousarray(Z), mean, std, at), bounds, tree, k, solver,
                      settings, tag_offset)
    s, e, solved = run.visit(int(tree.task_root[task]))
    if not solved:
        run.labels[s:e] = 0  # fewer than k rows in the whole task: the release gate will refuse it
    order = order[run.position]
    labels = np.empty_like(run.labels)
    labels[order] = run.labels
    labels = compact(labels)
    place = np.empty_like(order)  # where each row (in row-id order) is in run.Z
    place[order] = np.arange(len(order))
    picks = None if run.race is None else run.race.picks
    # run.Z holds the completed rows (missing cells at their block groups' observed means)
    return labels, assign_upper(run.Z, labels, tree, task, settings, place)[labels], run.gain, picks


def stitch_upper(Z, group_ids, k, solver, settings):
    """The groups (``group_ids``, any int64) of every task near one upper split plane, re-solved
    together. Returns ``(labels, gain)``, labels ``0..g-1``."""
    local = compact(group_ids)
    n_groups = int(local.max()) + 1
    if np.isnan(Z).any():
        Z = Z.copy()
        fill_missing(Z, local, n_groups)
    if settings.repartition:
        labels, gain = improve_groups(Z, local, n_groups, np.arange(n_groups), k, solver, settings)
        return compact(labels), gain
    table = GroupTable(np.ascontiguousarray(Z), k)
    table.label(0, len(local), local, n_groups)
    gain = table.improve(np.arange(n_groups), k, settings)
    return compact(table.labels), gain


def task_group(task, labels):
    """Release-wide group ids of a task's groups (a task's groups never meet another task's)."""
    return (np.int64(task) << 32) | labels


def assign_upper(Z, labels, tree, task, settings, at=None):
    """For each group of a task, the upper split plane (its position in ``tree.upper``) it will be
    stitched across, or -1. ``at``: row ``i`` (label ``labels[i]``) is ``Z[at[i]]``.

    A group near several planes goes to the nearest, so the upper stitching windows are disjoint
    and every upper plane can be stitched in parallel.

    No plane receives more than about :data:`UPPER_ROWS` rows: each task sends a plane at most its
    share of them (by the leaves below the plane), its groups nearest the plane first.
    """
    if not tree.task_ancestors[task]:  # no plane above the task (a stratum of one task, say)
        return np.full(int(labels.max()) + 1, -1, dtype=np.int64)
    centroids, radius, sizes = groups.group_shape(Z, labels, int(labels.max()) + 1, at)
    plane = np.full(len(radius), -1, dtype=np.int64)
    best = np.full(len(radius), np.inf)
    scale = radius + (np.median(radius) if len(radius) else 0.0)
    for position in tree.task_ancestors[task]:
        node = tree.upper[position]
        distance = plane_distance(centroids, tree.directions[node], tree.thresholds[node])
        better = near_plane(distance, radius, settings.upper_band) & (distance < best)
        plane[better] = position
        best[better] = distance[better]
    task_leaves, plane_leaves = tree.leaf_counts
    for position in tree.task_ancestors[task]:
        bound = UPPER_ROWS * task_leaves[task] / plane_leaves[position]
        members = np.flatnonzero(plane == position)
        if sizes[members].sum() > bound:
            # in units of the band's scale; a group of identical records (scale 0) is on the plane
            relative = np.divide(best[members], scale[members], out=np.zeros(len(members)),
                                 where=scale[members] > 0)
            nearest = members[np.argsort(relative, kind="stable")]
            over = np.cumsum(sizes[nearest]) > bound
            plane[nearest[over]] = -1  # released by the task as its blocks and planes left it
    return plane


UPPER_ROWS = 250_000
"""Most rows one upper plane's stitching task gathers (about). Without a bound they grow with the
input: at 10M rows the root plane drew 642,541 rows from its 128 tasks, at 30M about three times that,
and that one task (about 0.4 GiB more memory in a second) was what killed workers of 1.5 GiB."""
