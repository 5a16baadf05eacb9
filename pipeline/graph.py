"""Explicit task graphs for the pipeline's array stages.

The stages after the statistics pass move rows between tasks as NumPy arrays (see
:mod:`pipeline.release`): every input partition is cut into one piece per task, every task's output
into pieces for other tasks. Built with ``dask.delayed``, each call and each ``piece[i]`` tokenizes
its arguments and builds a graph of its own: at 10M rows (128 tasks, 127 upper planes, 10 files) that
was about 2 s of client time while the workers waited. A :class:`Layer` writes the same tasks
straight into one graph layer, keyed by a fresh name and a tag, and hands out :class:`Delayed`
objects over it.
"""

import operator
import uuid

from dask._task_spec import Task, TaskRef
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph


class Layer:
    """Tasks added one at a time into one graph layer.

    Arguments of :meth:`task` may be :class:`Delayed` objects (from elsewhere: they become
    dependencies) or :class:`TaskRef` references returned by this layer's :meth:`task` and
    :meth:`item`; anything else is passed as is. :meth:`delayed` turns references into ``Delayed``
    objects once every task is added (the graph is frozen then).
    """

    def __init__(self, prefix):
        self.name = f"{prefix}-{uuid.uuid4().hex}"
        self._tasks = {}
        self._deps = {}
        self._graph = None

    def _arg(self, value):
        if isinstance(value, Delayed):
            self._deps[value.key] = value
            return TaskRef(value.key)
        return value

    def task(self, tag, func, *args):
        """Add ``func(*args)`` under the key ``(name, *tag)`` (``tag``: a string, an int or a tuple of
        them); returns its reference."""
        key = (self.name, *(tag if isinstance(tag, tuple) else (tag,)))
        self._tasks[key] = Task(key, func, *(self._arg(a) for a in args))
        return TaskRef(key)

    def item(self, ref, index):
        """A task for ``ref[index]`` (a piece of a task's list output), so that a task that needs
        one piece receives that piece, not the whole list (on a cluster: not the whole transfer)."""
        return self.task((*ref.key[1:], index), operator.getitem, ref, index)

    def delayed(self, refs):
        """``Delayed`` objects over the references ``refs``."""
        if self._graph is None:
            self._graph = HighLevelGraph.from_collections(self.name, self._tasks, dependencies=list(self._deps.values()))
        return [Delayed(ref.key, self._graph, layer=self.name) for ref in refs]

