"""Job files: a scheduled export declared in TOML (``microagg run JOB.toml``, ``microagg validate JOB.toml``).

A job file names the input, the release, every option of ``microagg anonymize``, the cluster, the
reports and an optional evaluation of the release. Parsed with the standard library's ``tomllib``;
every key is checked (type, range, choice) and an unknown section or key is an error naming it, with a
"did you mean" where a known name is close. Then the options are checked by the pipeline's own
validators (:func:`pipeline.release.plan`), from the schema alone: :func:`check_options` on a
schema made of the columns the job names (nothing read), :func:`check_input` on the input's real
schema (Dask reads metadata only; no data is computed).

Sections and keys (``*``: required)::

    [input]
    path*            CSV / Parquet file, Parquet directory or glob, fsspec URL, or example:NAME
    separator, decimal, encoding, thousands   a CSV input's dialect (default ",", ".", "utf-8", none;
                     "\\t" for a tab)
    text             a CSV input's columns read as text, as written (as --csv-text)
    allow_rows_in_quotes   true: release a CSV input's quoted values whose lines read as whole rows

    [output]
    path*            the release directory (a local path); templates allowed
    rows_per_file    rows per output Parquet file (default 250000)

    [anonymize]
    k*               minimum group size, an integer >= 2
    method           a method of `microagg methods` (default "mdav"); "auto" tries every constructive one
    quasi_identifiers  list of columns (or "A,B,C"); default every numeric column not named elsewhere
    identifiers      list of direct identifiers, dropped (or hashed) (default [])
    aggregate        "mean" | "median" | "trimmed"
    weights          survey-weight column
    strata           list of columns; small_strata "error" | "merge"
    blocks           attribute blocks: [["A", "B"], ["C"]] or "A,B;C"
    missing          "error" | "centroid"
    noise            "none" | "laplace"; epsilon (> 0, with laplace)
    release_where    condition on the released QI values, e.g. "AGE >= 40"
    refine           a refinement of `microagg methods` (default "none")
    stitch           "light" | "fast" | "deep"; order "kd" | "pca" | "zscore"
    block_size, blocks_per_task, one_block_rows, sample_rows, seed   integers (seed: 0 to 2**63-1)
    hash_identifiers true: identifiers replaced by their HMAC-SHA256 under $MICROAGG_HMAC_KEY
    grow "nn"|"nc", gamma, eps, mhm_order "mdav"|"npn"|"md"|"cbfs", univariate_grouping
    "optimal"|"fixed", remainder "separate"|"merge", portfolio "race"|"full"
                                                       (method options, where the method takes them)
    iterations, time_budget                            (refinement options: ils)

    [cluster]
    scheduler        "local" (default) | "synchronous" | "tcp://HOST:PORT" (any scheme://address)
    workers, threads_per_worker, processes, memory_limit   the local cluster (as the CLI flags)
    connect_timeout  seconds to reach a scheduler address (default 10)
    worker_timeout   seconds a scheduler address may have no worker, at the start or during the job
                     (default 300)

    [report]
    json             release report (default: _report.json inside the release)
    html             true: _report.html inside the release (with the data plots; beside json if that is a
                     path); a path: written there too; false / absent: none
    evaluation       evaluation report (default: _evaluation.json inside the release)

    [evaluate]
    run              evaluate the release against the input after it is written (default true, except with
                     release_where or missing = "centroid")
    known            list of QI sets an intruder may know: [["AGI", "FICA"], ["TAXINC"]] or ["AGI,FICA"]
    id_percent       interval-disclosure width, percent of the rows, in (0, 100] (default 10)
    block_rows       original records per record-linkage block
    dld_records      masked records whose linkage is searched: a number (a deterministic sample; the DLD
                     then has a 95 % interval) or "all" (default 1000000: every record up to a million rows)

Templates, in every path (``[input] path``, ``[output] path``, ``[report]`` paths): ``{date}`` (the
``--date`` given, else today's date in UTC, ``YYYY-MM-DD``) and ``{job}`` (the job file's name without
``.toml``); ``{{`` and ``}}`` are literal braces. Relative paths are relative to the job file's
directory; fsspec URLs (``scheme://...``) and ``example:NAME`` are left as they are.

Paths: missing parent directories of the release and of report paths are created at run time, after
the job validated (and removed again if the job fails while they are still empty). A report path
inside the release must name a file directly in the release directory whose name starts with ``_``
(so Parquet readers skip it). The release must not lie inside the input directory; a report path must
not be an input file, lie inside the input, be the release directory or another report's path.
"""

