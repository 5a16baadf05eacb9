"""Exact copies among the records: the classes of identical rows.

Zero-inflated extracts (tax amounts, benefits) hold thousands of identical records. Every distance
from a record to the copies of another is the same, bit for bit (the same operations on the same
values), and the kernels break such ties by row. So a kernel can scan one copy of each class instead
of every copy, or share one candidate list between the copies of a class, and still give the labels
of a scan over every record: :mod:`.fixed_size` (MD, GSMS) and :mod:`.dba` do.

Rows are identical when they are equal column by column (``==``: -0.0 equals 0.0, and the two give
the same squared differences). A row with a NaN or an infinity is a class of its own, so kernels
keep their plain path for it.
"""

import numpy as np

from ._jit import jit


RUN_CLASSES = 32
"""Classes of one run of equal projections that a row is compared with (:func:`copy_classes`)."""


@jit
def _finite_row(Z, i):
    for j in range(Z.shape[1]):
        if not np.isfinite(Z[i, j]):
            return False
    return True


@jit
def _same_row(Z, a, b):
    for j in range(Z.shape[1]):
        if Z[a, j] != Z[b, j]:
            return False
    return True


@jit
def copy_classes(Z):
    """``(cls, first, size)``: the class of each row (``0..c-1``, numbered by their lowest row), and
    per class its lowest row and its number of rows.

    Rows are sorted by a projection (equal rows project equally; the weights are irrational, so that
    distinct rows of whole numbers seldom do), and the rows of a run of equal projections are
    compared with the first :data:`RUN_CLASSES` classes of the run: O(n log n) plus at most
    ``RUN_CLASSES`` comparisons per row. A row that matches none of them is a class of its own, even if
    it has copies further on: a class holds identical rows only, which is all its users need."""
    n, d = Z.shape
    key = np.empty(n)
    for i in range(n):
        s = 0.0
        for j in range(d):
            s += Z[i, j] * (1.0 + (j * 0.6180339887498949) % 1.0)
        key[i] = s if _finite_row(Z, i) else np.nan
    order = np.argsort(key, kind="mergesort")
    found = np.full(n, -1, dtype=np.int64)  # a class's lowest row, per row (the rows sorted by key)
    reps = np.empty(n, dtype=np.int64)
    a = 0
    while a < n:
        b = a + 1
        if key[order[a]] == key[order[a]]:  # NaN (a row not finite) is a class of its own
            while b < n and key[order[b]] == key[order[a]]:
                b += 1
        n_reps = 0
        for t in range(a, b):  # in row order within the run (stable sort)
            row = order[t]
            for r in range(n_reps):
                if _same_row(Z, reps[r], row):
                    found[row] = reps[r]
                    break
            if found[row] < 0:
                found[row] = row
                if n_reps < RUN_CLASSES:
                    reps[n_reps] = row
                    n_reps += 1
        a = b
    cls = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    size = np.zeros(n, dtype=np.int64)
    c = 0
    for i in range(n):  # rows in order: a class's lowest row comes first
        if found[i] == i:
            cls[i] = c
            first[c] = i
            c += 1
        else:
            cls[i] = cls[found[i]]
        size[cls[i]] += 1
    return cls, first[:c].copy(), size[:c].copy()
