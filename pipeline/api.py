"""The in-memory API: ``partition``, ``anonymize`` and ``information_loss`` on NumPy / pandas.

Each public function checks and converts its inputs once, then calls the kernels, the same ones
the Dask pipeline runs per block.
"""

import numpy as np
import pandas as pd

from .. import kernels
from ..kernels import noise as noise_kernels
from ..kernels.stats import HUGE, group_weighted
from . import stats
from .errors import InputError
from .blocked import Blocking, blocked_partition
from .blocking import default_block_size, sample_plan
from ..kernels.missing import observed_means
from .mic1d import check_mic1d, constant_columns, is_mic1d, merge_of, protect, vector_width
from .sequence import check_sequence, direction, grouping_of, is_sequence, partition_sequence
from .solver import Solver
from .stitch import STITCHING, solve_block
from .validation import (
    as_float_matrix,
    check_aggregate,
    check_blocking,
    check_finite,
    check_missing,
    attribute_blocks as check_attribute_blocks,
    check_k,
    check_method_options,
    check_noise,
    check_seed,
    check_release_where,
    check_weight_values,
    check_weights,
    non_numeric_error,
    resolve_columns,
)


def standardize(X, names=None, missing="error"):
    """Z-scores of ``X`` (population std; a constant column becomes 0) and the ``(mean, std)`` used.

    The statistics are exact (correctly rounded), identical to those of the distributed pipeline.
    Non-finite values raise an ``InputError`` naming the column (``names[j]``, or its position).
    """
    X = as_float_matrix(X)
    total = stats.chunk(X)
    names = names or [f"column {j}" for j in range(X.shape[1])]
    empty = int(np.isnan(X).all(axis=1).sum()) if missing == "centroid" and X.shape[1] else 0
    check_finite(names, total, missing, empty)
    mean, std = stats.finalize(total)
    return kernels.standardize(X, mean, std), mean, std


def _labels_checked(labels, n, k):
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    counts = np.bincount(labels)
    if labels.shape[0] != n or counts.min() < k:
        raise AssertionError(f"method produced an invalid partition (smallest group {counts.min()} < k={k})")
    return labels


def partition(X, k, method="mdav", *, refine="none", standardized=False, method_options=None,
              refine_options=None, seed=0, **blocking):
    """Partition the rows of ``X`` into groups of at least ``k`` similar records.

    Solved as one block (the method exactly as published, then the refinement) unless blocking
    options are given: then by the pipeline's blocked algorithm in memory (:mod:`pipeline.blocked`),
    whose groups are those the distributed release would form with the same options.

    Parameters
    ----------
    X : array-like, shape (n, d), numeric
    k : int >= 2, at most n
    method : str, a name from ``microagg.METHODS``
    refine : str, a name from ``microagg.REFINERS``: "none" (the method's groups as they are),
        "local", "ils", ...
    standardized : bool, if True ``X`` is used as given; otherwise each column is z-scored first
        (population standard deviation), as the literature does
    method_options, refine_options : dict of the options the method / refinement declares (for
        example ``{"grow": "nc"}``, ``{"iterations": 500}``)
    seed : int, seeds the methods and refinements that draw random numbers (and the blocking sample)
    **blocking : ``block_size``, ``blocks_per_task``, ``one_block_rows``, ``order``, ``sample_rows``, ``stitch`` (see
        :class:`microagg.pipeline.release.ReleaseOptions`)

    Returns
    -------
    labels : ndarray of int64, shape (n,), groups numbered ``0..g-1``
    """
    X = as_float_matrix(X)
    k = check_k(k, X.shape[0])
    check_seed(seed, "seed")
    check_method_options(method, method_options, refine, refine_options)
    solver = Solver.build(method, method_options, refine, refine_options, seed)
    plan, stitching = _blocking(blocking, k, seed)
    Z = X if standardized else standardize(X)[0]
    if is_sequence(method):
        check_sequence(method, refine, None)
        return _labels_checked(_sequence_labels(Z, k, method, method_options, seed, plan), X.shape[0], k)
    if plan is not None:
        labels, _ = blocked_partition(Z, k, solver, stitching, plan)
        return _labels_checked(labels, X.shape[0], k)
    return _labels_checked(solve_block(Z, k, solver), X.shape[0], k)


