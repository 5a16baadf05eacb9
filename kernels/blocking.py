"""Kernels of the spatial blocking: a deterministic row sample and routing rows down a split tree."""

import numpy as np

from ._jit import jit

_U64 = np.uint64


@jit
def splitmix64(x):
    """The splitmix64 finaliser: a well-mixed 64-bit hash of a 64-bit integer."""
    z = x + _U64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    return z ^ (z >> _U64(31))


@jit
def sample_mask(row_ids, seed, threshold):
    """``True`` for the rows whose hash of (global row id, seed) falls below ``threshold`` (uint64).

    Depends only on the row id and the seed: the same rows are sampled however the input is split.
    """
    n = row_ids.shape[0]
    out = np.empty(n, dtype=np.bool_)
    s = splitmix64(_U64(seed))
    for i in range(n):
        out[i] = splitmix64(_U64(row_ids[i]) ^ s) < threshold
    return out


@jit
def route(Z, directions, thresholds, left, right):
    """Leaf id of every row of ``Z`` in a binary split tree.

    Node ``t`` sends a row left when ``z . directions[t] <= thresholds[t]``; ``left[t]`` /
    ``right[t]`` are child node ids, or ``-1 - leaf`` for a leaf. The dot product runs over the
    columns in order, so a row is routed the same way wherever it is processed.
    """
    n, d = Z.shape
    leaves = np.empty(n, dtype=np.int64)
    for i in range(n):
        node = 0
        while True:
            p = 0.0
            for j in range(d):
                p += Z[i, j] * directions[node, j]
            nxt = left[node] if p <= thresholds[node] else right[node]
            if nxt < 0:
                leaves[i] = -1 - nxt
                break
            node = nxt
    return leaves


@jit
def project(Z, direction):
    """``Z @ direction`` with a fixed summation order (the same arithmetic as :func:`route`)."""
    n, d = Z.shape
    out = np.empty(n)
    for i in range(n):
        p = 0.0
        for j in range(d):
            p += Z[i, j] * direction[j]
        out[i] = p
    return out


@jit
def sequence_bucket(stratum, score, s_stratum, s_score):
    """Bucket of every row of a sequence ordered by ``(stratum, score)``: the number of splitters
    ``(s_stratum, s_score)`` (sorted) at or below the row's pair, so equal pairs share a bucket."""
    n = stratum.shape[0]
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        st = stratum[i]
        sc = score[i]
        lo = 0
        hi = s_stratum.shape[0]
        while lo < hi:
            mid = (lo + hi) // 2
            if s_stratum[mid] < st or (s_stratum[mid] == st and s_score[mid] <= sc):
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo
    return out
