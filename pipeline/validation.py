"""Checks that run before any kernel: options, column names and dtypes (from metadata), finiteness.

Every message names the column, the problem and the count of offending rows, so a data engineer can
fix the input without reading code.
"""

import os
import re

import numpy as np
import pandas as pd

from .blocking import ORDERS
from .errors import InputError

AGGREGATES = ("mean", "median", "trimmed")
NOISES = ("none", "laplace")


def check_k(k, n_rows=None):
    """``k`` must be an integer >= 2 and, when the row count is known, no larger than it."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise InputError(f"k must be an integer >= 2, got {k!r}")
    if k < 2:
        raise InputError(f"k must be >= 2 (k=1 releases the data unprotected), got k={k}")
    if n_rows is not None and n_rows < k:
        raise InputError(f"the input has {n_rows} rows, fewer than k={k}: no group of k records can be formed")
    return int(k)


def check_weights(weights, dtypes, qi, identifiers):
    """The survey-weight column: present, numeric, neither a quasi-identifier nor an identifier."""
    if weights is None:
        return
    if weights not in dtypes.index:
        raise InputError(f"weights column {weights!r} is not in the input; columns: {list(dtypes.index)}")
    if not pd.api.types.is_numeric_dtype(dtypes[weights]) or pd.api.types.is_bool_dtype(dtypes[weights]):
        raise InputError(f"weights column {weights!r} is not numeric (dtype {dtypes[weights]})")
    if weights in qi or weights in identifiers:
        raise InputError(f"weights column {weights!r} is also a quasi-identifier or an identifier")


def check_weight_values(weights, bad):
    """``bad``: count of rows whose weight is missing, infinite, zero or negative."""
    if bad:
        raise InputError(f"weights column {weights!r}: {bad} row(s) hold a weight that is missing, infinite, "
                         f"zero or negative; weights must be finite and > 0")


def attribute_blocks(blocks, quasi_identifiers, columns):
    """Attribute blocks (``"A,B;C,D"`` or a sequence of name sequences) checked against the input
    ``columns``: returns ``(blocks, qi)`` with ``qi`` the blocks' columns in order. Without blocks:
    ``((), quasi_identifiers)``."""
    if not blocks:
        return (), quasi_identifiers
    if isinstance(blocks, str):
        blocks = [b.split(",") for b in blocks.split(";")]
    blocks = tuple(tuple(c.strip() for c in b if c.strip()) for b in blocks)
    if any(not b for b in blocks):
        raise InputError("--blocks has an empty attribute block (two ';' in a row, or one at an end)")
    names = [c for b in blocks for c in b]
    unknown = [c for c in names if c not in columns]
    if unknown:
        raise InputError(f"--blocks names {len(unknown)} column(s) not in the input: {', '.join(map(repr, unknown))}")
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:
        raise InputError(f"--blocks puts column(s) {', '.join(map(repr, twice))} in more than one block")
    qi = _names(quasi_identifiers, "--qi")
    if qi is not None and sorted(qi) != sorted(names):
        raise InputError(f"--qi {sorted(qi)} and the columns of --blocks {sorted(names)} differ; give the same "
                         "columns (or only --blocks)")
    return blocks, names


def check_noise(noise, epsilon):
    """``noise`` is one of :data:`NOISES`; Laplace noise needs ``epsilon > 0`` and only it takes one."""
    if noise not in NOISES:
        raise InputError(f"unknown noise {noise!r}; choose one of: {', '.join(NOISES)}")
    if noise == "laplace":
        if epsilon is None:
            raise InputError("Laplace noise needs a privacy budget: give --epsilon EPS (> 0)")
        if not np.isfinite(epsilon) or epsilon <= 0:
            raise InputError(f"epsilon must be a finite number > 0, got {epsilon}")
    elif epsilon is not None:
        raise InputError("--epsilon is the budget of the added noise: give it with --noise laplace")


def check_release_where(expression, qi, meta):
    """``expression`` (a pandas ``eval`` condition) may use quasi-identifier columns only: it is
    evaluated on the released values, where all members of a group carry the same tuple, so whole
    groups are kept or dropped and the release stays k-anonymous. Another column could split a group."""
    if expression is None:
        return
    import ast

    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise InputError(f"--release-where {expression!r} is not a valid condition: {exc.msg}") from exc
    names = sorted({node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} - {"True", "False"})
    others = [name for name in names if name not in qi]
    if others:
        raise InputError(
            f"--release-where may only use quasi-identifier columns (it filters released values, so whole "
            f"groups stay together); {others} {'is' if len(others) == 1 else 'are'} not among them: {list(qi)}"
        )
    try:  # on the QIs as released: float64 (an integer column with nulls is read as pandas' nullable Int64)
        result = meta[list(qi)].astype("float64").eval(expression)
    except Exception as exc:  # pandas raises many kinds for a bad expression
        raise InputError(f"--release-where {expression!r} cannot be evaluated: {exc}") from exc
    if not isinstance(result, pd.Series) or result.dtype != bool:
        raise InputError(f"--release-where {expression!r} is not a true/false condition on each row")


def check_blocking(block_size, blocks_per_task, order, k, one_block_rows=0):
    """Options of the blocked solve (in memory or distributed)."""
    if one_block_rows < 0:
        raise InputError(f"one-block rows must be >= 0, got {one_block_rows}")
    if order not in ORDERS:
        raise InputError(f"unknown order {order!r}; choose one of: {', '.join(ORDERS)}")
    if blocks_per_task < 1:
        raise InputError(f"blocks per task must be >= 1, got {blocks_per_task}")
    if block_size < 2 * k:
        raise InputError(f"block size must be at least 2k = {2 * k}, got {block_size}")


def check_aggregate(aggregate):
    if aggregate not in AGGREGATES:
        raise InputError(f"unknown aggregate {aggregate!r}; choose one of: {', '.join(AGGREGATES)}")
    return aggregate


def spaced_names(columns):
    """``{name: column}`` for the columns whose names have spaces around them (a CSV header written
    ``id, income, age`` names ``' income'``), keyed by the name without them, where that is no other
    column's name and no other spaced column's: the name options may give for the column."""
    columns = [str(c) for c in columns]
    found = {}
    for column in columns:
        name = column.strip()
        if name and name != column and name not in columns:
            found.setdefault(name, []).append(column)
    return {name: found[0] for name, found in found.items() if len(found) == 1}


def as_written(names, spaced):
    """Column ``names`` (a sequence, or a comma-separated string), each that names no column but one
    of ``spaced`` (:func:`spaced_names`) replaced by that column's name as the input writes it."""
    if names is None:
        return names
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    return type(names)(spaced.get(n, n) for n in names) if isinstance(names, (list, tuple)) else names


