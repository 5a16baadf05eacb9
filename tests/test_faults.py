"""Faults on real processes: a worker killed in the middle of a job (the job completes, byte-identical
to an undisturbed run), the job itself killed or interrupted in the middle of its blocks stage (no
partial release, a previous release intact, the temporary directory cleaned up by the next run), and
the temporary directories of jobs on other hosts (their leases).

The jobs run as ``microagg --log-format json`` subprocesses, each in a process group of its own; the
tests follow their stages on stderr and the cluster's tasks through a ``distributed.Client``.
"""

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import assert_k_anonymous, dask_processes, microagg_cli
from microagg.jobs.cluster import PEER_CONNECT_TIMEOUT
from microagg.pipeline import io
from microagg.pipeline.errors import OutputBusyError, ReleaseGateError
from microagg.pipeline.generate import IDENTIFIERS, QUASI_IDENTIFIERS

BIN = Path(sys.executable).parent
# blocks of 1,000 rows, 4 per task: 400k rows make 128 block tasks (and 127 upper planes)
OPTIONS = ["--qi", ",".join(QUASI_IDENTIFIERS), "--identifiers", ",".join(IDENTIFIERS),
           "--block-size", 1000, "--blocks-per-task", 4]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Generated inputs: 400k rows in 4 files for the real cluster, 200k in 2 for the local clusters."""
    root = tmp_path_factory.mktemp("faults")
    for rows, files in ((400_000, 4), (200_000, 2)):
        microagg_cli("generate", root / f"rows-{rows}", "--rows", rows, "--files", files, "--seed", 1,
                     "--scheduler", "synchronous", check=True, timeout=120)
    return root / "rows-400000", root / "rows-200000"


class Job:
    """``microagg --log-format json ARGS`` in a process group of its own, its stderr read line by line
    (one JSON object each: jobs/logs.py)."""

    def __init__(self, *args, program=None, env=None):
        # A test run in the background of a shell without job control (`&` in a script) ignores
        # SIGINT, and under nohup SIGHUP, and a child inherits that: the job would then ignore Ctrl-C
        # or its terminal closing, as it must when started so. It starts with the handlers a job
        # started from a terminal has (a handler itself is reset to the default by exec).
        ignored = {sig: usual for sig, usual in ((signal.SIGINT, signal.default_int_handler),
                                                 (signal.SIGHUP, signal.SIG_DFL))
                   if signal.getsignal(sig) == signal.SIG_IGN}
        for sig, usual in ignored.items():
            signal.signal(sig, usual)
        try:
            self.proc = subprocess.Popen([*(program or [str(BIN / "microagg")]), "--log-format", "json",
                                          *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         text=True, start_new_session=True, env=env)
        finally:
            for sig in ignored:
                signal.signal(sig, signal.SIG_IGN)
        self.events = []
        self._ended = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stderr:
            try:
                entry = json.loads(line)
            except ValueError:
                entry = {"message": line.rstrip()}
            with self._changed:
                self.events.append(entry)
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, wanted, what, timeout=60):
        """Block until an event meets ``wanted``; fails if the job ends first or after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(wanted(e) for e in self.events):
                left = deadline - time.monotonic()
                if self._ended or left <= 0:
                    raise AssertionError(f"no {what} in the job's log ({'job ended' if self._ended else 'timeout'}); "
                                         f"last events: {self.events[-3:]}")
                self._changed.wait(left)

    def signal(self, sig):
        """``sig`` to the job's whole process group (as a terminal's Ctrl-C does)."""
        os.killpg(self.proc.pid, sig)

    def finish(self, timeout=120):
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code

    def stop(self):
        """Kill what is left of the job (its process group), if anything."""
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


def stage(name, status):
    return lambda e: e.get("event") == "stage" and e.get("stage") == name and e.get("status") == status


def split_tree(e):
    """The blocks stage has drawn its sample and built the split tree: the block tasks come next."""
    return str(e.get("message", "")).startswith("split tree:")


def parquet_files(out):
    return {p.name: p.read_bytes() for p in sorted(Path(out).glob("*.parquet"))}


def all_files(out):
    return {p.name: p.read_bytes() for p in sorted(Path(out).iterdir())}


def temporaries(out):
    out = Path(out)
    return sorted(out.parent.glob(f".{out.name}.microagg-*"))


# --- a worker process killed -----------------------------------------------------------------------

@pytest.fixture
def scheduler(tmp_path):
    """Scheduler + 2 single-threaded workers under nannies (a killed worker process is restarted, as
    in deploy/plain), as subprocesses; killed at the end. The workers give up connecting to a dead
    peer after deploy/'s PEER_CONNECT_TIMEOUT instead of Dask's default 30 s: a worker that was
    fetching from the killed one waits that long before the scheduler's recomputation reaches it."""
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": PEER_CONNECT_TIMEOUT}
    with dask_processes(tmp_path, env=env) as address:
        yield address


