"""`microagg evaluate` (pipeline/evaluate.py): the distributed measures against the in-memory ones of
pipeline/metrics.py, on the census file and its MDAV release, and the command as a user runs it."""

import contextlib
import json
import os
import re

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import microagg
from conftest import CENSUS_CSV, PUBLISHED_MDAV_IL, microagg_cli
from microagg.pipeline import evaluate as ev
from microagg.pipeline import columns, io, metrics, report as page
from microagg.pipeline.errors import InputError

QI = ["AFNLWGT", "AGI", "EMCONTRB", "FEDTAX", "PTOTVAL", "STATETAX", "TAXINC", "POTHVAL", "INTVAL", "PEARNVAL",
      "FICA", "WSALVAL", "ERNVAL"]


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


@pytest.fixture(scope="module")
def census_release(tmp_path_factory, census):
    """Census with an identifier and two non-QI columns, and its classic MDAV k=3 release (Parquet,
    identifier dropped, written in two files)."""
    df = census.copy()
    df.insert(0, "person_id", np.arange(len(df)))
    df["region"] = np.array(["north", "south", "east", "west"])[np.arange(len(df)) % 4]
    df["confidential"] = np.arange(len(df)) * 7 % 101
    released = microagg.anonymize(df, 3, quasi_identifiers=QI, identifiers=["person_id"])
    root = tmp_path_factory.mktemp("evaluate")
    original = root / "original.csv"
    df.to_csv(original, index=False)
    masked = root / "masked"
    masked.mkdir()
    released.iloc[:500].to_parquet(masked / "part-0.parquet", index=False)
    released.iloc[500:].to_parquet(masked / "part-1.parquet", index=False)
    return original, masked, df, released


def _frames(original, masked, n_original=3, n_masked=2):
    return dd.from_pandas(original, npartitions=n_original), dd.from_pandas(masked, npartitions=n_masked)


# --- the distributed DLD is the in-memory DLD, exactly ------------------------------------------------


def _tie_data(seed, n=700, d=3):
    """Small integers: duplicate originals, duplicate masked tuples and equal distances abound; the
    masked file is the original with a third of its values moved by one."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 6, size=(n, d)).astype(np.float64)
    Xm = X + rng.integers(-1, 2, size=(n, d)) * (rng.random((n, d)) < 0.33)
    return X, Xm


def _continuous_data(seed, n=900, d=4):
    """Correlated continuous records and their MDAV k=4 release (every masked tuple repeated)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) * 100 + 1000
    df = pd.DataFrame(X, columns=[f"c{j}" for j in range(d)])
    return X, microagg.anonymize(df, 4)[list(df.columns)].to_numpy()


@pytest.mark.parametrize("make, seed", [(_tie_data, 1), (_tie_data, 2), (_continuous_data, 3)])
def test_distributed_dld_equals_metrics_dld_exactly(make, seed):
    X, Xm = make(seed)
    d = X.shape[1]
    names = [f"c{j}" for j in range(d)]
    original, masked = _frames(pd.DataFrame(X, columns=names), pd.DataFrame(Xm, columns=names), 3, 4)
    known = [names[:2], [names[-1]]]
    report = ev.evaluate(original, masked, names, known=known, block_rows=60, piece_rows=111, seed=seed)
    _assert_summary_is_summary_data(report, X, Xm, names)
    scenarios = report["disclosure_risk"]["scenarios"]
    assert [s["columns"] for s in scenarios] == [names, names[:2], [names[-1]]]
    for scenario, cols in zip(scenarios, [None, [0, 1], [d - 1]]):
        assert scenario["dld"] == metrics.dld(X, Xm, cols)  # bit for bit
        assert scenario["linkage"]["blocks"] > 4
    assert scenarios[0]["linkage"]["second_round_queries"] > 0  # the blocks had to ask each other
    # the links themselves, record by record
    prep = ev.prepare(original, masked, names, piece_rows=111)
    sample = ev.draw_sample(prep.pairs, prep.n_rows, 60, seed)
    finals, partition = ev.record_linkage(prep.pairs, prep.mean, prep.std, [0, 1, 2][:d], sample, 60)
    links = ev.links_in_row_order(finals, prep.n_rows)
    expected = metrics.record_linkage(X, Xm, columns=list(range(min(3, d))))
    for got, want in zip(links, expected):
        np.testing.assert_array_equal(got, want)
    assert partition.n_blocks > 4


