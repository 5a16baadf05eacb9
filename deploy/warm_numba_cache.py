"""Compile every microagg Numba kernel into NUMBA_CACHE_DIR (run once, at image build time).

Every kernel is ``@njit(cache=True)`` and compiles on first call. A container that starts cold pays
that compile time on every worker, every run; the image pays it once instead. This script calls each
method and refinement on a tiny array and runs tiny releases through the same code path as
``microagg anonymize`` (the in-process synchronous scheduler, which runs the tasks a cluster's
workers would run), then checks that every module-level kernel of ``microagg.kernels`` is compiled
(or called by a compiled kernel): with ``--strict`` a kernel left out (a new one nobody added here)
fails the build.

    python deploy/warm_numba_cache.py [--strict]

Numba keys its cache on the CPU name and features: set NUMBA_CPU_NAME=x86-64-v3 (the image does) at
build time AND run time for a cache that every x86-64 node with AVX2 and FMA can use.
"""

import argparse
import importlib
import os
import pkgutil
import sys
import tempfile
import warnings

import numpy as np


def _partition_every_method():
    import microagg

    X = np.random.default_rng(0).random((60, 3))
    column = np.ascontiguousarray(X[:, :1])  # univariate microaggregation partitions one column at a time
    for name in microagg.METHODS:
        if name in ("auto", "mic1d"):
            continue  # auto: the others, each then locally searched (below); mic1d releases values, not groups
        microagg.partition(column if name == "univariate" else X, 3, name)
    for name in ("mdav", "cbfs", "tfrp"):
        microagg.partition(X, 3, name, method_options={"grow": "nc"})
    for order in ("npn", "md", "cbfs"):
        microagg.partition(X, 3, "mhm", method_options={"mhm_order": order})
    microagg.partition(column, 3, "univariate", method_options={"grouping": "fixed"})
    for refine in microagg.REFINERS:
        microagg.partition(X, 3, "mdav", refine=refine)
    microagg.partition(X, 3, "auto")
    # the blocked driver with a sampled split tree (as every extract above 20,000 rows is blocked)
    labels = microagg.partition(X, 3, block_size=20, sample_rows=30, one_block_rows=0)
    microagg.information_loss(X, labels)
    # the split tree grown on several cores, one level of cells split side by side (a sample of 100,000
    # rows or more: every input above about 2M rows), with the argument types of pipeline.blocking.build_tree
    from microagg.pipeline import blocking

    blocking.grow_tree(X, 1.0, 20.0, 0.0, 3, np.empty(0), threads=2, depth=1)
    # kernels of the public API that the releases below do not reach
    from microagg.kernels import decomposition, univariate_optimal

    univariate_optimal(np.ascontiguousarray(X[:, 0]), 3)
    decomposition.split_large_groups(X, labels, 3)
    # the cut of released pieces by output file, for clusters of several workers (the releases below
    # run in one process, where each file task reads the whole pieces)
    from microagg.kernels import groups

    groups.file_pieces(np.arange(6, dtype=np.int64), np.array([0, 1, 0, 1, 2, 2]), 3, np.array([0, 3]))


def _cli(*args):
    from microagg.jobs.cli import main

    code = main(["--quiet", *map(str, args), "--scheduler", "synchronous"])
    if code != 0:
        raise SystemExit(f"warm-up step `microagg {' '.join(map(str, args))}` failed with exit code {code}")