import argparse
import difflib
import json
import os
import re
import string
from dataclasses import dataclass
from datetime import date as _date
from datetime import datetime, timezone

from ..pipeline.errors import InputError
from ..pipeline.validation import SEED_MAX
from .flags import RELEASE_DLD_RECORDS, WORKER_TIMEOUT, scheduler_address

TEMPLATES = ("date", "job")
DEFAULT_REPORT = "_report.json"
DEFAULT_HTML = "_report.html"
DEFAULT_EVALUATION = "_evaluation.json"
DEFAULT_CONNECT_TIMEOUT = 10.0
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class JobFileError(InputError):
    """A job file that cannot run: every problem found, one per line, each naming its ``[section] key``."""

    def __init__(self, path, errors):
        self.path = str(path)
        self.errors = list(errors)
        count = f"{len(self.errors)} error(s)" if len(self.errors) > 1 else "error"
        super().__init__(f"job file {self.path}: {count}:\n  " + "\n  ".join(self.errors))


class _Bad(Exception):
    """A value that does not fit its key: the message is what the key must be; ``hint`` a "did you mean"."""

    def __init__(self, message, hint=""):
        super().__init__(message)
        self.hint = hint


# --- value checkers: each returns the normalized value or raises _Bad("must be ...") ---------------------

