import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
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
    """Run the installed console command as a user would: a process of its own, with this process's
    environment, directory and streams captured; forked from the command server (tests/cli_server.py)
    where it can be, else started as a plain subprocess."""
    argv = [str(Path(sys.executable).with_name("microagg")), *map(str, args)]
    proc = _forked(argv, timeout) or subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"microagg {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


_ENVIRONMENT = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}  # the server's
_SERVER = {}


@pytest.fixture(autouse=True)
def _environment_restored():
    """Each test leaves this process's environment as it found it. ``cli.main`` called in this process
    sets variables for the processes it starts (``ARROW_DEFAULT_MEMORY_POOL``,
    ``DASK_LOGGING__DISTRIBUTED``), and they stayed: every later command of this pytest process then
    differed from the command server's environment and was started afresh (1.5 s of a core each), and
    the forked command's own test failed when it ran after such a test."""
    yield
    for name in set(os.environ) - set(_ENVIRONMENT) - {"PYTEST_CURRENT_TEST"}:
        del os.environ[name]
    for name, value in _ENVIRONMENT.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _server():
    """This pytest process's command server, started on first use; None if it cannot serve."""
    if "proc" not in _SERVER:
        proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "cli_server.py")], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=_ENVIRONMENT, bufsize=0)
        _SERVER.update(proc=proc, pending=b"")
        atexit.register(stop_processes, [proc])
        try:
            ready = _answer(120).get("ready") is True
        except TimeoutError:
            ready = False
        if not ready:
            proc.kill()
            proc.wait()
    proc = _SERVER["proc"]
    return proc if proc.poll() is None else None


def _answer(timeout):
    """The server's next answer (a JSON line), waiting at most ``timeout`` seconds (TimeoutError)."""
    proc, deadline = _SERVER["proc"], time.monotonic() + timeout
    while b"\n" not in _SERVER["pending"]:
        if not select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise TimeoutError
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            return {}  # the server is gone
        _SERVER["pending"] += chunk
    line, _, _SERVER["pending"] = _SERVER["pending"].partition(b"\n")
    return json.loads(line)


def _forked(argv, timeout):
    """``argv`` run by a child of the command server, as ``subprocess.run`` gives it; None where the
    server cannot run it: an environment other than the server's (a variable read at import, such as
    an allocator's, would not take effect), or a server that is gone or refuses."""
    if {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"} != _ENVIRONMENT:
        return None
    server = _server()
    if server is None:
        return None
    with tempfile.TemporaryDirectory(prefix="microagg-cli-") as streams:
        out, err = Path(streams) / "stdout", Path(streams) / "stderr"
        umask = os.umask(0)  # read (there is no other way) and put back
        os.umask(umask)
        request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "umask": umask, "out": str(out),
                   "err": str(err)}
        server.stdin.write((json.dumps(request) + "\n").encode())
        started = _answer(60)
        if "pid" not in started:
            return None
        try:
            code = _answer(timeout)["code"]
        except TimeoutError:
            os.kill(started["pid"], signal.SIGKILL)  # as subprocess.run does past its timeout
            _answer(60)
            raise subprocess.TimeoutExpired(argv, timeout, out.read_text(), err.read_text()) from None
        return subprocess.CompletedProcess(argv, code, out.read_text(), err.read_text())


def cluster_address(scheduler_file, workers):
    """The address in a Dask scheduler file, once ``workers`` workers have joined that scheduler."""
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
