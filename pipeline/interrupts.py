"""A stop asked for by a signal, kept until the pipeline next looks.

The CLI's handlers of SIGINT, SIGTERM and SIGHUP (``jobs/cli.py``) raise ``KeyboardInterrupt``,
``Terminated`` or ``HungUp`` at once, in the main thread, between two bytecodes of whatever it runs.
When that is a finalizer (a Dask future's ``__del__``, a weakref callback), Python prints "Exception ignored" and
drops the exception: the job goes on, and would commit its release and exit 0 (seen once in CI: a
SIGTERM during the blocks stage). So the handlers also record the request here, and :func:`check`
raises it again at every stage's start and end (``release.Timings.stage``, the job file's stages)
and before a commit (``io.commit_output``). Library callers that install no handler are not affected.
"""

_requested = None  # the exception class a signal asked for, or None


def request(exc_type):
    """Record that a signal asked the job to stop with ``exc_type`` (called from a signal handler)."""
    global _requested
    _requested = exc_type


def clear():
    """Forget a request (a new job in this process)."""
    global _requested
    _requested = None


def requested():
    """The exception class a signal asked for, or None."""
    return _requested


def check():
    """Raise the exception a signal asked for, if one did."""
    if _requested is not None:
        raise _requested()