def _show(value):
    """A value as the job file spells it (TOML-like: strings in double quotes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _integer(minimum=None, maximum=None, shown=None):
    """An integer in ``minimum..maximum`` (``shown``: the range as the message says it)."""
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum) \
                or (maximum is not None and value > maximum):
            if shown:
                raise _Bad(f"must be an integer from {shown}")
            raise _Bad("must be an integer" + (f" >= {minimum}" if minimum is not None else ""))
        return value
    return check


def _number(minimum=None, maximum=None, strict=True):
    def check(value):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
            and value not in (float("inf"), float("-inf"))
        if ok and minimum is not None:
            ok = value > minimum if strict else value >= minimum
        if ok and maximum is not None:
            ok = value <= maximum
        if not ok:
            bounds = []
            if minimum is not None:
                bounds.append(f"{'>' if strict else '>='} {minimum:g}")
            if maximum is not None:
                bounds.append(f"<= {maximum:g}")
            raise _Bad("must be a number" + (" " + " and ".join(bounds) if bounds else ""))
        return float(value)
    return check


def _records(value):
    """A positive number of records, or ``"all"`` (None)."""
    if value == "all":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Bad('must be a positive number of records or "all"')
    return value


def _string(value):
    if not isinstance(value, str) or not value.strip():
        raise _Bad("must be a non-empty string")
    return value


def _boolean(value):
    if not isinstance(value, bool):
        raise _Bad("must be true or false")
    return value


def _choice(values):
    """One of ``values`` (a sequence, or a callable returning one: the method catalogue is read when
    the job is checked, so a method registered at run time is known)."""
    def check(value):
        choices = list(values() if callable(values) else values)
        if not isinstance(value, str) or value not in choices:
            hint = _did_you_mean(value, choices) if isinstance(value, str) else ""
            raise _Bad(f"must be one of {', '.join(map(_show, choices))}", hint)
        return value
    return check


def _names(allow_empty=True):
    """Column names: a list of strings or one comma-separated string; returned as a tuple."""
    def check(value):
        if isinstance(value, str):
            value = [v for v in value.split(",")]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _Bad('must be a list of column names, e.g. ["A", "B"] (or "A,B")')
        names = tuple(v.strip() for v in value if v.strip())
        if not names and not allow_empty:
            raise _Bad("must name at least one column")
        return names
    return check


def _name_sets(value):
    """Sets of column names: ``[["A", "B"], ["C"]]``, ``["A,B", "C"]`` or ``"A,B;C"``; a tuple of tuples."""
    if isinstance(value, str):
        value = value.split(";")
    if not isinstance(value, list) or not value:
        raise _Bad('must be a list of column lists, e.g. [["A", "B"], ["C"]] (or "A,B;C")')
    sets = []
    for item in value:
        if isinstance(item, str):
            item = item.split(",")
        if not isinstance(item, list) or not all(isinstance(v, str) for v in item):
            raise _Bad('must be a list of column lists, e.g. [["A", "B"], ["C"]] (or "A,B;C")')
        names = tuple(v.strip() for v in item if v.strip())
        if not names:
            raise _Bad("must not hold an empty set of columns")
        sets.append(names)
    return tuple(sets)


def _scheduler(value):
    try:
        return scheduler_address(value)
    except argparse.ArgumentTypeError:
        raise _Bad('must be "local", "synchronous" or a scheduler address such as "tcp://HOST:8786"') from None


def _memory(value):
    from .cluster import MEMORY_LIMIT_FORM, memory_limit_problem

    if not (isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))) or value == "":
        raise _Bad(MEMORY_LIMIT_FORM)
    problem = memory_limit_problem(value)
    if problem:
        raise _Bad(problem)
    return value


def _seconds(value):
    from dask.utils import parse_timedelta

    bad = _Bad('must be a number of seconds > 0 or a duration such as "5s"')
    if isinstance(value, str):
        try:
            value = parse_timedelta(value, default="seconds")
        except (ValueError, KeyError, TypeError):
            raise bad from None
    try:
        return _number(0)(value)
    except _Bad:
        raise bad from None


def _path_or_flag(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip():
        return value
    raise _Bad("must be true, false or a path")


def _methods():
    from ..pipeline.methods import METHODS

    return list(METHODS)


def _refiners():
    from ..pipeline.methods import REFINERS

    return list(REFINERS)


def _pipeline_choices(module, name):
    def values():
        import importlib

        return getattr(importlib.import_module(f"microagg.pipeline.{module}"), name)
    return values


@dataclass(frozen=True)
class Key:
    check: object
    required: bool = False
    path: bool = False          # templates and relative-path resolution apply


SCHEMA = {
    "input": {"path": Key(_string, required=True, path=True), "separator": Key(_string), "decimal": Key(_string),
              "encoding": Key(_string), "thousands": Key(_string), "allow_rows_in_quotes": Key(_boolean),
              "text": Key(_names(allow_empty=False))},
    "output": {
        "path": Key(_string, required=True, path=True),
        "rows_per_file": Key(_integer(1)),
    },
    "anonymize": {
        "k": Key(_integer(2), required=True),
        "method": Key(_choice(_methods)),
        "quasi_identifiers": Key(_names(allow_empty=False)),
        "identifiers": Key(_names()),
        "aggregate": Key(_choice(_pipeline_choices("validation", "AGGREGATES"))),
        "weights": Key(_string),
        "strata": Key(_names(allow_empty=False)),
        "small_strata": Key(_choice(_pipeline_choices("strata", "SMALL_STRATA"))),
        "blocks": Key(_name_sets),
        "missing": Key(_choice(_pipeline_choices("validation", "MISSING"))),
        "noise": Key(_choice(_pipeline_choices("validation", "NOISES"))),
        "epsilon": Key(_number(0)),
        "release_where": Key(_string),
        "refine": Key(_choice(_refiners)),
        "stitch": Key(_choice(_pipeline_choices("stitch", "STITCHING"))),
        "order": Key(_choice(_pipeline_choices("blocking", "ORDERS"))),
        "block_size": Key(_integer(1)),
        "blocks_per_task": Key(_integer(1)),
        "one_block_rows": Key(_integer(0)),
        "sample_rows": Key(_integer(1)),
        "seed": Key(_integer(0, SEED_MAX, f"0 to 2**63-1 ({SEED_MAX})")),
        "hash_identifiers": Key(_boolean),
        # method options (the method must take them: checked by the pipeline's Solver)
        "grow": Key(_choice(("nn", "nc"))),
        "gamma": Key(_number()),
        "eps": Key(_number(0)),
        "mhm_order": Key(_choice(("mdav", "npn", "md", "cbfs"))),
        "univariate_grouping": Key(_choice(("optimal", "fixed"))),
        "remainder": Key(_choice(("separate", "merge"))),
        "portfolio": Key(_choice(_pipeline_choices("methods", "PORTFOLIOS"))),
        # refinement options
        "iterations": Key(_integer(1)),
        "time_budget": Key(_number(0)),
    },
    "cluster": {
        "scheduler": Key(_scheduler),
        "workers": Key(_integer(1)),
        "threads_per_worker": Key(_integer(1)),
        "processes": Key(_boolean),
        "memory_limit": Key(_memory),
        "connect_timeout": Key(_seconds),
        "worker_timeout": Key(_seconds),
    },
    "report": {
        "json": Key(_string, path=True),
        "html": Key(_path_or_flag, path=True),
        "evaluation": Key(_string, path=True),
    },
    "evaluate": {
        "run": Key(_boolean),
        "known": Key(_name_sets),
        "id_percent": Key(_number(0, 100)),
        "block_rows": Key(_integer(1)),
        "dld_records": Key(_records),
    },
}
"""Every section and key of a job file, with its checker."""

REQUIRED_SECTIONS = ("input", "output", "anonymize")

# method / refinement option keys -> the option names of pipeline.methods
METHOD_OPTIONS = {"grow": "grow", "gamma": "gamma", "eps": "eps", "mhm_order": "mhm_order",
                  "univariate_grouping": "grouping", "remainder": "remainder",
                  "portfolio": "portfolio"}
REFINE_OPTIONS = {"iterations": "iterations", "time_budget": "time_budget"}

# names users reach for (the CLI's flags, ReleaseOptions' fields) -> the job file's key
_ALIASES = {"qi": "quasi_identifiers", "attribute_blocks": "blocks", "grouping": "univariate_grouping",
            "method_options": "the method option keys (grow, gamma, eps, ...) directly in [anonymize]",
            "refine_options": "iterations / time_budget directly in [anonymize]"}


@dataclass(frozen=True)
class Job:
    """A checked job file, templates expanded and paths resolved."""

    file: str                  # the job file (absolute)
    name: str                  # its stem: the {job} template
    date: str                  # the {date} template
    input: str
    csv: dict                  # the input's CSV dialect (pipeline.io.csv_dialect; {}: the default)
    output: str                # absolute local path of the release
    options: object            # pipeline.release.ReleaseOptions
    cluster: dict              # dask_client's arguments, plus connect_timeout (seconds)
    report: str | None         # release report path; None: _report.json inside the release
    html: str | None           # HTML report path, or None
    evaluation: str | None     # evaluation report path (when evaluating)
    evaluate: dict | None      # {"known", "id_percent", "block_rows", "dld_records"} when evaluating after the release
    rows_in_quotes: bool = False  # [input] allow_rows_in_quotes (pipeline.release.run)
    text: tuple = ()           # [input] text: a CSV input's columns read as text (pipeline.release.run)


# --- parsing ------------------------------------------------------------------------------------------

def job_date(text=None):
    """The ``{date}`` of a run: ``text`` (``YYYY-MM-DD``, checked) or today's date in UTC."""
    if text is None:
        return datetime.now(timezone.utc).date().isoformat()
    try:
        if not _DATE.match(text):
            raise ValueError
        return _date.fromisoformat(text).isoformat()
    except ValueError:
        raise InputError(f"--date must be a date YYYY-MM-DD, got {text!r}") from None


