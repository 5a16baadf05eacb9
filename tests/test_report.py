"""The HTML report (pipeline/report.py): the data summary (in memory and from the release pipeline's
pieces), the page's content, escaping, determinism, the pages `microagg anonymize` writes (or does not),
and the page in a real headless browser (Debian's Chromium; skipped when it is not installed)."""

import base64
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import dask
import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from conftest import CENSUS_CSV, microagg_cli
from synthetic import extract
from microagg.jobs import cli
from microagg.pipeline import metrics, release, report

EVIL = "<script>alert(1)</script>"
PLOTS = ("histogram of group sizes", "histograms of every quasi-identifier, original and masked",
         "correlation matrices, original and masked", "share of the SSE per attribute", "seconds per stage")
IMG = re.compile(r'<img class="plot" src="data:image/png;base64,([A-Za-z0-9+/=]+)" '
                 r'width="(\d+)" height="(\d+)" alt="([^"]*)">')


@pytest.fixture(scope="module")
def census_out(tmp_path_factory):
    """The release directory of ``microagg anonymize example:census --k 5``."""
    out = tmp_path_factory.mktemp("release") / "census"
    microagg_cli("anonymize", "example:census", out, "--k", 5, "--scheduler", "synchronous", check=True)
    return out


@pytest.fixture(scope="module")
def census_release(census_out):
    """``(report, original, masked)`` of ``microagg anonymize example:census --k 5``."""
    out = census_out
    return json.loads((out / "_report.json").read_text()), pd.read_csv(CENSUS_CSV), pd.read_parquet(out)


@pytest.fixture(scope="module")
def census_page(census_release):
    rep, original, masked = census_release
    data = report.summary_data(original, masked, rep["quasi_identifiers"])
    return rep, data, report.render_html(rep, data)


def evaluation_report():
    """An evaluation report in the layout of ``microagg evaluate`` (pipeline/evaluate.py), through
    JSON (class sizes keyed by strings), with a failed k-anonymity check."""
    return json.loads(json.dumps({
        "original": "in.parquet", "masked": "out/", "rows": 40, "qi": ["A", "B"], "k": 3, "known": [["A"], ["B"]],
        "information_loss": {"sse": 2.0, "sst": 80.0, "il": 2.5, "il1s": 0.125,
                             "family": {"X-X'": 10.0, "V-V'": 5.0, "S-S'": 4.0, "R-R'": 1.0, "IL": 5.0,
                                        "undefined_terms": {"X-X'": 0}},
                             "attributes": [{"attribute": a, "statistic": s, "original": 1.0, "masked": 1.0 + c,
                                             "relative_change": c}
                                            for s in ("mean", "variance") for a, c in (("A", 0.0), ("B", -0.25))]},
        "disclosure_risk": {"dld": 40.125, "id": 30.0, "dr": 35.0625, "id_percent": 10.0,
                            "id_per_attribute": {"A": 20.0, "B": 40.0},
                            "scenarios": [{"columns": ["A", "B"], "dld": 40.125, "id": 30.0},
                                          {"columns": ["A"], "dld": 2.5, "id": 20.0},
                                          {"columns": ["B"], "dld": 7.25, "id": 40.0}]},
        "score": 20.03125,
        "anonymity": {"k_prime": 3.3333, "classes": 12, "min_class_size": 2, "class_sizes": {2: 2, 3: 8, 4: 2},
                      "records": 40},
        "checks": {"rows": {"original": 40, "masked": 40, "match": True},
                   "k_anonymity": {"k": 3, "rows_in_small_classes": 4, "passed": False}, "passed": False},
        "timings": {"statistics": 0.5, "linkage": 0.25},
    }))


def small_page_digest():
    """SHA-256 of the page of a small synthetic release with every plot (run in a subprocess too)."""
    rng = np.random.default_rng(7)
    original = pd.DataFrame(rng.lognormal(3.0, 1.0, size=(60, 3)), columns=["A", "B", "C"])
    masked = pd.DataFrame(np.repeat(original.to_numpy().reshape(20, 3, 3).mean(axis=1), 3, axis=0),
                          columns=original.columns)
    rep = {"k": 3, "k_anonymity_verified": True, "min_group_size": 3, "information_loss": 12.5,
           "quasi_identifiers": ["A", "B", "C"], "timings": {"read": 0.5, "blocks": 1.25}, "options": {"seed": 0}}
    page = report.render_html(rep, report.summary_data(original, masked, list(original.columns)))
    assert page.count("<img") == len(PLOTS)
    return hashlib.sha256(page.encode()).hexdigest()


