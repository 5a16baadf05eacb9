"""The projection to many workers (tests/benchmarks/project_workers.py) counts the pipeline's tasks by the
functions they run; these tests hold its names to the graphs the pipeline builds on several workers."""

import sys
from pathlib import Path

import dask
import numpy as np
import pytest

from synthetic import QI, extract

sys.path.insert(0, str(Path(__file__).resolve().parent / "benchmarks"))
import project_workers  # noqa: E402


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both paths measured on two in-process workers: 20k rows in four files, blocks of 1,500 rows, four
    blocks a task (so several tasks and upper planes), files of 3,000 rows."""
    from distributed import Client, LocalCluster

    from microagg.pipeline.release import ReleaseOptions

    root = tmp_path_factory.mktemp("projection")
    df = extract(20_000, seed=3)
    (root / "four").mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(df)), 4)):
        df.iloc[rows].to_parquet(root / "four" / f"part-{i}.parquet", index=False)
    options = ReleaseOptions(k=4, quasi_identifiers=tuple(QI), identifiers=("person_id",), block_size=1500,
                             blocks_per_task=4, rows_per_file=3000)
    scratch = root / "scratch"
    scratch.mkdir()
    with dask.config.set({"temporary-directory": str(scratch)}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        return project_workers.measured_runs(cluster, client, root / "four", root / "out", tuple(project_workers.PATHS),
                                             options)


def test_each_path_runs_the_tasks_the_model_counts(runs):
    for path, (_, report, windows, _, tasks, _) in runs.items():  # project_workers.Run
        assert report["rows_in_transit"] == path and report["released_pieces"] == path
        assert report["upper_planes"] > 0
        assert project_workers.missing_labels(tasks, path) == []
        assert {name for name, _, _ in windows} >= {"statistics", "blocks", "write"}
    labels = {path: {label for label, _, _ in run.tasks.values()} for path, run in runs.items()}
    # the memory path's rows go through its exchanges' pieces; the files path has no exchange
    assert {"_route[piece]", "_by_file[piece]"} <= labels["memory"]
    assert not labels["files"] & set(project_workers.FAN_OUT)
    assert not any(label.endswith("[piece]") and label.removesuffix("[piece]") in project_workers.FAN_OUT
                   for label in labels["files"])


def test_every_upper_plane_s_rows_come_from_the_memory_run_for_both_paths(runs):
    report = runs["memory"][1]
    rows_of = project_workers.upper_rows(runs["memory"].tasks)
    assert len(rows_of) == report["upper_planes"]
    assert all(rows > 0 for rows in rows_of.values())
    files_upper = {key[1:] for key, (label, _, _) in runs["files"].tasks.items() if label in project_workers.GROWS}
    assert files_upper == set(rows_of)  # the same planes, by tag, in both runs


def test_a_run_without_a_modelled_task_is_named(runs):
    tasks = {key: value for key, value in runs["memory"].tasks.items() if value[0] != "_by_file"}
    assert project_workers.missing_labels(tasks, "memory") == ["_by_file"]
    assert project_workers.missing_labels(runs["memory"].tasks, "files") == [
        "_route_to_file", "_solve_pack_read", "_stitch_upper_read", "_from_pieces"]
