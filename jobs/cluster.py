"""Dask cluster lifecycle for jobs: the only place microagg creates (or connects to) a cluster."""

import contextlib
import logging
import math
import os
from contextlib import contextmanager

import dask

from .._cpu import usable_cores

from . import flags

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = "10s"

PEER_CONNECT_TIMEOUT = "10s"
"""Dask's ``distributed.comm.timeouts.connect`` for the workers microagg starts or deploys (the
embedded cluster with ``--processes``; deploy/'s image, plain recipe and Slurm scripts set the same in
the environment: ``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT``). Dask retries a refused connection
until this timeout, 30 s by default: after a worker process is killed, a peer that was fetching data
from it waits that long before the scheduler's recomputation reaches it. The kernels release the
GIL, so a live worker answers well within 10 s."""


def default_workers():
    return usable_cores()


ALLOCATOR_THRESHOLDS = {"MALLOC_MMAP_THRESHOLD_": 16 * 2**20, "MALLOC_TRIM_THRESHOLD_": 32 * 2**20}
"""glibc's allocator settings for the workers. Dask's nanny starts worker processes with
``MALLOC_TRIM_THRESHOLD_=65536``, which also fixes the threshold above which every allocation gets
fresh pages from the kernel (``mmap``) at its default 128 KiB: each large array was then zeroed by
page faults (3.4M of them at 10M rows, 9.4 s of system time). Measured at 10M rows
(BENCHMARKS.md, "Sixteenth session"): workers as threads 34.4-35.0 s with a trim threshold of
64 KiB, 31.6 s with these (peak RSS 3.53 against 3.58 GB); two worker processes 45.3 -> 36.6 s."""

FRUGAL_THRESHOLDS = {"MALLOC_TRIM_THRESHOLD_": 65536}
"""Dask's own setting, kept for workers with less than :data:`ROOMY_WORKER` of memory, where the thresholds
above take a worker past Dask's pause at 80 % of its limit (two worker processes of one thread; BENCHMARKS.md,
sixty-first session): at 1 GiB, 10M rows, 0.84 GiB against 0.69 and no faster (71.9 s against 73.7); at
1.5 GiB, 100M rows, 1.33 GiB against 0.99, though 13-21 % faster from 10M to 100M rows."""

ROOMY_WORKER = 2 * 2**30
"""From 2 GiB on a worker gets :data:`ALLOCATOR_THRESHOLDS`: at 2 GiB (two worker processes of one thread)
the release of 10M rows took 44.1 s with them against 52.2 (system time 13.4 s against 31.5), the workers'
peak 0.97 GiB against 0.79 (BENCHMARKS.md, sixty-first session). It was 4 GiB while the rows in transit
stayed in the workers' memory: then the thresholds' extra memory made a 1.5 GiB worker spill (30M rows:
310 s against 263)."""


def roomy(limit):
    """Whether a worker of ``limit`` bytes (0: no limit) has the memory for :data:`ALLOCATOR_THRESHOLDS`."""
    return not limit or limit >= ROOMY_WORKER

_MALLOPT_PARAMETERS = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_MMAP_THRESHOLD_": -3}  # glibc's M_* codes


def allocator_settings(memory_limit="auto"):
    """:data:`ALLOCATOR_THRESHOLDS`, or :data:`FRUGAL_THRESHOLDS` for workers whose ``memory_limit``
    is below :data:`ROOMY_WORKER`; each overridden by the environment variable of its name if set."""
    thresholds = ALLOCATOR_THRESHOLDS if roomy(limit_bytes(memory_limit)) else FRUGAL_THRESHOLDS
    return {name: int(os.environ.get(name, value)) for name, value in thresholds.items()}


def tune_allocator(processes, memory_limit="auto"):
    """Apply :func:`allocator_settings`: to this process (``mallopt``, for workers as its threads;
    a variable set in the environment already applies), or, for worker processes, as the Dask
    configuration that sets their environment. Returns that configuration (empty for threads)."""
    settings = allocator_settings(memory_limit)
    if processes:
        return {f"distributed.nanny.pre-spawn-environ.{name}": str(value) for name, value in settings.items()}
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        for name, value in settings.items():
            if name not in os.environ:
                libc.mallopt(_MALLOPT_PARAMETERS[name], value)
    except (OSError, AttributeError):  # not glibc
        pass
    return {}


def _allocator_environment():
    """Run on a worker: its glibc allocator variables (None where unset)."""
    return {name: os.environ.get(name) for name in ALLOCATOR_THRESHOLDS}