# --- the data summary --------------------------------------------------------------------------------


def test_summary_data_of_census(census_release):
    rep, original, masked = census_release
    qi = rep["quasi_identifiers"]
    data = report.summary_data(original, masked, qi)
    assert json.loads(json.dumps(data)) == data  # JSON-able as it is
    n = len(original)
    assert data["quasi_identifiers"] == qi and data["rows"] == data["rows_used"] == data["complete_rows"] == n
    hist = data["histograms"]
    for j in range(len(qi)):
        assert sum(hist["original"][j]) == sum(hist["masked"][j]) == n
        assert hist["edges"][j][0] <= min(original[qi[j]].min(), masked[qi[j]].min())
        assert hist["edges"][j][-1] >= max(original[qi[j]].max(), masked[qi[j]].max())
    assert data["group_sizes"] == {"sizes": [5], "counts": [216], "source": "classes"}
    il = data["il_per_attribute"]
    assert il["total_il"] == pytest.approx(rep["information_loss"], rel=1e-9)
    assert sum(il["sse"]) == pytest.approx(rep["sse"], rel=1e-9)
    assert sum(il["share"]) == pytest.approx(100.0)
    np.testing.assert_allclose(data["correlation"]["original"], np.corrcoef(original[qi].to_numpy().T), atol=1e-12)
    np.testing.assert_allclose(data["correlation"]["masked"], np.corrcoef(masked[qi].to_numpy().T), atol=1e-12)


def test_summary_from_partitions_equals_summary_data(census_release):
    """The distributed recipe of the module docstring: global min/max -> edges, per-partition counts
    and moments, merged -> summary_from; the same dict as the in-memory driver."""
    rep, original, masked = census_release
    qi = rep["quasi_identifiers"]
    X, Xm = original[qi].to_numpy(dtype=float), masked[qi].to_numpy(dtype=float)
    edges = report.histogram_edges(np.minimum(X.min(0), Xm.min(0)), np.maximum(X.max(0), Xm.max(0)))
    counts_x, counts_m, m = 0, 0, metrics.moments(X[:0], Xm[:0])
    for rows in np.array_split(np.arange(len(X)), 3):
        cx, cm = report.histogram_counts(X[rows], Xm[rows], edges)
        counts_x, counts_m = counts_x + cx, counts_m + cm
        m = metrics.combine_moments(m, metrics.moments(X[rows], Xm[rows]))
    sizes = pd.DataFrame(Xm).groupby(list(range(len(qi)))).size().value_counts().to_dict()
    merged = report.summary_from(qi, m, edges, counts_x, counts_m, sizes)
    whole = report.summary_data(original, masked, qi)
    assert merged["histograms"] == whole["histograms"] and merged["group_sizes"] == whole["group_sizes"]
    for key in ("correlation", "il_per_attribute"):
        for part in whole[key]:
            np.testing.assert_allclose(merged[key][part], whole[key][part], rtol=1e-9, atol=1e-12)


def test_summary_data_subsample_groups_and_missing():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 2))
    Xm = np.repeat(X.reshape(250, 4, 2).mean(axis=1), 4, axis=0)
    X[3, 1] = np.nan  # a missing original cell (--missing centroid): out of the correlations, not the counts
    data = report.summary_data(X, Xm, ["a", "b"], group_sizes=[4] * 250, max_points=100)
    assert data["rows"] == 1000 and data["rows_used"] == 100 and data["complete_rows"] == 100
    assert [sum(c) for c in data["histograms"]["masked"]] == [100, 100]
    assert data["group_sizes"] == {"sizes": [4], "counts": [250], "source": "groups"}
    data = report.summary_data(X, Xm, ["a", "b"])
    assert data["complete_rows"] == 999 and [sum(c) for c in data["histograms"]["original"]] == [1000, 999]


