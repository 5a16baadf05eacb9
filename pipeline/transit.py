"""Rows in transit through files: the routing's all-to-all exchange without holding it in memory.

Every input partition's rows go to every block task (:mod:`pipeline.release`), and none can start before
the last partition is routed: held in memory, the rows in transit (a row's QI values, row id and leaf:
120 bytes at 13 QIs) are the job's largest part, and grow with the rows (3.6 GB at 30M rows). When the
tasks run in the job's own process, each routing task instead writes its rows to one file in a scratch
directory, cut by key into contiguous ranges, and returns only where each key's rows start
(:class:`Written`); each consumer reads its key's ranges from every file straight into its arrays
(:func:`read_key`). The files go through the page cache, which the kernel writes out and reclaims as it
needs: the worker's own memory no longer holds them. The scratch directory (:func:`scratch`) lives for
the stage and is removed after it; one left by a killed job is removed by the next job that starts on
the host, or, on a filesystem several hosts share, by the next job on any host once the dead job's lease is
an hour old (:func:`remove_stale`).
"""

import logging
import os
import shutil
import socket
import tempfile
import uuid
from contextlib import contextmanager, suppress
from typing import NamedTuple

import dask
import numpy as np

from ..kernels import groups
from . import io

log = logging.getLogger(__name__)

PREFIX = "microagg-transit-"
"""Scratch directories are named ``PREFIX<host>-<pid>-<random>`` and hold the job's lease (:class:`pipeline.io.Lease`):
a later job on the same host tells by the pid whether their job still runs, a job on another host (the directory
on a filesystem the hosts share) by the lease's age (:func:`pipeline.io.job_gone`). Directories of earlier versions,
``PREFIX<pid>-<random>``, are judged as this host's."""

PART = ".part-"
"""In the name of a file being written (:func:`_replacing`), before it is renamed to its own."""

ROOM = 3.0
"""The scratch directory's filesystem must have this many times the rows' bytes free (the released pieces go there too), else the rows stay in memory."""


class Written(NamedTuple):
    """One routing task's file: array ``j`` (``dtypes[j]``, ``widths[j]`` values a row; 0: one value, a
    vector) starts at byte ``offsets[j]``, its rows in key order; key ``i``'s rows are ``bounds[i]:bounds[i+1]``."""

    path: str
    bounds: np.ndarray
    offsets: tuple
    dtypes: tuple
    widths: tuple


def write_rows(path, key, n_keys, arrays):
    """Write ``arrays`` (per-row arrays of one length; None entries skipped) to ``path``, their rows ordered by
    ``key`` (``0..n_keys-1``; a stable counting sort: each key's rows keep their order). Returns :class:`Written`."""
    bounds, order = groups.group_members(np.ascontiguousarray(key, dtype=np.int64), n_keys)
    arrays = [a for a in arrays if a is not None]
    offsets = _write(path, (np.take(a, order, axis=0) for a in arrays))
    return Written(path, bounds, offsets, tuple(a.dtype.str for a in arrays),
                   tuple(a.shape[1] if a.ndim == 2 else 0 for a in arrays))


def merge(path, written):
    """One file at ``path`` holding the rows of every file in ``written`` (:class:`Written`, all of one layout
    and one set of keys): key ``i``'s rows are each file's rows of key ``i``, file after file, which is what
    :func:`read_keys` reads from those files, but in one read. Each file is read whole once; the merge holds
    all their rows in memory. Returns its :class:`Written`."""
    first = written[0]
    counts = np.stack([np.diff(w.bounds) for w in written])  # (files, keys)
    bounds = np.concatenate([[0], np.cumsum(counts.sum(axis=0))])
    at = bounds[:-1] + np.cumsum(counts, axis=0) - counts  # where each file's rows of each key go
    out = [np.empty((int(bounds[-1]), width) if width else int(bounds[-1]), dtype=np.dtype(dtype))
           for dtype, width in zip(first.dtypes, first.widths)]
    for w, count, start in zip(written, counts, at):
        n = int(w.bounds[-1])
        if not n:
            continue
        place = np.repeat(start - w.bounds[:-1], count) + np.arange(n)
        with open(w.path, "rb", buffering=0) as f:
            for array, offset in zip(out, w.offsets):
                rows = np.empty((n, *array.shape[1:]), dtype=array.dtype)
                _read_into(f, offset, rows)
                array[place] = rows
    return Written(path, bounds, _write(path, out), first.dtypes, first.widths)


