import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
# copies of the CASC reference files of shared/data, so the suite runs wherever the clone lives
CENSUS_CSV = ROOT / "pipeline" / "data" / "census.csv"  # bundled with the package (the demo's data)
EIA_CSV = ROOT / "tests" / "data" / "eia.csv"
EIA_NON_QI = ["UTILNAME", "STATE", "YEAR", "MONTH"]

# Published IL of classic MDAV on standardized data (the papers' tables; sdcMicro reproduces them).
PUBLISHED_MDAV_IL = {
    ("census", 3): 5.692, ("census", 5): 9.088, ("census", 10): 14.156,
    ("eia", 3): 0.483, ("eia", 5): 1.667, ("eia", 10): 3.840,
}


@pytest.fixture(scope="session")
def census():
    return pd.read_csv(CENSUS_CSV)


@pytest.fixture(scope="session")
def eia():
    return pd.read_csv(EIA_CSV)


def microagg_cli(*args, check=False, timeout=300):
    """Run the installed console command as a user would."""
    exe = Path(sys.executable).with_name("microagg")
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"microagg {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def cluster_address(scheduler_file, workers):
    """The address in a Dask scheduler file, once ``workers`` workers have joined that scheduler."""
    import json

    from distributed import Client

    address = json.loads(Path(scheduler_file).read_text())["address"]
    with Client(address, timeout="30s") as client:
        if workers:
            client.wait_for_workers(workers, timeout=60)
    return address


@contextmanager
def dask_processes(root, workers=2, env=None, memory_limit="2GiB", wrap=list):
    """``dask scheduler`` and ``workers`` single-threaded ``dask worker`` processes (each under a nanny,
    ``memory_limit``) on 127.0.0.1, as subprocesses: yields the scheduler's address once every worker
    has joined, stops them all on exit (bounded lifetime). ``env``: the workers' environment;
    ``wrap``: the command that starts a worker, from ``dask worker``'s (as is by default)."""
    bin_dir = Path(sys.executable).parent
    info = Path(root) / "scheduler.json"
    common = ["--no-dashboard"]
    procs = [subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--scheduler-file", str(info), *common],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not info.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the dask scheduler did not start within 60 s")
            time.sleep(0.2)
        for i in range(workers):
            procs.append(subprocess.Popen(
                wrap([str(bin_dir / "dask"), "worker", "--scheduler-file", str(info), "--nthreads", "1",
                      "--nworkers", "1", "--host", "127.0.0.1", "--name", f"w{i}", "--memory-limit", memory_limit,
                      *common]),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        yield cluster_address(info, workers=workers)
    finally:
        stop_processes(procs)


def stop_processes(procs):
    """Terminate subprocesses (the last started first), killing any that do not exit within 20 s."""
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def assert_refused(tmp_path, df, qi, k, flags, message):
    """``microagg anonymize`` of ``df`` with ``flags`` fails as bad input (exit 2) with ``message``
    on stderr, and writes nothing."""
    source = tmp_path / "in.parquet"
    df.to_parquet(source, index=False)
    out = tmp_path / "out"
    proc = microagg_cli("anonymize", source, out, "--k", k, "--qi", ",".join(qi), *flags, "--scheduler", "synchronous")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert not out.exists()


def assert_k_anonymous(released, qi, k):
    counts = released.groupby(qi, sort=False).size()
    assert counts.min() >= k, f"a QI tuple occurs {counts.min()} < k={k} times"


@pytest.fixture
def broken_method(monkeypatch):
    """The gate's test hook: a method named "broken" whose labels look valid but leave the last record
    alone in its group (the release is not k-anonymous for any k > 1)."""
    import numpy as np

    from microagg.pipeline import methods

    def broken(Z, k):
        labels = np.arange(len(Z), dtype=np.int64) // k
        labels[-1] = labels.max() + 1
        return labels

    monkeypatch.setitem(methods.METHODS, "broken", methods.Method("broken", "", "test hook", broken))
    return "broken"
