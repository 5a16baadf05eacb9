"""Wall time of ``microagg anonymize`` projected to many workers from one measured run.

    .venv/bin/python tests/benchmarks/project_workers.py [--rows 1M,10M] [--workers 2,8,32,100]
        [--targets 10M,100M] [--bandwidth 1e9] [--threads-per-worker 1] [--two-level] [--direct-pieces N]
        [--data DIR]

Runs the pipeline twice in this process on a LocalCluster of one worker per core (one thread each) on
the synthetic extract of ``bench_pipeline.py`` (k=5, default method and options), after a warm-up run on
50k rows: once as workers that do not share the job's scratch directory run it (the rows move between
stages in memory, through all-to-all exchanges of pieces) and once as workers that do (the rows in
transit and the released pieces through its files: no exchange; forced by
``release.TRANSIT_MEMORY_SHARE = 0``). With one worker the pipeline takes neither graph: its tasks read
each other's whole outputs (``release._shares_outputs``, ``release._per_file``). Each run records:

* every task: its compute seconds (``distributed.get_task_stream``), the bytes of its result and its
  dependencies (a scheduler plugin), labelled by the pipeline function it runs (``_route``,
  ``_solve_pack``, ``_stitch_upper``, ``_by_file``, ``_led``; a piece of a task's list output as
  ``LABEL[piece]``) or else by Dask's key prefix (``read_parquet``, ``replace_qis``, ...);
* every stage's wall-clock window (the pipeline's ``stage ...`` log records), so each task belongs to
  the stage in which it started, and the time inside a stage during which no task computes: the
  client's serial work (graph building, the split tree, the gate's checks) and scheduling.

Then it projects the wall time of each graph at each number of workers for each target size with the
model printed under "Model" (every assumption is there) and names the stage, and the term, that limits
it at the largest number of workers. It measures 1M and 10M rows by default (both paths, about two minutes
on 2 cores): the model takes its terms from the larger run and fits the client's serial time through both.
The model's own check is its figure at the measured shape against the measured wall time.
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
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_pipeline import make_extract, row_counts  # noqa: E402
from synthetic import QI, extract  # noqa: E402

from microagg.pipeline.stitch import UPPER_ROWS  # noqa: E402

INPUT_ROWS_PER_PARTITION = 1_000_000
"""Rows per input partition of the extract (make_extract writes files of a million rows, each read as
one partition)."""
PATHS = {
    "memory": ("workers that do not all see the job's scratch directory (Dask's temporary-directory on hosts "
               "that share no filesystem): the rows travel in memory, through two all-to-all exchanges",
               {"route": "_route", "solve": "_solve_pack", "upper": "_stitch_upper", "file": "_by_file"}),
    "files": ("workers that all see it (one host, or a filesystem the hosts share): the rows in transit and the "
              "released pieces go through its files, and each task reads its own rows from every producer's "
              "file; no exchange", {"route": "_route_to_file", "solve": "_solve_pack_read",
                                   "upper": "_stitch_upper_read", "file": "_from_pieces"}),
}
"""The two graphs a cluster of several workers runs (``pipeline.release.transit_directory``), each measured:
its description, and the pipeline functions of its routing, block, upper-plane and file tasks."""
GROWS = tuple(labels["upper"] for _, labels in PATHS.values())
"""Labels of tasks whose size grows with the rows: an upper plane's stitching re-solves the groups of
every task below it that lie near the plane (the root plane's: near it anywhere in the data), up to
``pipeline.stitch.UPPER_ROWS`` rows (:func:`_growth`)."""
FAN_OUT = {
    "_route": "every input partition sends a piece to every block task",
    "_by_file": "every released piece sends a piece to every output file",
}
"""Labels (the memory path's) whose outputs are cut into pieces for a number of consumers that grows with
the rows too: an all-to-all exchange (``pipeline.graph.Layer.exchange``), whose tasks (``[piece]``, and
past ``graph.DIRECT_PIECES`` the two-level form's slices, merges and their pieces) are counted at the
target by ``graph.exchange_tasks``."""
BUNDLES = ("_bundle", "_bundle_tuple")
"""Labels of the tasks that gather many producers' outputs for consumers that each need all of them
(``pipeline.graph.Layer.bundles``: about the square root of the producers): counted x sqrt(f)."""
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
        self.trees = []  # (when, blocks, sample rows, seconds) of each split tree the client built
        self._open = {}

    def emit(self, record):
        if record.msg == "stage %s ..." and record.args:
            self._open[record.args[0]] = record.created
        elif record.msg == "stage %s done in %.2f s" and record.args:
            name = record.args[0]
            self.windows.append((name, self._open.pop(name, record.created - record.args[1]), record.created))
        elif str(record.msg).startswith("split tree") and record.args:
            self.trees.append((record.created, int(record.args[0]), int(record.args[-2]), float(record.args[-1])))


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


class Run(NamedTuple):
    """One measured run (:func:`measured_runs`): wall seconds, the release's report, the stages' windows, the
    split trees the client built (:class:`_Stages`), every task's ``(label, bytes, dependencies)`` by key, and
    its compute intervals."""

    wall: float
    report: dict
    windows: list
    trees: list
    tasks: dict
    compute: dict

    def stages(self):
        """The run cut by stage (:func:`per_stage`)."""
        return per_stage(self.windows, self.tasks, self.compute, self.trees)


def measure(sources, warm_up, out, cores, paths):
    """In-process runs of the pipeline on each of ``sources`` (after one on ``warm_up``) on ``cores`` workers of
    one thread, threads of this process: ``(seconds per task of overhead, [measured_runs(...) per source])``."""
    from distributed import Client, LocalCluster

    from microagg.pipeline.release import ReleaseOptions, run

    options = ReleaseOptions(k=5, quasi_identifiers=tuple(QI), identifiers=("person_id",))
    with LocalCluster(n_workers=cores, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        run(str(warm_up), str(out), options)  # Numba caches and imports loaded on the worker threads
        shutil.rmtree(out, ignore_errors=True)
        overhead = task_overhead()  # before the recorder sees any task
        return overhead, [measured_runs(cluster, client, source, out, paths, options) for source in sources]


def measured_runs(cluster, client, source, out, paths, options):
    """One run of the pipeline (``options``) on ``source`` per path of ``paths`` (:data:`PATHS`; ``files``
    forces the rows in transit and the released pieces through the scratch directory, as workers that all see
    it take them) on ``cluster``, whose scheduler runs in this process (its plugin sees every task), each
    release removed after. Returns ``{path: Run}``."""
    from distributed import get_task_stream

    from microagg.pipeline import release

    logger = logging.getLogger("microagg.pipeline.release")
    logger.setLevel(logging.INFO)
    runs = {}
    share = release.TRANSIT_MEMORY_SHARE
    for path in paths:
        recorder = _recorder(cluster.scheduler)
        cluster.scheduler.add_plugin(recorder, name=f"microagg-projection-{path}")
        stages = _Stages()
        logger.addHandler(stages)
        release.TRANSIT_MEMORY_SHARE = 0 if path == "files" else share
        try:
            with get_task_stream(client) as stream:
                start = time.perf_counter()
                report = release.run(str(source), str(out), options)
                wall = time.perf_counter() - start
        finally:
            release.TRANSIT_MEMORY_SHARE = share
            logger.removeHandler(stages)
            cluster.scheduler.remove_plugin(name=f"microagg-projection-{path}")
        shutil.rmtree(out, ignore_errors=True)
        if report["rows_in_transit"] != path:
            sys.exit(f"the {path} run took its rows in transit through {report['rows_in_transit']}")
        compute = defaultdict(list)
        for record in stream.data:
            for s in record["startstops"]:
                if s["action"] == "compute":
                    compute[record["key"]].append((s["start"], s["stop"]))
        runs[path] = Run(wall, report, stages.windows, stages.trees, recorder.tasks, compute)
    return runs


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


def per_stage(windows, tasks, compute, trees=()):
    """The measured run cut by stage: a dict of stage -> wall, CPU, idle, task counts, critical path
    (as measured, and with the growing tasks marked), bytes moved between tasks, and the split trees the
    client built in it (``trees``: :class:`_Stages`'s)."""
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
            "trees": [t[1:] for t in trees if any(n == name and a <= t[0] <= b for n, a, b in windows)],
        }
    return stages


# --- the model -------------------------------------------------------------------------------------------

MODEL = """Model (one stage after another: each stage waits for the previous one)
  f = target rows / measured rows; cores = workers x threads per worker; B = network bandwidth per worker.
  stage time = client + max(parallel, critical path, scheduling) + transfer, where
  * client = the measured time inside the stage during which no task computed (the client building the
    graphs and the split tree on a sample of the rows, the gate's checks): serial, it does not shrink with
    the workers; the split tree's seconds (from its log record) grow with its sample (about 128 rows a
    block, at most 2,000,000: pipeline.blocking.sample_plan) and its depth (log2 of the blocks); the
    rest, {client_rule};
  * parallel = the stage's task CPU-seconds x f / cores: per-task costs scale linearly with the rows and
    spread evenly over all cores (reading included: each worker reads from storage at the same speed);
  * scheduling = the stage's number of tasks x {overhead_ms:.2f} ms ({overhead_source}): the scheduler
    handles one task at a time, alongside the computing. Tasks grow with f, the bundles of many producers'
    outputs ({bundles}) with sqrt(f), the exchanges of the memory path's fan-out tasks ({fan}) as
    producers x consumers pieces up to {direct:,}, beyond that the two-level form's P x g slices + b x g
    merges + b x C pieces (pipeline.graph.exchange_plan): for the routed rows b x g ~ max(min(P, C), rows /
    250,000), for the released rows b x g ~ their bytes / 32 MiB, the tasks about 2 sqrt(P C b g) + b g;
    input partitions: max(rows / {per_partition:,}, 2 x cores) (microagg splits an input read as fewer
    partitions than twice the cores), output files: rows / {per_file:,};
    dependencies are not counted apart from their tasks;
  * critical path = the longest chain of dependent tasks in the stage as measured, with the tasks that
    grow with the rows ({grows}) x f, up to the pipeline's bound of {upper:,} rows per plane
    (pipeline.stitch.UPPER_ROWS; each plane's rows from the memory run's inputs): an upper plane's
    stitching waits for every block task below it, and the root plane's gathers groups from the whole
    data set; it does not shrink with the workers;
  * transfer, memory path = bytes that change worker x f x (1 - 1/workers) / (workers x B): every task runs
    on the worker holding its largest input and receives the others (each other input on another worker
    with probability 1 - 1/workers), every worker's link busy in parallel, no overlap with computing;
    twice that in a stage whose exchange takes two levels at the target (all its moved bytes counted
    twice);
  * transfer, files path = the memory path's bytes between tasks x 2 x f / (workers x B): written to the
    shared filesystem and read back, at B per worker, no overlap with computing;
  * the two-level exchange's merges (a copy of the data in transit) are in "parallel" only if the
    measured run made them (--two-level);
  * the stages {fixed} cost what they cost in the measured run, whatever the rows;
  * not included: process start, imports and cluster start (about 2 s for the CLI), worker failures,
    spilling, stragglers, stages the measured run did not have; on the files path, the merges of the
    released pieces' files that the write makes from 100M rows (pipeline.release._merged: a copy of the
    released rows, in a few hundred tasks) and the reads of each output file's task, one per piece's file
    (or merged file), which grow faster than the rows (at 100M: about 400 files x 171 merged files, ~20 us
    each)."""


def missing_labels(tasks, path):
    """The labels of ``path``'s tasks (:data:`PATHS`) that no measured task has: a run without one of them
    was not of the graph the model describes (a function renamed, or the one-worker form measured)."""
    seen = {label for label, _, _ in tasks.values()}
    return [label for label in PATHS[path][1].values() if label not in seen]


def _count(tasks, label):
    return sum(1 for v in tasks.values() if v[0] == label)


def _exchanges(stage, tasks, target, f, cores):
    """``(producers, consumers, what the pipeline tells the exchange of its data)`` at ``target`` rows of each
    fan-out exchange the stage makes: the routed rows' count, or the released rows' bytes
    (``release.released_bytes``, k=5 and 13 QIs, as measured)."""
    labels = {tasks[k][0] for k in stage["keys"]}
    out = []
    if "_route" in labels:  # input partitions -> block tasks
        out.append((max(math.ceil(target / INPUT_ROWS_PER_PARTITION), 2 * cores),
                    math.ceil(_count(tasks, "_solve_pack") * f), {"rows": target}))
    if "_by_file" in labels:  # released pieces -> output files
        from microagg.pipeline.release import ReleaseOptions, released_bytes

        out.append((math.ceil(_count(tasks, "_by_file") * f), max(1, math.ceil(target / ReleaseOptions.rows_per_file)),
                    {"nbytes": released_bytes(target, len(QI), 5)}))
    return out


def _task_counts(stage, tasks, target, f, cores):
    """Tasks of a stage at ``target`` rows by the model's rule: every task family grows with ``f``; the
    exchanges of the fan-out families are counted by ``graph.exchange_tasks`` (producers x consumers
    while direct, about ``2 min(P, C) sqrt(max(P, C))`` in two levels)."""
    from microagg.pipeline import graph

    linear = sum(math.sqrt(f) if tasks[k][0] in BUNDLES else f for k in stage["keys"] if tasks[k][0] not in EXCHANGE)
    return linear + sum(graph.exchange_tasks(p, c, PIPELINE_DIRECT, **told)
                        for p, c, told in _exchanges(stage, tasks, target, f, cores))


def _two_level(stage, tasks, target, f, cores):
    """Whether the stage's exchange takes two levels at ``target`` (its data then travel twice)."""
    from microagg.pipeline import graph

    return any(graph.exchange_plan(p, c, PIPELINE_DIRECT, **told) is not None
               for p, c, told in _exchanges(stage, tasks, target, f, cores))


ROW_BYTES = 8 * (len(QI) + 3)
"""Bytes per row on its way to an upper plane (``pipeline.release.Rows``: row id, leaf, the QI values,
group id)."""


def upper_rows(tasks):
    """Rows of each upper plane's stitching task of the memory path, by its tag (``("upper", plane)``): its
    inputs' bytes / :data:`ROW_BYTES`. The files path's tasks receive only the files' descriptions; the
    planes, their groups and so their rows are the same in both runs."""
    return {key[1:]: sum(tasks[d][1] for d in deps if d in tasks) / ROW_BYTES
            for key, (label, _, deps) in tasks.items() if label in GROWS}


def _growth(tasks, key, f, rows_of):
    """How much longer the task ``key`` takes at ``f`` times the rows: 1, or for an upper plane's
    stitching (:data:`GROWS`) ``f``, but no more than up to ``pipeline.stitch.UPPER_ROWS`` rows (its
    rows from ``rows_of``, :func:`upper_rows`)."""
    if tasks[key][0] not in GROWS:
        return 1.0
    rows = rows_of.get(key[1:], 0.0)
    return min(f, max(1.0, UPPER_ROWS / rows)) if rows > 0 else f


def tree_growth(blocks, sample, f, target):
    """How much longer a split tree of ``blocks`` blocks built on a ``sample`` of rows takes at ``f`` times the
    rows (``target``): its sample's growth (``pipeline.blocking.sample_plan``: about 128 rows a block, at most
    2,000,000) times its depth's (log2 of the blocks). Measured here (``blocking.build_forest`` on samples of the
    10M extract): 0.07 / 0.78 / 2.37 / 3.66 s for the samples of 1M / 10M / 30M / 100M rows, where this rule
    gives 0.96 / 3.24 / 4.75 s from the first (a fifth to a third more)."""
    from microagg.pipeline import blocking

    fraction, _ = blocking.sample_plan(target, blocking.default_block_size(5))  # the measured runs' k
    depth = math.log2(max(blocks * f, 2)) / math.log2(max(blocks, 2))
    return min(fraction * target, target) / sample * depth


def _rest(stage):
    """The stage's client seconds besides its split trees."""
    return max(stage["idle"] - sum(seconds for _, _, seconds in stage["trees"]), 0.0)


def client_fit(small, large, rows_small, rows_large):
    """``{stage: (seconds, seconds per row)}``: the client seconds besides the split trees (:func:`_rest`) of
    each stage, as a line through the two measured runs (``small`` and ``large``: :func:`per_stage`'s), neither
    term below 0. At 1M and 10M rows here: 0.17-0.26 and 0.47 s in the blocks stage, far from 10 times."""
    fit = {}
    for name in large:
        if name in small:
            a, b = _rest(small[name]), _rest(large[name])
            slope = max((b - a) / (rows_large - rows_small), 0.0)
            fit[name] = (max(b - slope * rows_large, 0.0), slope)
    return fit


def _client_seconds(stage, f, target, fixed):
    """The stage's serial client time at ``f`` times the rows: as measured in a fixed stage, else its split
    trees by :func:`tree_growth` and the rest (graphs, gathers, checks) by the stage's ``client_fit`` if it
    has one (two sizes measured), else x f."""
    if fixed:
        return stage["idle"]
    grown = sum(seconds * tree_growth(blocks, sample, f, target) for blocks, sample, seconds in stage["trees"])
    if "client_fit" in stage:
        fixed_part, per_row = stage["client_fit"]
        return fixed_part + per_row * target + grown
    return _rest(stage) * f + grown


def project(stages, tasks, rows, target, workers, threads, bandwidth, overhead, rows_of, through=None):
    """Projected seconds per stage, each with its terms: ``{stage: (total, {term: seconds})}``. ``rows_of``:
    :func:`upper_rows`; ``through``: for the files path, the bytes per stage that the memory path moved
    between workers, which here are written to the shared filesystem and read back."""
    cores = workers * threads
    f = target / rows
    out = {}
    for name, s in stages.items():
        client = _client_seconds(s, f, target, name in FIXED)
        scheduling = overhead * _task_counts(s, tasks, target, f, cores)
        parallel = s["cpu"] * f / cores
        scaled = {k: v * _growth(tasks, k, f, rows_of) for k, v in s["seconds"].items()}
        path = _longest_path(s, tasks, scaled)
        if through is not None:
            transfer = 2 * through.get(name, 0) * f / (workers * bandwidth)
        else:
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


def _report(path, run, overhead, args, rows, rows_of, through, smaller=None):
    """Print one path's measured run (of ``rows``) and its projection; ``smaller``: ``(rows, run)`` of the same
    path at fewer rows, for the client's time (:func:`client_fit`)."""
    wall, report, _, trees, tasks, compute = run
    stages = run.stages()
    print(f"## {path} path: {PATHS[path][0]}\n")
    if smaller is not None:
        small_rows, small = smaller
        fit = client_fit(small.stages(), stages, small_rows, rows)
        for name, line in fit.items():
            stages[name]["client_fit"] = line
        print(f"client seconds besides the split trees, per stage, fitted through the runs of {small_rows:,} and "
              f"{rows:,} rows: " + ", ".join(f"{n} {a:.3f} s + {b * 1e6:.3f} s per million rows"
                                              for n, (a, b) in fit.items()) + "\n")
    tree_seconds = sum(seconds for *_, seconds in trees)
    print(f"measured: {rows:,} rows x 13 QIs, k=5, default method and options, in one process on a LocalCluster of "
          f"{args.cores} workers x 1 thread: {wall:.2f} s wall, {report['tasks']} block tasks, "
          f"{report['upper_planes']} upper planes, rows in transit through {report['rows_in_transit']}, released "
          f"pieces through {report['released_pieces']}, IL {report['information_loss']:.4f} %; split tree built on "
          f"the client in {tree_seconds:.2f} s\n")
    print("| stage | wall s | tasks | task CPU s | no task computing s | critical path s | bytes between tasks MB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, s in stages.items():
        longest = _longest_path(s, tasks, s["seconds"])
        print(f"| {name} | {s['wall']:.2f} | {len(s['keys'])} | {s['cpu']:.2f} | {s['idle']:.2f} | {longest:.2f} | "
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

    check = project(stages, tasks, rows, rows, args.cores, 1, math.inf, overhead, rows_of,
                    None if through is None else {})  # threads of one process: nothing sent over a network
    print(f"\nCheck: the model at the measured size and shape ({args.cores} workers x 1 thread, nothing sent over "
          f"a network) gives {sum(t for t, _ in check.values()):.2f} s against {wall:.2f} s measured (the sum of "
          f"the stage windows: {sum(s['wall'] for s in stages.values()):.2f} s).")

    workers = [int(w) for w in args.workers.split(",")]
    names = [n for n in stages if n != "between stages"] + (["between stages"] if "between stages" in stages else [])
    print(f"\n| rows | workers | projected s | {' | '.join(names)} | limited by |")
    print(f"| ---: | ---: | ---: | {' | '.join('---:' for _ in names)} | --- |")
    limits = {}
    for target in args.targets:
        for w in workers:
            projection = project(stages, tasks, rows, target, w, args.threads_per_worker, args.bandwidth, overhead,
                                 rows_of, through)
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
        print(f"At {w} workers and {target:,} rows ({path} path) the {stage} stage limits ({projection[stage][0]:.1f} "
              f"of {sum(t for t, _ in projection.values()):.1f} s), by its {term}: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in terms.items()))
    print()
    return stages


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=row_counts, default=[1_000_000, 10_000_000],
                        help="rows of the measured runs: one size, or two, through which the client's time is "
                             "fitted; the model's other terms come from the larger (default 1M,10M)")
    parser.add_argument("--workers", default="2,8,32,100", help="numbers of workers to project to")
    parser.add_argument("--targets", type=row_counts, default=[10_000_000, 100_000_000], help="rows to project to")
    parser.add_argument("--threads-per-worker", type=int, default=1, help="cores per projected worker (default 1)")
    parser.add_argument("--bandwidth", type=float, default=1e9,
                        help="network (and shared filesystem) bytes per second per worker (1 GB/s)")
    parser.add_argument("--task-overhead", type=float, default=None, metavar="SECONDS",
                        help="the scheduler's cost per task (default: measured here with trivial tasks; "
                             "distributed's documentation says about 1 ms)")
    parser.add_argument("--cores", type=int, default=max(2, len(os.sched_getaffinity(0))),
                        help="workers of the measured run, one thread each (default: this machine's cores, at "
                             "least 2: one worker takes neither path)")
    parser.add_argument("--data", default=os.environ.get("MICROAGG_BENCH_DATA"),
                        help="where the extracts are cached (default: the temp directory)")
    parser.add_argument("--two-level", action="store_true",
                        help="measure with the two-level exchange (as a large cluster runs it) instead of the "
                             "direct one this size takes")
    parser.add_argument("--direct-pieces", type=int, default=None,
                        help="project a pipeline whose exchanges stay direct up to this many pieces (default: "
                             "graph.DIRECT_PIECES, as it ships; a huge number: every exchange direct)")
    args = parser.parse_args()
    if args.cores < 2:
        parser.error("--cores: at least 2 workers (on one, the pipeline takes neither path)")
    from microagg.pipeline import graph
    from microagg.pipeline.release import ReleaseOptions

    global PIPELINE_DIRECT
    PIPELINE_DIRECT = graph.DIRECT_PIECES if args.direct_pieces is None else args.direct_pieces
    if args.two_level:
        graph.DIRECT_PIECES = 0
    sizes = sorted(set(args.rows))
    if len(sizes) > 2:
        parser.error("--rows: one size, or two (the client's time fitted through both)")
    root = Path(args.data or tempfile.gettempdir()) / "microagg-bench"
    sources = [make_extract(rows, root) for rows in sizes]
    warm_up = root / "warm-up-50000.parquet"
    if not warm_up.exists():
        extract(50_000, seed=9).to_parquet(warm_up, index=False)
    overhead, measured = measure(sources, warm_up, root / "projection-out", args.cores, tuple(PATHS))
    for rows, runs in zip(sizes, measured):
        for path, run in runs.items():
            missing = missing_labels(run.tasks, path)
            if missing:
                sys.exit(f"no task labelled {', '.join(missing)} in the {path} run of {rows:,} rows: the pipeline's "
                         f"graph is not the one this model counts (PATHS); nothing projected")
    source_of_overhead = (f"measured here: {overhead * 1e3:.2f} ms per trivial task, with the client, the "
                          f"scheduler and the worker threads in one process; distributed's documentation "
                          f"says about 1 ms" if args.task_overhead is None else "given")
    overhead = overhead if args.task_overhead is None else args.task_overhead
    rule = (f"a line through the runs of {sizes[0]:,} and {sizes[1]:,} rows (graphs of more tasks, a few round "
            f"trips: it grew 2-3 times for 10 times the rows here)" if len(sizes) == 2 else
            "x f (pessimistic: at 10 times the rows it grew 2-3 times here; measure two sizes to fit it)")
    print(MODEL.format(fan="; ".join(f"{k}: {v}" for k, v in FAN_OUT.items()), grows=", ".join(GROWS),
                       bundles=", ".join(BUNDLES), per_partition=INPUT_ROWS_PER_PARTITION,
                       per_file=ReleaseOptions.rows_per_file, overhead_ms=overhead * 1e3, direct=PIPELINE_DIRECT,
                       fixed=", ".join(FIXED), overhead_source=source_of_overhead, upper=UPPER_ROWS,
                       client_rule=rule))
    print(f"  Here: B = {args.bandwidth / 1e9:g} GB/s per worker, {args.threads_per_worker} core(s) per worker.\n")
    rows, runs = sizes[-1], measured[-1]
    smaller = {path: (sizes[0], measured[0][path]) if len(sizes) == 2 else None for path in PATHS}
    rows_of = upper_rows(runs["memory"].tasks)
    memory = _report("memory", runs["memory"], overhead, args, rows, rows_of, None, smaller["memory"])
    _report("files", runs["files"], overhead, args, rows, rows_of, {n: s["moved"] for n, s in memory.items()},
            smaller["files"])


if __name__ == "__main__":
    main()
