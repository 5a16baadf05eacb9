"""Column statistics that do not depend on how the rows are split (chunk -> combine -> finalize).

``chunk`` runs the exact-summation kernel on one partition; ``combine`` adds the sums of any
number of chunks exactly (as fractions); ``finalize`` rounds once to float64. The result is the
correctly rounded mean and population standard deviation of each column, so 1 partition or 400
give the same bits, and the in-memory API and the Dask pipeline standardize identically.
"""

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..kernels import exact_column_sums
from ..kernels.stats import SQUARE_BIAS, SUM_BIAS


@dataclass
class ColumnSums:
    """Exact per-column sums of one or more chunks."""

    rows: int
    sums: list          # Fraction per column
    squares: list       # Fraction per column
    nans: np.ndarray
    infs: np.ndarray
    huge: np.ndarray    # values beyond kernels.stats.HUGE, refused by validation
    lo: np.ndarray      # each column's smallest value (NaN skipped; +inf for none)
    hi: np.ndarray      # and largest (-inf for none)


def chunk(X):
    """Exact sums of one ``(n, d)`` float64 block."""
    sums, squares, nans, infs, huge, lo, hi = exact_column_sums(contiguous(X))
    return ColumnSums(
        X.shape[0],
        [_exact(words, SUM_BIAS) for words in sums],
        [_exact(words, SQUARE_BIAS) for words in squares],
        nans,
        infs,
        huge,
        lo,
        hi,
    )


def contiguous(X):
    """``X`` as float64, copied only if it is neither row- nor column-contiguous: the exact sums run on
    either layout (a compiled version each) and are the same, values in the same order. A pandas
    partition's QIs come as one column-major block: its row-major copy was 104 MB of fresh memory per
    million rows at 13 QIs, up to 0.3 s of page faults each (BENCHMARKS.md, forty-fifth session)."""
    X = np.asarray(X, dtype=np.float64)
    return X if X.flags.c_contiguous or X.flags.f_contiguous else np.ascontiguousarray(X)


def _exact(words, bias):
    """The kernel's packed two's-complement integer (little-endian int64 words) times ``2**-bias``."""
    return Fraction(int.from_bytes(words.astype("<i8").tobytes(), "little", signed=True), 1 << bias)


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
        np.min([p.lo for p in parts], axis=0),
        np.max([p.hi for p in parts], axis=0),
    )


def finalize(total):
    """``(mean, std)`` float64 arrays: correctly rounded mean and population std (ddof=0) of each
    column's observed values (missing ones, allowed with ``--missing centroid``, are not counted)."""
    mean = np.empty(len(total.sums))
    std = np.empty(len(total.sums))
    for j, (s, q) in enumerate(zip(total.sums, total.squares)):
        n = max(total.rows - int(total.nans[j]), 1)
        m = s / n
        var = q / n - m * m
        mean[j] = float(m)
        # the root of the exact variance: a spread below about 1e-162 has a variance under float64's
        # smallest subnormal (numpy's std is 0 there) but a representable std, so such a column is
        # still grouped on; only a column with no spread at all has std 0 (constant, ignored)
        std[j] = _sqrt(var) if var > 0 else 0.0
    return mean, std


def _sqrt(q):
    """The correctly rounded square root of a positive fraction.

    ``math.sqrt(float(q))`` rounds twice and misses by an ulp for about one variance in eight. Instead
    take the integer square root ``r`` of ``q * 4**s``, with ``s`` chosen so that ``r >= 2**60``:
    float64 rounding boundaries there are integers, none lies strictly between ``r`` and ``r + 1``,
    so an inexact root rounds like ``r + 1/2`` (one correctly rounded integer division).
    """
    s = max(0, (123 - q.numerator.bit_length() + q.denominator.bit_length()) // 2)
    scaled = q.numerator << (2 * s)
    r = math.isqrt(scaled // q.denominator)
    if r * r * q.denominator == scaled:
        return r / (1 << s)
    return (2 * r + 1) / (1 << (s + 1))