def _sequence_labels(Z, k, method, method_options, seed, plan=None, stratum=None):
    """In-memory labels of a sequence method (:mod:`pipeline.sequence`); the pcp direction comes from
    the same deterministic sample as the distributed pipeline's."""
    plan = plan or Blocking(seed=seed)
    _, threshold = sample_plan(Z.shape[0], plan.block_size, plan.sample_rows)
    sample = Z if threshold is None else Z[kernels.sample_mask(np.arange(Z.shape[0], dtype=np.int64), seed,
                                                                 threshold)]
    grouping = grouping_of(method, tuple(sorted((method_options or {}).items())))
    return partition_sequence(np.ascontiguousarray(Z), k, method, grouping, stratum, direction(method, sample))


def _block_tuple(blocks):
    """Attribute blocks as a tuple of name tuples (``"A,B;C,D"`` or any nesting of sequences)."""
    if not blocks:
        return ()
    if isinstance(blocks, str):
        blocks = [b.split(",") for b in blocks.split(";")]
    return tuple(tuple(str(c).strip() for c in b) for b in blocks)


def _strata_plan(df, mean, std, qi, ids, k, strata, small_strata):
    """The strata of ``df`` as the distributed pipeline plans them (small ones merged if asked)."""
    from .strata import check_strata, partition_counts, plan_strata

    check_strata(strata, small_strata, df.dtypes, qi, ids)
    return plan_strata(strata, [partition_counts(df, strata, qi)], qi, mean, std, k, small_strata)


def _stratified_partition(df, Z, mean, std, qi, ids, k, method, method_options, refine, refine_options, seed,
                          strata, small_strata, blocking):
    """Labels of the blocked solve with one split tree per stratum (the distributed pipeline's)."""
    plan = _strata_plan(df, mean, std, qi, ids, k, strata, small_strata)
    solver = Solver.build(method, method_options, refine, refine_options, seed)
    blocks, stitching = _blocking(blocking or {"stitch": "light"}, k, seed)
    if is_sequence(method):
        check_sequence(method, refine, None)
        return _labels_checked(_sequence_labels(Z, k, method, method_options, seed, blocks, plan.codes(df)),
                               Z.shape[0], k)
    labels, _ = blocked_partition(Z, k, solver, stitching, blocks, stratum=plan.codes(df), n_strata=plan.n_trees)
    return _labels_checked(labels, Z.shape[0], k)