def _releases(root):
    """Tiny releases through the distributed code path, one per stage family."""
    import pandas as pd

    extract = os.path.join(root, "extract")
    _cli("generate", extract, "--rows", 3000, "--seed", 1)
    df = pd.read_parquet(extract)
    qi = ["AGE", "WAGE", "AGI", "TAX"]
    common = ["--qi", ",".join(qi), "--identifiers", "person_id"]
    # several blocks (an input of at most --one-block-rows rows, 5,000 by default, is one block)
    blocked = [*common, "--block-size", 400, "--blocks-per-task", 2, "--one-block-rows", 0]
    runs = [
        [*blocked],
        [*blocked, "--stitch", "deep", "--refine", "local"],
        [*blocked, "--order", "pca"],
        [*blocked, "--order", "zscore"],
        [*blocked, "--strata", "REGION", "--small-strata", "merge"],
        [*blocked, "--aggregate", "median"],
        [*blocked, "--aggregate", "trimmed", "--weights", "WEIGHT"],
        [*blocked, "--noise", "laplace", "--epsilon", 1],
        [*blocked, "--blocks", "AGE,WAGE;AGI,TAX"],
        [*blocked, "--release-where", "AGE >= 30"],
        [*common, "--method", "pcp", "--block-size", 400],
        [*common, "--method", "zscore", "--block-size", 400],
        [*common, "--method", "univariate", "--block-size", 400],
        [*common, "--method", "mic1d", "--k", 50, "--block-size", 400],
    ]
    for i, flags in enumerate(runs):
        k = [] if "--k" in flags else ["--k", 3]
        _cli("anonymize", extract, os.path.join(root, f"release-{i}"), *k, *flags)
    # a CSV input: its rows' shape, separators and whole numbers written with leading zeros are scanned
    csv = os.path.join(root, "extract.csv")
    df.to_csv(csv, index=False)
    _cli("anonymize", csv, os.path.join(root, "release-csv"), "--k", 3, *common)
    # a CSV file large enough to be cut into blocks (64 MB) is scanned for line breaks inside quoted fields
    from microagg.pipeline import io

    quoted = os.path.join(root, "quoted.csv")
    with open(quoted, "w") as fh:
        fh.write('a,b\n1,"two\nlines"\n2,z\n')
    io._record_ends(quoted, 0, os.path.getsize(quoted), b",")
    holes = df.copy()
    holes.loc[holes.index[::7], "WAGE"] = np.nan  # --missing centroid: distances over observed coordinates
    missing = os.path.join(root, "missing.parquet")
    holes.to_parquet(missing, index=False)
    _cli("anonymize", missing, os.path.join(root, "release-missing"), "--k", 3, *blocked, "--missing", "centroid")
    from microagg.jobs.cli import COMMANDS

    if "evaluate" in COMMANDS:  # record linkage and disclosure risk of a release
        _cli("evaluate", extract, os.path.join(root, "release-0"), "--qi", ",".join(qi), "--k", 3,
             "--block-rows", 1000, "--report", os.path.join(root, "evaluation.json"))


def uncompiled_kernels():
    """Module-level kernels of ``microagg.kernels`` that are not compiled in this process: no compiled
    signature of their own and not called by a compiled kernel (a kernel loaded from the cache brings
    the kernels it calls in its own object code, so those are never compiled separately)."""
    from numba.core.dispatcher import Dispatcher

    import microagg.kernels as package

    kernels = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, Dispatcher) and obj.__module__ == module.__name__:
                kernels[f"{info.name}.{name}"] = obj
    warm = [d for d in kernels.values() if d.signatures]
    seen = {id(d) for d in warm}
    while warm:  # everything a compiled kernel calls is compiled with it
        d = warm.pop()
        for name in d.py_func.__code__.co_names:
            callee = d.py_func.__globals__.get(name)
            if isinstance(callee, Dispatcher) and id(callee) not in seen:
                seen.add(id(callee))
                warm.append(callee)
    return sorted(name for name, d in kernels.items() if id(d) not in seen)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strict", action="store_true", help="fail if a kernel was not compiled")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    _partition_every_method()
    with tempfile.TemporaryDirectory(prefix="microagg-warm-") as root:
        _releases(root)
    left = uncompiled_kernels()
    cache = os.environ.get("NUMBA_CACHE_DIR", "(next to the sources)")
    if left:
        print(f"warm-up: {len(left)} kernel(s) not compiled: {', '.join(left)}", file=sys.stderr)
        if args.strict:
            return 1
    else:
        print(f"warm-up: every microagg kernel is compiled into {cache}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
