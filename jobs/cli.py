"""The ``microagg`` command line."""

import argparse
import atexit
import logging
import os
import signal
import sys
import threading

from . import evaluate, generate, logs
from . import run as jobrun
from .exit_codes import (EXIT_CLUSTER, EXIT_INPUT, EXIT_STORAGE, HungUp, Terminated, committed, interruption,
                         is_cluster_failure, is_storage_failure, what_was_written)
from .flags import RELEASE_DLD_RECORDS, add_cluster_arguments, add_csv_arguments, add_risk_arguments, csv_flags

EXIT_OK = 0
EXIT_INTERNAL = 1
HMAC_KEY_VARIABLE = "MICROAGG_HMAC_KEY"
STOP_GRACE_VARIABLE = "MICROAGG_STOP_GRACE"
STOP_GRACE = 10.0
"""Seconds a job stopped by a signal has to unwind (remove its temporary directory, shut its cluster
down) before it leaves at once (:func:`_overdue`). An interrupted job unwinds in a second or two; one
whose task is blocked in a read or write that never returns (a hung network filesystem) waited for
it in the cluster's shutdown, and then in the interpreter's exit, 30 s or for ever: past a
scheduler's grace period, which ends it with SIGKILL (Kubernetes' and Slurm's are 30 s by default).
``$MICROAGG_STOP_GRACE`` sets it."""


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
    add_csv_arguments(p)
    p.add_argument("--allow-rows-in-quotes", action="store_true",
                   help="a CSV input: release quoted values over several lines even if their lines read as whole "
                        "rows of the file (refused by default: the sign of a quote left open, which hides the "
                        "rows up to the next quote)")
    p.add_argument("--method", default="mdav",
                   help="microaggregation method (see `microagg methods`); default mdav. pcp, zscore and "
                        "univariate are sequence methods: one global ordering, then the exact optimal (or, "
                        "univariate fixed, run-of-k) contiguous partition along it, distributed without blocks. "
                        "mic1d (Mic1D-k): every QI value in one sorted vector, runs of k values normalized "
                        "twice and released as their means (a constant QI is released as it is, outside the "
                        "vector); k counts values, records are not k-anonymous (the "
                        "report gives the real anonymity k')")
    p.add_argument("--qi", default=None, metavar="COL,COL,...",
                   help="quasi-identifier columns; default (without --qi): every numeric column not named in "
                        "--identifiers, --weights or --strata")
    p.add_argument("--identifiers", default="", metavar="COL,...", help="direct identifiers, dropped from the release")
    p.add_argument("--aggregate", default="mean", choices=("mean", "median", "trimmed"),
                   help="the centroid that replaces a group's values (default mean); trimmed: the mean of "
                        "the central 60%% of the group's weight")
    p.add_argument("--blocks", default=None, metavar="A,B,C;D,E,F",
                   help="attribute blocks: each block of QI columns is microaggregated on its own, as "
                        "statistical agencies do; k-anonymity then holds per block (the report gives the real "
                        "anonymity k' of the whole record and of every pair and triple of blocks)")
    p.add_argument("--strata", default=None, metavar="COL,...",
                   help="microaggregate separately inside each stratum (each distinct combination of "
                        "these columns' values); every group lies inside one stratum")
    p.add_argument("--small-strata", default="error", choices=("error", "merge"),
                   help="a stratum with fewer than k rows: an error naming it (default), or merge it into "
                        "the stratum with the nearest QI means (recorded in the report)")
    p.add_argument("--missing", default="error", choices=("error", "centroid"),
                   help="a missing (NaN) quasi-identifier value: an error naming the column and the count "
                        "(default), or centroid: MDAV measures distances over each record's observed "
                        "coordinates (rescaled to the full dimension) and the value is released as its "
                        "group's centroid; the report counts the imputed cells per column")
    p.add_argument("--weights", default=None, metavar="COL",
                   help="survey weights (a numeric column, finite and > 0) weighting the aggregate; kept unchanged")
    p.add_argument("--noise", default="none", choices=("none", "laplace"),
                   help="laplace: add Laplace noise to each released group value, per attribute, of scale "
                        "sensitivity/epsilon with sensitivity = (group's extent in the attribute)/k (the "
                        "optimal-noise univariate microaggregation paper, section III); one draw per group "
                        "and attribute, reproducible from --seed, so every group keeps one tuple")
    p.add_argument("--epsilon", type=float, default=None, metavar="EPS",
                   help="privacy budget of --noise laplace (> 0; smaller = more noise)")
    p.add_argument("--release-where", default=None, metavar="CONDITION",
                   help='release only the rows whose released QI values meet CONDITION, e.g. '
                        '"AGE >= 40 and AGE <= 50" (quasi-identifier columns only: whole groups are kept)')
    p.add_argument("--report", default=None, metavar="PATH",
                   help="where to write the JSON report (default OUTPUT/_report.json); not an input file, nor "
                        "inside the input, nor OUTPUT; inside OUTPUT only a file directly in it named _*")
    p.add_argument("--html", action=argparse.BooleanOptionalAction, default=True,
                   help="also write the report as one self-contained HTML page with plots of the original and "
                        "released data (default on): OUTPUT/_report.html, or beside --report PATH (suffix .html). "
                        "It holds aggregates of the original data (histograms, correlations): handle it as the "
                        "original, not as part of the release")
    p.add_argument("--evaluate", action=argparse.BooleanOptionalAction, default=None,
                   help="before the commit, evaluate the written release against the input as `microagg evaluate` "
                        "does (disclosure risk DLD and ID, real anonymity k', the IL family, checks): the report's "
                        "`evaluation` and the page's verdict line. On by default, except with --release-where "
                        "(rows no longer pair by position) or --missing centroid; --no-evaluate skips it (it "
                        "takes longer than the anonymization: BENCHMARKS.md)")
    add_risk_arguments(p, "evaluation: ", RELEASE_DLD_RECORDS)
    p.add_argument("--rows-per-file", type=int, default=None,
                   help="rows per output Parquet file (default 250,000: a file is one task of the write, and "
                        "its memory grows with it); a value that would write more than 100,000 files is refused")
    p.add_argument("--refine", default="none", metavar="NAME",
                   help="refinement applied to every block after the method (see `microagg methods`): none "
                        "(default), local (local search to a local optimum), ils (iterated local search), "
                        "tfrp2, decompose-shrink")
    p.add_argument("--stitch", default="light", choices=("fast", "light", "deep"),
                   help="how hard the groups across split planes are re-solved: light (default: one local-search "
                        "sweep per block, then a band around each plane), fast (no block sweeps, fewer candidate "
                        "groups, a narrower band between tasks: about a quarter less CPU in the block tasks, about "
                        "4.4%% more loss, above global MDAV's at 1M rows) or deep (wider bands, more sweeps, "
                        "windows also re-partitioned: lower loss, slower)")
    methods = p.add_argument_group("method and refinement options (only where the method / refinement takes them)")
    methods.add_argument("--grow", choices=("nn", "nc"), default=None,
                         help="group growth: nn (a record and its k-1 nearest; classic) or nc (add the record "
                              "nearest the group's running centroid)")
    methods.add_argument("--gamma", type=float, default=None, help="vmdav: gain factor")
    methods.add_argument("--eps", type=float, default=None,
                         help="dbm: DBSCAN radius in z-score units (default: from the k-distance distribution)")
    methods.add_argument("--univariate-grouping", default=None, choices=("fixed", "optimal"),
                         help="univariate (individual ranking, every QI on its own): runs of k in sorted order "
                              "(fixed, the last run taking the remainder) or the optimal groups of k..2k-1 "
                              "(optimal, Hansen-Mukherjee; default)")
    methods.add_argument("--remainder", default=None, choices=("separate", "merge"),
                         help="mic1d: when k does not divide the values, the last run holds the remainder "
                              "(separate, the paper; default) or the last full run takes it (merge: no value "
                              "released from fewer than k)")
    methods.add_argument("--mhm-order", default=None, choices=("mdav", "npn", "md", "cbfs"),
                         help="mhm: the record ordering (default mdav)")
    methods.add_argument("--portfolio", default=None, choices=("race", "full"),
                         help="auto, on an input split into blocks: race (default: each task's first blocks, and "
                              "every 16th, try every member; a member within 1%% of such a block's best stays in "
                              "the race, and the other blocks try only those: about a third of the time) or full "
                              "(every member on every block). An input of one block always tries every member")
    methods.add_argument("--iterations", type=int, default=None, help="ils: iterations per block (default 200)")
    methods.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                         help="ils: stop a block's search after this many seconds (the result then depends on "
                              "the machine's speed; the iteration count alone is reproducible)")
    p.add_argument("--order", default="kd", choices=("kd", "pca", "zscore"),
                   help="how records are blocked: kd (recursive median splits along each cell's first "
                        "principal direction; default), pca (slabs along the first principal component), "
                        "zscore (slabs along the sum of z-scores)")
    # blocking defaults: ReleaseOptions's (the flags are passed on only when given)
    p.add_argument("--block-size", type=int, default=None,
                   help="largest block of the split tree, solved by the method at once (default 2500, or 2k for a "
                        "k above 1250)")
    p.add_argument("--one-block-rows", type=int, default=None,
                   help="an input (or stratum) of at most this many rows is not split: solved as one block, "
                        "exactly the published method (default 5000: the CASC files)")
    p.add_argument("--blocks-per-task", type=int, default=None,
                   help="blocks solved and stitched together in one Dask task (default 32); the split planes "
                        "between tasks are stitched in a second, parallel stage")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the sample that shapes the blocks and of seeded methods and refinements (each "
                        "block's seed derives from it and the block id; 0 to 2**63-1, default 0)")
    p.add_argument("--hash-identifiers", action="store_true",
                   help="replace identifiers by their keyed HMAC-SHA256 instead of dropping them (a missing "
                        "identifier stays missing); the key is read from the environment variable "
                        "MICROAGG_HMAC_KEY (never from the command line)")
    add_cluster_arguments(p)


