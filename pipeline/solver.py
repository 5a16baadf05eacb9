"""What solves one block: a method with its options, then a refinement with its options.

Both drivers (the in-memory API and the Dask pipeline) build one :class:`Solver` from the user's
choices and call ``solver.partition(Z, k, tag)`` on every block; ``tag`` (the block's leaf id in
the split tree, 0 for a single block) derives the block's seed from the job's seed, so seeded
methods and refinements repeat bit for bit however the work is split.
"""

from dataclasses import dataclass

import numpy as np

from .. import kernels
from ..kernels.missing import fill_missing
from .methods import Race, get_method, get_refiner, run_method, run_refiner


@dataclass(frozen=True)
class Solver:
    """``method`` / ``refine``: catalogue names; ``*_options``: sorted ``(name, value)`` pairs."""

    method: str = "mdav"
    method_options: tuple = ()
    refine: str = "none"
    refine_options: tuple = ()
    seed: int = 0

    @classmethod
    def build(cls, method="mdav", method_options=None, refine="none", refine_options=None, seed=0):
        """A checked solver: unknown names or options fail here, before any data is read."""
        solver = cls(method, tuple(sorted((method_options or {}).items())), refine,
                     tuple(sorted((refine_options or {}).items())), int(seed))
        solver.check()
        return solver

    def check(self):
        """The names: the method, the refinement and the options each takes (their values are checked
        when they run, and early by :func:`pipeline.validation.check_method_options`)."""
        get_method(self.method).check_names(self.method_options)
        get_refiner(self.refine).check_names(self.refine_options)

    def block_seed(self, tag):
        """A 31-bit seed for the block ``tag``, derived from the job's seed."""
        mixed = kernels.splitmix64(np.uint64(self.seed) ^ kernels.splitmix64(np.uint64(tag)))
        return int(mixed >> np.uint64(33))

    def _with_seed(self, options, accepted, tag):
        options = dict(options)
        if "seed" in accepted and "seed" not in options:
            options["seed"] = self.block_seed(tag)
        return options

    def race(self):
        """A fresh :class:`pipeline.methods.Race` for the blocks of one task if the method is ``auto``
        with its portfolio raced (its default), else None."""
        if self.method == "auto" and dict(self.method_options).get("portfolio", "race") == "race":
            return Race()
        return None

    def partition(self, Z, k, tag=0, race=None):
        """Labels ``0..g-1`` of the standardized block ``Z``: the method, then the refinement.
        ``race``: the task's :meth:`race`, for a block of a blocked solve (None: the method as it is)."""
        m = get_method(self.method)
        if race is not None:
            labels = race.partition(Z, k)
        else:
            labels = run_method(m, Z, k, self._with_seed(self.method_options, m.options, tag))
        if self.refine != "none":
            if np.isnan(Z).any():  # missing values: refined at their groups' observed means
                Z = Z.copy()
                fill_missing(Z, labels, int(labels.max()) + 1)
            r = get_refiner(self.refine)
            labels = run_refiner(r, Z, labels, k, self._with_seed(self.refine_options, r.options, tag))
        return labels
