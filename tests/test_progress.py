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
