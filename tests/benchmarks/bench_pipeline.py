"""The distributed pipeline against its baselines, measured in the same run.

    .venv/bin/python tests/benchmarks/bench_pipeline.py inprocess [--rows 100000]
    .venv/bin/python tests/benchmarks/bench_pipeline.py scale --rows 1000000 [--processes] [--workers N]
    .venv/bin/python tests/benchmarks/bench_pipeline.py methods --rows 1000000 [--methods mdav,vmdav,dbm,mhm,auto]
    .venv/bin/python tests/benchmarks/bench_pipeline.py modes --rows 1000000 [--modes plain,noise,where]

``inprocess``: the blocked path in this process, against global in-memory MDAV on the same 100k x 13
rows, k=5 (information loss and seconds): in memory without Dask (``microagg.partition(...,
block_size=...)``, tasks on 2 threads) and through the Dask pipeline (threaded scheduler, 2 threads,
the release built and computed). Both form the same groups.

``scale``: the floor (Dask alone on a LocalCluster: read the Parquet files, sort by one column, write
Parquet; the best of three runs) and then ``microagg anonymize`` end to end (the CLI in a subprocess, cluster start
included), on the same synthetic extract (person_id, 13 QIs, region, flag: 16 columns), k=5. Prints
seconds, rows per second, the ratio to the floor, the time per stage, peak RSS per worker and IL.

``modes``: the release modes of issue 5 (plain, Laplace noise, preference range, median and trimmed
aggregates, strata, attribute blocks) end to end.

``methods``: the CLI end to end with each block method on the same extract (issue 4): IL, seconds
and the ratio to the first method's seconds.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synthetic import QI, extract  # noqa: E402

BIN = Path(sys.executable).parent


def make_extract(rows, root, rows_per_file=1_000_000):
    """Synthetic extract as Parquet files (generated file by file; cached by size)."""
    path = Path(root) / f"extract-{rows}"
    if (path / "_DONE").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    for i, start in enumerate(range(0, rows, rows_per_file)):
        n = min(rows_per_file, rows - start)
        df = extract(n, seed=100 + i)
        df["person_id"] += start * 7
        df.to_parquet(path / f"part-{i:04d}.parquet", index=False)
    (path / "_DONE").touch()
    return path


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


DERIVED = {"holes": _holes, "weighted": _weighted}


def derived_extract(rows, root, name):
    """The extract with ``DERIVED[name]`` applied file by file (cached)."""
    source = make_extract(rows, root)
    path = Path(root) / f"extract-{rows}-{name}"
    if (path / "_DONE").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    import pandas as pd

    for i, part in enumerate(sorted(source.glob("part-*.parquet"))):
        DERIVED[name](pd.read_parquet(part), i).to_parquet(path / part.name, index=False)
    (path / "_DONE").touch()
    return path


def inprocess(args):
    import dask
    import dask.dataframe as dd
    import pandas as pd

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


def _anonymize(args, source, release, workers, threads, *extra):
    """``microagg anonymize`` on ``source`` in a subprocess: ``(seconds, report)``; the release is removed."""
    t = time.perf_counter()
    cmd = [str(BIN / "microagg"), "anonymize", str(source), str(release), "--k", str(args.k),
           "--identifiers", "person_id", "--qi", ",".join(QI), "--workers", str(workers),
           "--threads-per-worker", str(threads), "--processes" if args.processes else "--no-processes",
           "--memory-limit", args.memory_limit, "--refine", args.refine, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    total = time.perf_counter() - t
    if proc.returncode:
        print(proc.stderr)
        raise SystemExit(proc.returncode)
    report = json.loads((Path(release) / "_report.json").read_text())
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
    """The block methods of issue 4 on the same extract."""
    _variants(args, [(m, ["--method", m]) for m in args.methods.split(",")])


MODES = {
    "plain": [],
    "noise": ["--noise", "laplace", "--epsilon", "1"],
    "where": ["--release-where", "q0 >= 0 and q1 <= 1"],
    "median": ["--aggregate", "median"],
    "trimmed": ["--aggregate", "trimmed"],
    "strata": ["--strata", "region"],
    "blocks": ["--blocks", "q0,q1,q2,q3,q4,q5;q6,q7,q8,q9,q10,q11,q12"],
    "weighted": ["--weights", "weight"],
    "missing": ["--missing", "centroid"],
}
DATA = {"weighted": "weighted", "missing": "holes"}  # modes that need a derived extract


def modes(args):
    """The release modes of issue 5 against the plain release on the same extract."""
    _variants(args, [(m, MODES[m]) for m in args.modes.split(",")])


def scale(args):
    from distributed import Client, LocalCluster

    import dask.dataframe as dd

    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    t = time.perf_counter()
    source = make_extract(args.rows, root)
    print(f"data: {args.rows:,} rows x 16 columns at {source} ({time.perf_counter() - t:.1f} s to make or find)")
    out = root / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    # the floor: Dask alone, same cluster shape
    from microagg.jobs.cluster import local_shape

    workers, threads = local_shape(args.processes, args.workers, args.threads_per_worker)
    with LocalCluster(n_workers=workers, threads_per_worker=threads, dashboard_address=None,
                      processes=args.processes, memory_limit=args.memory_limit) as cluster, Client(cluster):
        runs = []
        for i in range(args.floor_runs):  # the floor is noisy on a small machine: keep its best run
            t = time.perf_counter()
            dd.read_parquet(str(source)).sort_values("q0").to_parquet(str(out / f"floor-{i}"), write_index=False)
            runs.append(time.perf_counter() - t)
        floor = min(runs)
    shape = f"{workers} worker {'process(es)' if args.processes else '(threads of one process)'} x {threads} thread(s)"
    print(f"floor (read, sort by one column, write; {shape}): {floor:.2f} s "
          f"(best of {args.floor_runs}: {', '.join(f'{r:.2f}' for r in runs)})")
    total, report = _anonymize(args, source, out / "release", workers, threads)
    print(f"microagg anonymize (CLI end to end, cluster start included): {total:.2f} s, "
          f"{args.rows / total:,.0f} rows/s, {total / floor:.2f}x the floor")
    print(f"  stages (s): {report['timings']}")
    print(f"  IL {report['information_loss']:.4f} %, {report['blocks']} blocks in {report['tasks']} tasks, "
          f"{report['upper_planes']} upper planes; peak RSS per worker: max {_peak(report):.2f} GiB "
          f"({', '.join(f'{v / 2**30:.2f}' for v in report['workers']['peak_rss_bytes'].values())})")
    shutil.rmtree(out, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("inprocess", "scale", "methods", "modes"))
    parser.add_argument("--modes", default=",".join(MODES), help="modes mode: which, in order")
    parser.add_argument("--methods", default="mdav,vmdav,dbm,mhm,auto", help="methods mode: which, in order")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--block-size", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="default: as the CLI's local cluster")
    parser.add_argument("--threads-per-worker", type=int, default=None, help="default: as the CLI's local cluster")
    parser.add_argument("--processes", action=argparse.BooleanOptionalAction, default=False,
                        help="worker processes, or workers as threads of one process (default, as the CLI)")
    parser.add_argument("--memory-limit", default="auto")
    parser.add_argument("--floor-runs", type=int, default=3, help="scale: runs of the floor (the best is kept)")
    parser.add_argument("--refine", default="none")
    parser.add_argument("--data", default=os.environ.get("MICROAGG_BENCH_DATA"),
                        help="where to cache generated data (default: the temp directory)")
    args = parser.parse_args()
    {"inprocess": inprocess, "scale": scale, "methods": methods, "modes": modes}[args.mode](args)


if __name__ == "__main__":
    main()
