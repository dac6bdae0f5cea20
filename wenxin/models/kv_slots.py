"""The key/value caches of the rows that decode together, kept in place: ``KVSlots``.

Every row's cache lies in one array ``[layers, 2, slots, KV, columns, D]``; the rows in use are the
first ``rows`` slots, each row's tokens its first ``lengths[row]`` columns. An in-place ``advance``
(``wenxin.models.advance_step``) reads each layer's keys and values of the first ``rows`` slots as
they lie (``inputs``: views, each one contiguous block of the array), with ``visible`` hiding each
row's columns past its length, and returns only the new tokens' keys and values, which ``write``
puts after each row's own. So a decoding step copies none of the cache: only the new tokens are
written (as vLLM's KV cache manager keeps blocks in place; here a row's columns are one run, so
no paged attention kernel is needed).

Rows join (``append``: their caches written into free slots) and leave (``keep``: a row that
stays where it is is not touched; a row that moves to fill a gap, or a beam copied to another, is
copied alone). The array grows when rows or columns run out, by a quarter at least, so growing
costs an amortized fraction of a step, and shrinks when the longest row uses less than a quarter
of its columns (after long rows left), so a step never attends to many more columns than the
longest row holds. ``bytes_copied`` counts every byte written into the array: what a test checks.
"""
from __future__ import annotations

import math
from typing import Dict, List, Sequence

import numpy as np

from wenxin.models.advance_step import COLUMN_AXIS, ROW_AXIS, layer_inputs

COLUMN_STEP = 64  # columns are allocated in multiples of this
GROWTH = 1.25  # a grown array holds at least this many times what was needed


def _allocation(needed: int, step: int) -> int:
    """Room for ``needed`` with ``GROWTH`` to spare, in multiples of ``step`` (at least one)."""
    return max(step, math.ceil(needed * GROWTH / step) * step)


