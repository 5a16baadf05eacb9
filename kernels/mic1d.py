"""Mic1D-k kernels: the run-wise normalization and the protected value of every run.

Mic1D-k (``shared/papers/mic1d-one-dimension-microaggregation.txt`` section 3) puts every quasi-
identifier value of every record into one vector, sorts it, cuts it into runs of k consecutive
values, min-max normalizes each run (0.5 when the run's values are all equal), sorts and normalizes
the normalized values a second time, replaces each run of the second pass by its mean and undoes both
normalizations. The global sorts and the run boundaries are the pipeline's (:mod:`pipeline.mic1d`);
the kernels here work on a stretch of the sorted sequence that starts and ends on run boundaries,
given the run starts, so one run is always processed in one call, its values summed left to right in
sequence order: the in-memory and the distributed computation give bitwise the same values.

References
----------
Nin, J. Beyond multivariate microaggregation for large record anonymization (Mic1D-k), section 3;
``shared/papers/mic1d-one-dimension-microaggregation.txt``.
"""

import numpy as np

from ._jit import jit


@jit
def _extent(values, a, b):
    """Minimum and maximum of ``values[a:b]`` (``b > a``)."""
    lo = values[a]
    hi = values[a]
    for i in range(a + 1, b):
        v = values[i]
        if v < lo:
            lo = v
        if v > hi:
            hi = v
    return lo, hi


@jit
def normalize_runs(values, starts, out, low, high):
    """First (or second) normalization: ``out[i] = (values[i] - min) / (max - min)`` over the run of
    ``i`` (runs ``starts[r] .. starts[r + 1] - 1``, ``starts[-1] == len(values)``), 0.5 in a run of
    equal values; ``low``/``high`` receive each value's run minimum and maximum."""
    for r in range(starts.shape[0] - 1):
        a, b = starts[r], starts[r + 1]
        lo, hi = _extent(values, a, b)
        for i in range(a, b):
            out[i] = 0.5 if hi == lo else (values[i] - lo) / (hi - lo)
            low[i] = lo
            high[i] = hi


@jit
def protect_runs(normalized, low, high, starts, out):
    """Second normalization, run means and both de-normalizations.

    ``normalized`` holds the first pass's values in the second sort's order, ``low``/``high`` each
    value's first-pass run minimum and maximum. For every run of the second pass (``starts``): its
    values are normalized again, averaged (summed left to right), the mean is mapped back to the
    run's range and then to each value's first-pass range: ``out[i] = low[i] + (high[i] - low[i]) *
    (lo2 + (hi2 - lo2) * mean)``. A run (of either pass) of equal values maps back to its minimum.
    """
    for r in range(starts.shape[0] - 1):
        a, b = starts[r], starts[r + 1]
        lo, hi = _extent(normalized, a, b)
        total = 0.0
        for i in range(a, b):
            total += 0.5 if hi == lo else (normalized[i] - lo) / (hi - lo)
        level = lo + (hi - lo) * (total / (b - a))
        for i in range(a, b):
            out[i] = low[i] + (high[i] - low[i]) * level


@jit
def lex_bucket(stratum, value, cell, s_stratum, s_value, s_cell):
    """Bucket of each ``(stratum, value, cell)`` triple among the splitters (sorted triples): the
    number of splitters not greater than it (lexicographic order; cells are unique, so no ties)."""
    n = value.shape[0]
    m = s_value.shape[0]
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        lo, hi = 0, m
        while lo < hi:  # first splitter greater than the triple
            mid = (lo + hi) >> 1
            if (s_stratum[mid] < stratum[i] or (s_stratum[mid] == stratum[i] and (
                    s_value[mid] < value[i] or (s_value[mid] == value[i] and s_cell[mid] <= cell[i])))):
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo
    return out