def _blocking(options, k, seed):
    """``(plan, stitching)`` of the blocked solve, or ``(None, None)`` without blocking options."""
    if not options:
        return None, None
    options = dict(options)
    name = options.pop("stitch", "light")
    if name not in STITCHING:
        raise InputError(f"unknown stitching {name!r}; choose one of: {', '.join(STITCHING)}")
    accepted = set(Blocking.__dataclass_fields__) - {"seed"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise TypeError(f"unknown blocking option(s) {unknown}; accepted: {', '.join(sorted(accepted))}, stitch")
    options.setdefault("block_size", default_block_size(k))
    plan = Blocking(seed=seed, **options)
    check_blocking(plan.block_size, plan.blocks_per_task, plan.order, k, plan.one_block_rows)
    return plan, STITCHING[name]


def information_loss(X, labels, *, standardized=False):
    """IL = 100 * SSE / SST of the partition ``labels`` of ``X``, on z-scored data unless told otherwise.

    References
    ----------
    Domingo-Ferrer & Mateo-Sanz (2002); shared/papers/comparative-study-microaggregation.txt.
    """
    X = as_float_matrix(X)
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    if labels.shape != (X.shape[0],):
        raise InputError(f"labels has shape {labels.shape}, expected ({X.shape[0]},)")
    Z = X if standardized else standardize(X)[0]
    _, labels = np.unique(labels, return_inverse=True)
    il, _, _ = kernels.information_loss(Z, labels.astype(np.int64), int(labels.max()) + 1)
    return float(il)


AGGREGATE_KIND = {"mean": 0, "median": 1, "trimmed": 2}


def centroids(X, labels, n_groups, aggregate="mean", weights=None):
    """Per-group replacement values of the original (unstandardized) ``X``: the mean, the median or
    the trimmed mean (:func:`microagg.kernels.stats.group_weighted`), weighted by ``weights`` if given."""
    if weights is None and aggregate == "mean":
        return kernels.group_means(X, labels, n_groups)
    w = np.ones(len(X)) if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    return group_weighted(X, w, labels, n_groups, AGGREGATE_KIND[aggregate])


def released_table(X, labels, row_id, k, aggregate="mean", noise="none", epsilon=None, seed=0, weights=None,
                   first_column=0):
    """Each group's released tuple (``(g, d)``): its centroid, plus Laplace noise of scale
    ``(extent / k) / epsilon`` per attribute with ``noise="laplace"`` (:mod:`microagg.kernels.noise`).

    ``row_id`` (global row ids of the rows of ``X``) keys each group's draws by its smallest row id,
    so the in-memory and the distributed release draw the same noise for the same group;
    ``first_column`` is the position of ``X``'s first column among all QIs (attribute blocks).
    Raises :class:`InputError` if the noise takes a value beyond the magnitude an input may hold
    (:data:`microagg.kernels.stats.HUGE`, or infinite): an epsilon too small for the values.
    """
    n_groups = int(labels.max()) + 1 if len(labels) else 0
    table = centroids(X, labels, n_groups, aggregate, weights)
    if noise == "laplace" and n_groups:
        with np.errstate(over="ignore"):
            scale = noise_kernels.group_extents(X, labels, n_groups) / k / epsilon
        keys = noise_kernels.group_keys(np.ascontiguousarray(row_id, dtype=np.int64), labels, n_groups)
        noisy = table + noise_kernels.laplace_draws(scale, keys, seed, first_column)
        far = np.isfinite(table) & ~(np.abs(noisy) <= HUGE)
        if far.any():
            raise InputError(f"--epsilon {epsilon!r} is too small for these values: the Laplace noise takes "
                             f"{int(far.sum()):,} of {far.size:,} released group value(s) of one task beyond "
                             f"{HUGE:g} in magnitude, or to infinity; give a larger epsilon")
        table = noisy
    return table


def where_mask(frame, release_where):
    """Rows of ``frame`` (released values) that ``release_where`` keeps (all rows when None)."""
    if not release_where:
        return np.ones(len(frame), dtype=bool)
    return np.asarray(frame.eval(release_where), dtype=bool)


def anonymize(df, k, quasi_identifiers=None, method="mdav", identifiers=(), aggregate="mean", *,
              refine="none", method_options=None, refine_options=None, seed=0, noise="none", epsilon=None,
              release_where=None, weights=None, strata=None, small_strata="error", attribute_blocks=None,
              missing="error", **blocking):
    """Microaggregate a DataFrame: QI columns replaced by their group's centroid.

    Parameters
    ----------
    df : pandas.DataFrame (solved in memory: as one block, or blocked when blocking options are
        given) or dask.dataframe.DataFrame (the distributed pipeline on the active Dask client or
        scheduler: spatial blocks, stitching, release gate; the result is lazy)
    k : int >= 2
    quasi_identifiers : list of column names; default every numeric column not in ``identifiers``
    method : str, see ``microagg.METHODS``
    identifiers : direct identifiers, dropped from the result
    aggregate : "mean" (default), "median" or "trimmed" (the mean of the central 60% of a group's
        weight): the centroid that replaces each group's values
    strata : columns whose distinct values are microaggregated separately (every group inside one
        stratum); the solve is then blocked (default blocking options), as in the distributed pipeline
    missing : "error" (default): a missing (NaN) QI value is an error naming the column and the count;
        "centroid": MDAV measures distances over each record's observed coordinates (rescaled to the
        full dimension) and a missing value is released as its group's centroid (mdav only)
    small_strata : "error" (default) for a stratum with fewer than k rows, or "merge" it into the
        stratum with the nearest QI means
    attribute_blocks : e.g. ``[["A", "B"], ["C", "D"]]`` or ``"A,B;C,D"``: each block of QI columns
        microaggregated on its own (k-anonymity then holds per block, not over all QIs)
    weights : a numeric column of survey weights (finite, > 0) that weights the aggregate; kept in the
        result unchanged
    refine, method_options, refine_options, seed : see :func:`partition`
    noise, epsilon : ``noise="laplace"`` adds Laplace noise of scale ``(extent / k) / epsilon`` to each
        group's released value, attribute by attribute, one draw per group (reproducible from ``seed``;
        all members of a group keep one tuple)
    release_where : a condition on quasi-identifier columns (pandas ``eval`` syntax, e.g.
        ``"AGE >= 40 and AGE <= 50"``), evaluated on the released values: only those rows are returned
    **blocking : further :class:`microagg.pipeline.release.ReleaseOptions` (``order``,
        ``block_size``, ``stitch``...); for a pandas DataFrame they select the blocked solve in
        memory, whose release equals the distributed one

    Returns
    -------
    A DataFrame of the same kind with the same rows in the same order; QI columns as float64
    centroids, identifier columns dropped, every other column unchanged.
    """
    import dask.dataframe as dd

    check_seed(seed, "seed")
    check_method_options(method, method_options, refine, refine_options)
    if isinstance(df, dd.DataFrame):
        from .release import ReleaseOptions, build_release

        options = ReleaseOptions(
            k=k, method=method, aggregate=aggregate, refine=refine, identifiers=tuple(identifiers),
            quasi_identifiers=tuple(quasi_identifiers) if quasi_identifiers is not None else None,
            method_options=tuple(sorted((method_options or {}).items())),
            refine_options=tuple(sorted((refine_options or {}).items())), seed=seed, noise=noise,
            epsilon=epsilon, release_where=release_where, weights=weights, strata=tuple(strata or ()),
            small_strata=small_strata, attribute_blocks=_block_tuple(attribute_blocks), missing=missing, **blocking,
        )
        return build_release(df, options)[0]
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"anonymize expects a pandas or Dask DataFrame, got {type(df).__name__}")
    check_aggregate(aggregate)
    check_noise(noise, epsilon)
    check_missing(missing, method, method_options, aggregate, weights, noise)
    blocks, named = check_attribute_blocks(attribute_blocks, quasi_identifiers, [str(c) for c in df.columns])
    if blocks and release_where:
        raise InputError("release_where cannot be combined with attribute blocks: a condition on one block's "
                         "values would split the groups of the other blocks")
    qi, ids, non_numeric = resolve_columns(df.dtypes, named, identifiers, (weights, *(strata or ())))
    if non_numeric:
        raise non_numeric_error(non_numeric[0], df[non_numeric[0]])
    check_release_where(release_where, qi, df.iloc[:0])
    check_weights(weights, df.dtypes, qi, ids)
    w = None
    if weights is not None:
        w = df[weights].to_numpy(dtype=np.float64)
        check_weight_values(weights, int((~(np.isfinite(w) & (w > 0))).sum()))
    X = np.ascontiguousarray(df[qi].to_numpy(dtype=np.float64))
    width = 1
    if is_mic1d(method) and len(X):  # Mic1D-k's k counts values: rows x the smallest block's varying columns
        width = vector_width([len(b) for b in blocks or [qi]], constant_columns(X.min(axis=0), X.max(axis=0)))
    k = check_k(k, len(df) * width)
    Solver.build(method, method_options, refine, refine_options, seed)  # fail before any work
    Z, mean, std = standardize(X, qi, missing)
    released = np.empty_like(X)
    first = 0
    check_sequence(method, refine, blocks)
    check_mic1d(method, refine, aggregate, weights, noise, release_where)
    if is_mic1d(method):
        merge = merge_of(method_options)
        stratum = None
        if strata:
            stratum = _strata_plan(df, mean, std, qi, ids, -(-k // width), tuple(strata), small_strata).codes(df)
        for block in blocks or [qi]:  # every attribute block vectorized on its own
            cols = np.arange(first, first + len(block))
            released[:, cols] = protect(X[:, cols], k, stratum, merge)
            first += len(block)
        out = df.drop(columns=ids).copy()
        for j, name in enumerate(qi):
            out[name] = released[:, j]
        return out
    if method == "univariate":
        blocks = [[c] for c in qi]  # individual ranking: every quasi-identifier on its own
    for block in blocks or [qi]:  # attribute blocks are microaggregated independently
        cols = np.arange(first, first + len(block))
        Zb = np.ascontiguousarray(Z[:, cols])
        if strata:
            labels = _stratified_partition(df, Zb, mean[cols], std[cols], list(block), ids, k, method,
                                           method_options, refine, refine_options, seed, tuple(strata), small_strata,
                                           blocking)
        else:
            labels = partition(Zb, k, method, refine=refine, standardized=True, method_options=method_options,
                               refine_options=refine_options, seed=seed, **blocking)
        Xb = np.ascontiguousarray(X[:, cols])
        if missing == "centroid" and np.isnan(Xb).any():  # each group's observed means
            released[:, cols] = observed_means(Xb, labels, int(labels.max()) + 1, mean[cols])[labels]
            first += len(block)
            continue
        released[:, cols] = released_table(Xb, labels, np.arange(len(X)), k, aggregate, noise, epsilon, seed, w,
                                           first)[labels]
        first += len(block)
    out = df.drop(columns=ids).copy()
    for j, name in enumerate(qi):
        out[name] = released[:, j]
    return out[where_mask(out, release_where)] if release_where else out
