"""The method catalogue: name -> partition function on standardized data, with its paper.

A method's ``partition(Z, k, **options)`` takes a C-contiguous float64 ``(n, d)`` array of z-scores
(``n >= k``) and returns int64 labels ``0..g-1`` with every group of at least k rows. Its keyword
options (``grow``, ``gamma``, ``eps``, ``seed``...) are declared in its catalogue entry, each as an
:class:`Option`: its default and the check of its value. The entry runs those checks on every call,
before the method's code, and :func:`pipeline.validation.check_method_options` runs the same checks
before any data is read, so the bounds are written once and a value is refused with one message on
both paths. The in-memory API and the Dask pipeline both look methods up here, so one kernel serves
both drivers. Refinements (:class:`Refiner`, ``REFINERS``) declare their options the same way.
"""

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .. import kernels
from ..kernels.ils import NEIGHBORS as ILS_NEIGHBORS, REGION as ILS_REGION, ils
from ..kernels.dbm import dbm as dbm_kernel
from ..kernels.orders import group_order, npn_order
from ..kernels.dba import dba as dba_kernel
from ..kernels.ga import ga as ga_kernel
from ..kernels.kward import kward as kward_kernel
from ..kernels.vmdav import vmdav as vmdav_kernel
from ..kernels.decomposition import decompose_shrink as decompose_shrink_kernel
from ..kernels.decomposition import tfrp2 as tfrp2_kernel
from ..kernels.fixed_size import cbfs as cbfs_kernel
from ..kernels.fixed_size import gsms as gsms_kernel
from ..kernels.fixed_size import md as md_kernel
from ..kernels.fixed_size import tfrp as tfrp_kernel
from ..kernels.mdav import mdav_nc
from ..kernels.refine import TOL
from ..kernels.missing import mdav_missing
from .errors import InputError
from .mic1d import REMAINDERS
from .sequence import GROUPINGS, direction, partition_sequence
from .validation import check_seed


# --- option checks ----------------------------------------------------------------------------------
# Each is called as ``check(owner, name, value, options)``: ``owner`` is the method's (or refinement's)
# name and ``name`` the option's, both for the message; ``options`` holds every option of the call,
# defaults filled in. It returns the value as the method uses it, or raises an InputError.


@dataclass(frozen=True)
class Option:
    """A keyword option of a method or refinement: its ``default``, and the ``check`` its value must
    pass (one of the check classes below), which also converts it (``float(gamma)``)."""

    default: object
    check: Callable[[str, str, object, dict], object]


def _is_number(value):
    return not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))


@dataclass(frozen=True)
class Choice:
    """One of the strings ``values``, returned as it is. ``message`` formats the refusal from
    ``owner``, ``name``, ``values`` (comma-separated) and ``value``."""

    values: tuple
    message: str = "{owner} option {name} must be one of {values}; got {value!r}"

    def __call__(self, owner, name, value, options):
        if isinstance(value, str) and value in self.values:
            return value
        raise InputError(self.message.format(owner=owner, name=name, values=", ".join(self.values), value=value))


@dataclass(frozen=True)
class Real:
    """A finite number in ``[low, high]``, as a float."""

    low: float
    high: float = np.inf

    def __call__(self, owner, name, value, options):
        if not _is_number(value) or not np.isfinite(value) or value > self.high or value < self.low:
            raise InputError(f"{owner} option {name} must be a finite number in [{self.low}, {self.high}], "
                             f"got {value!r}")
        return float(value)


@dataclass(frozen=True)
class Positive:
    """A finite number > 0, as a float, or None: the option left to the method (dbm's ``eps`` taken
    from the data, no ``time_budget`` for ils)."""

    def __call__(self, owner, name, value, options):
        if value is None:
            return None
        if not _is_number(value) or not math.isfinite(value) or value <= 0:
            raise InputError(f"{owner} option {name} must be a finite number > 0, got {value!r}")
        return float(value)


