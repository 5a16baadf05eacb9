"""Exit codes of every ``microagg`` command, for schedulers (cron, Airflow, Slurm, Kubernetes Jobs).

This table is the one place they are documented (the README repeats it):

====  ==========================================================================================
code  meaning
====  ==========================================================================================
0     success: the release (and every report asked for) is written
1     internal error: a bug or an unexpected failure (re-run with ``--debug`` for the traceback)
2     bad input, bad options or a bad job file (``InputError``): the message names the column,
      option or ``[section] key``; nothing was written. Also an input file removed while the job
      read it, workers that cannot see the input or the output, and argparse's usage errors
3     release gate failure (``ReleaseGateError``): the release failed its k-anonymity or row-count
      check, or its temporary directory was removed by another job while it ran (``pipeline.io``'s
      lease), and was not written
4     cluster failure (``ClusterError``): the Dask scheduler cannot be reached within the connect
      timeout, has no worker for the worker timeout (at the start or during the job), its workers
      run other versions of the packages that shape a release (``jobs.cluster.check_workers``), or
      the cluster failed during the job (a worker killed beyond the retries:
      ``KilledWorker``; the connection to the scheduler lost: ``CommClosedError``, a refused or
      reset connection, futures cancelled because the scheduler went away); nothing was written
5     storage failure: a filesystem refused a write or a read (full: ``ENOSPC``, over quota:
      ``EDQUOT``, read-only: ``EROFS``, permission denied: ``EACCES`` / ``EPERM``), the output's
      or the workers' spill directory's; or the rows in transit (an evaluation's QIs) fit neither
      in the scratch directory's free space nor in half the job's memory (``ScratchSpaceError``,
      before the stage); nothing was written (but for a report written after its release,
      ``StorageError``: the message says the release is committed)
6     busy (``OutputBusyError``): another job on this host is writing the same output now (a
      scheduler firing the same export twice); the first job goes on, this one wrote nothing
129   hung up (SIGHUP: the job's terminal closed, an ssh session dropped); nothing was written and
      the job's temporary directory is removed. A job meant to outlive its terminal is started with
      ``nohup`` (which ignores SIGHUP; the job then keeps it ignored) or from a scheduler
130   interrupted (SIGINT / Ctrl-C); nothing was written
143   terminated (SIGTERM: a scheduler cancelling the job, a time limit, a pod being stopped); nothing
      was written and the job's temporary directory is removed
====  ==========================================================================================

A job file's evaluation (and its page) runs after its release is committed: a failure or an
interruption there keeps its code, and its message says where the committed release is instead of
"nothing was written" (:func:`committed`).

The codes of the pipeline's own errors are the ``exit_code`` attributes of the classes in
:mod:`microagg.pipeline.errors` (``tests/test_jobfile.py`` checks that they agree with this table);
this module adds the codes that are not errors of the pipeline (interrupted, internal) and decides
which foreign exceptions are cluster or storage failures. It imports nothing heavy: ``distributed``'s exception
classes are recognised by module and name, without importing it.
"""

import errno

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INPUT = 2          # pipeline.errors.InputError.exit_code
EXIT_GATE = 3           # pipeline.errors.ReleaseGateError.exit_code
EXIT_CLUSTER = 4        # pipeline.errors.ClusterError.exit_code
EXIT_STORAGE = 5        # a filesystem refused a read or write (is_storage_failure; pipeline.errors.StorageError)
EXIT_BUSY = 6           # pipeline.errors.OutputBusyError.exit_code
EXIT_HUNG_UP = 129      # 128 + SIGHUP
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_TERMINATED = 143   # 128 + SIGTERM

SUMMARY = ("0 success, 1 internal error, 2 bad input, options or job file, 3 release gate failure, 4 cluster failure, "
           "5 storage failure (a full or read-only filesystem), 6 busy (another job on this host is writing the same "
           "output), 129 hung up (SIGHUP), 130 interrupted (SIGINT), 143 terminated (SIGTERM)")
