"""The distributed pipeline against its baselines, measured in the same run.

    .venv/bin/python tests/benchmarks/bench_pipeline.py inprocess [--rows 100000]
    .venv/bin/python tests/benchmarks/bench_pipeline.py scale --rows 1000000 [--processes] [--workers N]
    .venv/bin/python tests/benchmarks/bench_pipeline.py sweep --rows 1M,10M,30M [--processes --memory-limit 1.5GiB]
    .venv/bin/python tests/benchmarks/bench_pipeline.py methods --rows 1000000 [--methods mdav,vmdav,dbm,mhm,auto]
    .venv/bin/python tests/benchmarks/bench_pipeline.py methods --rows 1000000 --methods mdav,auto,auto:portfolio=full
    .venv/bin/python tests/benchmarks/bench_pipeline.py modes --rows 1000000 [--modes plain,noise,where]
    .venv/bin/python tests/benchmarks/bench_pipeline.py blocking --rows 4000000 [--layouts 5000/16/8,2500/32/6]
    .venv/bin/python tests/benchmarks/bench_pipeline.py stream --rows 10000000 [--no-html]
    .venv/bin/python tests/benchmarks/bench_pipeline.py evaluate --rows 10000000 [--dld-records 1000000]
    .venv/bin/python tests/benchmarks/bench_pipeline.py quality --rows 1000000
    .venv/bin/python tests/benchmarks/bench_pipeline.py floors --rows 1M,10M
    .venv/bin/python tests/benchmarks/bench_pipeline.py small
    .venv/bin/python tests/benchmarks/bench_pipeline.py cpu --rows 10000000 --runs 2
    .venv/bin/python tests/benchmarks/bench_pipeline.py files --rows 1000000 --files 2000 --runs 2
    .venv/bin/python tests/benchmarks/bench_pipeline.py csv --rows 1000000 --runs 2
    .venv/bin/python tests/benchmarks/bench_pipeline.py zeros --rows 1000000 [--repeat 3]
    .venv/bin/python tests/benchmarks/bench_pipeline.py quotes --rows 1000000 --runs 2
    .venv/bin/python tests/benchmarks/bench_pipeline.py ties --rows 1000000 --methods mdav,auto --runs 2
    .venv/bin/python tests/benchmarks/bench_pipeline.py tree --rows 10M,100M
    .venv/bin/python tests/benchmarks/bench_pipeline.py fanin --rows 10M,30M [--repeat 3]
    .venv/bin/python tests/benchmarks/bench_pipeline.py keeping --rows 10000000 --runs 3

``inprocess``: the blocked path in this process, against global in-memory MDAV on the same 100k x 13
rows, k=5 (information loss and seconds): in memory without Dask (``microagg.partition(...,
block_size=...)``, tasks on 2 threads) and through the Dask pipeline (threaded scheduler, 2 threads,
the release built and computed). Both form the same groups.

``scale``: the floor (Dask alone on a LocalCluster of microagg's shape: read the Parquet files, sort by one
column, write Parquet; the best of three runs), measured twice: on a cluster kept between runs, and as a
whole job (a fresh interpreter that imports Dask, starts the cluster, runs, shuts down: what microagg's
figure includes); and then ``microagg anonymize`` end to end (the CLI in a subprocess, cluster start
included), on the same synthetic extract (person_id, 13 QIs, region, flag: 16 columns), k=5. Prints
seconds, rows per second, the ratios to both floors, the time per stage, peak RSS per worker and IL,
and for every whole-job run (microagg's and the floor's) its CPU seconds and the host's steal meanwhile
(:class:`Cost`): on a shared virtual machine they tell a slow run from a slow host.

``floors``: the floor alone, kept-cluster and whole-job, on microagg's default shape (one worker process
of 2 threads) and on ``LocalCluster()``'s default (one worker process per core), at each ``--rows``.

``sweep``: ``scale`` at every size of ``--rows`` (a comma-separated list), in one run, as one Markdown
table (BENCHMARKS.md's form): floor, microagg seconds, rows per second, ratio, stage seconds, peak RSS
per worker, IL, and whether the job finished. A job that fails is reported, not fatal: with
``--processes --memory-limit 1.5GiB`` this is the tight-memory check (each worker process's peak RSS is
also sampled while the job runs, so a failed job has one too, and a worker process the nanny had to
restart shows as an extra process). A size whose data, floor output, release and spill would not fit
the free disk (with a margin) is skipped with the reason.

``modes``: the release modes of issue 5 (plain, Laplace noise, preference range, median and trimmed
aggregates, strata, attribute blocks) end to end; ``cells``: strata of about 20,000 cells, most of them
small, half below k (merged); ``areas``: 50,000 strata of even sizes.

``methods``: the CLI end to end with each block method on the same extract (issue 4): IL, seconds
and the ratio to the first method's seconds.

``evaluate``: the evaluation's cost, in one run: ``microagg anonymize`` without and with its default
evaluation, then ``microagg evaluate`` of the release with the release's linkage sample and with every
record: seconds, peak RSS, stage seconds, DLD (and its interval for a sample).

``quality``: global in-memory MDAV (one core; O(n^2): about 15 minutes at 1M rows) against the blocked
solve with each stitching setting (light, fast, deep; in this process, one thread, no Dask) on the
``scale`` extract: IL and CPU seconds. The bar of issue 3 (blocked IL no worse than global MDAV's) at
the sizes ``scale`` measures.

``tree``: the split tree of an input of each ``--rows`` rows, grown from the sample the pipeline would
draw (about 128 rows per block, at most 2M; taken from the 10M extract for larger inputs, with the
extract's own fraction of it), by the one-core kernel and on the client's cores (the pipeline's
``blocking.grow_tree``), alternately, best of ``--repeat``: seconds, the ratio, and whether both trees
are the same arrays.

``blocking``: the blocked solve in this process (one thread, no Dask) for several block layouts
(``--layouts 5000/16/8,2500/32/6``: block size / blocks per task / neighbour groups of the stitching
local search, optionally / band / upper band of the stitching, ``2500/32/6/0/0``: no stitching, and
then / block sweeps): CPU seconds and IL, the measurement behind the defaults.

``files``: the same rows as the extract's files and as ``--files`` small files of equal row counts
(the shape of an export written by many tasks), ``microagg anonymize`` on each, alternated ``--runs``
times: seconds, the stages, the ratio of the small files' best to the extract's best, and whether the
releases are the same bytes.

``csv``: the extract as one CSV file with a ``postcode`` column of numbers, and the same file with
one postcode of text at 90 % of the rows (past the rows Dask guesses the types from: the job's first
pass fails, the input is read again with the types of all its rows), the first with a nullable bigint
key, and the first with a decimal column that has no value in its first 10,000 rows (read again, as
the text postcode), ``microagg anonymize`` on each, alternated ``--runs`` times: seconds, the stages,
the ratio of each one's best to the first's, the IL (the same: only the other columns differ).

``zeros``: the first of those CSV files read whole (every block on the threaded scheduler, 2
threads), plainly and with the check of its kept columns of whole numbers (``flag``, ``postcode``) for
numbers written with leading zeros after the first rows, alternated ``--repeat`` times: seconds and
the ratio to the plain read.

``quotes``: the extract as one CSV file with free text, a ``note`` holding a line break (quoted) in
every seventh row and a ``size`` in inches, ``12" pipe`` in one row: written as CSV writers write
it (that value quoted, its quote doubled) and as hand-made exports hold it (the quote bare inside an
unquoted field), ``microagg anonymize`` on each, alternated ``--runs`` times: seconds, the stages,
the ratio of the second's best to the first's, whether the releases are the same bytes (they hold
the same values) and the IL.

``ties``: the extract, and the same rows with 90 % of the records all zeros (every QI: people with
no income in tax data), ``microagg anonymize`` with each of ``--methods`` on each, alternated
``--runs`` times: seconds, the stages, the ratio of the zeros' best to the extract's, the largest
leaf of the split tree (the zeros' one the sample cannot split) and the IL.

``small``: ``light`` before and after its block sweeps (bands 0.5 / 0.25 without sweeps, and the
preset now) on small inputs forced into blocks: the CASC census and EIA files and extracts of 20k
and 100k rows, blocks of 500, 1,000 and 2,500 rows, k = 3, 5 and 10. The IL of each, and the change.

``cpu``: the CLI end to end with the kernels compiled for the host's CPU (Numba's default), for a
generic x86-64 CPU and for x86-64-v3 (deploy/'s default), each in a Numba cache of its own: seconds,
the ratio to the host's code, and whether the releases are the same bytes.

``keeping``: what the default cluster's memory costs in time: ``microagg anonymize`` with the input kept in
memory, re-read by every pass, and re-read with the rows in transit and the released pieces through files
whatever their size (``release.TRANSIT_MEMORY_SHARE = 0``), alternated ``--runs`` times: seconds, stages, CPU,
peak RSS, IL and the release's digest (the same bytes every way).

``fanin``: the scheduler's cost alone of the one-process job's fan-ins (every output file's task needs
every released piece; every block task every routing task's output), at the default job's shapes for
each ``--rows``: consumers that do nothing, straight from every producer or through bundles
(``pipeline.graph.Layer.bundles``).
"""

