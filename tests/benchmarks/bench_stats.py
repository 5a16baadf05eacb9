"""Exact column sums: the superaccumulator kernel against the Shewchuk-expansion kernel it replaced.

    .venv/bin/python tests/benchmarks/bench_stats.py [--rows 1000000] [--repeat 3]

Data, 13 columns: "clustered" is ``tests/synthetic.py::clustered`` (the pipeline benchmarks' data);
"wide" spans magnitudes 1e-300..1e150 with mixed signs and 20% zeros. Both kernels run on one core,
compiled (and warmed up) before timing, with the same compile flags; each figure is the best of
--repeat runs. The two kernels' sums are compared as fractions; so are the sums of squares, which
differ on "wide": the old kernel's x * x underflows below |x| ~ 1e-146 and loses those bits.
"""

import argparse
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synthetic import clustered  # noqa: E402  (tests/synthetic.py)

from microagg.kernels import exact_column_sums  # noqa: E402
from microagg.kernels._jit import jit  # noqa: E402
from microagg.kernels.stats import HUGE  # noqa: E402
from microagg.pipeline import stats  # noqa: E402

# --- the previous kernel, kept here only as the baseline --------------------------------------------
# Each column's sums of x and x^2 as Shewchuk expansions (non-overlapping float64 partials, as in
# math.fsum), x^2 split exactly into two floats by Dekker's product.

_MAX_PARTIALS = 64
_SPLITTER = 134217729.0  # 2**27 + 1


@jit
def _grow(partials, count, x):
    """Add ``x`` to the expansion ``partials[:count]`` exactly; returns the new count."""
    i = 0
    for t in range(count):
        y = partials[t]
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo != 0.0:
            partials[i] = lo
            i += 1
        x = hi
    partials[i] = x
    return i + 1


@jit
def _two_square(x):
    """``(p, e)`` with ``p + e == x * x`` exactly (Dekker's product, no FMA needed)."""
    p = x * x
    c = _SPLITTER * x
    hi = c - (c - x)
    lo = x - hi
    e = ((hi * hi - p) + 2.0 * hi * lo) + lo * lo
    return p, e


@jit
def expansion_column_sums(X):
    """The previous ``exact_column_sums``: per-column expansions of the sums of x and x^2."""
    n, d = X.shape
    sp = np.zeros((d, _MAX_PARTIALS))
    qp = np.zeros((d, _MAX_PARTIALS))
    sc = np.zeros(d, dtype=np.int64)
    qc = np.zeros(d, dtype=np.int64)
    nans = np.zeros(d, dtype=np.int64)
    infs = np.zeros(d, dtype=np.int64)
    huge = np.zeros(d, dtype=np.int64)
    for i in range(n):
        for j in range(d):
            x = X[i, j]
            if np.isnan(x):
                nans[j] += 1
                continue
            if np.isinf(x):
                infs[j] += 1
                continue
            if abs(x) > HUGE:
                huge[j] += 1
                continue
            sc[j] = _grow(sp[j], sc[j], x)
            p, e = _two_square(x)
            qc[j] = _grow(qp[j], qc[j], p)
            if e != 0.0:
                qc[j] = _grow(qp[j], qc[j], e)
    return sp, sc, qp, qc, nans, infs, huge


def expansion_fractions(partials, counts):
    return [sum(map(Fraction, partials[j, : counts[j]]), Fraction(0)) for j in range(len(counts))]


# --- the benchmark ----------------------------------------------------------------------------------


def wide(n, d=13, seed=0):
    """Magnitudes 1e-300..1e150 (every exponent in between), mixed signs, 20% zeros."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * 10.0 ** rng.uniform(-300, 149, size=(n, d))
    X[rng.random((n, d)) < 0.2] = 0.0
    return np.ascontiguousarray(X)


def best_of(repeat, f, X):
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        out = f(X)
        best = min(best, time.perf_counter() - t)
    return best, out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    warm = clustered(100)
    exact_column_sums(warm)  # compile / load the caches
    expansion_column_sums(warm)
    print(f"exact column sums, {args.rows:,} x 13, one core; seconds (best of {args.repeat})")
    print(f"{'data':>10} {'new s':>8} {'ns/value':>9} {'old s':>8} {'ns/value':>9} {'speed-up':>9}"
          f"  same sums / squares")
    for name, X in (("clustered", np.ascontiguousarray(clustered(args.rows))), ("wide", wide(args.rows))):
        new_s, _ = best_of(args.repeat, exact_column_sums, X)
        old_s, (sp, sc, qp, qc, *_) = best_of(args.repeat, expansion_column_sums, X)
        new = stats.chunk(X)
        sums = "yes" if new.sums == expansion_fractions(sp, sc) else "no"
        squares = "yes" if new.squares == expansion_fractions(qp, qc) else "no"
        per = 1e9 / X.size
        print(f"{name:>10} {new_s:>8.3f} {new_s * per:>9.2f} {old_s:>8.3f} {old_s * per:>9.2f} "
              f"{old_s / new_s:>8.1f}x  {sums} / {squares}", flush=True)


if __name__ == "__main__":
    main()