@dataclass(frozen=True)
class Integer:
    """An integer >= ``low``, as an int. With ``optional_with``, None too when the option it names is
    set (ils runs for its ``time_budget`` alone when ``iterations`` is None)."""

    low: int
    optional_with: str | None = None

    def __call__(self, owner, name, value, options):
        if value is None and self.optional_with is not None and options.get(self.optional_with) is not None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < self.low:
            raise InputError(f"{owner} option {name} must be an integer >= {self.low}, got {value!r}")
        return int(value)


@dataclass(frozen=True)
class Seed:
    """A seed the kernels can mix (:func:`pipeline.validation.check_seed`), as an int."""

    def __call__(self, owner, name, value, options):
        return check_seed(value, f"{owner} option {name}")


class _Catalogued:
    """What a :class:`Method` and a :class:`Refiner` share: ``declared`` options (name ->
    :class:`Option`), and the checks of the options a call gives. ``noun`` ("method", "refinement")
    names the kind of entry in messages."""

    @property
    def options(self):
        """The keyword options it accepts, with their defaults."""
        return {name: option.default for name, option in self.declared.items()}

    def check_names(self, options):
        """An InputError if ``options`` (a mapping or ``(name, value)`` pairs) names an option it
        does not take."""
        unknown = sorted(set(dict(options or ())) - set(self.declared))
        if unknown:
            raise InputError(f"{self.noun} {self.name!r} does not take option(s) {unknown}; it accepts: "
                             f"{', '.join(self.declared) or 'none'}")

    def option_value(self, name, options):
        """The option ``name`` as ``options`` give it (else its default), checked and converted by
        its declared check. The other options are only read (for a check that depends on one)."""
        options = {**self.options, **dict(options or ())}
        return self.declared[name].check(self.name, name, options[name], options)

    def checked(self, options):
        """Every declared option, as ``options`` give it or its default, checked and converted (in
        name order, as :func:`pipeline.validation.check_method_options` reports them)."""
        self.check_names(options)
        return {name: self.option_value(name, options) for name in sorted(self.declared)}


@dataclass(frozen=True)
class Method(_Catalogued):
    """A microaggregation method.

    name : as the literature writes it, lower case
    summary : one line for ``microagg methods``
    reference : the paper (and section) it implements
    solve : ``solve(Z, k, **options) -> labels``, given every option, checked (it trusts them)
    declared : its keyword options, name -> :class:`Option` (default and check)
    bounded : every group has at most 2k-1 rows (the method promises it)
    """

    name: str
    summary: str
    reference: str
    solve: Callable[..., np.ndarray]
    declared: dict = field(default_factory=dict)
    bounded: bool = True

    noun = "method"

    def partition(self, Z, k, **options):
        """Labels of the method on ``Z``: ``options`` checked as declared (:meth:`checked`), then
        :attr:`solve`."""
        return self.solve(Z, k, **self.checked(options))


GROW = ("nn", "nc")
# the growth option of mdav, cbfs and tfrp: NN or NC (section 3.1 of
# shared/papers/iterative-group-decomposition-refinement.txt)
GROW_OPTION = Option("nn", Choice(GROW, "{owner} option {name} must be 'nn' (the record and its k-1 nearest "
                                        "neighbours) or 'nc' (repeatedly the record nearest to the group's "
                                        "centroid); got {value!r}"))


def _mdav(Z, k, grow):
    """MDAV; ``grow="nc"`` is MDAV-NC (same selection of r and s, NC growth). With missing values
    (NaN, ``--missing centroid``): MDAV over the observed coordinates (kernels/missing.py)."""
    nc = grow == "nc"
    if np.isnan(Z).any():
        if nc:
            raise InputError("missing values are supported by mdav with grow=nn only")
        return mdav_missing(Z, k)
    return mdav_nc(Z, k) if nc else kernels.mdav(Z, k)


def _cbfs(Z, k, grow):
    """CBFS-NN (default) or CBFS-NC (``grow="nc"``, Laszlo & Mukherjee's original CBFS)."""
    return cbfs_kernel(Z, k, grow == "nc")


def _tfrp(Z, k, grow):
    """TFRP phase 1: TFRP-NN (default, the original TFRP-1) or TFRP-NC (``grow="nc"``)."""
    return tfrp_kernel(Z, k, grow == "nc")


