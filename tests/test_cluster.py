"""A real cluster: `dask scheduler` and two `dask worker` processes on 127.0.0.1, the CLI run against it."""

import json
import os
import shlex
import shutil

import pandas as pd
import pytest

from conftest import assert_k_anonymous, dask_processes, microagg_cli
from synthetic import QI, extract

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """Scheduler + 2 single-threaded workers as subprocesses; killed at the end (bounded lifetime)."""
    with dask_processes(tmp_path_factory.mktemp("cluster")) as address:
        yield address


def test_cli_on_an_existing_cluster(tmp_path, scheduler):
    df = extract(30_000, seed=5)
    path = tmp_path / "in.parquet"
    df.to_parquet(path, index=False)
    args = ["--k", 5, "--block-size", 2000, "--blocks-per-task", 4, "--identifiers", "person_id",
            "--qi", ",".join(QI)]
    remote = tmp_path / "remote"
    proc = microagg_cli("anonymize", path, remote, *args, "--scheduler", scheduler, check=True)
    assert "information loss" in proc.stdout
    local = tmp_path / "local"
    microagg_cli("anonymize", path, local, *args, "--scheduler", "synchronous", check=True)
    for part in sorted(local.glob("*.parquet")):
        assert (remote / part.name).read_bytes() == part.read_bytes()
    report = json.loads((remote / "_report.json").read_text())
    assert report["workers"]["count"] == 2 and report["tasks"] >= 2
    assert_k_anonymous(pd.read_parquet(remote), QI, 5)


