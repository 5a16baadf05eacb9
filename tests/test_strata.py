"""Strata (--strata, --small-strata): every group inside one stratum, in memory and distributed."""

import json

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import microagg
from conftest import assert_k_anonymous, assert_refused, microagg_cli
from synthetic import QI, extract


def _strata_per_tuple(released, strata):
    keys = released[strata].astype(str).agg("|".join, axis=1)
    return keys.groupby([released[q] for q in QI]).nunique()


@pytest.fixture(scope="module")
def frame():
    return extract(10000, seed=12)


def test_groups_stay_inside_strata_in_memory_and_distributed(frame):
    args = dict(quasi_identifiers=QI, identifiers=["person_id"], strata=["region", "flag"], block_size=1200)
    in_memory = microagg.anonymize(frame, 4, **args)
    with dask.config.set(scheduler="synchronous"):
        distributed = microagg.anonymize(dd.from_pandas(frame, npartitions=5), 4, **args).compute()
    pd.testing.assert_frame_equal(distributed.reset_index(drop=True), in_memory.reset_index(drop=True))
    assert _strata_per_tuple(in_memory, ["region", "flag"]).max() == 1
    for _, part in in_memory.groupby(["region", "flag"], observed=True):
        assert_k_anonymous(part, QI, 4)  # k-anonymous inside every stratum
    plain = microagg.anonymize(frame, 4, QI, identifiers=["person_id"], block_size=1200)
    assert _strata_per_tuple(plain, ["region", "flag"]).max() > 1  # without strata, groups mix them


def test_cli_strata_on_a_cluster_equal_synchronous(tmp_path, frame):
    source = tmp_path / "in.parquet"
    frame.to_parquet(source, index=False)
    common = ["--k", 5, "--qi", ",".join(QI), "--identifiers", "person_id", "--strata", "region",
              "--block-size", 1500]
    outs = []
    for name, extra in (("sync", ["--scheduler", "synchronous"]), ("local", ["--workers", 2])):
        out = tmp_path / name
        microagg_cli("anonymize", "--no-html", source, out, *common, *extra, check=True)
        outs.append(out)
    assert (outs[0] / "part-00000.parquet").read_bytes() == (outs[1] / "part-00000.parquet").read_bytes()
    report = json.loads((outs[0] / "_report.json").read_text())
    assert report["strata"]["count"] == 4 and report["strata"]["solved_separately"] == 4
    assert report["strata"]["merged"] == []


def test_small_stratum_is_an_error_unless_merged(tmp_path, frame):
    df = frame.iloc[:3000].copy()
    df["region"] = df["region"].cat.add_categories(["islands"])
    df.loc[[10, 20, 30], "region"] = "islands"  # 3 rows < k = 5
    source = tmp_path / "in.parquet"
    df.to_parquet(source, index=False)
    common = ["--k", 5, "--qi", ",".join(QI), "--identifiers", "person_id", "--strata", "region",
              "--scheduler", "synchronous"]
    proc = microagg_cli("anonymize", "--no-html", source, tmp_path / "refused", *common)
    assert proc.returncode == 2
    assert "region='islands' (3 rows)" in proc.stderr and "--small-strata merge" in proc.stderr
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "merged"
    microagg_cli("anonymize", "--no-html", source, out, *common, "--small-strata", "merge", check=True)
    report = json.loads((out / "_report.json").read_text())
    [merge] = report["strata"]["merged"]
    assert merge["stratum"] == "region='islands'" and merge["rows"] == 3 and merge["into"].startswith("region=")
    released = pd.read_parquet(out)
    assert_k_anonymous(released, QI, 5)
    into = merge["into"].split("=")[1].strip("'")
    groups = released.groupby(QI).ngroup()
    islands = set(groups[released["region"] == "islands"])
    # the small stratum's rows were grouped inside the stratum it was merged into, nowhere else
    partners = set(released.loc[groups.isin(islands), "region"].astype(str))
    assert partners <= {"islands", into}
    same = microagg.anonymize(df, 5, QI, identifiers=["person_id"], strata=["region"], small_strata="merge")
    np.testing.assert_array_equal(same[QI].to_numpy(), released[QI].to_numpy())


