"""Job files (`microagg run` / `microagg validate`), exit codes and JSON logs."""

import json
import logging
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, assert_k_anonymous
from synthetic import extract

from microagg.jobs import cli, exit_codes, jobfile, logs

QI = ["AGI", "FICA", "TAXINC"]
EXE = Path(sys.executable).with_name("microagg")

# the issue's exact shape, with the in-process scheduler for the test
ISSUE_JOB = """\
[input]
path = "warehouse/extract/"
[output]
path = "exports/{date}/release"
[anonymize]
k = 5
quasi_identifiers = ["AGI", "FICA", "TAXINC"]
identifiers = ["person_id"]
method = "auto"
[cluster]
scheduler = "synchronous"   # or: workers = 4
"""

SMALL_JOB = """\
[input]
path = "warehouse/extract/"
[output]
path = "exports/{date}/{job}"
[anonymize]
k = 4
quasi_identifiers = ["AGI", "FICA", "TAXINC"]
identifiers = ["person_id"]
[cluster]
scheduler = "synchronous"
"""


@pytest.fixture(autouse=True)
def plain_logs():
    """In-process ``main --log-format json`` installs a handler on the root logger: remove it after the test."""
    yield
    logs.setup("text", logging.WARNING)


@pytest.fixture()
def workspace(tmp_path):
    """A job directory holding a small Parquet extract at warehouse/extract/ (relative to the job)."""
    jobs = tmp_path / "jobs"
    data = jobs / "warehouse" / "extract"
    data.mkdir(parents=True)
    df = extract(300, d=5, seed=3).rename(columns={"q0": "AGI", "q1": "FICA", "q2": "TAXINC"})
    df.iloc[:150].to_parquet(data / "part-0.parquet", index=False)
    df.iloc[150:].to_parquet(data / "part-1.parquet", index=False)
    return jobs, df


def _write(directory, name, text):
    path = Path(directory) / name
    path.write_text(text)
    return path