def _anonymize(args):
    from ..pipeline.errors import InputError
    from ..pipeline.release import ReleaseOptions, not_evaluable, run
    from .cluster import dask_client, worker_memory
    from .progress import reporting

    key = None
    if args.hash_identifiers:
        key = os.environ.get(HMAC_KEY_VARIABLE, "").encode()
        if not key:
            raise InputError(f"--hash-identifiers needs the secret key in the environment variable {HMAC_KEY_VARIABLE}")
    options = ReleaseOptions(
        k=args.k,
        method=args.method,
        quasi_identifiers=tuple(c.strip() for c in args.qi.split(",") if c.strip()) if args.qi else None,
        identifiers=tuple(c.strip() for c in args.identifiers.split(",") if c.strip()),
        aggregate=args.aggregate,
        weights=args.weights,
        strata=_strata(args.strata),
        small_strata=args.small_strata,
        attribute_blocks=tuple(tuple(c.strip() for c in b.split(",") if c.strip()) for b in args.blocks.split(";"))
        if args.blocks else (),
        refine=args.refine,
        method_options=_given(args, grow="grow", gamma="gamma", eps="eps", mhm_order="mhm_order",
                              grouping="univariate_grouping", remainder="remainder", portfolio="portfolio"),
        refine_options=_given(args, iterations="iterations", time_budget="time_budget"),
        stitch=args.stitch,
        order=args.order,
        seed=args.seed,
        hash_identifiers=args.hash_identifiers,
        noise=args.noise,
        epsilon=args.epsilon,
        release_where=args.release_where,
        missing=args.missing,
        **dict(_given(args, block_size="block_size", blocks_per_task="blocks_per_task",
                      one_block_rows="one_block_rows", rows_per_file="rows_per_file")),
    )
    csv = csv_flags(args)
    _check_anonymize(args, options)
    evaluation = None
    unpaired = not_evaluable(options)
    if args.evaluate and unpaired:
        raise InputError(f"--evaluate pairs every input row with its released row on complete QIs: it cannot evaluate "
                         f"this release ({unpaired}); evaluate it with `microagg evaluate` instead")
    if args.evaluate is not False and not unpaired:
        evaluation = {"known": [[c.strip() for c in s.split(",") if c.strip()] for s in args.known],
                      "dld_records": args.dld_records}
        if args.id_percent is not None:
            evaluation["id_percent"] = args.id_percent
    elif args.known or args.id_percent is not None:
        raise InputError("--known and --id-percent are options of the evaluation, which is off "
                         + ("(--no-evaluate)" if args.evaluate is False else f"here ({unpaired})"))
    with dask_client(args.scheduler, workers=args.workers, threads_per_worker=args.threads_per_worker,
                     memory_limit=args.memory_limit, processes=args.processes,
                     worker_timeout=args.worker_timeout) as client:
        if client is not None and client.dashboard_link:
            _say(args, f"Dask dashboard: {client.dashboard_link}")
        extra = (lambda: {"workers": worker_memory(client)}) if client is not None else None
        with reporting(client, args.quiet):
            report = run(args.input, args.output, options, args.report, key, extra, html=args.html,
                         evaluation=evaluation, csv=csv, rows_in_quotes=args.allow_rows_in_quotes,
                         text_columns=args.csv_text)
    if report["method"] == "mic1d":
        runs = (f"{report['values']} values in {report['groups']} runs of {report['min_group_size']}.."
                f"{report['max_group_size']} values" if report["groups"] else "no QI varies")
        _say(args, f"release: {report['output']} ({report['rows']} rows, {runs}, k={report['k']}, method mic1d; "
                   f"real anonymity k' {report['real_anonymity']['all']:.2f})")
        if report["constant_columns"]:
            _say(args, f"constant QIs released as they are: {', '.join(report['constant_columns'])}")
    else:
        _say(args, f"release: {report['output']} ({report['rows']} rows, {report['groups']} groups of "
                   f"{report['min_group_size']}..{report['max_group_size']} records, k={report['k']}, "
                   f"method {report['method']}, {report['blocks']} block(s))")
    if report["release_where"]:
        _say(args, f"released {report['rows_released']} of {report['rows']} rows ({report['release_where']})")
    if unpaired:
        _say(args, f"not evaluated: {unpaired}")
    if report["noise"] != "none":
        _say(args, f"noise: {report['noise']}, epsilon {report['epsilon']}")
    _say(args, f"report: {report['report']}" + (f", {report['html']}" if report["html"] else ""))
    _say(args, f"information loss: {report['information_loss']:.3f} %")
    if report.get("evaluation"):
        risk, anonymity = report["evaluation"]["disclosure_risk"], report["evaluation"]["anonymity"]
        _say(args, f"disclosure risk: {evaluate.dld_text(risk, report['rows'])}, ID {risk['id']:.3f} %; real "
                   f"anonymity k' {anonymity['k_prime']:.2f}; score {report['evaluation']['score']:.3f}")
    return EXIT_OK


