"""Explicit task graphs for the pipeline's array stages.

The stages after the statistics pass move rows between tasks as NumPy arrays (see
:mod:`pipeline.release`): every input partition is cut into one piece per task, every task's output
into pieces for other tasks. Built with ``dask.delayed``, each call and each ``piece[i]`` tokenizes
its arguments and builds a graph of its own: at 10M rows (128 tasks, 127 upper planes, 10 files) that
was about 2 s of client time while the workers waited. A :class:`Layer` writes the same tasks
straight into one graph layer, keyed by a fresh name and a tag, and hands out :class:`Delayed`
objects over it.

An all-to-all exchange (every producer cuts its output into one piece per consumer) made of one
``piece[i]`` task per (producer, consumer) pair has producers x consumers tasks: both grow with the
rows, so the scheduler's work grows with their square (at 100 workers it was the projected limit,
BENCHMARKS.md "Projection to 100 workers"). :meth:`Layer.exchange` keeps that direct form while it
is small and otherwise goes through two levels (:func:`exchange_plan`). In one process, where
consumers take what they need from their producers' whole outputs, each consumer depends on
:meth:`Layer.bundles` of them instead of on every producer, for the same reason.
"""

import math
import operator
import uuid

import numpy as np

from dask._task_spec import Task, TaskRef
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph
from dask.sizeof import sizeof

FAN_IN = 32
"""Outputs merged by one task of :meth:`Layer.reduce` (at 100M rows, 4,095 released pieces: 128 + 4 + 1 merges)."""