import argparse
import collections
import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import dask
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synthetic import QI, extract  # noqa: E402

BIN = Path(sys.executable).parent


def _cached(path, build):
    """The directory ``path``, filled by ``build(path)`` unless a run before did (marked ``_DONE``)."""
    if not (path / "_DONE").exists():
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        build(path)
        (path / "_DONE").touch()
    return path


def make_extract(rows, root, rows_per_file=1_000_000):
    """Synthetic extract as Parquet files (generated file by file; cached by size)."""
    def build(path):
        for i, start in enumerate(range(0, rows, rows_per_file)):
            n = min(rows_per_file, rows - start)
            df = extract(n, seed=100 + i)
            df["person_id"] += start * 7
            df.to_parquet(path / f"part-{i:04d}.parquet", index=False)

    return _cached(Path(root) / f"extract-{rows}", build)


def _holes(df, i):
    """5% of every QI's values missing (a deterministic pattern per file)."""
    rng = np.random.default_rng(500 + i)
    X = df[QI].to_numpy().copy()
    X[rng.random(X.shape) < 0.05] = np.nan
    X[np.isnan(X).all(axis=1), 0] = 0.0
    df[QI] = X
    return df


def _weighted(df, i):
    """A survey-weight column (1..4, deterministic per file)."""
    df["weight"] = 1.0 + np.random.default_rng(700 + i).integers(0, 4, len(df))
    return df


def _zeros(df, i):
    """90 % of the records with every QI 0 (the records of people with no income in tax data: every
    amount zero); the others unchanged."""
    X = df[QI].to_numpy().copy()
    X[np.arange(len(df)) % 10 != 0] = 0.0
    df[QI] = X
    return df


def _cells(df, i):
    """A ``cell`` column of about 20,000 strata of zipf-like sizes (a few of 100,000 rows and more, about
    half below k = 5: the cells of a fine cross-classification; deterministic per file)."""
    df["cell"] = (np.random.default_rng(900 + i).zipf(1.3, len(df)) % 20000).astype(np.int32)
    return df


def _areas(df, i):
    """An ``area`` column of 50,000 strata of even sizes (small areas: 20 rows each per million)."""
    df["area"] = np.random.default_rng(950 + i).integers(0, 50000, len(df)).astype(np.int32)
    return df


DERIVED = {"holes": _holes, "weighted": _weighted, "zeros": _zeros, "cells": _cells, "areas": _areas}


def derived_extract(rows, root, name):
    """The extract with ``DERIVED[name]`` applied file by file (cached)."""
    import pandas as pd

    source = make_extract(rows, root)

    def build(path):
        for i, part in enumerate(sorted(source.glob("part-*.parquet"))):
            DERIVED[name](pd.read_parquet(part), i).to_parquet(path / part.name, index=False)

    return _cached(Path(root) / f"extract-{rows}-{name}", build)


def one_file_extract(rows, root):
    """The extract as one Parquet file of 1M-row row groups, the shape of a warehouse export (written
    file by file; cached)."""
    import pyarrow.parquet as pq

    source = make_extract(rows, root)

    def build(path):
        writer = None
        try:
            for part in sorted(source.glob("part-*.parquet")):
                table = pq.read_table(part)
                writer = writer or pq.ParquetWriter(path / "extract.parquet", table.schema)
                writer.write_table(table, row_group_size=1_000_000)
        finally:
            if writer is not None:
                writer.close()

    return _cached(Path(root) / f"extract-{rows}-one-file", build) / "extract.parquet"


def inprocess(args):
    import dask
    import dask.dataframe as dd

    import microagg
    from microagg import kernels
    from microagg.pipeline.release import ReleaseOptions, Timings, build_release

    df = extract(args.rows, seed=0)
    X = df[QI].to_numpy()
    Z, _, _ = microagg.standardize(X)
    kernels.mdav(np.ascontiguousarray(Z[:100]), args.k)
    t = time.perf_counter()
    labels = kernels.mdav(Z, args.k)
    global_s = time.perf_counter() - t
    global_il = microagg.information_loss(Z, labels, standardized=True)
    print(f"global in-memory MDAV: IL {global_il:.4f} %, {global_s:.2f} s (one core)")
    microagg.partition(Z[:3000], args.k, standardized=True, block_size=1000)  # warm-up
    best = None
    for _ in range(args.repeat):
        t = time.perf_counter()
        Zb, _, _ = microagg.standardize(X)
        labels = microagg.partition(Zb, args.k, standardized=True, block_size=args.block_size)
        seconds = time.perf_counter() - t
        best = min(best or seconds, seconds)
    il = microagg.information_loss(Z, labels, standardized=True)
    print(f"blocked in memory (no Dask; standardize + blocked partition, 2 threads): IL {il:.4f} % "
          f"({100 * (il / global_il - 1):+.1f}% vs global), {best:.2f} s (best of {args.repeat}) = "
          f"{global_s / best:.1f}x faster")
    ddf = dd.from_pandas(df, npartitions=4)
    with dask.config.set(scheduler="threads", num_workers=2):
        build_release(dd.from_pandas(df.iloc[:3000], npartitions=1),  # warm-up: compile / load caches
                      ReleaseOptions(k=args.k, block_size=1000, quasi_identifiers=tuple(QI)))
        for refine, stitch in (("none", "light"), ("local", "deep")):
            options = ReleaseOptions(k=args.k, quasi_identifiers=tuple(QI), identifiers=("person_id",),
                                     refine=refine, stitch=stitch, block_size=args.block_size)
            best = None
            for _ in range(args.repeat):
                timings = Timings()
                t = time.perf_counter()
                released, report = build_release(ddf, options, timings)
                released.compute()
                seconds = time.perf_counter() - t
                best = min(best or seconds, seconds)
            il = report["information_loss"]
            print(f"blocked --refine {refine} --stitch {stitch}: IL {il:.4f} % ({100 * (il / global_il - 1):+.1f}% vs global), "
                  f"{best:.2f} s (best of {args.repeat}; 2 threads) = {global_s / best:.1f}x faster; "
                  f"{report['blocks']} blocks, {report['tasks']} tasks; stages {timings.seconds}")


def _peak(report):
    workers = report.get("workers") or {}
    return workers.get("max_peak_rss_bytes", 0) / 2**30


def _evaluation(args):
    """The anonymization alone against the floor (which evaluates nothing), unless ``--evaluate``."""
    return () if getattr(args, "evaluate", False) else ("--no-evaluate",)


def _host_steal():
    """Seconds the hypervisor has kept this machine's CPUs from running it since boot (``/proc/stat``'s
    steal field, all CPUs), or None where the field is not there."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class Cost(NamedTuple):
    """What a whole job in a subprocess cost beyond its seconds: the CPU seconds of the processes it
    ran (user and system: ``getrusage`` of the children waited for meanwhile) and the seconds the host
    took from this machine's CPUs while it ran (``steal``; None where not known). On a shared virtual
    machine the same job's seconds move with both: a run's cost tells a slow run of the job from a
    run on a slow host."""

    user: float
    system: float
    steal: float | None

    def __str__(self):
        steal = "" if self.steal is None else f", host steal {self.steal:.1f}"
        return f"CPU user {self.user:.1f} + system {self.system:.1f} s{steal}"


@contextlib.contextmanager
def _cost():
    """Yields a list that holds, once the block is left, the :class:`Cost` of the child processes
    run and waited for inside it."""
    before, steal, out = resource.getrusage(resource.RUSAGE_CHILDREN), _host_steal(), []
    yield out
    after, steal_after = resource.getrusage(resource.RUSAGE_CHILDREN), _host_steal()
    out.append(Cost(after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime,
                    None if steal is None or steal_after is None else steal_after - steal))


def _anonymize(args, source, release, workers, threads, *extra, env=None, digest=False, command=None):
    """``microagg anonymize`` on ``source`` in a subprocess (environment ``env``, default this one's; ``command``:
    what runs ``microagg``, default its console script): ``(seconds, report)``; the report also holds
    ``bench_cost``, the run's :class:`Cost`, and with ``digest`` ``release_digest``, the SHA-256 of the release's
    Parquet files. The release is removed."""
    t = time.perf_counter()
    cmd = [*(command or [str(BIN / "microagg")]), "anonymize", str(source), str(release), "--k", str(args.k),
           "--identifiers", "person_id", "--qi", ",".join(QI), "--workers", str(workers),
           "--threads-per-worker", str(threads), "--processes" if args.processes else "--no-processes",
           "--memory-limit", args.memory_limit, "--refine", args.refine, "--stitch", args.stitch, *_evaluation(args),
           *extra]
    with _cost() as cost:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    total = time.perf_counter() - t
    if proc.returncode:
        print(proc.stderr)
        raise SystemExit(proc.returncode)
    report = json.loads((Path(release) / "_report.json").read_text())
    report["bench_cost"] = cost[0]
    if digest:
        h = hashlib.sha256()
        for part in sorted(Path(release).glob("*.parquet")):
            h.update(part.read_bytes())
        report["release_digest"] = h.hexdigest()
    shutil.rmtree(release, ignore_errors=True)
    return total, report


def _variants(args, variants):
    """The CLI end to end on the same extract once per ``(label, extra options)``: a Markdown table of
    IL, rows released, end-to-end and block-stage seconds, and the ratio to the first variant."""
    from microagg.jobs.cluster import local_shape

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    source = make_extract(args.rows, root)
    workers, threads = local_shape(args.processes, args.workers, args.threads_per_worker)
    print(f"{args.rows:,} rows x 13 QIs, k={args.k}; {workers} worker(s) x {threads} thread(s)\n")
    print("| variant | options | IL % | k' | rows released | end to end s | blocks stage s | vs first |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = None
    for label, extra in variants:
        data = derived_extract(args.rows, root, DATA[label]) if label in DATA else source
        total, report = _anonymize(args, data, root / f"release-{label}", workers, threads, *extra)
        base = base or total
        k_prime = (report.get("real_anonymity") or (report.get("attribute_blocks") or {}).get("real_anonymity") or {})
        k_prime = f"{k_prime['all']:.2f}" if "all" in k_prime else ""
        print(f"| {label} | `{' '.join(extra)}` | {report['information_loss']:.4g} | {k_prime} | "
              f"{report['rows_released']:,} | "
              f"{total:.1f} | {report['timings']['blocks']:.1f} | {total / base:.2f}x |", flush=True)


def methods(args):
    """The block methods of issue 4 on the same extract; ``auto:portfolio=full`` passes a method option
    (``--portfolio full``)."""
    variants = []
    for spec in args.methods.split(","):
        name, *options = spec.split(":")
        flags = [f for option in options for f in (f"--{option.split('=')[0].replace('_', '-')}", option.split("=")[1])]
        variants.append((spec, ["--method", name, *flags]))
    _variants(args, variants)


MODES = {
    "plain": [],
    "noise": ["--noise", "laplace", "--epsilon", "1"],
    "where": ["--release-where", "q0 >= 0 and q1 <= 1"],
    "median": ["--aggregate", "median"],
    "trimmed": ["--aggregate", "trimmed"],
    "strata": ["--strata", "region"],
    "cells": ["--strata", "cell", "--small-strata", "merge"],
    "areas": ["--strata", "area", "--small-strata", "merge"],
    "blocks": ["--blocks", "q0,q1,q2,q3,q4,q5;q6,q7,q8,q9,q10,q11,q12"],
    "weighted": ["--weights", "weight"],
    "missing": ["--missing", "centroid"],
}
DATA = {"weighted": "weighted", "missing": "holes", "cells": "cells", "areas": "areas"}  # modes that need a derived extract


def modes(args):
    """The release modes of issue 5 against the plain release on the same extract."""
    _variants(args, [(m, MODES[m]) for m in args.modes.split(",")])


@contextlib.contextmanager
def _floor_client(workers, threads, processes, memory_limit):
    """A client of a fresh LocalCluster of the given shape, as the floor runs on."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=threads, dashboard_address=None,
                      processes=processes, memory_limit=memory_limit) as cluster, Client(cluster) as client:
        yield client