def faults_pages(environment, memory_limit):
    """Whether a worker with this allocator ``environment`` (:func:`_allocator_environment`) and
    ``memory_limit`` (bytes, 0 for none) page-faults its large arrays for nothing: a trim threshold
    without an mmap threshold (Dask's nanny default) fixes glibc's mmap threshold at 128 KiB, and the
    worker has the memory for :data:`ALLOCATOR_THRESHOLDS`."""
    return (roomy(memory_limit) and environment.get("MALLOC_TRIM_THRESHOLD_") is not None
            and environment.get("MALLOC_MMAP_THRESHOLD_") is None)


def page_faulting_workers(client):
    """Addresses of the cluster's workers for which :func:`faults_pages` holds."""
    limits = {address: w.get("memory_limit") or 0 for address, w in client.scheduler_info()["workers"].items()}
    return sorted(address for address, environment in client.run(_allocator_environment).items()
                  if faults_pages(environment, limits.get(address, 0)))


# An idle worker process with microagg's kernels loaded holds about 275 MiB (measured: the report's
# worker peak RSS after a census job, --processes --workers 1). Dask pauses a worker at 80% of its
# limit and restarts it at 95%: below this floor a worker would stall or restart before any task.
MIN_WORKER_MEMORY = 512 * 2**20
MEMORY_LIMIT_FORM = 'must be "auto", a size such as "4GiB", a number of bytes, or 0 for no limit'


def memory_limit_problem(value):
    """Why ``value`` (``"auto"``, a size such as ``"4GiB"``, or bytes) cannot be a worker's memory
    limit, or None. Dask reads 0 as "no limit"."""
    from dask.utils import format_bytes, parse_bytes

    if value == "auto" or value is None:
        return None
    try:
        limit = value if isinstance(value, int) and not isinstance(value, bool) else parse_bytes(value)
    except (ValueError, TypeError):
        limit = -1
    if limit < 0:
        return MEMORY_LIMIT_FORM
    if 0 < limit < MIN_WORKER_MEMORY:
        return (f"{format_bytes(limit)} per worker is below the {format_bytes(MIN_WORKER_MEMORY)} minimum: an idle "
                f"worker with microagg's kernels loaded already holds about 275 MiB, and Dask pauses a worker "
                f"at 80% of its limit, so the job would stall")
    return None


TASK_HEADROOM = 512 * 2**20
"""Memory a worker thread's running task may add above the worker's spill threshold: the largest
tasks read a whole 1M-row input file and route it or write it, about 0.45 GiB at their peak
(BENCHMARKS.md, "Tight memory limit")."""


def limit_bytes(memory_limit):
    """A worker's ``memory_limit`` (``"auto"``, a size, or bytes) in bytes; 0 for none or "auto"."""
    from dask.utils import parse_bytes

    if memory_limit in ("auto", None, 0):
        return 0
    return memory_limit if isinstance(memory_limit, int) else parse_bytes(memory_limit)


def memory_thresholds(memory_limit, threads_per_worker):
    """Dask's spill thresholds (config keys) for workers of ``memory_limit`` (``"auto"``, a size, or
    bytes): its defaults, spill at 70% of the limit down to 60%, unless they leave a running task
    less than :data:`TASK_HEADROOM` per thread below 95%, where the nanny restarts the worker (at
    1.5 GiB, one thread: spill at 61.6%, down to 51.6%). Empty for no limit or "auto"."""
    limit = limit_bytes(memory_limit)
    if not limit:
        return {}
    spill = math.floor(1000 * min(0.7, max(0.4, 0.95 - TASK_HEADROOM * threads_per_worker / limit))) / 1000
    return {"distributed.worker.memory.spill": spill, "distributed.worker.memory.target": round(spill - 0.1, 3)}


def one_blas_thread():
    """Context: the BLAS library of this process runs one thread. For workers as threads of this
    process, as Dask's nanny does for worker processes (``OPENBLAS_NUM_THREADS=1`` and the like):
    otherwise each worker thread's matrix products (the statistics pass's cross-products, principal
    directions) fan out to a BLAS pool as large as the machine, oversubscribing the cores the other
    worker threads use. (The effect on wall time is below this machine's run-to-run noise.)"""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def use_system_allocator():
    """Arrow's buffers from the C library's allocator (``malloc``) instead of its default (mimalloc), in
    this process and in the worker processes it starts, unless ``ARROW_DEFAULT_MEMORY_POOL`` says
    otherwise. A fresh process reading its first Parquet files with mimalloc took 2.61 s for the 10M
    extract against 1.09 s with malloc (the reads after that: 0.6-0.8 s either way), and a job reads
    its input once, in a fresh process: 10M rows end to end 37.4-37.9 s against 38.9-39.5 s, peak
    RSS 3.53 GB against 3.58 GB (BENCHMARKS.md). deploy/ sets the variable for the workers it starts."""
    if ARROW_POOL_VARIABLE in os.environ:
        return
    os.environ[ARROW_POOL_VARIABLE] = "system"  # read by processes started from here
    import pyarrow

    pyarrow.set_memory_pool(pyarrow.system_memory_pool())  # this one chose its pool at import


