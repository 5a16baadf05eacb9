"""The console progress line of jobs/ (shown on terminals only)."""

import io
import logging

from microagg.jobs.progress import StageProgress, wanted


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
