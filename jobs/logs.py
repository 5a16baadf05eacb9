"""Log output of the ``microagg`` command: plain text (the default) or JSON lines for schedulers.

``microagg --log-format json COMMAND ...`` writes one JSON object per line to stderr, nothing else:

* every log record: ``time`` (UTC, ISO 8601, milliseconds), ``level``, ``logger``, ``message``; an
  exception's traceback under ``exception``. The ``microagg`` loggers log at INFO in this mode, so
  the job's progress is in the stream (other libraries still only at WARNING, ``distributed`` at ERROR;
  with ``--debug`` everything at DEBUG);
* a stage of the pipeline or of a job file (:class:`pipeline.release.Timings` and :mod:`jobs.run`):
  also ``event: "stage"``, ``stage`` (its name) and ``status``: ``"started"``, or ``"done"``,
  ``"failed"`` or ``"interrupted"`` with ``seconds``;
* every 30 s of a running stage of the pipeline (:class:`jobs.progress.LogProgress`): ``event:
  "progress"``, ``stage``, ``seconds`` and the cluster's ``tasks_done`` / ``tasks_running`` /
  ``tasks_waiting``;
* the outcome, last: ``event: "finished"`` with ``command``, ``exit_code`` (0) and, where the command
  has them, ``output``, ``rows``, ``information_loss`` (percent), ``report``; or ``event: "failed"``
  with ``command``, ``exit_code`` (see :mod:`jobs.exit_codes`), ``error`` (the exception's class),
  ``message``, for a bad job file ``errors`` (one per bad key) and, with ``--debug``, ``traceback``.

Python warnings are routed through logging (``py.warnings``) so they are JSON too. What is not
covered: the stderr of separate worker processes (``--processes``). argparse's usage errors are a
``failed`` event too (``error: "ArgumentError"``, exit code 2), and no progress line is drawn on a
terminal in this mode. Standard output is unchanged (the human
summary; ``--quiet`` silences it).

The text format is the one ``microagg`` always had: warnings and errors as
``TIME LEVEL LOGGER: MESSAGE`` and a final ``microagg: error: ...`` line on failure.
"""

import json
import logging
import math
import os
import sys
import traceback
from datetime import datetime, timezone

from .exit_codes import interruption, what_was_written

FORMATS = ("text", "json")

_STAGE_STARTED = "stage %s ..."           # pipeline.release.Timings.stage
_STAGE_DONE = "stage %s done in %.2f s"
_STAGE_ENDED = "stage %s %s after %.2f s"  # failed / interrupted

_state = {"format": "text", "outcome": {}, "handler": None, "raised": False}


def add_argument(parser):
    """The global ``--log-format`` flag (before the command, like ``--debug``)."""
    parser.add_argument("--log-format", choices=FORMATS, default="text",
                        help="text (default) or json: one JSON object per line on stderr for every log record, "
                             "each stage's time and the outcome (event finished / failed with the exit code)")


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record):
        entry = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        args = record.args if isinstance(record.args, tuple) else ()
        if record.msg == _STAGE_STARTED and len(args) == 1:
            entry.update(event="stage", stage=str(args[0]), status="started")
        elif record.msg == _STAGE_DONE and len(args) == 2:
            entry.update(event="stage", stage=str(args[0]), status="done", seconds=round(float(args[1]), 4))
        elif record.msg == _STAGE_ENDED and len(args) == 3:
            entry.update(event="stage", stage=str(args[0]), status=str(args[1]), seconds=round(float(args[2]), 4))
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return dumps(entry)


def dumps(entry):
    """Strict JSON on one line: NaN / infinity as null, anything unknown as its ``str``."""
    return json.dumps(_finite(entry), default=str, allow_nan=False, separators=(",", ":"))


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class _JsonHandler(logging.StreamHandler):
    """Writes to the *current* ``sys.stderr`` (so redirections made after setup are honoured)."""

    def __init__(self, level):
        super().__init__(sys.stderr)
        self.threshold = level

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # logging.StreamHandler.__init__ assigns it
        pass

    def filter(self, record):
        # the console level for everybody; microagg's own job progress (INFO) as well
        if record.levelno < self.threshold and not (record.name.startswith("microagg") and
                                                    record.levelno >= logging.INFO):
            return False
        return super().filter(record)


class _QuietGatherExits(logging.Filter):
    """Drops asyncio's "Task exception was never retrieved" records for Dask's ``AllExit``: the
    sentinel that ``Client.gather``'s wait for each result raises once the gather is abandoned, and
    which Dask itself treats as quiet. A job interrupted while it gathered (Ctrl-C, SIGTERM, SIGHUP in
    the statistics stage, or during ``generate``) printed a dozen such tracebacks (ERROR events in
    JSON) above its one line "terminated (SIGTERM); nothing was written"."""

    def filter(self, record):
        exc = record.exc_info[1] if record.exc_info else None
        return not (type(exc).__name__ == "AllExit" and type(exc).__module__.startswith("distributed"))


_QUIET_GATHER_EXITS = _QuietGatherExits()