@pytest.mark.cluster
@pytest.mark.parametrize("through_files, during, tasks, done_left", [
    (False, "blocks", "solve", (4, 20)), (True, "blocks", "solve", (4, 20)), (True, "gate", None, None)],
    ids=["in-memory", "through-files", "through-files-after-the-blocks"])
def test_a_worker_killed_in_the_middle_of_a_stage(tmp_path, data, scheduler, through_files, during, tasks,
                                                  done_left):
    """The job completes and its release is byte-identical to an undisturbed run's. Through files (forced): the
    routing and block tasks that Dask runs again write their files again (each renamed over the first once whole),
    and read the others'. Killed as the blocks stage ends (the gate starts): the block tasks whose released pieces
    died with the worker run again after the blocks stage, and so do the routing tasks they need, whose files
    went with it (Dask keeps no result that no task still needs: nothing left reads a removed file)."""
    from distributed import Client

    def block_tasks(dask_scheduler, tasks):  # nested: pickled by value, the scheduler cannot import this module
        """The block tasks (keys naming ``tasks``, "solve": each task's solve and its pieces): ``(workers
        processing one, how many are in memory, how many are still to run, results held per worker)``."""
        processing, done, left = set(), 0, 0
        for ts in dask_scheduler.tasks.values():
            if tasks and tasks in str(ts.key):
                if ts.state == "processing":
                    processing.add(ts.processing_on.address)
                done += ts.state == "memory"
                left += ts.state in ("waiting", "queued", "no-worker", "processing")
        held = {ws.address: len(ws.has_what) for ws in dask_scheduler.workers.values()}
        return sorted(processing), done, left, held

    source, _ = data
    killed = tmp_path / "killed"
    release_only = ["--no-evaluate", "--no-html"]  # the release's bytes are the point
    env, program, transit_dirs = _through_files(tmp_path) if through_files else (None, IN_MEMORY, list)
    job = Job("anonymize", source, killed, "--k", 5, *OPTIONS, *release_only, "--scheduler", scheduler,
              program=program, env=env)
    try:
        with Client(scheduler, timeout="30s") as client:
            pids = client.run(os.getpid)
            job.wait_for(stage(during, "started"), f"{during} stage")
            deadline = time.monotonic() + 60
            while True:  # some of the stage's tasks done (their results on both workers), most still to run
                processing, done, left, held = client.run_on_scheduler(block_tasks, tasks=tasks)
                if not tasks:  # at once: the worker holding the most results
                    processing = [max(held, key=held.get)]
                    break
                if processing and done >= done_left[0] and left >= done_left[1]:
                    break
                assert time.monotonic() < deadline and job.proc.poll() is None, (processing, done, left)
                time.sleep(0.02)
            victim = processing[0]
            assert held[victim] > 0  # results (the input's partitions, block pieces) die with it
            os.kill(pids[victim], signal.SIGKILL)
            rerun = False  # block tasks to run again after their stage (its results lost with the worker)
            while not tasks and not rerun and job.proc.poll() is None:
                rerun = client.run_on_scheduler(block_tasks, tasks="solve")[2] > 0
                time.sleep(0.02)
            assert job.finish() == 0, job.events[-3:]
            assert victim not in client.scheduler_info()["workers"]  # the nanny started a new worker process
            assert rerun or tasks
    finally:
        job.stop()
    assert not [e for e in job.events if e.get("level") == "ERROR"]
    undisturbed = tmp_path / "undisturbed"
    microagg_cli("anonymize", source, undisturbed, "--k", 5, *OPTIONS, *release_only, "--scheduler", scheduler,
                 check=True, timeout=120)
    expected = parquet_files(undisturbed)
    assert expected and parquet_files(killed) == expected
    reports = [json.loads((p / "_report.json").read_text()) for p in (killed, undisturbed)]
    assert reports[0]["rows"] == 400_000 and reports[0]["tasks"] >= 100
    assert reports[0]["information_loss"] == reports[1]["information_loss"]
    assert reports[0]["rows_in_transit"] == ("files" if through_files else "memory")
    assert not temporaries(killed) and not transit_dirs()


# --- the job killed or interrupted -----------------------------------------------------------------

