"""The method catalogue: name -> partition function on standardized data, with its paper.

A method's ``partition(Z, k, **options)`` takes a C-contiguous float64 ``(n, d)`` array of z-scores
(``n >= k``) and returns int64 labels ``0..g-1`` with every group of at least k rows. Its keyword
options (``grow``, ``gamma``, ``eps``, ``seed``...) are declared in ``Method.options`` with their
defaults; :func:`run_method` rejects an option the method does not take. The in-memory API and the
Dask pipeline both look methods up here, so one kernel serves both drivers.
"""

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .. import kernels
from .blocking import principal_direction
from .errors import InputError


@dataclass(frozen=True)
class Method:
    """A microaggregation method.

    name : as the literature writes it, lower case
    summary : one line for ``microagg methods``
    reference : the paper (and section) it implements
    partition : ``partition(Z, k, **options) -> labels``
    options : the keyword options it accepts, with their defaults
    bounded : every group has at most 2k-1 rows (the method promises it)
    """

    name: str
    summary: str
    reference: str
    partition: Callable[..., np.ndarray]
    options: dict = field(default_factory=dict)
    bounded: bool = True


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


def run_method(method, Z, k, options=None):
    """Labels of ``method`` (a :class:`Method`) on ``Z``; ``options`` may only name options it takes."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(method.options))
    if unknown:
        accepted = ", ".join(method.options) or "none"
        raise InputError(f"method {method.name!r} does not take option(s) {unknown}; it accepts: {accepted}")
    return np.ascontiguousarray(method.partition(Z, k, **options), dtype=np.int64)


def get_method(name):
    try:
        return METHODS[name]
    except KeyError:
        raise InputError(f"unknown method {name!r}; available: {', '.join(METHODS)} (see `microagg methods`)") from None


@dataclass(frozen=True)
class Refiner:
    """A refinement applied to any method's partition.

    refine : ``refine(Z, labels, k, **options) -> labels``; never raises the SSE, keeps groups >= k
    options : the keyword options it accepts, with their defaults
    """

    name: str
    summary: str
    reference: str
    refine: Callable[..., np.ndarray]
    options: dict = field(default_factory=dict)


REFINERS = {
    r.name: r
    for r in (
        Refiner("none", "the method's partition as it is", "", lambda Z, labels, k: labels),
    )
}


def run_refiner(refiner, Z, labels, k, options=None):
    """Labels after ``refiner`` (a :class:`Refiner`); ``options`` may only name options it takes."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(refiner.options))
    if unknown:
        accepted = ", ".join(refiner.options) or "none"
        raise InputError(f"refinement {refiner.name!r} does not take option(s) {unknown}; it accepts: {accepted}")
    return np.ascontiguousarray(refiner.refine(Z, np.ascontiguousarray(labels, dtype=np.int64), k, **options),
                                dtype=np.int64)


def get_refiner(name):
    try:
        return REFINERS[name]
    except KeyError:
        raise InputError(f"unknown refinement {name!r}; available: {', '.join(REFINERS)}") from None