def local_shape(processes, workers=None, threads_per_worker=None):
    """``(workers, threads per worker)`` of the local cluster: by default one process per core, or,
    for workers as threads of this process, one worker with a thread per core."""
    cores = default_workers()
    if processes:
        return workers or cores, threads_per_worker or 1
    return workers or 1, threads_per_worker or max(1, cores // (workers or 1))


NO_WORKER_PROFILER = {"distributed.worker.profile.enabled": False}
"""The local cluster's workers run without Dask's statistical profiler (the dashboard's profile page). Every
10 ms it walks every thread's Python stack holding the interpreter lock, and every second it digests the
samples on the event loop; the block tasks (threads of this process by default) waited for the lock at
each kernel's return meanwhile. At 10M rows the job took 37.2 and 38.8 s without it against 40.1 and 40.6 s
with it, alternated (BENCHMARKS.md, forty-third session). A cluster given by its address keeps its own
configuration."""


@contextmanager
def dask_client(scheduler="local", workers=None, threads_per_worker=None, memory_limit="auto", processes=False,
                worker_timeout=flags.WORKER_TIMEOUT):
    """Yield a ``distributed.Client`` (or ``None`` for the in-process synchronous scheduler).

    scheduler : "local" (an embedded ``LocalCluster`` sized to the machine: by default its workers
        are threads of this process, measured faster than worker processes at 1M and 10M rows
        because the kernels release the GIL and nothing is serialized between workers; with
        ``processes`` one process per worker), "synchronous" (no cluster: every task in this
        process; for small files and debugging), or the address of a running scheduler
        (``tcp://HOST:PORT``), whose first worker is awaited for ``worker_timeout`` seconds.
    """
    from ..pipeline.release import warm_kernels_aside

    if scheduler == "synchronous" or (scheduler == "local" and not processes):
        warm_kernels_aside()  # the kernels run in this process: Numba's code generator started meanwhile
    if scheduler == "synchronous":
        with dask.config.set(scheduler="synchronous"):
            yield None
        return
    from distributed import Client, LocalCluster

    if scheduler == "local":
        problem = memory_limit_problem(memory_limit)
        if problem:
            from ..pipeline.errors import InputError

            raise InputError(f"--memory-limit {memory_limit}: {problem}. Nothing was written.")
        n, threads_per_worker = local_shape(processes, workers, threads_per_worker)
        log.info("starting a local Dask cluster: %d worker %s x %d thread(s)", n,
                 "process(es)" if processes else "(threads of this process)", threads_per_worker)
        with dask.config.set({"distributed.comm.timeouts.connect": PEER_CONNECT_TIMEOUT, **NO_WORKER_PROFILER,
                              **memory_thresholds(memory_limit, threads_per_worker),
                              **tune_allocator(processes, memory_limit)}):
            cluster = LocalCluster(  # worker processes take the configuration they start with
                n_workers=n,
                threads_per_worker=threads_per_worker,
                processes=processes,
                memory_limit=memory_limit,
                dashboard_address=":0",  # a free port: never the 8787 of another Dask on the host
                silence_logs=logging.DEBUG if log.isEnabledFor(logging.DEBUG) else logging.ERROR,
            )
        closing = contextlib.ExitStack()
        try:
            with one_blas_thread() if not processes else contextlib.nullcontext(), Client(cluster) as client:
                if not log.isEnabledFor(logging.DEBUG):
                    client.run(_drop_task_failures) if processes else _drop_task_failures()
                try:
                    yield client
                finally:
                    if processes:
                        _quiet_workers(client)
                    elif not log.isEnabledFor(logging.DEBUG):
                        closing.enter_context(_no_heartbeat_failures())
        finally:
            with closing:
                cluster.close()
        return
    log.info("connecting to the Dask scheduler at %s", scheduler)
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError, ValueError) as exc:
        from ..pipeline.errors import ClusterError

        raise ClusterError(
            f"cannot reach the Dask scheduler at {scheduler!r} within {CONNECT_TIMEOUT} ({exc}); check the "
            f"address and that the scheduler is running. Nothing was written."
        ) from exc
    with client:
        await_workers(client, scheduler, worker_timeout)
        check_workers(client)
        with _watching_workers(client, scheduler, worker_timeout):
            yield client