def _did_you_mean(name, choices):
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _unknown_key(section, key):
    known = SCHEMA[section]
    dashed = key.replace("-", "_").lower()
    if dashed in known and dashed != key:
        return f'[{section}] unknown key "{key}" (did you mean "{dashed}"?)'
    if key in _ALIASES:
        target = _ALIASES[key]
        return f'[{section}] unknown key "{key}" (did you mean {_show(target) if target in known else target}?)'
    elsewhere = [s for s, keys in SCHEMA.items() if s != section and (key in keys or dashed in keys)]
    hint = f" (it belongs in [{elsewhere[0]}])" if elsewhere else _did_you_mean(key, known)
    return f'[{section}] unknown key "{key}"' + (hint or f'; known keys: {", ".join(known)}')


def parse(text):
    """``(values, errors)``: the checked values per section and key of a job file's text."""
    import tomllib

    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return {}, [f"not valid TOML: {exc}"]
    values, errors = {}, []
    for section, content in document.items():
        if section not in SCHEMA:
            if not isinstance(content, dict):
                owners = [s for s, keys in SCHEMA.items() if section in keys]
                errors.append(f'top-level key "{section}": keys belong in a section'
                              + (f" ([{owners[0]}] {section})" if owners else ", e.g. [anonymize]"))
            else:
                close = difflib.get_close_matches(section, list(SCHEMA), n=1, cutoff=0.6)
                hint = f" (did you mean [{close[0]}]?)" if close else ""
                known = ", ".join(f"[{s}]" for s in SCHEMA)
                errors.append(f"unknown section [{section}]{hint}; known sections: {known}")
            continue
        if not isinstance(content, dict):
            errors.append(f"[{section}] must be a section (a table), got {_show(content)}")
            continue
        values[section] = {}
        for key, value in content.items():
            if key not in SCHEMA[section]:
                errors.append(_unknown_key(section, key))
                continue
            try:
                values[section][key] = SCHEMA[section][key].check(value)
            except _Bad as bad:
                errors.append(f"[{section}] {key}: {bad}, got {_show(value)}{bad.hint}")
    for section in REQUIRED_SECTIONS:
        if section not in document:
            required = [k for k, key in SCHEMA[section].items() if key.required]
            errors.append(f"[{section}]: missing section (it needs {', '.join(required)})")
    for section, content in values.items():
        for key, spec in SCHEMA[section].items():
            if spec.required and key not in content and key not in document.get(section, {}):
                errors.append(f"[{section}] {key}: missing (required)")
    return values, errors