def _names(value, option):
    if value is None:
        return None
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    names = list(value)
    seen = set()
    for name in names:
        if name in seen:
            raise InputError(f"column {name!r} is named twice in {option}")
        seen.add(name)
    return names


def resolve_columns(dtypes, quasi_identifiers=None, identifiers=(), others=()):
    """Decide the QI and identifier columns from the column dtypes alone (no data is read).

    Parameters
    ----------
    dtypes : pandas.Series mapping column name -> dtype (``DataFrame.dtypes`` or a Dask ``_meta``'s)
    quasi_identifiers : list of names, comma-separated string or None (every numeric column not
        named as an identifier)
    identifiers : names of direct identifiers, dropped from the release
    others : the columns of the other roles (weights, strata): never default quasi-identifiers

    Returns
    -------
    (quasi_identifiers, identifiers, non_numeric) : lists; ``non_numeric`` holds the QI columns whose
        dtype is not numeric, for the caller to report with an offending value.
    """
    columns = [str(c) for c in dtypes.index]
    qi = _names(quasi_identifiers, "--qi")
    if qi is not None and not qi:
        raise InputError("--qi names no column; omit --qi for the default (every numeric column not named elsewhere)")
    ids = _names(identifiers, "--identifiers") or []
    for option, names in (("--qi", qi or []), ("--identifiers", ids)):
        missing = [n for n in names if n not in columns]
        if missing:
            raise InputError(
                f"{option} names {len(missing)} column(s) not in the input: {', '.join(map(repr, missing))}; "
                f"the input has: {', '.join(columns)}"
            )
    both = sorted(set(qi or []) & set(ids))
    if both:
        raise InputError(f"column(s) {', '.join(map(repr, both))} named both as quasi-identifier and identifier")
    if qi is None:
        roles = {*ids, *(c for c in others if c is not None)}
        qi = [c for c in columns if c not in roles and _is_numeric(dtypes[c])]
        if not qi:
            raise InputError("the input has no numeric column to use as a quasi-identifier; name them with --qi")
    non_numeric = [c for c in qi if not _is_numeric(dtypes[c])]
    return qi, ids, non_numeric


def _is_numeric(dtype):
    return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)


def non_numeric_values(values):
    """``(count, first example)`` of the values of a pandas Series that are present but not numbers."""
    values = pd.Series(values)
    bad = values[pd.to_numeric(values, errors="coerce").isna() & values.notna()]
    return len(bad), (bad.iloc[0] if len(bad) else None)


