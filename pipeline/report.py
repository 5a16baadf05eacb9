"""One self-contained HTML page of a release or evaluation report, for methodologists.

:func:`render_html` turns a report dict (the ``_report.json`` of ``microagg anonymize``, or an
evaluation report) and, optionally, the summary of the data (:func:`summary_data`) into one HTML
string: matplotlib figures (Agg, no pyplot state) embedded as base64 PNG ``data:`` URIs, inline CSS,
no script, no external font, style sheet or image (a Content-Security-Policy forbids any). The page
shows, top to bottom:

* a verdict line: k reached or not (or "values-level (Mic1D-k)" when ``k_anonymity_verified`` is
  false), IL, DLD, ID and k' (and the score when present), each "not computed" when absent;
* a table of every measure present (IL, the IL family of the score, IL1s, SSE, DLD, ID, DR, score,
  k', group and class sizes);
* the group-size histogram, with k marked;
* original vs masked distribution of every quasi-identifier (small multiples, shared bin edges);
* the correlation matrices of the original and the masked quasi-identifiers and their difference;
* the share of the SSE (the information loss) carried by each quasi-identifier;
* the relative change of each attribute's mean, variance and quantiles (shaded table);
* the disclosure risk per set of attributes known to the intruder (DLD and ID per set), ID and real
  anonymity k' per attribute; the attribute blocks; the checks of an evaluation;
* the original's means and standard deviations, the timings per stage, the job's parameters.

Report keys read, every one optional (a missing one is shown as "not computed" or its section is
left out). From a release report (``microagg anonymize``): ``k``, ``k_anonymity_verified``,
``k_anonymity_scope``, ``groups``, ``min_group_size``, ``max_group_size``, ``information_loss`` (100
SSE / SST), ``sse``, ``sst``, ``real_anonymity`` (``{"all": x, COLUMN: y}``), ``attribute_blocks``,
``quasi_identifiers``, ``statistics`` (``mean``, ``std``, ``covariance``), ``timings``, ``options``
and the scalar fields (``input``, ``method``, ``rows``...). From an evaluation report (``microagg
evaluate``, :mod:`microagg.pipeline.evaluate`): ``qi``, ``information_loss`` (``il``, ``sse``, ``sst``,
``family``, ``il1s``, ``attributes``), ``disclosure_risk`` (``dld``, ``id``, ``dr``, ``id_percent``,
``id_per_attribute``, ``scenarios``: ``columns``, ``dld``, ``id``), ``score``, ``anonymity``
(``k_prime``, ``min_class_size``, ``class_sizes``, ``classes``), ``checks``, ``original``, ``masked``,
``known``. ``disclosure_risk.dld`` (and ``.id``) may also map known-attribute sets to values:
``{"all": x, "A,B": y}``.

Determinism: the same report and data give the same bytes. Figures are drawn under matplotlib's
default style (a user's matplotlibrc changes nothing) with its bundled DejaVu fonts, saved without
the ``Software`` metadata (no version string, no timestamp: PNG has none by default); numbers are
formatted with fixed formats; the page holds no date.

Privacy: the histograms and correlations of the *original* quasi-identifiers are aggregates of the
confidential file (a bin with one count can single out an outlier): handle the page as the original
data, not as part of the release.

Two drivers (STYLE.md practice 4): :func:`summary_data` is the in-memory driver. A distributed driver
builds the same dict from partitions with the same pieces: (1) the global per-column minimum and
maximum of both files -> :func:`histogram_edges`; (2) per partition, :func:`bin_counts` with those
edges (the kernel ``kernels/histogram.py``, as :func:`histogram_counts`: counts add exactly across
partitions) and :func:`microagg.pipeline.metrics.moments` (merged with ``metrics.combine_moments``);
(3) the class sizes, ``groupby(qi).size().value_counts()`` (or the release's group sizes); (4)
:func:`summary_from`. ``microagg evaluate`` (:mod:`microagg.pipeline.evaluate`) does exactly this
from its statistics pass and aligned pieces. ``microagg anonymize`` (:mod:`microagg.pipeline.release`)
cannot see the masked values before its block tasks count them: its edges span the *original*'s
range (its statistics pass), and a masked value outside it is counted in an end bin; its pieces are
the released pieces, its sizes those of the groups. Both keep the dict in the JSON report
(``summary``), so ``render_html(report, report["summary"])`` draws the page from the JSON alone.
"""

import base64
import html
import importlib
import io
import math
import os

import numpy as np
import pandas as pd

from ..kernels import histogram
from . import metrics
from .errors import InputError
from .io import write_atomically
from .validation import as_float_matrix

FORMAT = "microagg-report-data/1"
"""The ``format`` of :func:`summary_data`'s dict."""

BINS = 30
MAX_POINTS = 2_000_000
DPI = 100
_ORIGINAL = "#8c8c8c"
_MASKED = "#d95f02"
_ACCENT = "#1b6ca8"
_RISK_ROWS = 40  # DLD subsets listed (the riskiest); 9 attributes make 511 subsets


# --- the data summary: chunk -> combine -> finalize ------------------------------------------------


def histogram_edges(lo, hi, bins=BINS):
    """``(d, bins + 1)`` bin edges shared by the original and the masked column: ``bins`` equal bins
    from ``lo[j]`` to ``hi[j]`` (the minimum and maximum of column ``j``, non-finite values ignored),
    both rounded outward to a multiple of a tenth of the range's order of magnitude (0..1,234,567 ->
    0..1,300,000): the page does not print a record's exact extreme value (the largest income, say),
    only the bin it falls in. A constant column gets ``[v - 0.5, v + 0.5]`` (wider where float64
    cannot tell ``bins`` edges so close apart: around a constant 1e20, or whole numbers near 2**63
    that differ by a few units); a column without any finite value ``[-0.5, 0.5]``."""
    lo = np.atleast_1d(np.asarray(lo, dtype=np.float64))
    hi = np.atleast_1d(np.asarray(hi, dtype=np.float64))
    bins = int(bins)
    if bins < 1 or lo.shape != hi.shape:
        raise InputError(f"histogram_edges needs bins >= 1 and one lo/hi per column, "
                         f"got {bins}, {lo.shape}, {hi.shape}")
    edges = np.empty((lo.shape[0], bins + 1))
    for j in range(lo.shape[0]):
        a, b = lo[j], hi[j]
        if not (math.isfinite(a) and math.isfinite(b)):
            a, b = 0.0, 0.0
        # narrower than this, the bins' edges would not be distinct numbers (a constant 1e20, or
        # whole numbers near 2**63 a few units apart, which float64 holds as one value)
        least = 4 * bins * float(np.spacing(max(abs(a), abs(b))))
        if b - a <= least:
            half = max(0.5, least)
            a, b = a - half, a + half
        else:
            step = 10.0 ** (math.floor(math.log10(b - a)) - 1)
            a, b = math.floor(a / step) * step, math.ceil(b / step) * step
        edges[j] = np.linspace(a, b, bins + 1)
    return edges


