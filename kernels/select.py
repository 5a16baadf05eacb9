"""Partial selection: keep the m smallest keys seen in a scan, in a small sorted buffer."""

from ._jit import jit


@jit
def keep_smallest(keys, ids, filled, key, ident):
    """Offer ``(key, ident)`` to the sorted buffers ``keys[:filled]`` / ``ids[:filled]`` of capacity
    ``len(keys)``; returns the new fill count.

    A newcomer displaces only a strictly larger key and lands after equal keys, so in a scan by
    increasing ``ident`` ties are resolved in favour of the lower ``ident``. O(capacity) per
    insertion, O(1) for a rejected candidate: a scan costs O(n) plus O(capacity log n) expected.
    """
    capacity = keys.shape[0]
    if filled == capacity:
        if key >= keys[capacity - 1]:
            return filled
        pos = capacity - 1
    else:
        pos = filled
        filled += 1
    while pos > 0 and keys[pos - 1] > key:
        keys[pos] = keys[pos - 1]
        ids[pos] = ids[pos - 1]
        pos -= 1
    keys[pos] = key
    ids[pos] = ident
    return filled


@jit
def offer_in_order(keys, ids, filled, key, ident):
    """:func:`keep_smallest` for newcomers in any order of ``ident``: the buffers are kept sorted by
    ``(key, ident)``, so the result is the one a scan by increasing ``ident`` would give."""
    capacity = keys.shape[0]
    if filled == capacity:
        last = capacity - 1
        if key > keys[last] or (key == keys[last] and ident > ids[last]):
            return filled
        pos = last
    else:
        pos = filled
        filled += 1
    while pos > 0 and (keys[pos - 1] > key or (keys[pos - 1] == key and ids[pos - 1] > ident)):
        keys[pos] = keys[pos - 1]
        ids[pos] = ids[pos - 1]
        pos -= 1
    keys[pos] = key
    ids[pos] = ident
    return filled
