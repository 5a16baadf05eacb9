"""Every method x refinement x k on the CASC files and a third dataset, and the quality target.

    .venv/bin/python tests/benchmarks/bench_methods.py table [--datasets census,eia,tax] [--iterations 100]
    .venv/bin/python tests/benchmarks/bench_methods.py target [--budget 55]
    .venv/bin/python tests/benchmarks/bench_methods.py race [--datasets census,eia,tax,extract] [--rows 200000]
    .venv/bin/python tests/benchmarks/bench_methods.py dba [--rows 200000]
    .venv/bin/python tests/benchmarks/bench_methods.py refine [--rows 200000]
    .venv/bin/python tests/benchmarks/bench_methods.py members [--rows 200000]
    .venv/bin/python tests/benchmarks/bench_methods.py ties [--rows 5000] [--methods md,dba,gsms,auto]

``table``: information loss (%) and seconds (one core, after compilation) of every method of
``microagg.METHODS`` followed by every refinement of ``microagg.REFINERS`` (ils with a fixed iteration
count), for k = 3, 5, 10, on census (1080 x 13), eia (4092 x 11) and ``tax``: a synthetic extract the
tests never use (3,000 records of 6 skewed, correlated income / tax quantities, generated here).

``target``: ``--method auto --refine ils`` with a time budget per case against the lowest IL known to
us on the CASC files (issue 4); prints IL, seconds and whether the target is reached.

``race``: ``auto`` on each dataset cut into blocks (census in blocks of 300 rows, eia and tax of 500,
``extract``, the pipeline benchmark's synthetic extract, ``--rows`` of it in blocks of 2,500; 32 blocks
per task, the pipeline's default), with its portfolio raced over each task's blocks (the default) and
full: IL, the methods run (a method on a block counts one) and seconds, in memory on 2 threads.
``--probes``, ``--reprobe`` and ``--margin`` try other rules of the race.

``dba``: DBA-1 and DBA-2 on 8 blocks of 2,500 rows of the extract (the rows nearest a random row, as
a block of the split tree holds neighbouring rows), k = 3, 5, 10: milliseconds per block of DBA-1
with its candidate lists (``reserve=4``, the default) against one list entry per neighbour
(``reserve=1``: a full scan for every recomputed neighbourhood, as before the lists), which must
give the same groups; and of DBA-2.

``refine``: the local search to convergence (as ``auto`` runs it after each member) from the groups
of mdav, cbfs and dba on the same 8 blocks, k = 3, 5, 10: milliseconds per block with the neighbour
lists brought up to date between sweeps (the default) against every pair scanned again at every sweep
(``rescan=True``), which must give the same groups.

``members``: what one block costs ``auto``: each member of its portfolio on the same 8 blocks, k = 5:
milliseconds per block of the method and of the local search to convergence that follows it, the
mean gap of its refined SSE to the block's best member's, and the blocks it wins.

``ties``: each of ``--methods`` on one block of ``--rows`` records (default 5,000, the largest input
solved as one block) of 6 lognormal columns, k = 5, as the share of records that are copies of the
all-zero record grows (0, 50, 90, 99 and 100 %): seconds (after compilation) and IL. The share 0 is the
baseline: a zero-inflated extract should cost no more than one without copies.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import microagg  # noqa: E402
from conftest import CENSUS_CSV, EIA_CSV, EIA_NON_QI  # noqa: E402

TARGETS = {("census", 3): 5.187, ("census", 5): 7.872, ("census", 10): 12.200,
           ("eia", 3): 0.394, ("eia", 5): 0.762, ("eia", 10): 2.022}


def tax(n=3000, seed=2026):
    """Skewed, correlated money quantities (log-normal mixture): wages, other income, deductions,
    taxable income, tax, refund. Not used by any test."""
    rng = np.random.default_rng(seed)
    segment = rng.choice(3, size=n, p=[0.6, 0.3, 0.1])
    base = rng.normal([10.0, 10.8, 11.8][0], 0.1, size=n) + np.array([0.0, 0.8, 1.8])[segment]
    wages = np.exp(base + rng.normal(0, 0.4, n))
    other = np.exp(base - 1.5 + rng.normal(0, 1.0, n)) * (rng.random(n) < 0.5)
    deductions = 0.1 * wages + np.exp(7 + rng.normal(0, 0.8, n))
    taxable = np.maximum(wages + other - deductions, 0)
    tax_due = 0.12 * taxable + 0.1 * np.maximum(taxable - 80_000, 0)
    refund = np.maximum(0.15 * wages - tax_due + rng.normal(0, 500, n), 0)
    return np.column_stack([wages, other, deductions, taxable, tax_due, refund])


def datasets(names):
    out = {}
    for name in names:
        if name == "census":
            out[name] = pd.read_csv(CENSUS_CSV).to_numpy(dtype=float)
        elif name == "eia":
            out[name] = pd.read_csv(EIA_CSV).drop(columns=EIA_NON_QI).to_numpy(dtype=float)
        elif name == "tax":
            out[name] = tax()
        else:
            raise SystemExit(f"unknown dataset {name}")
    return out


def _timed(Z, k, method, refine, refine_options):
    start = time.perf_counter()
    labels = microagg.partition(Z, k, method, refine=refine, standardized=True, refine_options=refine_options)
    return microagg.information_loss(Z, labels, standardized=True), time.perf_counter() - start


def table(args):
    data = datasets(args.datasets.split(","))
    refiners = [r for r in microagg.REFINERS]
    warm = np.ascontiguousarray(microagg.standardize(data[next(iter(data))][:200])[0])
    for method in microagg.METHODS:  # compile (or load) every kernel before timing
        for refine in refiners:
            _timed(warm, 3, method, refine, {"iterations": 2} if refine == "ils" else None)
    for name, X in data.items():
        Z = np.ascontiguousarray(microagg.standardize(X)[0])
        print(f"\n### {name} ({X.shape[0]} x {X.shape[1]}); IL % / seconds; ils: {args.iterations} iterations\n")
        print("| method | refine | " + " | ".join(f"k={k}" for k in (3, 5, 10)) + " |")
        print("| --- | --- | " + " | ".join("---:" for _ in range(3)) + " |")
        for method in microagg.METHODS:
            for refine in refiners:
                options = {"iterations": args.iterations} if refine == "ils" else None
                cells = [_timed(Z, k, method, refine, options) for k in (3, 5, 10)]
                print(f"| {method} | {refine} | " + " | ".join(f"{il:.3f} / {s:.2f}" for il, s in cells) + " |",
                      flush=True)


def target(args):
    data = datasets(["census", "eia"])
    _timed(np.ascontiguousarray(microagg.standardize(data["census"][:200])[0]), 3, "auto", "ils", {"iterations": 2})
    print(f"| dataset | k | target IL | auto + ils IL | seconds (budget {args.budget:g} s, one core) | reached |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name, X in data.items():
        Z = np.ascontiguousarray(microagg.standardize(X)[0])
        for k in (3, 5, 10):
            il, seconds = _timed(Z, k, "auto", "ils", {"iterations": None, "time_budget": args.budget})
            goal = TARGETS[(name, k)]
            print(f"| {name} | {k} | {goal:.3f} | {il:.3f} | {seconds:.1f} | {'yes' if il <= goal else 'NO'} |",
                  flush=True)


RACE_BLOCKS = {"census": 300, "eia": 500, "tax": 500, "extract": 2500}


def race(args):
    from microagg.pipeline import methods

    methods.AUTO_PROBES, methods.AUTO_REPROBE, methods.AUTO_MARGIN = args.probes, args.reprobe, args.margin
    names = args.datasets.split(",")
    data = datasets([n for n in names if n != "extract"])
    if "extract" in names:
        data["extract"] = _extract(args)
    runs = []
    run_method = methods.run_method

    def counted(method, Z, k, options=None):
        runs.append(method.name)
        return run_method(method, Z, k, options)

    methods.run_method = counted
    print(f"race: {args.probes} probes, every {args.reprobe}th block again, margin {args.margin:g}\n")
    print("| dataset | block rows | k | IL % full | IL % race | change | methods run, full / race | seconds, full / race |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, X in data.items():
        Z = np.ascontiguousarray(microagg.standardize(X)[0])
        for k in (3, 5, 10):
            cells = {}
            for portfolio in ("full", "race"):
                runs.clear()
                start = time.perf_counter()
                labels = microagg.partition(Z, k, "auto", standardized=True, method_options={"portfolio": portfolio},
                                            block_size=RACE_BLOCKS[name], one_block_rows=0)
                seconds = time.perf_counter() - start
                cells[portfolio] = microagg.information_loss(Z, labels, standardized=True), len(runs), seconds
            (full, n_full, s_full), (raced, n_race, s_race) = cells["full"], cells["race"]
            print(f"| {name} ({X.shape[0]:,} x {X.shape[1]}) | {RACE_BLOCKS[name]:,} | {k} | {full:.4f} | {raced:.4f} | "
                  f"{(raced / full - 1) * 100:+.2f} % | {n_full:,} / {n_race:,} | {s_full:.1f} / {s_race:.1f} |",
                  flush=True)


def _extract(args):
    from bench_pipeline import QI, make_extract

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    return pd.read_parquet(make_extract(args.rows or 200_000, root), columns=QI).to_numpy(dtype=float)


def _blocks(args):
    """8 blocks of 2,500 rows of the standardized extract: the rows nearest a random row, as a block of
    the split tree holds neighbouring rows."""
    Z = microagg.standardize(_extract(args))[0]
    rng = np.random.default_rng(0)
    return [np.ascontiguousarray(Z[np.argsort(((Z - Z[rng.integers(len(Z))]) ** 2).sum(1))[:2500]])
            for _ in range(8)]


def dba(args):
    from microagg.kernels.dba import dba1, dba2

    blocks = _blocks(args)
    print("| k | DBA-1 ms, one scan per neighbourhood (reserve=1) | DBA-1 ms, candidate lists | ratio | same groups "
          "| DBA-2 ms |")
    print("| ---: | ---: | ---: | ---: | --- | ---: |")
    for k in (3, 5, 10):
        dba2(blocks[0][:100], dba1(blocks[0][:100], k, 1), k)  # compile (or load) before timing
        dba1(blocks[0][:100], k, 4)
        seconds = {1: 0.0, 4: 0.0, "dba2": 0.0}
        same = True
        for B in blocks:
            out = {}
            for reserve in (1, 4):
                start = time.perf_counter()
                out[reserve] = dba1(B, k, reserve)
                seconds[reserve] += time.perf_counter() - start
            same &= bool(np.array_equal(out[1], out[4]))
            start = time.perf_counter()
            dba2(B, out[4], k)
            seconds["dba2"] += time.perf_counter() - start
        ms = {key: 1000 * value / len(blocks) for key, value in seconds.items()}
        print(f"| {k} | {ms[1]:.1f} | {ms[4]:.1f} | {ms[1] / ms[4]:.2f}x | {'yes' if same else 'NO'} | {ms['dba2']:.1f} |",
              flush=True)


def refine(args):
    from microagg import kernels
    from microagg.pipeline.methods import METHODS, run_method

    blocks = _blocks(args)
    print("| start | k | ms, every pair scanned at every sweep | ms, lists brought up to date | ratio | same groups |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name in ("mdav", "cbfs", "dba"):
        for k in (3, 5, 10):
            starts = [run_method(METHODS[name], B, k) for B in blocks]
            kernels.refine(blocks[0][:100], kernels.mdav(blocks[0][:100], k), k, 2 * k - 1, 8, 1000, rescan=True)
            seconds = {True: 0.0, False: 0.0}
            same = True
            for B, start in zip(blocks, starts):
                out = {}
                for rescan in (True, False):
                    out[rescan] = start.copy()
                    begin = time.perf_counter()
                    kernels.refine(B, out[rescan], k, 2 * k - 1, 8, 1000, rescan=rescan)
                    seconds[rescan] += time.perf_counter() - begin
                same &= bool(np.array_equal(out[True], out[False]))
            ms = {key: 1000 * value / len(blocks) for key, value in seconds.items()}
            print(f"| {name} | {k} | {ms[True]:.2f} | {ms[False]:.2f} | {ms[True] / ms[False]:.2f}x | "
                  f"{'yes' if same else 'NO'} |", flush=True)


def members(args):
    from microagg import kernels
    from microagg.pipeline.methods import AUTO_PORTFOLIO, METHODS, run_method

    blocks, k = _blocks(args), 5
    names = [" ".join([name, *(f"{key}={value}" for key, value in options.items())]) for name, options in AUTO_PORTFOLIO]
    seconds = np.zeros((len(AUTO_PORTFOLIO), 2))
    sse = np.zeros((len(blocks), len(AUTO_PORTFOLIO)))
    for i, (name, options) in enumerate(AUTO_PORTFOLIO):  # compile (or load) before timing
        kernels.refine(blocks[0][:100], run_method(METHODS[name], blocks[0][:100], k, options), k, 2 * k - 1, 8, 1000)
    for b, B in enumerate(blocks):
        for i, (name, options) in enumerate(AUTO_PORTFOLIO):
            start = time.perf_counter()
            labels = run_method(METHODS[name], B, k, options)
            middle = time.perf_counter()
            kernels.refine(B, labels, k, 2 * k - 1, 8, 1000)
            seconds[i] += middle - start, time.perf_counter() - middle
            sse[b, i] = kernels.sse(B, labels, int(labels.max()) + 1)
    ms = 1000 * seconds / len(blocks)
    gap = 100 * (sse / sse.min(axis=1, keepdims=True) - 1).mean(axis=0)
    won = np.bincount(sse.argmin(axis=1), minlength=len(AUTO_PORTFOLIO))
    print(f"k = {k}, {len(blocks)} blocks of {len(blocks[0]):,} rows; all members: {ms.sum():.1f} ms per block\n")
    print("| member | method ms | local search ms | mean gap to the best % | blocks won |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for i, name in enumerate(names):
        print(f"| {name} | {ms[i, 0]:.1f} | {ms[i, 1]:.1f} | {gap[i]:.2f} | {won[i]} |", flush=True)


def ties(args):
    rows = args.rows or 5000
    methods = args.methods.split(",")
    rng = np.random.default_rng(2026)
    X = rng.lognormal(size=(rows, 6))
    draw = rng.random(rows)
    for method in methods:  # compile (or load) before timing
        microagg.partition(X[:200], 5, method=method)
    shares = (0.0, 0.5, 0.9, 0.99, 1.0)  # 100 %: every record the same (IL 0 by any partition)
    print(f"{rows:,} rows x 6 lognormal columns, k = 5; a share of the records set to the all-zero record\n")
    print("| method | " + " | ".join(f"{100 * s:g} % zeros: s, IL %" for s in shares) + " |")
    print("| --- |" + " ---: |" * len(shares))
    for method in methods:
        cells = []
        for share in shares:
            Y = X.copy()
            Y[draw < share] = 0.0
            start = time.perf_counter()
            labels = microagg.partition(Y, 5, method=method)
            seconds = time.perf_counter() - start
            cells.append(f"{seconds:.2f}, {microagg.information_loss(Y, labels):.3f}")
        print(f"| {method} | " + " | ".join(cells) + " |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("table", "target", "race", "dba", "refine", "members", "ties"))
    parser.add_argument("--datasets", default="census,eia,tax")
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--budget", type=float, default=55.0, help="ils seconds per case (target mode)")
    parser.add_argument("--rows", type=int, default=None,
                        help="race, dba, refine, members modes: rows of the extract (200,000); ties mode: of the block (5,000)")
    parser.add_argument("--data", default=None, help="race, dba, refine, members modes: where the extract is kept (default: the temp dir)")
    parser.add_argument("--probes", type=int, default=4, help="race mode: blocks of a task that try every method")
    parser.add_argument("--reprobe", type=int, default=16, help="race mode: every this-many-th block tries them again")
    parser.add_argument("--margin", type=float, default=0.01, help="race mode: within this of a probe's best stays")
    parser.add_argument("--methods", default="md,dba,gsms,auto", help="ties mode: the methods timed")
    args = parser.parse_args()
    {"table": table, "target": target, "race": race, "dba": dba, "refine": refine,
     "members": members, "ties": ties}[args.mode](args)


if __name__ == "__main__":
    main()
