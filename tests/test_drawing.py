"""The page drawn by a helper process (pipeline/drawing.py): the page the job's own process renders, from a
job that uses it end to end (the page inside the release or beside its report), and the job's own page
whenever the helper fails: it exits, raises or does not answer in time."""

import logging
import os
import signal

import pytest

from conftest import CENSUS_CSV
from test_report import IMG, PLOTS
from microagg.pipeline import drawing, release

BROKEN = {"summary": {"group_sizes": {"sizes": "x"}}}  # render_html raises on it (KeyError: counts)
PATIENCE = 300.0
"""Seconds the tests wait for a helper's page: at the lowest priority on cores the suite's other tests keep busy, a
helper may take longer than a job waits for it (``drawing.PAGE_TIMEOUT``), which these tests do not measure."""


@pytest.fixture(scope="module")
def census_report(tmp_path_factory):
    """The report ``release.run`` returns for the census file at k=5 (its data summary in it)."""
    return release.run(str(CENSUS_CSV), tmp_path_factory.mktemp("drawing") / "release",
                       release.ReleaseOptions(k=5), evaluation=None)


@pytest.fixture()
def helpers(monkeypatch):
    """Every job draws its page by a helper (whatever its input's size); the helpers started, in order."""
    started = []

    class Recorded(drawing.PageHelper):
        def __init__(self):
            super().__init__()
            started.append(self)

        def page(self, report, timeout=PATIENCE):
            self.given = super().page(report, timeout)
            return self.given

    monkeypatch.setattr(drawing, "HELPER_INPUT_BYTES", 0)
    monkeypatch.setattr(drawing, "PageHelper", Recorded)
    return started


def test_the_helpers_page_is_the_page_this_process_renders(census_report):
    """Figures drawn from the report as the gate leaves it, the page from the final one (with the write's
    timings): the page one render of the final report gives here."""
    helper = drawing.PageHelper()
    try:
        helper.draw({key: value for key, value in census_report.items() if key != "timings"})
        page = helper.page(census_report, PATIENCE)
    finally:
        helper.close()
    assert helper.failure is None
    assert page == drawing.render_page(census_report, {})
    assert [alt for *_, alt in IMG.findall(page)] == list(PLOTS)
    assert helper._process.returncode == 0  # it left at the end of its input


@pytest.mark.parametrize("beside", [False, True], ids=["in-the-release", "beside-the-report"])
def test_a_large_jobs_page_is_drawn_by_its_helper(tmp_path, helpers, beside):
    report_path = tmp_path / "report.json" if beside else None
    rep = release.run(str(CENSUS_CSV), tmp_path / "out", release.ReleaseOptions(k=5), report_path=report_path)
    [helper] = helpers
    assert helper.failure is None and helper._process.poll() == 0  # closed with the job
    page = (tmp_path / ("report.html" if beside else "out/_report.html")).read_text()
    assert page == helper.given  # the helper's page, as it gave it
    assert [alt for *_, alt in IMG.findall(page)] == list(PLOTS)
    assert rep["html"] == str(tmp_path / ("report.html" if beside else "out/_report.html"))


def test_a_helper_leaves_at_the_end_of_its_input_without_the_interpreter_s_teardown(tmp_path, monkeypatch,
                                                                                   census_report):
    """Its teardown (matplotlib's modules, its reading thread) took more than the second ``close`` waits for a
    helper at the lowest priority on busy cores, which was then killed: an exit hook of the helper's interpreter,
    which would make a file, shows whether the teardown runs."""
    mark = tmp_path / "torn-down"
    monkeypatch.setattr(drawing, "_BOOT", f"import atexit; atexit.register(open, {str(mark)!r}, 'w'); "
                                          + drawing._BOOT)
    helper = drawing.PageHelper()
    assert helper.page(census_report, PATIENCE) is not None
    helper._process.stdin.close()
    assert helper._process.wait() == 0  # left by itself, with success
    assert not mark.exists()


@pytest.mark.parametrize("when", ["before-its-figures", "before-its-page"])
def test_a_helper_that_dies_leaves_the_page_to_the_job(tmp_path, helpers, monkeypatch, caplog, when):
    draw = drawing.PageHelper.draw

    def killed_then(method):
        def call(self, report, *args):
            self._process.kill()
            self._process.wait()
            return method(self, report, *args)
        return call

    if when == "before-its-figures":
        monkeypatch.setattr(drawing.PageHelper, "draw", killed_then(draw))
    else:
        monkeypatch.setattr(drawing.PageHelper, "page", killed_then(drawing.PageHelper.page))
    with caplog.at_level(logging.WARNING, logger="microagg.pipeline.drawing"):
        release.run(str(CENSUS_CSV), tmp_path / "out", release.ReleaseOptions(k=5))
    [helper] = helpers
    assert helper.given is None and helper.failure
    assert "the page's helper process failed" in caplog.text
    page = (tmp_path / "out" / "_report.html").read_text()
    assert [alt for *_, alt in IMG.findall(page)] == list(PLOTS)  # every figure, drawn by the job


def test_a_helper_that_raises_leaves_the_page_to_the_job():
    helper = drawing.PageHelper()
    try:
        assert helper.page(BROKEN, PATIENCE) is None
    finally:
        helper.close()
    assert helper.failure == "it raised: KeyError: 'counts'"
    assert helper._process.returncode == 0


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="no SIGSTOP on this platform")
def test_a_helper_that_does_not_answer_in_time_is_killed(census_report):
    helper = drawing.PageHelper()
    os.kill(helper._process.pid, signal.SIGSTOP)  # stuck
    assert helper.page(census_report, timeout=0.5) is None
    assert helper.failure == "no page within 0.5 s"
    assert helper._process.returncode == -signal.SIGKILL  # killed when it did not leave


def test_a_report_that_cannot_be_handed_over_is_drawn_by_the_job():
    helper = drawing.PageHelper()
    helper.draw({"k": lambda: None})  # not picklable
    assert helper.failure.startswith("could not hand it the report")
    assert helper.page({}) is None
    assert helper._process.poll() is not None


def test_small_inputs_are_drawn_by_the_job(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(drawing, "PageHelper", lambda: started.append(1))
    assert drawing.start(drawing.HELPER_INPUT_BYTES - 1) is None and not started
    release.run(str(CENSUS_CSV), tmp_path / "out", release.ReleaseOptions(k=5), evaluation=None)
    assert not started  # the census file is far below the threshold
    assert (tmp_path / "out" / "_report.html").read_text().count("data:image/png;base64,") == len(PLOTS)
