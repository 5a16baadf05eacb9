"""Strata (``--strata COL[,COL]``): microaggregation runs separately inside each stratum.

Each stratum (a distinct combination of the strata columns' values) gets its own split tree
(:class:`pipeline.blocking.Forest`), so no block, stitching window or group ever mixes two strata:
the strata are the first level of blocking. A stratum with fewer than k rows cannot form a group;
it is an error that names it, unless ``--small-strata merge`` merges it into the stratum whose
QI means are nearest to its own (standardized), which the report records.
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import InputError

SMALL_STRATA = ("error", "merge")


def check_strata(columns, small, dtypes, qi, identifiers):
    """Strata columns exist and are neither quasi-identifiers nor identifiers."""
    if small not in SMALL_STRATA:
        raise InputError(f"unknown --small-strata {small!r}; choose one of: {', '.join(SMALL_STRATA)}")
    for name in columns:
        if name not in dtypes.index:
            raise InputError(f"strata column {name!r} is not in the input; columns: {list(dtypes.index)}")
        if name in qi or name in identifiers:
            raise InputError(f"strata column {name!r} is also a quasi-identifier or an identifier")


def partition_counts(part, columns, qi):
    """Per-partition evidence: ``(rows per stratum, QI sums per stratum, rows with a missing stratum)``."""
    keys = part[list(columns)]
    missing = int(keys.isna().any(axis=1).sum())
    grouped = part.groupby(list(columns), observed=True, sort=True)
    return grouped.size(), grouped[list(qi)].sum(), missing


def _name(columns, key):
    """``region='north', year=2026``: a NumPy scalar shown as its value (NumPy 2's repr is ``np.int64(2026)``)."""
    values = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{c}={v.item() if isinstance(v, np.generic) else v!r}" for c, v in zip(columns, values))


@dataclass(frozen=True)
class Strata:
    """The strata of a job: ``keys`` (sorted distinct values), their row counts, the tree (stratum
    after merges) each one is solved in, and the merges made."""

    columns: tuple
    keys: pd.Index
    rows: np.ndarray
    tree_of: np.ndarray
    merged: tuple = ()

    @property
    def n_trees(self):
        return int(self.tree_of.max()) + 1 if len(self.tree_of) else 0

    def codes(self, part):
        """The tree of every row of ``part``."""
        if len(self.columns) == 1:
            index = self.keys.get_indexer(part[self.columns[0]])
        else:
            index = self.keys.get_indexer(pd.MultiIndex.from_frame(part[list(self.columns)]))
        if (index < 0).any():
            raise InputError(f"{int((index < 0).sum())} row(s) have a stratum the statistics pass did not see: "
                             "the input changed during the job; nothing written")
        return self.tree_of[index]

    def describe(self):
        """Report entries: every stratum with its rows and tree, and the merges."""
        out = {"columns": list(self.columns), "count": len(self.keys), "solved_separately": self.n_trees,
               "smallest": int(self.rows.min()) if len(self.rows) else 0, "merged": []}
        for small, into, rows in self.merged:
            out["merged"].append({"stratum": small, "rows": rows, "into": into})
        return out


def plan_strata(columns, evidence, qi, mean, std, k, small="error"):
    """:class:`Strata` from the per-partition evidence of :func:`partition_counts`."""
    missing = sum(e[2] for e in evidence)
    if missing:
        raise InputError(f"strata column(s) {list(columns)}: {missing} row(s) have a missing value; "
                         "fill or drop them (a row must belong to one stratum)")
    counts = pd.concat([e[0] for e in evidence]).groupby(level=list(range(len(columns)))).sum().sort_index()
    sums = pd.concat([e[1] for e in evidence]).groupby(level=list(range(len(columns)))).sum().loc[counts.index]
    rows = counts.to_numpy(dtype=np.int64)
    keys = counts.index
    small_ones = np.flatnonzero(rows < k)
    tree_of = np.full(len(rows), -1, dtype=np.int64)
    big = np.flatnonzero(rows >= k)
    tree_of[big] = np.arange(len(big))
    merged = []
    if len(small_ones):
        names = [_name(columns, keys[i]) for i in small_ones]
        if small == "error":
            raise InputError(
                f"{len(small_ones)} stratum/strata with fewer than k={k} rows: "
                + "; ".join(f"{n} ({rows[i]} rows)" for n, i in zip(names[:5], small_ones[:5]))
                + ("; ..." if len(small_ones) > 5 else "")
                + ". Use --small-strata merge to merge each into the nearest stratum"
            )
        if not len(big):
            raise InputError(f"no stratum has k={k} rows or more: nothing to merge the small strata into")
        scale = np.where(std > 0, std, np.inf)
        centre = (sums.to_numpy(dtype=np.float64) / rows[:, None] - mean) / scale
        for i, name in zip(small_ones, names):
            distance = ((centre[big] - centre[i]) ** 2).sum(axis=1)
            into = big[int(np.argmin(distance))]  # ties: the first stratum in sort order
            tree_of[i] = tree_of[into]
            merged.append((name, _name(columns, keys[into]), int(rows[i])))
    return Strata(tuple(columns), keys, rows, tree_of, tuple(merged))