def _floor_write(client, source, out, timeout=None):
    """The floor's work: Dask alone reads ``source``, sorts it by one column and writes Parquet at ``out``."""
    import dask.dataframe as dd

    write = dd.read_parquet(str(source)).sort_values("q0").to_parquet(str(out), write_index=False, compute=False)
    client.compute(write).result(timeout=timeout)


@contextlib.contextmanager
def _floor_cluster(args, source, out, workers, threads):
    """Yields ``run()``: one run of the floor (:func:`_floor_write`) on a LocalCluster of the job's shape
    kept between runs; its seconds (the output removed; a run longer than ``args.timeout`` raises
    ``TimeoutError``)."""
    with _floor_client(workers, threads, args.processes, args.memory_limit) as client:
        def run():
            t = time.perf_counter()
            _floor_write(client, source, out / "floor", args.timeout)
            seconds = time.perf_counter() - t
            shutil.rmtree(out / "floor", ignore_errors=True)
            return seconds

        yield run


def _floor(args, source, out, workers, threads):
    """``args.floor_runs`` runs of the floor (:func:`_floor_cluster`): the seconds of every run."""
    with _floor_cluster(args, source, out, workers, threads) as run:
        return [run() for _ in range(args.floor_runs)]  # the floor is noisy on a small machine


def whole_floor(source, out, workers, threads, processes, memory_limit):
    """The floor as a whole job, as microagg's figure is one (:func:`_cold_floor` runs it in a fresh
    interpreter): start a LocalCluster, run :func:`_floor_write` once, shut the cluster down."""
    with _floor_client(int(workers), int(threads), processes == "yes", memory_limit) as client:
        _floor_write(client, source, out)


def _cold_floor(args, source, out, workers, threads, costs=None):
    """One run of :func:`whole_floor` in a fresh interpreter (which imports Dask, starts the cluster,
    runs, shuts down and exits), timed from outside as :func:`_anonymize` times the CLI: its seconds
    (the output removed); its :class:`Cost` is appended to ``costs`` if given."""
    call = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
            "from bench_pipeline import whole_floor; whole_floor(*sys.argv[1:])")
    t = time.perf_counter()
    with _cost() as cost:
        proc = subprocess.run([sys.executable, "-c", call, str(source), str(out / "floor"), str(workers),
                               str(threads), "yes" if args.processes else "no", args.memory_limit],
                              capture_output=True, text=True, timeout=args.timeout)
    seconds = time.perf_counter() - t
    if costs is not None:
        costs.append(cost[0])
    shutil.rmtree(out / "floor", ignore_errors=True)
    if proc.returncode:
        last = next((line for line in reversed(proc.stderr.splitlines()) if line.strip()), "")
        raise RuntimeError(f"the floor's process exited with {proc.returncode}: {last}")
    return seconds


def floors(args):
    """The floor four ways at each ``--rows``: warm (a kept cluster, :func:`_floor_cluster`) and cold
    (:func:`_cold_floor`), on one worker process of 2 threads (microagg's default shape here) and on 2
    worker processes of 1 thread (``LocalCluster()``'s default on 2 cores): which of them the issues'
    planning figures (1M 2.8 s, 10M 14.8 s "with 2 workers") were."""
    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    cores = os.cpu_count()
    shapes = (("threads", False, 1, cores), ("processes", True, cores, 1))
    print(f"| rows | cluster | warm s (kept cluster) | cold s (fresh process, cluster start included) |")
    print("| ---: | --- | --- | --- |")
    for rows in args.sizes:
        source = make_extract(rows, root)
        out = root / "out"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        for label, processes, workers, threads in shapes:
            shape = argparse.Namespace(**{**vars(args), "processes": processes})
            with _floor_cluster(shape, source, out, workers, threads) as run:
                warm = [run() for _ in range(args.floor_runs)]
            cold = [_cold_floor(shape, source, out, workers, threads) for _ in range(args.floor_runs)]
            print(f"| {rows:,} | {workers} x {threads} ({label}) | {', '.join(f'{r:.2f}' for r in warm)} | "
                  f"{', '.join(f'{r:.2f}' for r in cold)} |", flush=True)
        shutil.rmtree(out, ignore_errors=True)


def scale(args):
    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    t = time.perf_counter()
    source = one_file_extract(args.rows, root) if args.one_file else make_extract(args.rows, root)
    print(f"data: {args.rows:,} rows x 16 columns at {source} ({time.perf_counter() - t:.1f} s to make or find)")
    out = root / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    # the floor: Dask alone, same cluster shape
    from microagg.jobs.cluster import local_shape

    workers, threads = local_shape(args.processes, args.workers, args.threads_per_worker)
    shape = f"{workers} worker {'process(es)' if args.processes else '(threads of one process)'} x {threads} thread(s)"
    failed = []  # the floor's failure, if Dask alone cannot do it (a tight memory limit, say)

    def guarded(run):
        if failed:
            return None
        try:
            return run()
        except Exception as exc:
            failed.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            return None

    with _floor_cluster(args, source, out, workers, threads) as run_floor:
        floor_run = functools.partial(guarded, run_floor)
        cold_costs = []
        cold_run = functools.partial(guarded, functools.partial(_cold_floor, args, source, out, workers, threads,
                                                                cold_costs))
        floors = [floor_run() for _ in range(args.floor_runs)]
        colds = [cold_run() for _ in range(args.floor_runs)]
        # microagg's runs (``--runs``; the best is kept, as the floor's), each followed by another run
        # of both floors when there are several: the machine's speed drifts by tens of percent within
        # minutes here, so each run also gets the ratios to the floors measured next to it
        runs, paired, paired_cold = [], [], []
        for _ in range(args.runs):
            runs.append(_anonymize(args, source, out / "release", workers, threads))
            if args.runs > 1:
                floors.append(floor_run())
                colds.append(cold_run())
                if not failed:
                    paired.append(runs[-1][0] / min(floors[-2:]))
                    paired_cold.append(runs[-1][0] / min(colds[-2:]))
    total, report = min(runs, key=lambda run: run[0])
    if failed:
        floor = cold = None
        print(f"floor (read, sort by one column, write; {shape}): FAILED ({failed[0]})")
    else:
        floor, cold = min(floors), min(colds)
        print(f"floor (read, sort by one column, write; {shape}), on a kept cluster: {floor:.2f} s "
              f"(best of {len(floors)}: {', '.join(f'{r:.2f}' for r in floors)})")
        print(f"the same floor as a whole job (a fresh process, cluster start included, as microagg's figure): "
              f"{cold:.2f} s (best of {len(colds)}: {', '.join(f'{r:.2f}' for r in colds)})")
        print("  the whole-job floor's runs: " + "; ".join(f"{r:.2f} s ({c})" for r, c in zip(colds, cold_costs)))
    print(f"microagg anonymize (CLI end to end, cluster start included): {total:.2f} s, "
          f"{args.rows / total:,.0f} rows/s"
          + (f", {total / floor:.2f}x the kept-cluster floor, {total / cold:.2f}x the whole-job floor" if floor else "")
          + (f" (best of {args.runs}: {', '.join(f'{r[0]:.2f}' for r in runs)})" if args.runs > 1 else ""))
    print("  microagg's runs: " + "; ".join(f"{r:.2f} s ({rep['bench_cost']})" for r, rep in runs))
    if paired:
        print(f"  each run against the floors beside it (the better of the runs before and after it): "
              f"kept cluster {', '.join(f'{r:.2f}x' for r in paired)}; "
              f"whole job {', '.join(f'{r:.2f}x' for r in paired_cold)}")
    print(f"  stages (s): {report['timings']}")
    print(f"  IL {report['information_loss']:.4f} %, {report['blocks']} blocks in {report['tasks']} tasks, "
          f"{report['upper_planes']} upper planes; peak RSS per worker: max {_peak(report):.2f} GiB "
          f"({', '.join(f'{v / 2**30:.2f}' for v in report['workers']['peak_rss_bytes'].values())})")
    shutil.rmtree(out, ignore_errors=True)


