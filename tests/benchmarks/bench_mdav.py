"""MDAV kernel time against the naive NumPy reference, measured in the same run.

    .venv/bin/python tests/benchmarks/bench_mdav.py [--sizes 5000,20000,100000] [--k 5]

Data: a deterministic mixture of 20 correlated Gaussian clusters in 13 columns (seed 0), standardized
as the pipeline does. The kernel is compiled (and warmed up) before timing; each figure is the best of
--repeat runs for the kernel and one run for the reference. Both must produce the same partition.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import naive  # noqa: E402  (tests/naive.py)
from synthetic import clustered  # noqa: E402

import microagg  # noqa: E402
from microagg import kernels  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="5000,20000,100000")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--naive-max-rows", type=int, default=100_000,
                        help="skip the (slow) reference above this many rows")
    args = parser.parse_args()
    kernels.mdav(np.ascontiguousarray(clustered(100)), args.k)  # compile / load the cache
    print(f"MDAV, 13 columns, k={args.k}, one core; seconds (best of {args.repeat} for the kernel)")
    print(f"{'rows':>8} {'kernel s':>10} {'naive s':>10} {'speed-up':>9} {'IL %':>8}  same partition")
    for n in (int(s) for s in args.sizes.split(",")):
        Z, _, _ = microagg.standardize(clustered(n))
        best = np.inf
        for _ in range(args.repeat):
            t = time.perf_counter()
            labels = kernels.mdav(Z, args.k)
            best = min(best, time.perf_counter() - t)
        il = microagg.information_loss(Z, labels, standardized=True)
        if n <= args.naive_max_rows:
            t = time.perf_counter()
            ref = naive.mdav(Z, args.k)
            ref_s = time.perf_counter() - t
            same = "yes" if np.array_equal(ref, labels) else f"no (reference IL {naive.information_loss(Z, ref):.4f})"
            print(f"{n:>8} {best:>10.3f} {ref_s:>10.2f} {ref_s / best:>8.1f}x {il:>8.4f}  {same}", flush=True)
        else:
            print(f"{n:>8} {best:>10.3f} {'-':>10} {'-':>9} {il:>8.4f}  -", flush=True)


if __name__ == "__main__":
    main()