def _on_the_edges(seed=3, n=600, d=3):
    """``(original, masked)``: skewed columns of very different scales, a third of the values of
    each file exactly on their summary's bin edges and a third one ulp beside an edge."""
    rng = np.random.default_rng(seed)
    X = rng.lognormal(0.0, 1.0, size=(n, d)) * [1.0, 1e-3, 1e5] + [0.0, 7.0, 3e6]
    edges = report.histogram_edges(X.min(axis=0), X.max(axis=0))
    files = []
    for which in range(2):
        A = X.copy() if which == 0 else np.repeat(X.reshape(n // 3, 3, d).mean(axis=1), 3, axis=0)
        on = edges[np.arange(d), rng.integers(0, edges.shape[1], size=(n, d))]  # on[i, j]: an edge of column j
        beside = np.clip(np.nextafter(on, rng.choice([-np.inf, np.inf], size=(n, d))), edges[:, 0], edges[:, -1])
        part = rng.integers(0, 3, size=(n, d))
        files.append(np.where(part == 0, on, np.where(part == 1, beside, A)))
    return files


def test_bins_on_the_edges_are_the_same_in_memory_and_by_pieces():
    """A value's bin is decided by the edges alone: summary_data (in memory), the counts of the pieces
    a release or an evaluation sums (report.bin_counts, the kernel) and np.histogram agree exactly,
    values on the edges and one ulp beside them included."""
    X, Xm = _on_the_edges()
    data = report.summary_data(X, Xm, ["a", "b", "c"])
    edges = np.asarray(data["histograms"]["edges"])
    assert (edges[:, 0] == np.minimum(X.min(0), Xm.min(0))).all()  # the edges _on_the_edges used
    assert np.isin(X, edges).sum() > 100 and np.isin(Xm, edges).sum() > 100
    for which, A in (("original", X), ("masked", Xm)):
        pieces = sum(report.bin_counts(A[rows], edges) for rows in np.array_split(np.arange(len(A)), 7))
        numpy = [np.histogram(A[:, j], bins=edges[j])[0].tolist() for j in range(3)]
        assert pieces.tolist() == data["histograms"][which] == numpy, which


def test_bin_counts_of_values_outside_the_edges_weights_and_missing_values():
    edges = np.array([[0.0, 0.5, 1.0]])
    values = np.array([[-10.0], [0.0], [0.5], [1.0], [10.0], [np.nan], [np.inf]])
    assert report.bin_counts(values, edges).tolist() == [[2, 3]]  # outside: the end bins; non-finite: not counted
    assert report.bin_counts(values[:5], edges, [1, 2, 3, 4, 5]).tolist() == [[3, 12]]



@pytest.mark.parametrize("lo, hi", [(1e20, 1e20), (-3e300, -3e300), (float(2**63 - 4096), float(2**63)), (0.0, 0.0)])
def test_a_constant_column_of_any_magnitude_gets_distinct_edges(lo, hi):
    """A constant 1e20 (or whole numbers near 2**63 that float64 nearly merges) got v +- 0.5 = v: every
    edge the same number, and the bin kernel divided by a range of 0 (a release's internal error)."""
    edges = report.histogram_edges([lo], [hi])
    assert (np.diff(edges[0]) > 0).all()
    assert edges[0, 0] <= lo and hi <= edges[0, -1]
    if lo == 0.0:
        assert edges[0, [0, -1]].tolist() == [-0.5, 0.5]  # the usual width where it is wide enough
    values = np.array([[lo], [hi]])
    assert report.bin_counts(values, edges).sum() == 2

@pytest.fixture(scope="module")
def blocked_input(tmp_path_factory):
    """6000 synthetic records in three Parquet files (three input partitions)."""
    df = extract(6000, d=4, seed=5)
    root = tmp_path_factory.mktemp("blocked") / "input"
    root.mkdir()
    for i, rows in enumerate(np.array_split(np.arange(len(df)), 3)):
        df.iloc[rows].to_parquet(root / f"part-{i}.parquet", index=False)
    return root, df


@pytest.mark.parametrize("method", ["mdav", "univariate", "mic1d"])
def test_release_summary_equals_summary_data(tmp_path, blocked_input, method):
    """The release pipeline's data summary, merged from what its block tasks hold (three partitions,
    many blocks, tasks and split planes; univariate and Mic1D-k: column by column, the masked
    correlations from the real-anonymity pass), is summary_data of the input and the written release."""
    source, df = blocked_input
    qi = [c for c in df.columns if c.startswith("q")]
    options = release.ReleaseOptions(k=3, method=method, quasi_identifiers=tuple(qi), block_size=300,
                                     blocks_per_task=2)
    with dask.config.set(scheduler="synchronous"):
        rep = release.run(source, tmp_path / "out", options, html=False)
    assert rep["html"] is None and not (tmp_path / "out" / "_report.html").exists()
    masked = pd.read_parquet(tmp_path / "out")
    X, Xm = df[qi].to_numpy(), masked[qi].to_numpy()
    got = rep["summary"]
    edges = np.asarray(got["histograms"]["edges"])
    np.testing.assert_array_equal(edges, report.histogram_edges(X.min(axis=0), X.max(axis=0)))  # the original's
    assert got["histograms"]["original"] == report.bin_counts(X, edges).tolist()
    assert got["histograms"]["masked"] == report.bin_counts(Xm, edges).tolist()  # outside values: end bins
    inside = ((Xm >= X.min(axis=0)) & (Xm <= X.max(axis=0))).all()
    assert inside == (method != "mic1d")  # Mic1D-k's values, normalized across columns, may leave the range
    if method == "mdav":
        assert rep["blocks"] > 10 and rep["tasks"] > 5 and rep["upper_planes"] > 0
        sizes = masked.groupby(qi).size()  # a group's tuple is its own
    elif method == "univariate":
        sizes = np.concatenate([masked[c].value_counts().to_numpy() for c in qi])  # every column's groups
    else:
        sizes = []  # Mic1D-k's runs are of values, not records: no group sizes
    expected = report.summary_data(df, masked, qi, group_sizes=sizes)
    if inside:  # summary_data's edges span both files
        assert got["histograms"] == expected["histograms"]
    assert got["group_sizes"] == expected["group_sizes"] and bool(got["group_sizes"]["sizes"]) == (method != "mic1d")
    for key in ("format", "quasi_identifiers", "rows", "rows_used", "complete_rows"):
        assert got[key] == expected[key], key
    for key in ("correlation", "il_per_attribute"):
        for part in expected[key]:
            np.testing.assert_allclose(got[key][part], expected[key][part], rtol=1e-9, atol=1e-12)
    assert got["il_per_attribute"]["total_il"] == pytest.approx(rep["information_loss"], rel=1e-9)


# --- the page ----------------------------------------------------------------------------------------


def test_census_page_has_every_plot_and_the_verdict(census_page):
    rep, data, page = census_page
    images = IMG.findall(page)
    assert [alt for *_, alt in images] == list(PLOTS)
    assert page.count("<img") == len(PLOTS)
    for encoded, width, height, _ in images:
        png = base64.b64decode(encoded)
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and int(width) > 300 and int(height) > 200
        assert b"Software" not in png and b"tIME" not in png  # no version string, no timestamp
    verdict = re.search(r'<p id="verdict" class="ok">([^<]*)</p>', page).group(1)
    evaluation = rep["evaluation"]  # anonymize evaluates its release by default
    risk = evaluation["disclosure_risk"]
    assert verdict == (f"k = 5 reached (smallest group 5) \u00b7 IL 9.09 % \u00b7 DLD {risk['dld']:.2f} % \u00b7 "
                       f"ID {risk['id']:.2f} % \u00b7 k\u2032 5 \u00b7 score {evaluation['score']:.2f} %")
    assert evaluation["anonymity"]["k_prime"] == 5  # every group a distinct tuple
    without = report.render_html({key: value for key, value in rep.items() if key != "evaluation"}, data)
    assert re.search(r'<p id="verdict" class="ok">([^<]*)</p>', without).group(1) == (
        "k = 5 reached (smallest group 5) \u00b7 IL 9.09 % \u00b7 DLD not computed \u00b7 ID not computed \u00b7 "
        "k\u2032 5")  # k' from the gate
    for name in rep["quasi_identifiers"]:  # the original's statistics table
        assert f"<td>{name}</td>" in page
    assert "<td>validate</td>" not in page  # timings are a plot, the options a table
    assert f"<td>block_size</td><td>{rep['options']['block_size']}</td>" in page
    assert "auto portfolio" not in page  # mdav: no race
    raced = {**rep, "auto_portfolio": {"portfolio": "race", "blocks": 40, "members": {
        "mdav": {"tried": 8, "won": 1}, "dba": {"tried": 40, "won": 33}, "kward": {"tried": 8, "won": 0},
        "mdav grow=nc": {"tried": 40, "won": 6}, "odd": "not a mapping"}}}
    table = report.render_html(raced, data).split("auto portfolio, raced over 40 blocks</h3>")[1].split("</table>")[0]
    assert re.findall(r"<tr><td>([^<]*)</td><td>(\d+)</td><td>(\d+)</td></tr>", table) == [
        ("dba", "40", "33"), ("mdav grow=nc", "40", "6"), ("mdav", "8", "1"), ("kward", "8", "0")]
    # self-contained: nothing loaded from elsewhere, no script
    assert not re.search(r"(src|href)=\"(?!data:|#)", page)
    assert "<script" not in page and "url(" not in page


def test_render_is_deterministic_and_written_atomically(census_page, tmp_path):
    rep, data, page = census_page
    assert report.render_html(rep, data) == page
    assert report.render_html(json.loads(json.dumps(rep)), json.loads(json.dumps(data))) == page
    target = tmp_path / "report.html"
    target.write_text("old")
    assert report.write_html(target, rep, data) == str(target)
    assert target.read_bytes() == page.encode("utf-8")
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary file left


def test_figures_drawn_before_the_timings_are_known_give_the_same_page(census_page):
    """The release draws the data figures while the workers write, then the page with the final
    timings: the same bytes as one render of the final report."""
    rep, data, page = census_page
    early = {key: value for key, value in rep.items() if key != "timings"}
    figures = {}
    report.render_html(early, data, figures)
    assert set(figures) == {"groups", "distributions", "correlations", "il"}
    assert report.render_html(rep, data, figures) == page


def test_same_bytes_in_another_process_with_a_hostile_matplotlibrc(tmp_path):
    """A user's matplotlibrc (fonts, colours, dpi, format) and the hash seed change nothing."""
    (tmp_path / "matplotlibrc").write_text("font.size: 20\naxes.facecolor: yellow\nlines.linewidth: 5\n"
                                           "figure.dpi: 300\nsavefig.format: svg\nsavefig.dpi: 50\n")
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path), "PYTHONHASHSEED": "12345"}
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            "import test_report; print(test_report.small_page_digest())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == small_page_digest()


