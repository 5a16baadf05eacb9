"""deploy/slurm/ on a real Slurm: the one-host cluster of deploy/slurm/one-host-slurm.sh with two
nodes (Debian's slurmctld, a slurmd per node and munged as root, all their files in a temporary
directory), the sbatch script and the dask-jobqueue example run through sbatch as a site would run
them: one Dask worker on each node.

Slow (`make bench`, not CI) and skipped where Slurm's and MUNGE's daemons are not installed
(`apt-get install -y slurm-wlm munge`) or the tests do not run as root; the jobqueue test is skipped
without dask-jobqueue (`pip install -e '.[slurm]'`).
"""

import os
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, assert_k_anonymous, microagg_cli
from microagg.jobs.cluster import ALLOCATOR_THRESHOLDS
from microagg.pipeline.generate import IDENTIFIERS, QUASI_IDENTIFIERS
from test_deploy import CENSUS_CSV, _processes_mentioning, assert_release

SLURM = ROOT / "deploy" / "slurm"
BIN = Path(sys.executable).parent
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def _free_port_triple():
    """A port p with p + 1 and p + 2 free too (slurmctld's and the two slurmd's), away from a one-host
    Slurm on 16817."""
    for _ in range(50):
        port = random.randrange(20000, 30000)
        try:
            for p in (port, port + 1, port + 2):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
    raise RuntimeError("no three free ports in a row")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The environment of a client of a fresh one-host Slurm (``SLURM_CONF``), microagg's venv first on
    the PATH; the daemons are stopped afterwards."""
    if not all(shutil.which(d, path=f"{os.environ['PATH']}:/usr/sbin") for d in ("slurmctld", "slurmd", "munged")):
        pytest.skip("Slurm is not installed (apt-get install -y slurm-wlm munge)")
    if os.geteuid() != 0:
        pytest.skip("the one-host Slurm runs its daemons as root")
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "MICROAGG_SLURM_PORT": str(_free_port_triple()), "MICROAGG_SLURM_NODES": "2"}
    start = subprocess.run([str(SLURM / "one-host-slurm.sh"), "start", str(state)], capture_output=True, text=True,
                           env=env, timeout=120)
    try:
        assert start.returncode == 0, start.stdout + start.stderr
        assert start.stdout.strip() == f"export SLURM_CONF={state}/slurm.conf"
        yield {**env, "SLURM_CONF": str(state / "slurm.conf"), "PATH": f"{BIN}:{env['PATH']}",
               # submitted from each test's directory (the scheduler file's directory goes there)
               "MICROAGG_VENV": str(BIN.parent), "MICROAGG_DEPLOY_DIR": str(ROOT / "deploy"),
               # the test suite's own Numba cache, not the recipes' shared generic one (a cold compile)
               "NUMBA_CACHE_DIR": "", "NUMBA_CPU_NAME": ""}
    finally:
        subprocess.run([str(SLURM / "one-host-slurm.sh"), "stop", str(state)], timeout=60)


def sbatch(env, cwd, *args):
    """Submit from ``cwd``; returns the job id."""
    proc = subprocess.run(["sbatch", "--parsable", *map(str, args)], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def job_fields(env, job):
    out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, env=env,
                         timeout=30).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def wait_for_job(env, job, timeout=300):
    """``(state, exit code)`` of a Slurm job once it has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fields = job_fields(env, job)
        if fields.get("JobState") in ENDED:
            return fields["JobState"], fields["ExitCode"]
        time.sleep(0.5)
    raise AssertionError(f"Slurm job {job} still {job_fields(env, job).get('JobState')} after {timeout} s")


def queued(env, name):
    out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True, env=env,
                         timeout=30).stdout
    return out.split()


def wait_until(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.5)


def census_job(path, k, output="releases/{date}"):
    path.write_text(f'[input]\npath = "{CENSUS_CSV}"\n\n[output]\npath = "{output}"\n\n'
                    f'[anonymize]\nk = {k}\nblock_size = 300\nblocks_per_task = 1\n')
    return path


# two nodes: the scheduler and the job on the first, a worker of one thread on each
ALLOCATION = ["--nodes=2", "--cpus-per-task=1", "--mem=3G"]


def test_the_sbatch_script_runs_a_job_file_on_slurm_and_leaves_nothing_behind(tmp_path, slurm):
    job = census_job(tmp_path / "census.toml", 4)
    log = tmp_path / "export.log"
    jid = sbatch(slurm, tmp_path, *ALLOCATION, f"--output={log}",
                 SLURM / "microagg-export.sbatch", job, "--date", "2026-03-04")
    state, code = wait_for_job(slurm, jid)
    text = log.read_text()
    assert (state, code) == ("COMPLETED", "0:0"), text
    assert job_fields(slurm, jid)["NumNodes"] == "2"
    assert_release(tmp_path / "releases" / "2026-03-04", 4, workers=2)  # one per node
    assert f"-> {tmp_path}/releases/2026-03-04 " in text, "validated with the run's own --date"
    assert "Traceback" not in text, "the scheduler was stopped under live workers"
    work = tmp_path / f".microagg-slurm-{jid}"
    assert not work.exists(), "the scheduler file's directory is removed on exit"
    wait_until(lambda: not _processes_mentioning(str(work)), 30, "a Dask process outlived the batch job")