def setup(log_format, level):
    """Install the ``log_format`` output on the root logger (after ``logging.basicConfig``).

    ``level`` is the console level (WARNING, or DEBUG with ``--debug``). Calling it again (another
    in-process ``main``) replaces what the previous call installed."""
    root = logging.getLogger()
    logging.getLogger("asyncio").addFilter(_QUIET_GATHER_EXITS)  # once: a filter is added only once
    if _state["handler"] is not None:
        root.removeHandler(_state["handler"])
        _state["handler"] = None
    if _state["raised"]:
        logging.getLogger("microagg").setLevel(logging.NOTSET)
        _state["raised"] = False
    _state["format"] = log_format
    _state["outcome"] = {}
    if log_format != "json":
        logging.captureWarnings(False)
        return
    for handler in list(root.handlers):  # basicConfig's plain-text handler on stderr
        if type(handler) is logging.StreamHandler and handler.stream in (sys.stderr, sys.__stderr__):
            root.removeHandler(handler)
    handler = _JsonHandler(level)
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    _state["handler"] = handler
    microagg = logging.getLogger("microagg")
    if microagg.getEffectiveLevel() > logging.INFO:
        microagg.setLevel(logging.INFO)
        _state["raised"] = True
    logging.captureWarnings(True)


def is_json():
    return _state["format"] == "json"


def record_outcome(**fields):
    """Fields of the ``finished`` event a command knows (output, rows, information_loss, ...)."""
    _state["outcome"].update({k: v for k, v in fields.items() if v is not None})


def say(text, stream="stdout"):
    """Print ``text`` to ``sys.stdout`` (or ``stream``), a command's account of what it did. If the
    stream is gone (its terminal hung up: EIO; the reader of its pipe quit: EPIPE), the rest of the
    command's output there is dropped and its exit code stands: a release committed is not made a
    failure (exit 1) by a summary no one can read."""
    try:
        print(text, file=getattr(sys, stream), flush=True)
    except (OSError, ValueError):  # ValueError: a closed stream
        setattr(sys, stream, open(os.devnull, "w"))  # the unwritten rest is dropped, also at exit


def _emit(entry):
    entry = {"time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"), **entry}
    say(dumps(entry), "stderr")


def emit_failed(command, code, error, message):
    """A ``failed`` event for a failure before the log format is set up (argparse's usage errors of a
    ``--log-format json`` command line): the shape of :func:`failed`'s."""
    _emit({"level": "ERROR", "logger": "microagg", "message": message, "event": "failed", "command": command,
           "exit_code": code, "error": error})


def finished(args, code):
    """The outcome of a command that returned ``code``: a ``finished`` event in JSON mode (with a
    non-zero ``code``, a ``failed`` one); nothing in text mode (the command printed its summary)."""
    if not is_json():
        return code
    outcome = {**_default_outcome(args), **_state["outcome"]}
    command = getattr(args, "command", None)
    if code == 0:
        _emit({"level": "INFO", "logger": "microagg", "message": "finished", "event": "finished",
               "command": command, "exit_code": code, **outcome})
    else:
        _emit({"level": "ERROR", "logger": "microagg", "message": f"exited with {code}", "event": "failed",
               "command": command, "exit_code": code, **outcome})
    return code


def failed(args, exc, code, text, **fields):
    """Report the exception that ended a command; returns ``code``. Text mode prints ``text`` (and
    with ``--debug`` the traceback first) to stderr; JSON mode emits a ``failed`` event, with
    ``fields`` added to it."""
    debug = getattr(args, "debug", False)
    if not is_json():
        if debug and not isinstance(exc, KeyboardInterrupt):
            say("".join(traceback.format_exception(exc)).rstrip("\n"), "stderr")
        say(text, "stderr")  # if stderr is gone (a terminal that hung up), the code remains
        return code
    # the console's sentence without its "microagg: error: " (for a failure microagg classifies, such as
    # a lost cluster or a full disk, it says more than the exception's own text)
    message = text.removeprefix("microagg: ").removeprefix("error: ") or str(exc)
    entry = {"level": "ERROR", "logger": "microagg", "message": message, "event": "failed",
             "command": getattr(args, "command", None), "exit_code": code, "error": type(exc).__name__, **fields}
    if isinstance(exc, KeyboardInterrupt):
        entry["message"] = f"{interruption(exc)[1]}; {what_was_written()}"
    if isinstance(getattr(exc, "errors", None), list):  # a job file's errors, one per [section] key
        entry["errors"] = [str(e) for e in exc.errors]
    if debug:
        entry["traceback"] = "".join(traceback.format_exception(exc))
    _emit(entry)
    return code


def _default_outcome(args):
    """What the finished event can say about a command that recorded nothing itself."""
    command = getattr(args, "command", None)
    outcome = {}
    if command == "anonymize":
        outcome["output"] = args.output
        path = args.report or os.path.join(args.output, "_report.json")
        try:
            with open(path) as fh:
                report = json.load(fh)
        except (OSError, ValueError):
            return outcome
        outcome.update(rows=report.get("rows"), rows_released=report.get("rows_released"),
                       information_loss=report.get("information_loss"), report=path)
    elif command == "generate":
        outcome.update(output=args.output, rows=args.rows)
    elif command == "evaluate":
        outcome["report"] = args.report
    return {k: v for k, v in outcome.items() if v is not None}
