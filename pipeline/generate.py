"""Synthetic census-like microdata: a streaming, seeded generator of tax-record columns.

One row is one adult person. A latent household type (drawn first) drives the person's age, number of
children, household size, filing status and the probabilities and scales of every income source;
a latent earning ability (one standard normal per person) is shared by the wage, self-employment,
capital and pension amounts so that the income columns are positively correlated, as in real tax data.

The model (amounts in whole currency units, 2023 US federal tax rules, simplified)
---------------------------------------------------------------------------------
``person_id``
    int64, the row's position in the whole dataset (0 .. rows-1): unique across all files. A direct
    identifier (:data:`IDENTIFIERS`).
``REGION``
    string, one of the four census regions (NORTHEAST 17 %, MIDWEST 21 %, SOUTH 38 %, WEST 24 %); each
    multiplies wages (1.12, 0.97, 0.93, 1.06) and the survey weight.
``SEX``
    string, F (51 %) or M; women's wages are multiplied by 0.84.
``HOUSEHOLD_TYPE``
    string, the latent type (shares): YOUNG_SINGLE 13 %, SINGLE 13 %, COUPLE_NO_CHILDREN 17 %,
    COUPLE_WITH_CHILDREN 22 %, SINGLE_PARENT 8 %, RETIRED 19 %, STUDENT 8 %; see ``_TYPE_TABLE``.
``AGE``
    int64, a normal of the type's mean and spread, rounded and clipped to the type's range (17 .. 100).
``CHILDREN``
    int64, the type's base (1 for parents, else 0) plus a Poisson count of the type's rate, at most 9.
``HOUSEHOLD_SIZE``
    int64, 1 + a partner (always for couples, 55 % of the retired) + CHILDREN + a Poisson number of
    other adults (roommates, relatives; rate by type, highest for students).
``WAGE``
    Zero for the non-employed (the employment probability is the type's, lowered below age 20 and from
    62; about a third of all persons have no wage). Otherwise lognormal: log wage = log(type median) +
    a hump in age peaking at 48 (-0.0009 (AGE-48)^2) + 0.7 ability + 0.35 noise + log(region and sex
    factors); part-time workers (15-25 %; the retired 50 %, students 60 %) earn 20-70 % of that. At
    least 100.
``SELF_EMP``
    Net self-employment income: zero for most (the type's probability, 2-13 %, halved for those with a
    wage), else lognormal, median 18,000 times exp(0.5 ability + 1.1 noise), times 0.4 for those who
    also have a wage (a side business). Never negative (losses are not modelled).
``EARNINGS``
    WAGE + SELF_EMP.
``CAPITAL_INC``
    Interest, dividends and capital gains: non-zero with a logistic probability rising with ability and
    age (about 30 % overall); the amount is Pareto (type I, tail index 1.5, so heavy-tailed with a
    finite mean) with a scale of 300 exp(0.6 ability + 0.015 (AGE-45)).
``RETIREMENT``
    Social Security (claimed by 35 % at 62-64, 85 % at 65-66, 96 % from 67; 3 % disability benefits
    for the non-employed under 62; 19,000 exp(0.25 ability + 0.2 noise) clipped to 6,000 .. 48,000)
    plus a pension (35 % from age 60; lognormal, median 14,000 exp(0.4 ability + 0.8 noise)). All of
    it counts in AGI (the partial taxation of Social Security is not modelled).
``ADJUSTMENTS``
    Above-the-line deductions: half the self-employment tax (0.5 x 15.3 % x 92.35 % of SELF_EMP) plus,
    for 12 % of earners (22 % of those one standard deviation above the mean ability), an IRA / HSA
    contribution of 500 .. 6,500, never more than the earnings left.
``AGI``
    EARNINGS + CAPITAL_INC + RETIREMENT - ADJUSTMENTS (>= 0, exactly).
``TAXINC``
    max(0, AGI - deduction): the standard deduction of the filing status (single 13,850; married
    filing jointly 27,700 for anyone with a partner; head of household 20,800 for a single person with
    children) or, above an AGI of 100,000, itemized deductions of 8-22 % of AGI if larger.
``TAX``
    The 2023 progressive schedule of the filing status (10, 12, 22, 24, 32, 35, 37 %) on TAXINC, less
    a non-refundable child tax credit of 2,000 per child, at least 0. So 0 <= TAX <= 0.37 TAXINC.
``FICA``
    Employee payroll tax on wages: 6.2 % of WAGE up to the 160,200 wage base plus 1.45 % of all of
    WAGE (the 0.9 % additional Medicare tax is not modelled), rounded down: FICA <= 7.65 % of WAGE.
``HEALTH_EXP``
    The confidential variable (not a quasi-identifier): yearly health expenditure, zero for 15 % (5 %
    from 65), else lognormal, median 1,200 exp(0.03 (AGE-40)) with a log-spread of 1.2.
``WEIGHT``
    A survey weight (> 0, two decimals): lognormal around 1,000 by region; usable as ``--weights``.

Money columns are float64 holding whole units (the pipeline reads quasi-identifiers as float64), the
counts and AGE are int64, the categorical columns Arrow strings.

Determinism
-----------
Row ``i`` of the dataset is a pure function of ``(seed, i)``: rows are cut into fixed random streams of
:data:`STREAM_ROWS` rows, and stream ``s`` draws its normals and its uniforms from two ``PCG64``
generators seeded by ``SeedSequence(seed, spawn_key=(s, 0))`` and ``(s, 1)``, a fixed number per row in
row-major order (so the values of the first rows of a stream do not depend on how many rows are drawn).
Every derived column is element-wise. Hence the rows do not depend on ``files``, on the chunking nor on
the Dask workers; ``(rows, files, seed)`` gives byte-identical files (with the same NumPy and pyarrow
versions: NumPy does not promise the same ``Generator`` streams across versions).

Files and memory
----------------
File ``f`` of ``files`` holds rows ``[f*rows//files, (f+1)*rows//files)`` (sizes differ by at most one
row) and is written by one task, in row groups of at most :data:`CHUNK_ROWS` rows, one chunk in memory
at a time: a task holds about 0.25 GB whatever ``rows`` (peak RSS on the synchronous scheduler: 0.45 GB
for one file of 1M rows, 0.49 GB for 3M rows, of which 0.22 GB is the interpreter and its imports).
The default is one file per started million rows (:func:`default_files`).
"""

