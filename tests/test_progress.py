"""The progress of jobs/: the console line (on terminals only) and the JSON log's progress records."""

import io
import logging
import threading
import time

from microagg.jobs.progress import LogProgress, StageProgress, wanted


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_stage_lines_follow_the_pipeline_log():
    stream = _Tty()
    log = logging.getLogger("microagg.pipeline.release")
    with StageProgress(client=None, stream=stream, interval=0.01):
        log.info("stage %s ...", "statistics")
        log.info("stage %s done in %.2f s", "statistics", 0.1)
        log.info("stage %s ...", "blocks")
    lines = [line.split("\r")[-1].split() for line in stream.getvalue().split("\n") if line]
    assert [line[0] for line in lines] == ["statistics", "blocks"]
    assert all(line[1].endswith("s") for line in lines)


def test_not_shown_when_not_a_terminal(monkeypatch):
    assert not wanted(io.StringIO())
    monkeypatch.setenv("CI", "true")
    assert not wanted(_Tty())


def test_cli_on_a_terminal_shows_stages_and_no_log_records(tmp_path):
    """The CLI in a pseudo-terminal: a progress line per stage, no INFO log records on the console."""
    import os
    import pty
    import subprocess
    import sys
    from pathlib import Path

    from conftest import CENSUS_CSV

    exe = Path(sys.executable).with_name("microagg")
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    proc = subprocess.Popen([str(exe), "anonymize", str(CENSUS_CSV), str(tmp_path / "out"), "--k", "3",
                             "--scheduler", "synchronous"], stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=120) == 0
    screen = b"".join(chunks).decode(errors="replace")
    assert "statistics" in screen and "blocks" in screen and "write" in screen
    assert "INFO" not in screen
    assert "information loss: 5.692 %" in screen


def test_a_long_stage_logs_its_progress_and_a_short_one_does_not():
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    keep, log = Keep(), logging.getLogger("microagg.pipeline.release")
    logging.getLogger("microagg.jobs.progress").addHandler(keep)
    logging.getLogger("microagg.jobs.progress").setLevel(logging.INFO)
    try:
        with LogProgress(client=None, interval=0.05):
            log.info("stage %s ...", "statistics")
            log.info("stage %s done in %.2f s", "statistics", 0.0)  # shorter than the interval: nothing
            log.info("stage %s ...", "blocks")
            time.sleep(0.4)
            log.info("stage %s done in %.2f s", "blocks", 0.4)
            seen = len(records)
            time.sleep(0.2)  # between stages: nothing
    finally:
        logging.getLogger("microagg.jobs.progress").removeHandler(keep)
    assert len(records) == seen >= 3
    fields = [r.fields for r in records]
    assert {f["stage"] for f in fields} == {"blocks"} and {f["event"] for f in fields} == {"progress"}
    assert all(f["seconds"] >= 0.05 for f in fields) and fields[-1]["seconds"] > fields[0]["seconds"]


def test_the_json_log_of_a_job_on_a_cluster_has_progress_records(tmp_path, monkeypatch, capsys):
    """``--log-format json`` (a scheduler's log): progress records with the cluster's task counts
    while a stage runs (every 30 s by default; here every 0.05 s)."""
    import json

    from microagg.jobs import cli, logs, progress
    from synthetic import QI, extract

    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.05)
    source = tmp_path / "in.parquet"
    extract(100_000, seed=2).to_parquet(source, index=False)
    try:
        code = cli.main(["--log-format", "json", "anonymize", str(source), str(tmp_path / "out"), "--k", "5",
                         "--qi", ",".join(QI), "--workers", "1", "--no-evaluate", "--no-html"])
    finally:
        logs.setup("text", logging.WARNING)
    err = capsys.readouterr().err
    assert code == 0, err
    entries = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    ticks = [e for e in entries if e.get("event") == "progress"]
    assert ticks and {"blocks"} <= {e["stage"] for e in ticks}
    assert all(e["tasks_done"] >= 0 and e["tasks_running"] >= 0 and e["tasks_waiting"] >= 0 for e in ticks)
    assert entries[-1]["event"] == "finished"


_RELEASE = threading.Event()


def _held(i):
    _RELEASE.wait(30)
    return i


def test_running_tasks_are_those_on_a_thread():
    """Dask's ``processing`` state holds every task a worker was given, also those waiting for one of
    its threads: the progress counts as running at most the cluster's threads, and every task once."""
    from distributed import Client, LocalCluster

    from microagg.jobs.progress import task_counts

    _RELEASE.clear()
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        futures = client.map(_held, range(12), pure=False)
        deadline = time.monotonic() + 30
        counts = task_counts(client)
        while counts[1] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            counts = task_counts(client)
        done, running, waiting = counts
        assert (done, running, waiting) == (0, 2, 10)
        _RELEASE.set()
        client.gather(futures)
        assert task_counts(client) == (12, 0, 0)