def _univariate(Z, k, grouping):
    """Individual ranking of the one column of ``Z`` (microagg.anonymize applies it to each QI)."""
    return partition_sequence(Z, k, "univariate", grouping)


def _mic1d(Z, k, remainder):
    raise InputError("mic1d releases protected values, not groups of records: use microagg.anonymize (or the "
                     "CLI) with method='mic1d', or microagg.pipeline.mic1d.protect")


def _projected(name):
    """The catalogue's entry for a projection method on the rows it is given (pipeline/sequence.py)."""
    def partition(Z, k):
        return partition_sequence(Z, k, name, "optimal", None, direction(name, Z))

    return partition


def _dbm(Z, k, eps):
    """DBM; ``eps`` is DBSCAN's Eps in z-score units (Euclidean), None for the kernel's data-driven
    default."""
    return dbm_kernel(Z, k, -1.0 if eps is None else eps * eps)


MHM_ORDERS = ("mdav", "npn", "md", "cbfs")


def _mhm(Z, k, mhm_order):
    """MHM: a record ordering, then the optimal contiguous k..2k-1 partition along it."""
    if mhm_order == "npn":
        order = npn_order(Z)
    else:
        if mhm_order == "mdav":
            source = kernels.mdav(Z, k)
        elif mhm_order in METHODS:  # resolved at call time: "md" and "cbfs" are separate catalogue entries
            source = np.ascontiguousarray(METHODS[mhm_order].partition(Z, k), dtype=np.int64)
        else:
            raise InputError(f"mhm_order={mhm_order!r} needs the {mhm_order!r} method, which is not in this "
                             f"build's catalogue (available orders: "
                             f"{', '.join(o for o in MHM_ORDERS if o in ('mdav', 'npn') or o in METHODS)})")
        order = group_order(Z, source)
    labels, _ = kernels.optimal_contiguous(Z, order, k)
    return labels


_MIC1D = "Nin (Mic1D paper), Algorithm 1: shared/papers/mic1d-one-dimension-microaggregation.txt"

