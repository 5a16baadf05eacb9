"""The method catalogue: name -> partition function on standardized data, with its paper.

A method's ``partition(Z, k, **options)`` takes a C-contiguous float64 ``(n, d)`` array of z-scores
(``n >= k``) and returns int64 labels ``0..g-1`` with every group of at least k rows. Its keyword
options (``grow``, ``gamma``, ``eps``, ``seed``...) are declared in ``Method.options`` with their
defaults; :func:`run_method` rejects an option the method does not take. The in-memory API and the
Dask pipeline both look methods up here, so one kernel serves both drivers.
"""

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .. import kernels
from ..kernels.ils import ils
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
from ..kernels.missing import mdav_missing
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


GROW = ("nn", "nc")


def _grow_nc(method, grow):
    """The ``grow`` option of the fixed-size methods: True for NC, False for NN (section 3.1 of
    shared/papers/iterative-group-decomposition-refinement.txt)."""
    if isinstance(grow, str) and grow in GROW:
        return grow == "nc"
    raise InputError(f"{method} option grow must be 'nn' (the record and its k-1 nearest neighbours) or 'nc' "
                     f"(repeatedly the record nearest to the group's centroid); got {grow!r}")


def _mdav(Z, k, grow="nn"):
    """MDAV; ``grow="nc"`` is MDAV-NC (same selection of r and s, NC growth). With missing values
    (NaN, ``--missing centroid``): MDAV over the observed coordinates (kernels/missing.py)."""
    nc = _grow_nc("mdav", grow)
    if np.isnan(Z).any():
        if nc:
            raise InputError("missing values are supported by mdav with grow=nn only")
        return mdav_missing(Z, k)
    return mdav_nc(Z, k) if nc else kernels.mdav(Z, k)


def _cbfs(Z, k, grow="nn"):
    """CBFS-NN (default) or CBFS-NC (``grow="nc"``, Laszlo & Mukherjee's original CBFS)."""
    return cbfs_kernel(Z, k, _grow_nc("cbfs", grow))


def _tfrp(Z, k, grow="nn"):
    """TFRP phase 1: TFRP-NN (default, the original TFRP-1) or TFRP-NC (``grow="nc"``)."""
    return tfrp_kernel(Z, k, _grow_nc("tfrp", grow))


def _univariate(Z, k, grouping="optimal"):
    from .sequence import univariate

    return univariate(Z, k, grouping)


def _mic1d(Z, k, remainder="separate"):
    raise InputError("mic1d releases protected values, not groups of records: use microagg.anonymize (or the "
                     "CLI) with method='mic1d', or microagg.pipeline.mic1d.protect")


def _projected(name):
    """The catalogue's entry for a projection method on the rows it is given (pipeline/sequence.py)."""
    def partition(Z, k):
        from .sequence import direction, partition_sequence

        return partition_sequence(Z, k, name, "optimal", None, direction(name, Z))

    return partition


def _dbm(Z, k, eps=None):
    """DBM; ``eps`` is DBSCAN's Eps in z-score units (Euclidean), None for the kernel's default."""
    if eps is None:
        return dbm_kernel(Z, k, -1.0)
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)) or not np.isfinite(eps) \
            or eps <= 0:
        raise InputError(f"dbm option eps must be a positive finite number (a distance in z-score units) or "
                         f"None for the data-driven default, got {eps!r}")
    return dbm_kernel(Z, k, float(eps) * float(eps))


MHM_ORDERS = ("mdav", "npn", "md", "cbfs")


def _mhm(Z, k, mhm_order="mdav"):
    """MHM: a record ordering, then the optimal contiguous k..2k-1 partition along it."""
    if mhm_order not in MHM_ORDERS:
        raise InputError(f"mhm option mhm_order must be one of {', '.join(MHM_ORDERS)}; got {mhm_order!r}")
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


