"""Evaluation measures of a release: information loss, disclosure risk, the score, k-anonymity checks.

Every measure takes the original quasi-identifiers ``X`` and the released (masked) ones ``Xm``, two
``(n, d)`` numeric arrays whose row ``i`` is the same record. The measures are those of
``shared/papers/mic1d-one-dimension-microaggregation.txt`` section 2.3 (the *score* of Domingo-Ferrer
and Torra, 2001) plus the usual companions (IL1s, SSE-based IL, k', class sizes).

Built for two drivers (STYLE.md practice 4): this module's plain-array functions are the in-memory
driver; a distributed driver reuses the same pieces over partitions.

* Sums: :func:`moments` (one chunk) -> :func:`combine_moments` (any number, any order) -> the
  ``*_from`` finalizers (:func:`information_loss_family_from`, :func:`il1s_from`, :func:`sse_il_from`,
  :func:`attribute_changes_from`). The plain functions are exactly ``finalize(moments(X, Xm))``.
* Record linkage: :func:`build_link_tree` over a block of standardized originals, :func:`query_links`
  for the masked records routed to it, :func:`combine_links` to merge the answers of disjoint blocks
  (exact), :func:`box_lower_bounds` to decide the routing, :func:`dld_from_links` to finish.
* Rank-based measures (interval disclosure, quantiles) need order statistics of whole columns; their
  docstrings say what a driver must supply.
* Equivalence classes: :func:`class_size_summary` takes the class sizes (a driver gets them from a
  distributed ``groupby(qi).size()``).

References
----------
Domingo-Ferrer, J. and Torra, V. (2001). Disclosure control methods and information loss for
microdata; and A quantitative comparison of disclosure control methods for microdata. In Doyle, P.,
Lane, J., Theeuwes, J. and Zayatz, L. (eds.), Confidentiality, Disclosure and Data Access,
Elsevier, 91-110 and 111-133.
Nin, J., Herranz, J. and Torra, V. (2008). How to group attributes in multivariate microaggregation.
IJUFKS 16(1), 121-138 (the real anonymity k').
Yancey, W. E., Winkler, W. E. and Creecy, R. H. (2002). Disclosure risk assessment in perturbative
microdata protection. LNCS 2316, 135-152 (IL1s).
Domingo-Ferrer, J. and Mateo-Sanz, J. M. (2002). Practical data-oriented microaggregation for
statistical disclosure control. IEEE TKDE 14(1) (IL = 100 SSE / SST).
"""

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from .. import kernels
from ..kernels import linkage
from . import stats
from .errors import InputError
from .validation import as_float_matrix

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
ID_PERCENT = 10
"""Default ``p`` of the rank-based interval disclosure (the Mic1D paper does not state one)."""


# --- input checks -------------------------------------------------------------------------------


def _pair(X, Xm, min_rows=1):
    """``(X, Xm)`` as C-contiguous float64 of one shape, finite, with at least ``min_rows`` rows."""
    X = as_float_matrix(X)
    Xm = as_float_matrix(Xm)
    if X.shape != Xm.shape:
        raise InputError(f"original and masked data differ in shape: {X.shape} and {Xm.shape} "
                         f"(row i of both must be the same record, same columns in the same order)")
    _finite(X, "original")
    _finite(Xm, "masked")
    if X.shape[0] < min_rows:
        raise InputError(f"this measure needs at least {min_rows} records, got {X.shape[0]}")
    return X, Xm


def _finite(X, what):
    bad = ~np.isfinite(X)
    if bad.any():
        cols = np.flatnonzero(bad.any(axis=0))
        raise InputError(f"{what} data has {int(bad.sum())} missing or infinite value(s), in column(s) "
                         f"{cols.tolist()}; the measures need finite numbers")


def _columns(columns, d):
    """Column positions (the attributes an intruder knows); all columns when ``None``."""
    if columns is None:
        return np.arange(d)
    cols = np.asarray(columns, dtype=np.int64).reshape(-1)
    if cols.size == 0 or cols.min() < 0 or cols.max() >= d or np.unique(cols).size != cols.size:
        raise InputError(f"columns must be distinct positions in 0..{d - 1}, got {list(columns)}")
    return cols


# --- sufficient statistics: chunk -> combine -> finalize ------------------------------------------