def expand(text, values):
    """``text`` with its ``{name}`` templates replaced by ``values``; raises _Bad naming the template."""
    out = []
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError:
        raise _Bad("has an unbalanced brace (write {{ and }} for literal braces)") from None
    for literal, name, spec, conversion in parts:
        out.append(literal)
        if name is None:
            continue
        if name not in values or spec or conversion:
            written = name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            raise _Bad(f"unknown template {{{written}}}; templates: {', '.join('{' + t + '}' for t in TEMPLATES)}")
        out.append(values[name])
    return "".join(out)


def _is_url(path):
    return path.startswith("example:") or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", path) is not None


def resolve(path, base):
    """A local path relative to ``base`` (the job file's directory); URLs and examples unchanged."""
    if _is_url(path):
        return path
    path = os.path.expanduser(path)
    trailing = os.sep if path.endswith(("/", os.sep)) else ""
    return os.path.normpath(os.path.join(base, path)) + trailing


def load(path, date=None):
    """Read, check and build the :class:`Job` of the job file ``path`` (``date``: ``--date``)."""
    from ..pipeline import io
    from ..pipeline.release import ReleaseOptions, not_evaluable

    path = os.path.abspath(path)
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8-sig")  # a Windows editor's byte-order mark is not TOML
    except FileNotFoundError:
        raise InputError(f"job file {path!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the job file {path!r}: {exc}") from None
    values, errors = parse(text)
    templates = {"date": job_date(date), "job": os.path.splitext(os.path.basename(path))[0]}
    base = os.path.dirname(path)
    for section, content in values.items():
        for key, spec in SCHEMA[section].items():
            if spec.path and isinstance(content.get(key), str):
                try:
                    content[key] = resolve(expand(content[key], templates), base)
                except _Bad as bad:
                    errors.append(f"[{section}] {key}: {bad}")
    if errors:
        raise JobFileError(path, errors)

    get = lambda section, key, default=None: values.get(section, {}).get(key, default)  # noqa: E731
    try:
        csv = io.csv_dialect(get("input", "separator"), get("input", "decimal"), get("input", "encoding"),
                             get("input", "thousands"))
    except InputError as exc:
        raise JobFileError(path, [f"[input] {exc}"]) from None
    output = get("output", "path")
    output = output if _is_url(output) else (output.rstrip(os.sep) or os.sep)
    anonymize = values["anonymize"]
    options = ReleaseOptions(
        k=anonymize["k"],
        method=anonymize.get("method", "mdav"),
        quasi_identifiers=anonymize.get("quasi_identifiers"),
        identifiers=anonymize.get("identifiers", ()),
        aggregate=anonymize.get("aggregate", "mean"),
        rows_per_file=get("output", "rows_per_file", ReleaseOptions.rows_per_file),
        order=anonymize.get("order", "kd"),
        block_size=anonymize.get("block_size", ReleaseOptions.block_size),
        blocks_per_task=anonymize.get("blocks_per_task", ReleaseOptions.blocks_per_task),
        one_block_rows=anonymize.get("one_block_rows", ReleaseOptions.one_block_rows),
        seed=anonymize.get("seed", 0),
        refine=anonymize.get("refine", "none"),
        method_options=_given(anonymize, METHOD_OPTIONS),
        refine_options=_given(anonymize, REFINE_OPTIONS),
        stitch=anonymize.get("stitch", "light"),
        sample_rows=anonymize.get("sample_rows"),
        hash_identifiers=anonymize.get("hash_identifiers", False),
        noise=anonymize.get("noise", "none"),
        epsilon=anonymize.get("epsilon"),
        release_where=anonymize.get("release_where"),
        weights=anonymize.get("weights"),
        strata=anonymize.get("strata", ()),
        small_strata=anonymize.get("small_strata", "error"),
        attribute_blocks=anonymize.get("blocks", ()),
        missing=anonymize.get("missing", "error"),
    )
    cluster = {
        "scheduler": get("cluster", "scheduler", "local"),
        "workers": get("cluster", "workers"),
        "threads_per_worker": get("cluster", "threads_per_worker"),
        "processes": get("cluster", "processes", False),
        "memory_limit": get("cluster", "memory_limit", "auto"),
        "connect_timeout": get("cluster", "connect_timeout", DEFAULT_CONNECT_TIMEOUT),
        "worker_timeout": get("cluster", "worker_timeout", WORKER_TIMEOUT),
    }
    # on by default, as `microagg anonymize`, where the release pairs with the input row by row
    evaluating = get("evaluate", "run", not_evaluable(options) is None)
    html = get("report", "html", False)
    job = Job(
        file=path,
        name=templates["job"],
        date=templates["date"],
        input=get("input", "path"),
        csv=csv,
        output=output,
        options=options,
        cluster=cluster,
        report=None if get("report", "json") in (None, os.path.join(output, DEFAULT_REPORT)) else get("report", "json"),
        html=os.path.join(output, DEFAULT_HTML) if html is True else (html or None),
        evaluation=get("report", "evaluation", os.path.join(output, DEFAULT_EVALUATION)) if evaluating else None,
        evaluate={"known": get("evaluate", "known", ()), "id_percent": get("evaluate", "id_percent"),
                  "block_rows": get("evaluate", "block_rows"),
                  "dld_records": get("evaluate", "dld_records", RELEASE_DLD_RECORDS)} if evaluating else None,
        rows_in_quotes=get("input", "allow_rows_in_quotes", False),
        text=tuple(get("input", "text", ())),
    )
    errors = _check_combinations(job, values)
    if errors:
        raise JobFileError(path, errors)
    return job


