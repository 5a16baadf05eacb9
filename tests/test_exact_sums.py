"""The exact column statistics against a pure-Python fraction reference.

``kernels.exact_column_sums`` (through ``pipeline.stats.chunk``) must return the exact sums of x and
x^2 of each column's usable values, whatever their magnitudes; ``finalize`` must round them once, to
the correctly rounded mean and population std; and any split of the rows into parts must give the
same bits. The reference below uses only ``fractions`` and ``struct``, nothing of the code under test.
"""

import math
import struct
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from microagg import kernels
from microagg.kernels.stats import HUGE
from microagg.pipeline import stats

THOROUGH = settings(deadline=None, max_examples=400)

TINIEST = 5e-324  # the smallest subnormal
SMALLEST_NORMAL = 2.2250738585072014e-308
ALL_ONES = float(np.nextafter(2.0, 0.0))  # mantissa 2**53 - 1: the largest bucket additions
EDGES = [0.0, -0.0, TINIEST, -TINIEST, 3 * TINIEST, SMALLEST_NORMAL, -SMALLEST_NORMAL, 1e-300,
         -1e-300, 1e-150, 1.0, -1.0, ALL_ONES, -ALL_ONES, 1e16, -1e16, 1e100, HUGE, -HUGE,
         float(np.nextafter(HUGE, 0.0))]
UNUSABLE = [math.nan, -math.nan, math.inf, -math.inf, float(np.nextafter(HUGE, math.inf)), -1e151,
            1e300, 1.7976931348623157e308]


# --- the reference --------------------------------------------------------------------------------


def usable(v):
    return math.isfinite(v) and abs(v) <= HUGE


def reference_sums(col):
    """Exact ``(sum, sum of squares, nans, infs, huge)`` of one column."""
    values = [Fraction(float(v)) for v in col if usable(v)]
    return (
        sum(values, Fraction(0)),
        sum((v * v for v in values), Fraction(0)),
        sum(math.isnan(v) for v in col),
        sum(math.isinf(v) for v in col),
        sum(math.isfinite(v) and abs(v) > HUGE for v in col),
    )


def from_bits(b):
    return struct.unpack("<d", struct.pack("<q", b))[0]


def correctly_rounded_sqrt(v):
    """Round-to-nearest-even float64 square root of a fraction ``v >= 0``, by bisection over the
    bit patterns of the non-negative floats (consecutive patterns are consecutive floats)."""
    lo, hi = 0, 0x7FF0_0000_0000_0000  # 0.0 and inf: lo**2 <= v < hi**2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if Fraction(from_bits(mid)) ** 2 <= v:
            lo = mid
        else:
            hi = mid
    below, above = from_bits(lo), from_bits(lo + 1)
    midpoint_squared = ((Fraction(below) + Fraction(above)) / 2) ** 2
    if v != midpoint_squared:
        return below if v < midpoint_squared else above
    return below if lo % 2 == 0 else above  # a tie goes to the even mantissa


def reference_stats(X):
    """Correctly rounded mean and population std of each column (all values usable). Only a column
    without spread has std 0 (the pipeline treats it as constant), however tiny its variance."""
    n = X.shape[0]
    mean, std = [], []
    for col in X.T:
        s, q, *_ = reference_sums(col)
        m = s / n
        var = q / n - m * m
        mean.append(float(m))
        std.append(correctly_rounded_sqrt(var) if var > 0 else 0.0)
    return np.array(mean), np.array(std)


def assert_exact(X):
    """``chunk`` gives the reference's exact sums and counts for every column of ``X``."""
    got = stats.chunk(X)
    assert got.rows == X.shape[0]
    for j, col in enumerate(X.T):
        s, q, nans, infs, huge = reference_sums(col)
        assert got.sums[j] == s, f"column {j}: sum"
        assert got.squares[j] == q, f"column {j}: sum of squares"
        assert (got.nans[j], got.infs[j], got.huge[j]) == (nans, infs, huge), f"column {j}: counts"
        finite_or_not = [v for v in col if not math.isnan(v)]  # NaN skipped, infinities and huge values kept
        assert got.lo[j] == min(finite_or_not, default=math.inf), f"column {j}: smallest value"
        assert got.hi[j] == max(finite_or_not, default=-math.inf), f"column {j}: largest value"


def assert_same_bits(a, b):
    # compare bit patterns: distinguishes -0.0 from 0.0 and would catch any NaN
    np.testing.assert_array_equal(np.asarray(a).view(np.int64), np.asarray(b).view(np.int64))


def column(values):
    return np.array(values, dtype=np.float64).reshape(-1, 1)


# --- strategies -----------------------------------------------------------------------------------