def _write(path, arrays):
    """Write ``arrays`` to ``path`` one after the other (:func:`_replacing`); returns where each starts."""
    offsets, position = [], 0
    with _replacing(path) as f:
        for a in arrays:
            a = np.ascontiguousarray(a)
            offsets.append(position)
            f.write(_bytes(a))
            position += a.nbytes
    return tuple(offsets)


@contextmanager
def _replacing(path):
    """``path`` opened for writing as a new file beside it, renamed over it once complete: a task that a
    worker process's death makes Dask run again rewrites its file (the same bytes) while another worker may
    be reading the first one's, which stays whole for it (its open file keeps the replaced one)."""
    part = f"{path}{PART}{uuid.uuid4().hex}"
    try:
        with open(part, "wb") as f:
            yield f
        os.replace(part, path)
    except BaseException:
        with suppress(OSError):
            os.remove(part)
        raise


def _bytes(array):
    """A C-contiguous array's bytes, not copied (empty arrays too, which ``memoryview.cast`` refuses)."""
    return memoryview(array.reshape(-1).view(np.uint8))


def _read_into(f, offset, buffer):
    view = _bytes(buffer)
    done = 0
    while done < len(view):
        f.seek(offset + done)
        got = f.readinto(view[done:])
        if not got:
            raise EOFError(f"{f.name}: {len(view) - done} bytes missing at offset {offset + done}")
        done += got


def read_key(written, key):
    """Key ``key``'s rows of every file in ``written`` (:class:`Written`, all of one layout), in that order
    (:func:`read_keys`)."""
    return read_keys([(w, key) for w in written])


def read_keys(pairs):
    """The rows of key ``key`` of file ``written`` for each ``(written, key)`` of ``pairs`` (:class:`Written`, all
    of one layout), in that order: a list of arrays, one per array written, each read straight into its place;
    None if there are none."""
    pairs = [(w, key) for w, key in pairs if w.bounds[key + 1] > w.bounds[key]]
    if not pairs:
        return None
    first = pairs[0][0]
    counts = [int(w.bounds[key + 1] - w.bounds[key]) for w, key in pairs]
    total = sum(counts)
    out = [np.empty((total, width) if width else total, dtype=np.dtype(dtype))
           for dtype, width in zip(first.dtypes, first.widths)]
    at = 0
    for (w, key), n in zip(pairs, counts):
        with open(w.path, "rb", buffering=0) as f:
            for array, offset in zip(out, w.offsets):
                row_bytes = array.itemsize * (array.shape[1] if array.ndim == 2 else 1)
                _read_into(f, offset + int(w.bounds[key]) * row_bytes, array[at:at + n])
        at += n
    return out


class Stored(NamedTuple):
    """Arrays of any shapes in one file (:func:`store`): array ``j`` (``dtypes[j]``, ``shapes[j]``) at byte ``offsets[j]``."""

    path: str
    offsets: tuple
    dtypes: tuple
    shapes: tuple