import json
import logging
import os

import dask
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import io
from .errors import InputError

log = logging.getLogger(__name__)

MODEL_VERSION = 1
"""Bumped whenever a change to the model or to the stream layout changes the rows of a seed."""

STREAM_ROWS = 65_536
"""Rows per random stream: the granularity of random access (row ``i`` costs at most this many draws)."""

_DERIVE_ROWS = 8_192  # rows derived at once: 64 KiB temporaries, in cache (1.7x faster than 65,536)

CHUNK_ROWS = 1_000_000
"""Rows generated at once and written as one Parquet row group."""

ROWS_PER_FILE = 1_000_000
"""Default rows per file: ``files`` defaults to ``ceil(rows / ROWS_PER_FILE)``."""

QUASI_IDENTIFIERS = [
    "AGE", "CHILDREN", "HOUSEHOLD_SIZE", "WAGE", "SELF_EMP", "EARNINGS", "CAPITAL_INC", "RETIREMENT",
    "ADJUSTMENTS", "AGI", "TAXINC", "TAX", "FICA",
]
"""The numeric quasi-identifiers (13): what a benchmark passes as ``--qi``."""

IDENTIFIERS = ["person_id"]
CATEGORICAL = ["REGION", "SEX", "HOUSEHOLD_TYPE"]
CONFIDENTIAL = ["HEALTH_EXP"]
WEIGHTS = "WEIGHT"

_INTEGER = ["AGE", "CHILDREN", "HOUSEHOLD_SIZE"]
SCHEMA = pa.schema(
    [pa.field("person_id", pa.int64(), nullable=False)]
    + [pa.field(c, pa.string(), nullable=False) for c in CATEGORICAL]
    + [pa.field(c, pa.int64() if c in _INTEGER else pa.float64(), nullable=False) for c in QUASI_IDENTIFIERS]
    + [pa.field(c, pa.float64(), nullable=False) for c in [*CONFIDENTIAL, WEIGHTS]]
)

# --- the model's parameters ------------------------------------------------------------------------

_REGIONS = np.array(["NORTHEAST", "MIDWEST", "SOUTH", "WEST"])
_REGION_SHARE = np.array([0.17, 0.21, 0.38, 0.24])
_REGION_WAGE = np.array([1.12, 0.97, 0.93, 1.06])
_REGION_WEIGHT = np.array([900.0, 1000.0, 1150.0, 1050.0])
_SEXES = np.array(["F", "M"])
_SEX_WAGE = np.array([0.84, 1.0])

