"""Numba kernels on NumPy arrays: no DataFrames, paths or clients here (see STYLE.md)."""

from .blocking import (grow_tree, pair_buckets, project, route, route_raw, row_hashes, rows_equal_first,
                       sample_mask, split_cell, splitmix64)
from .hm import optimal_contiguous, univariate_optimal
from .mdav import mdav
from .refine import refine
from .stats import (
    exact_column_sums,
    group_means,
    group_medians,
    group_sums,
    information_loss,
    sse,
    sst,
    standardize,
)

__all__ = [
    "exact_column_sums",
    "grow_tree",
    "group_means",
    "group_medians",
    "group_sums",
    "information_loss",
    "mdav",
    "optimal_contiguous",
    "pair_buckets",
    "project",
    "refine",
    "route",
    "route_raw",
    "row_hashes",
    "rows_equal_first",
    "sample_mask",
    "split_cell",
    "splitmix64",
    "sse",
    "sst",
    "standardize",
    "univariate_optimal",
]