def _cli(*args, cwd, timeout=120):
    """The installed command, run from ``cwd`` (not the job's directory: paths resolve against the job)."""
    return subprocess.run([str(EXE), *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def _main(capsys, *args):
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _leftovers(directory):
    return [p for p in os.listdir(directory) if ".microagg-" in p]


# --- the issue's job end to end ---------------------------------------------------------------------------

def test_issue_job_runs_end_to_end_and_a_rerun_replaces_its_release(workspace, tmp_path):
    jobs, df = workspace
    job = _write(jobs, "nightly.toml", ISSUE_JOB)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = _cli("run", job, "--date", "2026-03-04", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    release = jobs / "exports" / "2026-03-04" / "release"  # relative to the job file, not to the cwd
    assert (release / "_SUCCESS").exists()
    report = json.loads((release / "_report.json").read_text())
    assert report["rows"] == len(df) and report["k"] == 5 and report["method"] == "auto"
    assert report["quasi_identifiers"] == QI
    assert report["job"]["date"] == "2026-03-04" and report["job"]["name"] == "nightly"
    released = pd.read_parquet(release)
    assert len(released) == len(df) and "person_id" not in released.columns
    assert_k_anonymous(released, QI, 5)
    assert not os.listdir(elsewhere)
    first_inode = os.stat(release).st_ino

    proc = _cli("run", job, "--date", "2026-03-04", cwd=elsewhere)  # the same job and date again
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(jobs / "exports") == ["2026-03-04"]
    assert os.listdir(jobs / "exports" / "2026-03-04") == ["release"]  # one release, no temporaries
    assert os.stat(release).st_ino != first_inode  # replaced by a rename, not written in place
    pd.testing.assert_frame_equal(pd.read_parquet(release), released)
    assert not _leftovers(jobs / "exports" / "2026-03-04")


def test_json_logs_parse_line_by_line_and_end_with_finished(workspace, tmp_path):
    jobs, df = workspace
    job = _write(jobs, "small.toml", SMALL_JOB)
    proc = _cli("--log-format", "json", "run", job, "--date", "2026-03-05", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stderr.splitlines()]  # every line is one JSON object
    assert events and all({"time", "level", "logger", "message"} <= set(e) for e in events)
    done = [e for e in events if e.get("event") == "stage" and e["status"] == "done"]
    assert {"validate", "anonymize", "statistics", "gate", "write"} <= {e["stage"] for e in done}
    assert all(e["seconds"] >= 0 for e in done)
    final = events[-1]
    assert final["event"] == "finished" and final["exit_code"] == 0 and final["rows"] == len(df)
    assert final["output"] == str(jobs / "exports" / "2026-03-05" / "small")  # {date} and {job}
    assert final["information_loss"] > 0
    assert (jobs / "exports" / "2026-03-05" / "small" / "_SUCCESS").exists()
    # evaluated by default (no [evaluate] section), as `microagg anonymize`; run = false skips it
    evaluation = json.loads((jobs / "exports" / "2026-03-05" / "small" / "_evaluation.json").read_text())
    assert evaluation["checks"]["k_anonymity"]["passed"] and 0 < evaluation["disclosure_risk"]["dld"] < 100
    job = _write(jobs, "plain.toml", SMALL_JOB + "[evaluate]\nrun = false\n")
    assert _cli("run", job, "--date", "2026-03-05", cwd=tmp_path).returncode == 0
    assert sorted(p.name for p in (jobs / "exports" / "2026-03-05" / "plain").iterdir()
                  if not p.name.endswith(".parquet")) == ["_SUCCESS", "_report.json"]


def test_unreachable_scheduler_is_a_cluster_failure_and_fails_fast(workspace, tmp_path):
    jobs, _ = workspace
    job = _write(jobs, "remote.toml", SMALL_JOB.replace('scheduler = "synchronous"',
                                                        'scheduler = "tcp://127.0.0.1:1"\nconnect_timeout = 1'))
    proc = _cli("--log-format", "json", "run", job, "--date", "2026-03-06", cwd=tmp_path, timeout=30)
    assert proc.returncode == exit_codes.EXIT_CLUSTER == 4, proc.stderr
    final = json.loads(proc.stderr.splitlines()[-1])
    assert final["event"] == "failed" and final["error"] == "ClusterError" and "127.0.0.1:1" in final["message"]
    assert not (jobs / "exports").exists()  # the date directory made for the run is removed again


# --- in-process runs ---------------------------------------------------------------------------------------

def test_gate_failure_exits_3_and_leaves_nothing(workspace, broken_method, capsys):
    jobs, _ = workspace
    job = _write(jobs, "gate.toml", SMALL_JOB.replace("k = 4", 'k = 4\nmethod = "broken"'))
    code, _, err = _main(capsys, "run", job, "--date", "2026-03-07")
    assert code == exit_codes.EXIT_GATE == 3, err
    assert "not 4-anonymous" in err
    assert not (jobs / "exports").exists()


def test_evaluate_html_and_reports_outside_the_release(workspace, capsys):
    jobs, df = workspace
    job = _write(jobs, "evaluated.toml", SMALL_JOB + """\
[report]
json = "reports/{job}-{date}.json"
html = true
[evaluate]
known = [["AGI", "FICA"], "TAXINC"]
id_percent = 5
dld_records = 120
""")
    code, out, err = _main(capsys, "run", job, "--date", "2026-03-08")
    assert code == 0, err
    release = jobs / "exports" / "2026-03-08" / "evaluated"
    report = json.loads((jobs / "reports" / "evaluated-2026-03-08.json").read_text())  # parent created
    assert report["rows"] == len(df) and not (release / "_report.json").exists()
    evaluation = json.loads((release / "_evaluation.json").read_text())
    assert [s["columns"] for s in evaluation["disclosure_risk"]["scenarios"]] == [QI, ["AGI", "FICA"], ["TAXINC"]]
    assert evaluation["disclosure_risk"]["id_percent"] == 5
    assert evaluation["checks"]["k_anonymity"]["passed"] is True
    assert "evaluation:" in out and "DLD" in out
    # a sample of the masked records searched for the DLD (about 120 of 300), with its interval
    risk = evaluation["disclosure_risk"]
    assert 80 < risk["dld_records"] < 160 and risk["dld_interval"][0] <= risk["dld"] <= risk["dld_interval"][1]
    assert f"{risk['dld_records']:,} of 300 records searched" in out
    # the page with the release's data plots and the evaluation's measures, in the release (html = true)
    # and beside the JSON report (where the release wrote it first)
    pages = [release / "_report.html", jobs / "reports" / "evaluated-2026-03-08.html"]
    assert pages[0].read_text() == pages[1].read_text()
    page = pages[0].read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count('<img class="plot" src="data:image/png;base64,') == 5
    dld = evaluation["disclosure_risk"]["dld"]
    assert f"k = 4 reached (smallest group 4) \u00b7 IL {report['information_loss']:.2f} % \u00b7 DLD {dld:.2f} %" in page
    assert f"a sample of {risk['dld_records']} records searched" in page
    assert report["summary"]["quasi_identifiers"] == QI and "summary" in evaluation


def test_a_csv_input_in_another_dialect(workspace, capsys):
    """``[input] separator / decimal / encoding``: a semicolon-separated, decimal-comma, Latin-1 export
    gives the release of the same rows as a plain CSV file, and is evaluated in the same dialect."""
    jobs, df = workspace
    df = df.assign(town=["Orl\u00e9ans", "Besan\u00e7on", "Sa\u00f4ne"] * (len(df) // 3))
    df.to_csv(jobs / "plain.csv", index=False)
    df.to_csv(jobs / "export.csv", index=False, sep=";", decimal=",", encoding="latin-1")
    plain = SMALL_JOB.replace("warehouse/extract/", "plain.csv")
    dialect = SMALL_JOB.replace('path = "warehouse/extract/"',
                                'path = "export.csv"\nseparator = ";"\ndecimal = ","\nencoding = "latin-1"')
    releases = []
    for name, text in (("plain", plain), ("dialect", dialect)):
        code, _, err = _main(capsys, "run", _write(jobs, f"{name}.toml", text), "--date", "2026-03-08")
        assert code == 0, err
        release = jobs / "exports" / "2026-03-08" / name
        releases.append({p.name: p.read_bytes() for p in sorted(release.glob("*.parquet"))})
        evaluation = json.loads((release / "_evaluation.json").read_text())
        assert evaluation["checks"]["unchanged_columns"]["town"] == 0
    assert releases[0] == releases[1]
    assert pd.read_parquet(jobs / "exports" / "2026-03-08" / "dialect")["town"].tolist() == df["town"].tolist()
    report = json.loads((jobs / "exports" / "2026-03-08" / "dialect" / "_report.json").read_text())
    assert report["csv"] == {"sep": ";", "decimal": ",", "encoding": "latin-1"}


def test_quoted_values_that_read_as_rows_are_refused_unless_the_job_allows_them(tmp_path, capsys):
    """A note whose quote is left open hides the rows up to the next quote: the job exits 2 with the
    column and the count; ``[input] allow_rows_in_quotes = true`` releases the file as pandas reads it."""
    rng = np.random.default_rng(1)
    lines = ["id,note,a,b"] + [f"{i},note {i},{rng.normal():.3f},{rng.normal():.3f}" for i in range(40)]
    lines[5] = lines[5].replace("note 4", '"note 4')  # rows 5..19 inside row 4's note
    lines[21] = lines[21].replace("note 20", 'note 20"')
    (tmp_path / "export.csv").write_text("\n".join(lines) + "\n")
    job = ('[input]\npath = "export.csv"\n{allow}[output]\npath = "out/{{job}}"\n[anonymize]\nk = 3\n'
           'quasi_identifiers = ["a", "b"]\nidentifiers = ["id"]\n[cluster]\nscheduler = "synchronous"\n')
    code, _, err = _main(capsys, "run", _write(tmp_path, "refused.toml", job.format(allow="")))
    assert code == 2 and "'note'" in err and "15 row(s)" in err and "allow_rows_in_quotes" in err, err
    assert not (tmp_path / "out" / "refused").exists()
    allowed = job.format(allow="allow_rows_in_quotes = true\n")
    code, _, err = _main(capsys, "run", _write(tmp_path, "allowed.toml", allowed))
    assert code == 0, err
    assert len(pd.read_parquet(tmp_path / "out" / "allowed")) == 24


def test_default_date_is_today_in_utc(workspace):
    jobs, _ = workspace
    before = datetime.now(timezone.utc).date().isoformat()
    job = jobfile.load(_write(jobs, "today.toml", SMALL_JOB))
    after = datetime.now(timezone.utc).date().isoformat()
    assert job.date in (before, after)
    assert job.output == str(jobs / "exports" / job.date / "today")
    assert job.input == str(jobs / "warehouse" / "extract") + os.sep


def test_every_anonymize_option_is_expressible(tmp_path):
    job = jobfile.load(_write(tmp_path, "all.toml", """\
[input]
path = "example:census"
[output]
path = "/tmp/out/{job}"
rows_per_file = 1000
[anonymize]
k = 3
method = "mdav"
quasi_identifiers = "AGI, FICA"
identifiers = ["ID"]
aggregate = "median"
weights = "W"
strata = ["REGION"]
small_strata = "merge"
blocks = "AGI;FICA"
missing = "error"
noise = "laplace"
epsilon = 2
refine = "ils"
stitch = "deep"
order = "pca"
block_size = 600
blocks_per_task = 4
sample_rows = 50000
seed = 7
hash_identifiers = true
grow = "nc"
iterations = 10
time_budget = 1.5
[cluster]
scheduler = "local"
workers = 2
threads_per_worker = 1
processes = true
memory_limit = "2GiB"
"""))
    o = job.options
    assert (o.k, o.method, o.quasi_identifiers, o.identifiers, o.aggregate, o.weights) == (
        3, "mdav", ("AGI", "FICA"), ("ID",), "median", "W", )
    assert (o.strata, o.small_strata, o.attribute_blocks, o.missing, o.noise, o.epsilon) == (
        ("REGION",), "merge", (("AGI",), ("FICA",)), "error", "laplace", 2.0)
    assert (o.refine, o.stitch, o.order, o.block_size, o.blocks_per_task, o.sample_rows, o.seed) == (
        "ils", "deep", "pca", 600, 4, 50000, 7)
    assert o.hash_identifiers and o.rows_per_file == 1000 and o.release_where is None
    assert o.method_options == (("grow", "nc"),) and o.refine_options == (("iterations", 10), ("time_budget", 1.5))
    assert job.cluster == {"scheduler": "local", "workers": 2, "threads_per_worker": 1, "processes": True,
                           "memory_limit": "2GiB", "connect_timeout": 10.0, "worker_timeout": 300.0}
    assert job.input == "example:census" and job.output == "/tmp/out/all"
    # the list form of blocks and the other method options
    other = jobfile.parse('[anonymize]\nk = 2\nblocks = [["A", "B"], ["C"]]\ngamma = 1\neps = 0.5\nmhm_order = "md"\n'
                          'univariate_grouping = "fixed"\nremainder = "merge"\nrelease_where = "A > 0"\n')[0]
    assert other["anonymize"]["blocks"] == (("A", "B"), ("C",)) and other["anonymize"]["gamma"] == 1.0
    # an address without its scheme is Dask's default, tcp (as --scheduler takes it)
    bare = jobfile.parse('[cluster]\nscheduler = "scheduler.internal:8786"\n')[0]
    assert bare["cluster"]["scheduler"] == "scheduler.internal:8786"
    full = jobfile.load(_write(tmp_path, "full.toml", '[input]\npath = "example:census"\n[output]\npath = "o"\n'
                                                      '[anonymize]\nk = 3\nmethod = "auto"\nportfolio = "full"\n'))
    assert full.options.method_options == (("portfolio", "full"),)


# --- validate ---------------------------------------------------------------------------------------------

def test_validate_a_good_job_prints_one_line(workspace, capsys):
    jobs, _ = workspace
    code, out, err = _main(capsys, "validate", _write(jobs, "good.toml", ISSUE_JOB), "--date", "2026-03-09")
    assert code == 0, err
    assert len(out.strip().splitlines()) == 1 and ": ok:" in out and "input schema checked (8 columns)" in out
    assert not (jobs / "exports").exists()  # validate creates nothing
    absent = _write(jobs, "absent.toml", ISSUE_JOB.replace("warehouse/extract/", "not-yet/"))
    code, out, _ = _main(capsys, "validate", absent)
    assert code == 0 and "not there yet" in out
    code, out, err = _main(capsys, "validate", ROOT / "deploy" / "jobs" / "nightly-export.toml")
    assert code == 0, err
    # as a Windows editor saves it: a byte-order mark and CRLF line ends
    windows = jobs / "windows.toml"
    windows.write_bytes(b"\xef\xbb\xbf" + ISSUE_JOB.replace("\n", "\r\n").encode())
    code, out, err = _main(capsys, "validate", windows, "--date", "2026-03-09")
    assert code == 0 and ": ok:" in out, err


BAD = [
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\nmehtod = 'mdav'\n",
     '[anonymize] unknown key "mehtod" (did you mean "method"?)'),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 'five'\n",
     '[anonymize] k: must be an integer >= 2, got "five"'),
    ("[input]\n[output]\npath = 'y'\n[anonymize]\nk = 5\n", "[input] path: missing (required)"),
    ("[output]\npath = 'y'\n[anonymize]\nk = 5\n", "[input]: missing section"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 1\n",
     "[anonymize] k: must be an integer >= 2, got 1"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\nmethod = 'mdva'\n",
     '[anonymize] method: must be one of "mdav"'),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\nmethod = 'auto'\nportfolio = 'fast'\n",
     '[anonymize] portfolio: must be one of "race", "full"'),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymise]\nk = 5\n",
     "unknown section [anonymise] (did you mean [anonymize]?)"),
    ("[input]\npath = 'x'\n[output]\npath = 'y/{dat}'\n[anonymize]\nk = 5\n", "[output] path: unknown template {dat}"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\nworkers = 2\n",
     '[anonymize] unknown key "workers" (it belongs in [cluster])'),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n[cluster]\nscheduler = 'tcp://h:1'\nworkers = 2\n",
     "[cluster] workers: applies to the local cluster only"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\nnoise = 'laplace'\n",
     "[anonymize] Laplace noise needs a privacy budget"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\nquasi_identifiers = ['A']\n"
     "release_where = 'B > 1'\n",
     "[anonymize] release_where may only use quasi-identifier columns"),
    ("[input]\npath = 'data/'\n[output]\npath = 'data/release'\n[anonymize]\nk = 5\n", "lies inside the input"),
    ("[input]\npath = 'exports/x.parquet'\n[output]\npath = 'exports'\n[anonymize]\nk = 5\n",
     "lies inside the output"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\nquasi_identifiers = ['A']\n"
     "[evaluate]\nknown = [['B']]\n", "[evaluate] known: column(s) 'B' are not quasi-identifiers"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n[cluster]\nprocesses = true\n"
     "memory_limit = '256MiB'\n", "[cluster] memory_limit: 256.00 MiB per worker is below the 512.00 MiB minimum"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\nmissing = 'centroid'\n[evaluate]\nrun = true\n",
     "[evaluate] run: the evaluation pairs the input's rows with the release's on complete QIs, so it cannot "
     "evaluate this release (with --missing centroid"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\nmissing = 'centroid'\n[report]\n"
     "evaluation = 'e.json'\n", "[report] evaluation: the evaluation is off"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n[evaluate]\ndld_records = 'some'\n",
     '[evaluate] dld_records: must be a positive number of records or "all", got "some"'),
    ("[input]\npath = 'x'\nseparator = ';;'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n",
     "[input] the CSV separator must be one character"),
    ("[input]\npath = 'x'\nseparator = ';'\ndecimal = '5'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n",
     "[input] the CSV decimal mark must be one character other than the digits"),
    ("[input]\npath = 'x'\nthousands = '.'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n",
     "[input] the CSV thousands separator must be one character other than the decimal mark"),
    ("[input]\npath = 'x'\nencoding = 'latin-9000'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n",
     "[input] unknown CSV encoding 'latin-9000'"),
    ("[input]\npath = 'x'\nallow_rows_in_quotes = 'yes'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n",
     "[input] allow_rows_in_quotes: must be true or false"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n[cluster]\nworker_timeout = 0\n",
     '[cluster] worker_timeout: must be a number of seconds > 0'),
    # report paths over the input, the release directory or one another
    ("[input]\npath = 'x.csv'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n[report]\njson = 'x.csv'\n",
     "x.csv' is an input file"),
    ("[input]\npath = 'data/'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n[report]\n"
     "json = 'data/part-00000.parquet'\n", "lies inside the input"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n[report]\njson = 'y'\n",
     "/y' is the release directory"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n[report]\njson = 'r.json'\n"
     "evaluation = 'r.json'\n", "is also [report] json; each report needs its own file"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n[report]\njson = 'r.json'\nhtml = 'r.json'\n",
     "r.json' is also [report] json"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n[report]\njson = 'r.json'\nhtml = true\n"
     "evaluation = 'r.html'\n", "r.html' is also [report] html (the page beside [report] json)"),
    # seeds in the kernels' range, method and refinement options checked up front
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\nseed = -1\n",
     "[anonymize] seed: must be an integer from 0 to 2**63-1"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\nseed = 9223372036854775807\nmethod = 'vmdav'\n"
     "gamma = -1.0\n", "[anonymize] gamma: vmdav option gamma must be a finite number in [0.0, inf], got -1.0"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\nseed = 9223372036854775808\n",
     "[anonymize] seed: must be an integer from 0 to 2**63-1"),
    ("[input]\npath = 'x'\n[output]\npath = 'y'\n[anonymize]\nk = 5\n[cluster]\nscheduler = 'scheduler'\n",
     '[cluster] scheduler: must be "local", "synchronous" or a scheduler address such as "tcp://HOST:8786"'),
    ("k = 5\n", 'top-level key "k": keys belong in a section ([anonymize] k)'),
    ("[input\n", "not valid TOML"),
]