WATCH_INTERVAL = 2.0
"""Seconds between two looks at a scheduler's workers while a job runs on it."""


@contextmanager
def _watching_workers(client, scheduler, timeout):
    """While a job runs on a scheduler address: a scheduler that has lost every worker and has none
    again after ``timeout`` seconds fails the job with :class:`ClusterError` (Dask would wait for
    ever: Slurm worker jobs past their time limit, a cluster scaled to zero under a running job). A
    thread looks every :data:`WATCH_INTERVAL` seconds and interrupts the main thread (SIGINT) once;
    the job then unwinds as for Ctrl-C and the interruption is reported as the cluster's failure
    (also where SIGINT is ignored). Only in the main thread (a library caller's thread is left alone)."""
    import signal
    import threading
    import time

    from ..pipeline import interrupts

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stop, failure, ending = threading.Event(), [], threading.Lock()
    ignoring = None
    if not callable(signal.getsignal(signal.SIGINT)):
        # SIGINT ignored: a job started with `&` from a script (a cron wrapper, an sbatch script)
        # inherits that, and the watch's SIGINT would be lost (the job waited for ever). For the
        # watch's time, a handler that raises for the watch's SIGINT only: Ctrl-C stays ignored.
        def watch_only(signum, frame):
            if failure:
                interrupts.request(KeyboardInterrupt)  # raised again at the next check if Python drops it
                raise KeyboardInterrupt

        ignoring = signal.signal(signal.SIGINT, watch_only)

    def watch():
        since = None
        while not stop.wait(WATCH_INTERVAL):
            try:
                workers = client.scheduler_info(n_workers=1)["workers"]
            except Exception:  # the client closing, the scheduler gone: the job's own calls report it
                return
            since = None if workers else since or time.monotonic()
            if since is not None and time.monotonic() - since >= timeout:
                with ending:  # not once the job is over
                    if not stop.is_set():
                        failure.append(f"the Dask scheduler at {scheduler!r} lost every worker during the job and "
                                       f"has had none for {timeout:g} s; start workers for it, or wait longer "
                                       f"(--worker-timeout, [cluster] worker_timeout). Nothing was written.")
                        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                return

    watcher = threading.Thread(target=watch, name="microagg-worker-watch", daemon=True)
    watcher.start()
    try:
        yield
    except BaseException:  # the watch's SIGINT: KeyboardInterrupt, or the SystemError of one raised in a Numba call
        if failure:
            from ..pipeline.errors import ClusterError

            raise ClusterError(failure[0]) from None
        raise
    finally:
        with ending:
            stop.set()
        watcher.join()
        if ignoring is not None:
            signal.signal(signal.SIGINT, ignoring)


def await_workers(client, scheduler, timeout):
    """Wait up to ``timeout`` seconds for a first worker if the scheduler has none (Dask would wait
    for ever: a scheduled job hung on a cluster scaled to zero); raise :class:`ClusterError` after."""
    if client.scheduler_info()["workers"]:
        return
    log.info("the Dask scheduler at %s has no worker yet: waiting up to %g s for one", scheduler, timeout)
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError as exc:
        from ..pipeline.errors import ClusterError

        raise ClusterError(
            f"the Dask scheduler at {scheduler!r} has had no worker for {timeout:g} s; start workers for it, or "
            f"wait longer (--worker-timeout, [cluster] worker_timeout). Nothing was written."
        ) from exc


# the packages whose versions shape a release's bytes (kernels, arithmetic, Parquet encoding)
MATCHED_PACKAGES = ("microagg", "numpy", "numba", "pandas", "pyarrow")


def package_versions():
    """Versions of :data:`MATCHED_PACKAGES` in this process (None for one that cannot be imported)."""
    from importlib import metadata

    versions = {}
    for name in MATCHED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def version_mismatches(local, workers):
    """``["worker W: numba 0.60.0 (here 0.61.2)", ...]`` for every package of ``workers`` (address ->
    :func:`package_versions`) whose version differs from ``local``'s."""
    problems = []
    for address, versions in sorted(workers.items()):
        for name in MATCHED_PACKAGES:
            theirs, ours = versions.get(name), local.get(name)
            if theirs != ours:
                problems.append(f"worker {address}: {name} {theirs or 'not installed'} (here {ours or 'not installed'})")
    return problems