"""The table in one sentence, for the commands' help and the job file examples."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by the CLI's handler: the job unwinds as for Ctrl-C (its
    cluster shut down, its temporary directory removed) instead of dying where it stands."""


class HungUp(Terminated):
    """SIGHUP (the job's terminal closed), raised in the main thread by the CLI's handler: the job
    unwinds as for SIGTERM instead of dying with its temporary directory left behind."""


# (module prefix, class name) of the exceptions that mean the cluster, not the job, failed
_CLUSTER_FAILURES = (
    ("distributed", "CommClosedError"),        # a comm to the scheduler or a worker closed (an OSError)
    ("distributed", "KilledWorker"),           # a task's workers died more often than allowed
    ("distributed", "FutureCancelledError"),   # a future cancelled: the scheduler connection was lost
    ("distributed", "FuturesCancelledError"),  # several of them
)


def is_cluster_failure(exc):
    """True if ``exc`` (or an exception it was explicitly raised from) means the Dask cluster failed: a
    ``distributed`` comm / worker / lost-scheduler error, or a refused / reset / aborted connection."""
    for cause in _causes(exc):
        if isinstance(cause, ConnectionError):
            return True
        for cls in type(cause).__mro__:
            if any(cls.__module__.startswith(module) and cls.__name__ == name for module, name in _CLUSTER_FAILURES):
                return True
    return False


def _causes(exc):
    """``exc`` and the exceptions it was explicitly raised from, each once."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__


_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


def is_storage_failure(exc):
    """True if ``exc`` (or an exception it was explicitly raised from) is a filesystem refusing a read or
    write: full, over quota, read-only, permission denied (not a connection's error)."""
    return any(isinstance(cause, OSError) and not isinstance(cause, ConnectionError) and cause.errno in _STORAGE_ERRNOS
               for cause in _causes(exc))


# the interruptions, the most derived class first: (class, exit code, word, its signal)
_INTERRUPTIONS = ((HungUp, EXIT_HUNG_UP, "hung up", " (SIGHUP: its terminal closed)"),
                  (Terminated, EXIT_TERMINATED, "terminated", " (SIGTERM)"),
                  (KeyboardInterrupt, EXIT_INTERRUPTED, "interrupted", ""))


_COMMITTED = []  # the release a job has committed, while the steps after it run (a job file's evaluation)


def committed(output):
    """Record that the command has committed its release at ``output`` (None: forget it): a failure
    or an interruption after it no longer says that nothing was written."""
    _COMMITTED[:] = [] if output is None else [str(output)]


def what_was_written():
    """"nothing was written", or, once the release is committed (:func:`committed`), where it is."""
    if not _COMMITTED:
        return "nothing was written"
    return (f"the release is committed at {_COMMITTED[0]}, but the steps after it (its evaluation, its page) did "
            f"not finish")


def interruption(exc):
    """``(exit code, word, signal)`` of a ``KeyboardInterrupt`` that ended a command (Ctrl-C,
    :class:`Terminated`, :class:`HungUp`): ``(143, "terminated", " (SIGTERM)")``."""
    return next((code, word, cause) for cls, code, word, cause in _INTERRUPTIONS if isinstance(exc, cls))


def exit_code_of(exc):
    """The exit code for an exception that ended a command (see the table above)."""
    if isinstance(exc, KeyboardInterrupt):
        return interruption(exc)[0]
    code = getattr(exc, "exit_code", None)  # a pipeline.errors.MicroaggError
    if isinstance(code, int) and not isinstance(code, bool) and _is_microagg_error(exc):
        return code
    if is_cluster_failure(exc):
        return EXIT_CLUSTER
    if is_storage_failure(exc):
        return EXIT_STORAGE
    return EXIT_INTERNAL


def _is_microagg_error(exc):
    return any(cls.__name__ == "MicroaggError" and cls.__module__.endswith("pipeline.errors")
               for cls in type(exc).__mro__)
