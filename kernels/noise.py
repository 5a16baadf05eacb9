"""Laplace noise on released group values, one independent draw per group and attribute.

``shared/papers/optimal-univariate-noise-microaggregation.txt`` section III: when a group's values
are replaced by its mean, the sensitivity of the released value is ``Delta x / k`` (``Delta x`` the
group's extent in that attribute), and Laplace noise of scale ``sensitivity / epsilon`` makes the
release epsilon-differentially private with respect to one record of the group. Every member of a
group receives the same noisy tuple, so the release stays k-anonymous.

Draws come from a counter-based generator (splitmix64 of the seed, the group's key and the
attribute), so they do not depend on the order in which groups are processed or on how the work
was split: a group's key is its smallest global row id.
"""

import numpy as np

from ._jit import jit
from .blocking import splitmix64

_U64 = np.uint64
_DOMAIN = _U64(0x6E6F697365)  # "noise": keeps these draws apart from other uses of the job's seed


@jit
def group_extents(X, labels, n_groups):
    """Per group and column: ``max - min`` of the rows of ``X`` in the group."""
    n, d = X.shape
    low = np.full((n_groups, d), np.inf)
    high = np.full((n_groups, d), -np.inf)
    for i in range(n):
        g = labels[i]
        for j in range(d):
            v = X[i, j]
            if v < low[g, j]:
                low[g, j] = v
            if v > high[g, j]:
                high[g, j] = v
    return high - low


@jit
def group_keys(row_id, labels, n_groups):
    """Each group's smallest row id (its key, the same on every path)."""
    keys = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    for i in range(row_id.shape[0]):
        g = labels[i]
        if row_id[i] < keys[g]:
            keys[g] = row_id[i]
    return keys


@jit
def laplace_draws(scale, keys, seed, first_column=0):
    """``(g, d)`` Laplace draws of the given scales (0 where the scale is 0), by inverse CDF from a
    uniform in (0, 1) derived from ``(seed, keys[g], first_column + column)``: ``first_column`` keeps
    the draws of attribute blocks apart."""
    g, d = scale.shape
    out = np.empty((g, d))
    s = splitmix64(_U64(seed) ^ _DOMAIN)
    for i in range(g):
        base = splitmix64(_U64(keys[i]) ^ s)
        for j in range(d):
            bits = splitmix64(base + _U64(first_column + j))
            u = (np.float64(bits >> _U64(11)) + 0.5) * (1.0 / 9007199254740992.0)  # (0, 1)
            t = u - 0.5
            if t < 0.0:
                out[i, j] = scale[i, j] * np.log(1.0 + 2.0 * t)
            else:
                out[i, j] = -scale[i, j] * np.log(1.0 - 2.0 * t)
    return out