def test_a_killed_job_keeps_the_previous_release_and_the_next_run_cleans_up(tmp_path, data):
    _, source = data
    out = tmp_path / "release"
    microagg_cli("anonymize", source, out, "--k", 5, *OPTIONS, check=True, timeout=120)
    first = all_files(out)
    job = Job("anonymize", source, out, "--k", 10, *OPTIONS)  # other options, a local cluster
    try:
        job.wait_for(split_tree, "split tree")
        job.signal(signal.SIGKILL)
        assert job.finish(timeout=30) == -signal.SIGKILL
    finally:
        job.stop()
    assert not any(stage("gate", "started")(e) for e in job.events)  # killed in the blocks stage
    assert all_files(out) == first  # the previous release, byte for byte
    (stale,) = temporaries(out)
    assert stale.is_dir() and stale.name.startswith(f".release.microagg-tmp-{socket.gethostname()}-{job.proc.pid}-")

    microagg_cli("anonymize", source, out, "--k", 10, *OPTIONS, check=True, timeout=120)
    assert not temporaries(out)
    report = json.loads((out / "_report.json").read_text())
    assert report["k"] == 10 and report["rows"] == 200_000 and (out / io.SUCCESS_MARKER).exists()
    released = pd.read_parquet(out)
    assert len(released) == 200_000
    assert_k_anonymous(released, QUASI_IDENTIFIERS, 10)


@pytest.mark.parametrize("sig, code, error, word", [
    (signal.SIGINT, 130, "KeyboardInterrupt", "interrupted"),  # Ctrl-C
    # what a scheduler sends first when it cancels a job (Slurm's scancel or time limit, a Kubernetes
    # pod stopped): the job unwinds as for Ctrl-C
    (signal.SIGTERM, 143, "Terminated", "terminated"),
    (signal.SIGHUP, 129, "HungUp", "hung up"),  # its terminal closed (an ssh session dropped)
])
def test_a_job_interrupted_in_the_middle_exits_with_its_code_and_leaves_nothing(tmp_path, data, sig, code, error,
                                                                                word):
    _, source = data
    out = tmp_path / "release"
    job = Job("anonymize", source, out, "--k", 5, *OPTIONS)
    try:
        job.wait_for(split_tree, "split tree")
        job.signal(sig)
        got = job.finish(timeout=60)
        assert got == code, (got, [e for e in job.events if e.get("event") in ("stage", "failed", "finished")])
    finally:
        job.stop()
    (failed,) = [e for e in job.events if e.get("event") == "failed"]
    assert failed["exit_code"] == code and failed["error"] == error
    assert failed["message"] == f"{word}; nothing was written"
    assert not any(stage("gate", "started")(e) for e in job.events)  # interrupted in the blocks stage
    assert any(stage("blocks", "interrupted")(e) for e in job.events)
    assert not any(stage("blocks", "done")(e) for e in job.events)
    assert not out.exists() and not temporaries(out)


_BLOCKED_TASK = """
import threading
from pathlib import Path
from microagg.pipeline import release

def _route(part, job):  # a task whose read never returns (a hung network filesystem)
    Path(__file__).with_name("blocked").touch()
    threading.Event().wait()

release._route = _route
"""


def test_a_job_whose_task_never_returns_leaves_its_grace_after_a_sigterm(tmp_path, data):
    """SIGTERM while a task of the job's local cluster is blocked in a read that never returns: the
    cluster's shutdown waited for the task (30 s, past a scheduler's grace period), where the job now
    leaves ``MICROAGG_STOP_GRACE`` seconds after the signal, with one failed line saying so and the
    signal's exit code; nothing is left at the output or beside it. The job is the console command,
    started with a module that makes its routing tasks block (``_BLOCKED_TASK``)."""
    _, source = data
    (tmp_path / "inject").mkdir()
    (tmp_path / "inject" / "blocked_task.py").write_text(_BLOCKED_TASK)
    env = {**os.environ, "MICROAGG_STOP_GRACE": "1",
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "inject"), os.environ.get("PYTHONPATH", "")])}
    program = [sys.executable, "-c", "import sys, blocked_task; sys.argv[0] = 'microagg'; "
                                     "from microagg.jobs.cli import console; console()"]
    out = tmp_path / "release"
    job = Job("anonymize", source, out, "--k", 5, *OPTIONS, program=program, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "inject" / "blocked").exists():
            assert job.proc.poll() is None and time.monotonic() < deadline, job.events[-3:]
            time.sleep(0.1)
        job.signal(signal.SIGTERM)
        got = job.finish(timeout=60)
    finally:
        job.stop()
    assert got == 143, job.events[-3:]
    (failed,) = [e for e in job.events if e.get("event") == "failed"]
    assert failed["exit_code"] == 143 and failed["error"] == "Terminated", failed
    assert failed["message"] == "terminated; nothing was written" and failed["stopped_after_grace"] == 1, failed
    assert not out.exists() and not temporaries(out)


