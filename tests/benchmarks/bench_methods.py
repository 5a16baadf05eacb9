"""Every method x refinement x k on the CASC files and a third dataset, and the quality target.

    .venv/bin/python tests/benchmarks/bench_methods.py table [--datasets census,eia,tax] [--iterations 100]
    .venv/bin/python tests/benchmarks/bench_methods.py target [--budget 55]

``table``: information loss (%) and seconds (one core, after compilation) of every method of
``microagg.METHODS`` followed by every refinement of ``microagg.REFINERS`` (ils with a fixed iteration
count), for k = 3, 5, 10, on census (1080 x 13), eia (4092 x 11) and ``tax``: a synthetic extract the
tests never use (3,000 records of 6 skewed, correlated income / tax quantities, generated here).

``target``: ``--method auto --refine ils`` with a time budget per case against the lowest IL known to
us on the CASC files (issue 4); prints IL, seconds and whether the target is reached.
"""

import argparse
import sys
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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("table", "target"))
    parser.add_argument("--datasets", default="census,eia,tax")
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--budget", type=float, default=55.0, help="ils seconds per case (target mode)")
    args = parser.parse_args()
    {"table": table, "target": target}[args.mode](args)


if __name__ == "__main__":
    main()