def _strata(value):
    """``--strata``'s columns (none without the flag); a value that names none is refused (it was taken
    for no strata, silently)."""
    from ..pipeline.errors import InputError

    if value is None:
        return ()
    names = tuple(c.strip() for c in value.split(",") if c.strip())
    if not names:
        raise InputError(f"--strata {value!r} names no column; omit --strata to solve the input as one")
    return names


def _check_anonymize(args, options):
    """The checks of ``anonymize``'s flags that need no data (before a cluster starts or the input is
    read): an empty ``--qi``, the seed's range, the method's and refinement's option values, and the
    report paths (not an input file, not inside the input, not the release directory, not one path
    twice)."""
    from ..pipeline.errors import InputError
    from ..pipeline.release import html_path
    from ..pipeline.validation import check_method_options, check_seed, report_path_problems

    if args.qi is not None and not options.quasi_identifiers:
        raise InputError(f"--qi {args.qi!r} names no column; omit --qi for the default (every numeric column not "
                         f"named elsewhere)")
    check_seed(args.seed)
    check_method_options(options.method, options.method_options, options.refine, options.refine_options)
    if args.report is not None:
        reports = [("--report", args.report)]
        if args.html:
            reports.append(("--html (the page beside --report)", html_path(args.output, args.report)))
        problems = report_path_problems([args.input], args.output, reports)
        if problems:
            raise InputError("; ".join(problems))


