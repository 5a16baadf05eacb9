"""``microagg evaluate``: utility and disclosure risk of a masked file against its original."""

import argparse

from . import logs
from .flags import add_cluster_arguments, add_csv_arguments, add_risk_arguments, csv_flags
from .progress import reporting

EXIT_OK = 0
DEFAULT_REPORT = "microagg-evaluate.json"


def add_parser(sub):
    # no pipeline import here: building the parser must stay cheap for every command
    p = sub.add_parser(
        "evaluate",
        help="measure the information loss and disclosure risk of a masked file against its original",
        description=(
            "Compare ORIGINAL with MASKED, row i of MASKED being the masked version of row i of ORIGINAL (by "
            "position, across all files of each; the masked file may come from any tool). Reports the "
            "information loss (IL = 100 SSE/SST on z-scores, the IL family of the score, IL1s, changes of each "
            "attribute's mean, variance and quantiles), the disclosure risk (distance-based record linkage DLD, "
            "exact, for all QIs and every --known set; rank-based interval disclosure ID), the score, the real "
            "anonymity k' and the equivalence-class sizes of the released QI tuples, and checks (row counts, "
            "k-anonymity with --k, non-QI columns unchanged). Writes the JSON report to --report (default "
            f"./{DEFAULT_REPORT}), the same as an HTML page with plots beside it (--no-html: none), and prints "
            "a summary. Failed checks are reported, not errors (exit 0); bad input exits with 2."
        ),
    )
    p.add_argument("original", metavar="ORIGINAL",
                   help="the original data: a CSV file, a Parquet file, a directory or glob of Parquet files, or "
                        "example:census")
    p.add_argument("masked", metavar="MASKED", help="the masked data, in any of the same forms")
    add_csv_arguments(p, "the files")
    p.add_argument("--qi", required=True, metavar="COL,COL,...", help="the quasi-identifier columns to compare")
    p.add_argument("--k", type=int, default=None,
                   help="check that every released QI tuple occurs at least k times (rows in smaller classes "
                        "are counted)")
    add_risk_arguments(p)
    p.add_argument("--changed", default="", metavar="COL,COL,...",
                   help="non-QI columns the masked file changes on purpose (hashed identifiers, say): not compared "
                        "with the original's (listed in the report's checks as not_compared)")
    p.add_argument("--report", default=DEFAULT_REPORT, metavar="PATH",
                   help=f"where to write the JSON report (default ./{DEFAULT_REPORT}); written atomically")
    p.add_argument("--html", action=argparse.BooleanOptionalAction, default=True,
                   help="also write the report as one self-contained HTML page with plots of both files (default "
                        "on), beside the JSON report: PATH with the suffix .html. It holds aggregates of the "
                        "original data: handle it as the original")
    p.add_argument("--block-rows", type=int, default=None, metavar="N",
                   help="original records per record-linkage block (default 100000); the DLD does not depend "
                        "on it")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the sample that shapes the record-linkage blocks (the results do not depend on it)")
    add_cluster_arguments(p)
    return p


def _check_paths(args, page):
    """The seed's range, and the report (and its page) not overwriting either file compared."""
    from ..pipeline.errors import InputError
    from ..pipeline.validation import check_seed, report_path_problems

    check_seed(args.seed)
    problems = report_path_problems([args.original, args.masked], None,
                                    [("--report", args.report), ("--html (the page beside --report)", page)])
    if problems:
        raise InputError("; ".join(problems))


def run(args):
    from ..pipeline import evaluate, metrics
    from .cluster import dask_client

    options = {"seed": args.seed, "dld_records": args.dld_records,
               "changed": [c.strip() for c in args.changed.split(",") if c.strip()]}
    if args.block_rows is not None:
        options["block_rows"] = args.block_rows
    id_percent = metrics.ID_PERCENT if args.id_percent is None else args.id_percent
    evaluate.check_report_path(args.report, args.html)  # before a cluster starts
    _check_paths(args, evaluate.html_path(args.report) if args.html else None)
    csv = csv_flags(args)
    with dask_client(args.scheduler, workers=args.workers, threads_per_worker=args.threads_per_worker,
                     memory_limit=args.memory_limit, processes=args.processes,
                     worker_timeout=args.worker_timeout) as client, reporting(client, args.quiet):
        report = evaluate.run(args.original, args.masked, args.qi, args.report, args.k, args.known, id_percent,
                              html=args.html, csv=csv, text_columns=args.csv_text, **options)
    if not args.quiet:
        _summary(report)
    return EXIT_OK


def _number(value, digits=3):
    return "n/a" if value is None else f"{value:.{digits}f}"


def dld_text(risk, rows):
    """The DLD of a report's ``disclosure_risk`` (or of one of its scenarios) for the console: with its
    95 % interval and the records searched when only a sample of the ``rows`` was."""
    text = f"DLD {_number(risk.get('dld'))} %"
    interval, records = risk.get("dld_interval"), risk.get("dld_records")
    if interval and records is not None:
        text += f" (95% interval {interval[0]:.3f}-{interval[1]:.3f} %, {records:,} of {rows:,} records searched)"
    return text


def _summary(report):
    loss, risk, anonymity, checks = (report["information_loss"], report["disclosure_risk"], report["anonymity"],
                                     report["checks"])
    lines = [
        f"evaluated: {report['masked']} against {report['original']} ({report['rows']} rows, "
        f"{len(report['qi'])} quasi-identifiers)",
        f"information loss: IL {_number(loss['il'])} % (100 SSE/SST), score IL {_number(loss['family']['IL'])} %, "
        f"IL1s {_number(loss['il1s'], 4)}",
        f"disclosure risk: {dld_text(risk, report['rows'])}, ID {_number(risk['id'])} % (p = {risk['id_percent']}), "
        f"DR {_number(risk['dr'])} %; score {_number(report['score'])}",
    ]
    for scenario in risk["scenarios"][1:]:
        lines.append(f"  known {','.join(scenario['columns'])}: {dld_text(scenario, report['rows'])}, "
                     f"ID {_number(scenario['id'])} %")
    lines.append(f"real anonymity k' {_number(anonymity['k_prime'], 2)}: {anonymity['classes']} classes, smallest "
                 f"{anonymity['min_class_size']}")
    if checks["k_anonymity"] is not None:
        small = checks["k_anonymity"]
        lines.append(f"k-anonymity (k={small['k']}): " + ("passed" if small["passed"] else
                     f"FAILED, {small['rows_in_small_classes']} row(s) in classes smaller than k"))
    changed = {c: n for c, n in checks["unchanged_columns"].items() if n}
    if changed:
        lines.append("columns changed: " + ", ".join(f"{c} ({n} rows)" for c, n in changed.items()))
    lines.append(f"report: {report['report']}" + (f", {report['html']}" if report.get("html") else ""))
    logs.say("\n".join(lines))
