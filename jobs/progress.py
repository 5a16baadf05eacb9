"""Progress of jobs: the current stage, its elapsed time and the cluster's task counts.

On a terminal (stderr is a TTY, not under CI) one status line is redrawn (:class:`StageProgress`).
With ``--log-format json`` (a scheduler's log, never a terminal) a ``progress`` record is logged
every :data:`LOG_INTERVAL` seconds while a stage runs (:class:`LogProgress`), so a long stage is
not a silent one. :func:`reporting` picks one of them, or none.
"""

import contextlib

import logging
import os
import sys
import threading
import time
from collections import Counter


def wanted(stream=None):
    stream = sys.stderr if stream is None else stream  # the current stderr (an in-process run may replace it)
    return stream.isatty() and not os.environ.get("CI")


LOG_INTERVAL = 30.0
"""Seconds between two ``progress`` records of a running stage in the JSON log."""

log = logging.getLogger(__name__)


def _task_states(dask_scheduler=None):
    """The scheduler's tasks by state, and ``"on threads"``: per worker, its processing tasks up to
    its thread count (a worker's processing tasks beyond its threads wait for one)."""
    states = Counter(ts.state for ts in dask_scheduler.tasks.values())
    states["on threads"] = sum(min(len(ws.processing), ws.nthreads) for ws in dask_scheduler.workers.values())
    return dict(states)


def task_counts(client):
    """``(done, running, waiting)`` tasks on the client's scheduler, or None if it cannot tell.

    Running tasks are those on a worker thread, at most the cluster's threads: Dask's ``processing``
    state also holds the tasks a worker has been given ahead of a free thread (hundreds of a job's
    block tasks at once), which are counted as waiting with those not yet given to any worker.
    """
    if client is None:
        return None
    try:
        states = client.run_on_scheduler(_task_states)
    except Exception:  # progress must never break a job
        return None
    running = states.get("on threads", 0)  # at most the processing tasks, by its construction
    return (states.get("memory", 0) + states.get("released", 0) + states.get("forgotten", 0),
            running,
            states.get("processing", 0) - running
            + states.get("waiting", 0) + states.get("queued", 0) + states.get("no-worker", 0))


def reporting(client, quiet=False):
    """The progress of a job on ``client`` (None: no cluster): the status line on a terminal, the
    ``progress`` records with the JSON log format (never the status line: stderr is then JSON only), else nothing."""
    from . import logs

    if logs.is_json():  # one JSON object per line on stderr: no status line drawn there, even on a terminal
        return LogProgress(client)
    if wanted() and not quiet:
        return StageProgress(client)
    return contextlib.nullcontext()


class _Watching(logging.Handler):
    """Follows the pipeline's stages (its ``stage NAME ...`` records) while a thread calls
    :meth:`_tick` every ``interval`` seconds; a context manager."""

    def __init__(self, client, interval):
        super().__init__(level=logging.INFO)
        self.client = client
        self.interval = interval
        self.stage = None
        self.started = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"microagg-{type(self).__name__}", daemon=True)

    def __enter__(self):
        logger = logging.getLogger("microagg.pipeline.release")
        logger.addHandler(self)
        logger.setLevel(min(logger.getEffectiveLevel(), logging.INFO))
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=2)
        logging.getLogger("microagg.pipeline.release").removeHandler(self)
        self._ended()

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("stage "):  # "stage NAME ..." starts a stage; "stage NAME done ..." ends it
            self._ended()
            with self._lock:
                self.stage = message[len("stage "):-len(" ...")] if message.endswith("...") else None
                self.started = time.perf_counter()

    def _loop(self):
        while not self._stop.wait(self.interval):
            with self._lock:
                stage, started = self.stage, self.started
            if stage is not None:
                self._tick(stage, time.perf_counter() - started)

    def _tick(self, stage, elapsed):
        raise NotImplementedError

    def _ended(self):
        """The stage followed so far ends (or another starts)."""


class StageProgress(_Watching):
    """Redraws one status line: ``stage  elapsed  tasks done/queued/running`` while a stage runs."""

    def __init__(self, client=None, stream=sys.stderr, interval=0.5):
        super().__init__(client, interval)
        self.stream = stream

    def _tick(self, stage, elapsed):
        self._draw(stage, elapsed, task_counts(self.client))

    def _ended(self):
        with self._lock:
            stage, started = self.stage, self.started
        if stage is not None:
            self._draw(stage, time.perf_counter() - started, None, final=True)

    def _draw(self, stage, elapsed, counts, final=False):
        line = f"  {stage:<11} {elapsed:7.1f}s"
        if counts is not None:
            line += f"  tasks: {counts[0]} done, {counts[1]} running, {counts[2]} waiting"
        if self.stream is None:
            return
        try:
            self.stream.write("\r" + line.ljust(78) + ("\n" if final else ""))
            self.stream.flush()
        except (OSError, ValueError):  # the terminal is gone (a hang-up: EIO) or the stream closed
            self.stream = None  # the job goes on, or unwinds, without its status line


class LogProgress(_Watching):
    """Logs ``progress`` (INFO, ``event: "progress"``, ``stage``, ``seconds`` and the task counts
    ``tasks_done`` / ``tasks_running`` / ``tasks_waiting``) every ``interval`` seconds while a stage
    of the pipeline runs, once it has run that long (nothing for a shorter stage)."""

    def __init__(self, client=None, interval=None):
        self.every = LOG_INTERVAL if interval is None else interval
        super().__init__(client, self.every / 4)  # looks four times an interval: a record within 1.25 of them
        self.last = (None, 0.0)  # the stage and its elapsed seconds of the last record

    def _tick(self, stage, elapsed):
        last_stage, last = self.last
        if elapsed - (last if last_stage == stage and last <= elapsed else 0.0) < self.every:
            return
        self.last = (stage, elapsed)
        counts = task_counts(self.client)
        fields = {"event": "progress", "stage": stage, "seconds": round(elapsed, 1)}
        text = ""
        if counts is not None:
            fields.update(tasks_done=counts[0], tasks_running=counts[1], tasks_waiting=counts[2])
            text = f"; tasks: {counts[0]} done, {counts[1]} running, {counts[2]} waiting"
        log.info("progress: stage %s running for %.0f s%s", stage, elapsed, text, extra={"fields": fields})