BYTES_PER_ROW = 120
"""Disk bytes per row of the extract (16 columns, snappy Parquet: 108 MiB per million rows, rounded
up); the floor's output and the release are about as large."""


class _PeakSampler:
    """Peak RSS of each worker process of a running ``microagg`` (the CLI process itself when its
    workers are threads), sampled every ``interval`` seconds: a job that fails still has one, and a
    worker process restarted by its nanny counts as another process. Short spikes between two
    samples are missed (a finished job's report has the exact peaks)."""

    def __init__(self, pid, processes, interval=0.25):
        import threading

        import psutil  # a dependency of distributed

        self._root = psutil.Process(pid)
        self._processes = processes
        self._interval = interval
        self.peaks = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _workers(self):
        if not self._processes:
            return [self._root]
        # LocalCluster's worker processes are multiprocessing "spawn" children (not its resource tracker)
        return [c for c in self._root.children(recursive=True) if "spawn_main" in " ".join(c.cmdline())]

    def _run(self):
        import psutil

        while not self._stop.wait(self._interval):
            try:
                for proc in self._workers():
                    self.peaks[proc.pid] = max(self.peaks.get(proc.pid, 0), proc.memory_info().rss)
            except psutil.Error:  # a process ended between listing and reading it
                continue

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
        return self.peaks


