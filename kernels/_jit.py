"""The one place that defines how kernels are compiled.

Every kernel is compiled with ``cache=True`` (compiled once per machine, reused by every process and
worker) and ``nogil=True`` (Dask threads can run kernels side by side). No kernel uses ``fastmath``:
floating-point reassociation could change which record is "farthest" or "nearest" and therefore
which group a record joins, and it could change released values between builds.
"""

import numba

jit = numba.njit(cache=True, nogil=True)
"""Decorator for serial kernels (the default; Dask supplies the parallelism)."""

pjit = numba.njit(cache=True, nogil=True, parallel=True)
"""Decorator for the few kernels that parallelise themselves (never called from Dask threads)."""

inline_jit = numba.njit(cache=True, nogil=True, inline="always")
"""Decorator for a small helper that several kernels share on their hot paths: inlined into each caller
(Numba's IR), so sharing it costs nothing (called, the split tree's descent ran 35 % slower)."""