def check_workers(client, local=None):
    """Refuse a cluster whose workers run other versions of microagg or of the packages that shape
    its output (:data:`MATCHED_PACKAGES`): their blocks would be solved by other code, and the
    release would not be the one this version makes (nor byte-identical across runs). Nothing has
    been read or written when this fails. Dask's own client/scheduler/worker check only warns.
    ``local``: the versions to compare with (default: this process's, :func:`package_versions`)."""
    from ..pipeline.errors import ClusterError

    try:
        workers = client.run(package_versions)
    except Exception as exc:  # a worker that cannot even import microagg.jobs.cluster
        raise ClusterError(
            f"cannot check the Dask workers' software ({type(exc).__name__}: {exc}); is microagg installed "
            f"on every worker? Nothing was written."
        ) from exc
    problems = version_mismatches(local or package_versions(), workers)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise ClusterError(
            f"{len(problems)} package version(s) differ between this client and the Dask workers: {shown}. "
            f"Install the same versions everywhere (one image for scheduler, workers and job: deploy/). "
            f"Nothing was written."
        )
    log.info("%d Dask worker(s) run the same microagg, numpy, numba, pandas and pyarrow", len(workers))
    slow = page_faulting_workers(client)
    if slow:
        log.warning("%d of %d Dask worker(s) run with Dask's default allocator setting (MALLOC_TRIM_THRESHOLD_ "
                    "without MALLOC_MMAP_THRESHOLD_): every large array gets fresh pages from the kernel, which "
                    "made 10M rows 10-24%% slower here; start the workers with "
                    "DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON as deploy/README.md shows", len(slow), len(workers))


class _NoTaskFailures(logging.Filter):
    """Drops a worker's "Compute Failed" record (a task's exception, its traceback and the task's repr):
    the exception reaches the job, which reports it in one paragraph (the traceback with ``--debug``)."""

    def filter(self, record):
        return not str(record.msg).startswith("Compute Failed")


def _drop_task_failures():
    """Run where the embedded cluster's workers log: their task failures reach the job's stderr once."""
    logger = logging.getLogger("distributed.worker")
    if not any(isinstance(f, _NoTaskFailures) for f in logger.filters):
        logger.addFilter(_NoTaskFailures())


class _NoHeartbeatFailures(logging.Filter):
    """Drops a worker's "Failed to communicate with scheduler during heartbeat" record (an ERROR with a
    traceback): logged when a heartbeat crosses the embedded scheduler's closing."""

    def filter(self, record):
        return not str(record.msg).startswith("Failed to communicate with scheduler during heartbeat")


@contextmanager
def _no_heartbeat_failures():
    """While the embedded cluster of in-process workers closes (the job's outcome known): a worker's
    heartbeat that crosses the scheduler's closing is not logged as an ERROR with a traceback (seen in
    a failed job's stderr under load, after its one paragraph of error; worker processes are
    silenced by :func:`_quiet_workers`)."""
    logger = logging.getLogger("distributed.worker")
    quiet = _NoHeartbeatFailures()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def _silence_distributed():
    """Run in a worker process: its Dask loggers report nothing more (the job is over)."""
    logging.getLogger("distributed").setLevel(logging.CRITICAL + 1)


def _quiet_workers(client):
    """Before the embedded cluster's worker processes are shut down: a worker whose heartbeat crosses
    the scheduler's closing logs an ERROR with a traceback ("Failed to communicate with scheduler
    during heartbeat", seen at the end of a successful 10M-row job), which reads as a failure in a
    scheduler's job log; the job's own outcome is known by then. Waits at most ``QUIET_TIMEOUT``
    seconds (a worker stuck in a task after a failure must not hold up the shutdown)."""
    import threading

    def run():
        try:
            client.run(_silence_distributed)
        except Exception:  # a worker already gone
            pass

    thread = threading.Thread(target=run, name="microagg-quiet-workers", daemon=True)
    thread.start()
    thread.join(QUIET_TIMEOUT)


QUIET_TIMEOUT = 5.0


def _peak_rss():
    """This process's peak resident memory (bytes): ``VmHWM`` of ``/proc/self/status`` where there is one.
    ``getrusage``'s ``ru_maxrss`` is no measure of a job's memory on Linux: it keeps the high-water mark
    of the process that started it across ``exec``, so a job started by a Python process of 3.7 GiB (the
    benchmark, after its floor's runs in a cluster of its own) reported 3.7 GiB while it peaked at 2.8."""
    import resource
    import sys

    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # in kB
    except OSError:  # no /proc (macOS)
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def worker_memory(client):
    """Peak resident memory of every worker process so far (bytes), for the job report."""
    try:
        peaks = client.run(_peak_rss)
    except Exception:  # a report field must never fail a finished job
        return {}
    return {"count": len(peaks), "peak_rss_bytes": peaks, "max_peak_rss_bytes": max(peaks.values(), default=0)}
