"""The ``microagg`` command line."""

import argparse
import logging
import os
import sys
import traceback

EXIT_OK = 0
EXIT_INTERNAL = 1


def _add_anonymize(sub):
    p = sub.add_parser(
        "anonymize",
        help="microaggregate a CSV / Parquet input into a k-anonymous Parquet release",
        description=(
            "Partition the records into groups of at least k similar records and release each "
            "quasi-identifier (QI) as its group's centroid. Direct identifiers are dropped; every "
            "other column is released unchanged, in the input's row order. The release is checked "
            "for k-anonymity and written atomically (a failed job leaves nothing at OUTPUT)."
        ),
    )
    p.add_argument("input", metavar="INPUT",
                   help="a CSV file, a Parquet file, a directory or glob of Parquet files (local path or "
                        "fsspec URL), or example:census for the bundled CASC Census file")
    p.add_argument("output", metavar="OUTPUT", help="the Parquet dataset directory to write")
    p.add_argument("--k", type=int, required=True, help="minimum group size (k-anonymity), >= 2")
    p.add_argument("--method", default="mdav", help="microaggregation method (see `microagg methods`); default mdav")
    p.add_argument("--qi", default=None, metavar="COL,COL,...",
                   help="quasi-identifier columns; default: every numeric column not named in --identifiers")
    p.add_argument("--identifiers", default="", metavar="COL,...", help="direct identifiers, dropped from the release")
    p.add_argument("--aggregate", default="mean", choices=("mean", "median"),
                   help="the centroid that replaces a group's values (default mean)")
    p.add_argument("--report", default=None, metavar="PATH",
                   help="where to write the JSON report (default OUTPUT/_report.json)")
    p.add_argument("--rows-per-file", type=int, default=1_000_000, help="rows per output Parquet file")
    p.add_argument("--scheduler", default="local", metavar="local|synchronous|tcp://HOST:PORT",
                   help="local: an embedded Dask cluster sized to this machine (default); synchronous: no "
                        "cluster, everything in this process; or the address of a running Dask scheduler")
    p.add_argument("--workers", type=int, default=None, help="worker processes of the local cluster (default: cores)")
    p.add_argument("--memory-limit", default="auto", help="memory limit per local worker, e.g. 4GiB (default auto)")


def _anonymize(args):
    from ..pipeline.release import ReleaseOptions, run
    from .cluster import dask_client

    options = ReleaseOptions(
        k=args.k,
        method=args.method,
        quasi_identifiers=tuple(c.strip() for c in args.qi.split(",") if c.strip()) if args.qi else None,
        identifiers=tuple(c.strip() for c in args.identifiers.split(",") if c.strip()),
        aggregate=args.aggregate,
        rows_per_file=args.rows_per_file,
    )
    with dask_client(args.scheduler, workers=args.workers, memory_limit=args.memory_limit) as client:
        if client is not None and client.dashboard_link and args.scheduler == "local":
            _say(args, f"Dask dashboard: {client.dashboard_link}")
        report = run(args.input, args.output, options, report_path=args.report)
    _say(args, f"release: {report['output']} ({report['rows']} rows, {report['groups']} groups of "
               f"{report['min_group_size']}..{report['max_group_size']} records, k={report['k']}, "
               f"method {report['method']})")
    _say(args, f"report: {report['report']}")
    _say(args, f"information loss: {report['information_loss']:.3f} %")
    return EXIT_OK


def _methods(args):
    from ..pipeline.methods import METHODS

    width = max(len(name) for name in METHODS)
    for m in METHODS.values():
        print(f"{m.name:<{width}}  {m.summary}\n{'':<{width}}  [{m.reference}]")
    return EXIT_OK


def _say(args, text):
    if not args.quiet:
        print(text, flush=True)


def build_parser():
    parser = argparse.ArgumentParser(prog="microagg", description="Scalable microaggregation on Dask and Numba.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    parser.add_argument("--quiet", action="store_true", help="print nothing on success")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_anonymize(sub)
    sub.add_parser("methods", help="list the available methods with the paper each comes from")
    return parser


COMMANDS = {"anonymize": _anonymize, "methods": _methods}


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.debug:
        # Dask's own INFO chatter (scheduler, nannies, shuffles) is not for a job's console; the
        # environment variable reaches the worker processes too.
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
        import dask

        dask.config.refresh()
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.version:
        from .. import __version__

        print(__version__)
        return EXIT_OK
    if args.command is None:
        parser.print_help()
        return 2
    from ..pipeline.errors import MicroaggError

    try:
        return COMMANDS[args.command](args)
    except MicroaggError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"microagg: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("microagg: interrupted; nothing was written", file=sys.stderr)
        return 130
    except Exception as exc:  # an unexpected failure: still one paragraph unless --debug
        if args.debug:
            traceback.print_exc()
        print(f"microagg: internal error ({type(exc).__name__}): {exc}. Re-run with --debug for the "
              f"traceback.", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
