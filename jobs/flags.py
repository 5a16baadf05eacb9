"""Command-line flags shared by the commands (kept free of heavy imports: building the parser stays fast)."""

import argparse


def add_cluster_arguments(parser, scheduler_note=""):
    """The cluster flags every command that runs on Dask takes (anonymize, generate, evaluate)."""
    parser.add_argument("--scheduler", default="local", metavar="local|synchronous|tcp://HOST:PORT",
                        help="local: an embedded Dask cluster sized to this machine (default); synchronous: no "
                             "cluster, everything in this process; or the address of a running Dask scheduler"
                             + scheduler_note)
    parser.add_argument("--workers", type=int, default=None,
                        help="workers of the local cluster (default: 1, or one per core with --processes)")
    parser.add_argument("--threads-per-worker", type=int, default=None,
                        help="threads per local worker (default: one per core, or 1 with --processes)")
    parser.add_argument("--processes", action=argparse.BooleanOptionalAction, default=False,
                        help="local cluster: run each worker in its own process (isolates worker memory; "
                             "costs start-up and transfers) instead of as threads of this process (default: "
                             "measured faster, the kernels release the GIL)")
    parser.add_argument("--memory-limit", default="auto",
                        help="memory limit per local worker, e.g. 4GiB (at least 512MiB; 0: none; default auto)")


def add_risk_arguments(parser, note=""):
    """The disclosure-risk flags of ``evaluate`` and of ``anonymize --evaluate`` (``note``: a prefix of
    their help, e.g. "with --evaluate: ")."""
    parser.add_argument("--known", action="append", default=[], metavar="COL,COL,...",
                        help=f"{note}a set of QIs an intruder may know: the DLD and ID are also reported for it "
                             "(repeatable; all QIs are always reported)")
    parser.add_argument("--id-percent", type=float, default=None, metavar="P",
                        help=f"{note}width of the rank intervals of the interval disclosure, in percent of the rows "
                             "(default 10)")