def store(path, arrays):
    """Write ``arrays`` to ``path``, one after the other; :func:`load` reads them back."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    return Stored(path, _write(path, arrays), tuple(a.dtype.str for a in arrays), tuple(a.shape for a in arrays))


def load(stored):
    """The arrays of a :class:`Stored` file, each read straight into its place."""
    out = [np.empty(shape, dtype=np.dtype(dtype)) for shape, dtype in zip(stored.shapes, stored.dtypes)]
    with open(stored.path, "rb", buffering=0) as f:
        for offset, array in zip(stored.offsets, out):
            _read_into(f, offset, array)
    return out


def store_columns(path, matrices):
    """Write the columns of the ``(n, d_i)`` float64 ``matrices`` (one ``n``) to ``path``, column by column, each
    contiguous (:func:`store`), so that :func:`read_columns` reads a few columns without the others."""
    store(path, [matrix[:, j] for matrix in matrices for j in range(matrix.shape[1])])


def read_columns(path, n_rows, columns):
    """Columns ``columns`` (indices over all the matrices' columns, in :func:`store_columns`' order) of a
    file of ``n_rows`` rows: a ``(len(columns), n_rows)`` float64 array."""
    out = np.empty((len(columns), n_rows))
    with open(path, "rb", buffering=0) as f:
        for i, j in enumerate(columns):
            _read_into(f, int(j) * n_rows * 8, out[i])
    return out


def remove_files(directory, keep):
    """Remove the files of ``directory`` whose name does not contain ``keep`` (its job's lease stays)."""
    for name in os.listdir(directory):
        if keep not in name and name != io.LEASE:
            os.remove(os.path.join(directory, name))


def remove_stale(root):
    """Remove the scratch directories under ``root`` whose job no longer runs: on this host, its pid gone, a
    zombie, or a process that started after the directory last changed (as a restarted container's new job with
    the same pid); on another host sharing the filesystem, its lease not refreshed for
    :data:`pipeline.io.LEASE_EXPIRY` seconds by that filesystem's clock (:func:`pipeline.io.job_gone`).
    Returns how many."""
    removed = 0
    try:
        names = [name for name in os.listdir(root) if name.startswith(PREFIX)]
    except OSError:
        return 0
    if not names:
        return 0
    host = socket.gethostname()
    now = io.filesystem_now(root)
    for name in names:
        owner = _owner(name[len(PREFIX):], host)
        if owner is None:
            continue
        path = os.path.join(root, name)
        changed = io.last_sign_of_life(path, renamed=False)
        if changed is None:  # removed meanwhile
            continue
        if io.job_gone(*owner, changed, host, now):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def _owner(tag, host):
    """``(host, pid)`` of a scratch directory's job from its name after :data:`PREFIX` (an earlier version's
    ``<pid>-<random>``: this ``host``'s), or None for a name of another kind."""
    head, _, _ = tag.rpartition("-")
    entry_host, _, pid = head.rpartition("-")
    if not pid.isdigit():
        return None
    return (entry_host or host), int(pid)


def scratch_root():
    """Where scratch directories go: Dask's ``temporary-directory`` (where its workers spill), else the system's."""
    return dask.config.get("temporary-directory", None) or tempfile.gettempdir()


def clean():
    """:func:`remove_stale` under :func:`scratch_root`, logged; every job on the host calls it, so that one
    killed in its blocks stage leaves its files only until the next job starts."""
    root = scratch_root()
    removed = remove_stale(root)
    if removed:
        log.info("removed %d scratch directories left by jobs that no longer run under %s", removed, root)


def free_space(root):
    """Bytes free on the filesystem of ``root`` (0 if it cannot be asked)."""
    try:
        return shutil.disk_usage(root).free
    except OSError:
        return 0


@contextmanager
def scratch(n_bytes, room=None, what="rows in transit"):
    """A scratch directory for ``n_bytes`` of rows in transit, removed on exit; None (the rows stay in memory)
    if its filesystem has less than ``room`` (default :data:`ROOM`) times that free. ``what``: their name in the
    log."""
    room = ROOM if room is None else room
    root = scratch_root()
    with suppress(OSError):  # a directory the deployment names but nothing made yet (/data/scratch on a new volume)
        os.makedirs(root, exist_ok=True)
    free = free_space(root)
    if free < room * n_bytes:
        log.info("%s kept in memory: %s has %.1f GB free, less than %.1f GB", what, root, free / 1e9,
                 room * n_bytes / 1e9)
        yield None
        return
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{socket.gethostname()}-{os.getpid()}-", dir=root)
    try:
        io.Lease(path)
        yield path
    finally:
        io.Lease.end(path)
        shutil.rmtree(path, ignore_errors=True)
