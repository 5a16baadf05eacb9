"""The `microagg` command as a user runs it: releases, formats, reports and the atomic commit."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import CENSUS_CSV, assert_k_anonymous, microagg_cli

QI = ["AGI", "FEDTAX", "TAXINC", "FICA", "WSALVAL"]


@pytest.fixture(scope="module")
def extract(tmp_path_factory, census):
    """Census QIs plus an identifier, a categorical and a confidential column, as a CSV file."""
    df = census[QI].copy()
    df.insert(0, "person_id", [f"P{i:05d}" for i in range(len(df))])
    df["region"] = np.array(["north", "south", "east", "west"])[np.arange(len(df)) % 4]
    df["confidential"] = np.arange(len(df)) * 7 % 101
    path = tmp_path_factory.mktemp("input") / "extract.csv"
    df.to_csv(path, index=False)
    return path, df


def _release(tmp_path, *args, k=4, name="release"):
    """The release of ``args`` (the input first), run synchronously, without the HTML page: the tests
    that use it check the release and its report (the page's own tests are in test_report.py)."""
    out = tmp_path / name
    microagg_cli("anonymize", *args, out, "--k", k, "--scheduler", "synchronous", "--no-html", check=True)
    return out


def test_release_invariants(tmp_path, extract):
    path, df = extract
    out = _release(tmp_path, path, "--qi", ",".join(QI), "--identifiers", "person_id", k=4)
    released = pd.read_parquet(out)
    assert len(released) == len(df)
    assert "person_id" not in released.columns
    assert list(released.columns) == [c for c in df.columns if c != "person_id"]
    assert released["region"].tolist() == df["region"].tolist()
    pd.testing.assert_series_equal(released["confidential"], df["confidential"])
    assert all(released[c].dtype == np.float64 for c in QI)
    assert_k_anonymous(released, QI, 4)
    # mean aggregation preserves every QI column total
    np.testing.assert_allclose(released[QI].sum().to_numpy(), df[QI].sum().to_numpy(), rtol=1e-12)
    report = json.loads((out / "_report.json").read_text())
    for key in ("rows", "k", "method", "quasi_identifiers", "groups", "min_group_size", "max_group_size",
                "information_loss", "sse", "sst", "k_anonymity_verified", "timings", "version"):
        assert key in report, key
    assert report["rows"] == len(df) and report["quasi_identifiers"] == QI
    assert report["min_group_size"] >= 4 and report["max_group_size"] <= 7
    assert set(report["timings"]) >= {"read", "validate", "statistics", "blocks", "gate", "write"}
    assert (out / "_SUCCESS").exists()
    assert not [p for p in os.listdir(tmp_path) if ".microagg-" in p], "temporary directory left behind"


def test_qi_default_is_every_numeric_column_not_named_elsewhere(tmp_path, extract):
    path, df = extract
    out = _release(tmp_path, path, "--identifiers", "person_id")
    report = json.loads((out / "_report.json").read_text())
    assert report["quasi_identifiers"] == [*QI, "confidential"]


def test_median_aggregate(tmp_path, extract):
    path, df = extract
    out = _release(tmp_path, path, "--qi", ",".join(QI), "--aggregate", "median", k=3)
    released = pd.read_parquet(out)
    assert_k_anonymous(released, QI, 3)
    # every released value is the median of the original values of its group
    groups = released.groupby(QI, sort=False).ngroup()
    for column in QI:
        medians = df[column].groupby(groups).transform("median")
        np.testing.assert_array_equal(released[column].to_numpy(), medians.to_numpy())


def test_parquet_inputs_give_byte_identical_releases(tmp_path, extract):
    path, df = extract
    single = tmp_path / "one.parquet"
    df.to_parquet(single, index=False)
    directory = tmp_path / "four"
    directory.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(df)), 4)):
        df.iloc[part].to_parquet(directory / f"part-{i}.parquet", index=False)
    common = ["--qi", ",".join(QI), "--rows-per-file", "400", "--no-evaluate"]  # the bytes alone
    outs = [
        _release(tmp_path, path, *common, name="from-csv"),
        _release(tmp_path, single, *common, name="from-file"),
        _release(tmp_path, directory, *common, name="from-dir"),
        _release(tmp_path, f"{directory}/*.parquet", *common, name="from-glob"),
        _release(tmp_path, f"file://{directory}", *common, name="from-url"),  # an fsspec URL
    ]
    # the same four files on a local cluster: a projection of few columns may be re-partitioned by
    # Dask's optimizer; row ids must not depend on it (regression)
    cluster = tmp_path / "from-dir-cluster"
    microagg_cli("anonymize", directory, cluster, "--k", 4, *common, "--workers", 2, check=True)
    outs.append(cluster)
    files = sorted(p.name for p in outs[0].glob("*.parquet"))
    assert files == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    for out in outs[1:]:
        assert sorted(p.name for p in out.glob("*.parquet")) == files
        for name in files:
            assert (out / name).read_bytes() == (outs[0] / name).read_bytes(), (out, name)


