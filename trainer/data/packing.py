"""Which examples share a packed row: first-fit decreasing over the examples' lengths, on arrays.

First-fit decreasing takes the examples longest first (ties in their order) and puts each into the first
row with room for it, opening a row when none has. Examples of one length are placed together here: the
first row with room for one takes as many of them as fit (the rows before it had less room than one
example, and placing one changes no other row), then the next row with room, then new rows. So a whole
run of equal lengths is one pass over the rows' free space, and a million examples of at most
``max_seq_len`` distinct lengths pack in a few array passes per length: the same rows, example for
example, as placing them one by one.
"""

from __future__ import annotations

import numpy as np


def first_fit_decreasing(lengths: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of at most ``capacity`` tokens for examples of ``lengths``: ``(offsets, members)``, row ``r``
    holding examples ``members[offsets[r]:offsets[r + 1]]`` in their own order. Deterministic."""
    lengths = np.asarray(lengths, dtype=np.int64)
    count = len(lengths)
    if count == 0:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if int(lengths.max()) > capacity:
        raise ValueError(f"an example of {int(lengths.max())} tokens does not fit a row of {capacity}")
    row_of = np.empty(count, dtype=np.int64)
    free = np.empty(0, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    sorted_lengths = lengths[order]
    starts = np.flatnonzero(np.r_[True, sorted_lengths[1:] != sorted_lengths[:-1]])
    ends = np.r_[starts[1:], count]
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        length = int(sorted_lengths[start])
        items = order[start:end]  # in their own order: ties keep it
        if length == 0:  # nothing to place: the first row (opened if none is)
            if not len(free):
                free = np.array([capacity], dtype=np.int64)
            row_of[items] = 0
            continue
        room = free // length  # how many of this length each row still takes
        taken_before = np.cumsum(room)
        fit = min(len(items), int(taken_before[-1]) if len(room) else 0)
        if fit:
            rows = np.searchsorted(taken_before, np.arange(fit), side="right")
            row_of[items[:fit]] = rows
            np.subtract.at(free, rows, length)
        rest = len(items) - fit
        if rest:
            per_row = capacity // length
            new_rows = len(free) + np.arange(rest) // per_row
            row_of[items[fit:]] = new_rows
            opened = -(-rest // per_row)
            fill = np.full(opened, per_row * length, dtype=np.int64)
            fill[-1] = (rest - (opened - 1) * per_row) * length
            free = np.concatenate([free, capacity - fill])
    members = np.lexsort((np.arange(count), row_of))
    counts = np.bincount(row_of, minlength=len(free))
    offsets = np.zeros(len(free) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, members.astype(np.int64)