class KVSlots:
    """Rows' key/value caches in one array, in place (see the module docstring).

    Args:
        empty: the cache of one row holding nothing ``[layers, 2, 1, KV, 0, D]`` (its shape and
            dtype: ``advance_step.empty_cache``).
    """

    def __init__(self, empty: np.ndarray) -> None:
        shape = list(empty.shape)
        shape[ROW_AXIS], shape[COLUMN_AXIS] = 0, 0
        self.store = np.zeros(shape, dtype=empty.dtype)  # [layers, 2, slots, KV, columns, D]
        self.lengths = np.zeros(0, dtype=np.int64)  # [rows]: each row's cached tokens
        self.bytes_copied = 0

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def columns(self) -> int:
        """The columns each row has room for (``inputs`` feeds them all)."""
        return int(self.store.shape[COLUMN_AXIS])

    @property
    def token_bytes(self) -> int:
        """Bytes of one token's keys and values, every layer's."""
        shape = self.store.shape
        return int(shape[0] * shape[1] * shape[3] * shape[5] * self.store.itemsize)

    def append(self, cache: np.ndarray) -> None:
        """Rows join after the others: ``cache`` ``[layers, 2, n, KV, N, D]`` (each row's tokens
        all ``N`` columns)."""
        count, length = int(cache.shape[ROW_AXIS]), int(cache.shape[COLUMN_AXIS])
        start = self.rows
        self._reserve(start + count, max(length, int(self.lengths.max(initial=0))))
        self.store[:, :, start:start + count, :, :length] = cache
        self.bytes_copied += cache.nbytes
        self.lengths = np.concatenate([self.lengths, np.full(count, length, dtype=np.int64)])

    def inputs(self, new_tokens: int) -> Dict[str, np.ndarray]:
        """An in-place ``advance``'s cache inputs and ``visible`` ``[R, T, C + T]`` for
        ``new_tokens`` (``T``) more tokens a row: each layer's first ``rows`` slots, all ``C``
        columns (views, no copy), each row seeing its own columns and its new tokens up to each
        one's own. Room for the new tokens is made first (``write`` puts them there)."""
        rows, width = self.rows, new_tokens
        self._reserve(rows, int(self.lengths.max(initial=0)) + width)
        columns = self.columns
        visible = np.zeros((rows, width, columns + width), dtype=np.float32)
        visible[:, :, :columns] = (np.arange(columns)[None, :] < self.lengths[:, None])[:, None, :]
        visible[:, :, columns:] = np.tril(np.ones((width, width), dtype=np.float32))
        return {"visible": visible, **layer_inputs(self.store[:, :, :rows])}  # views [R, KV, C, D]

    def write(self, new: np.ndarray) -> None:
        """The new tokens' keys and values ``[layers, 2, rows, KV, T, D]`` (an in-place
        ``advance``'s ``new_cache``) after each row's own."""
        count = int(new.shape[COLUMN_AXIS])
        rows = np.arange(self.rows)
        for offset in range(count):
            # [rows, layers, 2, KV, D]: numpy puts the two indexed axes first
            self.store[:, :, rows, :, self.lengths + offset] = np.moveaxis(new[:, :, :, :, offset], 2, 0)
        self.bytes_copied += new.nbytes
        self.lengths = self.lengths + count

    def keep(self, rows: Sequence[int]) -> None:
        """Keep ``rows`` (in this order, as slots ``0..len(rows) - 1``; a row named twice is copied:
        a beam's). A row already in its slot is not touched; only moved rows are copied."""
        order = np.asarray(rows, dtype=np.int64)
        moved = np.flatnonzero(order != np.arange(len(order)))
        sources = order[moved]
        # Each moved row is copied alone, its own columns, by slicing (each layer's block of a row
        # is contiguous): an indexed copy gathered the moved rows into a new array and scattered
        # them back (a row of 16 leaving at ERNIE-4.5-0.3B's shape after 150 tokens, the 12 after
        # it moving: 27.6 -> 16.1 CPU-ms; benchmarks/kv_slots_keep.py).
        compaction = bool(np.all(sources > moved)) and bool(np.all(np.diff(sources) > 0))
        taken = [] if compaction else [self._row(source) for source in sources.tolist()]  # beams: read all first
        for index, (slot, source) in enumerate(zip(moved.tolist(), sources.tolist())):
            # a compaction moves rows down in order: a row is read before its slot is written
            row = self._row(source, copy=False) if compaction else taken[index]
            self.store[:, :, slot, :, :row.shape[-2]] = row
            self.bytes_copied += row.nbytes
        self.lengths = self.lengths[order]
        longest = int(self.lengths.max(initial=0))
        if self.columns > COLUMN_STEP and 4 * (longest + 1) <= self.columns:
            self._resize(int(self.store.shape[ROW_AXIS]), _allocation(longest + 1, COLUMN_STEP))

    def _row(self, slot: int, copy: bool = True) -> np.ndarray:
        """Slot ``slot``'s cache, its own columns ``[layers, 2, KV, length, D]`` (a copy, or a view)."""
        view = self.store[:, :, slot, :, :int(self.lengths[slot])]
        return view.copy() if copy else view

    def _reserve(self, rows: int, columns: int) -> None:
        """Room for ``rows`` rows of ``columns`` columns (grown by ``GROWTH`` at least)."""
        slots, room = int(self.store.shape[ROW_AXIS]), self.columns
        if rows <= slots and columns <= room:
            return
        self._resize(_allocation(rows, 1) if rows > slots else slots,
                     _allocation(columns, COLUMN_STEP) if columns > room else room)

    def _resize(self, slots: int, columns: int) -> None:
        shape = list(self.store.shape)
        shape[ROW_AXIS], shape[COLUMN_AXIS] = slots, columns
        store = np.zeros(shape, dtype=self.store.dtype)
        rows, width = self.rows, min(int(self.lengths.max(initial=0)), columns)
        if rows and width:
            store[:, :, :rows, :, :width] = self.store[:, :, :rows, :, :width]
            self.bytes_copied += rows * width * self.token_bytes
        self.store = store

    def row_caches(self, rows: List[int]) -> np.ndarray:
        """A copy of ``rows``' caches ``[layers, 2, len(rows), KV, longest, D]`` (each row's
        tokens first, then whatever the columns held): what the tests read rows back with."""
        width = int(self.lengths[rows].max(initial=0)) if rows else 0
        return self.store[:, :, rows, :, :width].copy()