def test_ctrl_c_pressed_again_as_the_job_unwinds_stops_it_at_once_in_one_line(tmp_path, data):
    """Ctrl-C pressed again and again as the job unwinds and shuts its cluster down: it leaves with one
    ``failed`` event and no traceback (a second Ctrl-C interrupted Dask's shutdown or the exit
    handlers, which printed their CancelledError and KeyboardInterrupt tracebacks); nothing is left
    behind."""
    _, source = data
    out = tmp_path / "release"
    job = Job("anonymize", source, out, "--k", 5, "--qi", ",".join(QUASI_IDENTIFIERS))
    try:
        job.wait_for(stage("statistics", "started"), "statistics stage")
        while job.proc.poll() is None:  # every 0.05 s until it is gone
            try:
                job.signal(signal.SIGINT)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        got = job.finish(timeout=60)
    finally:
        job.stop()
    assert got == 130
    assert all("level" in e for e in job.events), [e for e in job.events if "level" not in e][:5]  # JSON only
    (failed,) = [e for e in job.events if e.get("event") == "failed"]
    assert failed["exit_code"] == 130 and failed["message"].endswith("nothing was written"), failed
    assert not out.exists()


_ON_A_TERMINAL = """
import fcntl, os, signal, sys, termios
os.setsid()
terminal = os.open(sys.argv[1], os.O_RDWR)  # the new session's controlling terminal
fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)
for n in (0, 1, 2):
    os.dup2(terminal, n)
# SIGHUP as from a login shell (the default, even if pytest runs under nohup), or ignored (nohup's)
signal.signal(signal.SIGHUP, signal.SIG_IGN if sys.argv[2] == "ignored" else signal.SIG_DFL)
os.execv(sys.argv[3], sys.argv[3:])
"""


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
@pytest.mark.parametrize("hangup", ["default", "ignored"])
def test_a_job_whose_terminal_closes_unwinds_and_leaves_nothing(tmp_path, data, hangup):
    """The terminal a job runs on closes (an ssh session dropped, a window shut): the kernel sends it
    SIGHUP, and every later write to the terminal fails (EIO). The job died where it stood, its
    temporary directory left behind; with a handler only, its status line's and its last message's
    writes failed and it exited 1. Now it unwinds: exit 129, nothing at OUTPUT, nothing left beside.
    A job that ignores SIGHUP (started with nohup, or `trap '' HUP`) goes on: its release is written and
    it exits 0, though its status line and summary can no longer be shown (that was exit 1 too)."""
    _, source = data
    out = tmp_path / "release"
    master, slave = os.openpty()
    name = os.ttyname(slave)  # kept open here until the job has it (before, reading the master fails: EIO)
    env = {key: value for key, value in os.environ.items() if key != "CI"}  # a terminal's status line
    proc = subprocess.Popen([sys.executable, "-c", _ON_A_TERMINAL, name, hangup, str(BIN / "microagg"), "anonymize",
                             source, out, "--k", "5", *map(str, OPTIONS)], env=env)
    shown = b""
    try:
        deadline = time.monotonic() + 60
        while b"blocks" not in shown:  # the status line shows the blocks stage
            assert time.monotonic() < deadline and proc.poll() is None, shown.decode(errors="replace")
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                shown += os.read(master, 4096)
        os.close(slave)
        os.close(master)  # the terminal hangs up
        slave = master = None
        assert proc.wait(timeout=120) == (0 if hangup == "ignored" else 129)
    finally:
        for fd in (slave, master):
            if fd is not None:
                os.close(fd)
        if proc.poll() is None:
            proc.kill()
    assert not temporaries(out)
    if hangup == "ignored":
        assert (out / io.SUCCESS_MARKER).exists() and len(pd.read_parquet(out)) == 200_000
    else:
        assert not out.exists()


def test_a_discarded_temporary_directory_goes_although_a_task_still_writes_into_it(tmp_path):
    """A stopped job's tasks may still be starting files in its temporary directory while the job
    removes it (``generate`` stopped while it gathers: the test below left the directory about once in
    a loaded run). Here a thread keeps creating files in it: nothing is left at all."""
    out = tmp_path / "release"
    tmp = io.prepare_output(str(out))
    stop, created = threading.Event(), []

    def task():
        while not stop.is_set():
            try:
                with open(os.path.join(tmp, f"part-{len(created)}.parquet"), "wb") as fh:
                    fh.write(b"PAR1" * 256)
            except FileNotFoundError:
                return
            created.append(1)

    writer = threading.Thread(target=task)
    writer.start()
    try:
        while len(created) < 200:  # the writer is busy
            time.sleep(0.001)
        io.discard_output(tmp)
    finally:
        stop.set()
        writer.join()
    assert not os.path.exists(tmp) and not temporaries(out) and not out.exists()