# name, share, age mean, age sd, age min, age max, base children, child rate, partner probability,
# other-adult rate, employment probability, median full-time wage, self-employment probability,
# part-time probability
_TYPE_TABLE = [
    ("YOUNG_SINGLE", 0.13, 27, 4.5, 18, 40, 0, 0.0, 0.0, 0.5, 0.88, 34_000, 0.06, 0.20),
    ("SINGLE", 0.13, 49, 10.0, 30, 66, 0, 0.0, 0.0, 0.15, 0.80, 46_000, 0.11, 0.15),
    ("COUPLE_NO_CHILDREN", 0.17, 52, 12.0, 22, 85, 0, 0.0, 1.0, 0.1, 0.82, 54_000, 0.12, 0.15),
    ("COUPLE_WITH_CHILDREN", 0.22, 40, 7.0, 20, 64, 1, 0.9, 1.0, 0.15, 0.88, 58_000, 0.13, 0.20),
    ("SINGLE_PARENT", 0.08, 37, 8.0, 18, 62, 1, 0.6, 0.0, 0.3, 0.80, 36_000, 0.08, 0.25),
    ("RETIRED", 0.19, 74, 7.0, 60, 100, 0, 0.0, 0.55, 0.05, 0.14, 26_000, 0.06, 0.50),
    ("STUDENT", 0.08, 21, 2.5, 17, 30, 0, 0.0, 0.0, 1.5, 0.60, 14_000, 0.02, 0.60),
]
_TYPE_FIELDS = ["share", "age_mean", "age_sd", "age_min", "age_max", "children_base", "children_rate", "partner",
                "others_rate", "employed", "wage_median", "self", "part_time"]
_TYPES = np.array([t[0] for t in _TYPE_TABLE])
_T = {name: np.array([t[1 + i] for t in _TYPE_TABLE], dtype=np.float64) for i, name in enumerate(_TYPE_FIELDS)}
_RETIRED = int(np.flatnonzero(_TYPES == "RETIRED")[0])

# filing status: 0 single, 1 married filing jointly, 2 head of household (2023)
_STANDARD_DEDUCTION = np.array([13_850.0, 27_700.0, 20_800.0])
_BRACKET_RATES = np.array([0.10, 0.12, 0.22, 0.24, 0.32, 0.35, 0.37])
_BRACKET_TOPS = np.array([  # upper ends of the first six brackets, per filing status
    [11_000.0, 44_725.0, 95_375.0, 182_100.0, 231_250.0, 578_125.0],
    [22_000.0, 89_450.0, 190_750.0, 364_200.0, 462_500.0, 693_750.0],
    [15_700.0, 59_850.0, 95_350.0, 182_100.0, 231_250.0, 578_100.0],
])
_BRACKET_LOWS = np.concatenate([np.zeros((3, 1)), _BRACKET_TOPS], axis=1)  # lower ends of all seven
_BRACKET_BASE = np.concatenate(  # the tax due at the lower end of each bracket
    [np.zeros((3, 1)), np.cumsum(np.diff(_BRACKET_LOWS, axis=1) * _BRACKET_RATES[:-1], axis=1)], axis=1)
_CHILD_CREDIT = 2_000.0
_SOCIAL_SECURITY_RATE, _MEDICARE_RATE, _WAGE_BASE = 0.062, 0.0145, 160_200.0
_SE_TAX_RATE, _SE_SHARE = 0.153, 0.9235

# the random variates of one row, in stream order
_NORMALS = ["age", "ability", "wage", "self", "social_security", "pension", "health", "weight"]
_UNIFORMS = ["type", "region", "sex", "children", "others", "partner", "employed", "part_time", "self",
             "capital", "capital_amount", "social_security", "pension", "ira", "ira_amount", "itemize",
             "health"]


# --- validation ------------------------------------------------------------------------------------

