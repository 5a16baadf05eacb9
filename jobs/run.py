"""``microagg run JOB.toml`` and ``microagg validate JOB.toml``: scheduled exports from job files.

The job file format is :mod:`jobs.jobfile`'s; exit codes are :mod:`jobs.exit_codes`'; ``--log-format
json`` (:mod:`jobs.logs`) gives a scheduler one JSON object per line, the stages and the outcome.

``run`` checks the whole job before anything is created: the job file, the options by the pipeline's
validators and the input's schema (metadata only); then creates the missing parent directories of the
release (the ``{date}`` directory, say), starts or connects to the cluster, writes the release atomically
(a re-run of the same job and date replaces its own release: never two, never half of one; with
``[report] html``, its HTML page inside), then, if asked, evaluates it and adds the evaluation's measures
to the page. ``validate`` does the checks and nothing else.
"""

import logging
import os
import time
from contextlib import contextmanager

from . import exit_codes, logs
from .evaluate import dld_text

EXIT_OK = 0

log = logging.getLogger("microagg.jobs.run")


def add_parser(sub):
    # no pipeline import here: building the parser must stay cheap for every command
    p = sub.add_parser(
        "run",
        help="run a job file (TOML): input, release, anonymize options, cluster, reports, evaluation",
        description=(
            "Run the export a job file declares (see the README's \"Job files\"). Everything is checked before "
            "anything is written; the release is committed atomically and a re-run of the same job and date "
            f"replaces it. Exit codes: {exit_codes.SUMMARY}."
        ),
    )
    p.add_argument("job", metavar="JOB.toml", help="the job file; its relative paths are relative to its directory")
    p.add_argument("--date", default=None, metavar="YYYY-MM-DD",
                   help="the {date} of the paths' templates (default: today's date in UTC)")
    v = sub.add_parser(
        "validate",
        help="check a job file without running it (exit 0 and a summary, or 2 and every error)",
        description=(
            "Check a job file: its sections, keys and values, the options by the pipeline's own validators and, "
            "if the input is there, its columns and dtypes (schema only, no data read). Nothing is created."
        ),
    )
    v.add_argument("job", metavar="JOB.toml", help="the job file")
    v.add_argument("--date", default=None, metavar="YYYY-MM-DD",
                   help="the {date} of the paths' templates (default: today's date in UTC)")
    return p


@contextmanager
def _stage(name):
    """A stage of the job, logged (and in JSON logs: event stage, stage, status, seconds)."""
    from ..pipeline import interrupts

    log.info("job stage %s ...", name, extra={"fields": {"event": "stage", "stage": name, "status": "started"}})
    start = time.perf_counter()
    interrupts.check()  # a signal whose exception Python dropped (pipeline/interrupts.py)
    yield
    interrupts.check()
    seconds = time.perf_counter() - start
    log.info("job stage %s done in %.2f s", name, seconds,
             extra={"fields": {"event": "stage", "stage": name, "status": "done", "seconds": round(seconds, 4)}})


def _check(job, require_input):
    """Every check that reads no data: ``(qi or None, columns or None)``. The input's schema is checked
    when the input is there (``require_input``: it must be)."""
    from . import jobfile

    qi = jobfile.check_options(job)
    if job.evaluate is not None and not jobfile.evaluation_available():
        raise jobfile.JobFileError(job.file, ["[evaluate] evaluate is not available in this installation "
                                              "(no microagg.pipeline.evaluate); set run = false"])
    columns = None
    if require_input or jobfile.input_exists(job.input):
        qi, _, columns = jobfile.check_input(job)
    return qi, columns


def validate(args):
    from . import jobfile

    job = jobfile.load(args.job, args.date)
    qi, columns = _check(job, require_input=False)
    options = job.options
    what = (f"{len(qi)} quasi-identifier(s)" if qi is not None else "every numeric column as quasi-identifiers")
    parts = [f"k={options.k}", f"method {options.method}", what, f"scheduler {job.cluster['scheduler']}"]
    if job.evaluate is not None:
        parts.append("evaluate after")
    checked = (f"input schema checked ({len(columns)} columns)" if columns is not None else
               "input not there yet: its columns were not checked")
    logs.record_outcome(job=job.file, date=job.date, input=job.input, output=job.output)
    if not args.quiet:
        print(f"{job.file}: ok: {job.input} -> {job.output} ({', '.join(parts)}); {checked}", flush=True)
    return EXIT_OK


@contextmanager
def _connect_timeout(seconds):
    """``jobs.cluster.dask_client`` waits ``CONNECT_TIMEOUT`` for a scheduler address; a job file sets it
    (``[cluster] connect_timeout``) for the duration of the job."""
    from . import cluster

    before = cluster.CONNECT_TIMEOUT
    cluster.CONNECT_TIMEOUT = f"{seconds:g}s"
    try:
        yield
    finally:
        cluster.CONNECT_TIMEOUT = before


