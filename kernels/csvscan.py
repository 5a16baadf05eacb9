"""The record ends of CSV bytes, as pandas' C tokenizer finds them, from any starting state.

A CSV reader is in one of four states before each byte: at the start of a field (:data:`START`),
inside an unquoted field (:data:`UNQUOTED`), inside a quoted field (:data:`QUOTED`), or just after a
quote inside a quoted field (:data:`QUOTE_IN_QUOTED`: the field's end, or the first of a doubled
quote). A quote opens a quoted field only at a field's start; anywhere else in an unquoted field it is
a character like any other (``12" pipe``). A line break ends the record except inside a quoted field.

A block that starts part-way through a file does not know its state, so :func:`scan` follows several
starting states side by side (Dask's blocks are scanned in parallel, then chained in order). Two of
them that reach the same state stay together from there on: the scan returns at that byte so that its
caller follows one fewer.
"""

import numpy as np

from ._jit import inline_jit, jit

START, UNQUOTED, QUOTED, QUOTE_IN_QUOTED = 0, 1, 2, 3
STATES = 4

OTHER, QUOTE, SEPARATOR, NEWLINE, SEPARATOR_END = 0, 1, 2, 3, 4
"""Byte classes. :data:`SEPARATOR_END`: the last byte of a separator of several bytes, a separator
only if the bytes before it are the rest."""

NEXT = np.array([
    # OTHER   QUOTE            SEPARATOR NEWLINE   (the byte's class)
    [UNQUOTED, QUOTED, START, START],  # START
    [UNQUOTED, UNQUOTED, START, START],  # UNQUOTED
    [QUOTED, QUOTE_IN_QUOTED, QUOTED, QUOTED],  # QUOTED
    [UNQUOTED, QUOTED, START, START],  # QUOTE_IN_QUOTED
], dtype=np.int64)
"""The state after a byte, by state and byte class."""


@jit
def scan(data, at, sep, quote, states, first, inner):
    """Follow ``data`` (uint8) from index ``at`` in each state of ``states`` (int64, distinct; advanced
    in place), for the field separator's bytes ``sep`` (uint8: one, or the several of a character such
    as ``§`` in UTF-8, which ends at its last byte; the bytes before ``at`` are its context) and the
    byte value ``quote``. ``first[j]`` and ``inner[j]`` (int64, -1 until found) receive the index of
    state ``j``'s first line break that ends a record and of its first one inside a quoted field.
    Returns the index after the byte at which two states became one, or ``len(data)``."""
    width = len(sep)
    classes = np.zeros(256, np.int64)
    classes[sep[width - 1]] = SEPARATOR if width == 1 else SEPARATOR_END
    classes[quote] = QUOTE
    classes[10] = NEWLINE
    table = NEXT.ravel()
    m = len(states)
    pending = 0  # line breaks of either kind still to be found
    for j in range(m):
        pending += (first[j] < 0) + (inner[j] < 0)
    if m == 1:  # the common case once the states have met: the state in a register
        packed = np.zeros(256, np.int64)  # each byte's next state from every state, two bits each
        for v in range(256):
            c = classes[v]
            if c == SEPARATOR_END:
                c = OTHER
            for t in range(STATES):
                packed[v] |= table[t * 4 + c] << (2 * t)
        s = states[0]
        for i in range(at, len(data)):
            v = data[i]
            if v == 10 and pending:
                pending -= _found(i, s, first, inner, 0)
            if width > 1 and classes[v] == SEPARATOR_END and _separator(data, i, sep) == SEPARATOR:
                s = table[s * 4 + SEPARATOR]
            else:
                s = (packed[v] >> (2 * s)) & 3
        states[0] = s
        return len(data)
    for i in range(at, len(data)):
        c = classes[data[i]]
        if c == SEPARATOR_END:
            c = _separator(data, i, sep)
        elif c == NEWLINE and pending:
            for j in range(m):
                pending -= _found(i, states[j], first, inner, j)
        for j in range(m):
            states[j] = table[states[j] * 4 + c]
        for j in range(m):
            for k in range(j + 1, m):
                if states[j] == states[k]:
                    return i + 1
    return len(data)


@inline_jit
def _separator(data, i, sep):
    """The class of the byte at ``i``, the last byte of the separator ``sep``'s several: a separator
    if the bytes before it are the rest."""
    width = len(sep)
    if i < width - 1:
        return OTHER
    for b in range(width - 1):
        if data[i - width + 1 + b] != sep[b]:
            return OTHER
    return SEPARATOR


@inline_jit
def _found(i, state, first, inner, j):
    """Record the line break at ``i`` read in ``state`` as state ``j``'s first of its kind, if it is:
    1 if it was, else 0."""
    if state == QUOTED:
        if inner[j] < 0:
            inner[j] = i
            return 1
    elif first[j] < 0:
        first[j] = i
        return 1
    return 0


@jit
def padded_number(data, sep):
    """Index in ``data`` (uint8, CSV bytes) of the first ``0`` followed by a digit at a field's start
    (after the separator byte ``sep``, a line break or the data's start; spaces, a quote and one sign
    may stand between): a field that may hold a whole number written with leading zeros (``01234``, a
    postcode), or -1. A screen that quotes do not mislead into a miss (``"a,01"`` inside a quoted field
    is a hit, which the caller's exact check of its columns then rules out)."""
    n = len(data)
    for i in range(n - 1):
        if data[i] != 48 or data[i + 1] < 48 or data[i + 1] > 57:
            continue
        j = i - 1
        if j >= 0 and (data[j] == 43 or data[j] == 45):  # + or -
            j -= 1
        while j >= 0 and data[j] == 32:
            j -= 1
        if j >= 0 and data[j] == 34:  # a quote
            j -= 1
            while j >= 0 and data[j] == 32:
                j -= 1
        if j < 0 or data[j] == sep or data[j] == 10 or data[j] == 13:
            return i
    return -1