def test_malicious_names_are_escaped():
    frame = pd.DataFrame({EVIL: np.arange(20.0), "cost $ (USD) $x^": np.arange(20.0) ** 2})
    masked = frame.copy()
    masked[:] = np.repeat(frame.to_numpy().reshape(5, 4, 2).mean(axis=1), 4, axis=0)
    qi = list(frame.columns)
    rep = {"k": 4, "method": EVIL, "quasi_identifiers": qi, "timings": {EVIL: 1.0},
           "options": {"release_where": f'"{EVIL}" > 3'}, "disclosure_risk": {"dld": {"all": 1.0, EVIL: 2.0}},
           "real_anonymity": {"all": 4.0, EVIL: 4.0}, "statistics": {"mean": [1.0, 2.0], "std": [1.0, 2.0]}}
    page = report.render_html(rep, report.summary_data(frame, masked, qi))
    assert EVIL not in page and "<script" not in page
    assert "k = 4 reached (smallest class 4)" in page  # the verdict from the data's class sizes
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;&lt;script&gt;" in page  # quotes escaped too
    assert page.count("<img") == len(PLOTS)  # a "$" in a name does not break the plots (no mathtext)


def test_minimal_reports():
    for rep in ({}, {"k": 3}, {"k": 3, "information_loss": 9.126}, None):
        page = report.render_html(rep)
        assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
        assert "<img" not in page and "not computed" in page
    assert "k = 3: k-anonymity not computed \u00b7 IL 9.13 % \u00b7 DLD not computed" in report.render_html(
        {"k": 3, "information_loss": 9.126})
    assert '<p id="verdict" class="unknown">k-anonymity not computed' in report.render_html({})


