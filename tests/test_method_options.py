"""The option checks the catalogue declares: every option of every method and refinement has one, its
default passes it, and a value it refuses is refused with one message on both paths, early
(``check_method_options``, before any data is read; the flag in front) and when the method or the
refinement runs. No kernel runs here: every call is refused before one would."""

import math

import numpy as np
import pytest

from microagg.pipeline.errors import InputError
from microagg.pipeline.methods import METHODS, REFINERS, Choice, Integer, Option, Positive, Real, Seed
from microagg.pipeline.validation import OPTION_FLAGS, SEED_MAX, check_method_options

Z = np.ascontiguousarray(np.random.default_rng(0).standard_normal((20, 2)))
LABELS = np.arange(20, dtype=np.int64) // 4  # five groups of four: a valid start for k=3
K = 3


def refused_values(entry, check):
    """Values ``check`` must refuse, built from its kind and bounds (the entry's other defaults kept)."""
    if isinstance(check, Choice):
        return ["no-such-" + check.values[0], 1, None]
    if isinstance(check, Real):
        values = [float("nan"), float("inf"), "0.5", True, check.low - 1.0]
        return values + [check.high + 1.0] if math.isfinite(check.high) else values
    if isinstance(check, Integer):
        values = [check.low - 1, 1.5, "1", True]
        # None is accepted only beside a value of the option it depends on; the default leaves that unset
        return values + [None] if check.optional_with is None or entry.options[check.optional_with] is None \
            else values
    if isinstance(check, Positive):
        return [0, -1.0, float("nan"), float("inf"), "1", True]
    if isinstance(check, Seed):
        return [-1, SEED_MAX + 1, 1.5, "0"]
    raise AssertionError(f"no refused values known for the check {check!r}: add its kind to refused_values")


ENTRIES = [("method", m) for m in METHODS.values()] + [("refinement", r) for r in REFINERS.values()]
CASES = [(kind, entry.name, name, value)
         for kind, entry in ENTRIES for name, option in entry.declared.items()
         for value in refused_values(entry, option.check)]


@pytest.mark.parametrize("kind, entry", ENTRIES, ids=[entry.name for _, entry in ENTRIES])
def test_every_option_declares_a_check_its_default_passes(kind, entry):
    for name, option in entry.declared.items():
        assert isinstance(option, Option), (entry.name, name)
        assert refused_values(entry, option.check), (entry.name, name)  # a check of a known kind
    assert entry.checked({}) == entry.options  # each default passes its check, unchanged


def test_the_catalogue_declares_the_options_it_takes():
    declared = {(entry.name, name) for _, entry in ENTRIES for name in entry.declared}
    assert {("vmdav", "gamma"), ("dbm", "eps"), ("ga", "seed"), ("univariate", "grouping"), ("mic1d", "remainder"),
            ("ils", "iterations"), ("ils", "time_budget"), ("local", "sweeps"), ("tfrp2", "criterion")} <= declared
    assert len(CASES) > 3 * len(declared)


@pytest.mark.parametrize("kind, owner, name, value", CASES,
                         ids=[f"{owner}-{name}-{value!r}" for _, owner, name, value in CASES])
def test_a_refused_value_has_one_message_early_and_at_run_time(kind, owner, name, value):
    with pytest.raises(InputError) as early:
        if kind == "method":
            check_method_options(owner, {name: value})
        else:
            check_method_options("mdav", None, owner, {name: value})
    with pytest.raises(InputError) as running:
        if kind == "method":
            METHODS[owner].partition(Z, K, **{name: value})
        else:
            REFINERS[owner].refine(Z, LABELS, K, **{name: value})
    message = str(running.value)
    assert message.startswith(f"{owner} ") and name in message and repr(value) in message
    flag = OPTION_FLAGS.get(name)
    assert str(early.value) == (f"{flag}: {message}" if flag else message)


def test_values_are_converted_and_none_accepted_where_declared():
    assert type(METHODS["vmdav"].checked({"gamma": 1})["gamma"]) is float
    assert type(METHODS["ga"].checked({"macro": np.int64(3)})["macro"]) is int
    assert METHODS["dbm"].checked({"eps": None}) == {"eps": None}  # the data-driven eps
    assert REFINERS["ils"].checked({"iterations": None, "time_budget": 2}) == \
        {"iterations": None, "time_budget": 2.0, "seed": 0}
    check_method_options("dbm", {"eps": None}, "ils", {"iterations": None, "time_budget": 2})
