"""Wall time of ``microagg anonymize`` projected to many workers from one measured run.

    .venv/bin/python tests/benchmarks/project_workers.py [--rows 1000000] [--workers 2,8,32,100]
        [--targets 10M,100M] [--bandwidth 1e9] [--threads-per-worker 1] [--two-level] [--direct-pieces N]
        [--data DIR]

Runs the pipeline once in this process on a LocalCluster of the CLI's default shape (one worker, a
thread per core) on the synthetic extract of ``bench_pipeline.py`` (k=5, default method and options),
after a warm-up run on 50k rows, and records:

* every task: its compute seconds (``distributed.get_task_stream``), the bytes of its result and its
  dependencies (a scheduler plugin), labelled by the pipeline function it runs (``_route``,
  ``_solve_task``, ``_stitch_upper``, ``_by_file``, ``_assemble``; a piece of a task's list output as
  ``LABEL[piece]``) or else by Dask's key prefix (``read_parquet``, ``replace_qis``, ...);
* every stage's wall-clock window (the pipeline's ``stage ...`` log records), so each task belongs to
  the stage in which it started, and the time inside a stage during which no task computes: the
  client's serial work (graph building, the split tree, the gate's checks) and scheduling.

Then it projects the wall time at each number of workers for each target size with the model printed
under "Model" (every assumption is there) and names the stage, and the term, that limits it at the
largest number of workers. Validate at 1M rows only on a small machine; the model's own check is its
figure at the measured shape against the measured wall time.
"""

import argparse
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_pipeline import make_extract, row_counts  # noqa: E402
from synthetic import QI, extract  # noqa: E402

from microagg.pipeline.stitch import UPPER_ROWS  # noqa: E402

INPUT_ROWS_PER_PARTITION = 1_000_000
"""Rows per input partition of the extract (make_extract writes files of a million rows, each read as
one partition)."""
GROWS = ("_stitch_upper",)
"""Labels of tasks whose size grows with the rows: an upper plane's stitching re-solves the groups of
every task below it that lie near the plane (the root plane's: near it anywhere in the data), up to
``pipeline.stitch.UPPER_ROWS`` rows (:func:`_growth`)."""
FAN_OUT = {
    "_route": "every input partition sends a piece to every block task",
    "_by_file": "every released piece sends a piece to every output file",
}
"""Labels whose outputs are cut into pieces for a number of consumers that grows with the rows too: an
all-to-all exchange (``pipeline.graph.Layer.exchange``), whose tasks (``[piece]``, and past
``graph.DIRECT_PIECES`` the two-level form's slices, merges and their pieces) are counted at the
target by ``graph.exchange_tasks``."""
FIXED = ("html",)
"""Stages whose cost does not grow with the rows: the report page is drawn from summaries of a fixed
size (histogram bins, correlation matrices), 1.7 s at 1M rows and 2.3 s at 10M here."""
PIPELINE_DIRECT = None
"""The pipeline's ``graph.DIRECT_PIECES``, read before ``--two-level`` changes it for the measured run:
the projection is of the pipeline as it ships."""
EXCHANGE = ("_slice", "_merge_slices", "_merge_slices[piece]", *(f"{k}[piece]" for k in FAN_OUT))
"""Labels of the exchanges' own tasks (not counted linearly)."""


# --- measuring ---------------------------------------------------------------------------------------

