"""Column statistics that do not depend on how the rows are split (chunk -> combine -> finalize).

``chunk`` runs the exact-summation kernel on one partition; ``combine`` adds the partials of any
number of chunks exactly (as fractions); ``finalize`` rounds once to float64. The result is the
correctly rounded mean and population standard deviation of each column, so 1 partition or 400
give the same bits, and the in-memory API and the Dask pipeline standardize identically.
"""

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..kernels import exact_column_sums


@dataclass
class ColumnSums:
    """Exact per-column sums of one or more chunks."""

    rows: int
    sums: list          # Fraction per column
    squares: list       # Fraction per column
    nans: np.ndarray
    infs: np.ndarray
    huge: np.ndarray    # values beyond kernels.stats.HUGE, refused by validation


def chunk(X):
    """Exact sums of one ``(n, d)`` float64 block."""
    sp, sc, qp, qc, nans, infs, huge = exact_column_sums(X)
    sums = [_exact(sp[j, : sc[j]]) for j in range(X.shape[1])]
    squares = [_exact(qp[j, : qc[j]]) for j in range(X.shape[1])]
    return ColumnSums(X.shape[0], sums, squares, nans, infs, huge)


def _exact(partials):
    return sum((Fraction(float(p)) for p in partials), Fraction(0))


def combine(parts):
    parts = list(parts)
    d = len(parts[0].sums)
    return ColumnSums(
        sum(p.rows for p in parts),
        [sum((p.sums[j] for p in parts), Fraction(0)) for j in range(d)],
        [sum((p.squares[j] for p in parts), Fraction(0)) for j in range(d)],
        np.sum([p.nans for p in parts], axis=0),
        np.sum([p.infs for p in parts], axis=0),
        np.sum([p.huge for p in parts], axis=0),
    )


def finalize(total):
    """``(mean, std)`` float64 arrays: correctly rounded mean, population std (ddof=0)."""
    n = total.rows
    mean = np.empty(len(total.sums))
    std = np.empty(len(total.sums))
    for j, (s, q) in enumerate(zip(total.sums, total.squares)):
        m = s / n
        var = q / n - m * m
        mean[j] = float(m)
        std[j] = math.sqrt(float(var)) if var > 0 else 0.0
    return mean, std