_NUMBER_FORMATS = (  # (a number written with separators, the flags that read it)
    (r"[+-]?\d{1,3}(\.\d{3})+,\d+|[+-]?\d{1,3}(\.\d{3}){2,}", "thousands separators '.' and a decimal comma: give "
                                                         "--csv-thousands '.' and --csv-decimal ','"),
    (r"[+-]?\d{1,3}(,\d{3})+\.\d+|[+-]?\d{1,3}(,\d{3}){2,}", "thousands separators ',': give --csv-thousands ','"),
    (r"[+-]?\d{1,3}( \d{3})+([.,]\d+)?", "thousands separators ' ': give --csv-thousands ' ' (and --csv-decimal ',' "
                                        "for a decimal comma)"),
    (r"[+-]?\d{1,3},\d{3}", "a thousands separator, or a decimal comma: give --csv-thousands ',', or --csv-decimal "
                          "','"),
    (r"[+-]?\d*,\d+", "a decimal comma: give --csv-decimal ','"),
)


def number_format_hint(text):
    """`` (what the number looks written with: the flags that read it)``, or "" for a value that does not
    look like a number written with a decimal comma or thousands separators."""
    for pattern, hint in _NUMBER_FORMATS:
        if re.fullmatch(pattern, text.strip()):
            return f" ({hint})"
    return ""


def non_numeric_error(column, values, which=""):
    """The error for a QI column whose dtype is not numeric: the count of its values that are not
    numbers and one of them. ``values``: the column, a pandas Series or a Dask one (counted partition
    by partition: the job is refused from metadata, this pass only fills in the message); ``which``:
    the file's name for it ("original"), if there are two."""
    if hasattr(values, "to_delayed"):
        import dask

        found = dask.compute(*[dask.delayed(non_numeric_values)(p) for p in values.to_delayed()])
    else:
        found = [non_numeric_values(values)]
    count = sum(c for c, _ in found)
    example = next((e for c, e in found if c), None)
    shown = (f"{count} row(s) hold a value that is not a number, for example {example!r}" if count else
             "store it as numbers")
    if count:
        shown += number_format_hint(str(example))
    of = f" of the {which} file" if which else ""
    return InputError(f"quasi-identifier column {column!r}{of} is not numeric (dtype {values.dtype}): {shown}; "
                      f"microaggregation needs numbers: clean the column or leave it out of --qi")


MISSING = ("error", "centroid")


def check_missing(missing, method, method_options, aggregate, weights, noise):
    """``--missing centroid`` is supported by MDAV (NN growth) with the mean aggregate."""
    if missing not in MISSING:
        raise InputError(f"unknown --missing {missing!r}; choose one of: {', '.join(MISSING)}")
    if missing == "error":
        return
    if method != "mdav" or dict(method_options or ()).get("grow", "nn") != "nn":
        raise InputError(f"--missing centroid measures distances over the observed coordinates in MDAV; it "
                         f"supports --method mdav (grow nn), not {method!r}")
    for bad, flag in ((aggregate != "mean", f"--aggregate {aggregate}"), (weights is not None, "--weights"),
                      (noise not in (None, "none"), f"--noise {noise}")):
        if bad:
            raise InputError(f"--missing centroid releases each missing value as its group's observed mean; it "
                             f"cannot be combined with {flag}")


def check_finite(columns, totals, missing="error", empty_rows=0):
    """Raise if any QI column has NaN (missing; allowed with ``missing="centroid"`` unless a column or
    a row has no observed value), infinite or overflowing values, naming each and its row count.
    ``totals`` is a :class:`pipeline.stats.ColumnSums`; ``empty_rows`` counts rows with every QI missing."""
    problems = []
    nan_rows = missing != "centroid" and any(totals.nans)  # the one problem --missing centroid solves
    if missing == "centroid" and empty_rows:
        problems.append(f"{int(empty_rows)} row(s) have every quasi-identifier missing (nothing to place them by)")
    for name, nans, infs, huge in zip(columns, totals.nans, totals.infs, totals.huge):
        if nans and missing == "centroid" and nans == totals.rows:
            problems.append(f"column {name!r} has no observed value ({int(nans)} row(s), all missing)")
        elif nans and missing != "centroid":
            problems.append(f"column {name!r} has {int(nans)} row(s) with a missing (NaN) value")
        if infs:
            problems.append(f"column {name!r} has {int(infs)} row(s) with an infinite value")
        if huge:
            problems.append(f"column {name!r} has {int(huge)} row(s) with a magnitude above 1e150 "
                            f"(rescale the column)")
    if problems:
        raise InputError(
            "quasi-identifiers must be finite numbers: " + "; ".join(problems)
            + (". Impute or drop those rows before microaggregation, or release missing values as their "
               "group's centroid with --missing centroid." if nan_rows else
               ". Fix or drop those rows before microaggregation.")
        )