class _Stages(logging.Handler):
    """Wall-clock windows of the pipeline's stages, from its log records (``pipeline.release.Timings``)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.windows = []  # (stage, start, end), seconds since the epoch
        self.tree_seconds = 0.0
        self._open = {}

    def emit(self, record):
        if record.msg == "stage %s ..." and record.args:
            self._open[record.args[0]] = record.created
        elif record.msg == "stage %s done in %.2f s" and record.args:
            name = record.args[0]
            self.windows.append((name, self._open.pop(name, record.created - record.args[1]), record.created))
        elif str(record.msg).startswith("split tree") and record.args:
            self.tree_seconds += float(record.args[-1])


def _recorder(scheduler):
    """A scheduler plugin (the scheduler runs in this process) recording, for every task that finishes,
    its label, the bytes of its result and its dependencies."""
    from dask.utils import key_split
    from distributed.diagnostics.plugin import SchedulerPlugin

    class Recorder(SchedulerPlugin):
        def __init__(self):
            self.tasks = {}  # key: (label, nbytes, dependency keys)

        def transition(self, key, start, finish, *args, **kwargs):
            if finish != "memory" or key in self.tasks:
                return
            ts = scheduler.tasks.get(key)
            if ts is None:
                return
            deps = [d.key for d in ts.dependencies]
            func = getattr(ts.run_spec, "func", None)
            name = getattr(func, "__name__", "")
            if name == "getitem" and len(deps) == 1 and deps[0] in self.tasks:
                label = self.tasks[deps[0]][0].removesuffix("[piece]") + "[piece]"
            elif getattr(func, "__module__", "").startswith("microagg"):
                label = name
            else:
                label = key_split(key)
            self.tasks[key] = (label, max(ts.nbytes, 0), deps)

    return Recorder()


def _nothing(i):
    return None


def task_overhead(n=4000, repeat=2):
    """Seconds per task of building, scheduling and running ``n`` trivial tasks on the active cluster
    (the best of ``repeat``): what every task costs beyond its own work."""
    import dask

    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        dask.compute(*[dask.delayed(_nothing, pure=False)(i) for i in range(n)])
        best = min(best, (time.perf_counter() - start) / n)
    return best


def measure(source, warm_up, out, cores):
    """One in-process run of the pipeline on ``source`` (after one on ``warm_up``): ``(wall seconds,
    report, stage windows, split-tree seconds, tasks, compute intervals per key, seconds per task of
    overhead)``."""
    from distributed import Client, LocalCluster, get_task_stream

    from microagg.pipeline.release import ReleaseOptions, run

    options = ReleaseOptions(k=5, quasi_identifiers=tuple(QI), identifiers=("person_id",))
    stages = _Stages()
    logger = logging.getLogger("microagg.pipeline.release")
    logger.setLevel(logging.INFO)
    with LocalCluster(n_workers=1, threads_per_worker=cores, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        run(str(warm_up), str(out), options)  # Numba caches and imports loaded on the worker threads
        shutil.rmtree(out, ignore_errors=True)
        overhead = task_overhead()  # before the recorder sees any task
        recorder = _recorder(cluster.scheduler)
        cluster.scheduler.add_plugin(recorder, name="microagg-projection")
        logger.addHandler(stages)
        try:
            with get_task_stream(client) as stream:
                start = time.perf_counter()
                report = run(str(source), str(out), options)
                wall = time.perf_counter() - start
        finally:
            logger.removeHandler(stages)
        shutil.rmtree(out, ignore_errors=True)
    compute = defaultdict(list)
    for record in stream.data:
        for s in record["startstops"]:
            if s["action"] == "compute":
                compute[record["key"]].append((s["start"], s["stop"]))
    return wall, report, stages.windows, stages.tree_seconds, recorder.tasks, compute, overhead


# --- the measured run, per stage -------------------------------------------------------------------------

def _union(intervals):
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _longest_path(stage, tasks, seconds):
    """The longest chain of dependent tasks of a stage, each task costing ``seconds[key]``."""
    inside = set(stage["keys"])
    memo = {}
    for key in sorted(stage["keys"], key=lambda k: stage["start"].get(k, 0.0)):  # dependencies started first
        before = [memo[d] for d in tasks[key][2] if d in inside and d in memo]
        memo[key] = seconds[key] + max(before, default=0.0)
    return max(memo.values(), default=0.0)


def per_stage(windows, tasks, compute):
    """The measured run cut by stage: a dict of stage -> wall, CPU, idle, task counts, critical path
    (as measured, and with the growing tasks marked), bytes moved between tasks."""
    first_start = {key: min(a for a, _ in spans) for key, spans in compute.items()}
    stage_of = {}
    for key, start in first_start.items():
        stage_of[key] = next((name for name, a, b in windows if a <= start < b), "between stages")
    for key in tasks:  # a task that never computed (an alias) belongs to its first dependency's stage
        stage_of.setdefault(key, next((stage_of[d] for d in tasks[key][2] if d in stage_of), "between stages"))
    names = list(dict.fromkeys([name for name, _, _ in windows] + sorted(set(stage_of.values()))))
    stages = {}
    for name in names:
        keys = [k for k in tasks if stage_of.get(k) == name]
        spans = [s for k in keys for s in compute.get(k, [])]
        wall = sum(b - a for n, a, b in windows if n == name)
        busy = _union([(max(a, wa), min(b, wb)) for a, b in spans for n, wa, wb in windows
                       if n == name and min(b, wb) > max(a, wa)])
        seconds = {k: sum(b - a for a, b in compute.get(k, [])) for k in keys}
        moved = 0
        for k in keys:  # a task runs where its largest input is; the others travel to it
            sizes = [tasks[d][1] for d in tasks[k][2] if d in tasks]
            moved += sum(sizes) - max(sizes, default=0)
        stages[name] = {
            "wall": wall,
            "cpu": sum(seconds.values()),
            "idle": max(wall - busy, 0.0),
            "keys": keys,
            "seconds": seconds,
            "start": {k: first_start[k] for k in keys if k in first_start},
            "moved": moved,
        }
    return stages


# --- the model -------------------------------------------------------------------------------------------

MODEL = """Model (one stage after another: each stage waits for the previous one)
  f = target rows / measured rows; cores = workers x threads per worker; B = network bandwidth per worker.
  stage time = client + max(parallel, critical path, scheduling) + transfer, where
  * client = the measured time inside the stage during which no task computed (the client building the
    graphs and the split tree on a sample of the rows, the gate's checks) x f: serial, it grows with
    the rows and does not shrink with the workers;
  * parallel = the stage's task CPU-seconds x f / cores: per-task costs scale linearly with the rows and
    spread evenly over all cores (reading included: each worker reads from storage at the same speed);
  * scheduling = the stage's number of tasks x {overhead_ms:.2f} ms ({overhead_source}): the scheduler
    handles one task at a time, alongside the computing. Tasks grow with f, except the exchanges of the
    fan-out tasks ({fan}): producers x consumers pieces up to {direct:,}, beyond that the two-level
    form's P x g slices + b x g merges + b x C pieces, b x g ~ min(P, C), about 2 min(P, C) x
    sqrt(max(P, C)) tasks (pipeline.graph.exchange_plan); input partitions: max(rows / {per_partition:,}, 2 x cores)
    (microagg splits an input read as fewer partitions than twice the cores), output files: rows /
    1,000,000;
  * critical path = the longest chain of dependent tasks in the stage as measured, with the tasks that
    grow with the rows ({grows}) x f, up to the pipeline's bound of {upper:,} rows per plane
    (pipeline.stitch.UPPER_ROWS): an upper plane's stitching waits for every block task below it, and
    the root plane's gathers groups from the whole data set; it does not shrink with the workers;
  * transfer = bytes that change worker x f x (1 - 1/workers) / (workers x B): every task runs on the
    worker holding its largest input and receives the others (each other input on another worker with
    probability 1 - 1/workers), every worker's link busy in parallel, no overlap with computing; twice
    that in a stage whose exchange takes two levels at the target (all its moved bytes counted twice);
  * the two-level exchange's merges (a copy of the data in transit) are in "parallel" only if the
    measured run made them (--two-level);
  * the stages {fixed} cost what they cost in the measured run, whatever the rows;
  * not included: process start, imports and cluster start (about 2 s for the CLI), worker failures,
    spilling, stragglers, stages the measured run did not have."""


def _count(tasks, label):
    return sum(1 for v in tasks.values() if v[0] == label)


def _exchanges(stage, tasks, target, f, cores):
    """``(producers, consumers)`` at ``target`` rows of each fan-out exchange the stage makes."""
    labels = {tasks[k][0] for k in stage["keys"]}
    out = []
    if "_route" in labels:  # input partitions -> block tasks
        out.append((max(math.ceil(target / INPUT_ROWS_PER_PARTITION), 2 * cores),
                    math.ceil(_count(tasks, "_solve_task") * f)))
    if "_by_file" in labels:  # released pieces -> output files
        from microagg.pipeline.release import ReleaseOptions

        out.append((math.ceil(_count(tasks, "_by_file") * f), max(1, math.ceil(target / ReleaseOptions.rows_per_file))))
    return out


def _task_counts(stage, tasks, target, f, cores):
    """Tasks of a stage at ``target`` rows by the model's rule: every task family grows with ``f``; the
    exchanges of the fan-out families are counted by ``graph.exchange_tasks`` (producers x consumers
    while direct, about ``2 min(P, C) sqrt(max(P, C))`` in two levels)."""
    from microagg.pipeline import graph

    linear = sum(f for k in stage["keys"] if tasks[k][0] not in EXCHANGE)
    return linear + sum(graph.exchange_tasks(p, c, PIPELINE_DIRECT, target)
                        for p, c in _exchanges(stage, tasks, target, f, cores))


def _two_level(stage, tasks, target, f, cores):
    """Whether the stage's exchange takes two levels at ``target`` (its data then travel twice)."""
    from microagg.pipeline import graph

    return any(graph.exchange_plan(p, c, PIPELINE_DIRECT, target) is not None
               for p, c in _exchanges(stage, tasks, target, f, cores))


ROW_BYTES = 8 * (len(QI) + 3)
"""Bytes per row on its way to an upper plane (``pipeline.release.Rows``: row id, leaf, the QI values,
group id)."""


def _growth(tasks, key, f):
    """How much longer the task ``key`` takes at ``f`` times the rows: 1, or for an upper plane's
    stitching (:data:`GROWS`) ``f``, but no more than up to ``pipeline.stitch.UPPER_ROWS`` rows (its
    rows measured as its inputs' bytes / :data:`ROW_BYTES`)."""
    label, _, deps = tasks[key]
    if label not in GROWS:
        return 1.0
    rows = sum(tasks[d][1] for d in deps if d in tasks) / ROW_BYTES
    return min(f, max(1.0, UPPER_ROWS / rows)) if rows > 0 else f


def project(stages, tasks, rows, target, workers, threads, bandwidth, overhead):
    """Projected seconds per stage, each with its terms: ``{stage: (total, {term: seconds})}``."""
    cores = workers * threads
    f = target / rows
    out = {}
    for name, s in stages.items():
        client = s["idle"] * (1.0 if name in FIXED else f)
        scheduling = overhead * _task_counts(s, tasks, target, f, cores)
        parallel = s["cpu"] * f / cores
        scaled = {k: v * _growth(tasks, k, f) for k, v in s["seconds"].items()}
        path = _longest_path(s, tasks, scaled)
        transfer = s["moved"] * f * (1 - 1 / workers) / (workers * bandwidth) if workers > 1 else 0.0
        transfer *= 2 if _two_level(s, tasks, target, f, cores) else 1
        terms = {"client": client, "parallel": parallel, "critical path": path, "scheduling": scheduling,
                 "transfer": transfer}
        out[name] = (client + max(parallel, path, scheduling) + transfer, terms)
    return out


def _limit(projection):
    """The stage that takes longest, and its largest term."""
    stage, (total, terms) = max(projection.items(), key=lambda kv: kv[1][0])
    return stage, max(terms, key=terms.get), total, terms


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=row_counts, default=[1_000_000], help="rows of the measured run (default 1M)")
    parser.add_argument("--workers", default="2,8,32,100", help="numbers of workers to project to")
    parser.add_argument("--targets", type=row_counts, default=[10_000_000, 100_000_000], help="rows to project to")
    parser.add_argument("--threads-per-worker", type=int, default=1, help="cores per projected worker (default 1)")
    parser.add_argument("--bandwidth", type=float, default=1e9, help="network bytes per second per worker (1 GB/s)")
    parser.add_argument("--task-overhead", type=float, default=None, metavar="SECONDS",
                        help="the scheduler's cost per task (default: measured here with trivial tasks; "
                             "distributed's documentation says about 1 ms)")
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)),
                        help="threads of the measuring worker (default: this machine's cores, as the CLI)")
    parser.add_argument("--data", default=os.environ.get("MICROAGG_BENCH_DATA"),
                        help="where the extracts are cached (default: the temp directory)")
    parser.add_argument("--two-level", action="store_true",
                        help="measure with the two-level exchange (as a large cluster runs it) instead of the "
                             "direct one this size takes")
    parser.add_argument("--direct-pieces", type=int, default=None,
                        help="project a pipeline whose exchanges stay direct up to this many pieces (default: "
                             "graph.DIRECT_PIECES, as it ships; a huge number: every exchange direct)")
    args = parser.parse_args()
    from microagg.pipeline import graph

    global PIPELINE_DIRECT
    PIPELINE_DIRECT = graph.DIRECT_PIECES if args.direct_pieces is None else args.direct_pieces
    if args.two_level:
        graph.DIRECT_PIECES = 0
    rows = args.rows[0]
    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    source = make_extract(rows, root)
    warm_up = root / "warm-up-50000.parquet"
    if not warm_up.exists():
        extract(50_000, seed=9).to_parquet(warm_up, index=False)
    wall, report, windows, tree_seconds, tasks, compute, overhead = measure(source, warm_up, root / "projection-out",
                                                                            args.cores)
    stages = per_stage(windows, tasks, compute)
    source_of_overhead = (f"measured here: {overhead * 1e3:.2f} ms per trivial task, with the client, the "
                          f"scheduler and the worker threads in one process; distributed's documentation "
                          f"says about 1 ms" if args.task_overhead is None else "given")
    overhead = overhead if args.task_overhead is None else args.task_overhead

    print(f"measured: {rows:,} rows x 13 QIs, k=5, default method and options, in one process on a LocalCluster of "
          f"1 worker x {args.cores} threads: {wall:.2f} s wall, {report['tasks']} block tasks, "
          f"{report['upper_planes']} upper planes, IL {report['information_loss']:.4f} %; "
          f"split tree built on the client in {tree_seconds:.2f} s\n")
    print("| stage | wall s | tasks | task CPU s | no task computing s | critical path s | bytes between tasks MB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, s in stages.items():
        path = _longest_path(s, tasks, s["seconds"])
        print(f"| {name} | {s['wall']:.2f} | {len(s['keys'])} | {s['cpu']:.2f} | {s['idle']:.2f} | {path:.2f} | "
              f"{s['moved'] / 1e6:.1f} |")
    by_label = defaultdict(lambda: [0, 0.0, 0.0, 0])
    for key, (label, nbytes, _) in tasks.items():
        seconds = sum(b - a for a, b in compute.get(key, []))
        entry = by_label[label]
        entry[0] += 1
        entry[1] += seconds
        entry[2] = max(entry[2], seconds)
        entry[3] += nbytes
    print("\n| task | count | CPU s | longest s | results MB |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, (n, cpu, longest, nbytes) in sorted(by_label.items(), key=lambda kv: -kv[1][1]):
        if cpu >= 0.01 or nbytes >= 1e6:
            print(f"| {label} | {n} | {cpu:.2f} | {longest:.3f} | {nbytes / 1e6:.1f} |")
    missing = [label for label in (*GROWS, *FAN_OUT) if label not in by_label]
    if missing:
        print(f"\nnote: no task labelled {', '.join(missing)} was seen; the model treats such tasks as linear")

    print("\n" + MODEL.format(fan="; ".join(f"{k}: {v}" for k, v in FAN_OUT.items()), grows=", ".join(GROWS),
                              per_partition=INPUT_ROWS_PER_PARTITION, overhead_ms=overhead * 1e3, direct=PIPELINE_DIRECT, fixed=", ".join(FIXED),
                              overhead_source=source_of_overhead, upper=UPPER_ROWS))
    print(f"  Here: B = {args.bandwidth / 1e9:g} GB/s per worker, {args.threads_per_worker} core(s) per worker.")

    check = project(stages, tasks, rows, rows, 1, args.cores, args.bandwidth, overhead)
    print(f"\nCheck: the model at the measured size and shape (1 worker x {args.cores} threads) gives "
          f"{sum(t for t, _ in check.values()):.2f} s against {wall:.2f} s measured (the sum of the stage windows: "
          f"{sum(s['wall'] for s in stages.values()):.2f} s).")

    workers = [int(w) for w in args.workers.split(",")]
    names = [n for n in stages if n != "between stages"] + (["between stages"] if "between stages" in stages else [])
    print(f"\n| rows | workers | projected s | {' | '.join(names)} | limited by |")
    print(f"| ---: | ---: | ---: | {' | '.join('---:' for _ in names)} | --- |")
    limits = {}
    for target in args.targets:
        for w in workers:
            projection = project(stages, tasks, rows, target, w, args.threads_per_worker, args.bandwidth, overhead)
            stage, term, _, _ = _limit(projection)
            total = sum(t for t, _ in projection.values())
            limits[(target, w)] = (stage, term, projection)
            print(f"| {target:,} | {w} | {total:.1f} | "
                  f"{' | '.join(f'{projection[n][0]:.1f}' for n in names)} | {stage}: {term} |")
    print()
    for target in args.targets:
        w = max(workers)
        stage, term, projection = limits[(target, w)]
        terms = projection[stage][1]
        print(f"At {w} workers and {target:,} rows the {stage} stage limits ({projection[stage][0]:.1f} of "
              f"{sum(t for t, _ in projection.values()):.1f} s), by its {term}: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in terms.items()))


if __name__ == "__main__":
    main()