def bin_counts(A, edges, weight=None):
    """Per column ``j`` of ``A`` (``(n, d)``), the counts of its values in the bins of ``edges[j]``
    (:func:`histogram_edges`): ``(d, bins)`` int64, row ``i`` counted ``weight[i]`` times (default
    once; a released group's tuple is counted as often as the group has rows). A value's bin depends
    on the value and the edges alone (``edges[j, b] <= v < edges[j, b + 1]``, the last bin closed, as
    ``np.histogram`` with these edges), so the counts of disjoint chunks add up exactly. Missing
    (non-finite) values are not counted. A value outside the edges is counted in the first or the
    last bin: the release pipeline takes its edges from the original's range before the masked
    values exist, and a noisy masked value (``--noise laplace``) or a Mic1D-k value (normalized
    across the columns) may fall outside it; mean, median and trimmed aggregates of a group stay
    inside the range of its values (up to a rounding of the mean)."""
    A = as_float_matrix(A)
    edges = np.ascontiguousarray(edges, dtype=np.float64)
    if edges.ndim != 2 or edges.shape[0] != A.shape[1] or edges.shape[1] < 2:
        raise InputError(f"{A.shape[1]} columns for edges of shape {edges.shape}")
    if weight is None:
        weight = np.ones(A.shape[0], dtype=np.int64)
    weight = np.ascontiguousarray(weight, dtype=np.int64)
    if weight.shape != (A.shape[0],):
        raise InputError(f"{weight.shape[0]} weights for {A.shape[0]} rows")
    return histogram.bin_counts(A, edges, weight)


def histogram_counts(X, Xm, edges):
    """Per column, the counts of the original ``X`` and the masked ``Xm`` values (one chunk of rows)
    in the bins of ``edges`` (:func:`histogram_edges`): two ``(d, bins)`` int64 arrays, by
    :func:`bin_counts` (the same bins as the release and evaluation pipelines count). Missing
    values are not counted."""
    X = as_float_matrix(X)
    Xm = as_float_matrix(Xm)
    edges = np.asarray(edges, dtype=np.float64)
    d = edges.shape[0]
    if X.shape[1] != d or Xm.shape[1] != d:
        raise InputError(f"{X.shape[1]} and {Xm.shape[1]} columns for {d} rows of edges")
    return bin_counts(X, edges), bin_counts(Xm, edges)


def summary_from(names, moments, edges, counts_original, counts_masked, size_histogram, size_source="classes",
                 rows=None, rows_used=None):
    """The dict of :func:`summary_data` from its merged pieces.

    Parameters
    ----------
    names : the quasi-identifiers, in column order
    moments : :func:`microagg.pipeline.metrics.moments` of the (original, masked) pairs, merged over
        the chunks with ``metrics.combine_moments`` (complete rows only)
    edges, counts_original, counts_masked : :func:`histogram_edges` and the summed
        :func:`histogram_counts`
    size_histogram : mapping group (or class) size -> number of groups of that size
    size_source : ``"groups"`` (the partition's groups) or ``"classes"`` (equivalence classes of the
        released tuples)
    rows, rows_used : the records of the file and those summarized (default ``moments["n"]``)
    """
    names = [str(c) for c in names]
    d = len(names)
    edges = np.asarray(edges, dtype=np.float64)
    counts_original = np.asarray(counts_original, dtype=np.int64)
    counts_masked = np.asarray(counts_masked, dtype=np.int64)
    shape = (d, edges.shape[1] - 1)
    if edges.shape[0] != d or counts_original.shape != shape or counts_masked.shape != shape:
        raise InputError(f"{d} names, edges {edges.shape}, counts {counts_original.shape} and {counts_masked.shape} "
                         f"do not match")
    n = int(moments["n"])
    comoment_x = np.asarray(moments["comoment_x"], dtype=np.float64).reshape(d, d)
    comoment_m = np.asarray(moments["comoment_m"], dtype=np.float64).reshape(d, d)
    sq_diff = np.asarray(moments["sq_diff"], dtype=np.float64).reshape(d)
    # z-scores with the original's population std, as the release pipeline and metrics.sse_il_from
    sq = np.diag(comoment_x)
    used = sq > 0.0
    sse = np.zeros(d)
    sse[used] = sq_diff[used] / (sq[used] / n)
    sst = np.where(used, float(n), 0.0)
    total_sse, total_sst = float(sse.sum()), float(sst.sum())
    share = 100.0 * sse / total_sse if total_sse > 0.0 else np.zeros(d)
    il = np.divide(100.0 * sse, sst, out=np.zeros(d), where=sst > 0.0)
    sizes = sorted((int(s), int(c)) for s, c in dict(size_histogram).items())
    return {
        "format": FORMAT,
        "quasi_identifiers": names,
        "rows": int(n if rows is None else rows),
        "rows_used": int(n if rows_used is None else rows_used),
        "complete_rows": n,
        "histograms": {
            "edges": edges.tolist(),
            "original": counts_original.tolist(),
            "masked": counts_masked.tolist(),
        },
        "correlation": {
            "original": metrics._correlation(comoment_x).tolist() if n > 1 else None,
            "masked": metrics._correlation(comoment_m).tolist() if n > 1 else None,
        },
        "il_per_attribute": {
            "sse": sse.tolist(),
            "share": share.tolist(),
            "il": il.tolist(),
            "total_il": 100.0 * total_sse / total_sst if total_sst > 0.0 else 0.0,
        },
        "group_sizes": {
            "sizes": [s for s, _ in sizes],
            "counts": [c for _, c in sizes],
            "source": str(size_source),
        },
    }


def _columns_of(data, qi, what):
    if isinstance(data, pd.DataFrame):
        missing = [c for c in qi if c not in data.columns]
        if missing:
            raise InputError(f"{what} data has no column(s) {missing}")
        data = data[list(qi)]
    X = as_float_matrix(data)
    if X.shape[1] != len(qi):
        raise InputError(f"{what} data has {X.shape[1]} columns for {len(qi)} quasi-identifiers")
    return X