def _given(section, names):
    """``(option, value)`` pairs (sorted) of the method or refinement option keys given, as the CLI makes them."""
    return tuple(sorted((option, section[key]) for key, option in names.items() if key in section))


def _check_combinations(job, values):
    """Checks across keys and of the paths (nothing is created; the input is not read)."""
    errors = []
    cluster = values.get("cluster", {})
    if job.cluster["scheduler"] != "local":
        for key in ("workers", "threads_per_worker", "processes", "memory_limit"):
            if key in cluster:
                errors.append(f"[cluster] {key}: applies to the local cluster only, not to scheduler = "
                              f"{_show(job.cluster['scheduler'])}")
    if job.options.hash_identifiers and not job.options.identifiers:
        errors.append("[anonymize] hash_identifiers: needs identifiers, the columns to hash")
    if job.evaluate is None and values.get("report", {}).get("evaluation") is not None:
        errors.append("[report] evaluation: the evaluation is off ([evaluate] run = false, release_where or "
                      "missing = \"centroid\")")
    from ..pipeline import io
    from ..pipeline.release import not_evaluable

    unpaired = not_evaluable(job.options)
    if job.evaluate is not None and unpaired:
        errors.append(f"[evaluate] run: the evaluation pairs the input's rows with the release's on complete QIs, "
                      f"so it cannot evaluate this release ({unpaired}); set run = false")
    output = job.output
    if _is_url(output):
        errors.append(f"[output] path: must be a local path (a release is committed by a local rename), got "
                      f"{_show(output)}")
        return errors
    output = output.rstrip(os.sep) or os.sep
    if os.path.isfile(output):
        errors.append(f"[output] path: {output!r} exists and is a file; a release is a directory")
    elif os.path.isdir(output) and os.listdir(output) and not os.path.exists(os.path.join(output, "_SUCCESS")):
        errors.append(f"[output] path: {output!r} exists and is not a microagg release (no _SUCCESS marker); "
                      f"remove it or choose another path")
    if not _is_url(job.input) and (clash := io.overlap(job.input, output)):
        errors.append(f"[output] path: {clash}")
    clashes = report_clashes(job, output)
    errors += clashes
    for key, path in (("json", job.report), ("html", job.html), ("evaluation", job.evaluation)):
        if path is not None and _is_url(path):
            errors.append(f"[report] {key}: must be a local path, got {_show(path)}")
    return errors