def test_the_sbatch_script_fails_a_bad_job_file_with_its_exit_code_before_starting_dask(tmp_path, slurm):
    job = tmp_path / "bad.toml"
    job.write_text('[input]\npath = "x.csv"\n\n[output]\npath = "out"\n\n[anonymize]\nk = 1\n')
    log = tmp_path / "bad.log"
    jid = sbatch(slurm, tmp_path, *ALLOCATION, f"--output={log}",
                 SLURM / "microagg-export.sbatch", job)
    assert wait_for_job(slurm, jid) == ("FAILED", "2:0"), log.read_text()
    assert "[anonymize] k" in log.read_text()
    assert "Dask scheduler at" not in log.read_text()
    assert not (tmp_path / f".microagg-slurm-{jid}").exists()


def test_scancel_in_the_middle_keeps_the_previous_release_and_the_next_run_completes(tmp_path, slurm):
    data = tmp_path / "extract"
    microagg_cli("generate", data, "--rows", 300_000, "--files", 3, "--seed", 1, "--scheduler", "synchronous",
                 check=True, timeout=120)
    job = tmp_path / "extract.toml"

    def write_job(k):
        job.write_text(f'[input]\npath = "{data}"\n\n[output]\npath = "release"\n\n'
                       f'[anonymize]\nk = {k}\nquasi_identifiers = {list(QUASI_IDENTIFIERS)}\n'
                       f'identifiers = {list(IDENTIFIERS)}\nblock_size = 1000\nblocks_per_task = 4\n')

    out = tmp_path / "release"
    write_job(5)
    first = sbatch(slurm, tmp_path, *ALLOCATION, f"--output={tmp_path}/first.log",
                   SLURM / "microagg-export.sbatch", job)
    assert wait_for_job(slurm, first) == ("COMPLETED", "0:0"), (tmp_path / "first.log").read_text()
    previous = {p.name: p.read_bytes() for p in sorted(out.iterdir())}

    write_job(10)
    log = tmp_path / "cancelled.log"
    jid = sbatch(slurm, tmp_path, *ALLOCATION, f"--output={log}",
                 SLURM / "microagg-export.sbatch", job)
    scheduler_file = tmp_path / f".microagg-slurm-{jid}" / "scheduler.json"
    wait_until(lambda: scheduler_file.exists() and scheduler_file.stat().st_size, 120, "no Dask scheduler")
    from distributed import Client

    with Client(scheduler_file=str(scheduler_file), timeout="30s") as client:  # the job's tasks are running
        wait_until(lambda: any(client.processing().values()), 120, "no task ever ran")
        workers = client.scheduler_info()["workers"].values()
        # 85 % of --mem=3G each; from 2 GiB on a worker gets the CLI's allocator settings (jobs/cluster.py)
        assert [w["memory_limit"] for w in workers] == [3072 * 85 // 100 * 2**20] * 2
        assert [w["nthreads"] for w in workers] == [1, 1]
        allocator = client.run(lambda: {name: os.environ.get(name) for name in ALLOCATOR_THRESHOLDS})
        assert list(allocator.values()) == [{name: str(v) for name, v in ALLOCATOR_THRESHOLDS.items()}] * 2
    subprocess.run(["scancel", jid], env=slurm, check=True, timeout=30)
    state, _ = wait_for_job(slurm, jid)
    assert state == "CANCELLED", log.read_text()
    assert "terminated (SIGTERM); nothing was written" in log.read_text()  # the job unwound, as for Ctrl-C
    assert {p.name: p.read_bytes() for p in sorted(out.iterdir())} == previous, "the previous release changed"
    assert not (tmp_path / f".microagg-slurm-{jid}").exists()
    wait_until(lambda: not _processes_mentioning(str(tmp_path / f".microagg-slurm-{jid}")), 30,
               "a Dask process outlived the cancelled job")

    again = sbatch(slurm, tmp_path, *ALLOCATION, f"--output={tmp_path}/again.log",
                   SLURM / "microagg-export.sbatch", job)
    assert wait_for_job(slurm, again) == ("COMPLETED", "0:0"), (tmp_path / "again.log").read_text()
    assert not list(tmp_path.glob(".release.microagg-*")), "a temporary directory was left"
    released = pd.read_parquet(out)
    assert len(released) == 300_000
    assert_k_anonymous(released, QUASI_IDENTIFIERS, 10)


def test_the_jobqueue_example_runs_a_job_file_on_slurm_worker_jobs(tmp_path, slurm):
    pytest.importorskip("dask_jobqueue")
    job = census_job(tmp_path / "census.toml", 3)
    proc = subprocess.run([sys.executable, str(SLURM / "jobqueue_export.py"), str(job), "--date", "2026-03-05",
                           "--jobs", "2", "--cores", "1", "--memory", "3GB", "--walltime", "00:20:00",
                           "--start-timeout", "120s"],
                          capture_output=True, text=True, env=slurm, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_release(tmp_path / "releases" / "2026-03-05", 3, workers=2)
    logs = sorted((tmp_path / "microagg-slurm-logs").glob("microagg-worker-*.err"))
    assert len(logs) == 2, "one Slurm job per Dask worker"
    wait_until(lambda: not queued(slurm, "microagg-worker"), 60, "worker jobs outlived the export")