METHODS = {
    m.name: m
    for m in (
        Method(
            "mdav",
            "Maximum Distance to Average Vector: fixed-size groups of k around the records farthest from the centroid",
            "Domingo-Ferrer & Torra (2005); shared/papers/dbm-density-based-microaggregation.txt section 2.4; "
            "grow=nc (MDAV-NC): shared/papers/iterative-group-decomposition-refinement.txt section 3.1, Tables 1-4",
            _mdav,
            {"grow": GROW_OPTION},
        ),
        Method(
            "pcp",
            "Principal-component projection, then the optimal contiguous k..2k-1 partition (multivariate SSE edge costs)",
            _MIC1D,
            _projected("pcp"),
        ),
        Method(
            "zscore",
            "Sum-of-z-scores projection, then the optimal contiguous k..2k-1 partition (multivariate SSE edge costs)",
            _MIC1D,
            _projected("zscore"),
        ),
        Method(
            "univariate",
            "Individual ranking: every quasi-identifier on its own, sorted, in runs of k (grouping=fixed) or "
            "in the optimal k..2k-1 groups (grouping=optimal, Hansen-Mukherjee)",
            "Hansen & Mukherjee (2003); shared/papers/optimal-univariate-noise-microaggregation.txt sections II-III; "
            "see pipeline/sequence.py",
            _univariate,
            {"grouping": Option("optimal", Choice(GROUPINGS, "{owner} {name} must be one of {values}; "
                                                             "got {value!r}"))},
        ),
        Method(
            "mic1d",
            "Mic1D-k: all QI values in one vector, sorted, in runs of k values normalized twice; each value "
            "released as its run's mean mapped back (value-level anonymity; records get the real anonymity k')",
            "Nin, Beyond multivariate microaggregation for large record anonymization; "
            "shared/papers/mic1d-one-dimension-microaggregation.txt section 3; see pipeline/mic1d.py",
            _mic1d,
            {"remainder": Option("separate", Choice(REMAINDERS, "{owner} {name} must be one of {values}; "
                                                                "got {value!r}"))},
            bounded=False,
        ),
        Method(
            "dbm",
            "Density-based: DBSCAN(eps, MinPts=k) clusters, noise to the cluster its k nearest neighbours vote "
            "for, clusters of >= 2k split by MDAV",
            "Das & Borah, shared/papers/dbm-density-based-microaggregation.txt section 3 (Algorithm DBM); "
            "default eps: Ester et al. (1996) section 4.2, see kernels/dbm.py",
            _dbm,
            {"eps": Option(None, Positive())},  # None: the data-driven default
            bounded=True,  # clusters of k..2k-1 kept, clusters of >= 2k split by MDAV (k..2k-1 each)
        ),
        Method(
            "mhm",
            "Multivariate Hansen-Mukherjee: a record ordering (mdav, npn, md or cbfs), then the optimal contiguous "
            "k..2k-1 partition",
            "Domingo-Ferrer, Martinez-Balleste, Mateo-Sanz & Sebe (2006); "
            "shared/papers/comparative-study-microaggregation.txt Table 4, "
            "shared/papers/iterative-group-decomposition-refinement.txt section 3.1; orderings: kernels/orders.py",
            _mhm,
            {"mhm_order": Option("mdav", Choice(MHM_ORDERS))},
        ),
        Method(
            "vmdav",
            "Variable-size MDAV: groups of k around the records farthest from the (fixed) centroid, each extended "
            "towards 2k-1 while the next record is gamma-times closer to the group than to the rest",
            "Solanas & Martinez-Balleste (2006); shared/papers/comparative-study-microaggregation.txt section 3.6, "
            "Tables 6-7 (V-MDAV); see kernels/vmdav.py",
            vmdav_kernel,
            {"gamma": Option(0.2, Real(0.0))},  # the gain factor: 0.2 for scattered data, 1.1 for clustered
            bounded=False,  # leftover records (< k) can push a group already at 2k-1 past it
        ),
        Method(
            "dba",
            "Density-based: groups of k around the densest records (DBA-1), then decomposition of groups into "
            "their neighbours in reverse order, groups of >= 2k split by MDAV (DBA-2)",
            "Lin, Wen, Hsieh & Chang (2010); shared/papers/comparative-study-microaggregation.txt section 3.3, "
            "Tables 6-7 (DBA-1, DBA-2); see kernels/dba.py",
            dba_kernel,
        ),
        Method(
            "kward",
            "k-Ward: Ward's hierarchical clustering from two extreme groups of k, never joining two groups of >= k, "
            "recursively on groups of >= 2k",
            "Domingo-Ferrer & Mateo-Sanz (2002); shared/papers/optimal-univariate-noise-microaggregation.txt "
            "section III, shared/papers/iterative-group-decomposition-refinement.txt section 3.1; "
            "see kernels/kward.py",
            kward_kernel,
        ),
        Method(
            "ga",
            "MDAV/genetic-algorithm hybrid: MDAV macro-groups of K = macro*k records, a GA (N-ary coding, SSE "
            "fitness) k-partitions each",
            "Solanas (2008); shared/papers/comparative-study-microaggregation.txt section 3.1; see kernels/ga.py",
            ga_kernel,
            {"seed": Option(0, Seed()), "macro": Option(7, Integer(1)), "population": Option(50, Integer(1)),
             "generations": Option(300, Integer(0)), "crossover": Option(0.5, Real(0.0, 1.0)),
             "mutation": Option(0.02, Real(0.0, 1.0))},
        ),
        Method(
            "md",
            "Maximum Distance: pairs of groups of k around the two remaining records farthest from each other "
            "(nearest-neighbour growth)",
            "Mateo-Sanz & Domingo-Ferrer (1999); shared/papers/comparative-study-microaggregation.txt Table 3, "
            "shared/papers/dbm-density-based-microaggregation.txt Table 1 (MD); see kernels/fixed_size.py",
            md_kernel,
        ),
        Method(
            "cbfs",
            "Centroid-Based Fixed-Size: groups of k grown (grow nn|nc) from the record farthest from the remaining "
            "records' centroid; the < k left over join their nearest groups",
            "Laszlo & Mukherjee (2005); shared/papers/iterative-group-decomposition-refinement.txt section 3.1, "
            "Tables 1-4 (CBFS-NN, CBFS-NC = the original CBFS); see kernels/fixed_size.py",
            _cbfs,
            {"grow": GROW_OPTION},
        ),
        Method(
            "tfrp",
            "Two Fixed Reference Points, phase 1: groups of k grown (grow nn|nc) from the record farthest from the "
            "per-attribute maximum, then minimum, corner in turn; the < k left over join their nearest groups",
            "Chang, Li & Huang (2007); shared/papers/iterative-group-decomposition-refinement.txt section 3.1, "
            "Tables 1-4 (TFRP-NN, TFRP-NC); shared/papers/comparative-study-microaggregation.txt section 3.5; "
            "phase 2 is the tfrp2 refinement; see kernels/fixed_size.py",
            _tfrp,
            {"grow": GROW_OPTION},
        ),
        Method(
            "gsms",
            "Successive group selection: of the candidate groups (each record with its k-1 nearest), take the one "
            "minimising SSE(group) + SSE(rest), repeatedly",
            "Panagiotakis & Tziritas (2013); shared/papers/iterative-group-decomposition-refinement.txt sections 3.1 "
            "and 5.2, Tables 2-4 (GSMS-NN); see kernels/fixed_size.py",
            gsms_kernel,
        ),
    )
}