def _attempt(args, source, release, workers, threads):
    """``microagg anonymize`` on ``source`` in a subprocess, tolerating failure: a dict with the seconds,
    the exit code (``"timeout"`` past ``args.timeout``: the job's process group is killed), the report
    (None if the job failed), the sampled peaks and the last error line. The release is removed."""
    t = time.perf_counter()
    cmd = [str(BIN / "microagg"), "anonymize", str(source), str(release), "--k", str(args.k),
           "--identifiers", "person_id", "--qi", ",".join(QI), "--workers", str(workers),
           "--threads-per-worker", str(threads), "--processes" if args.processes else "--no-processes",
           "--memory-limit", args.memory_limit, "--refine", args.refine, "--stitch", args.stitch, *_evaluation(args)]
    with _cost() as cost:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        sampler = _PeakSampler(proc.pid, args.processes)
        try:
            _, stderr = proc.communicate(timeout=args.timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its worker processes too
            _, stderr = proc.communicate()
            code = "timeout"
    seconds = time.perf_counter() - t
    peaks = sampler.stop()
    report = None
    if code == 0:
        report = json.loads((Path(release) / "_report.json").read_text())
    shutil.rmtree(release, ignore_errors=True)
    error = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    if code == "timeout":  # e.g. workers paused for good: Dask pauses a worker above 80% of its memory limit
        error = f"no exit within {args.timeout:.0f} s, killed" + (f"; last: {error}" if error else "")
    return {"seconds": seconds, "code": code, "report": report, "sampled": peaks, "error": error, "cost": cost[0]}


STAGES = ("read", "validate", "statistics", "blocks", "gate", "real anonymity", "write")  # the pipeline's order


def _disk_needed(rows, cached):
    """Bytes a sweep size needs on the data disk: the extract unless cached, one floor output at a
    time, the release, and as much again for Dask's spill files, plus 2 GiB."""
    return rows * BYTES_PER_ROW * ((0 if cached else 1) + 1 + 1 + 2) + 2 * 2**30


def _gib(values):
    return ", ".join(f"{v / 2**30:.2f}" for v in values)


KEEPING = {
    "kept": "r._fits_in_memory = lambda size: True",
    "re-read": "r._fits_in_memory = lambda size: False",
    "files": "r._fits_in_memory = lambda size: False; r.TRANSIT_MEMORY_SHARE = 0.0",
}
"""``keeping`` mode's variants: what the job's process sets in :mod:`pipeline.release` before it runs."""


def keeping(args):
    """The default cluster's memory against its time: the input kept in memory (forced), re-read by every pass,
    and re-read with the rows in transit and the released pieces through files whatever their size."""
    from microagg.jobs.cluster import local_shape

    source = make_extract(args.rows, Path(args.data or tempfile.gettempdir()) / "microagg-bench")
    workers, threads = local_shape(args.processes, args.workers, args.threads_per_worker)
    print(f"{args.rows:,} rows x 13 QIs, k={args.k}; {workers} worker(s) x {threads} thread(s); variants alternated, "
          f"{args.runs} run(s) each\n")
    print("| variant | run | seconds | statistics / blocks / write s | CPU | peak RSS per worker GiB | IL % | release |")
    print("| --- | ---: | ---: | --- | --- | --- | ---: | --- |")
    for run in range(args.runs):
        for label, setting in KEEPING.items():
            command = [sys.executable, "-c", f"import microagg.pipeline.release as r; {setting}; "
                                             "from microagg.jobs.cli import console; console()"]
            total, report = _anonymize(args, source, Path(source).parent / f"release-{label}", workers, threads,
                                       digest=True, command=command)
            stages = " / ".join(f"{report['timings'].get(s, 0):.1f}" for s in ("statistics", "blocks", "write"))
            print(f"| {label} | {run + 1} | {total:.2f} | {stages} | {report['bench_cost']} | {_peak(report):.2f} | "
                  f"{report['information_loss']:.4f} | {report['release_digest'][:16]} |", flush=True)


def sweep(args):
    """``scale`` at every size of ``--rows``: one Markdown table."""
    from microagg.jobs.cluster import local_shape

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    root.mkdir(parents=True, exist_ok=True)
    workers, threads = local_shape(args.processes, args.workers, args.threads_per_worker)
    shape = (f"{workers} worker {'process(es)' if args.processes else '(threads of one process)'} x {threads} "
             f"thread(s), --memory-limit {args.memory_limit}")
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    print(f"sweep: {', '.join(f'{r:,}' for r in args.sizes)} rows x 13 QIs, k={args.k}, default method and options; "
          f"{shape}; {os.cpu_count()} cores; commit {commit or '?'}; data under {root}")
    print(f"floor: Dask alone on the same cluster shape reads the extract, sorts it by one column and writes "
          f"Parquet (best of {args.floor_runs}), on a kept cluster and as a whole job (a fresh process, cluster "
          f"start included); microagg: the CLI end to end in a subprocess (cluster start included)\n")
    rows_out = []
    for rows in args.sizes:
        cached = (root / f"extract-{rows}" / "_DONE").exists()
        free, need = shutil.disk_usage(root).free, _disk_needed(rows, cached)
        if free < need:
            print(f"skipped {rows:,} rows: {need / 2**30:.1f} GiB needed on {root} "
                  f"({'extract cached; ' if cached else ''}floor output, release, spill, 2 GiB margin), "
                  f"{free / 2**30:.1f} GiB free", flush=True)
            continue
        t = time.perf_counter()
        source = make_extract(rows, root)
        print(f"data: {rows:,} rows at {source} ({time.perf_counter() - t:.1f} s to make or find)", flush=True)
        out = root / "out"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        try:
            runs = _floor(args, source, out, workers, threads)
            cold_costs = []
            colds = [_cold_floor(args, source, out, workers, threads, cold_costs) for _ in range(args.floor_runs)]
        except Exception as exc:  # a tight memory limit may break (or stall) the floor too: say so, go on
            runs = colds = []  # both or neither: the table compares with both
            print(f"floor at {rows:,} rows failed: {type(exc).__name__}: {exc}", flush=True)
        job = _attempt(args, source, out / "release", workers, threads)
        shutil.rmtree(out, ignore_errors=True)
        rows_out.append((rows, runs, colds, job))
        floor = (f"{', '.join(f'{r:.2f}' for r in runs)} s, as whole jobs {', '.join(f'{r:.2f}' for r in colds)} s"
                 if runs else 'not run' if not args.floor_runs else 'failed')
        print(f"done: {rows:,} rows, floor {floor}, microagg "
              f"{job['seconds']:.1f} s (exit {job['code']}; {job['cost']})", flush=True)
        if colds:
            print("  the whole-job floor's runs: " + "; ".join(f"{r:.2f} s ({c})" for r, c in zip(colds, cold_costs)),
                  flush=True)
    print(f"\n| rows | floor s, kept cluster / whole job (best of {args.floor_runs}) | microagg s | rows/s | "
          f"ratio, kept cluster / whole job | stages s | peak RSS per worker GiB | IL % | finished |")
    print("| ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | --- |")
    for rows, runs, colds, job in rows_out:
        report, floor, cold = job["report"], min(runs) if runs else None, min(colds) if colds else None
        sampled = job["sampled"]
        if report:
            peaks = report.get("workers", {}).get("peak_rss_bytes", {}).values()
            memory = f"max {max(peaks) / 2**30:.2f} ({_gib(peaks)})" if peaks else "?"
            timings = report["timings"]
            names = [n for n in STAGES if n in timings] + sorted(set(timings) - set(STAGES))
            stages = " / ".join(f"{n} {timings[n]:.1f}" for n in names if timings[n] >= 0.05)
            finished, il = "yes", f"{report['information_loss']:.4f}"
        else:
            memory = f"max {max(sampled.values()) / 2**30:.2f} sampled" if sampled else "?"
            stages, il = "", ""
            finished = f"**no**: exit {job['code']}, `{job['error'][:160]}`"
        if args.processes and len(sampled) > workers:
            finished += f" ({len(sampled) - workers} worker process(es) restarted)"
        ratio = f"{job['seconds'] / floor:.2f}x / {job['seconds'] / cold:.2f}x" if floor and report else ""
        speed = f"{rows / job['seconds']:,.0f}" if report else ""
        floor = f"{floor:.2f} / {cold:.2f}" if floor else 'not run' if not args.floor_runs else 'failed'
        print(f"| {rows:,} | {floor} | {job['seconds']:.2f} | {speed} | {ratio} | "
              f"{stages} | {memory} | {il} | {finished} |")
    print("\nTargets: 10M rows within 2.5x the floor; peak memory per worker flat as rows grow.")


def row_counts(text):
    """``--rows``: one count or a comma-separated list of them (``1000000``, ``10M``, ``1M,10M,30M``)."""
    from microagg.jobs.generate import count

    return [count(part) for part in text.split(",")]


def blocking(args):
    """The blocked solve in this process, one thread, for several block layouts on the same rows of the
    extract: CPU seconds and IL (the measurement behind the default block size and neighbour count)."""
    from microagg.pipeline import blocked, stitch
    from microagg.pipeline.solver import Solver

    Z = _scale_rows(args)
    solver = Solver.build("mdav", None, "none", None, 0)
    blocked.blocked_partition(Z[:50_000], args.k, solver, stitch.STITCHING["light"], threads=1)  # warm-up
    print(f"{len(Z):,} rows x 13 QIs, k={args.k}, mdav, --stitch light, one thread\n")
    print("| block size | blocks per task | neighbour groups | band / upper band | block sweeps | blocks | CPU s "
          "| IL % |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    light = stitch.STITCHING["light"]
    for layout in args.layouts.split(","):
        size, per_task, neighbours, *rest = layout.split("/")
        size, per_task, neighbours = int(size), int(per_task), int(neighbours)
        band, upper = (float(rest[0]), float(rest[1])) if rest else (light.band, light.upper_band)
        sweeps = int(rest[2]) if len(rest) > 2 else light.block_sweeps
        # band 0: no stitching
        settings = dataclasses.replace(light, band=band, upper_band=upper, neighbors=neighbours, block_sweeps=sweeps)
        plan = blocked.Blocking(block_size=size, blocks_per_task=per_task)
        t = time.process_time()
        labels, info = blocked.blocked_partition(Z, args.k, solver, settings, plan, threads=1)
        cpu = time.process_time() - t
        il = _il(Z, labels)
        print(f"| {size:,} | {per_task} | {neighbours} | {band:g} / {upper:g} | {sweeps} | {info['blocks']:,} "
              f"| {cpu:.2f} | {il:.4f} |", flush=True)
    if args.profile:
        _profile_blocking(Z, args.k, solver, stitch)


def small(args):
    """``light`` without and with its block sweeps on small inputs cut into blocks (module docstring)."""
    import pandas as pd

    from conftest import CENSUS_CSV, EIA_CSV, EIA_NON_QI
    from microagg.pipeline import blocked, stitch
    from microagg.pipeline.solver import Solver

    light = stitch.STITCHING["light"]
    before = dataclasses.replace(light, band=0.5, upper_band=0.25, block_sweeps=0)
    inputs = {"census": pd.read_csv(CENSUS_CSV), "eia": pd.read_csv(EIA_CSV).drop(columns=EIA_NON_QI),
              "extract 20k": extract(20_000, seed=3)[QI], "extract 100k": extract(100_000, seed=0)[QI]}
    solver = Solver.build("mdav")
    print("| input | rows | block size | k | IL %, bands 0.5 / 0.25, no sweeps | IL %, light now | change |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, frame in inputs.items():
        X = frame.to_numpy(dtype=np.float64)
        Z = np.ascontiguousarray((X - X.mean(axis=0)) / X.std(axis=0))
        for size in (500, 1000, 2500):
            if 2 * size > len(Z):
                continue
            plan = blocked.Blocking(block_size=size, blocks_per_task=8, one_block_rows=size)
            for k in (3, 5, 10):
                il = [_il(Z, blocked.blocked_partition(Z, k, solver, settings, plan, threads=2)[0])
                      for settings in (before, light)]
                print(f"| {name} | {len(Z):,} | {size:,} | {k} | {il[0]:.4f} | {il[1]:.4f} "
                      f"| {100 * (il[1] / il[0] - 1):+.1f} % |", flush=True)


def quality(args):
    from microagg import kernels
    from microagg.pipeline import blocked, stitch
    from microagg.pipeline.solver import Solver

    Z = _scale_rows(args)
    solver = Solver.build("mdav", None, "none", None, 0)
    blocked.blocked_partition(Z[:50_000], args.k, solver, stitch.STITCHING["light"], threads=1)  # warm-up
    kernels.mdav(np.ascontiguousarray(Z[:100]), args.k)
    print(f"{len(Z):,} rows x 13 QIs (the scale extract), k={args.k}, one thread\n")
    print("| partition | CPU s | IL % |\n| --- | ---: | ---: |")
    for name in ("light", "fast", "deep"):
        t = time.process_time()
        labels, _ = blocked.blocked_partition(Z, args.k, solver, stitch.STITCHING[name], threads=1)
        cpu = time.process_time() - t
        print(f"| blocked, --stitch {name} | {cpu:.2f} | {_il(Z, labels):.4f} |", flush=True)
    t = time.process_time()
    labels = kernels.mdav(Z, args.k)
    print(f"| global in-memory MDAV | {time.process_time() - t:.1f} | {_il(Z, labels):.4f} |")


FANIN_SHAPES = {10_000_000: ((255, 40), (10, 128)), 30_000_000: ((1023, 120), (30, 512)),
                100_000_000: ((4095, 400), (100, 2048))}
"""The default job's fan-ins at these rows, in one process: released pieces (block tasks and upper planes) x
output files (the write), and input partitions x block tasks (the routed rows)."""


def _fanin_piece(i):
    return np.zeros(8) + i


def _fanin_consumer(*inputs):
    return len(inputs)


def fanin(args):
    """The scheduler's cost alone of the one-process job's fan-ins, where each consumer needs every producer's
    whole output: the write (every output file's task over every released piece,
    ``pipeline.release._per_file``) and the routed rows (every block task over every routing task's output,
    ``pipeline.release._solve_pack_from``). On a LocalCluster of the CLI's default shape, the producers
    persisted first, then consumers that do nothing computed either straight from every producer or through
    :meth:`pipeline.graph.Layer.bundles`, alternated, best of ``--repeat``: seconds from submission to the
    last result, and the ratio."""
    from distributed import Client, LocalCluster, wait

    from microagg.jobs.cluster import NO_WORKER_PROFILER, local_shape
    from microagg.pipeline import graph

    workers, threads = local_shape(args.processes, args.workers, args.threads_per_worker)
    print("| rows | fan-in | producers x consumers | dependencies, direct / bundles | direct s | bundles s | ratio |")
    print("| ---: | --- | --- | --- | ---: | ---: | ---: |")
    with dask.config.set(NO_WORKER_PROFILER), \
            LocalCluster(n_workers=workers, threads_per_worker=threads, processes=args.processes,
                         dashboard_address=None) as cluster, Client(cluster):
        for rows in args.sizes:
            shapes = FANIN_SHAPES.get(rows) or ((max(rows // 39_000, 1), -(-rows // 250_000)),
                                                (max(rows // 1_000_000, 1), max(rows // 78_000, 1)))
            for name, (n_producers, n_consumers), kept in zip(("the write", "routed rows"), shapes, (True, False)):
                producers = dask.persist(*[dask.delayed(_fanin_piece)(i) for i in range(n_producers)])
                wait(list(producers))
                best = {"direct": np.inf, "bundles": np.inf}
                for _ in range(args.repeat):
                    for form in best:
                        layer = graph.Layer(f"fanin-{form}")
                        inputs = list(producers) if form == "direct" else layer.bundles("in", list(producers), kept)
                        out = layer.delayed([layer.task(("c", c), _fanin_consumer, *inputs) for c in range(n_consumers)])
                        t = time.perf_counter()
                        dask.compute(*out)
                        best[form] = min(best[form], time.perf_counter() - t)
                bundles = math.isqrt(n_producers - 1) + 1 if n_producers > graph.BUNDLE_MIN else 1
                print(f"| {rows:,} | {name} | {n_producers:,} x {n_consumers:,} | {n_producers * n_consumers:,} / "
                      f"{n_producers + n_consumers * bundles:,} | {best['direct']:.2f} | {best['bundles']:.2f} | "
                      f"{best['direct'] / best['bundles']:.1f}x |", flush=True)
                del producers


def tree(args):
    """The split tree's growth on the client: the one-core kernel against the pipeline's growth on the
    client's cores, on the sample of each ``--rows`` (see the module's docstring)."""
    import pandas as pd

    from microagg import kernels
    from microagg.pipeline import blocking

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    print(f"the client's cores: {len(os.sched_getaffinity(0))}; best of {args.repeat}, alternated\n")
    print("| input rows | sample rows | blocks | one core s | cores s | ratio | same tree |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for rows in args.sizes:
        source = make_extract(min(rows, 10_000_000), root)
        X = np.ascontiguousarray(pd.read_parquet(source, columns=QI).to_numpy(dtype=np.float64))
        fraction, _ = blocking.sample_plan(rows, args.block_size)  # the pipeline's sample of this input
        _, threshold = blocking.sample_plan(len(X), args.block_size, round(fraction * rows))
        mask = np.ones(len(X), bool) if threshold is None else kernels.sample_mask(
            np.arange(len(X), dtype=np.int64), 0, threshold)
        Z = kernels.standardize(np.ascontiguousarray(X[mask]), X.mean(axis=0), X.std(axis=0))
        del X
        grow = (float(len(Z)) / rows, float(args.block_size), 5000.0, max(blocking.MIN_LEAF_SAMPLE, args.k), np.empty(0))
        one, cores = [], []
        for _ in range(args.repeat):
            t = time.perf_counter()
            a = kernels.grow_tree(Z, *grow)
            one.append(time.perf_counter() - t)
            t = time.perf_counter()
            b = blocking.grow_tree(Z, *grow)
            cores.append(time.perf_counter() - t)
        same = all(np.array_equal(x, y) for x, y in zip(a[:5], b[:5])) and a[5] == b[5]
        print(f"| {rows:,} | {len(Z):,} | {a[5]:,} | {min(one):.3f} | {min(cores):.3f} | {min(one) / min(cores):.2f}x "
              f"| {'yes' if same else 'NO'} |", flush=True)


def _scale_rows(args):
    """The standardized QIs of ``scale``'s extract of ``--rows`` rows."""
    import pandas as pd

    from microagg import kernels

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    X = np.ascontiguousarray(pd.read_parquet(make_extract(args.rows, root), columns=QI).to_numpy(dtype=np.float64))
    return kernels.standardize(X, X.mean(axis=0), X.std(axis=0))


def _il(Z, labels):
    from microagg import kernels

    return 100 * kernels.sse(Z, labels, int(labels.max()) + 1) / Z.size


def _profile_blocking(Z, k, solver, stitch):
    """Where the blocked solve's time goes, default layout, one thread: seconds in the block kernels,
    the blocks' own local-search sweeps, the stitching windows inside the tasks and those of the upper
    planes, and the rows the stitching windows re-solved (a row near several planes counts once per plane)."""
    from microagg.pipeline import blocked

    seconds, calls, rows = collections.Counter(), collections.Counter(), collections.Counter()
    saved = {"solve_block": stitch.solve_block, "refine_sse": stitch.refine_sse, "stitch_upper": stitch.stitch_upper}
    saved_windows = stitch.windows.improve_recorded_windows
    upper = []  # inside an upper plane's stitching

    def timed(name, func):
        def call(*a, **kw):
            t = time.process_time()
            upper.append(name == "stitch_upper")
            try:
                return func(*a, **kw)
            finally:
                upper.pop()
                if name == "windows":
                    name_ = "windows (upper planes)" if upper and upper[-1] else "windows"
                    rows["upper planes" if upper and upper[-1] else "inside the tasks"] += int(a[5][a[2]].sum())
                else:
                    name_ = name
                seconds[name_] += time.process_time() - t
                calls[name_] += 1
        return call

    try:
        for name, func in saved.items():
            setattr(stitch, name, timed(name, func))
        stitch.windows.improve_recorded_windows = timed("windows", saved_windows)
        t = time.process_time()
        blocked.blocked_partition(Z, k, solver, stitch.STITCHING["light"], threads=1)
        total = time.process_time() - t
    finally:
        for name, func in saved.items():
            setattr(stitch, name, func)
        stitch.windows.improve_recorded_windows = saved_windows
    print(f"\nprofile of the default layout: {total:.2f} CPU s\n")
    print("| step | calls | CPU s | share |\n| --- | ---: | ---: | ---: |")
    labels = {"solve_block": "block kernels (the method)", "refine_sse": "the blocks' local-search sweeps",
              "windows": "stitching windows inside the tasks", "windows (upper planes)": "stitching windows of the upper planes"}
    for key, label in labels.items():
        print(f"| {label} | {calls[key]:,} | {seconds[key]:.2f} | {100 * seconds[key] / total:.0f} % |")
    rest = total - sum(seconds[key] for key in labels)
    print(f"| the rest (routing, task order, group table, selecting planes' groups, plane assignment) | | {rest:.2f} | "
          f"{100 * rest / total:.0f} % |")
    print(f"\nrows re-solved by the stitching windows: {rows['inside the tasks']:,} inside the tasks, "
          f"{rows['upper planes']:,} on upper planes ({len(Z):,} rows)")


def _timed(cmd):
    """``cmd`` in a subprocess: ``(seconds, peak RSS in GiB of its largest process)``; exits on failure."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    sampler = _PeakSampler(proc.pid, False)
    try:
        _, stderr = proc.communicate()
    finally:
        sampler.stop()
    seconds = time.perf_counter() - t
    if proc.returncode:
        print(stderr)
        raise SystemExit(proc.returncode)
    return seconds, max(sampler.peaks.values() or [0]) / 2**30


def evaluation(args):
    """The evaluation's cost against the anonymization's, in one run: ``microagg anonymize`` with
    ``--no-evaluate`` and with its default evaluation (the linkage of a sample of about
    ``--dld-records`` masked records), then ``microagg evaluate`` of that release with the same sample
    and with every record (the exact DLD)."""
    from microagg.jobs.cluster import local_shape
    from microagg.jobs.flags import RELEASE_DLD_RECORDS

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    source = make_extract(args.rows, root)
    workers, threads = local_shape(args.processes, args.workers, args.threads_per_worker)
    release = root / "release-evaluated"
    shutil.rmtree(release, ignore_errors=True)
    anonymize = [str(BIN / "microagg"), "anonymize", str(source), str(release), "--k", str(args.k), "--identifiers",
                 "person_id", "--qi", ",".join(QI), "--workers", str(workers), "--threads-per-worker", str(threads),
                 "--processes" if args.processes else "--no-processes", "--memory-limit", args.memory_limit]
    records = str(args.dld_records or RELEASE_DLD_RECORDS)
    print(f"{args.rows:,} rows x 13 QIs, k={args.k}; {workers} worker(s) x {threads} thread(s)\n")
    print("| command | seconds | peak RSS GiB | stages s | DLD % |")
    print("| --- | ---: | ---: | --- | --- |")

    def line(label, seconds, peak, timings, risk=None):
        stages = " / ".join(f"{n} {v:.1f}" for n, v in timings.items() if v >= 0.05)
        dld = ""
        if risk:
            dld = f"{risk['dld']:.3f}"
            if risk.get("dld_interval"):
                dld += f" ({risk['dld_interval'][0]:.3f}-{risk['dld_interval'][1]:.3f}, {risk['dld_records']:,} records)"
        print(f"| {label} | {seconds:.2f} | {peak:.2f} | {stages} | {dld} |", flush=True)

    seconds, peak = _timed(anonymize + ["--no-evaluate"])
    line("anonymize --no-evaluate", seconds, peak, json.loads((release / "_report.json").read_text())["timings"])
    base = seconds
    shutil.rmtree(release)
    seconds, peak = _timed(anonymize + ["--dld-records", records])
    report = json.loads((release / "_report.json").read_text())
    line(f"anonymize (evaluated, --dld-records {records})", seconds, peak, report["timings"],
         report["evaluation"]["disclosure_risk"])
    print(f"\nthe evaluation costs {seconds / base - 1:+.0%} of the anonymization's run "
          f"(evaluate stage {report['timings']['evaluate']:.1f} s)\n")
    for label, extra in ((f"evaluate --dld-records {records}", ["--dld-records", records]), ("evaluate (all)", [])):
        path = root / "evaluation.json"
        seconds, peak = _timed([str(BIN / "microagg"), "evaluate", str(source), str(release), "--qi", ",".join(QI),
                                "--k", str(args.k), "--report", str(path), "--no-html", *extra])
        found = json.loads(path.read_text())
        line(label, seconds, peak, found["timings"], found["disclosure_risk"])
    shutil.rmtree(release, ignore_errors=True)


def stream(args):
    """``release.run`` in this process on a LocalCluster of the CLI's default shape, Dask's task stream
    recorded: seconds per stage and compute seconds per kind of task (no process or cluster start: for
    A/B comparisons of the pipeline's code on the same machine minutes apart)."""
    from distributed import Client, LocalCluster, get_task_stream

    from microagg.jobs.cluster import local_shape
    from microagg.pipeline.release import ReleaseOptions, run

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    source = make_extract(args.rows, root)
    out = root / "stream-release"
    shutil.rmtree(out, ignore_errors=True)
    workers, threads = local_shape(args.processes, args.workers, args.threads_per_worker)
    with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=args.processes,
                      dashboard_address=None) as cluster, Client(cluster):
        options = ReleaseOptions(k=args.k, quasi_identifiers=tuple(QI), identifiers=("person_id",))
        with get_task_stream() as tasks:
            t = time.perf_counter()
            report = run(str(source), str(out), options, html=args.html)
            total = time.perf_counter() - t
    shutil.rmtree(out, ignore_errors=True)
    print(f"{args.rows:,} rows: {total:.2f} s in process; stages (s): {report['timings']}")
    per = collections.defaultdict(lambda: [0, 0.0])
    for task in tasks.data:
        key = task["key"]
        name = str(key[0] if isinstance(key, tuple) else key).rsplit("-", 1)[0]
        if name.startswith("microagg") and isinstance(key, tuple) and len(key) > 1:
            name += f":{key[1]}" + (":piece" if len(key) > 3 else "")
        for s in task["startstops"]:
            if s["action"] == "compute":
                per[name][0] += 1
                per[name][1] += s["stop"] - s["start"]
    print("| task | count | compute s |\n| --- | ---: | ---: |")
    for name, (count, seconds) in sorted(per.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"| {name} | {count} | {seconds:.2f} |")


CPU_TARGETS = ("host", "generic", "x86-64-v3")


def cpu(args):
    """``microagg anonymize`` end to end with Numba's machine code for each target CPU
    (``NUMBA_CPU_NAME``; host: unset, Numba's default), each target with a Numba cache of its own under
    the data directory (warmed by a first run, not counted), then ``--runs`` runs alternating the
    targets. Prints each target's seconds, the ratio of its best to the host's best, the blocks stage
    of its best run, the IL, and whether its release's Parquet files are the host's, byte for byte."""
    from microagg.jobs.cluster import local_shape

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    source = make_extract(args.rows, root)
    workers, threads = local_shape(args.processes, args.workers, args.threads_per_worker)
    print(f"{args.rows:,} rows x 13 QIs, k={args.k}; {workers} worker(s) x {threads} thread(s); "
          f"a warm-up run, then {args.runs} run(s) per target, alternated\n")
    results = {target: [] for target in CPU_TARGETS}
    for run in range(args.runs + 1):
        for target in CPU_TARGETS:
            env = {**os.environ, "NUMBA_CACHE_DIR": str(root / f"numba-cache-{target}")}
            env.pop("NUMBA_CPU_NAME", None)
            if target != "host":
                env["NUMBA_CPU_NAME"] = target
            seconds, report = _anonymize(args, source, root / f"release-cpu-{target}", workers, threads, env=env,
                                         digest=True)
            print(f"  {'warm-up' if run == 0 else f'run {run}'} {target}: {seconds:.2f} s", flush=True)
            if run:
                results[target].append((seconds, report))
    host = min(s for s, _ in results["host"])
    print("\n| NUMBA_CPU_NAME | runs s | best s | vs host | blocks stage s (best run) | IL % | release = host's |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    for target, runs in results.items():
        best, report = min(runs, key=lambda r: r[0])
        same = report["release_digest"] == results["host"][0][1]["release_digest"]
        print(f"| {target} | {', '.join(f'{s:.2f}' for s, _ in runs)} | {best:.2f} | {best / host:.2f}x | "
              f"{report['timings']['blocks']:.2f} | {report['information_loss']:.4f} | {'yes' if same else 'NO'} |")


def many_files_extract(rows, root, files):
    """The extract rewritten as ``files`` Parquet files of (nearly) equal row counts (cached)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = make_extract(rows, root)

    def build(path):
        table = pa.concat_tables(pq.read_table(part) for part in sorted(source.glob("part-*.parquet")))
        cuts = np.linspace(0, rows, files + 1).round().astype(int)
        for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
            pq.write_table(table.slice(a, b - a), path / f"part-{i:05d}.parquet")

    return _cached(Path(root) / f"extract-{rows}-{files}-files", build)


def _alternated(args, sources, release, workers, threads, digest=False, extra=()):
    """``microagg anonymize`` (with the options ``extra``) on each of ``sources`` (name -> input) in
    turn, ``--runs`` times: ``{name: [(seconds, report), ...]}``, each run printed."""
    results = {name: [] for name in sources}
    for run in range(args.runs):
        for name, source in sources.items():
            seconds, report = _anonymize(args, source, release, workers, threads, *extra, digest=digest)
            print(f"  run {run + 1} {name}: {seconds:.2f} s", flush=True)
            results[name].append((seconds, report))
    return results


def _stages(report):
    """``statistics / blocks / write`` seconds of a report."""
    return " / ".join(f"{report['timings'].get(s, 0):.1f}" for s in ("statistics", "blocks", "write"))


def files(args):
    """The extract's files against the same rows in ``--files`` small files (module docstring)."""
    from microagg.jobs.cluster import local_shape

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    sources = {"extract": make_extract(args.rows, root), "small files": many_files_extract(args.rows, root, args.files)}
    workers, threads = local_shape(args.processes, args.workers, args.threads_per_worker)
    print(f"{args.rows:,} rows x 13 QIs, k={args.k}; {workers} worker(s) x {threads} thread(s); "
          f"{len(list(sources['extract'].glob('*.parquet')))} file(s) against {args.files:,}\n")
    results = _alternated(args, sources, root / "release-files", workers, threads, digest=True)
    base = min(s for s, _ in results["extract"])
    print("\n| input | files | runs s | best s | vs extract | statistics / blocks / write s (best run) | IL % "
          "| same release |")
    print("| --- | ---: | --- | ---: | ---: | --- | ---: | --- |")
    for name, runs in results.items():
        best, report = min(runs, key=lambda r: r[0])
        stages = _stages(report)
        same = report["release_digest"] == results["extract"][0][1]["release_digest"]
        count = len(list(sources[name].glob("*.parquet")))
        print(f"| {name} | {count:,} | {', '.join(f'{s:.2f}' for s, _ in runs)} | {best:.2f} | {best / base:.2f}x "
              f"| {stages} | {report['information_loss']:.4f} | {'yes' if same else 'NO'} |")


def _one_frame(source):
    """The extract's Parquet files ``source`` as one pandas frame, in file order."""
    import pandas as pd

    return pd.concat([pd.read_parquet(part) for part in sorted(source.glob("part-*.parquet"))], ignore_index=True)


def csv_extracts(rows, root):
    """The extract as one CSV file with a postcode column of numbers; the same file with one text
    postcode at 90 % of the rows; the first file with a nullable bigint key, a warehouse's (2**62
    + the row, empty in every tenth row: read exactly as nullable integers); and the first file with a
    sparse decimal column, a refund empty in its first 10,000 rows (guessed a nullable integer from the
    sample, which holds no value of it: read again as float64 after a type pass) (cached)."""
    import pandas as pd

    source = make_extract(rows, root)

    def build(path):
        df = _one_frame(source)
        df["postcode"] = (df.index % 90_000 + 10_000).astype(str)
        df.to_csv(path / "numbers.csv", index=False)
        keyed = df.assign(key=pd.array([2**62 + i if i % 10 else None for i in range(rows)], dtype="Int64"))
        keyed.to_csv(path / "bigint-key.csv", index=False)
        refunds = [12.5 + i % 100 if i >= 10_000 and i % 50 == 0 else None for i in range(rows)]
        df.assign(refund=pd.array(refunds, dtype="Float64")).to_csv(path / "sparse-refund.csv", index=False)
        df.loc[int(0.9 * rows), "postcode"] = "SW1A 1AA"
        df.to_csv(path / "late-text.csv", index=False)

    path = _cached(Path(root) / f"extract-{rows}-csv3", build)
    return {"postcodes all numbers": path / "numbers.csv", "one text postcode at 90 %": path / "late-text.csv",
            "a nullable bigint key": path / "bigint-key.csv", "a decimal column empty in its first rows":
            path / "sparse-refund.csv"}


def quoted_extracts(rows, root):
    """The extract as one CSV file with a note holding a line break in every seventh row and a size
    ``12" pipe`` in one row, that value quoted; and the same file with that quote bare (cached)."""
    source = make_extract(rows, root)

    def build(path):
        df = _one_frame(source)
        i = np.arange(rows)
        df["size"] = np.where(i == rows // 1000, '12" pipe', (i % 9).astype(str) + " in")
        df["note"] = np.where(i % 7 == 0, "said no,\nthen " + i.astype(str), "plain " + i.astype(str))
        text = df.to_csv(index=False)
        (path / "quoted.csv").write_text(text)
        (path / "bare-quote.csv").write_text(text.replace('"12"" pipe"', '12" pipe', 1))

    path = _cached(Path(root) / f"extract-{rows}-quotes", build)
    return {"quotes as CSV writers put them": path / "quoted.csv", 'one bare quote (12" pipe)': path / "bare-quote.csv"}


def quotes(args):
    """A CSV input with a quote inside an unquoted field, against the same values quoted (module docstring)."""
    from microagg.jobs.cluster import local_shape

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    sources = quoted_extracts(args.rows, root)
    workers, threads = local_shape(args.processes, args.workers, args.threads_per_worker)
    print(f"{args.rows:,} rows x 13 QIs and a note with line breaks as one CSV file, k={args.k}; {workers} "
          f"worker(s) x {threads} thread(s)\n")
    results = _alternated(args, sources, root / "release-quotes", workers, threads, digest=True)
    first = next(iter(sources))
    base = min(s for s, _ in results[first])
    print("\n| input | runs s | best s | vs first | statistics / blocks / write s (best run) | same release | IL % |")
    print("| --- | --- | ---: | ---: | --- | --- | ---: |")
    for name, runs in results.items():
        best, report = min(runs, key=lambda r: r[0])
        same = report["release_digest"] == results[first][0][1]["release_digest"]
        print(f"| {name} | {', '.join(f'{s:.2f}' for s, _ in runs)} | {best:.2f} | {best / base:.2f}x "
              f"| {_stages(report)} | {'yes' if same else 'NO'} | {report['information_loss']:.4f} |")


def csv_types(args):
    """A CSV input whose column changes type part-way, against the same file without (module docstring)."""
    from microagg.jobs.cluster import local_shape

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    sources = csv_extracts(args.rows, root)
    workers, threads = local_shape(args.processes, args.workers, args.threads_per_worker)
    print(f"{args.rows:,} rows x 13 QIs as one CSV file, k={args.k}; {workers} worker(s) x {threads} thread(s)\n")
    results = _alternated(args, sources, root / "release-csv", workers, threads)
    base = min(s for s, _ in results[next(iter(sources))])
    print("\n| input | runs s | best s | vs first | statistics / blocks / write s (best run) | csv types s | "
          "types widened | IL % |")
    print("| --- | --- | ---: | ---: | --- | ---: | --- | ---: |")
    for name, runs in results.items():
        best, report = min(runs, key=lambda r: r[0])
        stages = _stages(report)
        widened = ", ".join(f"{c}: {t}" for c, t in (report.get("input_types_widened") or {}).items()) or "none"
        print(f"| {name} | {', '.join(f'{s:.2f}' for s, _ in runs)} | {best:.2f} | {best / base:.2f}x | {stages} "
              f"| {report['timings'].get('csv types', 0):.1f} | {widened} | {report['information_loss']:.4f} |")


def zeros(args):
    """A CSV input read with and without the check for whole numbers written with leading zeros after
    the first rows (module docstring)."""
    import dask

    from microagg.pipeline import io

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    path = csv_extracts(args.rows, root)["postcodes all numbers"]
    watch = ("flag", "postcode")
    print(f"{args.rows:,} rows x 13 QIs as one CSV file ({path.stat().st_size / 1e6:.0f} MB), kept columns of whole "
          f"numbers {', '.join(watch)}; every block read on the threaded scheduler, 2 threads, alternately\n")
    seconds = {"plain": [], "checked": []}
    for _ in range(args.repeat):
        for name, checked in (("plain", ()), ("checked", watch)):
            ddf = io.read_input(str(path), zeros=checked, warn=False)
            started = time.perf_counter()
            with dask.config.set(scheduler="threads", num_workers=2):
                rows = sum(dask.compute(*[dask.delayed(len)(p) for p in ddf.to_delayed()]))
            seconds[name].append(time.perf_counter() - started)
            assert rows == args.rows
    best = {name: min(runs) for name, runs in seconds.items()}
    print("| read | runs s | best s | vs plain |")
    print("| --- | --- | ---: | ---: |")
    for name, runs in seconds.items():
        print(f"| {name} | {', '.join(f'{s:.2f}' for s in runs)} | {best[name]:.2f} "
              f"| {best[name] / best['plain']:.3f}x |")


def ties(args):
    """The extract against the same rows with 90 % of the records all zeros (module docstring)."""
    from microagg.jobs.cluster import local_shape

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    sources = {"extract": make_extract(args.rows, root), "90 % zeros": derived_extract(args.rows, root, "zeros")}
    workers, threads = local_shape(args.processes, args.workers, args.threads_per_worker)
    print(f"{args.rows:,} rows x 13 QIs, k={args.k}; {workers} worker(s) x {threads} thread(s)\n")
    print("| method | input | runs s | best s | vs extract | statistics / blocks / write s (best run) | largest leaf "
          "| IL % |")
    print("| --- | --- | --- | ---: | ---: | --- | ---: | ---: |")
    for method in args.methods.split(","):
        results = _alternated(args, sources, root / "release-ties", workers, threads, extra=("--method", method))
        base = min(s for s, _ in results["extract"])
        for name, runs in results.items():
            best, report = min(runs, key=lambda r: r[0])
            print(f"| {method} | {name} | {', '.join(f'{s:.2f}' for s, _ in runs)} | {best:.2f} | {best / base:.2f}x "
                  f"| {_stages(report)} | {report['block_sizes']['max']:,} | {report['information_loss']:.4f} |",
                  flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("inprocess", "scale", "sweep", "methods", "modes", "blocking", "stream",
                                         "evaluate", "quality", "floors", "small", "cpu", "files", "csv", "quotes",
                                         "ties", "tree", "zeros", "fanin", "keeping"))
    parser.add_argument("--dld-records", type=int, default=None,
                        help="evaluate mode: the linkage sample (default: the release's, 1,000,000)")
    parser.add_argument("--html", action=argparse.BooleanOptionalAction, default=True,
                        help="stream mode: write the HTML page too")
    parser.add_argument("--evaluate", action="store_true",
                        help="scale / sweep: keep the job's default evaluation of the release (off here: the "
                             "floor only reads, sorts and writes)")
    parser.add_argument("--layouts", default="2500/32/6/0.5/0.25/0,2500/32/6,2500/32/6/0.5/0.25/0,2500/32/6",
                        help="blocking mode: block size / blocks per task / neighbour groups [/ band / upper band "
                             "[/ block sweeps]], in order (default: light before and after its block sweeps)")
    parser.add_argument("--profile", action="store_true",
                        help="blocking mode: also where the default layout's time goes")
    parser.add_argument("--modes", default=",".join(MODES), help="modes mode: which, in order")
    parser.add_argument("--methods", default="mdav,vmdav,dbm,mhm,auto", help="methods, ties modes: which, in order")
    parser.add_argument("--rows", type=row_counts, default=[100_000],
                        help="rows, e.g. 1000000 or 1M; sweep: a comma-separated list, e.g. 1M,10M,30M")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--block-size", type=int, default=2500, help="inprocess: the pipeline's default block size")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="default: as the CLI's local cluster")
    parser.add_argument("--threads-per-worker", type=int, default=None, help="default: as the CLI's local cluster")
    parser.add_argument("--processes", action=argparse.BooleanOptionalAction, default=False,
                        help="worker processes, or workers as threads of one process (default, as the CLI)")
    parser.add_argument("--memory-limit", default="auto")
    parser.add_argument("--floor-runs", type=int, default=3, help="scale: runs of the floor (the best is kept)")
    parser.add_argument("--runs", type=int, default=1, help="scale: runs of microagg (the best is kept)")
    parser.add_argument("--one-file", action="store_true",
                        help="scale: the extract as one Parquet file of 1M-row row groups")
    parser.add_argument("--files", type=int, default=2000, help="files mode: how many small files")
    parser.add_argument("--refine", default="none")
    parser.add_argument("--stitch", default="light", help="scale / sweep / methods / modes: the CLI's --stitch")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="sweep: seconds after which a floor run or a job counts as failed (killed)")
    parser.add_argument("--data", default=os.environ.get("MICROAGG_BENCH_DATA"),
                        help="where to cache generated data (default: the temp directory)")
    args = parser.parse_args()
    args.sizes, args.rows = args.rows, args.rows[0]
    if len(args.sizes) > 1 and args.mode not in ("sweep", "floors", "tree", "fanin"):
        parser.error("several --rows are for the sweep, floors, tree and fanin modes only")
    {"inprocess": inprocess, "scale": scale, "sweep": sweep, "methods": methods, "modes": modes,
     "blocking": blocking, "stream": stream, "evaluate": evaluation, "quality": quality,
     "floors": floors, "small": small, "cpu": cpu, "files": files, "csv": csv_types, "quotes": quotes,
     "ties": ties, "tree": tree, "zeros": zeros, "fanin": fanin, "keeping": keeping}[args.mode](args)


if __name__ == "__main__":
    main()
