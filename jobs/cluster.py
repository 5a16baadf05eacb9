"""Dask cluster lifecycle for jobs: the only place microagg creates (or connects to) a cluster."""

import logging
import os
from contextlib import contextmanager

import dask

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = "10s"


def default_workers():
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@contextmanager
def dask_client(scheduler="local", workers=None, threads_per_worker=1, memory_limit="auto"):
    """Yield a ``distributed.Client`` (or ``None`` for the in-process synchronous scheduler).

    scheduler : "local" (an embedded ``LocalCluster`` of worker processes sized to the machine),
        "synchronous" (no cluster: every task in this process; for small files and debugging), or
        the address of a running scheduler (``tcp://HOST:PORT``).
    """
    if scheduler == "synchronous":
        with dask.config.set(scheduler="synchronous"):
            yield None
        return
    from distributed import Client, LocalCluster

    if scheduler == "local":
        n = workers or default_workers()
        log.info("starting a local Dask cluster: %d worker process(es) x %d thread(s)", n, threads_per_worker)
        cluster = LocalCluster(
            n_workers=n,
            threads_per_worker=threads_per_worker,
            processes=True,
            memory_limit=memory_limit,
            dashboard_address=":0" if _has_dashboard() else None,
            silence_logs=logging.DEBUG if log.isEnabledFor(logging.DEBUG) else logging.ERROR,
        )
        try:
            with Client(cluster) as client:
                yield client
        finally:
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
        yield client


def _has_dashboard():
    try:
        import bokeh  # noqa: F401
    except ImportError:
        return False
    return True


def _peak_rss():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def worker_memory(client):
    """Peak resident memory of every worker process so far (bytes), for the job report."""
    try:
        peaks = client.run(_peak_rss)
    except Exception:  # a report field must never fail a finished job
        return {}
    return {"count": len(peaks), "peak_rss_bytes": peaks, "max_peak_rss_bytes": max(peaks.values(), default=0)}