# every binary exponent from subnormals up to HUGE, plus the edge values
wide = st.one_of(st.floats(-HUGE, HUGE, allow_subnormal=True), st.sampled_from(EDGES))
anything = st.one_of(wide, st.sampled_from(UNUSABLE), st.floats())


@st.composite
def matrix(draw, elements, max_rows=60, max_cols=4):
    n = draw(st.integers(1, max_rows))
    d = draw(st.integers(1, max_cols))
    return np.ascontiguousarray(draw(hnp.arrays(np.float64, (n, d), elements=elements)))


# --- exact sums -----------------------------------------------------------------------------------


def test_cancellation_is_exact():
    X = column([1e16, 1.0, -1e16])
    assert_exact(X)
    mean, std = stats.finalize(stats.chunk(X))
    assert mean[0] == float(Fraction(1, 3))  # naive left-to-right float sum gives 0
    assert std[0] == correctly_rounded_sqrt(Fraction(2 * 10**32 + 1, 3) - Fraction(1, 9))


def test_edge_values_are_exact():
    X = column(EDGES + EDGES[::-1] + [1e-300] * 7)
    assert_exact(X)
    assert_same_bits(stats.finalize(stats.chunk(X)), reference_stats(X))


def test_squares_of_tiny_values_do_not_underflow():
    # x * x is 0 in float64 for all of these; their exact squares still count
    X = column([TINIEST, -3 * TINIEST, 1e-300, SMALLEST_NORMAL, 1e-200])
    got = stats.chunk(X)
    assert got.squares[0] == sum(Fraction(v) ** 2 for v in X[:, 0])
    assert got.squares[0] > 0


def test_unusable_values_are_counted_not_summed():
    X = column([1.5, *UNUSABLE, -2.25, HUGE, math.nan])
    got = stats.chunk(X)
    assert (got.nans[0], got.infs[0], got.huge[0]) == (3, 2, 4)
    assert got.sums[0] == Fraction(1.5) - Fraction(2.25) + Fraction(HUGE)  # HUGE itself is summed
    assert got.squares[0] == Fraction(1.5) ** 2 + Fraction(2.25) ** 2 + Fraction(HUGE) ** 2


def test_nan_bit_patterns_all_count_as_nan():
    payloads = np.array([0x7FF0_0000_0000_0001, 0x7FF8_0000_0000_0000, 0x7FFF_FFFF_FFFF_FFFF,
                         -0x0008_0000_0000_0000, -1], dtype=np.int64)  # the last two have the sign set
    X = column(payloads.view(np.float64))
    assert np.isnan(X).all()
    got = stats.chunk(X)
    assert (got.nans[0], got.infs[0], got.huge[0], got.sums[0]) == (5, 0, 0, 0)


def test_many_rows_at_the_largest_additions():
    # the carries between blocks are what keeps these int64 buckets from overflowing
    n = 300_000
    X = np.empty((n, 4))
    X[:, 0] = ALL_ONES * 2.0**400         # mantissa 2**53 - 1, a large exponent
    X[:, 1] = -ALL_ONES * 2.0**-1000      # negative, tiny (mantissa and square halves all ones)
    X[:, 2] = np.where(np.arange(n) % 2 == 0, ALL_ONES, -ALL_ONES * 2.0**-52)  # mixed signs
    X[:, 3] = float(np.nextafter(HUGE, 0.0))
    got = stats.chunk(X)
    for j in range(4):
        values = [Fraction(v) for v in np.unique(X[:, j])]
        counts = [int((X[:, j] == float(v)).sum()) for v in values]
        assert got.sums[j] == sum(c * v for c, v in zip(counts, values))
        assert got.squares[j] == sum(c * v * v for c, v in zip(counts, values))


def test_empty_and_all_unusable_columns_sum_to_zero():
    assert stats.chunk(np.empty((0, 3))).sums == [0, 0, 0]
    got = stats.chunk(np.full((5, 2), math.nan))
    assert got.sums == [0, 0] and got.squares == [0, 0] and list(got.nans) == [5, 5]


def test_layout_does_not_matter():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 6)) * 10.0 ** rng.integers(-300, 150, size=(1000, 6))
    whole = stats.chunk(X)
    for view in (np.asfortranarray(X), X[:, ::2], X[::3]):
        got = stats.chunk(view)
        expected = stats.chunk(np.ascontiguousarray(view))
        assert (got.sums, got.squares) == (expected.sums, expected.squares)
    assert stats.chunk(np.asfortranarray(X)).sums == whole.sums
    column_major = stats.chunk(np.asfortranarray(X))
    for field in ("nans", "infs", "huge", "lo", "hi"):
        np.testing.assert_array_equal(getattr(column_major, field), getattr(whole, field))