def test_a_job_interrupted_while_it_gathers_says_one_line(tmp_path):
    """SIGTERM while ``generate`` gathers its files (the first written, the others still running):
    exit 143, nothing at OUTPUT, and its one line on stderr. Dask's abandoned gather printed a "Task
    exception was never retrieved ... AllExit" traceback for each file still pending (about thirty
    here) above that line; ``anonymize`` did so too when stopped in its statistics stage."""
    out = tmp_path / "generated"
    proc = subprocess.Popen([str(BIN / "microagg"), "generate", str(out), "--rows", "20000000", "--files", "40",
                             "--seed", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob(".*microagg-tmp-*/*.parquet")):  # the first file is written
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert err.strip().splitlines() == ["microagg: terminated (SIGTERM); nothing was written"], err
    assert not out.exists() and not temporaries(out)


class _SignalledInFinalizer:
    """Collected at once: its ``__del__`` sends ``signum`` to this process and runs the handler inside
    itself, so Python drops the handler's exception ("Exception ignored in ..."): what happened to a
    job's SIGTERM in CI, arriving while a Dask future's finalizer ran."""

    def __init__(self, signum):
        self.signum = signum

    def __del__(self):
        os.kill(os.getpid(), self.signum)
        for _ in range(10_000):  # the handler runs between two of these bytecodes
            pass


@pytest.mark.parametrize("signum, code, dropped, sentence", [
    (signal.SIGTERM, 143, "Terminated", "terminated (SIGTERM); nothing was written"),
    (signal.SIGINT, 130, "KeyboardInterrupt", "interrupted; nothing was written"),
])
def test_a_signal_whose_exception_python_drops_still_stops_the_job(tmp_path, monkeypatch, capsys, signum, code,
                                                                  dropped, sentence):
    from microagg.jobs import cli
    from microagg.pipeline import release

    out = tmp_path / "release"
    release.run("example:census", out, release.ReleaseOptions(k=3))
    previous = all_files(out)
    lost = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: lost.append(type(u.exc_value).__name__))
    statistics = release.column_statistics

    def signalled(*args, **kwargs):  # in the statistics stage, the signal's exception is dropped
        result = statistics(*args, **kwargs)
        _SignalledInFinalizer(signum)
        return result

    monkeypatch.setattr(release, "column_statistics", signalled)
    ignoring = signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal (see Job)
    try:
        handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        got = cli.main(["anonymize", "example:census", str(out), "--k", "5", "--scheduler", "synchronous"])
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # restored
    finally:
        signal.signal(signal.SIGINT, ignoring)
    assert got == code
    assert lost == [dropped]  # Python did drop it: the job stopped on the record of the request
    assert sentence in capsys.readouterr().err
    assert all_files(out) == previous and not temporaries(out)  # the previous release, byte for byte
    # the request is forgotten with the job: the next one in this process runs
    monkeypatch.setattr(release, "column_statistics", statistics)
    assert release.run("example:census", tmp_path / "after", release.ReleaseOptions(k=5))["rows"] == 1080


def _spins(n):
    """Runs a while (about 0.5 s for 1e9), then returns a tuple holding a 2-D array, which Numba boxes
    with a call back into Python. Compiled without the interpreter lock, as the pipeline's kernels are:
    the thread that sends the signal runs meanwhile, so the signal is pending when the result is boxed.
    Holding the lock, the kernel left the sender to run after it, and whether the signal came before
    the job's next step depended on which waiting thread took the lock first (a full suite's leftover
    threads once made the worker watch's come too late)."""
    out = np.zeros((2, 3))
    for i in range(n):
        out[i % 2, 0] += i * 1e-9
    return out, out[:, 0].copy()


@pytest.mark.parametrize("signum, code, sentence", [
    (signal.SIGTERM, 143, "terminated (SIGTERM); nothing was written"),
    (signal.SIGINT, 130, "interrupted; nothing was written"),
    (signal.SIGHUP, 129, "hung up (SIGHUP: its terminal closed); nothing was written"),
], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_during_a_numba_kernel_stops_the_job_as_that_signal(monkeypatch, capsys, signum, code, sentence):
    """A signal that arrives while the main thread runs a Numba kernel (the split tree's build, in the
    blocks stage): Python runs its handler when the kernel's result is boxed, inside Numba's call back
    into Python, and Numba raises SystemError ("returned a result with an exception set") in place of
    the handler's exception. The job exited 1, "internal error" (the terminal test above failed so,
    once in a full run); it now stops as the signal asks."""
    import numba

    from microagg.jobs import cli

    kernel = numba.njit(_spins, nogil=True)  # as the pipeline's kernels
    kernel(10)  # compiled before the signal's clock starts
    raised = []

    def command(args):
        threading.Timer(0.2, os.kill, (os.getpid(), signum)).start()
        try:
            kernel(4_000_000_000)
        except BaseException as exc:
            raised.append(type(exc).__name__)
            raise
        return 0

    monkeypatch.setitem(cli.COMMANDS, "methods", command)
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGHUP: signal.SIG_DFL}  # as from a terminal
    previous = {s: signal.signal(s, h) for s, h in defaults.items()}
    try:
        got = cli.main(["methods"])
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    assert raised == ["SystemError"]  # Numba's, with the handler's exception as its cause
    assert got == code and sentence in capsys.readouterr().err