def default_files(rows):
    """One file per started :data:`ROWS_PER_FILE` rows."""
    return max(1, -(-rows // ROWS_PER_FILE))


def check_arguments(rows, files, seed):
    """Raise :class:`InputError` naming the bad argument; nothing is computed."""
    for name, value in (("rows", rows), ("files", files), ("seed", seed)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise InputError(f"--{name} must be an integer, got {value!r}")
    if rows < 1:
        raise InputError(f"--rows must be at least 1, got {rows}")
    if files < 1:
        raise InputError(f"--files must be at least 1, got {files}")
    if files > rows:
        raise InputError(f"--files ({files}) cannot exceed --rows ({rows}): every file holds at least one row")
    if seed < 0:
        raise InputError(f"--seed must be >= 0, got {seed}")


def file_ranges(rows, files):
    """``(first row, row count)`` of each file: balanced, in order."""
    bounds = [f * rows // files for f in range(files + 1)]
    return [(bounds[f], bounds[f + 1] - bounds[f]) for f in range(files)]


# --- one chunk -------------------------------------------------------------------------------------

class _Scratch:
    """The buffers of one chunk, reused from chunk to chunk of a file: allocated afresh they cost page
    faults under the local cluster's prompt memory trimming (measured at 10M rows: 3.3 s of system
    time instead of 1.9 s)."""

    def __init__(self, rows):
        self.normals = np.empty((STREAM_ROWS, len(_NORMALS)))
        self.uniforms = np.empty((STREAM_ROWS, len(_UNIFORMS)))
        self.z = np.empty((len(_NORMALS), _DERIVE_ROWS))
        self.u = np.empty((len(_UNIFORMS), _DERIVE_ROWS))
        self.out = {f.name: np.empty(rows, dtype=np.int8 if f.name in CATEGORICAL else f.type.to_pandas_dtype())
                    for f in SCHEMA}


def _variates(seed, stream, stop, scratch):
    """Draw rows ``0 .. stop-1`` of ``stream``'s normals and uniforms into ``scratch``: a fixed number
    per row in row-major order, so a row's variates do not depend on ``stop``."""
    normals = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(stream, 0))))
    uniforms = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(stream, 1))))
    normals.standard_normal(out=scratch.normals[:stop])
    uniforms.random(out=scratch.uniforms[:stop])


def _poisson(rate, u, most=9):
    """Poisson(``rate``) counts by inversion of the uniforms ``u`` (element-wise), capped at ``most``."""
    term = np.exp(-rate)
    cdf = term.copy()
    count = np.zeros(len(u), dtype=np.int64)
    for j in range(1, most + 1):
        above = u > cdf
        if not above.any():
            break
        count += above
        term = term * rate / j
        cdf = cdf + term
    return count


def _lognormal(median, z):
    return median * np.exp(z)


def _income_tax(taxinc, status):
    """The progressive schedule of each row's filing status, applied to its taxable income."""
    tops = _BRACKET_TOPS[status]  # (n, 6): one row of bracket tops per person
    bracket = np.zeros(len(taxinc), dtype=np.int64)
    for j in range(_BRACKET_TOPS.shape[1]):
        bracket += taxinc > tops[:, j]
    return _BRACKET_BASE[status, bracket] + _BRACKET_RATES[bracket] * (taxinc - _BRACKET_LOWS[status, bracket])


