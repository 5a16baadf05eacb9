"""A real cluster: `dask scheduler` and two `dask worker` processes on 127.0.0.1, the CLI run against it."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import assert_k_anonymous, cluster_address, microagg_cli, stop_processes
from synthetic import QI, extract

pytestmark = pytest.mark.cluster
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """Scheduler + 2 single-threaded workers as subprocesses; killed at the end (bounded lifetime)."""
    root = tmp_path_factory.mktemp("cluster")
    info = root / "scheduler.json"
    common = ["--no-dashboard"]
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--scheduler-file", str(info), *common],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not info.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the dask scheduler did not start within 60 s")
            time.sleep(0.2)
        for i in range(2):
            procs.append(subprocess.Popen(
                [str(BIN / "dask"), "worker", "--scheduler-file", str(info), "--nthreads", "1", "--nworkers", "1",
                 "--host", "127.0.0.1", "--name", f"w{i}", "--memory-limit", "2GiB", *common],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield cluster_address(info, workers=2)
    finally:
        stop_processes(procs)


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
