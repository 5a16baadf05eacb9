"""Validation, statistics, methods, the in-memory API and the Dask release pipeline."""

from .api import anonymize, information_loss, partition, standardize
from .errors import InputError, MicroaggError, ReleaseGateError
from .methods import METHODS, REFINERS

__all__ = [
    "METHODS",
    "REFINERS",
    "InputError",
    "MicroaggError",
    "ReleaseGateError",
    "anonymize",
    "information_loss",
    "partition",
    "standardize",
]