# the constructive methods `auto` tries, in order (ties keep the earlier); ga is left out (seeded, slow)
AUTO_PORTFOLIO = (
    ("mdav", {}), ("mdav", {"grow": "nc"}), ("vmdav", {}), ("cbfs", {}), ("cbfs", {"grow": "nc"}), ("tfrp", {}),
    ("md", {}), ("mhm", {}), ("mhm", {"mhm_order": "npn"}), ("dba", {}), ("kward", {}), ("dbm", {}),
)
PORTFOLIOS = ("race", "full")
# `auto`'s race over the blocks of one task (:class:`Race`): the first AUTO_PROBES blocks, and every
# AUTO_REPROBE-th, try the whole portfolio; a member within AUTO_MARGIN of such a block's best SSE
# stays in the race, and the other blocks try only the members still in it. Chosen on the per-member
# SSE of every block of four inputs (BENCHMARKS.md, "auto's portfolio raced over a task's blocks").
AUTO_PROBES, AUTO_REPROBE, AUTO_MARGIN = 4, 16, 0.01


def auto_members(Z, k, tried):
    """``(labels, sse)``: the members of ``AUTO_PORTFOLIO`` flagged in ``tried``, each followed by
    local search to a local optimum; the labels with the lowest SSE (ties keep the earlier member),
    and each member's SSE (``inf`` where not tried)."""
    best, sse = None, np.full(len(AUTO_PORTFOLIO), np.inf)
    for i, (name, options) in enumerate(AUTO_PORTFOLIO):
        method = METHODS.get(name)
        if not tried[i] or method is None or not set(options) <= set(method.options):
            continue
        labels = run_method(method, Z, k, options)
        kernels.refine(Z, labels, k, 2 * k - 1, 8, 1000, TOL, False)  # every argument: see pipeline/stitch.py
        sse[i] = kernels.sse(Z, labels, int(labels.max()) + 1)
        if best is None or sse[i] < sse[:i].min(initial=np.inf):
            best = labels
    return best, sse


def _auto(Z, k, portfolio):
    """Every method of ``AUTO_PORTFOLIO``, each followed by local search to a local optimum; the
    partition with the lowest SSE. ``portfolio`` applies to the blocks of a blocked solve
    (:class:`Race`); one block alone always tries every member."""
    return auto_members(Z, k, np.ones(len(AUTO_PORTFOLIO), dtype=bool))[0]