def summary_data(original, masked, qi, group_sizes=None, max_points=MAX_POINTS, bins=BINS):
    """What the plots of :func:`render_html` need, as a small JSON-able dict (in-memory driver).

    Parameters
    ----------
    original, masked : pandas DataFrames holding the columns ``qi`` (or ``(n, d)`` arrays in the
        order of ``qi``); row ``i`` of both is the same record
    qi : the quasi-identifiers
    group_sizes : the sizes of the release's groups (any sequence of ints); default the sizes of the
        equivalence classes of the masked ``qi`` tuples (for an attribute-block release, pass the
        groups of a block: the classes over all ``qi`` are not its groups)
    max_points : at most this many rows are summarized (histograms, correlations, IL per attribute):
        above it, evenly spaced rows ``floor(i n / max_points)``, the same on every call. Class sizes
        always count every row.
    bins : bins per histogram

    Returns
    -------
    dict: ``format``; ``quasi_identifiers``; ``rows``, ``rows_used``, ``complete_rows`` (rows without
    a missing value in either file, those of the correlations and IL); ``histograms`` (``edges``,
    ``original``, ``masked``: one list per QI, shared edges); ``correlation`` (``original``,
    ``masked``: ``d x d``); ``il_per_attribute`` (per QI: ``sse`` of the z-scores, ``share`` of the
    total SSE in percent, ``il`` = 100 SSE_j / SST_j; ``total_il`` = 100 SSE / SST, the release's
    IL); ``group_sizes`` (``sizes``, ``counts``, ``source``: ``"groups"`` or ``"classes"``).
    See the module docstring for the distributed driver.
    """
    qi = list(qi)
    X = _columns_of(original, qi, "original")
    Xm = _columns_of(masked, qi, "masked")
    if X.shape != Xm.shape:
        raise InputError(f"original and masked data differ in shape: {X.shape} and {Xm.shape} "
                         f"(row i of both must be the same record)")
    n = X.shape[0]
    if group_sizes is None:
        finite = np.isfinite(Xm).all(axis=1)
        sizes = metrics.class_sizes_of(Xm[finite]) if finite.any() else np.zeros(0, dtype=np.int64)
        source = "classes"
    else:
        sizes = np.asarray(group_sizes, dtype=np.int64).reshape(-1)
        source = "groups"
    values, counts = np.unique(sizes, return_counts=True)
    max_points = int(max_points)
    if max_points < 1:
        raise InputError(f"max_points must be >= 1, got {max_points}")
    if n > max_points:
        rows = (np.arange(max_points, dtype=np.int64) * n) // max_points
        X, Xm = X[rows], Xm[rows]
    both = np.vstack([X, Xm, np.full((1, X.shape[1]), np.nan)])  # the NaN row: no empty reduction
    finite = np.isfinite(both)
    lo = np.where(finite, both, np.inf).min(axis=0)  # +inf / -inf for a column without a finite value
    hi = np.where(finite, both, -np.inf).max(axis=0)
    edges = histogram_edges(lo, hi, bins)
    counts_x, counts_m = histogram_counts(X, Xm, edges)
    complete = np.isfinite(X).all(axis=1) & np.isfinite(Xm).all(axis=1)
    moments = metrics.moments(X[complete], Xm[complete])
    histogram = dict(zip(values.tolist(), counts.tolist()))
    return summary_from([str(c) for c in qi], moments, edges, counts_x, counts_m, histogram, source,
                        rows=n, rows_used=X.shape[0])


# --- reading a report that may lack anything ---------------------------------------------------------