@pytest.mark.parametrize("change, flags, message", [
    (None, ["--strata", "nope"], "strata column 'nope' is not in the input"),
    (None, ["--strata", "q2"], "strata column 'q2' is also a quasi-identifier"),
    ("missing", ["--strata", "flag"], "1 row(s) have a missing value"),
])
def test_bad_strata_fail_before_anything_is_written(tmp_path, frame, change, flags, message):
    df = frame.iloc[:500].copy()
    if change == "missing":
        df["flag"] = df["flag"].astype("Int64")
        df.loc[7, "flag"] = pd.NA
    assert_refused(tmp_path, df, QI, 3, flags, message)


def test_a_stratum_is_named_by_its_values():
    """As the errors and the report show it: region=7, not NumPy 2's region=np.int64(7)."""
    from microagg.pipeline import strata

    assert strata._name(["region", "year"], (np.str_("north"), np.int64(2026))) == "region='north', year=2026"
    assert strata._name(["share"], np.float64(0.5)) == "share=0.5"


def test_many_small_strata_are_solved_in_packs_as_each_alone(tmp_path, frame):
    """Strata of one task share a Dask partition (a pack) up to a task's rows, each still solved on
    its own: the release is the in-memory one, where every task is solved apart. Large strata keep
    their tasks and upper planes."""
    from microagg.pipeline import blocking

    df = frame.copy()
    rng = np.random.default_rng(3)
    df["cell"] = np.where(np.arange(len(df)) < 4000, 0, 1 + rng.zipf(1.6, len(df)) % 150)  # one large, many small
    args = dict(quasi_identifiers=QI, identifiers=["person_id"], strata=["cell"], small_strata="merge",
                block_size=400, blocks_per_task=3, one_block_rows=400)
    in_memory = microagg.anonymize(df, 4, **args)
    with dask.config.set(scheduler="synchronous"):
        distributed = microagg.anonymize(dd.from_pandas(df, npartitions=4), 4, **args).compute()
    pd.testing.assert_frame_equal(distributed.reset_index(drop=True), in_memory.reset_index(drop=True))
    assert_k_anonymous(in_memory, QI, 4)

    rows = df["cell"].value_counts().sort_index().to_numpy()
    none = np.zeros(0)
    trees = [blocking.SplitTree(none, none, none, none, leaf_task=np.arange(n), task_root=-1 - np.arange(n),
                                upper=np.zeros(n - 1, dtype=np.int64), task_ancestors=[[]] * n)
             for n in [3, *[1] * (len(rows) - 1)]]  # the first stratum in 3 tasks (a leaf each), the others in 1
    forest = blocking.Forest(trees, rows, 1200)
    assert forest.n_packs < forest.n_tasks
    assert list(forest.task_pack[:4]) == [0, 1, 2, 3]  # a tree of several tasks: a pack per task
    assert (np.diff(forest.task_pack) >= 0).all()
    packs = forest.task_pack[3:]
    filled, trees_in = np.bincount(packs, weights=rows[1:])[3:], np.bincount(packs)[3:]
    assert (filled[trees_in > 1] <= 1200).all() and trees_in.max() > 1
    first_rows = rows[1:][np.searchsorted(packs, np.arange(4, forest.n_packs))]
    assert (filled[:-1] + first_rows > 1200).all()  # each pack as full as the next tree lets it be
    assert all(forest.pack_tasks(p) == range(p, p + 1) for p in range(3))


def test_the_nearest_stratum_is_found_as_the_direct_sums_find_it():
    from microagg.pipeline import strata

    rng = np.random.default_rng(4)
    centres = np.round(rng.normal(size=(300, 5)), 1)
    centres[7] = centres[3]  # a tie: the first in order wins
    points = np.vstack([centres[3] + 1e-17, np.round(rng.normal(size=(500, 5)), 1), rng.normal(size=(50, 5)) * 1e6])
    expected = [int(np.argmin(((centres - p) ** 2).sum(axis=1))) for p in points]
    assert list(strata._nearest(points, centres)) == expected
    assert strata._nearest(points, centres)[0] == 3