class Race:
    """``auto`` on the blocks of one task, in the order they are solved: blocks ``0..AUTO_PROBES-1``
    and every ``AUTO_REPROBE``-th block try the whole portfolio, and each member whose SSE there is
    within ``AUTO_MARGIN`` of the block's best stays in the race from then on; the other blocks try
    only the members in it. Neighbouring blocks of one task hold similar data, and the same members
    win them: on the synthetic extract one member (dba) wins about four blocks in five, and the race
    runs about 40 % of the methods the whole portfolio runs, for 0.01 % more information loss.
    Deterministic: it depends only on the task's blocks and their order, never on the workers."""

    def __init__(self):
        self.blocks = 0
        self.kept = np.zeros(len(AUTO_PORTFOLIO), dtype=bool)
        self.picks = np.zeros((2, len(AUTO_PORTFOLIO)), dtype=np.int64)  # per member: blocks tried, won

    def partition(self, Z, k):
        probe = self.blocks < AUTO_PROBES or self.blocks % AUTO_REPROBE == 0
        self.blocks += 1
        tried = np.ones_like(self.kept) if probe else self.kept
        labels, sse = auto_members(Z, k, tried)
        if probe:
            self.kept |= sse <= sse.min() * (1 + AUTO_MARGIN)
        self.picks[0] += tried
        self.picks[1, int(np.argmin(sse))] += 1  # the first of equal SSEs, as auto_members keeps it
        return labels


def describe_picks(picks):
    """The report's ``auto_portfolio`` from the summed :attr:`Race.picks` of every task: per member
    (``mdav``, ``mdav grow=nc``...), the blocks that tried it and the blocks it won."""
    members = [" ".join([name, *(f"{key}={value}" for key, value in options.items())])
               for name, options in AUTO_PORTFOLIO]
    return {"portfolio": "race", "blocks": int(picks[1].sum()),
            "members": {m: {"tried": int(t), "won": int(w)} for m, t, w in zip(members, picks[0], picks[1])}}


METHODS["auto"] = Method(
    "auto",
    "portfolio: every constructive method (mdav nn/nc, vmdav, cbfs nn/nc, tfrp, md, mhm mdav/npn, dba, kward, dbm), "
    "each improved by local search; the lowest SSE; on an input cut into blocks, raced over each task's blocks "
    "(portfolio race, the default) or every member on every block (portfolio full)",
    "this project; the methods' own papers",
    _auto,
    {"portfolio": Option("race", Choice(PORTFOLIOS))},
    bounded=False,  # vmdav's groups may exceed 2k-1
)


def run_method(method, Z, k, options=None):
    """Labels of ``method`` (a :class:`Method`) on ``Z``, as int64; ``options`` may only name options
    it takes, and their values pass its declared checks."""
    return np.ascontiguousarray(method.partition(Z, k, **dict(options or {})), dtype=np.int64)


def get_method(name):
    try:
        return METHODS[name]
    except KeyError:
        raise InputError(f"unknown method {name!r}; available: {', '.join(METHODS)} (see `microagg methods`)") from None


# the criterion of tfrp2 / decompose-shrink: "frozen" is TFRP-2's evaluation with the centroids of the
# start of the pass (it reproduces the published tables), "exact" uses the current centroids and the
# exact SSE change; see kernels/decomposition.py
DECOMPOSITION_CRITERIA = ("frozen", "exact")
CRITERION_OPTION = Option("frozen", Choice(DECOMPOSITION_CRITERIA))


def _tfrp2(Z, labels, k, criterion):
    return tfrp2_kernel(Z, labels, k, criterion == "exact")


def _decompose_shrink(Z, labels, k, criterion):
    return decompose_shrink_kernel(Z, labels, k, criterion == "exact")


def _local(Z, labels, k, sweeps):
    labels = labels.copy()
    kernels.refine(Z, labels, k, 2 * k - 1, 8, sweeps, TOL, False)
    return labels


ILS_ROUND = 25  # iterations between two looks at the clock


def iterated_local_search(Z, labels, k, **options):
    """The ILS kernel run in rounds of ``ILS_ROUND`` iterations until ``iterations`` are done or
    ``time_budget`` seconds have passed. Round ``r`` is seeded from ``(seed, r)``, so the result
    depends only on the seed and the iterations completed, which are returned:
    ``(labels, iterations_done)``. Without a time budget the result is reproducible bit for bit.
    ``options``: those of the ``ils`` refinement (``iterations``, ``time_budget``, ``seed``), checked
    and defaulted as it declares them.
    """
    return _iterated_local_search(Z, labels, k, **REFINERS["ils"].checked(options))


