#!/usr/bin/env bash
# Start one Dask worker on this host, in the foreground, connected to the scheduler.
#
#   deploy/plain/start-worker.sh tcp://HOST:8786
#   NTHREADS=16 MEMORY_LIMIT=60GiB deploy/plain/start-worker.sh tcp://HOST:8786
#   deploy/plain/start-worker.sh --scheduler-file /shared/scheduler.json
#
# One worker process with one thread per core: microagg's Numba kernels release the GIL, so the
# threads run kernels in parallel (no process pool, no pickling of blocks between processes).
# Environment: NTHREADS (default: the cores this process may use), MEMORY_LIMIT (default auto: the
# host's memory; leave room for anything else on the host), LOCAL_DIRECTORY (spill space, default
# $TMPDIR or /tmp: a local disk), DASK (the dask command). Extra arguments go to `dask worker`.
set -euo pipefail

if [ $# -lt 1 ]; then
    echo "usage: start-worker.sh tcp://SCHEDULER:8786 [dask worker options]" >&2
    exit 2
fi

# A killed peer stalls this worker's fetches from it for the connect timeout: 10 s, not Dask's 30 s
# (jobs/cluster.py: PEER_CONNECT_TIMEOUT).
export DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="${DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT:-10s}"
# Arrow's buffers from malloc: a fresh process reads Parquet faster (jobs/cluster.py: use_system_allocator)
export ARROW_DEFAULT_MEMORY_POOL="${ARROW_DEFAULT_MEMORY_POOL:-system}"
# glibc's allocator in the worker process Dask's nanny starts: fresh pages from the kernel only for
# arrays above 16 MiB, freed memory kept up to 32 MiB (Dask's default, 64 KiB, page-faults every
# large array afresh; jobs/cluster.py: ALLOCATOR_THRESHOLDS). For a worker under 2 GiB, set
# DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON='{}' to keep Dask's default (it holds less memory there).
allocator='{"MALLOC_MMAP_THRESHOLD_": 16777216, "MALLOC_TRIM_THRESHOLD_": 33554432}'
export DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON="${DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON:-$allocator}"

exec "${DASK:-dask}" worker \
    --nthreads "${NTHREADS:-$(nproc)}" \
    --nworkers 1 \
    --memory-limit "${MEMORY_LIMIT:-auto}" \
    --local-directory "${LOCAL_DIRECTORY:-${TMPDIR:-/tmp}}" \
    "$@"