def test_the_worker_watch_s_interrupt_is_the_cluster_s_failure_however_it_arrives(monkeypatch):
    """The worker watch interrupts the main thread (SIGINT) once the scheduler has lost every worker for
    its timeout; with SIGINT ignored (a job started with `&` from a script) by a handler of its own.
    That interruption came out as Numba's SystemError when it arrived during a kernel (exit 1, an
    internal error), and was lost when Python dropped it in a finalizer (the job went on waiting). Both
    are now the cluster's failure, :class:`ClusterError` (exit 4)."""
    import numba

    from microagg.jobs import cluster
    from microagg.pipeline import interrupts
    from microagg.pipeline.errors import ClusterError

    class NoWorkers:
        asked = threading.Event()

        def scheduler_info(self, **kwargs):
            self.asked.set()
            return {"workers": {}}

    class Waits:
        """Collected at once: its ``__del__`` runs until the watch's SIGINT interrupts it, and Python
        drops the handler's exception."""

        def __del__(self):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                pass

    monkeypatch.setattr(cluster, "WATCH_INTERVAL", 0.05)
    kernel = numba.njit(_spins, nogil=True)  # as the pipeline's kernels
    kernel(10)
    lost = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: lost.append(type(u.exc_value).__name__))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for body in ("kernel", "finalizer"):
            interrupts.clear()
            with pytest.raises(ClusterError, match="lost every worker during the job"):
                with cluster._watching_workers(NoWorkers(), "tcp://gone:8786", 0.2):
                    if body == "kernel":
                        assert NoWorkers.asked.wait(30)  # the watch's clock runs (it looks again during the kernel)
                        kernel(4_000_000_000)
                    else:
                        Waits()
                        assert lost == ["KeyboardInterrupt"]  # Python did drop it
                        interrupts.check()  # what the pipeline does at every stage's end
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN, body  # Ctrl-C ignored again
    finally:
        signal.signal(signal.SIGINT, previous)
        interrupts.clear()


# --- which temporary directories are stale ---------------------------------------------------------

linux_proc = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux's /proc")

def _stale_dir(tmp_path, pid):
    path = tmp_path / f".release.microagg-tmp-{socket.gethostname()}-{pid}-0123456789ab"
    path.mkdir()
    (path / "part-00000.parquet").write_bytes(b"partial")
    return path


def test_a_running_job_keeps_its_temporary_directory(tmp_path):
    running = _stale_dir(tmp_path, os.getpid())  # this process started before the directory was made
    io.discard_output(io.prepare_output(tmp_path / "release"))
    assert running.exists()


def _leased(path, start):
    (path / io.LEASE).write_text(f"{socket.gethostname()} {os.getpid()} {start!r}\n")
    return path


def test_a_second_job_on_the_same_output_and_host_is_refused(tmp_path):
    """A live job's directory with an earlier lease: this job stops (exit 6), its own directory removed,
    the other's kept. One whose lease is later than this job's (they started together) is not in the way:
    the earlier of the two goes on. An old release's lease (no start time) counts as the earliest."""
    first = _leased(_stale_dir(tmp_path, os.getpid()), time.time() - 5)
    with pytest.raises(OutputBusyError, match=rf"PID {os.getpid()}\) is writing .*release now") as caught:
        io.prepare_output(tmp_path / "release")
    assert caught.value.exit_code == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]
    _leased(first, time.time() + 5)
    io.discard_output(io.prepare_output(tmp_path / "release"))
    (first / io.LEASE).write_text(f"{socket.gethostname()} {os.getpid()}\n")
    with pytest.raises(OutputBusyError):
        io.prepare_output(tmp_path / "release")
    assert first.exists()


def test_the_same_export_started_twice_runs_once(tmp_path, data):
    """Two ``microagg anonymize`` runs of one export on one host: the second exits 6 while the first
    writes; the first's release is committed, whole."""
    _, source = data
    out = tmp_path / "release"
    first = Job("anonymize", source, out, "--k", 5, *OPTIONS)
    try:
        first.wait_for(split_tree, "split tree")
        second = microagg_cli("anonymize", source, out, "--k", 5, *OPTIONS)
        assert second.returncode == 6 and "another microagg job on this host" in second.stderr, second.stderr
        assert first.finish(timeout=120) == 0
    finally:
        first.stop()
    assert len(pd.read_parquet(out)) == len(pd.read_parquet(source)) and not temporaries(out)


