"""The HTML page drawn by a helper process, beside the write.

The page's figures took 1.3-2.3 s of one core at every large job (1M rows as 10M), drawn before the
write while the workers waited: a thread cannot draw them beside the write, since matplotlib holds the
interpreter lock that the write's tasks (threads of the job's process) need at every step (measured
three times; BENCHMARKS.md). A forked copy of the job's process drew them beside the write, but the
copy-on-write faults of the job's memory cost the write as much as the drawing saved (forty-sixth
session).

:class:`PageHelper` is a fresh interpreter, started when a large job starts, at the lowest CPU priority
(``nice`` 19): it imports matplotlib on what the job leaves of the cores (the cluster's start, the
split tree), draws the figures beside the write on what the write leaves of them, and renders the
page once the write is done. Its page is the one this process would render (:func:`render_page`, on
both sides; tested). Measured at 10M rows, alternated runs of the same build (BENCHMARKS.md,
forty-sixth session): from the gate to the end of the job 7.4 / 5.9 / 5.4 s with the page drawn here,
4.5 / 3.7 / 4.2 s with the helper; the write took no longer beside it. Whatever fails on its side (it
cannot start, exits, answers with an error, or not within :data:`PAGE_TIMEOUT`) leaves the page to this
process, as before, and is logged.
"""

import logging
import os
import pickle
import queue
import subprocess
import sys
import threading
import traceback

log = logging.getLogger(__name__)

HELPER_INPUT_BYTES = 32 << 20
"""Inputs of at least this many stored bytes (about 300,000 rows of 13 QIs as Parquet) have their page
drawn by a :class:`PageHelper`: below, a job is over in seconds and the helper's start (an interpreter
importing matplotlib, about 2 s of one core) would cost more than it saves."""

PAGE_TIMEOUT = 20.0
"""Seconds this process waits for the helper's page before it renders the page itself (the helper renders one in
about 2 s; only a helper stuck or starved of CPU takes longer). At the lowest priority, with both cores kept busy
by two other processes, a helper gave no page within 120 s (BENCHMARKS.md, sixty-fifth session); the job's own
render takes a few seconds."""

_BOOT = ("import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
         "from microagg.pipeline.drawing import serve; serve()")


def render_page(report, figures):
    """The page of ``report`` (:func:`pipeline.report.render_html` with the report's own ``summary``),
    its data figures taken from, or kept in, ``figures``."""
    from .report import render_html

    return render_html(report, report.get("summary"), figures)


class PageHelper:
    """A helper process that draws a job's page (see the module's docstring).

    ``draw(report)`` hands it the report once the gate has passed (its figures are drawn then);
    ``page(report)`` asks it for the page of the complete report, or returns None if it cannot give
    one; ``close()`` ends it. A request is one pickle on its standard input, a reply one pickle on its
    standard output, in order."""

    def __init__(self):
        self._replies = queue.Queue()
        self._pending = 0
        self.failure = None  # why the helper gave no page, once it has failed
        self._process = subprocess.Popen([sys.executable, "-c", _BOOT], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._send(list(sys.path))
        threading.Thread(target=self._read, name="microagg-page-helper", daemon=True).start()

    def _send(self, message):
        try:
            pickle.dump(message, self._process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self._process.stdin.flush()
        except Exception as exc:  # the helper has exited, or the report cannot be pickled
            self._fail(f"could not hand it the report: {exc!r}")
            return False
        return True

    def _read(self):
        while True:
            try:
                reply = pickle.load(self._process.stdout)
            except Exception:  # the helper has exited: its replies end
                self._replies.put(None)
                return
            self._replies.put(reply)

    def _fail(self, why):
        if self.failure is None:
            self.failure = why
            log.warning("the page's helper process failed (%s): the page is drawn by the job's process", why)
        self.close()

    def draw(self, report):
        """Hand the helper the report whose data figures it draws now."""
        if self.failure is None and self._send(("figures", report)):
            self._pending += 1

    def page(self, report, timeout=PAGE_TIMEOUT):
        """The page of ``report`` as the helper renders it, or None (it failed: :attr:`failure`)."""
        if self.failure is not None or not self._send(("page", report)):
            return None
        self._pending += 1
        while self._pending:
            try:
                reply = self._replies.get(timeout=timeout)
            except queue.Empty:
                self._fail(f"no page within {timeout:g} s")
                return None
            self._pending -= 1
            if reply is None:
                self._fail(f"it exited with code {self._process.wait()}")
                return None
            kind, value = reply
            if kind == "error":
                self._fail(f"it raised: {value.strip().splitlines()[-1]}")
                log.debug("the page's helper process: %s", value)
                return None
        return value

    def close(self):
        """End the helper (it exits at the end of its input; killed if it does not within a second)."""
        process = self._process
        if process.poll() is None:
            try:
                process.stdin.close()
            except OSError:
                pass
            try:
                process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def start(input_bytes):
    """A :class:`PageHelper` for a job on ``input_bytes`` stored bytes (:data:`HELPER_INPUT_BYTES`), or
    None: the job's process draws its page."""
    if input_bytes < HELPER_INPUT_BYTES:
        return None
    try:
        return PageHelper()
    except OSError as exc:
        log.warning("the page's helper process could not start (%s): the page is drawn by the job's process", exc)
        return None


def serve():
    """The helper's side: lowest CPU priority, matplotlib imported, then one reply per request until its
    input ends, when it exits at once (status 0, without the interpreter's teardown). Its standard output
    carries the replies only (anything printed goes to its standard error)."""
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        os.nice(19)
    except (AttributeError, OSError):  # no nice on this platform: normal priority
        pass
    requests = queue.Queue()

    def read():  # the requests are taken in as they come: a job writing one never waits for the import
        while True:
            try:
                requests.put(pickle.load(sys.stdin.buffer))
            except Exception:
                requests.put(None)
                return

    threading.Thread(target=read, daemon=True).start()
    from .report import import_figure_modules

    import_figure_modules()
    figures = {}
    while (request := requests.get()) is not None:
        kind, report = request
        try:
            page = render_page(report, figures)
            reply = ("page", page) if kind == "page" else ("figures", None)
        except Exception:
            reply = ("error", traceback.format_exc())
        pickle.dump(reply, channel, protocol=pickle.HIGHEST_PROTOCOL)
        channel.flush()
    # Out at once: the interpreter's teardown (matplotlib's modules, the reading thread) took more than the
    # second :meth:`PageHelper.close` waits for a helper at the lowest priority when the cores are busy, and the
    # helper was killed; it has nothing left to write or close.
    sys.stderr.flush()
    os._exit(0)