def moments(X, Xm):
    """Sufficient statistics of one chunk of rows, for every sum-based measure of this module.

    Returns a dict of NumPy arrays (``d`` = number of attributes):

    ``n``: rows; ``mean_x``, ``mean_m`` (``(d,)``): column means of ``X`` and ``Xm``;
    ``comoment_x``, ``comoment_m`` (``(d, d)``): centred cross-products ``sum (x - mean)(x - mean)^T``;
    ``abs_diff``, ``sq_diff`` (``(d,)``): ``sum |x - x'|`` and ``sum (x - x')^2``;
    ``rel_diff`` (``(d,)``): ``sum |x - x'| / |x|`` over the rows with ``x != 0``; ``zero_x``
    (``(d,)``, int64): the rows with ``x == 0`` (left out of ``rel_diff``).

    Numerical care: the covariances are kept as *centred* co-moments (two passes within the chunk)
    and merged with the pairwise update of Chan, Golub and LeVeque (1979), never recovered as
    ``sum x x^T - n mean mean^T`` (which cancels catastrophically on data far from zero, such as
    incomes). The other entries are plain sums of non-negative terms.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    Xm = np.ascontiguousarray(Xm, dtype=np.float64)
    n, d = X.shape
    if n == 0:
        z = np.zeros(d)
        return {"n": 0, "mean_x": z, "mean_m": z.copy(), "comoment_x": np.zeros((d, d)),
                "comoment_m": np.zeros((d, d)), "abs_diff": z.copy(), "sq_diff": z.copy(),
                "rel_diff": z.copy(), "zero_x": np.zeros(d, dtype=np.int64)}
    mean_x = X.mean(axis=0)
    mean_m = Xm.mean(axis=0)
    Cx = X - mean_x
    Cm = Xm - mean_m
    diff = np.abs(X - Xm)
    zero = X == 0.0
    with np.errstate(over="ignore"):  # a subnormal original value: an infinite relative change, no warning
        rel = np.divide(diff, np.abs(X), out=np.zeros_like(diff), where=~zero)
    return {
        "n": n,
        "mean_x": mean_x,
        "mean_m": mean_m,
        "comoment_x": Cx.T @ Cx,
        "comoment_m": Cm.T @ Cm,
        "abs_diff": diff.sum(axis=0),
        "sq_diff": (diff * diff).sum(axis=0),
        "rel_diff": rel.sum(axis=0),
        "zero_x": zero.sum(axis=0).astype(np.int64),
    }


def combine_moments(a, b):
    """The :func:`moments` of the union of two disjoint chunks (pairwise update for means and
    co-moments: ``C = Ca + Cb + (nb na / n) delta delta^T`` with ``delta = mean_b - mean_a``). Of the
    sums, those both chunks have (the release's pieces carry only ``sq_diff``)."""
    if a["n"] == 0:
        return {key: np.copy(v) if isinstance(v, np.ndarray) else v for key, v in b.items()}
    if b["n"] == 0:
        return {key: np.copy(v) if isinstance(v, np.ndarray) else v for key, v in a.items()}
    na, nb = a["n"], b["n"]
    n = na + nb
    out = {"n": n}
    for which in ("x", "m"):
        delta = b[f"mean_{which}"] - a[f"mean_{which}"]
        out[f"mean_{which}"] = a[f"mean_{which}"] + delta * (nb / n)
        out[f"comoment_{which}"] = (a[f"comoment_{which}"] + b[f"comoment_{which}"]
                                    + np.outer(delta, delta) * (na * nb / n))
    for key in ("abs_diff", "sq_diff", "rel_diff", "zero_x"):
        if key in a and key in b:
            out[key] = a[key] + b[key]
    return out


def _checked_moments(m, min_rows):
    if m["n"] < min_rows:
        raise InputError(f"this measure needs at least {min_rows} records, got {m['n']}")
    return m


# --- the information loss of the score (Mic1D section 2.3) ------------------------------------------


def _mean_variation(orig, masked):
    """``(mean of |a - a'| / |a| over the entries with a != 0, count of entries with a == 0)``."""
    defined = orig != 0.0
    if not defined.any():
        return math.nan, int(orig.size)
    terms = np.abs(orig[defined] - masked[defined]) / np.abs(orig[defined])
    return float(terms.mean()), int((~defined).sum())


def _correlation(V):
    """Correlation matrix of the covariance matrix ``V``; 0 off the diagonal of a constant column
    (no linear association can be measured with a constant)."""
    s = np.sqrt(np.diag(V))
    with np.errstate(divide="ignore", invalid="ignore"):
        R = V / np.outer(s, s)
    R[~np.isfinite(R)] = 0.0
    return np.clip(R, -1.0, 1.0)


def information_loss_family_from(m):
    """The information loss of the score from combined :func:`moments` (see
    :func:`information_loss_family`)."""
    m = _checked_moments(m, 2)
    n, d = m["n"], m["mean_x"].shape[0]
    V = m["comoment_x"] / (n - 1)
    Vm = m["comoment_m"] / (n - 1)
    upper = np.triu_indices(d)  # pairs j <= k: each covariance once, variances included
    strict = np.triu_indices(d, 1)  # pairs j < k: the correlations
    x_terms = n * d - int(m["zero_x"].sum())
    mv_x = float(m["rel_diff"].sum() / x_terms) if x_terms else math.nan
    mv_v, undefined_v = _mean_variation(V[upper], Vm[upper])
    mv_s, undefined_s = _mean_variation(np.diag(V), np.diag(Vm))
    R, Rm = _correlation(V), _correlation(Vm)
    mae_r = float(np.abs(R[strict] - Rm[strict]).mean()) if d > 1 else math.nan
    parts = {"X-X'": 100 * mv_x, "V-V'": 100 * mv_v, "S-S'": 100 * mv_s, "R-R'": 100 * mae_r}
    defined = [v for v in parts.values() if not math.isnan(v)]
    return {
        **parts,
        "IL": float(np.mean(defined)) if defined else math.nan,
        "undefined_terms": {"X-X'": int(m["zero_x"].sum()), "V-V'": undefined_v, "S-S'": undefined_s},
    }


def information_loss_family(X, Xm):
    """Information loss of the score: the mean of four distances between ``X`` and ``Xm``, x 100.

    The Mic1D paper (section 2.3, after Domingo-Ferrer and Torra, 2001): "Let V and R be the
    covariance matrix and the correlation matrix of X ... let S be the diagonal of V. Define V', R',
    ... analogously from X'. The information loss is computed by averaging the mean variations of
    X - X', V - V', S - S', and the mean absolute error of R - R' and multiplying the resulting
    average by 100." With the formulas of Domingo-Ferrer and Torra (2001), ``p`` attributes:

    * ``"X-X'"`` = 100/(n p) sum_j sum_i |x_ij - x'_ij| / |x_ij|
    * ``"V-V'"`` = 100/(p(p+1)/2) sum_{j <= k} |v_jk - v'_jk| / |v_jk|
    * ``"S-S'"`` = 100/p sum_j |v_jj - v'_jj| / |v_jj|
    * ``"R-R'"`` = 100/(p(p-1)/2) sum_{j < k} |r_jk - r'_jk|
    * ``"IL"`` = the mean of the four (each already x 100).

    Covariances use the divisor ``n - 1`` (the ratios do not depend on it).

    Division by zero: a mean variation is undefined where the original entry is 0 (a zero value, a
    zero covariance). The CASC Census file, on which the measure was defined and published, has no
    zero values, so the papers state no rule; Yancey, Winkler and Creecy (2002) pointed out the
    problem for X - X' and replaced the denominator by sqrt(2) S_j, which is :func:`il1s`. Here a
    term with a zero denominator is left out of its mean (the mean runs over the defined terms), and
    the numbers left out are returned under ``"undefined_terms"`` so a report can flag them. A
    component with no defined term is NaN and ``"IL"`` averages the others (also ``"R-R'"`` for a
    single attribute). A correlation with a constant column is taken as 0.

    Returns
    -------
    dict with float entries ``"X-X'"``, ``"V-V'"``, ``"S-S'"``, ``"R-R'"``, ``"IL"`` and
    ``"undefined_terms"`` (a dict of counts).

    References
    ----------
    Domingo-Ferrer, J. and Torra, V. (2001). A quantitative comparison of disclosure control methods
    for microdata. In Confidentiality, Disclosure and Data Access, Elsevier, 111-133.
    ``shared/papers/mic1d-one-dimension-microaggregation.txt`` section 2.3.
    """
    X, Xm = _pair(X, Xm, 2)
    return information_loss_family_from(moments(X, Xm))


def il1s_from(m):
    """IL1s from combined :func:`moments` (see :func:`il1s`)."""
    m = _checked_moments(m, 2)
    n = m["n"]
    S = np.sqrt(np.diag(m["comoment_x"]) / (n - 1))
    used = S > 0.0
    if not used.any():
        return 0.0
    return float((m["abs_diff"][used] / (math.sqrt(2.0) * S[used])).sum() / (n * int(used.sum())))


def il1s(X, Xm):
    """IL1s = (1 / (p n)) sum_j sum_i |x_ij - x'_ij| / (sqrt(2) S_j), ``S_j`` the standard deviation
    (divisor ``n - 1``, as R's ``sd``) of original attribute ``j``.

    The definition of Yancey, Winkler and Creecy (2002), documented by sdcMicro's ``dUtility(method =
    "IL1")`` ("scaled by the standard deviation of original variables times the square root of 2").
    Note: sdcMicro's code multiplies by sqrt(2) instead of dividing, so its figures are twice these.
    A constant original column (``S_j = 0``) is left out (``p`` counts the others): microaggregation
    cannot change it. Not multiplied by 100.

    References
    ----------
    Yancey, W. E., Winkler, W. E. and Creecy, R. H. (2002). Disclosure risk assessment in
    perturbative microdata protection. LNCS 2316, 135-152.
    Mateo-Sanz, J. M., Sebe, F. and Domingo-Ferrer, J. (2004). Outlier protection in continuous
    microdata masking. LNCS 3050, 201-215.
    """
    X, Xm = _pair(X, Xm, 2)
    return il1s_from(moments(X, Xm))


def sse_il_from(m, ddof=0):
    """SSE, SST and IL from combined :func:`moments` (see :func:`sse_il`).

    The z-scores use the original's standard deviation ``S_j = sqrt(comoment_jj / (n - ddof))``, so
    ``SSE = sum_j sq_diff_j / S_j^2`` and ``SST = sum_j comoment_jj / S_j^2`` (= ``(n - ddof)`` per
    non-constant column); the mean cancels from both. A constant column (``S_j = 0``) is all zeros
    after :func:`microagg.kernels.standardize` and adds nothing to either.
    """
    m = _checked_moments(m, 1 + ddof)
    var = np.diag(m["comoment_x"]) / (m["n"] - ddof)
    used = var > 0.0
    sse = float((m["sq_diff"][used] / var[used]).sum())
    sst = float((np.diag(m["comoment_x"])[used] / var[used]).sum())
    return {"SSE": sse, "SST": sst, "IL": 100.0 * sse / sst if sst > 0.0 else 0.0}


def sse_il(X, Xm, ddof=0):
    """IL = 100 SSE / SST on z-scored quasi-identifiers, the microaggregation literature's measure.

    Both files are standardized with the *original's* mean and standard deviation (``ddof=0``, the
    population std, as :func:`microagg.standardize` and the release pipeline do; the IL does not
    depend on ``ddof``, SSE and SST scale by ``(n - ddof)``). With ``z`` and ``z'`` the standardized
    original and released records, ``SSE = sum_i ||z_i - z'_i||^2`` and ``SST = sum_i ||z_i - mean(z)||^2``.
    For a mean-centroid release (every record replaced by its group's mean) this SSE is the
    within-group SSE of :func:`microagg.kernels.stats.information_loss` and the IL is the one
    :func:`microagg.information_loss` reports; this function needs no group labels, so it also
    measures median or noisy releases. Computed as ``sse_il_from(moments(X, Xm))``.

    Returns
    -------
    dict ``{"SSE": float, "SST": float, "IL": float}``

    References
    ----------
    Domingo-Ferrer, J. and Mateo-Sanz, J. M. (2002). Practical data-oriented microaggregation for
    statistical disclosure control. IEEE TKDE 14(1), 189-201
    (``shared/papers/comparative-study-microaggregation.txt`` section 2).
    """
    X, Xm = _pair(X, Xm, 1 + ddof)
    return sse_il_from(moments(X, Xm), ddof)


# --- per-attribute changes -------------------------------------------------------------------------


def _relative(before, after):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(before != 0.0, (after - before) / np.abs(before), np.nan)


def attribute_changes_from(m, names, quantiles, q_original, q_masked):
    """Per-attribute table from combined :func:`moments` and the quantiles of both files
    (``q_original``, ``q_masked``: ``(len(quantiles), d)``, as ``np.quantile(X, quantiles, axis=0)``).
    See :func:`attribute_changes`."""
    m = _checked_moments(m, 2)
    n = m["n"]
    rows = []
    stats_ = [("mean", m["mean_x"], m["mean_m"]),
              ("variance", np.diag(m["comoment_x"]) / (n - 1), np.diag(m["comoment_m"]) / (n - 1))]
    stats_ += [(f"q{q:g}", np.asarray(q_original)[i], np.asarray(q_masked)[i]) for i, q in enumerate(quantiles)]
    for statistic, before, after in stats_:
        change = _relative(before, after)
        for j, name in enumerate(names):
            rows.append((name, statistic, float(before[j]), float(after[j]), float(change[j])))
    return pd.DataFrame(rows, columns=["attribute", "statistic", "original", "masked", "relative_change"])


def attribute_changes(X, Xm, names=None, quantiles=QUANTILES):
    """Per attribute: mean, variance (divisor ``n - 1``) and quantiles of the original and the masked
    column, and their relative change ``(masked - original) / |original|`` (NaN where the original
    statistic is 0).

    Quantiles are ``np.quantile``'s default (linear interpolation between order statistics, Hyndman
    and Fan type 7, as R's default). A distributed driver supplies them exactly to
    :func:`attribute_changes_from`: they need order statistics of each whole column (a distributed
    sort, or a selection of the two ranks around ``q (n - 1)``); Dask's approximate
    ``quantile`` is not exact.

    Returns
    -------
    pandas.DataFrame, one row per (attribute, statistic): columns ``attribute``, ``statistic``
    (``"mean"``, ``"variance"``, ``"q0.01"``, ...), ``original``, ``masked``, ``relative_change``.

    References
    ----------
    Templ, M. (2008). Statistical disclosure control for microdata using the R-package sdcMicro.
    Transactions on Data Privacy 1(2), 67-85 (relative deviations of means, medians, variances).
    """
    X, Xm = _pair(X, Xm, 2)
    names = [f"column {j}" for j in range(X.shape[1])] if names is None else list(names)
    if len(names) != X.shape[1]:
        raise InputError(f"{len(names)} names for {X.shape[1]} columns")
    quantiles = tuple(float(q) for q in quantiles)
    return attribute_changes_from(moments(X, Xm), names, quantiles,
                                  np.quantile(X, quantiles, axis=0), np.quantile(Xm, quantiles, axis=0))


# --- distance-based record linkage (DLD) ----------------------------------------------------------


class LinkTree(NamedTuple):
    """A kd-tree over a block of standardized originals (:func:`microagg.kernels.linkage.build_tree`)."""

    points: np.ndarray
    ids: np.ndarray
    weights: np.ndarray
    start: np.ndarray
    end: np.ndarray
    left: np.ndarray
    right: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @property
    def box(self):
        """``(lo, hi)``: the bounding box of all the block's points (the routing box)."""
        return self.lo[0], self.hi[0]


class Links(NamedTuple):
    """Per masked record: squared distance to the nearest original(s), how many originals are at that
    distance, and whether the record's own original is one of them."""

    distance: np.ndarray
    count: np.ndarray
    own: np.ndarray


def build_link_tree(Z, ids=None, weights=None, leaf_size=linkage.LEAF_SIZE):
    """kd-tree over standardized originals ``Z`` (``(n, d)``; ``ids``: their record ids, default
    ``0..n-1``; a distributed driver passes global row ids).

    ``weights`` (default all 1): the number of originals each row stands for. A driver that
    collapses duplicate original tuples (advisable when the intruder knows few attributes: thousands
    of coincident points would be scanned by every query near them) passes the multiplicities; the
    counts of :func:`query_links` then count originals, and ``own`` must be decided by the caller
    (see :func:`record_linkage`), since one point then stands for several ids.
    """
    Z = np.ascontiguousarray(Z, dtype=np.float64)
    n = Z.shape[0]
    ids = np.arange(n, dtype=np.int64) if ids is None else np.ascontiguousarray(ids, dtype=np.int64)
    weights = np.ones(n, dtype=np.int64) if weights is None else np.ascontiguousarray(weights, dtype=np.int64)
    if Z.ndim != 2 or ids.shape != (n,) or weights.shape != (n,):
        raise InputError(f"points {Z.shape}, ids {ids.shape}, weights {weights.shape}: expected (n, d), (n,), (n,)")
    return LinkTree(*linkage.build_tree(Z, ids, weights, int(leaf_size)))


def query_links(tree, Zm, ids=None, bound=None):
    """:class:`Links` of the standardized masked records ``Zm`` against the originals of ``tree``;
    ``ids`` are the masked records' own ids (default ``0..m-1``), compared with the tree's ids.

    ``bound`` (optional, ``(m,)``): only originals at squared distance ``<= bound[i]`` are looked
    for; a query with none gets ``(bound[i], 0, False)``. A distributed driver passes the best
    distances found so far in other blocks (``links.distance``) and merges with :func:`combine_links`;
    the result is exact either way, a bound only saves work.
    """
    Zm = np.ascontiguousarray(Zm, dtype=np.float64)
    m = Zm.shape[0]
    ids = np.arange(m, dtype=np.int64) if ids is None else np.ascontiguousarray(ids, dtype=np.int64)
    bound = np.full(m, np.inf) if bound is None else np.ascontiguousarray(bound, dtype=np.float64)
    if Zm.ndim != 2 or Zm.shape[1] != tree.points.shape[1] or ids.shape != (m,) or bound.shape != (m,):
        raise InputError(f"queries {Zm.shape}, ids {ids.shape}, bound {bound.shape} do not match "
                         f"{tree.points.shape[1]} columns")
    return Links(*linkage.query_tree(*tree, Zm, ids, bound))


def combine_links(a, b):
    """Merge the :class:`Links` of the same masked records against two disjoint sets of originals
    (exact: smaller distance wins, equal distances add counts and OR the own flags)."""
    return Links(*linkage.combine_links(a.distance, a.count, a.own, b.distance, b.count, b.own))


def no_links(m):
    """The :class:`Links` of ``m`` records against no original (the identity of :func:`combine_links`)."""
    return Links(np.full(m, np.inf), np.zeros(m, dtype=np.int64), np.zeros(m, dtype=bool))


def box_lower_bounds(Zm, lo, hi):
    """Squared distance from each standardized masked record to the box ``[lo, hi]`` (a block's
    :attr:`LinkTree.box`): a block must answer record ``i`` iff ``bound[i] <= links.distance[i]``
    (ties count, hence ``<=``). Never above the distance to any point of the box, in floating point."""
    return linkage.box_lower_bounds(np.ascontiguousarray(Zm, dtype=np.float64),
                                    np.ascontiguousarray(lo, dtype=np.float64),
                                    np.ascontiguousarray(hi, dtype=np.float64))


def dld_from_links(links, records=None):
    """DLD = 100 * (sum over masked records of ``own / count``) / (number of records), in percent.

    ``records``: the number of records whose links were searched, when only a sample was (the others
    have ``own`` False); the DLD is then the sample's mean credit, an estimate."""
    n = links.count.shape[0] if records is None else records
    if n == 0:
        return 0.0
    credit = np.where(links.own, 1.0 / np.maximum(links.count, 1), 0.0)
    return 100.0 * float(credit.sum()) / n


def _standardized_pair(X, Xm, columns):
    """Both files z-scored with the original's exact mean and population std (the release
    pipeline's statistics, :mod:`microagg.pipeline.stats`), restricted to ``columns``."""
    cols = _columns(columns, X.shape[1])
    mean, std = stats.finalize(stats.chunk(X))
    Z = kernels.standardize(X, mean, std)
    Zm = kernels.standardize(Xm, mean, std)
    return np.ascontiguousarray(Z[:, cols]), np.ascontiguousarray(Zm[:, cols])


def record_linkage(X, Xm, columns=None, leaf_size=linkage.LEAF_SIZE):
    """Distance-based record linkage of every masked record to the original records: :class:`Links`.

    Both files are standardized with the original's mean and standard deviation (as the release
    pipeline standardizes), then restricted to ``columns`` (positions of the attributes the intruder
    knows; all by default). For masked record ``i``: the smallest squared Euclidean distance to an
    original record, the number ``t`` of originals at exactly that distance, and whether original
    ``i`` is among them. Exact (kd-tree branch and bound, :mod:`microagg.kernels.linkage`), memory
    O(n d), never an n x n matrix.

    Work saved without changing the answer: duplicate original tuples are collapsed into one tree
    point that counts its multiplicity; each *distinct* masked tuple is searched once (a
    microaggregated release repeats each tuple at least k times); original ``i`` is among the nearest
    originals of its masked tuple iff its distance to it, computed exactly as the search computes
    distances, equals the best distance; each search starts from the smallest such distance within
    its class (an upper bound attained by a point of the tree); searches run in the tree order of
    the classes' first records, for memory locality.
    """
    X, Xm = _pair(X, Xm)
    Z, Zm = _standardized_pair(X, Xm, columns)
    own_distance = linkage.paired_distances(Z, Zm)
    tuple_of, first_original = _row_codes(Z)
    tree = build_link_tree(Z[first_original], weights=np.bincount(tuple_of), leaf_size=leaf_size)
    codes, first = _row_codes(Zm)
    seed = np.full(first.shape[0], np.inf)
    np.minimum.at(seed, codes, own_distance)
    position = np.empty(first_original.shape[0], dtype=np.int64)
    position[tree.ids] = np.arange(first_original.shape[0])  # tree.ids: distinct original tuples
    reps = first[np.argsort(position[tuple_of[first]], kind="stable")]
    searched = query_links(tree, Zm[reps], np.full(reps.shape[0], -1, dtype=np.int64), seed[codes[reps]])
    best = np.empty(first.shape[0])
    count = np.empty(first.shape[0], dtype=np.int64)
    best[codes[reps]] = searched.distance
    count[codes[reps]] = searched.count
    return Links(best[codes], count[codes], own_distance == best[codes])


def _row_codes(A):
    """``(codes, first)``: row ``i`` of ``A`` is distinct tuple ``codes[i]`` (numbered in order of
    first appearance), whose first row is ``first[codes[i]]``. Rows are compared by value, ``-0.0``
    equal to ``0.0``; ``A`` must be finite."""
    A = np.ascontiguousarray(A + 0.0, dtype=np.float64)  # + 0.0 turns -0.0 into 0.0
    if A.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    # rows grouped by a 64-bit hash of their values (8 times faster than by their bytes at 13 columns),
    # then checked value by value: only if two different rows collided are they grouped by their bytes
    codes, first = _first_appearance(pd.factorize(kernels.row_hashes(A, 0))[0])
    if not kernels.rows_equal_first(A, codes, first):
        codes, first = _first_appearance(pd.factorize(A.view(np.dtype((np.void, A.dtype.itemsize * A.shape[1])))
                                                      .ravel())[0])
    return codes, first


def _first_appearance(codes):
    """``(codes, first)`` of ``pd.factorize``'s codes (numbered in order of first appearance: a row
    starts a new tuple iff its code exceeds every code before it)."""
    codes = codes.astype(np.int64)
    seen = np.maximum.accumulate(codes)
    new = np.ones(codes.shape[0], dtype=bool)
    new[1:] = codes[1:] > seen[:-1]
    return codes, np.flatnonzero(new)


def dld(X, Xm, columns=None):
    """Distance linkage disclosure risk DLD, in percent (Mic1D section 2.3; Pagliuca and Seri, 1999).

    The intruder links each masked record to the nearest original record(s) in standardized space
    (Euclidean distance on the z-scores of the known ``columns``, both files standardized with the
    original's mean and std). A link is correct when the nearest original is the record itself.
    Tie rule: if ``t`` originals are at exactly the same minimal distance, the intruder picks one of
    them at random, so the record counts ``1/t`` if it is among them and 0 otherwise (exact duplicate
    originals therefore share the credit). DLD = 100 * (sum of credits) / n.

    The Mic1D paper averages DLD over every non-empty subset of attributes the intruder may know
    (512 subsets for 9 attributes); call this once per subset with ``columns``.

    References
    ----------
    Domingo-Ferrer, J. and Torra, V. (2001). A quantitative comparison of disclosure control methods
    for microdata. In Confidentiality, Disclosure and Data Access, Elsevier, 111-133.
    Pagliuca, D. and Seri, G. (1999). Some results of individual ranking method on the system of
    enterprise accounts annual survey. Esprit SDC Project, Deliverable MI-3/D2.
    ``shared/papers/mic1d-one-dimension-microaggregation.txt`` section 2.3.
    """
    return dld_from_links(record_linkage(X, Xm, columns))


# --- interval disclosure (ID) ---------------------------------------------------------------------


def rank_half_width(n, p):
    """Half-width ``h`` (in ranks) of the rank interval of ``p`` percent of ``n`` records: the largest
    ``h`` with ``2h < p n / 100``, so the ranks in a window ``[c - h, c + h]`` differ by less than
    ``p`` percent of ``n``."""
    return max(int(math.ceil(p * n / 200.0)) - 1, 0)


def interval_hits(masked_sorted, x, xm, h):
    """For each record of a chunk: is the original value ``x`` inside the rank interval around its
    masked value ``xm``? (One attribute; ``masked_sorted`` is the whole masked column, sorted.)

    The masked value's rank block is ``[L, R)`` (``L`` masked values are smaller, ``R`` are not
    larger; ``R - L`` ties, at least 1 when ``xm`` is one of the column's values); the interval runs
    from the masked order statistic ``L - h`` to ``R - 1 + h`` (clipped to the column).
    """
    n = masked_sorted.shape[0]
    low = np.searchsorted(masked_sorted, xm, side="left")
    high = np.searchsorted(masked_sorted, xm, side="right")
    lo = masked_sorted[np.clip(low - h, 0, n - 1)]
    hi = masked_sorted[np.clip(high - 1 + h, 0, n - 1)]
    return (lo <= x) & (x <= hi) & (high - 1 + h >= low - h)


def interval_disclosure_rates(X, Xm, p=ID_PERCENT):
    """Per attribute, the percentage of records whose original value falls in the rank interval
    around its masked value (see :func:`interval_disclosure`); ``p`` a number or a sequence (the
    rates are then averaged over the ``p`` values)."""
    X, Xm = _pair(X, Xm)
    n, d = X.shape
    ps = np.atleast_1d(np.asarray(p, dtype=np.float64))
    if ps.size == 0 or (ps <= 0).any() or (ps > 100).any():
        raise InputError(f"p must be a percentage in (0, 100], got {p}")
    rates = np.zeros(d)
    for j in range(d):
        masked_sorted = np.sort(Xm[:, j])
        for q in ps:
            rates[j] += interval_hits(masked_sorted, X[:, j], Xm[:, j], rank_half_width(n, q)).mean()
    return 100.0 * rates / ps.size


def interval_disclosure(X, Xm, p=ID_PERCENT, columns=None):
    """Rank-based interval disclosure ID, in percent (Mic1D section 2.3, after Domingo-Ferrer and
    Torra, 2001): "the average percentage of original values falling into the intervals around their
    corresponding masked values".

    The Mic1D paper does not say how the intervals are built nor which ``p``; this is the rank-based
    interval disclosure of Domingo-Ferrer and Torra (2001) with ``p = 10``: each attribute is ranked
    on its own; around the masked value of record ``r`` a rank interval is defined whose centre is
    the rank of that masked value and whose ranks differ by less than ``p`` percent of ``n``
    (``h = rank_half_width(n, p)`` ranks on each side, ``2h < p n / 100``); the record counts when
    its original value lies in ``[value at rank c - h, value at rank c + h]``. The ranks are those of
    the *masked* column (the intruder of this scenario holds only the masked file), ranks clipped to
    ``1..n``; tied masked values share one centre, so the window spans all of them plus ``h`` ranks
    on each side. ID = the percentage of (record, attribute) pairs counted, over ``columns`` (the
    attributes the intruder knows; all by default). ``p`` may be a sequence: the ID is then the mean
    over those ``p`` (Domingo-Ferrer and Torra averaged several interval widths).

    A distributed driver needs, per attribute, the order statistics of the whole masked column at
    ranks ``L - h`` and ``R - 1 + h`` of each masked value (``L``/``R``: counts of smaller / not
    larger masked values): a distributed sort of the masked column, then :func:`interval_hits` per
    partition; the per-attribute rates average like this function.

    References
    ----------
    Domingo-Ferrer, J. and Torra, V. (2001). A quantitative comparison of disclosure control methods
    for microdata. In Confidentiality, Disclosure and Data Access, Elsevier, 111-133.
    ``shared/papers/mic1d-one-dimension-microaggregation.txt`` section 2.3.
    """
    X, Xm = _pair(X, Xm)
    cols = _columns(columns, X.shape[1])
    return float(interval_disclosure_rates(X[:, cols], Xm[:, cols], p).mean())


# --- the score -----------------------------------------------------------------------------------


def disclosure_risk(dld, id_):
    """DR = 0.5 DLD + 0.5 ID (Mic1D section 2.3)."""
    return 0.5 * dld + 0.5 * id_


def score(il, dld, id_):
    """score = 0.5 IL + 0.5 DR with DR = 0.5 DLD + 0.5 ID, all in percent; lower is better.

    References
    ----------
    Domingo-Ferrer, J. and Torra, V. (2001). A quantitative comparison of disclosure control methods
    for microdata. ``shared/papers/mic1d-one-dimension-microaggregation.txt`` section 2.3.
    """
    return 0.5 * il + 0.5 * disclosure_risk(dld, id_)


# --- equivalence classes: k', class sizes, k-anonymity --------------------------------------------


def class_sizes_of(Xm):
    """Sizes (int64 array, in order of first appearance) of the equivalence classes of the released
    QI tuples: the numbers of rows sharing each distinct row of ``Xm`` (``-0.0`` and ``0.0`` are one
    value)."""
    Xm = as_float_matrix(Xm)
    _finite(Xm, "masked")
    codes, first = _row_codes(Xm)
    return np.bincount(codes, minlength=first.shape[0]).astype(np.int64)


def class_size_summary(sizes):
    """``{"records", "classes", "min", "k_prime", "histogram"}`` of equivalence-class sizes (a
    driver's ``groupby(qi).size()``); ``histogram`` maps a class size to the number of classes of that
    size, ascending."""
    sizes = np.asarray(sizes, dtype=np.int64)
    values, counts = np.unique(sizes, return_counts=True)
    records = int(sizes.sum())
    return {
        "records": records,
        "classes": int(sizes.size),
        "min": int(sizes.min()) if sizes.size else 0,
        "k_prime": records / sizes.size if sizes.size else math.nan,
        "histogram": {int(v): int(c) for v, c in zip(values, counts)},
    }


def real_anonymity(Xm):
    """Real anonymity k' = n / |{x' in X'}|, the number of records over the number of distinct
    released records (Nin, Herranz and Torra, 2008; Mic1D section 2.3).

    References
    ----------
    Nin, J., Herranz, J. and Torra, V. (2008). How to group attributes in multivariate
    microaggregation. IJUFKS 16(1), 121-138.
    """
    return class_size_summary(class_sizes_of(Xm))["k_prime"]


def class_sizes(Xm):
    """``(minimum, histogram)`` of the equivalence-class sizes of the released QI tuples; the
    histogram maps a size to the number of classes of that size."""
    summary = class_size_summary(class_sizes_of(Xm))
    return summary["min"], summary["histogram"]


def check_k_anonymous(Xm, k):
    """Number of rows in equivalence classes smaller than ``k`` (0: the release is k-anonymous)."""
    sizes = class_sizes_of(Xm)
    return int(sizes[sizes < k].sum())