def _iterated_local_search(Z, labels, k, iterations, time_budget, seed):
    start = time.perf_counter()
    best = np.ascontiguousarray(labels, dtype=np.int64)
    done = 0
    rounds = 0
    while iterations is None or done < iterations:
        batch = ILS_ROUND if iterations is None else min(ILS_ROUND, iterations - done)
        round_seed = int(kernels.splitmix64(np.uint64(seed) ^ kernels.splitmix64(np.uint64(rounds))) >> np.uint64(33))
        best, _ = ils(Z, best, k, batch, round_seed, ILS_REGION, ILS_NEIGHBORS)
        done += batch
        rounds += 1
        if time_budget is not None and time.perf_counter() - start >= time_budget:
            break
    return best, done


@dataclass(frozen=True)
class Refiner(_Catalogued):
    """A refinement applied to any method's partition.

    improve : ``improve(Z, labels, k, **options) -> labels``, given every option, checked (it trusts
        them); never raises the SSE, keeps groups >= k
    declared : its keyword options, name -> :class:`Option` (default and check)
    """

    name: str
    summary: str
    reference: str
    improve: Callable[..., np.ndarray]
    declared: dict = field(default_factory=dict)

    noun = "refinement"

    def refine(self, Z, labels, k, **options):
        """``labels`` refined: ``options`` checked as declared (:meth:`checked`), then :attr:`improve`."""
        return self.improve(Z, labels, k, **self.checked(options))


REFINERS = {
    r.name: r
    for r in (
        Refiner("none", "the method's partition as it is", "", lambda Z, labels, k: labels),
        Refiner(
            "local",
            "local search to a local optimum: record moves, swaps and group dissolution between neighbouring groups",
            "shared/papers/iterative-group-decomposition-refinement.txt section 3 (moves of Decompose/Shrink)",
            _local,
            {"sweeps": Option(1000, Integer(0))},
        ),
        Refiner(
            "ils",
            "iterated local search: descent, perturbation of a random region, descent again; anytime, seeded",
            "Lourenco, Martin & Stuetzle (2003) Iterated local search; kernels/ils.py",
            lambda Z, labels, k, **options: _iterated_local_search(Z, labels, k, **options)[0],
            {"iterations": Option(200, Integer(1, optional_with="time_budget")),
             "time_budget": Option(None, Positive()), "seed": Option(0, Seed())},
        ),
        Refiner(
            "tfrp2",
            "TFRP-2: each group, in decreasing SSE order, dissolved once into the groups nearest to its records if "
            "the SSE drops; groups of >= 2k split (CBFS-NC inside the group)",
            "Chang, Li & Huang (2007); shared/papers/iterative-group-decomposition-refinement.txt section 4 "
            "(Figures 2-3) and section 5.2 (TFRP2), Tables 2-4; see kernels/decomposition.py",
            _tfrp2,
            {"criterion": CRITERION_OPTION},
        ),
        Refiner(
            "decompose-shrink",
            "Decompose (as tfrp2) and Shrink (the best single-record moves out of groups of > k) repeated until "
            "neither lowers the SSE; groups of >= 2k split",
            "Khomnotai, Lin, Peng & Santra (2018); shared/papers/iterative-group-decomposition-refinement.txt "
            "section 4 (Figures 1-4), Tables 2-4; see kernels/decomposition.py",
            _decompose_shrink,
            {"criterion": CRITERION_OPTION},
        ),
    )
}


def run_refiner(refiner, Z, labels, k, options=None):
    """Labels after ``refiner`` (a :class:`Refiner`), as int64; ``options`` may only name options it
    takes, and their values pass its declared checks."""
    return np.ascontiguousarray(refiner.refine(Z, np.ascontiguousarray(labels, dtype=np.int64), k,
                                               **dict(options or {})), dtype=np.int64)


def get_refiner(name):
    try:
        return REFINERS[name]
    except KeyError:
        raise InputError(f"unknown refinement {name!r}; available: {', '.join(REFINERS)}") from None
