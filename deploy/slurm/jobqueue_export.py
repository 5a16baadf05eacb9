"""Run a microagg job file on Slurm workers started by dask-jobqueue.

Run it where you may submit jobs (a login node, or a small allocation of its own: the scheduler and
``microagg run`` live in this process's node for the whole export):

    pip install dask-jobqueue            # next to microagg, in the environment the workers use too
    python deploy/slurm/jobqueue_export.py deploy/jobs/nightly-export.toml --jobs 4 --cores 32 \\
        --memory 120GB --walltime 04:00:00 --account myproject --queue compute
    python deploy/slurm/jobqueue_export.py JOB.toml --dry-run      # print the workers' batch script

Each Slurm job is one Dask worker: one process (``processes=1``) running ``--cores`` threads, since
microagg's Numba kernels release the GIL. ``SLURMCluster`` starts the scheduler here; once the
workers are up, the job file runs through ``microagg run`` with its ``[cluster] scheduler`` pointed at
this scheduler (a copy written by deploy/job_for_scheduler.py). The job file's input and output must
be on a filesystem the workers mount at the same paths. Exit code: ``microagg run``'s.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent.parent
# glibc's allocator in the worker processes: fresh pages from the kernel only for arrays above 16 MiB,
# freed memory kept up to 32 MiB (Dask's default page-faults every large array afresh;
# jobs/cluster.py: ALLOCATOR_THRESHOLDS)
ALLOCATOR = '{"MALLOC_MMAP_THRESHOLD_": 16777216, "MALLOC_TRIM_THRESHOLD_": 33554432}'


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("job", help="the microagg job file (TOML)")
    p.add_argument("--date", default=None, help="the {date} of the job's paths (default: today, UTC)")
    p.add_argument("--jobs", type=int, default=4, help="Slurm jobs = Dask workers (default 4)")
    p.add_argument("--cores", type=int, default=32, help="CPUs per Slurm job = threads of its worker")
    p.add_argument("--memory", default="120GB", help="memory per Slurm job (Dask's limit for the worker)")
    p.add_argument("--walltime", default="04:00:00", help="time limit of each worker job")
    p.add_argument("--queue", default=None, help="partition (#SBATCH -p)")
    p.add_argument("--account", default=None, help="account (#SBATCH -A)")
    p.add_argument("--interface", default=None, help="network interface for Dask traffic, e.g. ib0")
    p.add_argument("--directive", action="append", default=[], metavar="OPTION",
                   help="extra #SBATCH option for the worker jobs, e.g. --directive=--constraint=avx2 (repeatable)")
    p.add_argument("--local-directory", default="${TMPDIR:-/tmp}",
                   help="worker spill directory (node-local disk; expanded by the worker job's shell)")
    p.add_argument("--log-directory", default="microagg-slurm-logs", help="where the worker jobs' logs go")
    p.add_argument("--start-timeout", default="30 minutes", help="how long to wait for the workers (queue time)")
    p.add_argument("--dry-run", action="store_true", help="print the worker job script and exit")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    microagg = shutil.which("microagg") or str(Path(sys.executable).with_name("microagg"))
    checked = subprocess.run([microagg, "validate", args.job, *(["--date", args.date] if args.date else [])])
    if checked.returncode != 0:
        return checked.returncode  # a bad job file fails before anything is queued

    from dask.distributed import Client
    from dask.utils import parse_bytes
    from dask_jobqueue import SLURMCluster

    from microagg.jobs.cluster import roomy  # the CLI's rule: which workers get the thresholds

    cache = os.environ.get("NUMBA_CACHE_DIR") or str(Path.cwd() / ".numba-cache")
    cluster = SLURMCluster(
        cores=args.cores,
        processes=1,                      # one worker process per job, args.cores threads
        memory=args.memory,
        walltime=args.walltime,
        queue=args.queue,
        account=args.account,
        interface=args.interface,
        job_name="microagg-worker",
        job_extra_directives=args.directive,   # e.g. ["--constraint=avx2", "--exclusive"]
        job_script_prologue=[
            f"export NUMBA_CACHE_DIR={cache}",  # shared and writable: kernels compiled once, then reused
            # one cache for every node of a mixed partition: code for any CPU with AVX2 and FMA, as fast
            # as the node's own (generic: about 10 % slower); microagg falls back to generic without them
            "export NUMBA_CPU_NAME=x86-64-v3",
            # a killed peer stalls fetches for 10 s, not Dask's 30 (jobs/cluster.py: PEER_CONNECT_TIMEOUT)
            "export DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=10s",
            # Arrow's buffers from malloc: a fresh process reads Parquet faster (jobs/cluster.py)
            "export ARROW_DEFAULT_MEMORY_POOL=system",
            # not for workers under 2 GiB, where Dask's default holds less (jobs/cluster.py: FRUGAL_THRESHOLDS)
            *([f"export DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON='{ALLOCATOR}'"]
              if roomy(parse_bytes(args.memory)) else []),
        ],
        local_directory=args.local_directory,
        log_directory=args.log_directory,
        python=sys.executable,                  # the workers run this environment's Python
        scheduler_options={"dashboard_address": ":0"},
    )
    try:
        if args.dry_run:
            print(cluster.job_script())
            return 0
        print(f"Dask dashboard: {cluster.dashboard_link}", flush=True)
        cluster.scale(jobs=args.jobs)
        with Client(cluster) as client:
            client.wait_for_workers(args.jobs, timeout=args.start_timeout)
            sys.path.insert(0, str(DEPLOY))
            from job_for_scheduler import write

            with tempfile.TemporaryDirectory(prefix="microagg-slurm-") as tmp:
                job = write(args.job, cluster.scheduler_address, tmp)
                run = subprocess.run([microagg, "run", job, *(["--date", args.date] if args.date else [])])
        return run.returncode
    finally:
        cluster.close()


if __name__ == "__main__":
    sys.exit(main())
