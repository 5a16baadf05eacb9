"""The method catalogue: name -> partition function on standardized data, with its paper.

A method's ``partition(Z, k)`` takes a C-contiguous float64 ``(n, d)`` array of z-scores (``n >= k``)
and returns int64 labels ``0..g-1`` with every group of at least k rows. The in-memory API and the
Dask pipeline both look methods up here, so one kernel serves both drivers.
"""

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import kernels
from .blocking import principal_direction
from .errors import InputError


@dataclass(frozen=True)
class Method:
    name: str
    summary: str
    reference: str
    partition: Callable[[np.ndarray, int], np.ndarray]


def _mdav(Z, k):
    return kernels.mdav(Z, k)


def _projected(scores_of):
    def partition(Z, k):
        order = np.argsort(scores_of(Z), kind="stable").astype(np.int64)
        labels, _ = kernels.optimal_contiguous(Z, order, k)
        return labels

    return partition


_MIC1D = "Mortazavi & Jalili / Soria-Comas et al.: shared/papers/mic1d-one-dimension-microaggregation.txt, Algorithm 1"

METHODS = {
    m.name: m
    for m in (
        Method(
            "mdav",
            "Maximum Distance to Average Vector: fixed-size groups of k around the records farthest from the centroid",
            "Domingo-Ferrer & Torra (2005); shared/papers/dbm-density-based-microaggregation.txt section 2.4",
            _mdav,
        ),
        Method(
            "pcp",
            "Principal-component projection, then the optimal contiguous k..2k-1 partition (multivariate SSE edge costs)",
            _MIC1D,
            _projected(lambda Z: kernels.project(Z, principal_direction(Z))),
        ),
        Method(
            "zscore",
            "Sum-of-z-scores projection, then the optimal contiguous k..2k-1 partition (multivariate SSE edge costs)",
            _MIC1D,
            _projected(lambda Z: Z.sum(axis=1)),
        ),
    )
}


def get_method(name):
    try:
        return METHODS[name]
    except KeyError:
        raise InputError(f"unknown method {name!r}; available: {', '.join(METHODS)} (see `microagg methods`)") from None