def test_mic1d_verdict_is_values_level():
    page = report.render_html({"k": 5, "k_anonymity_verified": False, "information_loss": 1e-5,
                               "real_anonymity": {"all": 1.0, "A": 2.5}})
    assert ('<p id="verdict" class="values">values-level (Mic1D-k): k = 5 counts values; records are not '
            "k-anonymous \u00b7 IL 1e-05 % \u00b7 DLD not computed \u00b7 ID not computed \u00b7 k\u2032 1<") in page
    assert "<td>A</td><td>2.5</td>" in page


def test_evaluation_report():
    page = report.render_html(evaluation_report())
    assert ('<p id="verdict" class="fail">k = 3 NOT reached (4 records in classes smaller than k; smallest class 2)'
            " \u00b7 IL 2.50 % \u00b7 DLD 40.12 % \u00b7 ID 30.00 % \u00b7 k\u2032 3.333 \u00b7 score 20.03 %<") in page
    assert "<title>microagg evaluation: out/ against in.parquet</title>" in page
    assert [alt for *_, alt in IMG.findall(page)] == ["histogram of group sizes", "seconds per stage"]
    risk = re.search(r'<table class="risk">(.*?)</table>', page).group(1)
    # all attributes first, then the riskiest sets
    assert re.findall(r"<tr><td>([^<]*)</td>", risk) == ["all quasi-identifiers", "B", "A"]
    assert "<td>A</td><td>1</td><td>2.50 %</td><td>20.00 %</td>" in risk
    for text in ("<td>IL of the score (mean of the four)</td><td>5.00 %</td>", "<td>IL1s</td><td>0.125</td>",
                 "<td>IL family: R-R&#x27;</td><td>1.00 %</td>",
                 "<td>score = (IL of the score + DR) / 2</td><td>20.03 %</td>",
                 "<td>interval disclosure ID (p = 10 %)</td>", "mean DLD over 2 sets: 4.88 %",
                 "<td>B</td><td>40.00 %</td>",  # ID per attribute
                 '<td>B</td><td class="c3">-25.00 %</td><td class="c3">-25.00 %</td>',  # relative changes, shaded
                 "<td>k_anonymity / passed</td><td>no</td>", "a check FAILED", "<td>known</td><td>(A); (B)</td>"):
        assert text in page, text


