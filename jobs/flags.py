"""Command-line flags shared by the commands (kept free of heavy imports: building the parser stays fast)."""

import argparse
import re


WORKER_TIMEOUT = 300.0
"""Seconds a job waits for the first worker of a scheduler that has none (workers starting beside the
job: a Kubernetes DaskCluster pulling its image, a Slurm worker job in the queue) before it fails."""


def add_cluster_arguments(parser, scheduler_note=""):
    """The cluster flags every command that runs on Dask takes (anonymize, generate, evaluate)."""
    parser.add_argument("--scheduler", type=scheduler_address, default="local",
                        metavar="local|synchronous|tcp://HOST:PORT",
                        help="local: an embedded Dask cluster sized to this machine (default); synchronous: no "
                             "cluster, everything in this process; or the address of a running Dask scheduler"
                             + scheduler_note)
    parser.add_argument("--workers", type=_positive, default=None,
                        help="workers of the local cluster (default: 1, or one per core with --processes)")
    parser.add_argument("--threads-per-worker", type=_positive, default=None,
                        help="threads per local worker (default: one per core, or 1 with --processes)")
    parser.add_argument("--processes", action=argparse.BooleanOptionalAction, default=False,
                        help="local cluster: run each worker in its own process (isolates worker memory; "
                             "costs start-up and transfers) instead of as threads of this process (default: "
                             "measured faster, the kernels release the GIL)")
    parser.add_argument("--memory-limit", default="auto",
                        help="memory limit per local worker, e.g. 4GiB (at least 512MiB; 0: none; default auto)")
    parser.add_argument("--worker-timeout", type=_seconds, default=WORKER_TIMEOUT, metavar="SECONDS",
                        help="with a scheduler address: how long to wait for a first worker when it has none "
                             "(workers still starting) before failing with exit code 4 (default 300)")


def add_csv_arguments(parser, which="the input"):
    """The CSV dialect flags (anonymize, evaluate): they apply to ``which`` when it is CSV."""
    parser.add_argument("--csv-separator", default=None, metavar="CHAR",
                        help=f"the field separator of {which} when it is CSV (default ',', a tab for *.tsv "
                             f"files; '\\t' for a tab)")
    parser.add_argument("--csv-decimal", default=None, metavar="CHAR",
                        help=f"the decimal mark of {which} when it is CSV (default '.'; ',' for 1,5, also "
                             f"quoted in a comma-separated file: \"1,5\")")
    parser.add_argument("--csv-thousands", default=None, metavar="CHAR",
                        help=f"the thousands separator of {which}'s numbers when it is CSV (default none; '.' "
                             f"for 1.234,5 with --csv-decimal ',')")
    parser.add_argument("--csv-encoding", default=None, metavar="NAME",
                        help=f"the text encoding of {which} when it is CSV (default utf-8; e.g. latin-1, cp1252)")
    parser.add_argument("--csv-text", type=_column_list, default=(), metavar="COL,...",
                        help=f"columns of {which} read as text, as written, when it is CSV (00123 stays 00123; "
                             f"by default a column is text if its first rows say so, and one of numbers with "
                             f"leading zeros there)")


def csv_flags(args):
    """The dialect (``pipeline.io.csv_dialect``) of the CSV flags; checked."""
    from ..pipeline import io

    return io.csv_dialect(args.csv_separator, args.csv_decimal, args.csv_encoding, args.csv_thousands)


def scheduler_address(value):
    """``--scheduler`` and the job file's ``[cluster] scheduler``: "local", "synchronous", a scheduler's
    address with its scheme (``tcp://HOST:8786``, ``tls://...``) or ``HOST:PORT`` (Dask's default scheme,
    tcp). Anything else is refused before the job starts (it failed as a cluster that cannot be reached,
    after the connection timeout)."""
    if not isinstance(value, str) or not (value in ("local", "synchronous")
                                          or re.fullmatch(r"[a-z][a-z0-9+.-]*://\S+", value)
                                          or re.fullmatch(r"[^\s:/]+:\d+|\[[0-9a-fA-F:.]+\]:\d+", value)):
        raise argparse.ArgumentTypeError(f'must be "local", "synchronous" or a scheduler address such as '
                                         f'"tcp://HOST:8786", got {value!r}')
    return value


def _column_list(value):
    """``COL,COL,...``: a tuple of names, the spaces around each removed; at least one."""
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"names no column, got {value!r}")
    return names


def _positive(value):
    """An integer >= 1 (a local cluster of 0 workers or threads waited for one until its worker timeout)."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value!r}")
    return number


def _seconds(value):
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value!r}")
    return seconds


RELEASE_DLD_RECORDS = 1_000_000
"""Masked records whose links the evaluation of a release searches by default (``anonymize`` and job
files; ``microagg evaluate`` searches all): every record up to a million rows, beyond that a
deterministic sample of the tuples of about a million records, whose DLD's 95 % interval is about
+-0.02 points at 10M rows. Searching every record, the linkage was most of the evaluation's time (10M
rows: 67 of 119 s; 23 s with the sample: BENCHMARKS.md)."""


def dld_records(value):
    """``--dld-records``: ``all`` (None) or a positive number of records."""
    if str(value).strip().lower() == "all":
        return None
    try:
        number = int(str(value).replace("_", "").replace(",", ""))
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number of records or 'all', got {value!r}")
    return number


def add_risk_arguments(parser, note="", records=None):
    """The disclosure-risk flags of ``evaluate`` and of ``anonymize``'s evaluation (``note``: a prefix
    of their help, e.g. "evaluation: "; ``records``: the default of ``--dld-records``, None for all)."""
    parser.add_argument("--known", action="append", default=[], metavar="COL,COL,...",
                        help=f"{note}a set of QIs an intruder may know: the DLD and ID are also reported for it "
                             "(repeatable; all QIs are always reported)")
    parser.add_argument("--id-percent", type=float, default=None, metavar="P",
                        help=f"{note}width of the rank intervals of the interval disclosure, in percent of the rows "
                             "(default 10)")
    parser.add_argument("--dld-records", type=dld_records, default=records, metavar="N|all",
                        help=f"{note}search the record linkage of every masked record (all: the exact DLD) or of a "
                             "deterministic sample of about N of them, each searched exactly, the DLD then reported "
                             "with its 95%% interval (default: " + ("all" if records is None else f"{records:,}")
                             + ")")
