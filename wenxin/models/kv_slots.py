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
copied alone).

A step attends to every column the array has room for (each costs 16 rows' step about 0.1 ms at
ERNIE-4.5-0.3B's shape, ``benchmarks/onnx_step.py --context``), so the columns follow the longest
row closely (``_columns_for``: at 160 tokens, room for 192): grown when they run out, narrowed when
the longest row's room is a ``COLUMN_STEP`` or more below them (after long rows left). They were a
quarter ahead, in steps of 64, and a served step attended to about 30% more columns than its
longest row held. Changing the columns moves every row, so the array lies at the start of one flat
block of memory (``memory``) that a new shape is laid out in, in place: each layer's keys or values
moved as one slab, from the last when the shape grows (every slab's new place lies at or after its
old one), from the first when it shrinks, so a slab never overwrites one not moved yet.
A block is made twice as large as the array it is made for, which costs nothing until the array
spreads into it (the system gives a block's pages as they are first written), and keeps the pages
it was written in (what a busy batch needed once it is likely to need again): laying out in place
costs about half of copying into a new array, and a served process at ERNIE-4.5-0.3B's shape
paid 190-350 ms for the first touch of a new array's 130-170 MB. A block is made anew only when
the array outgrows it, or spans less than a quarter of what it once spanned (the pages held).
``bytes_copied`` counts every byte written into the array: what a test checks.
"""
from __future__ import annotations

import math
from typing import Dict, Iterable, List, Sequence

import numpy as np

from wenxin.models.advance_step import COLUMN_AXIS, ROW_AXIS, layer_inputs

COLUMN_STEP = 32  # columns are allocated in multiples of this
GROWTH = 1.25  # grown slots: at least this many times the rows needed
BLOCK_GROWTH = 2  # a block of memory is made this many times the array it is made for


def _columns_for(needed: int) -> int:
    """The columns for rows of up to ``needed`` tokens: room for about ``sqrt(2 x needed)`` more,
    rounded up to a multiple of ``COLUMN_STEP``. A step attends to every column and growing moves
    the whole cache (each at about the same cost a column): ``a`` columns ahead cost ``a / 2`` a
    step on average and a move of ``needed`` columns every ``a`` steps, least at ``a = sqrt(2 x
    needed)`` (18 at 160 tokens, 63 at 2,000)."""
    return max(COLUMN_STEP, math.ceil((needed + math.isqrt(2 * needed)) / COLUMN_STEP) * COLUMN_STEP)


def _block(size: int, dtype: np.dtype) -> np.ndarray:
    """A zeroed block of memory for an array of ``size`` elements: ``BLOCK_GROWTH`` times that (the
    system gives its pages as they are first written), or just that where the system will not
    promise more (``vm.overcommit_memory`` 2)."""
    try:
        return np.zeros(BLOCK_GROWTH * size, dtype=dtype)
    except MemoryError:
        return np.zeros(size, dtype=dtype)


class KVSlots:
    """Rows' key/value caches in one array, in place (see the module docstring).

    Args:
        empty: the cache of one row holding nothing ``[layers, 2, 1, KV, 0, D]`` (its shape and
            dtype: ``advance_step.empty_cache``).
    """

    def __init__(self, empty: np.ndarray) -> None:
        shape = list(empty.shape)
        shape[ROW_AXIS], shape[COLUMN_AXIS] = 0, 0
        self.memory = np.zeros(0, dtype=empty.dtype)  # flat: the store lies at its start
        self.spanned = 0  # the most of ``memory`` the store has spanned (the pages written)
        self.store = self.memory.reshape(shape)  # [layers, 2, slots, KV, columns, D]
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
        fewer = _columns_for(int(self.lengths.max(initial=0)) + 1)
        if fewer + COLUMN_STEP <= self.columns:
            self._resize(int(self.store.shape[ROW_AXIS]), fewer)

    def _row(self, slot: int, copy: bool = True) -> np.ndarray:
        """Slot ``slot``'s cache, its own columns ``[layers, 2, KV, length, D]`` (a copy, or a view)."""
        view = self.store[:, :, slot, :, :int(self.lengths[slot])]
        return view.copy() if copy else view

    def _reserve(self, rows: int, columns: int) -> None:
        """Room for ``rows`` rows (slots grown by ``GROWTH`` at least) of ``columns`` columns."""
        slots, room = int(self.store.shape[ROW_AXIS]), self.columns
        if rows <= slots and columns <= room:
            return
        self._resize(max(slots, math.ceil(rows * GROWTH)) if rows > slots else slots,
                     _columns_for(columns) if columns > room else room)

    def _resize(self, slots: int, columns: int) -> None:
        """The store with room for ``slots`` rows of ``columns`` columns, the rows' tokens kept:
        laid out in place where the block of memory holds it (see the module docstring)."""
        size = self._size(slots, columns)
        if size > self.memory.size or 4 * size < self.spanned:
            memory = _block(size, self.store.dtype)
            store = self._shaped(memory, slots, columns)
            self._move(store, range(store.shape[0] * store.shape[1]))
            self.memory, self.store, self.spanned = memory, store, size
            return
        self.spanned = max(self.spanned, size)
        slots_now, columns_now = int(self.store.shape[ROW_AXIS]), self.columns
        for step_slots, step_columns in ((min(slots, slots_now), min(columns, columns_now)), (slots, columns)):
            # the shrinking sizes first (slabs from the first), then the growing ones (from the last)
            if (step_slots, step_columns) == (int(self.store.shape[ROW_AXIS]), self.columns):
                continue
            store = self._shaped(self.memory, step_slots, step_columns)
            slabs = range(store.shape[0] * store.shape[1])
            growing = step_slots >= self.store.shape[ROW_AXIS] and step_columns >= self.columns
            self._move(store, reversed(slabs) if growing else slabs)
            self.store = store

    def _move(self, store: np.ndarray, slabs: Iterable[int]) -> None:
        """The rows' tokens of each layer's keys or values (``slabs``: their indices, in this order)
        into ``store``."""
        rows, width = self.rows, min(int(self.lengths.max(initial=0)), self.columns, int(store.shape[COLUMN_AXIS]))
        if not rows or not width:
            return
        kinds = int(store.shape[1])
        for slab in slabs:
            layer, kind = divmod(slab, kinds)
            # NumPy copies a slab through a buffer where its old and new places overlap
            store[layer, kind, :rows, :, :width] = self.store[layer, kind, :rows, :, :width]
        self.bytes_copied += rows * width * self.token_bytes

    def _shape(self, slots: int, columns: int) -> List[int]:
        """The store's shape with room for ``slots`` rows of ``columns`` columns."""
        shape = list(self.store.shape)
        shape[ROW_AXIS], shape[COLUMN_AXIS] = slots, columns
        return shape

    def _size(self, slots: int, columns: int) -> int:
        return math.prod(self._shape(slots, columns))

    def _shaped(self, memory: np.ndarray, slots: int, columns: int) -> np.ndarray:
        """The start of ``memory`` as a store of ``slots`` rows of ``columns`` columns."""
        shape = self._shape(slots, columns)
        return memory[:math.prod(shape)].reshape(shape)

    def row_caches(self, rows: List[int]) -> np.ndarray:
        """A copy of ``rows``' caches ``[layers, 2, len(rows), KV, longest, D]`` (each row's
        tokens first, then whatever the columns held): what the tests read rows back with."""
        width = int(self.lengths[rows].max(initial=0)) if rows else 0
        return self.store[:, :, rows, :, :width].copy()