@linux_proc
def test_the_temporary_directory_of_a_dead_or_zombie_job_is_removed(tmp_path):
    zombie = subprocess.Popen(["true"])  # exited, not yet reaped: its PID still answers kill(pid, 0)
    try:
        deadline = time.monotonic() + 10
        while io._process_start(zombie.pid)[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        stale = _stale_dir(tmp_path, zombie.pid)
        io.discard_output(io.prepare_output(tmp_path / "release"))
        assert not stale.exists()
    finally:
        zombie.wait()
    stale = _stale_dir(tmp_path, zombie.pid)  # reaped: the PID is gone
    io.discard_output(io.prepare_output(tmp_path / "release"))
    assert not stale.exists()


@linux_proc
def test_a_reused_pid_does_not_keep_a_dead_jobs_directory():
    """A process that started after the directory last changed cannot be the job that made it (a
    restarted container's job is often PID 1 again, like the job it replaces)."""
    later = subprocess.Popen(["sleep", "30"])
    try:
        now = time.time()
        assert not io.job_running(later.pid, changed=now - 3600)
        assert io.job_running(later.pid, changed=now)
        assert io.job_running(os.getpid(), changed=now)
    finally:
        later.kill()
        later.wait()
    assert not io.job_running(later.pid, changed=now)


# --- leases: temporary directories of jobs on other hosts -------------------------------------------

def _other_hosts_dir(tmp_path, kind="tmp", lease_age=None):
    """A directory as a job on another host leaves it; its lease refreshed ``lease_age`` s ago."""
    path = tmp_path / f".release.microagg-{kind}-pod-nightly-export-29174-1-0123456789ab"
    path.mkdir()
    (path / "part-00000.parquet").write_bytes(b"partial")
    if lease_age is not None:
        (path / io.LEASE).write_text("pod-nightly-export-29174 1\n")
        then = time.time() - lease_age
        os.utime(path / io.LEASE, (then, then))
    return path


def test_another_hosts_directory_is_removed_once_its_lease_expires(tmp_path):
    expired = _other_hosts_dir(tmp_path, lease_age=io.LEASE_EXPIRY + 60)
    io.discard_output(io.prepare_output(tmp_path / "release"))
    assert not expired.exists()
    live = _other_hosts_dir(tmp_path, lease_age=io.LEASE_EXPIRY - 60)
    io.discard_output(io.prepare_output(tmp_path / "release"))
    assert live.exists() and (live / "part-00000.parquet").exists()
    shutil.rmtree(live)
    unleased = _other_hosts_dir(tmp_path)  # made just now, its lease not yet written: kept
    io.discard_output(io.prepare_output(tmp_path / "release"))
    assert unleased.exists()


def test_a_release_another_host_moved_aside_is_restored_once_it_is_stale(tmp_path, monkeypatch):
    aside = _other_hosts_dir(tmp_path, kind="old")
    (aside / io.SUCCESS_MARKER).touch()
    io.discard_output(io.prepare_output(tmp_path / "release"))
    assert aside.exists() and not (tmp_path / "release").exists()  # moved aside just now: maybe live
    monkeypatch.setattr(io, "LEASE_EXPIRY", -1.0)  # as if an hour had passed
    io.discard_output(io.prepare_output(tmp_path / "release"))
    assert not aside.exists() and (tmp_path / "release" / "part-00000.parquet").read_bytes() == b"partial"


def test_a_running_job_refreshes_its_lease_and_commits_without_it(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "LEASE_REFRESH", 0.05)
    out = tmp_path / "release"
    tmp = io.prepare_output(out)
    lease = Path(tmp) / io.LEASE
    then = time.time() - 1000
    os.utime(lease, (then, then))
    deadline = time.monotonic() + 10
    while lease.stat().st_mtime < then + 500:  # refreshed by the job's thread
        assert time.monotonic() < deadline
        time.sleep(0.02)
    (Path(tmp) / "part-00000.parquet").write_bytes(b"complete")
    io.commit_output(tmp, out)
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", "part-00000.parquet"]
    assert not [t for t in threading.enumerate() if t.name == "microagg-lease"]  # its thread ended
    assert not temporaries(out)


def test_a_job_whose_directory_was_taken_commits_nothing(tmp_path):
    out = tmp_path / "release"
    microagg_cli("generate", out, "--rows", 1000, "--files", 1, "--seed", 1, "--scheduler", "synchronous",
                 check=True, timeout=120)
    previous = all_files(out)
    tmp = io.prepare_output(out)
    shutil.rmtree(tmp)  # removed by another job, which took it for a dead job's
    Path(tmp).mkdir()  # and recreated by this job's writers
    (Path(tmp) / "part-00001.parquet").write_bytes(b"what is left")
    with pytest.raises(ReleaseGateError, match="lost its lease file"):
        io.commit_output(tmp, out)
    io.discard_output(tmp)
    assert all_files(out) == previous and not temporaries(out)


IN_MEMORY = [sys.executable, "-c", "import sys; from microagg.pipeline import release; "
                                   "release._unseen_by_workers = lambda path: 2; sys.argv[0] = 'microagg'; "
                                   "from microagg.jobs.cli import console; console()"]
"""A job whose worker processes cannot see its scratch directory (as on hosts that share no filesystem with it):
the rows in transit travel between them in memory."""


def _through_files(tmp_path):
    """``(environment, program, scratch directories)`` of jobs whose scratch directory is under ``tmp_path`` and
    that go through files whatever their size (a driver that sets the memory share to 0); the last lists the
    scratch directories there."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "DASK_TEMPORARY_DIRECTORY": str(scratch)}
    program = [sys.executable, "-c", "import sys; from microagg.pipeline import release; "
                                     "release.TRANSIT_MEMORY_SHARE = 0; sys.argv[0] = 'microagg'; "
                                     "from microagg.jobs.cli import console; console()"]

    def transit_dirs():
        return sorted(p.name for p in scratch.iterdir() if p.name.startswith("microagg-transit-"))

    return env, program, transit_dirs


def test_a_job_s_rows_in_transit_go_with_its_unwinding_or_after_a_kill_with_the_next_job(tmp_path, data):
    """Rows in transit through files (pipeline.transit; forced by a driver that sets the memory share to 0):
    a job stopped by SIGTERM in its blocks stage removes its scratch directory as it unwinds; one killed
    there leaves it, and the next job on the host (whose rows stay in memory) removes it."""
    _, source = data
    env, program, transit_dirs = _through_files(tmp_path)

    def through_files(e):
        return "rows in transit through files" in e.get("message", "")

    for sig, code in ((signal.SIGTERM, 143), (signal.SIGKILL, -signal.SIGKILL)):
        out = tmp_path / f"release-{sig}"
        job = Job("anonymize", source, out, "--k", 5, *OPTIONS, program=program, env=env)
        try:
            job.wait_for(through_files, "rows in transit through files", timeout=120)
            assert transit_dirs() == [e for e in transit_dirs() if e.startswith(f"microagg-transit-{socket.gethostname()}-{job.proc.pid}-")]
            assert len(transit_dirs()) == 1
            job.signal(sig)
            assert job.finish(timeout=60) == code
        finally:
            job.stop()
        assert not any(stage("gate", "started")(e) for e in job.events)  # stopped in the blocks stage
        assert not out.exists()
        assert len(transit_dirs()) == (1 if sig == signal.SIGKILL else 0)

    out = tmp_path / "release-next"
    done = subprocess.run([str(BIN / "microagg"), "anonymize", *map(str, (source, out, "--k", 5, *OPTIONS)),
                           "--no-evaluate", "--no-html"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert transit_dirs() == []
    assert json.loads((out / "_report.json").read_text())["rows_in_transit"] == "memory"


def test_an_evaluation_s_scratch_files_go_with_its_unwinding_or_after_a_kill_with_the_next_job(tmp_path, data):
    """``microagg evaluate`` with both files' QIs through files (forced, as above): stopped by SIGTERM it removes
    its scratch directory as it unwinds; killed, it leaves it, and the next job on the host removes it."""
    _, source = data
    release = tmp_path / "release"
    microagg_cli("anonymize", source, release, "--k", 5, *OPTIONS, "--no-evaluate", "--no-html", check=True,
                 timeout=120)
    env, program, transit_dirs = _through_files(tmp_path)
    qi = ["--qi", ",".join(QUASI_IDENTIFIERS), "--changed", ",".join(IDENTIFIERS), "--no-html"]

    for sig, code in ((signal.SIGTERM, 143), (signal.SIGKILL, -signal.SIGKILL)):
        report = tmp_path / f"report-{sig}.json"
        job = Job("evaluate", source, release, *qi, "--report", report, program=program, env=env)
        try:
            job.wait_for(stage("columns", "started"), "the columns stage", timeout=120)
            assert [e for e in transit_dirs() if e.startswith(f"microagg-transit-{socket.gethostname()}-{job.proc.pid}-")] == transit_dirs()
            assert len(transit_dirs()) == 1
            job.signal(sig)
            assert job.finish(timeout=60) == code
        finally:
            job.stop()
        assert any("both files' QIs through files" in e.get("message", "") for e in job.events)
        assert not report.exists()
        assert len(transit_dirs()) == (1 if sig == signal.SIGKILL else 0)

    report = tmp_path / "report-next.json"
    done = subprocess.run([str(BIN / "microagg"), "evaluate", *map(str, (source, release, *qi, "--report", report))],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert transit_dirs() == []
    assert json.loads(report.read_text())["aligned_pieces"] == "memory"
