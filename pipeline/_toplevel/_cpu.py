"""Numba's target CPU: an x86-64 microarchitecture level only on a CPU that has it.

deploy/ compiles the kernels for ``NUMBA_CPU_NAME=x86-64-v3`` (AVX2 and FMA, every x86-64 server CPU
since 2013-2015): one Numba cache that every such node can use, and code as fast as the host's own
(BENCHMARKS.md, issue 7, "The kernels' target CPU"). On a CPU without those features (or not an
x86-64 CPU at all: an ARM node), machine code for that level dies of an illegal instruction (SIGILL)
at its first call, a worker lost for no visible reason. So before Numba is imported, a level the CPU
lacks is replaced by ``generic``: the kernels compile again for this CPU (into the same cache
directory), and the log says why.
"""

import logging
import os
import platform
import sys

V2 = frozenset({"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"})
V3 = V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}  # abm: Linux's name for LZCNT
V4 = V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
LEVELS = {"x86-64-v2": V2, "x86-64-v3": V3, "x86-64-v4": V4}
"""LLVM's x86-64 microarchitecture levels and the /proc/cpuinfo flags each needs."""


def usable_cores():
    """The cores this process may run on (its CPU affinity: a Slurm allocation, a container's cpuset),
    else the machine's."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def cpu_flags(path="/proc/cpuinfo", machine=None):
    """The CPU's feature flags (of its first processor), or None where the file is not there. An
    x86-64 level's flags are x86 flags: on another architecture (an ARM node) the set is empty."""
    if (machine or platform.machine()).lower() not in ("x86_64", "amd64"):
        return set()
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def check_numba_cpu(environ=os.environ, flags=None):
    """If ``NUMBA_CPU_NAME`` in ``environ`` names an x86-64 level whose features this CPU (``flags``,
    default :func:`cpu_flags`) lacks, set it to ``generic`` and log a warning. Returns the missing
    flags (sorted), or None when there is nothing to check."""
    wanted = LEVELS.get(environ.get("NUMBA_CPU_NAME", ""))
    if wanted is None:
        return None
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return None
    missing = sorted(wanted - flags)
    if missing:
        logging.getLogger("microagg").warning(
            "NUMBA_CPU_NAME=%s, but this CPU lacks %s: compiling the kernels for it instead (generic)",
            environ["NUMBA_CPU_NAME"], ", ".join(missing))
        environ["NUMBA_CPU_NAME"] = "generic"
        if "numba" in sys.modules and environ is os.environ:  # imported before microagg: re-read
            sys.modules["numba"].core.config.reload_config()
    return missing