class Layer:
    """Tasks added one at a time into one graph layer.

    Arguments of :meth:`task` may be :class:`Delayed` objects (from elsewhere: they become
    dependencies) or :class:`TaskRef` references returned by this layer's :meth:`task` and
    :meth:`item`; anything else is passed as is. :meth:`delayed` turns references into ``Delayed``
    objects once every task is added (the graph is frozen then).
    """

    def __init__(self, prefix):
        token = uuid.uuid4().hex
        self.name = f"{prefix}-{token}"
        self._prefix, self._token = prefix, token
        self._tasks = {}
        self._deps = {}
        self._graph = None

    def _arg(self, value):
        if isinstance(value, Delayed):
            self._deps[value.key] = value
            return TaskRef(value.key)
        return value

    def task(self, tag, func, *args, kind=None):
        """Add ``func(*args)`` under the key ``(name of its kind, *tag)`` (``tag``: a string, an int or a tuple
        of them); returns its reference.

        A task's kind is ``kind``, else the tag's first element if that is a string ("route", "solve", ...):
        the key's first element is the layer's prefix, the kind and the layer's token (``microagg-blocks-solve-
        <token>``), so that Dask's task prefix, by which the scheduler estimates how long a task will run, is
        one per kind. Under one prefix, the block tasks' duration was averaged with a thousand getitems' and
        estimated at a few milliseconds: the scheduler placed them on the worker holding most of their inputs
        and never moved them (10M rows on two workers: 34.5 s of block tasks on one, 7.6 s on the other, idle
        for 25 s; BENCHMARKS.md, sixty-third session)."""
        tag = tag if isinstance(tag, tuple) else (tag,)
        kind = tag[0] if kind is None else kind
        name = f"{self._prefix}-{kind}-{self._token}" if isinstance(kind, str) and kind else self.name
        key = (name, *tag)
        self._tasks[key] = Task(key, func, *(self._arg(a) for a in args))
        return TaskRef(key)

    def item(self, ref, index):
        """A task for ``ref[index]`` (a piece of a task's list output), so that a task that needs
        one piece receives that piece, not the whole list (on a cluster: not the whole transfer); of the
        kind ``<producer's kind>-item``."""
        producer = ref.key[1] if len(ref.key) > 1 and isinstance(ref.key[1], str) else ""
        return self.task((*ref.key[1:], index), operator.getitem, ref, index, kind=f"{producer}-item".lstrip("-"))

    def exchange(self, tag, producers, n_consumers, merge, direct=None, rows=None, nbytes=None):
        """The pieces each consumer receives from an all-to-all exchange: a list, per consumer, of
        references whose values, in order, hold its rows from ``producers`` in producer order.

        Every producer (a reference) returns a list of ``n_consumers`` pieces. While producers x
        consumers is at most ``direct`` (default :data:`DIRECT_PIECES`) each consumer gets one
        ``piece[i]`` task per producer. Beyond, two levels (:func:`exchange_plan`): each producer's
        list is sliced by group of consumers; the slices of a batch of consecutive producers are
        merged, consumer by consumer, by ``merge(pieces)`` (picklable; the rows keep their
        order); each consumer then gets one piece per batch. The tasks grow as
        ``2 min(P, C) sqrt(max(P, C))`` instead of ``P C``, for one more copy of the data in transit.
        ``rows``: the rows in transit, if known, so that no merge holds more than :data:`MERGE_ROWS`;
        or ``nbytes``: their bytes, so that the merges are as few as hold :data:`MERGE_BYTES` each.
        """
        plan = exchange_plan(len(producers), n_consumers, direct, rows, nbytes)
        if plan is None:
            return [[self.item(p, c) for p in producers] for c in range(n_consumers)]
        batches, groups = plan
        out = [[] for _ in range(n_consumers)]
        for b, (pa, pb) in enumerate(batches):
            for g, (ca, cb) in enumerate(groups):
                slices = [self.task((tag, "slice", p, g), _slice, producers[p], ca, cb, kind=f"{tag}-slice")
                          for p in range(pa, pb)]
                merged = self.task((tag, "merge", b, g), _merge_slices, merge, *slices, kind=f"{tag}-merge")
                for c in range(ca, cb):
                    out[c].append(self.item(merged, c - ca))
        return out

    def reduce(self, tag, refs, merge, fan_in=None):
        """One reference to ``refs`` reduced in a tree: ``merge(*outputs)`` of up to ``fan_in`` (default
        :data:`FAN_IN`) consecutive outputs at a time, level by level, in order, until one is left (with
        one ref, that ref). On a cluster the outputs then meet on the workers, ``fan_in`` at a time, and
        the client receives the root's only; the tree's shape depends on ``len(refs)`` alone, so its
        result does not depend on the workers."""
        fan_in = fan_in or FAN_IN
        level = 0
        while len(refs) > 1:
            refs = [self.task((tag, level, i), merge, *refs[a:a + fan_in])
                    for i, a in enumerate(range(0, len(refs), fan_in))]
            level += 1
        return refs[0]

    def bundles(self, tag, refs, kept=True):
        """The references ``refs`` gathered, in order, into about ``sqrt(len(refs))`` bundle tasks of
        consecutive ones: for consumers in one process that each need every one of many producers' outputs.
        Each consumer then depends on the bundles, not on every producer: ``P + C sqrt(P)`` dependencies
        instead of ``P C``, and the scheduler's work grows with them (at 30M rows the 120 output files
        over 1,023 released pieces cost it 4.8 s with no work in the tasks, 0.6 s through bundles;
        BENCHMARKS.md, fiftieth session). A bundle holds its producers' outputs by reference: nothing is
        copied. ``kept``: the outputs stay held where they are (persisted), and Dask counts a bundle as its
        references only (:class:`Bundle`); else a bundle is a tuple that Dask counts in full, as it holds the
        outputs alone once their own keys are released."""
        parts = 1 if len(refs) <= BUNDLE_MIN else math.isqrt(len(refs) - 1) + 1
        func = _bundle if kept else _bundle_tuple
        return [self.task((tag, i), func, *refs[a:b]) for i, (a, b) in enumerate(_ranges(len(refs), parts))]

    def delayed(self, refs):
        """``Delayed`` objects over the references ``refs``.

        Dependencies whose graph is a plain dict (persisted objects: a key and its future each) join one
        layer of their own. Each would otherwise be a layer of the graph, and Dask copies a collection's
        graph, layer by layer, for every collection computed at once: the gate's 4,095 summaries over as
        many released pieces at 100M rows took 1.2 GB and 28 s of the job's process that way."""
        if self._graph is None:
            plain, collections = {}, []
            for dep in self._deps.values():
                dsk = dep.__dask_graph__()
                if isinstance(dsk, HighLevelGraph):
                    collections.append(dep)
                else:
                    plain.update(dsk)
            dsk = HighLevelGraph.from_collections(self.name, self._tasks, dependencies=collections)
            if plain:
                inputs = f"{self.name}-inputs"
                dsk = HighLevelGraph({**dsk.layers, inputs: plain},
                                     {**dsk.dependencies, inputs: set(), self.name: dsk.dependencies[self.name] | {inputs}})
            self._graph = dsk
        return [Delayed(ref.key, self._graph, layer=self.name) for ref in refs]


class Bundle(tuple):
    """Outputs of other tasks held by reference in one process (:meth:`Layer.bundles`). Dask counts a
    bundle's memory as its references only: the outputs themselves are counted where they are kept (as
    a tuple, each bundle would count them again, and a worker under a memory limit would spill for
    memory it does not hold)."""


@sizeof.register(Bundle)
def _bundle_size(bundle):
    return object.__sizeof__(bundle) + 8 * len(bundle)


