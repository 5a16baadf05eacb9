"""Console progress for jobs: the current stage, its elapsed time and the cluster's task counts.

Shown only on a terminal (stderr is a TTY) and not under CI; the pipeline itself only logs.
"""

import logging
import os
import sys
import threading
import time
from collections import Counter


def wanted(stream=None):
    stream = sys.stderr if stream is None else stream  # the current stderr (an in-process run may replace it)
    return stream.isatty() and not os.environ.get("CI")


def _task_states(dask_scheduler=None):
    return dict(Counter(ts.state for ts in dask_scheduler.tasks.values()))


class StageProgress(logging.Handler):
    """Redraws one status line: ``stage  elapsed  tasks done/queued/running`` while a stage runs."""

    def __init__(self, client=None, stream=sys.stderr, interval=0.5):
        super().__init__(level=logging.INFO)
        self.client = client
        self.stream = stream
        self.interval = interval
        self.stage = None
        self.started = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="microagg-progress", daemon=True)

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
        self._draw(final=True)

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("stage ") and message.endswith("..."):
            self._draw(final=True)
            self.stage = message[len("stage "):-len(" ...")]
            self.started = time.perf_counter()

    def _loop(self):
        while not self._stop.wait(self.interval):
            self._draw()

    def _draw(self, final=False):
        if self.stage is None:
            return
        line = f"  {self.stage:<11} {time.perf_counter() - self.started:7.1f}s"
        if self.client is not None and not final:
            try:
                states = self.client.run_on_scheduler(_task_states)
                done = states.get("memory", 0) + states.get("released", 0) + states.get("forgotten", 0)
                line += (f"  tasks: {done} done, {states.get('processing', 0)} running, "
                         f"{states.get('waiting', 0) + states.get('queued', 0) + states.get('no-worker', 0)} waiting")
            except Exception:  # the status line must never break a job
                pass
        self.stream.write("\r" + line.ljust(78) + ("\n" if final else ""))
        self.stream.flush()
        if final:
            self.stage = None
