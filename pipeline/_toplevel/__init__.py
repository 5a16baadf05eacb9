"""microagg: scalable microaggregation (k-anonymity for numeric quasi-identifiers).

This directory is installed as the top-level ``microagg`` package (see ``package-dir`` in
pyproject.toml); ``microagg.kernels``, ``microagg.pipeline`` and ``microagg.jobs`` are the
repository's ``kernels/``, ``pipeline/`` and ``jobs/``.
"""

from importlib.metadata import PackageNotFoundError, version

from microagg._cpu import check_numba_cpu

check_numba_cpu()  # before any kernel module imports Numba

from microagg.pipeline import (  # noqa: E402
    METHODS,
    REFINERS,
    InputError,
    MicroaggError,
    ReleaseGateError,
    anonymize,
    information_loss,
    partition,
    standardize,
)

try:
    __version__ = version("microagg")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0+unknown"

__all__ = [
    "METHODS",
    "REFINERS",
    "InputError",
    "MicroaggError",
    "ReleaseGateError",
    "__version__",
    "anonymize",
    "information_loss",
    "partition",
    "standardize",
]
