"""Classic MDAV reproduces the published information loss on the CASC reference files."""

import json

import pytest

import microagg
from conftest import CENSUS_CSV, EIA_CSV, EIA_NON_QI, PUBLISHED_MDAV_IL, microagg_cli


@pytest.mark.parametrize("k", [3, 5, 10])
def test_in_memory_mdav_matches_published_il(census, eia, k):
    for name, X in (("census", census.to_numpy()), ("eia", eia.drop(columns=EIA_NON_QI).to_numpy())):
        labels = microagg.partition(X, k)
        assert round(microagg.information_loss(X, labels), 3) == pytest.approx(PUBLISHED_MDAV_IL[name, k])


@pytest.mark.parametrize("k", [3, 5, 10])
@pytest.mark.parametrize("dataset", ["census", "eia"])
def test_cli_mdav_matches_published_il(tmp_path, dataset, k):
    out = tmp_path / "release"
    if dataset == "census":
        args = [CENSUS_CSV, out]
    else:
        qi = [c for c in __import__("pandas").read_csv(EIA_CSV, nrows=1).columns if c not in EIA_NON_QI]
        args = [EIA_CSV, out, "--qi", ",".join(qi)]
    microagg_cli("anonymize", "--no-html", *args, "--k", k, "--scheduler", "synchronous", check=True)
    report = json.loads((out / "_report.json").read_text())
    assert round(report["information_loss"], 3) == pytest.approx(PUBLISHED_MDAV_IL[dataset, k])
    assert report["k_anonymity_verified"] is True
    assert report["min_group_size"] >= k
    # the release's evaluation (on by default) reads the written files: the same published IL, and a
    # linkage risk below 1/k (at most one record of a group of k or more is linked to its own original
    # unless the group's records are equidistant from its centroid)
    evaluation = report["evaluation"]
    assert round(evaluation["information_loss"]["il"], 3) == pytest.approx(PUBLISHED_MDAV_IL[dataset, k])
    assert 0 < evaluation["disclosure_risk"]["dld"] < 100 / k and evaluation["checks"]["passed"]
    assert evaluation["anonymity"]["min_class_size"] >= k