def report_clashes(job, output):
    """The ``[report]`` paths that would overwrite the input or another file of the job
    (:func:`pipeline.validation.report_path_problems`): a report that is an input file, lies inside
    the input or holds it, is (or holds) the release directory, or is the path of another report."""
    from ..pipeline.release import html_path
    from ..pipeline.validation import report_path_problems

    local = lambda path: path if path is not None and not _is_url(path) else None  # noqa: E731
    reports = [("[report] json", local(job.report) or os.path.join(output, DEFAULT_REPORT))]
    if job.html is not None and job.report is not None and local(job.report):
        beside = html_path(output, job.report)  # the release writes its page beside the JSON report
        if os.path.realpath(beside) != os.path.realpath(job.html):
            reports.append(("[report] html (the page beside [report] json)", beside))
    reports += [("[report] html", local(job.html)), ("[report] evaluation", local(job.evaluation))]
    inputs = [] if _is_url(job.input) else [job.input]
    return report_path_problems(inputs, output, reports)


# --- checks by the pipeline's validators ----------------------------------------------------------------

_FLAG = re.compile(r"--([a-z][a-z-]*)")
_FLAG_KEYS = {"qi": "quasi_identifiers", "k": "k", "csv-text": "text"}


def _as_key_names(message):
    """A pipeline message with the CLI's flags spelled as job file keys (``--release-where`` ->
    ``release_where``)."""
    def key(match):
        flag = match.group(1)
        name = _FLAG_KEYS.get(flag, flag.replace("-", "_"))
        return name if any(name in SCHEMA[s] for s in ("anonymize", "output", "input")) else match.group(0)
    return _FLAG.sub(key, message)


def job_error(job, section, exc):
    """A pipeline :class:`InputError` as a job file error of ``[section]``."""
    return JobFileError(job.file, [f"[{section}] {_as_key_names(str(exc))}"])


def named_columns(options):
    """Every column the options name (QIs, identifiers, weights, strata, blocks), in a stable order."""
    names = [*(options.quasi_identifiers or ()), *(c for b in options.attribute_blocks for c in b),
             *options.identifiers, *([options.weights] if options.weights else []), *options.strata]
    return list(dict.fromkeys(names))


