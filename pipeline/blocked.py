"""The blocked solve in memory: the distributed pipeline's algorithm without Dask.

Same sample, split tree, routing, per-task kernels and stitching (the functions of
:mod:`pipeline.blocking` and :mod:`pipeline.stitch` that the Dask stages call), on one NumPy array:
the groups are exactly those of the distributed release with the same options, so its released
values are identical. Tasks run on a thread pool (the kernels release the GIL).

For data that fits in memory but is too large for an O(n^2) method in one block (a million rows
in a pandas DataFrame, say); the result is a plain label array.
"""

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .. import kernels
from ..kernels import groups
from . import blocking, stitch


@dataclass(frozen=True)
class Blocking:
    """How the rows are cut into blocks (the pipeline's options of the same names)."""

    block_size: int = blocking.BLOCK_SIZE
    blocks_per_task: int = 32
    one_block_rows: int = 5000
    order: str = "kd"
    seed: int = 0
    sample_rows: int | None = None


def blocked_partition(Z, k, solver, settings, plan=Blocking(), threads=None, stratum=None, n_strata=1):
    """Labels (``0..g-1``) of the blocked solve of the standardized rows ``Z``, and a summary.

    ``solver`` is a :class:`pipeline.solver.Solver`, ``settings`` a :class:`pipeline.stitch.Stitching`;
    ``stratum`` (codes ``0..n_strata-1`` per row, see :mod:`pipeline.strata`) solves each stratum
    with its own split tree. Returns ``(labels, info)`` with ``info`` = blocks, tasks, upper planes,
    stitching SSE gain.
    """
    n = Z.shape[0]
    row_ids = np.arange(n, dtype=np.int64)
    fraction, threshold = blocking.sample_plan(n, plan.block_size, plan.sample_rows)
    sample = row_ids if threshold is None else np.flatnonzero(kernels.sample_mask(row_ids, plan.seed, threshold))
    forest = blocking.build_forest(np.ascontiguousarray(Z[sample]), None if stratum is None else stratum[sample],
                                   n_strata, fraction, plan.block_size, plan.blocks_per_task * plan.block_size, k,
                                   plan.order, plan.one_block_rows)
    leaf = forest.route(Z, stratum)
    task_of_row = forest.leaf_task[leaf]
    bounds, order = groups.group_members(task_of_row, forest.n_tasks)  # each task's rows, in row-id order

    def solve(task):
        rows = order[bounds[task]:bounds[task + 1]]
        if not len(rows):
            return rows, None
        tree, local, leaf_offset, tag_offset = forest.local_task(task)
        labels, plane, gain, _ = stitch.solve_task(Z, leaf[rows] - leaf_offset, tree, local, k, solver, settings,
                                                   tag_offset, rows)
        plane = np.where(plane < 0, -1, plane + forest.upper_offset[forest.task_stratum[task]])
        return rows, (labels, plane, gain)

    group = np.empty(n, dtype=np.int64)  # dense ids (each task's, then each plane's, after the last)
    plane = np.empty(n, dtype=np.int64)
    gain = 0.0
    next_id = 0
    with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
        for rows, solved in pool.map(solve, range(forest.n_tasks)):
            if solved is not None:
                labels, plane[rows], task_gain = solved
                group[rows] = labels + next_id
                next_id += int(labels.max()) + 1
                gain += task_gain

        plane_bounds, by_plane = groups.group_members(plane + 1, forest.n_upper + 1)  # -1 (no plane) first
        plane_bounds = plane_bounds[1:]

        def stitch_plane(position):
            rows = by_plane[plane_bounds[position]:plane_bounds[position + 1]]
            if not len(rows):
                return rows, None
            return rows, stitch.stitch_upper(np.ascontiguousarray(Z[rows]), group[rows], k, solver, settings)

        for rows, stitched in pool.map(stitch_plane, range(forest.n_upper)):
            if stitched is not None:
                labels, plane_gain = stitched
                group[rows] = labels + next_id
                next_id += int(labels.max()) + 1
                gain += plane_gain
    info = {"blocks": forest.n_leaves, "tasks": forest.n_tasks, "upper_planes": forest.n_upper,
            "stitch_sse_gain": gain}
    return stitch.compact(group), info