def test_dld_per_subset_mapping():
    rep = {"k": 5, "k_anonymity_verified": True, "min_group_size": 5, "quasi_identifiers": ["A", "B", "C"],
           "disclosure_risk": {"dld": {"all": 12.5, "A": 1.0, "A,B": 6.0, "B": float("nan")},
                               "id": {"all": 9.0, "A": 4.0}}}
    page = report.render_html(rep)
    assert "k = 5 reached (smallest group 5) \u00b7 IL not computed \u00b7 DLD 12.50 % \u00b7 ID 9.00 %" in page
    risk = re.search(r'<table class="risk">(.*?)</table>', page).group(1)
    assert re.findall(r"<tr>((?:<td>[^<]*</td>)*)</tr>", risk) == [
        "<td>all quasi-identifiers</td><td>3</td><td>12.50 %</td><td>9.00 %</td>",
        "<td>A,B</td><td>2</td><td>6.00 %</td><td>not computed</td>",
        "<td>A</td><td>1</td><td>1.00 %</td><td>4.00 %</td>",
        "<td>B</td><td>1</td><td>undefined</td><td>not computed</td>"]


# --- the pages `microagg anonymize` writes -----------------------------------------------------------


def test_anonymize_writes_the_page_into_the_release(census_out):
    rep = json.loads((census_out / "_report.json").read_text())
    assert sorted(p.name for p in census_out.iterdir() if p.name.startswith("_")) == [
        "_SUCCESS", "_report.html", "_report.json"]
    assert rep["html"] == str(census_out / "_report.html")
    page = (census_out / "_report.html").read_text()
    assert [alt for *_, alt in IMG.findall(page)] == list(PLOTS)  # every plot, embedded
    verdict = re.search(r'<p id="verdict" class="ok">([^<]*)</p>', page).group(1)
    # evaluated by default: the verdict carries the release's disclosure risk, as the report's evaluation
    risk = rep["evaluation"]["disclosure_risk"]
    assert verdict.startswith(f"k = 5 reached (smallest group 5) \u00b7 IL 9.09 % \u00b7 DLD {risk['dld']:.2f} % "
                              f"\u00b7 ID {risk['id']:.2f} %")
    assert 0 < risk["dld"] < 100 / 5
    assert "<td>AGI</td>" in page and not re.search(r"(src|href)=\"(?!data:|#)", page)
    # the JSON alone renders the page again: the same verdict and data plots (the JSON's keys are sorted,
    # so its timings come in another order, and it has the page's own rendering time)
    again = report.render_html(rep, rep["summary"])
    assert IMG.findall(again)[:4] == IMG.findall(page)[:4] and verdict in again
    # its data: summary_data of the input and the release, with the sizes of the release's groups
    original, masked, qi = pd.read_csv(CENSUS_CSV), pd.read_parquet(census_out), rep["quasi_identifiers"]
    expected = report.summary_data(original, masked, qi, group_sizes=masked.groupby(qi).size())
    assert rep["summary"]["histograms"] == expected["histograms"]
    assert rep["summary"]["group_sizes"] == expected["group_sizes"] == {"sizes": [5], "counts": [216],
                                                                        "source": "groups"}
    for key in ("correlation", "il_per_attribute"):
        for part in expected[key]:
            np.testing.assert_allclose(rep["summary"][key][part], expected[key][part], rtol=1e-9, atol=1e-12)


