"""The one place that defines how kernels are compiled.

Every kernel is compiled with ``cache=True`` (compiled once per machine, reused by every process and
worker) and ``nogil=True`` (Dask threads can run kernels side by side). No kernel uses ``fastmath``:
floating-point reassociation could change which record is "farthest" or "nearest" and therefore
which group a record joins, and it could change released values between builds.

Numba checks a cached kernel against its own source file only: a kernel that calls (or inlines) a
kernel of another module kept its old machine code when only the other module changed (say
``refine`` after an edit of ``mdav._distances_to``), and so did every kernel after a change of the
options here. An upgrade in place, or a checkout, then ran stale code without a word. Each kernel's
cache entries are therefore stamped with the sources of its module, of the package modules it
imports (transitively) and of this one (:func:`source_stamps`): a change to any of them compiles the
kernel again, once, and a change elsewhere does not.
"""

import hashlib
import re
from pathlib import Path

import numba

PACKAGE = Path(__file__).resolve().parent


_RELATIVE_IMPORT = re.compile(rb"^[ \t]*from[ \t]+\.(\w*)[ \t]+import[ \t]+\(?([\w, \t]*)", re.MULTILINE)


def _imports(source):
    """The modules of this package that a module's source imports (``from .x import ...``, ``from . import
    x``), at any depth. (A regular expression: parsing the package's syntax trees took 0.13 s at every
    start.)"""
    found = set()
    for module, names in _RELATIVE_IMPORT.findall(source):
        if module:
            found.add(module.decode())
        else:
            found.update(n.strip().decode() for n in names.split(b",") if n.strip())
    return found


def source_stamps(package=PACKAGE):
    """``{module name: stamp}`` for every module of ``package``: the SHA-256 of its source, of the sources
    of the package modules it imports, transitively (every kernel module imports ``_jit``, the compile
    options), in name order."""
    sources = {p.stem: p.read_bytes() for p in sorted(package.glob("*.py"))}
    imports = {name: _imports(source) & sources.keys() for name, source in sources.items()}
    stamps = {}
    for name in sources:
        seen, todo = {name}, [name]
        while todo:
            for other in imports[todo.pop()] - seen:
                seen.add(other)
                todo.append(other)
        digest = hashlib.sha256()
        for other in sorted(seen):
            digest.update(other.encode() + b"\0" + hashlib.sha256(sources[other]).digest())
        stamps[name] = digest.hexdigest()
    return stamps


STAMPS = source_stamps()


def _stamped(dispatcher):
    """``dispatcher`` with its cache entries stamped by :data:`STAMPS` as well as by its own file: an entry
    written under another stamp is not loaded (the kernel compiles, and its entry is written again)."""
    py_func = dispatcher.py_func
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    stamp = STAMPS.get(py_func.__module__.rpartition(".")[2])
    if cache_file is not None and stamp and Path(py_func.__code__.co_filename).resolve().parent == PACKAGE:
        cache_file._source_stamp = (cache_file._source_stamp, stamp)
    return dispatcher


def _compiler(**options):
    njit = numba.njit(cache=True, nogil=True, **options)

    def compile_kernel(func):
        return _stamped(njit(func))

    return compile_kernel


jit = _compiler()
"""Decorator for serial kernels (the default; Dask supplies the parallelism)."""

pjit = _compiler(parallel=True)
"""Decorator for the few kernels that parallelise themselves (never called from Dask threads)."""

inline_jit = _compiler(inline="always")
"""Decorator for a small helper that several kernels share on their hot paths: inlined into each caller
(Numba's IR), so sharing it costs nothing (called, the split tree's descent ran 35 % slower)."""