def test_local_cluster_release_equals_synchronous(tmp_path):
    sync = _release(tmp_path, CENSUS_CSV, k=3, name="sync")
    out = tmp_path / "cluster"
    proc = microagg_cli("anonymize", "--no-html", CENSUS_CSV, out, "--k", 3, "--workers", 2, check=True)
    assert "information loss: 5.692 %" in proc.stdout
    assert (out / "part-00000.parquet").read_bytes() == (sync / "part-00000.parquet").read_bytes()


def test_report_path_and_rerun_replaces_release(tmp_path, extract):
    path, _ = extract
    report = tmp_path / "elsewhere" / "report.json"
    report.parent.mkdir()
    out = tmp_path / "release"
    for k in (3, 5):
        proc = microagg_cli("anonymize", path, out, "--k", k, "--qi", ",".join(QI), "--report", report,
                            "--scheduler", "synchronous", check=True)
        assert str(report) in proc.stdout
        assert json.loads(report.read_text())["k"] == k
        assert_k_anonymous(pd.read_parquet(out), QI, k)
    assert not (out / "_report.json").exists() and not (out / "_report.html").exists()
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "release"]
    assert sorted(os.listdir(report.parent)) == ["report.html", "report.json"]  # the page beside the report
    assert json.loads(report.read_text())["html"] == str(report.with_suffix(".html"))


def test_methods_lists_methods_with_papers():
    proc = microagg_cli("methods", check=True)
    assert "mdav" in proc.stdout and "Domingo-Ferrer" in proc.stdout
    assert "pcp" in proc.stdout and "zscore" in proc.stdout


def test_other_methods_run_end_to_end(tmp_path):
    for method in ("pcp", "zscore"):
        out = _release(tmp_path, CENSUS_CSV, "--method", method, k=3, name=method)
        report = json.loads((out / "_report.json").read_text())
        assert report["method"] == method and report["min_group_size"] >= 3 and report["max_group_size"] <= 5
        assert_k_anonymous(pd.read_parquet(out), report["quasi_identifiers"], 3)


def test_bundled_example_is_the_census_file(tmp_path):
    out = tmp_path / "demo"
    proc = microagg_cli("anonymize", "example:census", out, "--k", 5, "--scheduler", "synchronous", check=True)
    assert "information loss: 9.088 %" in proc.stdout
    assert f"release: {out}" in proc.stdout and "_report.json" in proc.stdout
    assert len(pd.read_parquet(out)) == 1080