def check_options(job):
    """The pipeline's checks of the options alone (:func:`pipeline.release.plan` on a schema made of the
    columns the job names: QIs, weights numeric, identifiers and strata text). Returns the QIs the job
    names (None when they are every numeric column of the input). Nothing is read."""
    import dask.dataframe as dd
    import pandas as pd

    from ..pipeline.release import plan
    from ..pipeline.validation import check_method_options

    options = job.options
    numeric = set(options.quasi_identifiers or ()) | {c for b in options.attribute_blocks for c in b}
    if options.weights:
        numeric.add(options.weights)
    columns = named_columns(options)
    if options.quasi_identifiers is None and not options.attribute_blocks:
        # every numeric column: stand-ins, and the columns the release condition names (QIs if numeric)
        implied = ["quasi_identifier", *_condition_names(options.release_where)]
        columns += [c for c in implied if c not in columns]
        numeric.update(implied)
    frame = pd.DataFrame({c: pd.Series([], dtype="float64" if c in numeric else "object") for c in columns})
    try:
        check_method_options(options.method, options.method_options, options.refine, options.refine_options)
        qi, _ = plan(dd.from_pandas(frame, npartitions=1), options)
    except InputError as exc:
        raise job_error(job, "anonymize", exc) from None
    explicit = options.quasi_identifiers is not None or bool(options.attribute_blocks)
    if explicit and job.evaluate is not None:
        check_evaluate(job, qi)
    return list(qi) if explicit else None


def _condition_names(expression):
    import ast

    try:
        return sorted({n.id for n in ast.walk(ast.parse(expression or "", mode="eval")) if isinstance(n, ast.Name)})
    except SyntaxError:
        return []  # the pipeline's check reports it


def input_exists(path):
    """True if the input is there (a local path, a glob matching something, an URL that exists)."""
    import fsspec

    if str(path).startswith("example:"):
        return True
    try:
        fs, _, paths = fsspec.get_fs_token_paths(path)
        return bool(paths) and all(fs.exists(p) for p in paths)
    except (OSError, ValueError, ImportError):
        return False


def check_input(job):
    """Read the input's schema (Dask metadata, no data computed) and run :func:`pipeline.release.plan`
    on it: returns ``(qi, identifiers, columns)``."""
    from ..pipeline import io
    from ..pipeline.release import check_text_columns, named_as_written, plan

    try:
        ddf = io.read_input(job.input, csv=job.csv, scan=False)
    except InputError as exc:
        raise job_error(job, "input", f"path: {exc}") from None
    columns = [str(c) for c in ddf.columns]
    # the columns as the input names them (a CSV header "id, income": ' income')
    options, evaluate, text = named_as_written(job.options, columns, job.evaluate, job.text)
    if text and io.resolve_input(job.input)[0] == "csv":
        try:
            check_text_columns(text, options, columns)
        except InputError as exc:
            raise job_error(job, "input", exc) from None
    try:
        qi, ids = plan(ddf, options)
    except InputError as exc:
        raise job_error(job, "anonymize", exc) from None
    if evaluate is not None:
        check_evaluate(job, qi, evaluate["known"])
    return list(qi), list(ids), columns


def check_evaluate(job, qi, known=None):
    """The ``[evaluate]`` keys against the release's quasi-identifiers ``qi`` (``known``: its known
    sets, if not the job's as written)."""
    for subset in job.evaluate["known"] if known is None else known:
        outside = [c for c in subset if c not in qi]
        if outside:
            raise JobFileError(job.file, [f"[evaluate] known: column(s) {', '.join(map(repr, outside))} are not "
                                          f"quasi-identifiers of the release; they are: {', '.join(qi)}"])


def evaluation_available():
    """True if this installation has ``microagg evaluate`` (:mod:`pipeline.evaluate`)."""
    import importlib.util

    try:
        return importlib.util.find_spec("microagg.pipeline.evaluate") is not None
    except ImportError:
        return False


# --- run-time paths ---------------------------------------------------------------------------------------

def make_parents(job):
    """Create the missing parent directories of the release and of the report paths outside it;
    returns the directories created (deepest last), for :func:`remove_created`."""
    created = []
    output = job.output.rstrip(os.sep)
    parents = [os.path.dirname(output)]
    for path in (job.report, job.html, job.evaluation):
        if path is not None and not os.path.abspath(path).startswith(output + os.sep):
            parents.append(os.path.dirname(os.path.abspath(path)))
    for parent in parents:
        missing = []
        while parent and not os.path.exists(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        for directory in reversed(missing):
            os.makedirs(directory, exist_ok=True)
            created.append(directory)
    return created


def remove_created(created):
    """Remove the directories :func:`make_parents` created that are still empty (a failed job)."""
    for directory in reversed(created):
        try:
            os.rmdir(directory)
        except OSError:
            pass