def _derive(z, u):
    """Every column of the rows whose variates are ``z`` (normals) and ``u`` (uniforms), as NumPy
    arrays; element-wise in the rows."""
    Z = dict(zip(_NORMALS, z))
    U = dict(zip(_UNIFORMS, u))
    kind = np.minimum(np.searchsorted(np.cumsum(_T["share"]), U["type"], side="right"), len(_TYPES) - 1)
    region = np.minimum(np.searchsorted(np.cumsum(_REGION_SHARE), U["region"], side="right"), len(_REGIONS) - 1)
    sex = (U["sex"] >= 0.51).astype(np.int64)
    t = {name: values[kind] for name, values in _T.items()}

    age = np.clip(np.rint(t["age_mean"] + t["age_sd"] * Z["age"]), t["age_min"], t["age_max"])
    children = (t["children_base"] + _poisson(t["children_rate"], U["children"])).astype(np.int64)
    children = np.minimum(children, 9)
    partner = U["partner"] < t["partner"]
    size = 1 + partner + children + _poisson(t["others_rate"], U["others"], most=6)
    ability = Z["ability"]

    # wages: employment by type and age, a lognormal with an age hump, part-time work
    employ = t["employed"] * np.where(age < 20, 0.6, 1.0) * np.where((age >= 62) & (kind != _RETIRED), 0.7, 1.0)
    employed = U["employed"] < employ
    log_wage = (np.log(t["wage_median"]) - 0.0009 * (age - 48.0) ** 2 + 0.7 * ability + 0.35 * Z["wage"]
                + np.log(_REGION_WAGE[region] * _SEX_WAGE[sex]))
    part_time = U["part_time"] < t["part_time"]
    hours = np.where(part_time, 0.2 + 0.5 * U["part_time"] / np.maximum(t["part_time"], 1e-12), 1.0)
    wage = np.where(employed, np.maximum(np.rint(np.exp(log_wage) * hours), 100.0), 0.0)

    # self-employment: rare, a side business for wage earners
    self_p = t["self"] * np.where(employed, 0.5, 1.0)
    self_amount = _lognormal(18_000.0, 0.5 * ability + 1.1 * Z["self"]) * np.where(employed, 0.4, 1.0)
    self_emp = np.where(U["self"] < self_p, np.maximum(np.rint(self_amount), 1.0), 0.0)
    earnings = wage + self_emp

    # capital income: heavy-tailed, more likely for the able and the old
    capital_p = 1.0 / (1.0 + np.exp(-(-1.0 + 0.8 * ability + 0.03 * (age - 45.0))))
    capital_scale = 300.0 * np.exp(0.6 * ability + 0.015 * (age - 45.0))
    capital_amount = capital_scale * (1.0 - U["capital_amount"]) ** (-1.0 / 1.5)
    capital = np.where(U["capital"] < capital_p, np.rint(capital_amount), 0.0)

    # retirement income: Social Security by age, pensions from 60
    claim = np.select([age >= 67, age >= 65, age >= 62], [0.96, 0.85, 0.35], np.where(employed, 0.0, 0.03))
    social_security = np.clip(_lognormal(19_000.0, 0.25 * ability + 0.2 * Z["social_security"]), 6_000.0, 48_000.0)
    social_security = np.where(U["social_security"] < claim, np.rint(social_security), 0.0)
    pension = _lognormal(14_000.0, 0.4 * ability + 0.8 * Z["pension"])
    pension = np.where((age >= 60) & (U["pension"] < 0.35), np.rint(pension), 0.0)
    retirement = social_security + pension

    # adjustments, AGI, deductions, taxable income, tax, payroll tax
    half_se_tax = np.rint(0.5 * _SE_TAX_RATE * _SE_SHARE * self_emp)
    ira_p = np.where(ability > 1.0, 0.22, 0.12)
    ira = np.where((earnings > 0) & (U["ira"] < ira_p), np.rint(500.0 + 6_000.0 * U["ira_amount"]), 0.0)
    adjustments = half_se_tax + np.minimum(ira, earnings - half_se_tax)
    agi = earnings + capital + retirement - adjustments
    status = np.where(partner, 1, np.where(children > 0, 2, 0))
    itemized = np.where(agi > 100_000.0, agi * (0.08 + 0.14 * U["itemize"]), 0.0)
    deduction = np.maximum(_STANDARD_DEDUCTION[status], np.rint(itemized))
    taxinc = np.maximum(agi - deduction, 0.0)
    tax = np.maximum(np.rint(_income_tax(taxinc, status)) - _CHILD_CREDIT * children, 0.0)
    fica = np.floor(_SOCIAL_SECURITY_RATE * np.minimum(wage, _WAGE_BASE) + _MEDICARE_RATE * wage)

    # the confidential variable and the survey weight
    no_health = U["health"] < np.where(age >= 65, 0.05, 0.15)
    health = np.where(no_health, 0.0, np.rint(_lognormal(1_200.0 * np.exp(0.03 * (age - 40.0)), 1.2 * Z["health"])))
    weight = np.round(_REGION_WEIGHT[region] * np.exp(0.3 * Z["weight"]), 2)

    columns = {
        "REGION": region, "SEX": sex, "HOUSEHOLD_TYPE": kind,  # codes; strings made per chunk
        "AGE": age.astype(np.int64), "CHILDREN": children, "HOUSEHOLD_SIZE": size.astype(np.int64),
        "WAGE": wage, "SELF_EMP": self_emp, "EARNINGS": earnings, "CAPITAL_INC": capital,
        "RETIREMENT": retirement, "ADJUSTMENTS": adjustments, "AGI": agi, "TAXINC": taxinc, "TAX": tax,
        "FICA": fica, "HEALTH_EXP": health, "WEIGHT": weight,
    }
    return columns


_LABELS = {"REGION": pa.array(_REGIONS), "SEX": pa.array(_SEXES), "HOUSEHOLD_TYPE": pa.array(_TYPES)}


def chunk(n_rows, first_row_id, seed):
    """Rows ``first_row_id .. first_row_id + n_rows - 1`` of the dataset of ``seed``, as a
    ``pyarrow.Table`` of :data:`SCHEMA` (without its metadata).

    The same rows whatever the chunking: ``chunk(n, i, s)`` equals rows ``i - j ..`` of any larger
    ``chunk(m, j, s)`` that covers them. Memory: the table plus one stream's variates (13 MB).
    """
    return _table(_fill(_Scratch(n_rows), n_rows, first_row_id, seed), n_rows)


