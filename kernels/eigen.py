"""The first principal direction of a set of rows, inside Numba (NumPy's LAPACK is not available
there without SciPy): a cyclic Jacobi eigen-decomposition of the d x d scatter matrix, exact to
rounding. Used by the split tree (:mod:`microagg.kernels.blocking`) and the stitching windows
(:mod:`microagg.kernels.windows`).
"""

import numpy as np

from ._jit import jit


@jit
def top_eigenvector(A):
    """Unit eigenvector of the largest eigenvalue of the symmetric matrix ``A`` (cyclic Jacobi;
    ``A`` is overwritten). Sign: its largest-magnitude entry is positive."""
    d = A.shape[0]
    V = np.eye(d)
    scale = 0.0
    for p in range(d):
        for q in range(d):
            scale += A[p, q] * A[p, q]
    for _ in range(64):
        off = 0.0
        for p in range(d - 1):
            for q in range(p + 1, d):
                off += A[p, q] * A[p, q]
        if off <= 1e-30 * scale:
            break
        for p in range(d - 1):
            for q in range(p + 1, d):
                apq = A[p, q]
                if apq == 0.0:
                    continue
                theta = (A[q, q] - A[p, p]) / (2.0 * apq)
                t = 1.0 / (abs(theta) + np.sqrt(theta * theta + 1.0))
                if theta < 0.0:
                    t = -t
                c = 1.0 / np.sqrt(t * t + 1.0)
                s = t * c
                for r in range(d):  # A P
                    arp = A[r, p]
                    arq = A[r, q]
                    A[r, p] = c * arp - s * arq
                    A[r, q] = s * arp + c * arq
                for r in range(d):  # P^T (A P)
                    apr = A[p, r]
                    aqr = A[q, r]
                    A[p, r] = c * apr - s * aqr
                    A[q, r] = s * apr + c * aqr
                for r in range(d):  # V P
                    vrp = V[r, p]
                    vrq = V[r, q]
                    V[r, p] = c * vrp - s * vrq
                    V[r, q] = s * vrp + c * vrq
    top = 0
    for p in range(1, d):
        if A[p, p] > A[top, top]:
            top = p
    v = V[:, top].copy()
    big = 0
    for p in range(1, d):
        if abs(v[p]) > abs(v[big]):
            big = p
    if v[big] < 0.0:
        v = -v
    return v


CHUNK = 128


@jit
def principal_axis(P, ids):
    """First principal direction of the rows ``P[ids]`` (see :func:`top_eigenvector`).

    The rows are centred and gathered ``CHUNK`` at a time into columns that stay in the cache; each
    entry of the scatter matrix adds, per chunk, a dot product of two such columns summed in four
    interleaved partial sums (independent additions the processor overlaps). The order of every
    addition is fixed, so the result is the same on every run.
    """
    m = ids.shape[0]
    d = P.shape[1]
    mean = np.zeros(d)
    for i in range(m):
        for j in range(d):
            mean[j] += P[ids[i], j]
    for j in range(d):
        mean[j] /= m
    A = np.zeros((d, d))
    C = np.zeros((d, CHUNK))
    for start in range(0, m, CHUNK):
        size = min(CHUNK, m - start)
        for t in range(size):
            row = ids[start + t]
            for j in range(d):
                C[j, t] = P[row, j] - mean[j]
        for t in range(size, CHUNK):  # a short last chunk: zeros add nothing
            for j in range(d):
                C[j, t] = 0.0
        for p in range(d):
            a = C[p]
            for q in range(p, d):
                b = C[q]
                s0 = 0.0
                s1 = 0.0
                s2 = 0.0
                s3 = 0.0
                for t in range(0, CHUNK, 4):
                    s0 += a[t] * b[t]
                    s1 += a[t + 1] * b[t + 1]
                    s2 += a[t + 2] * b[t + 2]
                    s3 += a[t + 3] * b[t + 3]
                A[p, q] += (s0 + s1) + (s2 + s3)
    for p in range(d):
        for q in range(p):
            A[p, q] = A[q, p]
    return top_eigenvector(A)