@pytest.mark.parametrize("text, message", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_validate_names_the_bad_key(tmp_path, capsys, text, message):
    code, out, err = _main(capsys, "validate", _write(tmp_path, "bad.toml", text))
    assert code == 2 and not out
    assert message in err, err


def test_default_qis_leave_out_the_weights_column(workspace, capsys):
    jobs, df = workspace
    text = SMALL_JOB.replace('quasi_identifiers = ["AGI", "FICA", "TAXINC"]\n', "")
    text_weights = text.replace("k = 4\n", 'k = 4\nweights = "region"\n')
    code, _, err = _main(capsys, "validate", _write(jobs, "text.toml", text_weights))
    assert code == 2 and "[anonymize] weights column 'region' is not numeric" in err, err
    job = _write(jobs, "weights.toml",
                 text.replace("k = 4\n", 'k = 4\nweights = "flag"\n') + "[evaluate]\nrun = false\n")
    code, out, err = _main(capsys, "validate", job)
    assert code == 0, err
    df.assign(flag=df["flag"] + 1).to_parquet(jobs / "warehouse" / "extract" / "part-0.parquet", index=False)
    (jobs / "warehouse" / "extract" / "part-1.parquet").unlink()
    code, out, err = _main(capsys, "run", job, "--date", "2026-03-10")
    assert code == 0, err
    release = jobs / "exports" / "2026-03-10" / "weights"
    report = json.loads((release / "_report.json").read_text())
    assert report["quasi_identifiers"] == [*QI, "q3", "q4"]  # every numeric column but the identifier and weights
    np.testing.assert_array_equal(pd.read_parquet(release)["flag"].to_numpy(), df["flag"].to_numpy() + 1)


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_job_stopped_in_its_evaluation_says_its_release_is_committed(workspace, capsys, monkeypatch, log_format):
    """A job file's evaluation runs after the release is committed: a SIGTERM there said "nothing was
    written" while the new release was in place."""
    from microagg.jobs import run as job_run

    def stopped(job, report):
        raise exit_codes.Terminated()

    monkeypatch.setattr(job_run, "_evaluate", stopped)
    jobs, df = workspace
    job = _write(jobs, "small.toml", SMALL_JOB)
    code, _, err = _main(capsys, "--log-format", log_format, "run", job, "--date", "2026-03-10")
    release = jobs / "exports" / "2026-03-10" / "small"
    assert code == 143
    said = err.strip().splitlines()[-1]
    if log_format == "json":
        said = json.loads(said)["message"]
    assert said.endswith(f"the release is committed at {release}, but the steps after it (its evaluation, its page) "
                         f"did not finish"), err
    assert len(pd.read_parquet(release)) == len(df)
    code, _, err = _main(capsys, "methods")  # the next command of the process starts afresh
    monkeypatch.setitem(cli.COMMANDS, "methods", lambda args: (_ for _ in ()).throw(exit_codes.Terminated()))
    code, _, err = _main(capsys, "methods")
    assert code == 143 and err.strip().endswith("nothing was written")


def test_argument_errors_are_json_failed_events(tmp_path):
    proc = _cli("--log-format", "json", "anonymize", "gen", "out", "--k", "five", cwd=tmp_path)
    assert proc.returncode == 2
    events = [json.loads(line) for line in proc.stderr.splitlines()]  # every line is one JSON object
    assert len(events) == 1 and events[0]["event"] == "failed" and events[0]["exit_code"] == 2
    assert events[0]["command"] == "anonymize" and events[0]["error"] == "ArgumentError"
    assert "argument --k: invalid int value: 'five'" in events[0]["message"]
    proc = _cli("--log-format=json", "nonsense", cwd=tmp_path)
    assert proc.returncode == 2 and json.loads(proc.stderr)["event"] == "failed"
    proc = _cli("anonymize", "gen", "out", "--k", "five", cwd=tmp_path)  # text: argparse's usage, as before
    assert proc.returncode == 2 and proc.stderr.startswith("usage:")


def test_json_logs_draw_no_status_line_on_a_terminal(monkeypatch):
    from microagg.jobs import progress

    monkeypatch.setattr(progress, "wanted", lambda stream=None: True)  # stderr a terminal
    logs.setup("json", logging.WARNING)
    assert isinstance(progress.reporting(None), progress.LogProgress)
    logs.setup("text", logging.WARNING)
    assert isinstance(progress.reporting(None), progress.StageProgress)


def test_bad_input_and_bad_date_exit_2(workspace, capsys):
    jobs, _ = workspace
    job = _write(jobs, "cols.toml", SMALL_JOB.replace('"TAXINC"]', '"TAXINC", "NOPE"]'))
    code, _, err = _main(capsys, "validate", job)
    assert code == 2 and "[anonymize] quasi_identifiers names 1 column(s) not in the input: 'NOPE'" in err
    code, _, err = _main(capsys, "run", _write(jobs, "missing.toml", SMALL_JOB.replace("warehouse/extract/", "gone/")))
    assert code == 2 and "[input] path:" in err and "does not exist" in err
    code, _, err = _main(capsys, "run", job, "--date", "2026-13-01")
    assert code == 2 and "--date must be a date YYYY-MM-DD" in err
    assert not (jobs / "exports").exists()


def test_evaluate_unavailable_is_a_clear_input_error(workspace, monkeypatch, capsys):
    jobs, _ = workspace
    monkeypatch.setattr(jobfile, "evaluation_available", lambda: False)
    code, _, err = _main(capsys, "validate", _write(jobs, "ev.toml", SMALL_JOB + "[evaluate]\n"))
    assert code == 2 and "evaluate is not available" in err


# --- exit codes -------------------------------------------------------------------------------------------

def test_a_file_the_workers_cannot_see_is_named(tmp_path, monkeypatch, capsys):
    """Workers of a remote scheduler that do not share the job's filesystem: a task's FileNotFoundError
    for a file that exists here (the input), or for a file of the release's temporary directory (removed
    by the time it is reported) whose parent exists here (the output), is a bad input path: exit 2. A
    file gone here too was removed while the job ran (the input changed): exit 2, saying so."""
    import errno

    source = tmp_path / "part-0.parquet"
    source.write_bytes(b"x")
    missing = tmp_path / ".release.microagg-tmp-host-1-abc" / "part-00000.parquet"
    for path, shown in ((source, source), (missing, tmp_path), (tmp_path / "gone.parquet", None)):
        def command(args, path=path):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        monkeypatch.setitem(cli.COMMANDS, "methods", command)
        code, _, err = _main(capsys, "methods")
        if shown is None:  # gone here too: removed while the job read it
            assert code == 2 and f"{str(path)!r} no longer exists: a file was removed while the job read it" in err
        else:
            assert code == 2 and f"a Dask worker cannot find {str(shown)!r}, which this job sees" in err, err


def test_the_readme_and_the_module_list_the_same_exit_codes():
    import re

    codes = {value for name, value in vars(exit_codes).items() if name.startswith("EXIT_")}
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("**Exit codes**"):].split("\n\n")[1]
    assert {int(c) for c in re.findall(r"^\| (\d+) \|", table, flags=re.M)} == codes
    module = re.findall(r"^(\d+) {2,}\S", exit_codes.__doc__, flags=re.M)
    assert {int(c) for c in module} == codes
    # the one-sentence summary (`microagg run --help`, the example job file) names every code too
    assert {int(c) for c in re.findall(r"(?:^|, )(\d+) ", exit_codes.SUMMARY)} == codes
    example = (ROOT / "deploy" / "jobs" / "nightly-export.toml").read_text()
    comment = " ".join(line.lstrip("# ") for line in example.splitlines() if line.startswith("#"))
    assert exit_codes.SUMMARY in comment