def test_the_statistics_pass_sums_a_partitions_block_where_it_lies(monkeypatch):
    """A pandas partition holds its QIs as one column-major block: the exact sums run on it, not on a
    row-major copy (104 MB of fresh memory per million rows at 13 QIs)."""
    import pandas as pd

    from microagg.pipeline import release

    rng = np.random.default_rng(1)
    part = pd.DataFrame(rng.normal(size=(500, 4)), columns=["a", "b", "c", "d"]).assign(id=np.arange(500))
    summed = []
    chunk = stats.chunk
    monkeypatch.setattr(release.stats, "chunk", lambda X: summed.append(X) or chunk(X))
    got = release._partition_sums(part, ["a", "b", "c", "d"])
    (X,) = summed
    assert np.shares_memory(X, part["a"].to_numpy())
    expected = stats.chunk(np.ascontiguousarray(part[["a", "b", "c", "d"]].to_numpy()))
    assert (got[0].sums, got[0].squares) == (expected.sums, expected.squares)


@THOROUGH
@given(X=matrix(anything))
def test_sums_and_counts_are_exact(X):
    assert_exact(X)


# --- rounding -------------------------------------------------------------------------------------


def test_std_is_rounded_once():
    # variance 226/25: math.sqrt(9.04) == 3.0066592756745814, one ulp below the exact root's rounding
    X = column([0, 0, 0, 5, 7])
    mean, std = stats.finalize(stats.chunk(X))
    assert mean[0] == 2.4
    assert std[0] == correctly_rounded_sqrt(Fraction(226, 25)) == 3.006659275674582


def test_variance_below_float64_range_gives_its_exact_std():
    """The variance (about 1.2e-626) is far below the smallest subnormal; its root is not: the
    column is not constant, and its z-scores are -1 and 1."""
    X = column([2.2250738585e-313, 0.0])
    mean, std = stats.finalize(stats.chunk(X))
    assert mean[0] == float(Fraction(2.2250738585e-313) / 2)
    assert std[0] == correctly_rounded_sqrt(Fraction(2.2250738585e-313) ** 2 / 4) > 0.0
    np.testing.assert_array_equal(kernels.standardize(X, mean, std)[:, 0], [1.0, -1.0])


@THOROUGH
@given(X=matrix(wide))
def test_mean_and_std_are_correctly_rounded(X):
    assert_same_bits(stats.finalize(stats.chunk(X)), reference_stats(X))


# --- independence of the split --------------------------------------------------------------------


@THOROUGH
@given(data=st.data())
def test_any_split_gives_the_same_bits(data):
    X = data.draw(matrix(wide, max_rows=80))
    n = X.shape[0]
    expected = reference_stats(X)
    for _ in range(3):
        cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=8)))  # empty parts allowed
        bounds = [0, *cuts, n]
        parts = [stats.chunk(X[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        order = data.draw(st.permutations(range(len(parts))))
        assert_same_bits(stats.finalize(stats.combine([parts[i] for i in order])), expected)


@settings(deadline=None, max_examples=40)  # the fraction reference dominates the time
@given(seed=st.integers(0, 2**32 - 1), parts=st.integers(2, 40))
def test_large_random_splits_give_the_same_bits(seed, parts):
    rng = np.random.default_rng(seed)
    n = 3000
    scale = 10.0 ** rng.integers(-250, 140, size=4)
    X = rng.normal(size=(n, 4)) * scale + rng.normal(size=4) * scale * 100
    whole = stats.finalize(stats.chunk(X))
    cuts = np.sort(rng.integers(0, n, size=parts - 1))
    split = stats.finalize(stats.combine(stats.chunk(p) for p in np.split(X, cuts)))
    assert_same_bits(split, whole)
    assert_same_bits(whole, reference_stats(X))


@pytest.mark.parametrize("n", [510, 511, 512, 1022, 1023, 5000])
def test_block_boundaries(n):
    # row counts around the kernel's carry interval, with values that fill the buckets
    rng = np.random.default_rng(n)
    X = np.where(rng.random((n, 3)) < 0.5, ALL_ONES, -ALL_ONES) * 2.0 ** rng.integers(-3, 3, (n, 3))
    assert_exact(X)
    halves = stats.combine([stats.chunk(X[: n // 3]), stats.chunk(X[n // 3:])])
    assert_same_bits(stats.finalize(halves), reference_stats(X))
    np.testing.assert_array_equal(halves.lo, X.min(axis=0))
    np.testing.assert_array_equal(halves.hi, X.max(axis=0))