def test_a_scheduler_without_workers_is_waited_for_then_a_cluster_failure(tmp_path):
    """A scheduler with no worker (a cluster scaled to zero; workers still starting): the job waits
    for one up to --worker-timeout, then exits 4 naming the wait, and writes nothing (it used to wait
    for ever). A worker that joins during the wait runs the job. A job whose every worker leaves
    (Slurm worker jobs past their time limit) exits 4 once none has come back within the timeout."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from conftest import stop_processes

    source = tmp_path / "in.parquet"
    extract(2_000, seed=5).to_parquet(source, index=False)
    args = ["--k", 5, "--qi", ",".join(QI), "--no-evaluate"]
    (tmp_path / "cluster").mkdir()
    with dask_processes(tmp_path / "cluster", workers=0) as address:
        started = time.monotonic()
        proc = microagg_cli("anonymize", "--no-html", source, tmp_path / "never", *args, "--scheduler", address,
                            "--worker-timeout", 3)
        assert proc.returncode == 4, proc.stderr
        assert "has had no worker for 3 s" in proc.stderr and "--worker-timeout" in proc.stderr
        assert time.monotonic() - started < 60
        assert not (tmp_path / "never").exists() and not [p for p in tmp_path.iterdir() if ".microagg-" in p.name]
        job = tmp_path / "job.toml"  # the job file's key
        job.write_text(f'[input]\npath = "{source}"\n[output]\npath = "{tmp_path / "never"}"\n[anonymize]\nk = 5\n'
                       f'[evaluate]\nrun = false\n[cluster]\nscheduler = "{address}"\nworker_timeout = 2\n')
        proc = microagg_cli("run", job)
        assert proc.returncode == 4 and "has had no worker for 2 s" in proc.stderr, proc.stderr
        job = subprocess.Popen([str(Path(sys.executable).with_name("microagg")), "anonymize", "--no-html", str(source),
                                str(tmp_path / "late"), *map(str, args), "--scheduler", address],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        assert job.poll() is None  # waiting
        worker = subprocess.Popen([str(Path(sys.executable).with_name("dask")), "worker", address, "--nthreads", "1",
                                   "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _, err = job.communicate(timeout=120)
            assert job.returncode == 0, err
            # every worker lost during a job and none back within the timeout: exit 4, nothing written;
            # also for a job started with SIGINT ignored (`&` in a script: it used to wait for ever)
            large = tmp_path / "large.parquet"
            extract(300_000, seed=6).to_parquet(large, index=False)
            for sigint in (signal.SIG_DFL, signal.SIG_IGN):  # SIG_DFL: Python's KeyboardInterrupt handler
                if worker.poll() is not None:
                    worker = subprocess.Popen(worker.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                job = subprocess.Popen([str(Path(sys.executable).with_name("microagg")), "--log-format", "json",
                                        "anonymize", "--no-html", str(large), str(tmp_path / "lost"), *map(str, args),
                                        "--scheduler", address, "--worker-timeout", "3"],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))
                for line in job.stderr:
                    if '"stage":"blocks","status":"started"' in line:
                        break
                stop_processes([worker])
                gone = time.monotonic()
                _, err = job.communicate(timeout=120)
                assert job.returncode == 4, (sigint, err)
                assert "lost every worker during the job and has had none for 3 s" in err
                assert time.monotonic() - gone < 60
                assert not (tmp_path / "lost").exists()
                assert not [p for p in tmp_path.iterdir() if ".microagg-" in p.name]
        finally:
            stop_processes([worker])
    assert_k_anonymous(pd.read_parquet(tmp_path / "late"), QI, 5)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_workers_that_do_not_see_the_input_or_the_output_are_named(tmp_path):
    """A worker in a mount namespace where the directory ``hidden`` is an empty tmpfs: the job's input
    there, or its output there, is refused before any work, naming the path; nothing is left behind."""
    hidden, seen, cluster = tmp_path / "hidden", tmp_path / "seen", tmp_path / "cluster"
    for folder in (hidden, seen, cluster):
        folder.mkdir()
    df = extract(2_000, seed=5)
    for folder in (hidden, seen):
        df.to_parquet(folder / "in.parquet", index=False)

    def unshared(command):
        return ["unshare", "-m", "sh", "-c", f"mount -t tmpfs tmpfs {shlex.quote(str(hidden))} && exec "
                + shlex.join(command)]

    args = ["--k", 5, "--qi", ",".join(QI), "--no-evaluate"]
    with dask_processes(cluster, workers=1, wrap=unshared) as address:
        for source, out, shown in ((hidden / "in.parquet", seen / "release", str(hidden / "in.parquet")),
                                   (seen / "in.parquet", hidden / "release", str(hidden / ".release.microagg-tmp-"))):
            proc = microagg_cli("anonymize", source, out, *args, "--scheduler", address)
            assert proc.returncode == 2, proc.stderr
            assert "1 Dask worker(s) cannot see " + repr(shown)[:-1] in proc.stderr, proc.stderr
            assert not out.exists() and not [p for p in os.listdir(out.parent) if ".microagg-" in p]


def test_workers_with_other_package_versions_are_refused(scheduler):
    """The client checks the workers' microagg, numpy, numba, pandas and pyarrow before reading
    anything: the real workers match; a client that sees other versions refuses the cluster with a
    ClusterError naming the worker, the package and both versions."""
    from distributed import Client

    from microagg.jobs import cluster
    from microagg.pipeline.errors import ClusterError

    with Client(scheduler, timeout="10s") as client:
        cluster.check_workers(client)  # same venv: passes
        here = cluster.package_versions()
        with pytest.raises(ClusterError) as caught:
            cluster.check_workers(client, {**here, "numba": "0.0.1"})
    message = str(caught.value)
    assert message.startswith("2 package version(s) differ")
    assert f"numba {here['numba']} (here 0.0.1)" in message and "tcp://127.0.0.1:" in message


def test_version_mismatches_lists_every_difference():
    from microagg.jobs.cluster import version_mismatches

    here = {"microagg": "0.2.0", "numpy": "2.4.6", "numba": "0.68.1", "pandas": "3.1.1", "pyarrow": "26.0.1"}
    workers = {"tcp://b:1": dict(here), "tcp://a:1": {**here, "microagg": None, "pyarrow": "25.0.0"}}
    assert version_mismatches(here, workers) == [
        "worker tcp://a:1: microagg not installed (here 0.2.0)",
        "worker tcp://a:1: pyarrow 25.0.0 (here 26.0.1)",
    ]


def _distributed_log_level():
    import logging

    return logging.getLogger("distributed").level


def test_the_embedded_process_cluster_silences_its_workers_before_shutting_them_down(monkeypatch):
    """A worker whose heartbeat crosses the scheduler's closing logs an ERROR and a traceback: the
    embedded cluster's workers are told to log nothing more before they are shut down."""
    import logging

    from microagg.jobs import cluster

    levels = []
    real = cluster._quiet_workers

    def spy(client):
        real(client)
        levels.append(client.run(_distributed_log_level))

    monkeypatch.setattr(cluster, "_quiet_workers", spy)
    with cluster.dask_client(workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB") as client:
        assert client.submit(sum, [1, 2]).result() == 3
        assert set(client.run(_distributed_log_level).values()) != {logging.CRITICAL + 1}
    assert len(levels) == 1 and len(levels[0]) == 2
    assert set(levels[0].values()) == {logging.CRITICAL + 1}


def test_a_heartbeat_failure_while_the_embedded_thread_cluster_closes_is_not_logged(monkeypatch, caplog):
    """A worker thread's heartbeat that crosses the embedded scheduler's closing logs an ERROR and a
    traceback ("Failed to communicate with scheduler during heartbeat"), seen under load in a failed
    job's stderr after its one paragraph of error: it is dropped while the cluster closes, and only
    then (during the job, or after, such a record is logged)."""
    import logging

    from distributed import LocalCluster

    from microagg.jobs import cluster

    message = "Failed to communicate with scheduler during heartbeat."
    worker_log = logging.getLogger("distributed.worker")
    real_close = LocalCluster.close

    def close(self, *args, **kwargs):
        worker_log.error(message, exc_info=ConnectionError("the scheduler closed"))  # the race, forced
        return real_close(self, *args, **kwargs)

    monkeypatch.setattr(LocalCluster, "close", close)
    with caplog.at_level(logging.ERROR, logger="distributed.worker"):
        with cluster.dask_client(workers=1, threads_per_worker=1, processes=False) as client:
            assert client.submit(sum, [1, 2]).result() == 3
            worker_log.error(message)  # during the job: logged
        assert [r.getMessage() for r in caplog.records if r.name == "distributed.worker"] == [message]
        worker_log.error(message)  # after: logged again
    assert [r.getMessage() for r in caplog.records if r.name == "distributed.worker"] == [message, message]


def test_the_embedded_process_cluster_starts_its_workers_with_the_allocator_settings(monkeypatch):
    """Dask's nanny would start them with a 64 KiB trim threshold (every large array then page-faulted
    afresh); a variable the user set wins."""
    from microagg.jobs import cluster

    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1048576")
    assert cluster.allocator_settings() == {"MALLOC_MMAP_THRESHOLD_": 16 * 2**20, "MALLOC_TRIM_THRESHOLD_": 2**20}
    with cluster.dask_client(workers=1, threads_per_worker=1, processes=True, memory_limit="8GiB") as client:
        (env,) = client.run(cluster._allocator_environment).values()
    assert env == {"MALLOC_MMAP_THRESHOLD_": str(16 * 2**20), "MALLOC_TRIM_THRESHOLD_": "1048576"}
    assert cluster.tune_allocator(processes=False) == {}  # workers as threads: set in this process
    # a worker under 2 GiB keeps Dask's frugal setting (the thresholds took workers of 1 and 1.5 GiB past
    # Dask's pause); from 2 GiB on it gets the thresholds (faster there); Dask's nanny left the variables
    # it gave the workers in this process's environment (monkeypatch restores them at the end)
    for name in cluster.ALLOCATOR_THRESHOLDS:
        monkeypatch.delenv(name, raising=False)
    assert cluster.allocator_settings("1.5GiB") == {"MALLOC_TRIM_THRESHOLD_": 65536}
    assert cluster.allocator_settings(2 * 2**30 - 1) == {"MALLOC_TRIM_THRESHOLD_": 65536}
    assert cluster.allocator_settings("2GiB") == cluster.ALLOCATOR_THRESHOLDS
    assert cluster.allocator_settings(8 * 2**30) == cluster.ALLOCATOR_THRESHOLDS
    with cluster.dask_client(workers=1, threads_per_worker=1, processes=True, memory_limit="1GiB") as client:
        (env,) = client.run(cluster._allocator_environment).values()
    assert env == {"MALLOC_MMAP_THRESHOLD_": None, "MALLOC_TRIM_THRESHOLD_": "65536"}


def _profiled(dask_worker):
    """Run on a worker: whether Dask's statistical profiler samples its threads."""
    return "profile" in dask_worker.periodic_callbacks


@pytest.mark.parametrize("processes", [False, True])
def test_the_embedded_cluster_s_workers_run_without_dask_s_profiler(processes):
    """Its sampling every 10 ms holds the interpreter lock, which the block tasks (threads of this
    process by default) then waited for at each kernel's return (BENCHMARKS.md, forty-third session)."""
    from distributed import LocalCluster

    from microagg.jobs import cluster

    with cluster.dask_client(workers=1, threads_per_worker=1, processes=processes, memory_limit="2GiB") as client:
        assert list(client.run(_profiled).values()) == [False]
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as plain:
        assert [_profiled(w) for w in plain.workers.values()] == [True]  # Dask's default, which the check sees


def test_numba_s_code_generator_starts_while_a_cluster_of_this_process_starts():
    """The first kernel a process loads starts Numba's code generator (about 0.3 s, every other thread
    needing a kernel waiting); a cluster whose workers are threads of this process (or the synchronous
    scheduler) starts it aside, a cluster of worker processes leaves this process alone."""
    import subprocess
    import sys

    code = ("import sys, threading\n"
            "from microagg import kernels\n"
            "from microagg.jobs import cluster\n"
            "assert not kernels.exact_column_sums.signatures\n"
            "with cluster.dask_client(sys.argv[1], workers=1, threads_per_worker=1, memory_limit='2GiB',\n"
            "                         processes=sys.argv[2] == 'processes'):\n"
            "    [t.join() for t in threading.enumerate() if t.name == 'microagg-warm-kernels']\n"
            "    print(len(kernels.exact_column_sums.signatures))\n")
    loaded = {}
    for scheduler, shape in (("local", "threads"), ("synchronous", "threads"), ("local", "processes")):
        proc = subprocess.run([sys.executable, "-c", code, scheduler, shape], capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        loaded[scheduler, shape] = int(proc.stdout.split()[-1])
    # both layouts the sums run on: a partition's column-major block and a row-major array
    assert loaded == {("local", "threads"): 2, ("synchronous", "threads"): 2, ("local", "processes"): 0}


def test_the_cli_gives_arrow_the_system_allocator_unless_told_otherwise(monkeypatch):
    import pyarrow

    from microagg.jobs import cluster

    monkeypatch.setenv(cluster.ARROW_POOL_VARIABLE, "mimalloc")  # the user's choice stands
    before = pyarrow.default_memory_pool().backend_name
    cluster.use_system_allocator()
    assert os.environ[cluster.ARROW_POOL_VARIABLE] == "mimalloc"
    assert pyarrow.default_memory_pool().backend_name == before
    monkeypatch.delenv(cluster.ARROW_POOL_VARIABLE)
    cluster.use_system_allocator()
    assert os.environ[cluster.ARROW_POOL_VARIABLE] == "system"  # for the worker processes it starts
    assert pyarrow.default_memory_pool().backend_name == "system"


def test_workers_that_page_fault_for_nothing_are_named(tmp_path, caplog):
    """Workers started by hand under Dask's nanny default (a 64 KiB trim threshold, no mmap threshold)
    with the memory for better settings: the CLI says how to start them (a warning, not a refusal)."""
    import logging

    from distributed import Client

    from microagg.jobs import cluster

    assert cluster.faults_pages({"MALLOC_TRIM_THRESHOLD_": "65536", "MALLOC_MMAP_THRESHOLD_": None}, 0)
    assert cluster.faults_pages({"MALLOC_TRIM_THRESHOLD_": "65536", "MALLOC_MMAP_THRESHOLD_": None}, 8 * 2**30)
    assert cluster.faults_pages({"MALLOC_TRIM_THRESHOLD_": "65536", "MALLOC_MMAP_THRESHOLD_": None}, 2**31)
    assert not cluster.faults_pages({"MALLOC_TRIM_THRESHOLD_": "65536", "MALLOC_MMAP_THRESHOLD_": None}, 2**31 - 1)
    assert not cluster.faults_pages({"MALLOC_TRIM_THRESHOLD_": None, "MALLOC_MMAP_THRESHOLD_": None}, 0)  # no nanny
    assert not cluster.faults_pages({k: str(v) for k, v in cluster.ALLOCATOR_THRESHOLDS.items()}, 0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    with dask_processes(tmp_path, workers=1, env=env, memory_limit="8GiB") as address, Client(address) as client:
        with caplog.at_level(logging.WARNING, logger="microagg"):
            cluster.check_workers(client)
        assert len(cluster.page_faulting_workers(client)) == 1
    assert "1 of 1 Dask worker(s) run with Dask's default allocator setting" in caplog.text


def test_a_worker_s_peak_memory_is_its_own_not_that_of_the_process_that_started_it():
    """The report's peak memory per worker: ``getrusage``'s ``ru_maxrss`` keeps the high-water mark of the
    process a job was started from (Linux carries it across ``exec``: the benchmark, large after its floor's
    runs, made a 2.8 GiB job report 3.7 GiB). ``_peak_rss`` reads the process's own."""
    import subprocess
    import sys

    import numpy as np

    held = np.ones(768 * 2**20 // 8)  # 768 MiB, touched, in this (the starting) process
    code = ("import resource; from microagg.jobs.cluster import _peak_rss; "
            "print(_peak_rss(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")
    own, inherited = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                             check=True).stdout.split())
    assert held.sum() > 0
    if sys.platform.startswith("linux"):
        assert inherited >= 768 * 2**20  # what ru_maxrss says of the started process
    assert 0 < own < 512 * 2**20
