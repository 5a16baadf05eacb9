"""A real cluster: `dask scheduler` and two `dask worker` processes on 127.0.0.1, the CLI run against it."""

import json

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