def _assert_summary_is_summary_data(report, X, Xm, names):
    """The page's data summary, merged from the aligned pieces (several, across both files' partitions),
    is report.summary_data of the two files: histograms and class sizes exactly."""
    expected = page.summary_data(X, Xm, names)
    got = report["summary"]
    assert report["pieces"] > 3
    for key in ("format", "quasi_identifiers", "rows", "rows_used", "complete_rows", "histograms", "group_sizes"):
        assert got[key] == expected[key], key
    for key in ("correlation", "il_per_attribute"):
        for part in expected[key]:
            np.testing.assert_allclose(got[key][part], expected[key][part], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("direct", [None, 0])  # 0: every exchange in two levels, as on a large cluster
def test_linkage_links_equal_the_in_memory_links_with_either_exchange(monkeypatch, direct):
    from microagg.pipeline import graph

    X, Xm = _continuous_data(4, n=1500)
    names = [f"c{j}" for j in range(X.shape[1])]
    original, masked = _frames(pd.DataFrame(X, columns=names), pd.DataFrame(Xm, columns=names), 3, 4)
    prep = ev.prepare(original, masked, names, piece_rows=200)
    if direct is not None:
        monkeypatch.setattr(graph, "DIRECT_PIECES", direct)
    finals, partition = ev.record_linkage(prep.pairs, prep.mean, prep.std, [0, 1, 2, 3],
                                          ev.draw_sample(prep.pairs, prep.n_rows, 80, 0), 80)
    assert partition.n_blocks > 8 and len(prep.pairs) > 4
    links = ev.links_in_row_order(finals, prep.n_rows)
    for got, want in zip(links, metrics.record_linkage(X, Xm)):
        np.testing.assert_array_equal(got, want)
    assert ev.dld_of(finals, prep.n_rows)[0] == metrics.dld(X, Xm)
    monkeypatch.setattr(ev, "CREDIT_ROWS", 100)  # the credits summed in pieces
    assert ev.dld_of(finals, prep.n_rows)[0] == metrics.dld(X, Xm)


@pytest.mark.parametrize("n, piece_rows", [(0, 8), (7, 8), (1000, 8), (12345, 1000), (3_000_001, 1 << 20)])
def test_credits_summed_in_pieces_are_numpys_sum_of_the_whole_array(n, piece_rows):
    """The DLD's credits, zero but at a fifth of the rows, summed in pieces following NumPy's pairwise halves:
    bit for bit the sum of the whole array."""
    rng = np.random.default_rng(n)
    row_id = rng.permutation(n)[: n // 5]
    credit = 1.0 / rng.integers(1, 9, len(row_id))
    whole = np.zeros(n)
    whole[row_id] = credit
    assert ev.credit_sum(row_id, credit, n, piece_rows) == float(whole.sum())


@pytest.mark.parametrize("make, seed", [(_tie_data, 5), (_continuous_data, 6)])
def test_a_sampled_dld_is_the_mean_credit_of_its_records_with_an_interval(make, seed):
    """``dld_records``: only the records of a deterministic sample of the distinct masked tuples are
    searched, each exactly (its links are those of the in-memory search over every original); the DLD
    is their mean credit."""
    X, Xm = make(seed, n=1800)
    names = [f"c{j}" for j in range(X.shape[1])]
    original, masked = _frames(pd.DataFrame(X, columns=names), pd.DataFrame(Xm, columns=names), 3, 4)
    prep = ev.prepare(original, masked, names, piece_rows=250)
    queries = ev.query_sample(prep.n_rows, 600, seed)
    seed_queries, threshold = queries
    searched = microagg.kernels.row_hashes(np.ascontiguousarray(Xm), seed_queries) < threshold
    assert 400 < searched.sum() < 800  # about the records asked for, the same however the rows are split
    _, tuple_of = np.unique(Xm, axis=0, return_inverse=True)
    tuple_of = tuple_of.ravel()
    assert (np.bincount(tuple_of, weights=searched) % np.bincount(tuple_of) == 0).all()  # whole tuples
    finals, _ = ev.record_linkage(prep.pairs, prep.mean, prep.std, list(range(X.shape[1])),
                                  ev.draw_sample(prep.pairs, prep.n_rows, 100, 0), 100, queries)
    links = ev.links_in_row_order(finals, prep.n_rows)
    expected = metrics.record_linkage(X, Xm)
    for got, want in zip(links, expected):
        np.testing.assert_array_equal(got[searched], want[searched])
    linked = ev.dld_of(finals, prep.n_rows, sampled=True)
    sampled = metrics.Links(None, expected.count, expected.own & searched)
    assert linked.records == searched.sum() and linked.dld == metrics.dld_from_links(sampled, int(searched.sum()))
    lo, hi = linked.interval
    assert lo < linked.dld < hi and hi - lo < 20
    full = metrics.dld(X, Xm)
    assert lo - 2 * (hi - lo) < full < hi + 2 * (hi - lo)  # the estimate is near the exact DLD
    assert ev.query_sample(prep.n_rows, prep.n_rows, seed) is None and ev.query_sample(prep.n_rows, None, 0) is None
    report = ev.evaluate(original, masked, names, known=[names[:2]], dld_records=600, seed=seed)
    risk = report["disclosure_risk"]
    assert (risk["dld"], risk["dld_records"], tuple(risk["dld_interval"])) == (linked.dld, linked.records, (lo, hi))
    known = risk["scenarios"][1]  # an intruder knowing two attributes: the same records searched
    assert known["dld_records"] == linked.records and known["dld_interval"][0] <= known["dld"] <= known["dld_interval"][1]
    subset = metrics.record_linkage(X, Xm, columns=[0, 1])
    assert known["dld"] == metrics.dld_from_links(metrics.Links(None, subset.count, subset.own & searched),
                                                  int(searched.sum()))
    exact = ev.evaluate(original, masked, names)["disclosure_risk"]
    assert exact["dld"] == full and exact["dld_records"] == prep.n_rows and exact["dld_interval"] is None


def test_linkage_blocks_partition_every_record_once():
    X, Xm = _tie_data(5, n=400)
    names = ["a", "b", "c"]
    original, masked = _frames(pd.DataFrame(X, columns=names), pd.DataFrame(Xm, columns=names))
    prep = ev.prepare(original, masked, names)
    finals, partition = ev.record_linkage(prep.pairs, prep.mean, prep.std, [0, 1, 2],
                                          ev.draw_sample(prep.pairs, prep.n_rows, 50, 0), 50)
    rows = np.sort(np.concatenate([f.row_id for f in dask.compute(*finals)]))
    np.testing.assert_array_equal(rows, np.arange(400))


def test_a_row_s_linkage_block_is_the_cell_its_values_reach_down_the_splits():
    rng = np.random.default_rng(8)
    Zs = np.round(rng.normal(size=(3000, 4)), 1)  # ties at the thresholds
    partition = ev.link_partition(Zs, 0.1, 2000)
    assert partition.n_blocks > 8
    Z = np.round(rng.normal(size=(5000, 4)), 1)
    Z[::97, 1] = np.nan  # a NaN goes right
    Z[5] = [partition.threshold[0] if j == partition.dim[0] else 0.0 for j in range(4)]  # on the root's plane: left

    def walk(z):
        node = 0
        while True:
            child = partition.left[node] if z[partition.dim[node]] <= partition.threshold[node] else partition.right[node]
            if child < 0:
                return -1 - child
            node = child

    blocks = partition.route(Z)
    np.testing.assert_array_equal(blocks, [walk(z) for z in Z])
    assert set(blocks) == set(range(partition.n_blocks))
    assert (partition.route(Z[:0]) == 0).all() and len(partition.route(Z[:0])) == 0
    flat = ev.LinkPartition(np.empty(0, np.int64), np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64), 1)
    np.testing.assert_array_equal(flat.route(Z), np.zeros(len(Z), dtype=np.int64))


# --- census --------------------------------------------------------------------------------------------


def test_census_against_itself(census):
    original = dd.read_csv(CENSUS_CSV)
    report = ev.evaluate(original, dd.read_csv(CENSUS_CSV), QI, k=2, known=["ERNVAL", "FICA,WSALVAL"])
    assert report["disclosure_risk"]["dld"] == 100.0
    assert report["information_loss"]["il"] == 0.0 and report["information_loss"]["sse"] == 0.0
    assert report["information_loss"]["family"]["IL"] == 0.0
    X = census[QI].to_numpy(dtype=np.float64)
    # a single attribute with repeated values: duplicates share the credit
    assert report["disclosure_risk"]["scenarios"][1]["dld"] == metrics.dld(X, X, [QI.index("ERNVAL")]) < 100.0
    assert report["anonymity"]["min_class_size"] == 1
    assert report["checks"]["k_anonymity"]["rows_in_small_classes"] == len(census)  # every tuple unique
    assert report["checks"]["k_anonymity"]["passed"] is False


def test_census_mdav_release(census_release):
    original_path, masked_path, df, released = census_release
    original, masked = io.read_input(original_path), io.read_input(masked_path)
    report = ev.evaluate(original, masked, QI, k=3, known=["AGI,FICA"])
    X, Xm = df[QI].to_numpy(np.float64), released[QI].to_numpy(np.float64)
    loss, risk = report["information_loss"], report["disclosure_risk"]
    assert round(loss["il"], 3) == PUBLISHED_MDAV_IL[("census", 3)]
    assert loss["sst"] == len(df) * len(QI)
    assert loss["family"]["IL"] == pytest.approx(metrics.information_loss_family(X, Xm)["IL"], rel=1e-12)
    assert loss["il1s"] == pytest.approx(metrics.il1s(X, Xm), rel=1e-12)
    assert 0.0 < risk["dld"] < 100.0 / 3
    assert risk["dld"] == metrics.dld(X, Xm)
    assert risk["scenarios"][1]["dld"] == metrics.dld(X, Xm, [QI.index("AGI"), QI.index("FICA")])
    assert risk["id"] == metrics.interval_disclosure(X, Xm)
    assert report["score"] == pytest.approx(metrics.score(loss["family"]["IL"], risk["dld"], risk["id"]))
    changes = metrics.attribute_changes(X, Xm, QI).set_index(["attribute", "statistic"])
    mine = pd.DataFrame(loss["attributes"]).set_index(["attribute", "statistic"])
    quantile_rows = [i for i in changes.index if i[1].startswith("q")]
    np.testing.assert_array_equal(mine.loc[quantile_rows, ["original", "masked"]],
                                  changes.loc[quantile_rows, ["original", "masked"]])  # exact quantiles
    np.testing.assert_allclose(mine[["original", "masked"]], changes[["original", "masked"]], rtol=1e-12)
    anonymity = report["anonymity"]
    assert anonymity["min_class_size"] >= 3 and anonymity["records"] == len(df)
    assert anonymity["k_prime"] == pytest.approx(metrics.real_anonymity(Xm))
    assert anonymity["class_sizes"] == {str(s): c for s, c in metrics.class_sizes(Xm)[1].items()}
    checks = report["checks"]
    assert checks["k_anonymity"] == {"k": 3, "rows_in_small_classes": 0, "passed": True}
    assert checks["unchanged_columns"] == {"region": 0, "confidential": 0}
    assert checks["columns_only_in_original"] == ["person_id"] and checks["passed"] is True
    assert checks["not_compared"] == []
    json.dumps(report, allow_nan=False)  # strict JSON


def test_changed_columns_and_small_classes_are_counted(census_release):
    _, _, df, released = census_release
    tampered = released.copy()
    tampered.loc[[3, 10, 700], "region"] = "elsewhere"
    tampered.loc[:4, QI] = df.loc[:4, QI].to_numpy()  # five records released unprotected
    original, masked = _frames(df, tampered)
    report = ev.evaluate(original, masked, QI, k=3)
    checks = report["checks"]
    assert checks["unchanged_columns"] == {"region": 3, "confidential": 0}
    assert checks["passed"] is False
    small = checks["k_anonymity"]["rows_in_small_classes"]
    assert small == metrics.check_k_anonymous(tampered[QI].to_numpy(np.float64), 3) >= 5
    # a column changed on purpose (a hashed identifier, say) is not compared: named, not counted
    report = ev.evaluate(original, masked, QI, changed=["region"])
    assert report["checks"]["unchanged_columns"] == {"confidential": 0}
    assert report["checks"]["not_compared"] == ["region"]


def test_nested_values_are_compared_value_by_value():
    """Lists and structs (nested Parquet columns: arrays and dicts in pandas) count as differing only
    where their contents differ; two missing values are equal."""
    a = pd.Series([np.array([1, 2]), np.array([3]), {"s": "x", "z": np.array([1])}, None, np.array([], int)],
                  dtype=object)
    b = pd.Series([np.array([1, 2]), np.array([3, 4]), {"s": "x", "z": np.array([2])}, None, np.array([], int)],
                  dtype=object)
    assert ev.differing_rows(a, b) == 2
    assert ev.differing_rows(a, a.copy()) == 0


@pytest.mark.parametrize("kind", ["str", "object", "int64"])
def test_categorical_columns_differ_where_their_values_do_whatever_their_categories(kind):
    """The codes' comparison counts what the values' does: categories in another order, a category only one
    file has, missing values on either side or both."""
    rng = np.random.default_rng(len(kind))
    pool = {"str": ["east", "west", "north", "south", "x"], "object": ["east", 1, "west", 2, "x"],
            "int64": [10, 20, 30, 40, 50]}[kind]
    values = np.array(pool, dtype=object)
    n = 3000
    x = pd.Series(values[rng.integers(0, 4, n)])  # never the last one
    y = pd.Series(np.where(rng.random(n) < 0.1, values[rng.integers(0, 5, n)], x.to_numpy()))
    x[rng.random(n) < 0.05] = None
    y[rng.random(n) < 0.05] = None
    y[x.isna().to_numpy() & (rng.random(n) < 0.5)] = None  # missing in both
    dtype = object if kind == "object" else kind
    a = pd.Series(pd.Categorical(x.tolist(), categories=pd.Index(list(values[:4]), dtype=dtype)))
    b = pd.Series(pd.Categorical(y.tolist(), categories=pd.Index(list(values[::-1]), dtype=dtype)))  # another order, one more
    assert a.isna().sum() == x.isna().sum() and b.isna().sum() == y.isna().sum()
    assert ev._categories_alike(a, b)
    want = int(sum(not ((u == v) if not (pd.isna(u) or pd.isna(v)) else (pd.isna(u) and pd.isna(v)))
                   for u, v in zip(a.astype(object), b.astype(object))))
    assert 0 < want < n
    assert ev.differing_rows(a, b) == want == ev.differing_rows(a.astype(object), b.astype(object))
    assert ev.differing_rows(b, a) == want and ev.differing_rows(a, a.copy()) == 0


def test_bad_options_from_metadata(census_release):
    _, _, df, released = census_release
    original, masked = _frames(df, released)
    with pytest.raises(InputError, match="'person_id' that are not quasi-identifiers"):
        ev.evaluate(original, masked, QI, known=["AGI,person_id"])
    with pytest.raises(InputError, match="k must be >= 2"):
        ev.evaluate(original, masked, QI, k=1)
    with pytest.raises(InputError, match="percentage"):
        ev.evaluate(original, masked, QI, id_percent=0)


# --- the command ------------------------------------------------------------------------------------------


def _comparable(report):
    report = dict(report)
    for key in ("timings", "report", "html", "version"):
        report.pop(key)
    for scenario in report["disclosure_risk"]["scenarios"]:
        scenario["linkage"].pop("seconds")
    return report


def _files_spied(monkeypatch):
    """The paths of the files the evaluation writes through pipeline.transit, by kind."""
    from microagg.pipeline import transit

    written = []
    for name in ("store", "write_rows"):  # (the pieces' store_columns is a store)
        monkeypatch.setattr(transit, name, lambda path, *a, _f=getattr(transit, name): written.append(path) or _f(path, *a))
    return written


@pytest.mark.parametrize("cluster, dld_records", [(None, None), (None, 400), ((2, 1, False), None),
                                                  ((2, 1, True), None)],
                         ids=["synchronous", "synchronous-sampled", "two-workers", "worker-processes"])
def test_a_large_evaluation_keeps_both_files_qis_in_files_with_the_same_report(tmp_path, monkeypatch, dld_records,
                                                                                cluster):
    """With the row count known up front and both files' QIs beyond TRANSIT_MEMORY_SHARE of the memory (forced
    here), the aligned pieces' QIs go to files in a scratch directory, column by column, which every pass reads
    back; the columns' records reach their rank buckets through files, which write their summaries there; the
    pieces' distinct released tuples reach their class buckets through files, and each known set's linkage
    writes its routed rows, block trees and second round's requests and answers there. The report is the one
    through memory, measure for measure, and no scratch file is left. Workers in other processes, which see the
    scratch directory here, use the files too (whatever the share; in memory when they do not see them); a caller
    that does not know the row count keeps the pieces in memory."""
    from distributed import Client, LocalCluster

    from microagg.pipeline import release, transit

    X, Xm = _continuous_data(7, n=1500, d=5)
    names = [f"c{j}" for j in range(X.shape[1])]
    original, masked = _frames(pd.DataFrame(X, columns=names), pd.DataFrame(Xm, columns=names), 3, 4)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    options = dict(k=4, known=[names[:2], [names[-1]]], block_rows=150, piece_rows=200, dld_records=dld_records)
    written = _files_spied(monkeypatch)
    reports = {}
    with dask.config.set({"temporary-directory": str(scratch)}), contextlib.ExitStack() as stack:
        if cluster:
            workers, threads, processes = cluster
            stack.enter_context(Client(stack.enter_context(LocalCluster(
                n_workers=workers, threads_per_worker=threads, processes=processes, dashboard_address=":0"))))
        spied = cluster is None or not cluster[2]  # (the spies see only this process's calls)
        with monkeypatch.context() as patched:  # between processes, memory only if a worker cannot see the files
            patched.setattr(release, "_unseen_by_workers", lambda path: 2)
            reports["memory"] = ev.evaluate(original, masked, names, **options)
        monkeypatch.setattr(release, "TRANSIT_MEMORY_SHARE", 0)
        if cluster is None:  # (whatever the cluster)
            reports["unknown rows"] = ev.evaluate(original, masked, names, **options)
        reports["files"] = ev.evaluate(original, masked, names, rows=len(X), **options)
        assert [p for p in os.listdir(scratch) if p.startswith(transit.PREFIX)] == []  # beside Dask's own
    assert {key: report["aligned_pieces"] for key, report in reports.items()} == {
        key: "files" if key == "files" else "memory" for key in reports}
    comparable = [_comparable(dict(r, report=None, html=None)) for r in reports.values()]
    for report in comparable:
        report.pop("aligned_pieces")
    assert all(report == comparable[0] for report in comparable)
    scenarios = reports["files"]["disclosure_risk"]["scenarios"]
    for scenario, cols in zip(scenarios, [None, [0, 1], [X.shape[1] - 1]]):
        if dld_records is None:
            assert scenario["dld"] == metrics.dld(X, Xm, cols)  # bit for bit
        assert scenario["linkage"]["blocks"] > 4
    kinds = [os.path.basename(path).split("-")[0] for path in written]
    if spied:  # every piece in a file, and each known set's routed rows and blocks
        assert kinds.count("pair") == kinds.count("classes") == reports["files"]["pieces"]
        assert kinds.count("routed") == 2 * 3 * reports["files"]["pieces"]  # originals and masked, three known sets
        assert kinds.count("block") == kinds.count("requests") == kinds.count("replies") == sum(
            s["linkage"]["blocks"] for s in scenarios)  # each block's tree, round-2 requests and answers
        assert kinds.count("records") == reports["files"]["pieces"]  # the columns' ranks: one batch
        assert kinds.count("summary") == 2 * -(-len(X) // columns.BUCKET_ROWS)  # its buckets: summaries, records


def test_the_evaluate_command_and_a_release_s_evaluation_know_the_rows_up_front(tmp_path, monkeypatch, census_release):
    """``microagg evaluate`` of two Parquet inputs (their footers hold the row count) and a release's evaluation
    (it knows the rows it released) may keep the QIs in files; a CSV input's rows are only counted in the
    statistics pass, so its evaluation keeps them in memory. Same measures either way."""
    from microagg.pipeline import release

    original_csv, masked, df, _ = census_release
    original = tmp_path / "original.parquet"
    df.to_parquet(original, index=False)
    monkeypatch.setattr(release, "TRANSIT_MEMORY_SHARE", 0)
    reports = [ev.run(path, masked, QI, tmp_path / f"{i}.json", k=3, known=[["AGI", "FICA"]], html=False)
               for i, path in enumerate((original, original_csv))]
    assert [r["aligned_pieces"] for r in reports] == ["files", "memory"]
    comparable = [_comparable(r) for r in reports]
    for r in comparable:
        r.pop("aligned_pieces"), r.pop("original")
    assert comparable[0] == comparable[1]
    options = release.ReleaseOptions(k=3, quasi_identifiers=tuple(QI), identifiers=("person_id",))
    evaluated = release.run(str(original_csv), str(tmp_path / "release"), options, html=False,
                            evaluation={"known": [["AGI", "FICA"]]})["evaluation"]
    monkeypatch.setattr(release, "TRANSIT_MEMORY_SHARE", 10**18)
    again = ev.run(original, tmp_path / "release", QI, tmp_path / "again.json", k=3, known=[["AGI", "FICA"]],
                   html=False)
    assert evaluated["aligned_pieces"] == "files" and again["aligned_pieces"] == "memory"
    for key in ("information_loss", "anonymity"):
        assert evaluated[key] == again[key]
    timeless = [[{**s, "linkage": {**s["linkage"], "seconds": 0}} for s in r["disclosure_risk"]["scenarios"]]
                for r in (evaluated, again)]
    assert timeless[0] == timeless[1]


@pytest.mark.parametrize("filed", [False, True], ids=["memory", "files"])
def test_two_parquet_inputs_qis_are_read_once_by_the_aligned_pieces(tmp_path, monkeypatch, census_release, filed):
    """Both files Parquet: each partition's rows are counted from one column, and its QIs (with the columns both
    files share) are read once, by the aligned pieces, which also sum them: no statistics pass reads them before
    (3 of the 10M evaluation's 45 s). The measures are those of the two passes, in memory or with the QIs in files.
    A value that is not finite is still refused, naming its file and column."""
    from microagg.pipeline import release

    original_csv, masked, df, released = census_release
    original = tmp_path / "original"
    original.mkdir()
    df.iloc[:300].to_parquet(original / "a.parquet", index=False)  # cut where the release's files are not
    df.iloc[300:].to_parquet(original / "b.parquet", index=False)
    if filed:
        monkeypatch.setattr(release, "TRANSIT_MEMORY_SHARE", 0)
    reads = []
    read_table = io.ExactIntegersEngine._read_table.__func__

    def recorded(cls, path_or_frag, fs, row_groups, columns, *args, **kwargs):
        reads.append((os.path.basename(str(getattr(path_or_frag, "path", path_or_frag))),
                      frozenset(c for c in columns or () if c is not None)))
        return read_table(cls, path_or_frag, fs, row_groups, columns, *args, **kwargs)

    monkeypatch.setattr(io.ExactIntegersEngine, "_read_table", classmethod(recorded))
    once = ev.run(original, masked, QI, tmp_path / "once.json", k=3, known=[["AGI", "FICA"]], html=False)
    monkeypatch.undo()
    if filed:
        monkeypatch.setattr(release, "TRANSIT_MEMORY_SHARE", 0)
    twice = ev.evaluate(io.read_input(original), io.read_input(masked), QI, k=3, known=[["AGI", "FICA"]],
                        rows=len(df), columnar=False)
    assert once["aligned_pieces"] == twice["aligned_pieces"] == ("files" if filed else "memory")
    assert set(twice["timings"]) <= set(once["timings"])  # (run adds its read)
    assert _comparable(dict(once, report=None, html=None, original=None, masked=None)) == _comparable(
        dict(twice, report=None, html=None, original=None, masked=None))
    aligned = frozenset(QI) | {"region", "confidential"}
    assert sorted(reads) == sorted((name, columns) for name in ("a.parquet", "b.parquet", "part-0.parquet",
                                                                "part-1.parquet") for columns in ({QI[0]}, aligned))
    holes = released.copy()
    holes.loc[[1, 2, 3], "AGI"] = np.nan
    holes.to_parquet(tmp_path / "holes.parquet", index=False)
    with pytest.raises(InputError, match="masked file, column 'AGI': 3 row"):
        ev.run(original, tmp_path / "holes.parquet", QI, tmp_path / "holes.json", html=False)


def test_cli_local_cluster_and_synchronous_agree(tmp_path, census_release):
    original, masked, df, _ = census_release
    reports = []
    for name, flags in (("cluster", ["--workers", "2"]), ("sync", ["--scheduler", "synchronous"])):
        path = tmp_path / f"{name}.json"
        proc = microagg_cli("evaluate", original, masked, "--qi", ",".join(QI), "--k", 3, "--known", "AGI,FICA",
                            "--known", "TAXINC", "--report", path, "--block-rows", 300, "--changed", "confidential",
                            *flags, check=True)
        assert "DLD" in proc.stdout and str(path) in proc.stdout
        reports.append(json.loads(path.read_text()))
        assert reports[-1]["html"] == str(path.with_suffix(".html")) and str(path.with_suffix(".html")) in proc.stdout
        html = path.with_suffix(".html").read_text()  # beside the JSON: the page with its plots
        assert html.count('<img class="plot" src="data:image/png;base64,') == 5
        verdict = re.search(r'<p id="verdict" class="ok">([^<]*)</p>', html).group(1)
        assert verdict.startswith("k = 3 reached (smallest class 3) \u00b7 IL 5.69 % \u00b7 DLD ")
    assert _comparable(reports[0]) == _comparable(reports[1])
    report = reports[0]
    assert round(report["information_loss"]["il"], 3) == PUBLISHED_MDAV_IL[("census", 3)]
    assert report["disclosure_risk"]["scenarios"][0]["linkage"]["blocks"] > 1
    assert report["anonymity"]["min_class_size"] >= 3
    assert report["checks"]["not_compared"] == ["confidential"] and report["checks"]["unchanged_columns"] == {
        "region": 0}
    assert [s["columns"] for s in report["disclosure_risk"]["scenarios"]] == [QI, ["AGI", "FICA"], ["TAXINC"]]
    assert set(report["timings"]) >= {"read", "validate", "statistics", "align", "columns", "information loss",
                                      "classes", "linkage"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary report left behind"


def _bad(tmp_path, original, masked, *flags, qi=QI):
    proc = microagg_cli("evaluate", original, masked, "--qi", ",".join(qi), "--scheduler", "synchronous",
                        "--report", tmp_path / "report.json", *flags)
    assert proc.returncode == 2, proc.stderr
    assert not (tmp_path / "report.json").exists() and not (tmp_path / "report.html").exists()
    return proc.stderr


def test_cli_refuses_different_row_counts(tmp_path, census_release):
    original, masked, df, released = census_release
    short = tmp_path / "short.csv"
    released.iloc[:-3].to_csv(short, index=False)
    assert "original file has 1080 rows and the masked file 1077 (3 row(s) missing" in _bad(tmp_path, original, short)
    parquet = tmp_path / "original.parquet"
    df.to_parquet(parquet, index=False)  # Parquet pair: refused from the footers
    assert "1080 rows and the masked file 500" in _bad(tmp_path, parquet, masked / "part-0.parquet")
    # a release's directory: its data files' footers only (not its report, not its marker)
    assert io.parquet_rows(masked) == 1080 and io.parquet_rows(masked / "part-0.parquet") == 500
    (masked / "_SUCCESS").write_text("")
    try:
        assert io.parquet_rows(masked) == 1080
    finally:
        (masked / "_SUCCESS").unlink()


def test_cli_refuses_a_missing_column(tmp_path, census_release):
    original, masked, _, released = census_release
    partial = tmp_path / "partial.parquet"
    released.drop(columns=["FICA"]).to_parquet(partial, index=False)
    assert "'FICA' not in the masked file" in _bad(tmp_path, original, partial)
    assert "'nope' not in the original file" in _bad(tmp_path, original, masked, qi=["AGI", "nope"])


def test_cli_refuses_non_numeric_values(tmp_path, census_release):
    original, _, _, released = census_release
    text = released.astype({"AGI": object})
    text.loc[[4, 9], "AGI"] = "unknown"
    path = tmp_path / "text.csv"
    text.to_csv(path, index=False)
    stderr = _bad(tmp_path, original, path)
    assert "'AGI' of the masked file is not numeric" in stderr and "2 row(s)" in stderr and "'unknown'" in stderr


def test_cli_refuses_non_finite_values(tmp_path, census_release):
    original, _, _, released = census_release
    holes = released.copy()
    holes.loc[[1, 2, 3], "AGI"] = np.nan
    holes.loc[[7, 8], "FICA"] = np.inf
    path = tmp_path / "holes.parquet"
    holes.to_parquet(path, index=False)
    stderr = _bad(tmp_path, original, path)
    assert "masked file, column 'AGI': 3 row(s) with a missing (NaN) value" in stderr
    assert "masked file, column 'FICA': 2 row(s) with an infinite value" in stderr


def test_run_writes_the_json_and_the_page_where_told(tmp_path):
    X, Xm = _tie_data(7, n=300)
    names = ["a", "b", "c"]
    paths = [tmp_path / "original.csv", tmp_path / "masked.csv"]
    for A, path in zip((X, Xm), paths):
        pd.DataFrame(A, columns=names).to_csv(path, index=False)
    with pytest.raises(InputError, match="ends with .html"):
        ev.run(*paths, names, tmp_path / "report.html")  # the page would overwrite the JSON
    report = ev.run(*paths, names, tmp_path / "report.json")
    assert report["html"] == str(tmp_path / "report.html")
    assert json.loads((tmp_path / "report.json").read_text())["summary"] == report["summary"]
    assert (tmp_path / "report.html").read_text() == page.render_html(report, report["summary"])
    ev.run(*paths, names, tmp_path / "plain.json", html=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["masked.csv", "original.csv", "plain.json", "report.html",
                                                          "report.json"]  # nothing left aside


def test_anonymize_evaluate_puts_the_risk_into_the_report_and_the_page(tmp_path):
    """``microagg anonymize`` (evaluating by default): the written release evaluated before the commit;
    the same measures as ``microagg evaluate`` of the committed release."""
    out = tmp_path / "release"
    microagg_cli("anonymize", CENSUS_CSV, out, "--k", 3, "--known", "AGI,FICA",
                 "--scheduler", "synchronous", check=True)
    rep = json.loads((out / "_report.json").read_text())
    evaluation = rep["evaluation"]
    assert 0 < evaluation["disclosure_risk"]["dld"] < 100 / 3 and evaluation["checks"]["passed"]
    assert evaluation["anonymity"]["min_class_size"] >= 3
    assert rep["real_anonymity"]["all"] == evaluation["anonymity"]["k_prime"]  # from the gate's evidence alone
    assert [s["columns"] for s in evaluation["disclosure_risk"]["scenarios"]][1] == ["AGI", "FICA"]
    again = ev.run(CENSUS_CSV, out, list(rep["quasi_identifiers"]), tmp_path / "again.json", k=3,
                   known=[["AGI", "FICA"]], html=False)
    for key in ("dld", "id"):
        assert evaluation["disclosure_risk"][key] == again["disclosure_risk"][key]
    # below a million rows every masked record is searched: the DLD is exact
    assert evaluation["disclosure_risk"]["dld_records"] == 1080 and evaluation["disclosure_risk"]["dld_interval"] is None
    verdict = re.search(r'<p id="verdict"[^>]*>([^<]*)<', (out / "_report.html").read_text()).group(1)
    assert f"DLD {evaluation['disclosure_risk']['dld']:.2f} %" in verdict and "not computed" not in verdict
    assert sorted(p.name for p in out.iterdir() if not p.name.endswith(".parquet")) == [
        "_SUCCESS", "_report.html", "_report.json"]


def test_dld_records_searches_a_sample_in_both_commands(tmp_path):
    """``--dld-records N``: the same deterministic sample of masked records in ``anonymize``'s evaluation
    and in ``microagg evaluate`` of the committed release (same seed), so the same DLD and interval."""
    out = tmp_path / "release"
    proc = microagg_cli("anonymize", CENSUS_CSV, out, "--k", 3, "--dld-records", 400, "--scheduler", "synchronous",
                        check=True)
    risk = json.loads((out / "_report.json").read_text())["evaluation"]["disclosure_risk"]
    lo, hi = risk["dld_interval"]
    assert 300 < risk["dld_records"] < 500 and lo < risk["dld"] < hi
    assert f"{risk['dld_records']:,} of 1,080 records searched)" in proc.stdout
    assert f"a sample of {risk['dld_records']} records searched" in (out / "_report.html").read_text()
    again = microagg_cli("evaluate", CENSUS_CSV, out, "--qi", ",".join(QI), "--dld-records", "400", "--report",
                         tmp_path / "again.json", "--scheduler", "synchronous", check=True)
    other = json.loads((tmp_path / "again.json").read_text())["disclosure_risk"]
    assert (other["dld"], other["dld_records"], other["dld_interval"]) == (risk["dld"], risk["dld_records"], [lo, hi])
    assert "records searched" in again.stdout
    exact = microagg_cli("evaluate", CENSUS_CSV, out, "--qi", ",".join(QI), "--report", tmp_path / "all.json",
                         "--scheduler", "synchronous", check=True)
    assert json.loads((tmp_path / "all.json").read_text())["disclosure_risk"]["dld_interval"] is None
    assert "records searched" not in exact.stdout
    bad = microagg_cli("anonymize", CENSUS_CSV, tmp_path / "bad", "--k", 3, "--dld-records", "0")
    assert bad.returncode == 2 and "--dld-records: must be a positive number of records or 'all'" in bad.stderr


def test_no_evaluate_and_release_where_release_without_an_evaluation(tmp_path):
    for flags in (["--no-evaluate"], ["--release-where", "AGI > 0"]):
        out = tmp_path / flags[0]
        proc = microagg_cli("anonymize", CENSUS_CSV, out, "--k", 3, *flags, "--scheduler", "synchronous", check=True)
        report = json.loads((out / "_report.json").read_text())
        assert "evaluation" not in report and report["information_loss"] > 0
        assert "disclosure risk" not in proc.stdout
        verdict = re.search(r'<p id="verdict"[^>]*>([^<]*)<', (out / "_report.html").read_text()).group(1)
        assert "not computed" in verdict
    assert "not evaluated: with --release-where (release_where) its rows do not pair with the input's" in proc.stdout


@pytest.mark.parametrize("flags, message", [
    (["--no-evaluate", "--known", "AGI"], "options of the evaluation, which is off (--no-evaluate)"),
    (["--release-where", "AGI > 0", "--id-percent", "5"], "which is off here (with --release-where"),
    (["--evaluate", "--release-where", "AGI > 0"], "--release-where"),
])
def test_anonymize_evaluate_refuses_what_it_cannot_evaluate(tmp_path, flags, message):
    proc = microagg_cli("anonymize", CENSUS_CSV, tmp_path / "release", "--k", 3, *flags, "--scheduler", "synchronous")
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "release").exists()


def test_a_value_after_the_last_column_of_a_csv_is_named_by_its_file_and_line(tmp_path, monkeypatch):
    """``microagg evaluate`` reads its files as ``anonymize`` does: a row with a value after the last
    column of an original whose rows end in a separator, read in 4 KiB blocks (a blank line before
    it, counted as pandas counts lines), is refused with the file and the line; no report."""
    from microagg.pipeline.errors import CSVParseError

    rng = np.random.default_rng(9)
    rows = [(i, rng.normal(), rng.normal(), int(rng.integers(1, 6))) for i in range(1500)]
    lines = ["id,a,b,c"] + [f"{i},{a:.4f},{b:.4f},{c}," + ("7" if i == 900 else "") for i, a, b, c in rows]
    lines.insert(301, "")
    original = tmp_path / "original.csv"
    original.write_text("\n".join(lines) + "\n")
    masked = tmp_path / "masked.parquet"
    pd.DataFrame(rows, columns=["id", "a", "b", "c"]).to_parquet(masked, index=False)
    monkeypatch.setattr(io, "CSV_BLOCKSIZE", "4KiB")
    with pytest.raises(CSVParseError) as caught:
        ev.run(original, masked, ["a", "b"], tmp_path / "report.json", html=False)
    assert f"file {original}, line {lines.index(next(x for x in lines if x.endswith(',7'))) + 1:,} " in str(caught.value)
    assert not (tmp_path / "report.json").exists()