def test_exit_code_table_matches_the_error_classes(monkeypatch, capsys):
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    from microagg.pipeline.errors import ClusterError, InputError, OutputBusyError, ReleaseGateError, StorageError

    assert (InputError.exit_code, ReleaseGateError.exit_code, ClusterError.exit_code, StorageError.exit_code,
            OutputBusyError.exit_code) == (exit_codes.EXIT_INPUT, exit_codes.EXIT_GATE, exit_codes.EXIT_CLUSTER,
                                           exit_codes.EXIT_STORAGE, exit_codes.EXIT_BUSY)
    assert exit_codes.is_cluster_failure(CommClosedError("gone"))
    assert exit_codes.is_cluster_failure(KilledWorker("task", SimpleNamespace(address="tcp://w:1"), 3))
    assert exit_codes.is_cluster_failure(ConnectionRefusedError())
    assert not exit_codes.is_cluster_failure(FileNotFoundError("x"))
    assert not exit_codes.is_cluster_failure(ValueError())
    import errno

    full = OSError(errno.ENOSPC, "No space left on device")
    assert exit_codes.is_storage_failure(full) and exit_codes.is_storage_failure(PermissionError(errno.EACCES, "no"))
    assert not exit_codes.is_storage_failure(ConnectionRefusedError(errno.EPERM, "refused"))
    assert not exit_codes.is_storage_failure(FileNotFoundError("x"))
    killed = KilledWorker("task", SimpleNamespace(address="tcp://w:1"), 3)
    for raised, code in ((killed, 4), (CommClosedError("lost"), 4), (KeyboardInterrupt(), 130), (RuntimeError("bug"), 1),
                         (exit_codes.Terminated(), 143), (exit_codes.HungUp(), 129), (full, 5), (InputError("bad"), 2),
                         (ReleaseGateError("gate"), 3)):
        def command(args, raised=raised):
            raise raised
        monkeypatch.setitem(cli.COMMANDS, "methods", command)
        assert _main(capsys, "methods")[0] == code == exit_codes.exit_code_of(raised)
    code, out, err = _main(capsys, "--log-format", "json", "methods")  # the last one: a gate failure
    event = json.loads(err.strip().splitlines()[-1])
    assert code == 3 and event["event"] == "failed" and event["error"] == "ReleaseGateError"
    assert event["exit_code"] == 3 and event["message"] == "gate"
    monkeypatch.setitem(cli.COMMANDS, "methods", lambda args: (_ for _ in ()).throw(full))
    code, out, err = _main(capsys, "--log-format", "json", "methods")  # a failure microagg classifies: its sentence
    event = json.loads(err.strip().splitlines()[-1])
    assert code == 5 and event["message"].startswith("a filesystem refused a write or read: ")