def test_threaded_local_cluster_runs_blas_on_one_thread():
    """Workers as threads of the CLI's process: BLAS limited to one thread while the cluster runs (as
    Dask's nanny does for worker processes), the process's setting restored afterwards."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from microagg.jobs.cluster import dask_client

    def blas_threads():
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        assert before and all(n == min(2, os.cpu_count()) for n in before)
        with dask_client("local", workers=1, threads_per_worker=2, processes=False) as client:
            assert blas_threads() == [1] * len(before)
            assert client.submit(blas_threads).result() == [1] * len(before)  # seen from a worker thread
        assert blas_threads() == before


def test_local_worker_processes_give_up_on_a_dead_peer_sooner():
    """--processes: the worker processes connect with PEER_CONNECT_TIMEOUT (a killed peer stalls
    their fetches that long, not Dask's 30 s); this process's configuration is left as it was."""
    import importlib

    import dask

    importlib.import_module("distributed")  # its configuration defaults, read below before any cluster starts

    from microagg.jobs.cluster import PEER_CONNECT_TIMEOUT, dask_client

    before = dask.config.get("distributed.comm.timeouts.connect")
    with dask_client("local", workers=2, threads_per_worker=1, processes=True) as client:
        timeouts = client.run(lambda: __import__("dask").config.get("distributed.comm.timeouts.connect"))
    assert sorted(timeouts.values()) == [PEER_CONNECT_TIMEOUT] * 2
    assert dask.config.get("distributed.comm.timeouts.connect") == before


def test_a_tight_memory_limit_spills_early_enough_to_leave_a_task_its_headroom():
    """Worker processes of 1.5 GiB spill from 61.6% down to 51.6% of it (Dask's 70% / 60% would leave the
    largest task 25% of the limit below the nanny's restart at 95%, less than it needs); a limit with
    room to spare, or none given, keeps Dask's defaults."""
    from microagg.jobs.cluster import TASK_HEADROOM, dask_client, memory_thresholds

    def fractions(dask_worker):
        memory = dask_worker.memory_manager
        return memory.memory_spill_fraction, memory.memory_target_fraction

    with dask_client("local", workers=1, threads_per_worker=1, memory_limit="1.5GiB", processes=True) as client:
        ((spill, target),) = client.run(fractions).values()
    assert (spill, target) == (0.616, 0.516)
    assert (0.95 - spill) * 1.5 * 2**30 >= TASK_HEADROOM
    assert memory_thresholds("1.5GiB", 2)["distributed.worker.memory.spill"] == 0.4  # two tasks at a time: floor
    assert memory_thresholds("4GiB", 1) == {"distributed.worker.memory.spill": 0.7, "distributed.worker.memory.target": 0.6}
    assert memory_thresholds("auto", 1) == memory_thresholds(0, 1) == {}


def test_a_job_refused_at_once_leaves_only_after_the_report_modules_import_aside(tmp_path):
    """The report's module (matplotlib) is imported in a thread while the statistics pass reads; the
    command leaves with os._exit, so a job refused in that pass must still wait for the import:
    matplotlib's first import writes its font cache (a fresh MPLCONFIGDIR here), never cut short."""
    source = tmp_path / "missing.csv"
    source.write_text("a,b,c\n1,2,3\n4,,6\n7,8,9\n1,2,3\n4,5,6\n")
    config = tmp_path / "mpl"
    config.mkdir()
    exe = Path(sys.executable).with_name("microagg")
    proc = subprocess.run([str(exe), "anonymize", str(source), str(tmp_path / "out"), "--k", "2", "--scheduler",
                           "synchronous"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MPLCONFIGDIR": str(config)})
    assert proc.returncode == 2 and "column 'b' has 1 row(s) with a missing (NaN) value" in proc.stderr
    assert not (tmp_path / "out").exists()
    (cache,) = config.glob("fontlist-*.json")
    assert json.loads(cache.read_text())["ttflist"]  # whole: every font found
    assert not list(config.glob("*lock*"))


def test_a_memory_limit_below_a_workers_idle_footprint_is_refused(tmp_path):
    """Exit 2 before any cluster starts (a worker below its idle footprint would stall), nothing written."""
    out = tmp_path / "out"
    proc = microagg_cli("anonymize", CENSUS_CSV, out, "--k", 3, "--processes", "--memory-limit", "200MiB")
    assert proc.returncode == 2
    assert "--memory-limit 200MiB: 200.00 MiB per worker is below the 512.00 MiB minimum" in proc.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


def test_the_command_leaves_with_its_output_flushed_and_its_exit_code(tmp_path):
    # the console command ends with os._exit (no interpreter teardown): everything printed and
    # logged must still reach the pipes, and the exit code must be main's
    out = tmp_path / "release"
    proc = microagg_cli("--log-format", "json", "anonymize", "example:census", out, "--k", 3, "--scheduler",
                        "synchronous", check=True)
    *_, loss, risk = proc.stdout.rstrip().splitlines()
    assert loss == "information loss: 5.692 %" and risk.startswith("disclosure risk: DLD ")  # evaluated by default
    last = json.loads(proc.stderr.strip().splitlines()[-1])
    assert (last["event"], last["exit_code"], last["rows_released"]) == ("finished", 0, 1080)
    failed = microagg_cli("--log-format", "json", "anonymize", tmp_path / "missing.csv", tmp_path / "other", "--k", 3)
    last = json.loads(failed.stderr.strip().splitlines()[-1])
    assert failed.returncode == last["exit_code"] == 2
    assert not (tmp_path / "other").exists()


# --- options refused up front (exit 2, the flag named, nothing read or written) --------------------------

def test_a_report_path_over_an_input_file_is_refused_and_the_input_kept(tmp_path, extract):
    path, df = extract
    data = tmp_path / "data"
    data.mkdir()
    df.iloc[:200].to_parquet(data / "part-0.parquet", index=False)
    df.iloc[200:].to_parquet(data / "part-1.parquet", index=False)
    csv = tmp_path / "extract.csv"
    csv.write_bytes(path.read_bytes())
    before = {p: p.read_bytes() for p in (data / "part-0.parquet", data / "part-1.parquet", csv)}
    out = tmp_path / "release"
    cases = [(data, data / "part-1.parquet", "lies inside the input"),
             (str(data / "*.parquet"), data / "part-1.parquet", "is an input file"),
             (csv, csv, "is an input file"),
             (data, data / "report.json", "lies inside the input")]
    for source, report, says in cases:
        proc = microagg_cli("anonymize", source, out, "--k", 5, "--qi", "AGI", "--no-evaluate", "--no-html",
                            "--report", report, "--scheduler", "synchronous")
        assert proc.returncode == 2, proc.stderr
        assert "--report" in proc.stderr and says in proc.stderr, proc.stderr
    # `microagg evaluate`'s report over a file it compares
    proc = microagg_cli("evaluate", csv, csv, "--qi", "AGI", "--report", csv, "--scheduler", "synchronous")
    assert proc.returncode == 2 and "--report" in proc.stderr and "is an input file" in proc.stderr, proc.stderr
    assert not out.exists()
    assert {p: p.read_bytes() for p in before} == before


def test_a_report_path_that_is_the_release_directory_is_refused(tmp_path, extract):
    path, _ = extract
    out = tmp_path / "release"
    proc = microagg_cli("anonymize", path, out, "--k", 5, "--qi", "AGI", "--no-evaluate", "--report", out,
                        "--scheduler", "synchronous")
    assert proc.returncode == 2, proc.stderr
    assert "--report" in proc.stderr and "is the release directory" in proc.stderr
    assert not out.exists()


def test_a_report_inside_the_release_is_a_file_directly_in_it_named_with_an_underscore(tmp_path, extract):
    """``--report OUTPUT/r.json`` was written into the release, where a Parquet reader of it takes every
    file for data; ``OUTPUT/_r.json`` was refused on a first run (its directory did not exist yet)."""
    path, df = extract
    out = tmp_path / "release"
    for report in (out / "r.json", out / "sub" / "_r.json"):
        proc = microagg_cli("anonymize", path, out, "--k", 5, "--qi", "AGI", "--no-evaluate", "--report", report,
                            "--scheduler", "synchronous")
        assert proc.returncode == 2 and "a report inside the release must be a file directly in it" in proc.stderr
        assert not out.exists()
    for run in range(2):  # the first run makes the directory; a re-run replaces release and report
        microagg_cli("anonymize", path, out, "--k", 5, "--qi", "AGI", "--no-evaluate", "--report", out / "_r.json",
                     "--scheduler", "synchronous", check=True)
        assert json.loads((out / "_r.json").read_text())["rows"] == len(df)
        assert len(pd.read_parquet(out)) == len(df)


def test_default_qis_leave_out_the_weights_and_strata_columns(tmp_path, extract):
    path, df = extract
    source = tmp_path / "in.csv"
    df = df.assign(confidential=df["confidential"] + 1, stratum=np.arange(len(df)) % 2)  # weights > 0
    df.to_csv(source, index=False)
    out = _release(tmp_path, source, "--identifiers", "person_id", "--weights", "confidential", "--strata", "stratum",
                   "--no-evaluate", k=4)
    report = json.loads((out / "_report.json").read_text())
    assert report["quasi_identifiers"] == QI
    released = pd.read_parquet(out)
    pd.testing.assert_series_equal(released["confidential"], df["confidential"])
    pd.testing.assert_series_equal(released["stratum"], df["stratum"])
    # the Python API, in memory and on Dask
    import dask.dataframe as dd

    import microagg

    frame = df.drop(columns=["person_id", "region"]).astype({"confidential": "float64"})
    for data in (frame, dd.from_pandas(frame, npartitions=2)):
        result = microagg.anonymize(data, 4, weights="confidential", strata=["stratum"])
        result = result.compute(scheduler="synchronous") if hasattr(result, "compute") else result
        np.testing.assert_array_equal(result["confidential"].to_numpy(), frame["confidential"].to_numpy())
        np.testing.assert_array_equal(result["stratum"].to_numpy(), frame["stratum"].to_numpy())
        assert_k_anonymous(result, QI, 4)


@pytest.mark.parametrize("flags, message", [
    (["--seed", "18446744073709551616"], "--seed must be an integer from 0 to 2**63-1"),
    (["--method", "ga", "--seed", "-1"], "--seed must be an integer from 0 to 2**63-1"),
    (["--qi", ","], "--qi ',' names no column; omit --qi for the default"),
    (["--qi", " "], "--qi ' ' names no column; omit --qi for the default"),
    (["--qi", ""], "--qi '' names no column; omit --qi for the default"),
    (["--method", "vmdav", "--gamma", "-1"], "--gamma: vmdav option gamma must be a finite number in [0.0, inf]"),
    (["--method", "dbm", "--eps", "0"], "--eps: dbm option eps must be a finite number > 0"),
    (["--refine", "ils", "--time-budget", "-1"], "--time-budget: ils option time_budget must be a finite number > 0"),
    (["--refine", "ils", "--iterations", "0"], "--iterations: ils option iterations must be an integer >= 1"),
    (["--strata", ","], "--strata ',' names no column; omit --strata"),
    (["--workers", "0"], "argument --workers: must be an integer >= 1, got '0'"),
    (["--threads-per-worker", "0"], "argument --threads-per-worker: must be an integer >= 1"),
    (["--scheduler", "foo"], 'argument --scheduler: must be "local", "synchronous" or a scheduler address'),
], ids=["seed-too-large", "seed-negative", "qi-comma", "qi-blank", "qi-empty", "gamma", "eps", "time-budget",
        "iterations", "strata-comma", "workers-0", "threads-0", "scheduler"])
def test_out_of_range_options_are_refused_before_the_input_is_read(tmp_path, flags, message):
    out = tmp_path / "release"
    # the input does not exist: the options are refused before it is opened
    proc = microagg_cli("anonymize", tmp_path / "absent.csv", out, "--k", 5, *flags, "--scheduler", "synchronous")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "does not exist" not in proc.stderr, proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("grace", ["soon", "-1", "inf", "nan"])
def test_a_stop_grace_that_is_not_seconds_is_refused_before_the_input_is_read(tmp_path, monkeypatch, grace):
    monkeypatch.setenv("MICROAGG_STOP_GRACE", grace)
    out = tmp_path / "release"
    proc = microagg_cli("anonymize", tmp_path / "absent.csv", out, "--k", 5, "--scheduler", "synchronous")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"microagg: error: MICROAGG_STOP_GRACE={grace!r}: not a number of seconds (0 or "
                                   f"more): the time a job stopped by a signal has to unwind. Nothing was written.")
    assert not out.exists()


def test_the_largest_seed_runs(tmp_path, extract):
    path, _ = extract
    out = _release(tmp_path, path, "--qi", ",".join(QI), "--seed", 2**63 - 1, "--refine", "ils", "--iterations", 2,
                   "--no-evaluate", k=4)
    assert json.loads((out / "_report.json").read_text())["seed"] == 2**63 - 1


def test_the_suites_forked_command_answers_as_the_command_started_afresh(tmp_path, monkeypatch):
    """``microagg_cli`` forks the suite's commands from a process that imported microagg once
    (tests/cli_server.py, 1.5 s of a core saved a command): a forked command gives the exit code,
    standard output and standard error of the installed command started afresh (a success, a refusal,
    argparse's own error, in the caller's directory), and one past its timeout is killed as
    ``subprocess.run`` kills it, the server serving on."""
    from conftest import _forked

    exe = str(Path(sys.executable).with_name("microagg"))
    (tmp_path / "in.csv").write_text("Q,B\n" + "".join(f"{'x' if i % 7 == 0 else i},{i % 3}\n" for i in range(40)))
    monkeypatch.chdir(tmp_path)
    answers = {}
    for args in (["--version"], ["methods"], ["anonymize", "--k"],
                 ["anonymize", "in.csv", "out", "--k", "3", "--qi", "Q,B", "--scheduler", "synchronous"]):
        forked = _forked([exe, *args], 120)
        assert forked is not None, "the command server did not run the command"
        plain = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)
        assert (forked.returncode, forked.stdout, forked.stderr) == (plain.returncode, plain.stdout, plain.stderr)
        answers[args[-1]] = forked
    assert answers["--version"].returncode == 0 and answers["--version"].stdout.strip()
    assert answers["methods"].returncode == 0 and "mdav" in answers["methods"].stdout
    assert answers["--k"].returncode == 2 and "--k" in answers["--k"].stderr
    refused = answers["synchronous"]
    assert refused.returncode == 2 and "'Q'" in refused.stderr and "6 row" in refused.stderr
    assert not (tmp_path / "out").exists()
    (tmp_path / "ok.csv").write_text("A,B\n" + "".join(f"{i},{i % 3}\n" for i in range(40)))
    previous = os.umask(0o027)  # the files' modes follow the caller's umask, not the server's
    try:
        modes = {}
        for name, how in (("forked", _forked), ("plain", lambda argv, timeout: subprocess.run(argv, timeout=timeout))):
            done = how([exe, "anonymize", "ok.csv", name, "--k", "3", "--scheduler", "synchronous", "--no-html"], 120)
            assert done is not None and done.returncode == 0
            modes[name] = sorted((p.name, p.stat().st_mode & 0o777) for p in (tmp_path / name).iterdir())
    finally:
        os.umask(previous)
    assert modes["forked"] == modes["plain"] and ("_SUCCESS", 0o640) in modes["forked"], modes
    with socket.create_server(("127.0.0.1", 0)) as silent:  # a "scheduler" that never answers (Dask's
        # connection waits 30 s for its handshake)
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(subprocess.TimeoutExpired):
            _forked([exe, "anonymize", "in.csv", "never", "--k", "3", "--qi", "B", "--scheduler", address], 5)
    assert _forked([exe, "--version"], 60).stdout == answers["--version"].stdout