def _identifier_key(job):
    from ..pipeline.errors import InputError
    from .cli import HMAC_KEY_VARIABLE

    if not job.options.hash_identifiers:
        return None
    key = os.environ.get(HMAC_KEY_VARIABLE, "").encode()
    if not key:
        raise InputError(f"[anonymize] hash_identifiers needs the secret key in the environment variable "
                         f"{HMAC_KEY_VARIABLE}")
    return key


def run(args):
    from ..pipeline import release
    from . import jobfile, logs
    from .cluster import dask_client, worker_memory
    from .progress import reporting

    job = jobfile.load(args.job, args.date)
    with _stage("validate"):
        key = _identifier_key(job)
        _check(job, require_input=True)
    created = jobfile.make_parents(job)
    evaluation = None
    try:
        c = job.cluster
        with _connect_timeout(c["connect_timeout"]), dask_client(
                c["scheduler"], workers=c["workers"], threads_per_worker=c["threads_per_worker"],
                memory_limit=c["memory_limit"], processes=c["processes"],
                worker_timeout=c["worker_timeout"]) as client, reporting(client, args.quiet):
            if client is not None and client.dashboard_link:
                log.info("Dask dashboard: %s", client.dashboard_link)
            extra = (lambda: {"workers": worker_memory(client), "job": _job_fields(job)}) if client is not None \
                else (lambda: {"job": _job_fields(job)})
            with _stage("anonymize"):
                report = release.run(job.input, job.output, job.options, job.report, key, extra,
                                     html=job.html is not None, csv=job.csv,
                                     rows_in_quotes=job.rows_in_quotes, text_columns=job.text)
            exit_codes.committed(job.output)  # a failure from here on says where the release is
            if job.evaluate is not None:
                with _stage("evaluate"):
                    evaluation = _evaluate(job, report)
        if job.html is not None:
            with _stage("html report"):
                _html(job, report, evaluation)
    except BaseException:
        jobfile.remove_created(created)
        raise
    logs.record_outcome(job=job.file, date=job.date, output=job.output, rows=report["rows"],
                        rows_released=report.get("rows_released"), information_loss=report["information_loss"],
                        report=report["report"], html=job.html, evaluation=job.evaluation if evaluation else None)
    if not args.quiet:
        _summary(job, report, evaluation)
    return EXIT_OK


def _job_fields(job):
    return {"file": job.file, "name": job.name, "date": job.date}


def _evaluate(job, report):
    """Evaluate the written release against the input (rows pair by position) with ``pipeline.evaluate``."""
    from ..pipeline import evaluate

    ev = job.evaluate
    options = {}
    if ev["id_percent"] is not None:
        options["id_percent"] = ev["id_percent"]
    if ev["block_rows"] is not None:
        options["block_rows"] = ev["block_rows"]
    options["dld_records"] = ev["dld_records"]
    # k-anonymity of whole released QI tuples is the release's guarantee only without attribute blocks
    k = report["k"] if report.get("k_anonymity_scope") == "all quasi-identifiers" else None
    known = [list(s) for s in ev["known"]]
    return evaluate.run(job.input, job.output, list(report["quasi_identifiers"]), job.evaluation, k=k, known=known,
                        seed=job.options.seed, html=False, changed=report.get("identifiers_hashed") or (),
                        csv=job.csv, text_columns=job.text, **options)  # the job's page shows both reports


def _html(job, report, evaluation):
    """The HTML page of the release report with its data plots (from the report's ``summary``) and the
    evaluation's measures when there is one. The release wrote its page (``report["html"]``: inside
    the release, or beside ``[report] json``); it is written again at ``[report] html`` if that is
    elsewhere, and re-rendered in place after an evaluation."""
    from ..pipeline.release import EVALUATION_KEYS
    from ..pipeline.report import write_html

    page = dict(report)
    if evaluation:  # the page shows a release report's evaluation in place of its own measures
        page["evaluation"] = {name: evaluation[name] for name in EVALUATION_KEYS if name in evaluation}
    written = os.path.abspath(report["html"]) if report.get("html") else None
    targets = [job.html] if os.path.abspath(job.html) != written else []
    if evaluation and written:
        targets.append(report["html"])
    for path in targets:
        write_html(path, page, report.get("summary"))


def _summary(job, report, evaluation):
    lines = [f"job {job.name} ({job.date}): release {report['output']} ({report['rows']} rows, {report['groups']} "
             f"groups, k={report['k']}, method {report['method']}); information loss "
             f"{report['information_loss']:.3f} %",
             f"report: {report['report']}"]
    if report.get("release_where"):
        lines.append(f"released {report['rows_released']} of {report['rows']} rows ({report['release_where']})")
    if evaluation:
        risk = evaluation.get("disclosure_risk", {})
        lines.append(f"evaluation: {job.evaluation} ({dld_text(risk, report['rows'])}, ID {_fmt(risk.get('id'))} %, "
                     f"score {_fmt(evaluation.get('score'))})")
    if job.html:
        lines.append(f"html: {job.html}")
    logs.say("\n".join(lines))


def _fmt(value):
    return "n/a" if value is None else f"{value:.3f}"