def _real_option(method, name, value, low, high=np.inf):
    """``value`` as a float in [low, high], else an InputError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value) or value > high or value < low:
        raise InputError(f"{method} option {name} must be a finite number in [{low}, {high}], got {value!r}")
    return float(value)


def _int_option(method, name, value, low):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise InputError(f"{method} option {name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _vmdav(Z, k, gamma=0.2):
    """V-MDAV; ``gamma`` is the gain factor (0.2 for scattered data, 1.1 for clustered data)."""
    return vmdav_kernel(Z, k, _real_option("vmdav", "gamma", gamma, 0.0))


def _ga(Z, k, seed=0, macro=7, population=50, generations=300, crossover=0.5, mutation=0.02):
    """MDAV/GA hybrid; see kernels/ga.py for the options."""
    return ga_kernel(
        Z, k,
        seed=_int_option("ga", "seed", seed, 0),
        macro=_int_option("ga", "macro", macro, 1),
        population=_int_option("ga", "population", population, 1),
        generations=_int_option("ga", "generations", generations, 0),
        crossover=_real_option("ga", "crossover", crossover, 0.0, 1.0),
        mutation=_real_option("ga", "mutation", mutation, 0.0, 1.0),
    )


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
            {"grow": "nn"},
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
            {"grouping": "optimal"},
        ),
        Method(
            "mic1d",
            "Mic1D-k: all QI values in one vector, sorted, in runs of k values normalized twice; each value "
            "released as its run's mean mapped back (value-level anonymity; records get the real anonymity k')",
            "Nin, Beyond multivariate microaggregation for large record anonymization; "
            "shared/papers/mic1d-one-dimension-microaggregation.txt section 3; see pipeline/mic1d.py",
            _mic1d,
            {"remainder": "separate"},
            bounded=False,
        ),
        Method(
            "dbm",
            "Density-based: DBSCAN(eps, MinPts=k) clusters, noise to the cluster its k nearest neighbours vote "
            "for, clusters of >= 2k split by MDAV",
            "Das & Borah, shared/papers/dbm-density-based-microaggregation.txt section 3 (Algorithm DBM); "
            "default eps: Ester et al. (1996) section 4.2, see kernels/dbm.py",
            _dbm,
            {"eps": None},
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
            {"mhm_order": "mdav"},
        ),
        Method(
            "vmdav",
            "Variable-size MDAV: groups of k around the records farthest from the (fixed) centroid, each extended "
            "towards 2k-1 while the next record is gamma-times closer to the group than to the rest",
            "Solanas & Martinez-Balleste (2006); shared/papers/comparative-study-microaggregation.txt section 3.6, "
            "Tables 6-7 (V-MDAV); see kernels/vmdav.py",
            _vmdav,
            {"gamma": 0.2},
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
            _ga,
            {"seed": 0, "macro": 7, "population": 50, "generations": 300, "crossover": 0.5, "mutation": 0.02},
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
            {"grow": "nn"},
        ),
        Method(
            "tfrp",
            "Two Fixed Reference Points, phase 1: groups of k grown (grow nn|nc) from the record farthest from the "
            "per-attribute maximum, then minimum, corner in turn; the < k left over join their nearest groups",
            "Chang, Li & Huang (2007); shared/papers/iterative-group-decomposition-refinement.txt section 3.1, "
            "Tables 1-4 (TFRP-NN, TFRP-NC); shared/papers/comparative-study-microaggregation.txt section 3.5; "
            "phase 2 is the tfrp2 refinement; see kernels/fixed_size.py",
            _tfrp,
            {"grow": "nn"},
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
        kernels.refine(Z, labels, k, 2 * k - 1, 8, 1000)
        sse[i] = kernels.sse(Z, labels, int(labels.max()) + 1)
        if best is None or sse[i] < sse[:i].min(initial=np.inf):
            best = labels
    return best, sse


def _auto(Z, k, portfolio="race"):
    """Every method of ``AUTO_PORTFOLIO``, each followed by local search to a local optimum; the
    partition with the lowest SSE. ``portfolio`` applies to the blocks of a blocked solve
    (:class:`Race`); one block alone always tries every member."""
    if portfolio not in PORTFOLIOS:
        raise InputError(f"auto option portfolio must be one of {', '.join(PORTFOLIOS)}; got {portfolio!r}")
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
    {"portfolio": "race"},
    bounded=False,  # vmdav's groups may exceed 2k-1
)


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


DECOMPOSITION_CRITERIA = ("frozen", "exact")


def _exact_criterion(refinement, criterion):
    """The ``criterion`` option of tfrp2 / decompose-shrink: False for "frozen" (TFRP-2's evaluation
    with the centroids of the start of the pass, which reproduces the published tables), True for
    "exact" (current centroids, exact SSE change); see kernels/decomposition.py."""
    if isinstance(criterion, str) and criterion in DECOMPOSITION_CRITERIA:
        return criterion == "exact"
    raise InputError(f"{refinement} option criterion must be one of {', '.join(DECOMPOSITION_CRITERIA)}; "
                     f"got {criterion!r}")


def _tfrp2(Z, labels, k, criterion="frozen"):
    return tfrp2_kernel(Z, labels, k, _exact_criterion("tfrp2", criterion))


def _decompose_shrink(Z, labels, k, criterion="frozen"):
    return decompose_shrink_kernel(Z, labels, k, _exact_criterion("decompose-shrink", criterion))


def _local(Z, labels, k, sweeps):
    labels = labels.copy()
    kernels.refine(Z, labels, k, 2 * k - 1, 8, sweeps)
    return labels


ILS_ROUND = 25  # iterations between two looks at the clock


def iterated_local_search(Z, labels, k, iterations=200, time_budget=None, seed=0):
    """The ILS kernel run in rounds of ``ILS_ROUND`` iterations until ``iterations`` are done or
    ``time_budget`` seconds have passed. Round ``r`` is seeded from ``(seed, r)``, so the result
    depends only on the seed and the iterations completed, which are returned:
    ``(labels, iterations_done)``. Without a time budget the result is reproducible bit for bit.
    """
    if time_budget is not None and not time_budget > 0:
        raise InputError(f"the time budget must be a positive number of seconds, got {time_budget!r}")
    if iterations is None and time_budget is None:
        raise InputError("ils needs an iteration count or a time budget")
    start = time.perf_counter()
    best = np.ascontiguousarray(labels, dtype=np.int64)
    done = 0
    rounds = 0
    while iterations is None or done < iterations:
        batch = ILS_ROUND if iterations is None else min(ILS_ROUND, iterations - done)
        round_seed = int(kernels.splitmix64(np.uint64(seed) ^ kernels.splitmix64(np.uint64(rounds))) >> np.uint64(33))
        best, _ = ils(Z, best, k, batch, round_seed)
        done += batch
        rounds += 1
        if time_budget is not None and time.perf_counter() - start >= time_budget:
            break
    return best, done


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
        Refiner(
            "local",
            "local search to a local optimum: record moves, swaps and group dissolution between neighbouring groups",
            "shared/papers/iterative-group-decomposition-refinement.txt section 3 (moves of Decompose/Shrink)",
            lambda Z, labels, k, sweeps=1000: _local(Z, labels, k, sweeps),
            {"sweeps": 1000},
        ),
        Refiner(
            "ils",
            "iterated local search: descent, perturbation of a random region, descent again; anytime, seeded",
            "Lourenco, Martin & Stuetzle (2003) Iterated local search; kernels/ils.py",
            lambda Z, labels, k, iterations=200, time_budget=None, seed=0: iterated_local_search(
                Z, labels, k, iterations, time_budget, seed)[0],
            {"iterations": 200, "time_budget": None, "seed": 0},
        ),
        Refiner(
            "tfrp2",
            "TFRP-2: each group, in decreasing SSE order, dissolved once into the groups nearest to its records if "
            "the SSE drops; groups of >= 2k split (CBFS-NC inside the group)",
            "Chang, Li & Huang (2007); shared/papers/iterative-group-decomposition-refinement.txt section 4 "
            "(Figures 2-3) and section 5.2 (TFRP2), Tables 2-4; see kernels/decomposition.py",
            _tfrp2,
            {"criterion": "frozen"},
        ),
        Refiner(
            "decompose-shrink",
            "Decompose (as tfrp2) and Shrink (the best single-record moves out of groups of > k) repeated until "
            "neither lowers the SSE; groups of >= 2k split",
            "Khomnotai, Lin, Peng & Santra (2018); shared/papers/iterative-group-decomposition-refinement.txt "
            "section 4 (Figures 1-4), Tables 2-4; see kernels/decomposition.py",
            _decompose_shrink,
            {"criterion": "frozen"},
        ),
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