def _fill(scratch, n_rows, first_row_id, seed):
    """Generate the rows into ``scratch.out``; returns it."""
    if n_rows < 1 or first_row_id < 0:
        raise ValueError(f"bad chunk: {n_rows} rows from row {first_row_id}")
    out = scratch.out
    out["person_id"][:n_rows] = np.arange(first_row_id, first_row_id + n_rows, dtype=np.int64)
    row, stop = first_row_id, first_row_id + n_rows
    while row < stop:
        stream, offset = divmod(row, STREAM_ROWS)
        take = min(STREAM_ROWS - offset, stop - row)
        _variates(seed, stream, offset + take, scratch)
        for a in range(offset, offset + take, _DERIVE_ROWS):  # temporaries that stay in cache
            m = min(_DERIVE_ROWS, offset + take - a)
            z, u = scratch.z[:, :m], scratch.u[:, :m]
            np.copyto(z, scratch.normals[a:a + m].T)
            np.copyto(u, scratch.uniforms[a:a + m].T)
            at = row - first_row_id + a - offset
            for name, values in _derive(z, u).items():
                out[name][at:at + m] = values
        row += take
    return out


def _table(out, n_rows):
    """The first ``n_rows`` of the generated columns as a table (numeric columns without a copy)."""
    arrays = [_LABELS[f.name].take(pa.array(out[f.name][:n_rows])) if f.name in CATEGORICAL
              else pa.array(out[f.name][:n_rows]) for f in SCHEMA]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


# --- files and the dataset -------------------------------------------------------------------------

def file_name(index):
    return f"part-{index:05d}.parquet"


def write_file(directory, index, first_row_id, n_rows, seed, metadata=None):
    """Write rows ``first_row_id ..`` (``n_rows``) as ``directory/part-INDEX.parquet``, one
    :data:`CHUNK_ROWS` row group at a time; returns ``(file name, rows, bytes)``."""
    path = os.path.join(directory, file_name(index))
    schema = SCHEMA.with_metadata(metadata) if metadata else SCHEMA
    scratch = _Scratch(min(n_rows, CHUNK_ROWS))
    with pq.ParquetWriter(path, schema, compression="snappy") as writer:
        for start in range(first_row_id, first_row_id + n_rows, CHUNK_ROWS):
            take = min(CHUNK_ROWS, first_row_id + n_rows - start)
            table = _table(_fill(scratch, take, start, seed), take)
            writer.write_table(table, row_group_size=take)  # encodes a copy: the buffers are free again
            del table
    return file_name(index), n_rows, os.path.getsize(path)


def write_dataset(output, rows, files=None, seed=0, client=None):
    """Generate ``rows`` rows of the dataset of ``seed`` into ``files`` Parquet files at ``output``,
    one Dask task per file, committed atomically (see :mod:`pipeline.io`); returns a summary dict.

    client : a ``distributed.Client`` to run the tasks on, or ``None`` for the active Dask scheduler.
        The workers write into a temporary directory beside ``output``, so they must see the same
        filesystem.
    """
    files = default_files(rows) if files is None else files
    check_arguments(rows, files, seed)
    metadata = {b"microagg.generate": json.dumps(
        {"model_version": MODEL_VERSION, "rows": rows, "files": files, "seed": seed,
         "quasi_identifiers": QUASI_IDENTIFIERS, "identifiers": IDENTIFIERS}, sort_keys=True).encode()}
    tmp = io.prepare_output(output)
    try:
        tasks = [dask.delayed(write_file, pure=True)(tmp, f, first, n, seed, metadata)
                 for f, (first, n) in enumerate(file_ranges(rows, files))]
        log.info("generating %d rows in %d file(s), seed %d", rows, files, seed)
        written = client.gather(client.compute(tasks)) if client is not None else dask.compute(*tasks)
        if sum(w[1] for w in written) != rows:  # pragma: no cover - a bug, not an input error
            raise RuntimeError(f"generated {sum(w[1] for w in written)} rows, expected {rows}")
        io.commit_output(tmp, output)
    except BaseException:
        io.discard_output(tmp)
        raise
    return {"output": str(output), "rows": rows, "files": files, "seed": seed,
            "bytes": int(sum(w[2] for w in written)), "model_version": MODEL_VERSION}