BUNDLE_MIN = 16
"""Up to this many references, :meth:`Layer.bundles` makes one bundle."""


def _bundle(*outputs):
    return Bundle(outputs)


def _bundle_tuple(*outputs):
    return outputs


DIRECT_PIECES = 4096
"""Largest producers x consumers of an exchange done with one piece task per pair. Locally the direct
form is cheaper (no extra copy) and the tasks are few (at 10M rows on 2 cores: 10 input partitions x
128 block tasks); the two-level form is for large clusters."""


def _ranges(n, parts):
    """``parts`` consecutive ``(start, end)`` ranges covering ``0..n-1``, sizes differing by at most 1."""
    cuts = [n * i // parts for i in range(parts + 1)]
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:])]


MERGE_ROWS = 250_000
"""Most rows one merge of a two-level exchange holds (when the exchange is told its rows). A merge is
one object in a worker's memory, spilled and read back whole: at 30M rows, 30 input partitions and
512 block tasks, 30 merges of a million rows each (about 140 MB, twice that while read back from the
spill) pushed workers of 1.5 GiB over their limit while most of their memory was spilled already."""


MERGE_BYTES = 32 << 20
"""About the most bytes one merge of a two-level exchange holds when the exchange is told its bytes: 250,000
routed rows of 13 QIs (:data:`MERGE_ROWS`'s bound in bytes)."""


def exchange_plan(n_producers, n_consumers, direct=None, rows=None, nbytes=None):
    """None for a direct exchange (producers x consumers at most ``direct``, default
    :data:`DIRECT_PIECES`), else ``(producer batches, consumer groups)`` as ranges of consecutive
    producers and consumers.

    With ``b`` batches and ``g`` groups the exchange makes ``P g`` slices, ``b g`` merges and ``b C``
    pieces. Each merge holds about ``rows / (b g)`` rows; ``b g = min(P, C)`` keeps that at most one
    input partition's or one consumer's share (and, given ``rows``, at least ``rows /``
    :data:`MERGE_ROWS` merges keep it at most that), and ``b = sqrt(b g P / C)`` then minimises the
    count: about ``2 min(P, C) sqrt(max(P, C))`` tasks (3,932 instead of 25,600 for 200 x 128).

    Given ``nbytes`` instead, the data in transit, the merges are as few as hold :data:`MERGE_BYTES` each:
    the count, about ``2 sqrt(P C b g) + b g``, falls with them. For the released rows on their way to the
    output files (about 40 bytes a row at k = 5, against 120 for the routed rows) one consumer's share is
    a few megabytes: at 100M rows, 2,559 released pieces to 400 files made 400 merges of about 10 MB and
    41,280 tasks (the projected limit at 100 workers; BENCHMARKS.md, sixty-second session)."""
    direct = DIRECT_PIECES if direct is None else direct
    if n_producers * n_consumers <= direct or n_producers < 2 or n_consumers < 2:
        return None
    if nbytes is not None:
        merges = min(max(1, -(-int(nbytes) // MERGE_BYTES)), n_producers * n_consumers)
    else:
        merges = min(n_producers, n_consumers)
        if rows:
            merges = min(max(merges, -(-rows // MERGE_ROWS)), n_producers * n_consumers)
    batches = max(1, min(n_producers, round(math.sqrt(merges * n_producers / n_consumers))))
    groups = max(1, min(n_consumers, -(-merges // batches)))
    return _ranges(n_producers, batches), _ranges(n_consumers, groups)


def exchange_tasks(n_producers, n_consumers, direct=None, rows=None, nbytes=None):
    """How many tasks :meth:`Layer.exchange` adds (slices, merges and pieces; not the producers or
    consumers): for the scaling model of ``tests/benchmarks/project_workers.py``."""
    plan = exchange_plan(n_producers, n_consumers, direct, rows, nbytes)
    if plan is None:
        return n_producers * n_consumers
    batches, groups = plan
    return n_producers * len(groups) + len(batches) * len(groups) + len(batches) * n_consumers


def concatenate_fields(pieces):
    """Pieces of equal shape (tuples of arrays) concatenated field by field, in their order: the
    merge of an exchange whose producers cut their rows into per-consumer tuples of arrays."""
    return tuple(np.concatenate([p[i] for p in pieces]) for i in range(len(pieces[0])))


def _slice(pieces, start, end):
    return pieces[start:end]


def _merge_slices(merge, *slices):
    """Consumer by consumer, ``merge`` of the batch's pieces for it (in producer order)."""
    return [merge([s[i] for s in slices]) for i in range(len(slices[0]))]