def as_float_matrix(X):
    """C-contiguous float64 ``(n, d)`` view or copy of ``X``; a ``TypeError`` that says how to fix it."""
    if isinstance(X, (pd.DataFrame, pd.Series)):
        X = X.to_numpy()
    X = np.asarray(X)
    if X.dtype.kind not in "iuf":
        raise TypeError(
            f"expected a numeric 2-D array, got dtype {X.dtype}; convert it with "
            f"np.asarray(X, dtype=np.float64) after removing non-numeric columns"
        )
    if X.ndim == 1:
        X = X.reshape(-1, 1)
    if X.ndim != 2:
        raise TypeError(f"expected a 2-D array (rows x attributes), got {X.ndim} dimensions")
    return np.ascontiguousarray(X, dtype=np.float64)


SEED_MAX = 2**63 - 1
"""The largest seed: seeds are mixed as 64-bit integers by the kernels (``kernels.splitmix64``,
``kernels.sample_mask``), which take 0..2**63-1."""


def check_seed(seed, option="--seed"):
    """``seed`` is an integer in ``0..SEED_MAX``; ``option``: its name in the message."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= SEED_MAX:
        raise InputError(f"{option} must be an integer from 0 to 2**63-1 ({SEED_MAX}), got {seed!r}")
    return int(seed)


# method / refinement option -> the CLI flag that sets it (the job file's key is the flag's name)
OPTION_FLAGS = {"grow": "--grow", "gamma": "--gamma", "eps": "--eps", "mhm_order": "--mhm-order",
                "grouping": "--univariate-grouping", "remainder": "--remainder", "portfolio": "--portfolio",
                "iterations": "--iterations", "time_budget": "--time-budget"}


def check_method_options(method, method_options=None, refine="none", refine_options=None):
    """The method's and the refinement's names and options, their values included, checked before
    anything is read: each value by the check its catalogue entry declares, the one the method runs
    (:class:`pipeline.methods.Option`). A message names the option's flag (``--gamma: vmdav option
    gamma must be ...``) where it has one."""
    from .methods import get_method, get_refiner
    from .solver import Solver

    Solver.build(method, dict(method_options or ()), refine, dict(refine_options or ()))  # names, options taken
    for entry, options in ((get_method(method), dict(method_options or ())),
                           (get_refiner(refine), dict(refine_options or ()))):
        for name in sorted(options):
            try:
                entry.option_value(name, options)
            except InputError as exc:
                flag = OPTION_FLAGS.get(name)
                raise InputError(f"{flag}: {exc}" if flag else str(exc)) from None


def report_path_problems(inputs, output, reports):
    """Why the report files cannot be written where they are asked: a list of messages (empty: none),
    each starting with the label of the path it is about.

    Parameters
    ----------
    inputs : the input paths (local paths or globs; URLs and ``example:`` are skipped)
    output : the release directory, or None (``microagg evaluate`` writes no release)
    reports : ``(label, path)`` pairs of the files written besides the release (None paths skipped),
        each with its label as the user spells it (``--report``, ``[report] json``)

    A report must not be an input file, lie inside the input or hold it (the rule of
    :func:`pipeline.io.overlap` for the release: symbolic links followed, globs expanded), must not be
    the release directory or hold it, nor be a directory; inside the release it must be a file directly
    in it whose name starts with ``_`` (a Parquet reader of the release takes any other for data); and no
    two of the release and the reports may be one path.
    """
    from . import io

    problems = []
    seen = {}
    release = os.path.realpath(output) if output is not None else None
    if release is not None:
        seen[release] = "the release directory"
    for label, path in reports:
        if path is None or not io.is_local(path):
            continue
        real = os.path.realpath(path)
        if os.path.isdir(real) and real != release:
            problems.append(f"{label}: {str(path)!r} is a directory; give a file name")
            continue
        if release is not None and real.startswith(release + os.sep) and (
                os.path.dirname(real) != release or not os.path.basename(real).startswith("_")):
            problems.append(f"{label}: a report inside the release must be a file directly in it whose name starts "
                            f"with '_' (Parquet readers skip those), got {str(path)!r}")
            continue
        for source in inputs:
            if source is not None and io.overlap(source, path):
                files = {os.path.realpath(p) for p in io.local_paths(source)}
                where = ("is an input file" if real in files else
                         "holds the input" if any(f.startswith(real.rstrip(os.sep) + os.sep) for f in files) else
                         "lies inside the input")
                problems.append(f"{label}: {str(path)!r} {where} {str(source)!r}; writing the report there would "
                                f"overwrite input data")
                break
        if release is not None and real == release:
            problems.append(f"{label}: {str(path)!r} is the release directory {str(output)!r}; give a file name")
            continue
        if release is not None and release.startswith(real.rstrip(os.sep) + os.sep):
            problems.append(f"{label}: {str(path)!r} holds the release {str(output)!r}; give a file name")
            continue
        if real in seen:
            problems.append(f"{label}: {str(path)!r} is also {seen[real]}; each report needs its own file")
        else:
            seen[real] = label
    return problems