def _given(args, **names):
    """``(option, value)`` pairs of the flags the user gave (sorted), for the method or refinement."""
    return tuple(sorted((option, getattr(args, attr)) for option, attr in names.items()
                        if getattr(args, attr) is not None))


def _methods(args):
    from ..pipeline.methods import METHODS, REFINERS

    width = max(len(name) for name in [*METHODS, *REFINERS])

    def show(entries):
        for m in entries.values():
            options = ", ".join(f"{name}={default}" for name, default in m.options.items())
            print(f"{m.name:<{width}}  {m.summary}" + (f" (options: {options})" if options else ""))
            if m.reference:
                print(f"{'':<{width}}  [{m.reference}]")

    print("methods (--method):")
    show(METHODS)
    print("\nrefinements (--refine):")
    show(REFINERS)
    return EXIT_OK


def _say(args, text):
    if not args.quiet:
        logs.say(text)


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too), whose usage errors are one JSON ``failed`` event on
    stderr when the command line asks for ``--log-format json`` (argparse's usage text otherwise);
    exit code 2 either way."""

    json_errors = False

    def error(self, message):
        if not _Parser.json_errors:
            super().error(message)
        words = self.prog.split()
        command = words[1] if len(words) > 1 else None
        logs.emit_failed(command, 2, "ArgumentError", f"{self.prog}: {message} (see {self.prog} --help)")
        self.exit(2)


def _asks_for_json(argv):
    """True if the global flags of ``argv`` (before the command) ask for ``--log-format json``, as
    argparse reads them (``--log-format json``, ``--log-format=json``, an unambiguous prefix)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for i, token in enumerate(argv):
        if not token.startswith("-"):
            return False  # the command: global flags come before it
        name, _, value = token.partition("=")
        if len(name) > 2 and "--log-format".startswith(name):
            value = value if "=" in token else (argv[i + 1] if i + 1 < len(argv) else "")
            if value == "json":
                return True
    return False


def build_parser():
    parser = _Parser(prog="microagg", description="Scalable microaggregation on Dask and Numba.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    parser.add_argument("--quiet", action="store_true", help="print nothing on success")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    logs.add_argument(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_anonymize(sub)
    sub.add_parser("methods", help="list the available methods with the paper each comes from")
    generate.add_parser(sub)
    evaluate.add_parser(sub)
    jobrun.add_parser(sub)
    return parser


COMMANDS = {"anonymize": _anonymize, "methods": _methods, "generate": generate.run, "evaluate": evaluate.run,
            "run": jobrun.run, "validate": jobrun.validate}


def main(argv=None):
    parser = build_parser()
    _Parser.json_errors = _asks_for_json(argv)
    try:
        args = parser.parse_args(argv)
    finally:
        _Parser.json_errors = False
    if not args.debug:
        # Dask's own INFO chatter (scheduler, nannies, shuffles) is not for a job's console; the
        # environment variable reaches the worker processes too.
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
        import dask

        dask.config.refresh()
    level = logging.DEBUG if args.debug else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.setLevel(level)  # the progress display listens at INFO; the console shows `level` only
    logs.setup(args.log_format, level)
    if args.version:
        from .. import __version__

        print(__version__)
        return EXIT_OK
    if args.command is None:
        parser.print_help()
        return 2
    from .cluster import use_system_allocator
    from ..pipeline import interrupts
    from ..pipeline.errors import MicroaggError

    use_system_allocator()

    previous = _on_signals()
    _COMMAND["args"] = args
    _UNWINDING.update(timer=None, reported=False, grace=STOP_GRACE)
    try:
        _UNWINDING["grace"] = _stop_grace()
        return logs.finished(args, COMMANDS[args.command](args))
    except MicroaggError as exc:
        written = "" if getattr(exc, "says_what_was_written", True) else f" {_written()}"
        return logs.failed(args, exc, exc.exit_code, f"microagg: error: {exc}{written}")
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM (Terminated), SIGHUP (HungUp)
        return _interrupted(args, exc)
    except Exception as exc:  # an unexpected failure: still one paragraph unless --debug
        if interrupts.requested() is not None:
            # a signal's exception that became another on its way out: a signal arriving while the main
            # thread runs a Numba kernel has its handler run as the kernel's result is boxed, inside
            # Numba's call back into Python, and Numba raises SystemError ("returned a result with an
            # exception set"); that exited 1, an internal error
            return _interrupted(args, interrupts.requested()())
        if is_cluster_failure(exc):  # workers lost beyond the retries, the scheduler gone (jobs/exit_codes.py)
            return logs.failed(args, exc, EXIT_CLUSTER, f"microagg: error: the Dask cluster failed "
                                                        f"({type(exc).__name__}): {exc}. {_written()}")
        unseen = _unseen_by_workers(exc)
        if unseen:
            return logs.failed(args, exc, EXIT_INPUT, f"microagg: error: a Dask worker cannot find {unseen!r}, which "
                                                      f"this job sees: the workers must see the input and the output "
                                                      f"at the same paths as the job (a shared filesystem; or an "
                                                      f"object store URL for the input). {_written()}")
        gone = _vanished(exc)
        if gone:
            return logs.failed(args, exc, EXIT_INPUT, f"microagg: error: {gone!r} no longer exists: a file was removed "
                                                      f"while the job read it (the input changed during the job?). "
                                                      f"{_written()}")
        if is_storage_failure(exc):  # a full, read-only or forbidden filesystem (jobs/exit_codes.py)
            return logs.failed(args, exc, EXIT_STORAGE, f"microagg: error: a filesystem refused a write or read: "
                                                        f"{exc}. {_written()}")
        return logs.failed(args, exc, EXIT_INTERNAL, f"microagg: internal error ({type(exc).__name__}): {exc}. "
                                                     f"Re-run with --debug for the traceback.")
    finally:
        _reported()  # the timer of a signal's unwinding, if any, is not needed any more
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        interrupts.clear()
        committed(None)


def _interrupted(args, exc):
    """Report the interruption ``exc`` (a ``KeyboardInterrupt``: Ctrl-C, :class:`Terminated`,
    :class:`HungUp`) that ended a command; returns its exit code."""
    code, word, cause = interruption(exc)
    if not _reported():  # the job overran its grace: the timer's thread has reported it, and is leaving
        return code
    return logs.failed(args, exc, code, f"microagg: {word}{cause}; {what_was_written()}")


def _written():
    """The end of a failure's sentence: "Nothing was written.", or where the committed release is."""
    text = what_was_written()
    return f"{text[0].upper()}{text[1:]}."


def _unseen_by_workers(exc):
    """The path a task could not find though it exists here (workers of a remote scheduler that do not
    share the job's filesystem), or None."""
    name = getattr(exc, "filename", None) if isinstance(exc, FileNotFoundError) else None
    if not name or os.path.exists(name):
        return name
    folder = os.path.dirname(name)  # a file of the release's temporary directory (removed since): its parent
    if ".microagg-tmp-" in os.path.basename(folder) and os.path.isdir(os.path.dirname(folder)):
        return os.path.dirname(folder)
    return None


def _vanished(exc):
    """The file a task could not find because it is gone here too (removed while the job ran), or None."""
    name = getattr(exc, "filename", None) if isinstance(exc, FileNotFoundError) else None
    if not name or os.path.exists(name) or _unseen_by_workers(exc):
        return None
    return name


def console():
    """The ``microagg`` command: :func:`main`, then a hard exit.

    When ``main`` returns, the job is over: its release committed or discarded, its files closed, its
    cluster shut down, its temporary directory removed. What is left is the interpreter tearing down
    its modules, which takes 0.45-0.6 s with Dask, pandas, Numba and matplotlib loaded (measured: a
    1M-row job takes about 10 s in all). So the command runs the exit handlers, flushes its streams
    and leaves with ``os._exit``, as mypy's command does. (``python -m microagg.jobs.cli`` and library
    callers of ``main`` exit normally.)
    """
    code = main()
    # the job is over: a signal now (Ctrl-C pressed again) ends the exit handlers, quietly
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name) and signal.getsignal(getattr(signal, name)) is not signal.SIG_IGN:
            signal.signal(getattr(signal, name), lambda signum, frame: _leave(code))
    atexit._run_exitfuncs()  # what the interpreter would run at exit (logging's flush among them)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            code = code or EXIT_INTERNAL
    os._exit(code)


def _stop(exc_type):
    """A signal handler raising ``exc_type`` in the main thread, and recording it: Python drops an
    exception a handler raises while the main thread runs a finalizer, and the pipeline then raises
    it again at its next stage boundary or commit (pipeline/interrupts.py)."""
    from ..pipeline import interrupts

    def handler(signum, frame):
        if interrupts.requested() is not None:  # again, while the first one's exception unwinds the job
            _stop_now(exc_type())
        interrupts.request(exc_type)
        _watch_unwinding(exc_type)
        raise exc_type()

    return handler


_COMMAND = {}
"""The running command's arguments (``args``), for :func:`_stop_now`'s message."""

_UNWINDING = {"timer": None, "reported": False, "grace": STOP_GRACE}
"""The job stopped by a signal: the timer of :func:`_overdue`, whether its end has been reported (by
the command or by the timer: one ``failed`` line whichever comes first), the grace in seconds."""
_REPORT_LOCK = threading.RLock()  # re-entrant: a signal's handler runs in the main thread, maybe while it holds it


def _stop_grace():
    """``$MICROAGG_STOP_GRACE`` as seconds (:data:`STOP_GRACE` if unset); a usage error if it is not a
    number of seconds, 0 or more."""
    text = os.environ.get(STOP_GRACE_VARIABLE)
    if text is None or not text.strip():
        return STOP_GRACE
    try:
        grace = float(text)
    except ValueError:
        grace = -1.0
    if not 0 <= grace < float("inf"):
        from ..pipeline.errors import InputError

        raise InputError(f"{STOP_GRACE_VARIABLE}={text!r}: not a number of seconds (0 or more): the time a job "
                         f"stopped by a signal has to unwind. Nothing was written.")
    return grace


def _watch_unwinding(exc_type):
    """Start :func:`_overdue`'s timer (once): the job's main thread is about to unwind."""
    with _REPORT_LOCK:
        if _UNWINDING["timer"] is None and not _UNWINDING["reported"]:
            timer = threading.Timer(_UNWINDING["grace"], _overdue, (exc_type,))
            timer.daemon = True  # never what keeps the process alive
            timer.name = "microagg-stop-grace"
            _UNWINDING["timer"] = timer
            timer.start()


def _overdue(exc_type):
    """The job has not ended :data:`STOP_GRACE` seconds after the signal that stopped it: a thread is
    blocked (a task in a read that never returns, which the cluster's shutdown waits for). Report it
    as the signal's failure, and leave at once. No release can be partial (a release is committed by a
    rename, and no commit follows a signal); a temporary directory left beside the output is removed
    by the next run."""
    exc = exc_type()
    _, word, cause = interruption(exc)
    _report_and_leave(exc, f"microagg: {word}{cause}: still unwinding {_UNWINDING['grace']:g} s later (a task "
                           f"blocked in a read or write?): stopped without waiting for it; {what_was_written()}",
                      stopped_after_grace=_UNWINDING["grace"])


def _report_and_leave(exc, text, **fields):
    """Report the interruption ``exc`` with ``text`` (:func:`jobs.logs.failed`), unless the
    command's end is reported already, and leave at once with its exit code."""
    code = interruption(exc)[0]
    with _REPORT_LOCK:  # one failed line, whichever thread comes first
        if not _UNWINDING["reported"]:
            _UNWINDING["reported"] = True
            logs.failed(_COMMAND.get("args"), exc, code, text, **fields)
        _leave(code)


def _reported():
    """The command's end is being reported by the main thread: :func:`_overdue` stays silent. False if
    the timer has reported it first (the process is leaving)."""
    with _REPORT_LOCK:
        if _UNWINDING["reported"]:
            return False
        _UNWINDING["reported"] = True
        if _UNWINDING["timer"] is not None:
            _UNWINDING["timer"].cancel()
        return True


def _stop_now(exc):
    """A second signal while the first one's exception unwinds the job (Ctrl-C pressed again as the
    cluster shuts down): report it and leave at once, as the user asks. Raising again interrupted
    Dask's shutdown part-way, which printed its tracebacks and then waited for its exit handlers. No
    release can be partial (a release is committed by a rename); a temporary directory left beside
    the output is removed by the next run (:func:`pipeline.io.prepare_output`)."""
    _, word, cause = interruption(exc)
    _report_and_leave(exc, f"microagg: {word} again{cause}: stopped without waiting for the cluster to shut "
                           f"down; {what_was_written()}")


def _leave(code):
    """Flush the standard streams and exit with ``code`` at once (no exit handlers, no teardown)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code)


def _on_signals():
    """Turn SIGTERM into :class:`Terminated`, SIGHUP into :class:`HungUp` and SIGINT into
    ``KeyboardInterrupt`` in the main thread, all recorded (schedulers stop a job with SIGTERM before
    they kill it; SIGHUP is the job's terminal closing, which killed the job where it stood; SIGINT is
    Ctrl-C, or the worker watch of jobs/cluster.py). SIGINT and SIGHUP keep an ignoring handler (a job
    started in the background of a shell without job control; ``nohup``). Returns the previous
    handlers, to restore; none where no handler can be set (the CLI called from a library's worker
    thread)."""
    from ..pipeline import interrupts

    interrupts.clear()
    previous = {}
    try:
        previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, _stop(Terminated))
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, _stop(KeyboardInterrupt))
        hangup = getattr(signal, "SIGHUP", None)  # not on Windows
        if hangup is not None and signal.getsignal(hangup) == signal.SIG_DFL:
            previous[hangup] = signal.signal(hangup, _stop(HungUp))
    except ValueError:  # not the main thread
        pass
    return previous


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