@pytest.fixture()
def run_cli(capsys):
    """``microagg ...`` in this process: ``(exit code, stdout, stderr)``."""
    from microagg.jobs import logs

    def run(*args):
        code = cli.main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    yield run
    logs.setup("text", logging.WARNING)  # main installs its log handler on the root logger


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_no_html_and_a_page_beside_the_report(tmp_path, run_cli):
    code, out, err = run_cli("anonymize", CENSUS_CSV, tmp_path / "plain", "--k", 4, "--no-html",
                             "--scheduler", "synchronous")
    assert code == 0, err
    assert not (tmp_path / "plain" / "_report.html").exists() and ".html" not in out
    rep = json.loads((tmp_path / "plain" / "_report.json").read_text())
    assert rep["html"] is None and rep["summary"]["group_sizes"]["sizes"][0] == 4  # the page can still be made
    code, out, err = run_cli("anonymize", CENSUS_CSV, tmp_path / "out", "--k", 4, "--report", tmp_path / "r.json",
                             "--scheduler", "synchronous")
    assert code == 0, err
    assert f"report: {tmp_path / 'r.json'}, {tmp_path / 'r.html'}" in out
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert not (tmp_path / "out" / "_report.html").exists()


def test_a_job_without_the_page_leaves_matplotlib_unimported(tmp_path):
    """The report's data summary, which every job computes, needs no matplotlib: a job without the page
    (``--no-html``) does not import it (0.3-0.4 s of one core, every such job, before); a job that draws
    the page imports it aside and draws the same page as before (the page's other tests)."""
    script = (
        "import sys, threading\n"
        "from microagg.jobs import cli\n"
        "code = cli.main(sys.argv[1:])\n"
        "[t.join() for t in threading.enumerate() if t.name.startswith('microagg-')]\n"
        "print(code, sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'PIL'}))\n")
    job = ["anonymize", str(CENSUS_CSV), "--k", "4", "--scheduler", "synchronous", "--no-evaluate"]
    loaded = {}
    for name, flags in (("plain", ["--no-html"]), ("page", [])):
        proc = subprocess.run([sys.executable, "-c", script, *job[:2], str(tmp_path / name), *job[2:], *flags],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        loaded[name] = proc.stdout.strip().splitlines()[-1]
    assert loaded == {"plain": "0 []", "page": "0 ['PIL', 'matplotlib']"}
    assert (tmp_path / "page" / "_report.html").read_text().count("data:image/png;base64,") >= 4
    assert not (tmp_path / "plain" / "_report.html").exists()


def test_reports_are_as_readable_as_the_release(tmp_path):
    """Every file a job writes takes the mode the umask gives (0640 under 027): the release's files,
    a report and its page outside it, the evaluation's report (it was 0600, unreadable by the
    consumers of the release beside it); no temporary file is left."""
    import stat

    from conftest import microagg_cli

    previous = os.umask(0o027)
    try:
        microagg_cli("anonymize", CENSUS_CSV, tmp_path / "out", "--k", 4, "--report", tmp_path / "r.json",
                     "--scheduler", "synchronous", check=True)
        microagg_cli("evaluate", CENSUS_CSV, tmp_path / "out", "--qi", "AGI,FICA", "--report", tmp_path / "e.json",
                     "--scheduler", "synchronous", check=True)
    finally:
        os.umask(previous)
    written = [*(tmp_path / "out").iterdir(), *(tmp_path / n for n in ("r.json", "r.html", "e.json", "e.html"))]
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in written} == {p.name: 0o640 for p in written}
    assert not [p for p in tmp_path.rglob(".*")], "temporary file left"