def _get(mapping, *path):
    """``mapping[path[0]][path[1]]...``, or None when any step is missing or not a mapping."""
    value = mapping
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _number(value):
    """A finite-or-NaN float of a JSON number, None for anything else (bools included)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    return None


def _overall(value):
    """A measure given as a number or as ``{"all": x, subset: y, ...}``: the number for all attributes."""
    if isinstance(value, dict):
        return _number(value.get("all"))
    return _number(value)


def _first(report, *paths):
    for path in paths:
        value = _overall(_get(report, *path))
        if value is not None:
            return value
    return None


def _measures(report):
    """The headline measures of a report (a release or an evaluation report), None where absent."""
    k = _first(report, ("k",), ("options", "k"), ("checks", "k_anonymity", "k"))
    return {
        "k": k,
        # 100 SSE / SST, the measure both commands report (an evaluation report nests it)
        "IL": _first(report, ("information_loss",), ("information_loss", "il"), ("il",)),
        "DLD": _first(report, ("disclosure_risk", "dld"), ("dld",)),
        "ID": _first(report, ("disclosure_risk", "id"), ("interval_disclosure",), ("id",)),
        "k'": _first(report, ("real_anonymity",), ("attribute_blocks", "real_anonymity"), ("anonymity", "k_prime"),
                     ("k_prime",), ("class_sizes", "k_prime")),
        "DR": _first(report, ("disclosure_risk", "dr")),
        "score": _first(report, ("score",)),
        "IL1s": _first(report, ("information_loss", "il1s"), ("il1s",)),
        "min size": _first(report, ("min_group_size",), ("anonymity", "min_class_size"), ("class_sizes", "min")),
        "rows below k": _first(report, ("checks", "k_anonymity", "rows_in_small_classes")),
    }


# --- text --------------------------------------------------------------------------------------------


def _e(value):
    return html.escape(str(value), quote=True)


def _fmt(value):
    """Fixed, locale-free formatting of a report value."""
    if value is None:
        return "\u2014"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isnan(value):
            return "undefined"
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, (list, tuple)) for v in value):  # e.g. attribute blocks, known sets
            return "; ".join(f"({_fmt(v)})" for v in value)
        return ", ".join(_fmt(v) for v in value) if value else "\u2014"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items()) if value else "\u2014"
    return str(value)


def _pct(value):
    """A percentage: two decimals, or three significant digits below 0.01 %."""
    if value is None:
        return "not computed"
    if math.isnan(value):
        return "undefined"
    return f"{value:.3g} %" if 0.0 < abs(value) < 0.01 else f"{value:.2f} %"


def _plain(text, width=40):
    """A label matplotlib draws as given: ``$`` escaped (no mathtext), long names shortened."""
    text = str(text)
    if len(text) > width:
        text = text[: width - 1] + "\u2026"
    return text.replace("$", r"\$")


def _cell(cell):
    """``<td>`` of a text, or of ``(text, css class)``."""
    if isinstance(cell, tuple):
        return f'<td class="{_e(cell[1])}">{_e(cell[0])}</td>'
    return f"<td>{_e(cell)}</td>"


def _table(header, rows, cls=None):
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    attr = f' class="{_e(cls)}"' if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _verdict(report, m):
    """``(css class, text)`` of the verdict line."""
    k = m["k"]
    k_text = _fmt(k)
    verified = _get(report, "k_anonymity_verified")
    if verified is None:
        verified = _get(report, "checks", "k_anonymity", "passed")
        noun = "class"
    else:
        noun = "group"
    scope = str(_get(report, "k_anonymity_scope") or "")
    smallest = m["min size"]
    if verified is None and k is not None and smallest is not None:
        verified = smallest >= k
    detail = f" (smallest {noun} {_fmt(smallest)})" if smallest is not None else ""
    if _get(report, "k_anonymity_verified") is False:
        cls, text = "values", f"values-level (Mic1D-k): k = {k_text} counts values; records are not k-anonymous"
    elif verified is True:
        within = " within each attribute block" if "block" in scope else ""
        cls, text = "ok", f"k = {k_text} reached{within}{detail}"
    elif verified is False:
        below = m["rows below k"]
        rows = f"{_fmt(below)} records in classes smaller than k" if below is not None else ""
        detail = "; ".join(t for t in (rows, detail.strip(" ()")) if t)
        cls, text = "fail", f"k = {k_text} NOT reached" + (f" ({detail})" if detail else "")
    else:
        cls, text = "unknown", ("k-anonymity not computed" if k is None else f"k = {k_text}: k-anonymity not computed")
    k_prime = m["k'"]
    parts = [text, f"IL {_pct(m['IL'])}", f"DLD {_pct(m['DLD'])}", f"ID {_pct(m['ID'])}",
             "k\u2032 " + ("not computed" if k_prime is None else _fmt(round(k_prime, 3)))]
    if m["score"] is not None:
        parts.append(f"score {_pct(m['score'])}")
    return cls, " \u00b7 ".join(parts)


# --- figures -----------------------------------------------------------------------------------------

FIGURE_MODULES = ("matplotlib.style", "matplotlib.backends.backend_agg", "matplotlib.figure",
                  "matplotlib.font_manager", "matplotlib.textpath", "matplotlib.ticker")
"""The matplotlib modules the figures use, imported where they are drawn: the report's data summary,
which every job computes (its page or not), needs none of them, and a job without the page (``--no-html``)
no longer pays their imports (0.3-0.4 s of one core). A job that draws the page imports them aside while
its statistics pass reads (:func:`import_figure_modules`, from :func:`microagg.pipeline.release.run`)."""


def import_figure_modules():
    """Import :data:`FIGURE_MODULES` (the figures' first draw then finds them loaded)."""
    for name in FIGURE_MODULES:
        importlib.import_module(name)


def _figure(width, height):
    """A ``width`` x ``height`` inch figure whose axes the caller places (:func:`_axes`).

    No layout engine: matplotlib's constrained layout measured every tick label of every axes before
    drawing them, a third of the page's time (1.5 s against 1.0 s at 13 quasi-identifiers). The
    margins come from the labels' font metrics instead (:func:`_text_width`)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _axes(fig, left, bottom, width, height):
    """An axes at a rectangle given in inches from the figure's lower left corner."""
    W, H = fig.get_size_inches()
    return fig.add_axes((left / W, bottom / H, width / W, height / H))


def _text_width(labels, size):
    """The widest of ``labels`` at ``size`` points, in inches: the font's metrics (no drawing), with a
    tenth to spare."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    prop = FontProperties(size=size)
    widths = [text_to_path.get_text_width_height_descent(str(t), prop, ismath=False)[0] for t in labels]
    return 1.1 * max(widths, default=0.0) / 72


# the widest tick labels a numeric axis gets: the default formatter's six digits (larger numbers go
# to scientific notation), an EngFormatter's "888.8k", a colour bar's "-0.00088"
_WIDEST_COUNT, _WIDEST_ENG, _WIDEST_SIGNED = "888888", "888.8k", "\u22120.00088"
_TICKS = 0.1  # inches from an axis line to its tick labels (tick length and padding)
_LABEL = 0.25  # inches for an axis label at 10 points, with its padding


def _png(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None}, facecolor="white")
    return buffer.getvalue()


def _drawn(figures, name, draw):
    """The PNG of figure ``name``: taken from ``figures`` if drawn before (see :func:`render_html`),
    else ``draw()``'s, kept there."""
    if figures is None:
        return _png(draw())
    if name not in figures:
        figures[name] = _png(draw())
    return figures[name]


def _img(png, alt, cls="plot"):
    width = int.from_bytes(png[16:20], "big")  # the IHDR chunk
    height = int.from_bytes(png[20:24], "big")
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return f'<img class="{cls}" src="{uri}" width="{width}" height="{height}" alt="{_e(alt)}">'


def _fig_group_sizes(sizes, counts, k, source):
    from matplotlib.ticker import MaxNLocator

    width, height = 7.5, 3.2
    left = _LABEL + _text_width([_WIDEST_COUNT], 10) + _TICKS + 0.05
    fig = _figure(width, height)
    ax = _axes(fig, left, 0.6, width - left - 0.2, height - 0.6 - 0.15)
    sizes = np.asarray(sizes, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    ax.bar(sizes, counts, width=0.8, color=_ACCENT)
    low = min([sizes.min()] + ([k] if k is not None else [])) - 1.0
    high = max(sizes.max(), k if k is not None else sizes.max()) + 1.0
    ax.set_xlim(low, high)
    if high - low <= 30:
        ax.set_xticks(np.arange(math.ceil(low), math.floor(high) + 1))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if k is not None:
        ax.axvline(k - 0.5, color="#c0392b", linestyle="--", linewidth=1.2)
        ax.annotate(f"k = {_fmt(k)}", (k - 0.5, 1.0), xycoords=("data", "axes fraction"), xytext=(-4, -2),
                    textcoords="offset points", ha="right", va="top", color="#c0392b", fontsize=9)
    if counts.size and counts.max() / max(counts.min(), 1.0) > 100:
        ax.set_yscale("log")
    ax.set_ylim(top=counts.max() * (3.0 if ax.get_yscale() == "log" else 1.12))
    if sizes.size <= 25:
        for s, c in zip(sizes, counts):
            ax.annotate(_fmt(int(c)), (s, c), ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                        textcoords="offset points")
    noun = "groups" if source == "groups" else "equivalence classes"
    ax.set_xlabel("group size (records)" if source == "groups" else "class size (records sharing a released tuple)")
    ax.set_ylabel(f"number of {noun}")
    ax.spines[["top", "right"]].set_visible(False)
    return fig


def _fig_distributions(names, edges, original, masked):
    from matplotlib.ticker import EngFormatter, MaxNLocator

    d = len(names)
    ncols = min(4, d)
    nrows = -(-d // ncols)
    cell_width, cell_height, legend = 3.1, 2.25, 0.4
    fig = _figure(cell_width * ncols, cell_height * nrows + legend)
    left = _text_width([_WIDEST_ENG], 7) + _TICKS  # the y tick labels
    bottom, top = 0.3, 0.35  # the x tick labels; the title
    axes = []
    for j in range(d):
        row, col = divmod(j, ncols)
        ax = _axes(fig, col * cell_width + left, (nrows - 1 - row) * cell_height + bottom,
                   cell_width - left - 0.2, cell_height - bottom - top)
        axes.append(ax)
        e = np.asarray(edges[j], dtype=np.float64)
        ax.stairs(np.asarray(original[j], dtype=np.float64), e, fill=True, color=_ORIGINAL, alpha=0.55,
                  label="original")
        ax.stairs(np.asarray(masked[j], dtype=np.float64), e, color=_MASKED, linewidth=1.4, label="masked")
        ax.set_title(_plain(names[j], 32), fontsize=9)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.xaxis.set_major_locator(MaxNLocator(4))
        ax.yaxis.set_major_formatter(EngFormatter(sep=""))
        ax.yaxis.set_major_locator(MaxNLocator(4, integer=True))
        ax.tick_params(labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 1.0), ncols=2, frameon=False, fontsize=9)
    return fig


def _heatmap(ax, R, names, title, vmax, cmap, row_labels=True):
    d = R.shape[0]
    image = ax.imshow(R, vmin=-vmax, vmax=vmax, cmap=cmap, interpolation="nearest")
    ax.set_title(title, fontsize=10)
    size, labels = _heatmap_labels(names)
    if labels:
        ax.set_xticks(range(d), labels, rotation=90, fontsize=size)
        ax.set_yticks(range(d), labels if row_labels else [], fontsize=size)
    else:
        ax.set_xticks([])
        ax.set_yticks([])
    if d <= 8:
        for i in range(d):
            for j in range(d):
                ax.text(j, i, f"{R[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if abs(R[i, j]) > 0.6 * vmax else "black")
    return image


def _heatmap_labels(names):
    """``(font size, tick labels)`` of a correlation matrix's rows and columns (none beyond 40)."""
    d = len(names)
    if d > 40:
        return 0, []
    return (8 if d <= 10 else 7 if d <= 20 else 5), [_plain(n, 14) for n in names]


def _fig_correlations(names, R, Rm):
    size, labels = _heatmap_labels(names)
    margin = (_text_width(labels, size) + _TICKS) if labels else 0.1  # row labels; column labels below
    side, top, bar = 3.3, 0.35, 0.15  # a matrix's square; its title; a colour bar's width
    bar_ticks = _TICKS + _text_width([_WIDEST_SIGNED], 10)
    # left to right: matrix, [matrix, colour bar, label, gap, row labels, matrix,] colour bar[, label]
    panels = [("original", margin)] if Rm is None else [
        ("original", margin), ("masked", margin + side + 0.2),
        ("change", margin + 2 * side + 0.2 + 0.15 + bar + bar_ticks + _LABEL + 0.25 + margin)]
    labelled = Rm is not None
    width = panels[-1][1] + side + 0.15 + bar + bar_ticks + (_LABEL if labelled else 0.0) + 0.1
    fig = _figure(width, margin + side + top)
    axes = {name: _axes(fig, x, margin, side, side) for name, x in panels}

    def colour_bar(image, x, label):
        cax = _axes(fig, x + side + 0.15, margin + 0.1 * side, bar, 0.8 * side)
        fig.colorbar(image, cax=cax, label=label)

    if Rm is None:
        colour_bar(_heatmap(axes["original"], R, names, "original", 1.0, "RdBu_r"), margin, None)
        return fig
    _heatmap(axes["original"], R, names, "original", 1.0, "RdBu_r")
    image = _heatmap(axes["masked"], Rm, names, "masked", 1.0, "RdBu_r", row_labels=False)
    colour_bar(image, panels[1][1], "correlation")
    diff = Rm - R
    spread = float(np.abs(diff).max()) if diff.size else 0.0
    image = _heatmap(axes["change"], diff, names, "masked \u2212 original", max(spread, 0.01), "PuOr_r")
    colour_bar(image, panels[2][1], "change")
    return fig


def _fig_il(names, share, il):
    d = len(names)
    order = sorted(range(d), key=lambda j: (-share[j], j))
    labels = [_plain(names[j], 30) for j in order]
    ax = _bar_axes(7.5, 0.28 * d + 1.1, labels)
    y = np.arange(d)
    ax.barh(y, [share[j] for j in order], color=_MASKED)
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    for row, j in enumerate(order):
        ax.annotate(f"{share[j]:.1f} % (IL {_pct(il[j])})", (share[j], row), va="center", fontsize=7,
                    xytext=(3, 0), textcoords="offset points")
    ax.set_xlim(0, max(max(share, default=0.0) * 1.35, 1.0))
    ax.set_xlabel("share of the SSE (%)")
    ax.spines[["top", "right"]].set_visible(False)
    return ax.figure


def _bar_axes(width, height, labels):
    """The axes of a horizontal bar chart with ``labels`` (8 points) on its bars and an x label."""
    left = _text_width(labels, 8) + _TICKS + 0.05
    bottom = _TICKS + 0.15 + _LABEL  # tick labels, then the axis label
    return _axes(_figure(width, height), left, bottom, width - left - 0.2, height - bottom - 0.15)


def _fig_timings(timings):
    stages = list(timings)
    seconds = [float(timings[s]) for s in stages]
    labels = [_plain(s, 30) for s in stages]
    ax = _bar_axes(7.5, 0.3 * len(stages) + 1.1, labels)
    y = np.arange(len(stages))
    ax.barh(y, seconds, color=_ACCENT)
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    for row, s in enumerate(seconds):
        ax.annotate(f"{s:.3g} s", (s, row), va="center", fontsize=7, xytext=(3, 0), textcoords="offset points")
    ax.set_xlim(0, max(max(seconds, default=0.0) * 1.25, 1e-3))
    ax.set_xlabel(f"seconds (total {sum(seconds):.3g} s)")
    ax.spines[["top", "right"]].set_visible(False)
    return ax.figure


# --- sections ----------------------------------------------------------------------------------------


def _section(anchor, title, body, note=None):
    note_html = f'<p class="note">{_e(note)}</p>' if note else ""
    return f'<section id="{_e(anchor)}"><h2>{_e(title)}</h2>{note_html}{body}</section>'


def _missing(text):
    return f'<p class="missing">{_e(text)}</p>'


def _measures_section(report, m):
    rows = [("information loss IL (100 SSE / SST)", _pct(m["IL"]))]
    family = _get(report, "information_loss", "family")
    if not isinstance(family, dict):
        family = _get(report, "information_loss_family")
    if isinstance(family, dict):
        for key, value in family.items():
            if _number(value) is not None:
                label = "IL of the score (mean of the four)" if key == "IL" else f"IL family: {key}"
                rows.append((label, _pct(_number(value))))
    for label, key in (("SSE", "sse"), ("SST", "sst")):
        value = _first(report, (key,), ("information_loss", key))
        if value is not None:
            rows.append((label, _fmt(value)))
    if m["IL1s"] is not None:
        rows.append(("IL1s", _fmt(m["IL1s"])))
    rows.append(("DLD, all quasi-identifiers known", _pct(m["DLD"]) + _dld_sample(_get(report, "disclosure_risk"))))
    width = _get(report, "disclosure_risk", "id_percent")
    rows.append(("interval disclosure ID" + (f" (p = {_fmt(width)} %)" if width is not None else ""), _pct(m["ID"])))
    if m["DR"] is not None:
        rows.append(("disclosure risk DR = (DLD + ID) / 2", _pct(m["DR"])))
    if m["score"] is not None:
        rows.append(("score = (IL of the score + DR) / 2", _pct(m["score"])))
    rows.append(("real anonymity k\u2032", "not computed" if m["k'"] is None else _fmt(m["k'"])))
    for label, path in (("groups", ("groups",)), ("smallest group", ("min_group_size",)),
                        ("largest group", ("max_group_size",)), ("equivalence classes", ("anonymity", "classes")),
                        ("equivalence classes", ("class_sizes", "classes")),
                        ("smallest class", ("anonymity", "min_class_size")), ("smallest class", ("class_sizes", "min")),
                        ("records in classes smaller than k", ("checks", "k_anonymity", "rows_in_small_classes")),
                        ("records", ("rows",)), ("records released", ("rows_released",))):
        value = _get(report, *path)
        if value is not None and not isinstance(value, (dict, list)):
            rows.append((label, _fmt(value)))
    scope = _get(report, "k_anonymity_scope")
    if scope:
        rows.append(("k-anonymity scope", _fmt(scope)))
    return _section("measures", "Measures", _table(("measure", "value"), rows, "kv"))


def _size_histogram(report, data):
    """``(sizes, counts, source, note)`` of the group-size plot, or None."""
    sizes = _get(data, "group_sizes") if data else None
    if isinstance(sizes, dict) and sizes.get("sizes"):
        return list(sizes["sizes"]), list(sizes["counts"]), sizes.get("source", "groups"), None
    for path in (("anonymity", "class_sizes"), ("class_sizes", "histogram")):
        histogram = _get(report, *path)
        if isinstance(histogram, dict) and histogram:
            try:
                pairs = sorted((int(s), int(c)) for s, c in histogram.items())
            except (TypeError, ValueError):
                continue
            return [s for s, _ in pairs], [c for _, c in pairs], "classes", None
    smallest, largest, groups = (_get(report, key) for key in ("min_group_size", "max_group_size", "groups"))
    if smallest is not None and smallest == largest and groups:
        return [smallest], [groups], "groups", "every group has the same size (the report's smallest and largest)"
    return None


def _group_section(report, data, m, figures=None):
    found = _size_histogram(report, data)
    if found is None:
        smallest, largest, groups = (_get(report, key) for key in ("min_group_size", "max_group_size", "groups"))
        known = f"{_fmt(groups)} groups of {_fmt(smallest)} to {_fmt(largest)} records; " if groups else ""
        return _section("groups", "Group sizes", _missing(
            known + "the histogram is not computed (it needs the release's group sizes or the released data)"))
    sizes, counts, source, note = found
    if source != "groups":
        note = ("equivalence classes of the released quasi-identifier tuples (records sharing one released tuple)"
                + (f"; {note}" if note else ""))
    png = _drawn(figures, "groups", lambda: _fig_group_sizes(sizes, counts, m["k"], source))
    return _section("groups", "Group sizes", _img(png, "histogram of group sizes"), note)


def _names(report, data):
    names = _get(data, "quasi_identifiers") if data else None
    if not names:
        names = _get(report, "quasi_identifiers") or _get(report, "qi") or []
    return [str(n) for n in names] if isinstance(names, list) else []


def _distribution_section(data, figures=None):
    hist = _get(data, "histograms") if data else None
    names = _get(data, "quasi_identifiers") if data else None
    if not (isinstance(hist, dict) and names and hist.get("edges")):
        return _section("distributions", "Original vs masked distributions",
                        _missing("not computed (needs the original and masked data: summary_data)"))
    note = "shared bin edges per quasi-identifier; grey: original, orange line: masked"
    if data.get("rows_used") and data.get("rows") and data["rows_used"] < data["rows"]:
        note += f"; {_fmt(data['rows_used'])} of {_fmt(data['rows'])} rows, evenly spaced"
    png = _drawn(figures, "distributions",
                 lambda: _fig_distributions([str(n) for n in names], hist["edges"], hist["original"], hist["masked"]))
    return _section("distributions", "Original vs masked distributions",
                    _img(png, "histograms of every quasi-identifier, original and masked"), note)


def _correlation_from_report(report, d):
    cov = _get(report, "statistics", "covariance")
    try:
        V = np.asarray(cov, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if V.shape != (d, d) or not np.isfinite(V).all():
        return None
    return metrics._correlation(V)


def _correlation_section(report, data, figures=None):
    names = _names(report, data)
    corr = _get(data, "correlation") if data else None
    R = Rm = None
    note = "Pearson correlations; the third panel's scale is the largest change"
    if isinstance(corr, dict) and corr.get("original") is not None:
        R = np.asarray(corr["original"], dtype=np.float64)
        Rm = np.asarray(corr["masked"], dtype=np.float64) if corr.get("masked") is not None else None
    elif names:
        R = _correlation_from_report(report, len(names))
        note = "original only, from the report's covariance; the masked matrix needs the data (summary_data)"
    if R is None or R.shape != (len(names), len(names)) or (Rm is not None and Rm.shape != R.shape):
        return _section("correlations", "Correlations",
                        _missing("not computed (needs the data or the report's covariance)"))
    png = _drawn(figures, "correlations", lambda: _fig_correlations(names, R, Rm))
    return _section("correlations", "Correlations", _img(png, "correlation matrices, original and masked"), note)


def _il_section(data, figures=None):
    names = _get(data, "quasi_identifiers") if data else None
    il = _get(data, "il_per_attribute") if data else None
    if not (names and isinstance(il, dict) and il.get("share") and len(il["share"]) == len(names)):
        return _section("il", "Information loss per attribute",
                        _missing("not computed (needs the original and masked data: summary_data)"))
    share = [float(v) for v in il["share"]]
    per = [float(v) for v in il.get("il", [0.0] * len(share))]
    png = _drawn(figures, "il", lambda: _fig_il([str(n) for n in names], share, per))
    note = ("each quasi-identifier's part of the SSE of the z-scores (the release's IL = 100 SSE / SST "
            f"= {_pct(_number(il.get('total_il')))}); in brackets its own 100 SSE_j / SST_j")
    return _section("il", "Information loss per attribute", _img(png, "share of the SSE per attribute"), note)


def _dld_sample(risk):
    """`` (95 % interval ...; m of n records searched)`` when the DLD of ``risk`` (a report's
    ``disclosure_risk`` or a scenario) is a sample's estimate; ``""`` when it is exact or unknown."""
    interval = _get(risk, "dld_interval") if isinstance(risk, dict) else None
    records = _number(_get(risk, "dld_records")) if isinstance(risk, dict) else None
    if not isinstance(interval, list) or len(interval) != 2 or records is None:
        return ""
    lo, hi = (_number(v) for v in interval)
    if lo is None or hi is None:
        return ""
    return f" (95 % interval {lo:.2f}\u2013{hi:.2f} %; a sample of {records:,.0f} records searched)"


def _risk_rows(report):
    """``[(known attributes, DLD, ID)]``, all quasi-identifiers first: from an evaluation report's
    ``disclosure_risk.scenarios`` or from ``disclosure_risk.dld`` given per subset."""
    scenarios = _get(report, "disclosure_risk", "scenarios")
    if isinstance(scenarios, list) and scenarios:
        rows = []
        for i, s in enumerate(s for s in scenarios if isinstance(s, dict)):
            columns = s.get("columns")
            columns = [str(c) for c in columns] if isinstance(columns, list) else []
            rows.append(("all" if i == 0 else ", ".join(columns), len(columns), _number(s.get("dld")),
                         _number(s.get("id")), _dld_sample(s)))
        return rows
    dld = _get(report, "disclosure_risk", "dld")
    if isinstance(dld, dict) and dld:
        ids = _get(report, "disclosure_risk", "id")
        ids = ids if isinstance(ids, dict) else {}
        return [(str(s), None if s == "all" else len([c for c in str(s).split(",") if c.strip()]), _number(v),
                 _number(ids.get(s)), "") for s, v in dld.items()]
    return []


def _risk_section(report, names):
    parts = []
    rows = _risk_rows(report)
    if rows:
        first = [r for r in rows if r[0] == "all"]
        rest = sorted((r for r in rows if r[0] != "all"),
                      key=lambda r: (-(r[2] if r[2] is not None and not math.isnan(r[2]) else -1.0), r[0]))
        shown = first + rest[: _RISK_ROWS]
        table = [("all quasi-identifiers" if known == "all" else known,
                  _fmt(count if count is not None else (len(names) or None)), _pct(dld) + sample, _pct(id_))
                 for known, count, dld, id_, sample in shown]
        parts.append(_table(("attributes known to the intruder", "number", "DLD", "ID"), table, "risk"))
        if len(rest) > _RISK_ROWS:
            parts.append(f'<p class="note">{_e(f"the {_RISK_ROWS} riskiest of {len(rest)} sets are listed")}</p>')
        values = [r[2] for r in rest if r[2] is not None and not math.isnan(r[2])]
        if len(values) > 1:
            mean = f"mean DLD over {len(values)} sets: {_pct(float(np.mean(values)))}"
            parts.append(f'<p class="note">{_e(mean)}</p>')
    per = {}
    for column, label in ((_get(report, "disclosure_risk", "id_per_attribute"), "ID"),
                          (_get(report, "real_anonymity"), "k\u2032 (Mic1D-k)")):
        if isinstance(column, dict):
            for name, value in column.items():
                if name != "all":
                    per.setdefault(str(name), {})[label] = _number(value)
    if per:
        labels = [lab for lab in ("ID", "k\u2032 (Mic1D-k)") if any(lab in v for v in per.values())]
        order = [n for n in names if n in per] + [n for n in per if n not in names]
        table = [(n, *[(_pct(per[n].get(lab)) if lab == "ID" else _fmt(per[n].get(lab))) for lab in labels])
                 for n in order]
        parts.append("<h3>Per attribute</h3>" + _table(("attribute", *labels), table, "risk"))
    if not parts:
        return _section("risk", "Disclosure risk per known-attribute set",
                        _missing("not computed (the report has no DLD per set of known attributes)"))
    return _section("risk", "Disclosure risk per known-attribute set", "".join(parts),
                    "DLD: the records an intruder who knows these attributes links to their own original by "
                    "distance (ties credit 1/t); ID: originals inside the rank interval around their masked value")


def _changes_section(report):
    """The evaluation report's relative changes of each attribute's statistics, as one table."""
    records = _get(report, "information_loss", "attributes")
    if not isinstance(records, list) or not records:
        return ""
    statistics, attributes, cells = [], [], {}
    for r in records:
        if not isinstance(r, dict):
            continue
        a, s = str(r.get("attribute")), str(r.get("statistic"))
        if a not in attributes:
            attributes.append(a)
        if s not in statistics:
            statistics.append(s)
        cells[a, s] = _number(r.get("relative_change"))
    rows = [(a, *[(_signed_pct(cells.get((a, s))), _shade(cells.get((a, s)))) for s in statistics]) for a in attributes]
    return _section("changes", "Relative change of each attribute's statistics",
                    _table(("attribute", *statistics), rows, "changes"),
                    ("(masked \u2212 original) / |original|, in percent; the variance with divisor n \u2212 1; "
                     "shading: under 1 %, 5 %, 20 %, 100 %, and above"))


def _shade(value):
    """A cell's css class by the size of a relative change: c0 (< 1 %) to c4 (>= 100 %)."""
    if value is None or math.isnan(value):
        return "c0"
    return f"c{sum(abs(value) >= t for t in (0.01, 0.05, 0.2, 1.0))}"


def _signed_pct(value):
    if value is None:
        return "\u2014"
    if math.isnan(value):
        return "undefined"
    value *= 100.0
    if value == 0.0 or abs(value) < 5e-3:
        return "0.00 %" if abs(value) < 5e-12 else f"{value:+.1e} %"
    return f"{value:+.2f} %"


def _checks_section(report):
    checks = _get(report, "checks")
    if not isinstance(checks, dict) or not checks:
        return ""
    rows = []

    def walk(prefix, value):
        if isinstance(value, dict) and value:
            for key, inner in value.items():
                walk(f"{prefix} / {key}" if prefix else str(key), inner)
        else:
            rows.append((prefix, _fmt(value)))

    walk("", checks)
    passed = checks.get("passed")
    note = None if passed is None else ("every check passed" if passed is True else "a check FAILED")
    return _section("checks", "Checks", _table(("check", "value"), rows, "kv"), note)


def _blocks_section(report):
    blocks = _get(report, "attribute_blocks", "blocks")
    if not isinstance(blocks, list) or not blocks:
        return ""
    rows = [(_fmt(b.get("columns")), _fmt(b.get("groups")), _fmt(b.get("min_group_size")),
             _pct(_number(b.get("information_loss")))) for b in blocks if isinstance(b, dict)]
    note = None
    real = _get(report, "attribute_blocks", "real_anonymity", "all")
    if _number(real) is not None:
        note = ("k-anonymity holds within each block; real anonymity over all quasi-identifiers "
                f"k\u2032 = {_fmt(_number(real))}")
    return _section("blocks", "Attribute blocks", _table(("columns", "groups", "smallest group", "IL"), rows), note)


def _statistics_section(report, data):
    names = _names(report, data)
    mean, std = _get(report, "statistics", "mean"), _get(report, "statistics", "std")
    if not (names and isinstance(mean, list) and isinstance(std, list) and len(mean) == len(std) == len(names)):
        return ""
    rows = [(n, _fmt(_number(a)), _fmt(_number(s))) for n, a, s in zip(names, mean, std)]
    return _section("statistics", "Original quasi-identifiers",
                    _table(("attribute", "mean", "standard deviation"), rows),
                    "mean and population standard deviation of the original: the z-scores of SSE, IL and DLD")


def _timing_section(report):
    timings = _get(report, "timings")
    if not isinstance(timings, dict) or not timings:
        return _section("timings", "Timings per stage", _missing("not recorded"))
    timings = {str(s): _number(v) for s, v in timings.items() if _number(v) is not None}
    if not timings:
        return _section("timings", "Timings per stage", _missing("not recorded"))
    png = _png(_fig_timings(timings))
    return _section("timings", "Timings per stage", _img(png, "seconds per stage"))


_JOB_FIELDS = ("input", "output", "original", "masked", "known", "method", "k", "aggregate", "refine", "order",
               "stitch", "blocks", "tasks",
               "block_size_target", "seed", "noise", "epsilon", "strata", "weights", "missing", "release_where",
               "pieces", "version")


def _parameters_section(report):
    rows = [(key, _fmt(report[key])) for key in _JOB_FIELDS if key in report and not isinstance(report[key], dict)]
    parts = [_table(("field", "value"), rows, "kv")] if rows else []
    for key in ("method_options", "refine_options", "block_sizes"):
        value = _get(report, key)
        if isinstance(value, dict) and value:
            table = _table(("name", "value"), [(k, _fmt(v)) for k, v in value.items()], "kv")
            parts.append(f"<h3>{_e(key.replace('_', ' '))}</h3>" + table)
    raced = _get(report, "auto_portfolio")
    if isinstance(raced, dict) and isinstance(raced.get("members"), dict):
        members = [(str(name), m) for name, m in raced["members"].items() if isinstance(m, dict)]
        members.sort(key=lambda nm: (-(_number(nm[1].get("won")) or 0), nm[0]))  # the most blocks won first
        rows = [(name, _fmt(m.get("tried")), _fmt(m.get("won"))) for name, m in members]
        parts.append(f"<h3>auto portfolio, raced over {_e(_fmt(raced.get('blocks')))} blocks</h3>"
                     + _table(("method", "blocks tried", "blocks won"), rows, "kv"))
    options = _get(report, "options")
    if isinstance(options, dict) and options:
        parts.append("<h3>options</h3>" + _table(("option", "value"), [(k, _fmt(v)) for k, v in options.items()], "kv"))
    if not parts:
        return _section("parameters", "Parameters", _missing("not recorded"))
    return _section("parameters", "Parameters", "".join(parts))


_CSS = """
body{margin:0;background:#fff;color:#1d1d1d;font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif}
main{max-width:1240px;margin:0 auto;padding:16px 20px 40px}
h1{font-size:22px;margin:4px 0 8px}h2{font-size:18px;margin:28px 0 6px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:14px 0 4px}
#verdict{font-size:16px;font-weight:600;padding:10px 14px;border-radius:6px;border-left:6px solid}
.ok{background:#e8f5e9;border-color:#2e7d32}.values{background:#fff8e1;border-color:#f9a825}
.fail{background:#ffebee;border-color:#c62828}.unknown{background:#f1f1f1;border-color:#888}
nav{font-size:13px;margin:8px 0}nav a{margin-right:12px;color:#1b6ca8}
img.plot{max-width:100%;height:auto;display:block}
table{border-collapse:collapse;font-size:13px;margin:4px 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f5f5f5}
table.kv td:last-child,table.risk td:nth-child(n+2),table.changes td:nth-child(n+2){font-variant-numeric:tabular-nums}
.note{color:#555;font-size:13px;margin:2px 0 6px}.missing{color:#777;font-style:italic}
td.c1{background:#fdf0e3}td.c2{background:#fbd7b4}td.c3{background:#f6a869}td.c4{background:#e6731c;color:#fff}
footer{margin-top:32px;color:#777;font-size:12px}
"""

_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _with_evaluation(report):
    """A release report as its page shows it: with an ``evaluation`` (``anonymize``'s, on by default),
    the evaluation's measures (IL family, DLD, ID, k', checks) in place of the release's own."""
    page = dict(report)
    evaluation = report.get("evaluation")
    for key, value in (evaluation.items() if isinstance(evaluation, dict) else ()):
        if key != "timings":
            page[key] = value
    return page


def render_html(report, data=None, figures=None):
    """One self-contained HTML page of ``report`` (and of ``data``, :func:`summary_data`'s dict).

    Parameters
    ----------
    report : dict, a release report (``_report.json``) or an evaluation report; any key may be
        missing (see the module docstring for the keys read)
    data : dict or None, the summary of the original and masked data; without it the plots that need
        the data say "not computed"
    figures : dict or None, the PNGs of the figures that depend only on ``data`` and ``k`` (group
        sizes, distributions, correlations, IL per attribute): used where present, filled in where
        not. A first call with an incomplete report (before the write stage's timings are known, say)
        draws them; a second call with the complete report and the same ``data`` reuses them and
        gives the same page as one call would.

    Returns
    -------
    str: the page (UTF-8 text; images as base64 PNG ``data:`` URIs; every text escaped). The same
    input gives the same string.

    Notes
    -----
    The figures are drawn under ``matplotlib.style.context("default")``, which swaps matplotlib's
    global ``rcParams`` for the duration: do not draw other matplotlib figures from another thread
    meanwhile.
    """
    report = _with_evaluation(report) if isinstance(report, dict) else {}
    data = data if isinstance(data, dict) else None
    m = _measures(report)
    sizes = _get(data, "group_sizes", "sizes") if data else None
    if m["min size"] is None and isinstance(sizes, list) and sizes:
        m["min size"] = float(min(sizes))  # the data's class (or group) sizes decide the verdict
    cls, verdict = _verdict(report, m)
    if report.get("masked") is not None and report.get("original") is not None:
        title = f"microagg evaluation: {report['masked']} against {report['original']}"
    else:
        bits = [str(report[key]) for key in ("method", "input") if report.get(key) is not None]
        if m["k"] is not None:
            bits.insert(1 if bits else 0, f"k={_fmt(m['k'])}")
        title = "microagg report" + (": " + " ".join(bits) if bits else "")
    names = _names(report, data)
    from matplotlib import style

    with style.context("default"):  # matplotlib's defaults, whatever the user's matplotlibrc says
        sections = [
            ("measures", "measures", _measures_section(report, m)),
            ("groups", "group sizes", _group_section(report, data, m, figures)),
            ("distributions", "distributions", _distribution_section(data, figures)),
            ("correlations", "correlations", _correlation_section(report, data, figures)),
            ("il", "IL per attribute", _il_section(data, figures)),
            ("changes", "statistics changes", _changes_section(report)),
            ("risk", "risk", _risk_section(report, names)),
            ("blocks", "attribute blocks", _blocks_section(report)),
            ("checks", "checks", _checks_section(report)),
            ("statistics", "original statistics", _statistics_section(report, data)),
            ("timings", "timings", _timing_section(report)),
            ("parameters", "parameters", _parameters_section(report)),
        ]
    sections = [(anchor, label, body) for anchor, label, body in sections if body]
    links = "".join(f'<a href="#{anchor}">{_e(label)}</a>' for anchor, label, _ in sections)
    version = report.get("version")
    footer = ("generated by microagg" + (f" {version}" if version is not None else "")
              + "; the histograms and correlations of the original data are aggregates of confidential data")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>\n"
        f'<body><main><h1>{_e(title)}</h1><p id="verdict" class="{cls}">{_e(verdict)}</p><nav>{links}</nav>\n'
        + "\n".join(body for _, _, body in sections)
        + f"\n<footer>{_e(footer)}</footer></main></body></html>\n"
    )


def write_html(path, report, data=None, figures=None):
    """Write :func:`render_html` of ``report`` and ``data`` to the local file ``path`` atomically
    (:func:`pipeline.io.write_atomically`: a failure leaves no partial file). Returns ``path``."""
    return write_atomically(path, render_html(report, data, figures).encode("utf-8"))
