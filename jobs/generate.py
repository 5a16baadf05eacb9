"""``microagg generate``: synthetic census-like microdata for tests and benchmarks."""

import argparse
import re
import time

from . import logs
from .flags import add_cluster_arguments

EXIT_OK = 0

_COUNT = re.compile(r"^\s*(\d[\d_]*)\s*([kKmMgG]?)\s*$")
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}


def count(text):
    """An integer count, with an optional k / M / G suffix (powers of 1000): ``10M`` = 10,000,000."""
    match = _COUNT.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (e.g. 1000000, 1_000_000 or 1M)")
    return int(match.group(1).replace("_", "")) * _SCALE[match.group(2).lower()]


def add_parser(sub):
    # no pipeline import here: building the parser must stay cheap for every command
    p = sub.add_parser(
        "generate",
        help="write synthetic census-like microdata (tax-record incomes, ages, household counts) as Parquet",
        description=(
            "Stream a synthetic dataset of one adult person per row: skewed, zero-inflated and correlated "
            "incomes (WAGE, SELF_EMP, CAPITAL_INC, RETIREMENT), AGI, TAXINC, TAX from the progressive "
            "schedule, capped FICA, AGE, CHILDREN and HOUSEHOLD_SIZE driven by a latent HOUSEHOLD_TYPE, "
            "REGION and SEX strings, the identifier person_id and a confidential HEALTH_EXP. The same "
            "--rows, --files and --seed give byte-identical files; a row's values depend only on the "
            "seed and its position, not on --files. Files are written in parallel on the Dask cluster "
            "and committed atomically (a failed job leaves nothing at OUTPUT). The quasi-identifiers "
            "are microagg.pipeline.generate.QUASI_IDENTIFIERS."
        ),
    )
    p.add_argument("output", metavar="OUTPUT", help="the Parquet dataset directory to write (part-00000.parquet, ...)")
    p.add_argument("--rows", type=count, required=True, metavar="N",
                   help="rows to generate, e.g. 1000000 or 10M (k, M, G: powers of 1000)")
    p.add_argument("--files", type=count, default=None, metavar="F",
                   help="Parquet files to split the rows into, balanced (default: one per started million "
                        "rows); each is one Dask task, written in row groups of at most a million rows")
    p.add_argument("--seed", type=int, default=0, help="seed of the data (>= 0; default 0)")
    add_cluster_arguments(p, " (its workers must see OUTPUT's filesystem)")
    return p


def run(args):
    from ..pipeline.generate import check_arguments, default_files, write_dataset
    from .cluster import dask_client

    files = default_files(args.rows) if args.files is None else args.files
    check_arguments(args.rows, files, args.seed)  # before a cluster starts
    start = time.perf_counter()
    with dask_client(args.scheduler, workers=args.workers, threads_per_worker=args.threads_per_worker,
                     memory_limit=args.memory_limit, processes=args.processes,
                     worker_timeout=args.worker_timeout) as client:
        summary = write_dataset(args.output, args.rows, files, args.seed, client)
    seconds = time.perf_counter() - start
    if not args.quiet:
        logs.say(f"generated: {summary['output']} ({summary['rows']} rows in {summary['files']} file(s), seed "
                 f"{summary['seed']}, {summary['bytes'] / 2**20:.1f} MiB, {seconds:.1f} s)")
    return EXIT_OK