def test_no_page_anywhere_after_bad_input_or_a_failed_gate(tmp_path, run_cli, broken_method):
    source = tmp_path / "in.csv"
    pd.read_csv(CENSUS_CSV).iloc[:200].to_csv(source, index=False)
    for flags, code, message in ((["--method", "broken"], 3, "not 4-anonymous"),
                                 (["--qi", "AGI,nope"], 2, "nope"),
                                 (["--report", tmp_path / "r.html"], 2, "ends with .html")):
        for report_flags in ([], ["--report", tmp_path / "r.json"]):
            if "--report" in flags and report_flags:
                continue
            got, _, err = run_cli("anonymize", source, tmp_path / "out", "--k", 4, *flags, *report_flags,
                                  "--scheduler", "synchronous")
            assert got == code and message in err, err
            assert _files(tmp_path) == ["in.csv"]  # no release, no report, no page


# --- a real browser ----------------------------------------------------------------------------------


def chromium(url, tmp_path, *mode):
    """Run headless Chromium on ``url``; ``(stdout, console lines)``."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install -y chromium)")
    proc = subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", *mode, url],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, [line for line in proc.stderr.splitlines() if "CONSOLE" in line]


def test_browser_reports_console_errors(tmp_path):
    """The console check below can fail: a blocked external image is reported."""
    page = tmp_path / "bad.html"
    page.write_text(report.render_html({}).replace("<nav>", '<img src="https://example.invalid/x.png"><nav>'))
    _, console = chromium(page.as_uri(), tmp_path, "--dump-dom")
    assert any("Content Security Policy" in line for line in console), console


def test_page_in_a_real_browser(census_out, tmp_path):
    """The page `microagg anonymize` wrote into the release."""
    page = census_out / "_report.html"
    dom, console = chromium(page.as_uri(), tmp_path, "--dump-dom")
    assert console == []
    assert len(re.findall(r'<img class="plot" src="data:image/png;base64,', dom)) == len(PLOTS)
    assert "k = 5 reached (smallest group 5)" in dom

    shot = tmp_path / "page.png"
    _, console = chromium(page.as_uri(), tmp_path, f"--screenshot={shot}", "--window-size=1280,4000")
    assert console == []
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape == (4000, 1280, 3)
    grey = pixels.mean(axis=2)
    assert (grey < 0.95).mean() > 0.08  # a page of plots, not of white space
    bands = grey.reshape(16, 250, 1280).std(axis=(1, 2))
    assert (bands > 0.06).all(), bands.round(3)  # no blank stretch anywhere down the page
    # the masked series (orange histograms and IL bars) only exist inside the decoded images
    orange = np.abs(pixels - np.array([0xD9, 0x5F, 0x02]) / 255).max(axis=2) < 0.04
    assert orange.mean() > 0.01
    rows = np.flatnonzero(orange.any(axis=1))
    assert rows.max() - rows.min() > 1500  # from the distributions down to the IL bars
