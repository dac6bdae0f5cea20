"""Cached examples: how a reader's converted examples map to flat NumPy arrays, and a read-only
sequence of them over an entry of the token cache (``wenxin.data.token_cache`` builds entries).

A field's per-example value has a *layout* (``Spec``): ``"none"``; ``"int"`` / ``"float"`` (one
number: an int64 / float64 slot); ``["array", dtype]`` (a 1-D array: a ragged slot, example ``i``
being ``data[offsets[i]:offsets[i + 1]]``); ``"list"`` (a list of ints: a ragged int64 slot, read
back as a list); ``["tuple", [specs]]`` (their slots in order). Values of any other form (dicts,
strings, 2-D arrays) cannot be cached.
"""
from __future__ import annotations

import collections.abc
import json
import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from wenxin.common.errors import WenxinError


class CacheUnavailable(WenxinError):
    """The cache cannot be used for this reader (an unwritable folder, values it cannot store);
    with ``cache: auto`` the reader then converts in memory."""


def _open_array(path: str) -> np.ndarray:
    """A read-only memory map of a saved array (a plain array when it is empty: there is nothing
    to map)."""
    array = np.load(path, mmap_mode="r", allow_pickle=False)
    return np.asarray(array) if array.size else np.load(path, allow_pickle=False)


Spec = Any  # see the module docstring


def spec_of(value: Any) -> Spec:
    """The layout of one value; ``CacheUnavailable`` for values the cache cannot store."""
    if value is None:
        return "none"
    if isinstance(value, (bool, int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "biuf":
        return ["array", value.dtype.str]
    if isinstance(value, list) and all(isinstance(v, (int, np.integer)) for v in value):
        return "list"
    if isinstance(value, tuple):
        return ["tuple", [spec_of(v) for v in value]]
    shape = f" of shape {list(value.shape)}" if isinstance(value, np.ndarray) else ""
    raise CacheUnavailable(f"values of type {type(value).__name__}{shape}")


def leaf_kinds(spec: Spec) -> List[Tuple[str, str]]:
    """The slots of a layout: ``("scalar", dtype)`` or ``("ragged", dtype)`` each."""
    if spec == "none":
        return []
    if spec == "int":
        return [("scalar", "<i8")]
    if spec == "float":
        return [("scalar", "<f8")]
    if spec == "list":
        return [("ragged", "<i8")]
    if spec[0] == "array":
        return [("ragged", spec[1])]
    return [kind for child in spec[1] for kind in leaf_kinds(child)]


def flatten(value: Any, spec: Spec, out: List[Any]) -> None:
    """Append the slot values of ``value`` to ``out``; a value of another layout is an error."""
    if spec_of(value) != spec:
        raise CacheUnavailable(f"values of different forms ({spec_of(value)} after {spec})")
    if spec in ("int", "float"):
        out.append(value)
    elif spec == "list":
        out.append(np.asarray(value, dtype=np.int64))
    elif spec != "none" and spec[0] == "array":
        out.append(value)
    elif spec != "none":
        for child, child_spec in zip(value, spec[1]):
            flatten(child, child_spec, out)


def rebuild(spec: Spec, leaves: Iterator[Any]) -> Any:
    """The value of ``spec`` from its slot values, in order."""
    if spec == "none":
        return None
    if spec == "int":
        return int(next(leaves))
    if spec == "float":
        return float(next(leaves))
    if spec == "list":
        return next(leaves).tolist()
    if spec[0] == "array":
        return next(leaves).astype(np.dtype(spec[1]), copy=False)
    return tuple(rebuild(child, leaves) for child in spec[1])


class CachedExamples(collections.abc.Sequence):
    """A reader's examples from a cache entry: ``examples[i]`` is the tuple of field values that
    the reader's conversion gave, read from memory-mapped arrays.

    Args:
        folder: the entry.
        meta: its ``meta.json``.
    """

    def __init__(self, folder: str, meta: Dict[str, Any]) -> None:
        self.folder = folder
        self.specs: List[Spec] = meta["specs"]
        self.slots: List[Dict[str, Any]] = meta["slots"]
        self.size: int = meta["examples"]
        self.lengths = _open_array(os.path.join(folder, "lengths.npy"))
        self._arrays: List[Tuple[np.ndarray, Optional[np.ndarray]]] = []
        for k, slot in enumerate(self.slots):
            if slot["kind"] == "scalar":
                self._arrays.append((_open_array(os.path.join(folder, f"s{k}.npy")), None))
            else:
                self._arrays.append((_open_array(os.path.join(folder, f"s{k}.data.npy")),
                                     _open_array(os.path.join(folder, f"s{k}.offsets.npy"))))
        first = 0
        self._field_slots: List[range] = []  # each field's slots
        for spec in self.specs:
            self._field_slots.append(range(first, first + len(leaf_kinds(spec))))
            first += len(leaf_kinds(spec))

    @classmethod
    def open(cls, folder: str) -> "CachedExamples":
        with open(os.path.join(folder, "meta.json"), encoding="utf-8") as f:
            return cls(folder, json.load(f))

    def __reduce__(self) -> Tuple[Callable[..., "CachedExamples"], Tuple[str]]:
        return CachedExamples.open, (self.folder,)  # DataLoader workers map the files again

    def __len__(self) -> int:
        return self.size

    def _leaf(self, k: int, i: int) -> Any:
        data, offsets = self._arrays[k]
        if offsets is None:
            return data[i]
        return data[offsets[i]:offsets[i + 1]]

    def value(self, col: int, i: int) -> Any:
        """The value of the field at position ``col`` of example ``i``."""
        return rebuild(self.specs[col], (self._leaf(k, i) for k in self._field_slots[col]))

    def values(self, col: int, indices: Optional[Sequence[int]] = None) -> List[Any]:
        return [self.value(col, int(i)) for i in (range(self.size) if indices is None else indices)]

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.size))]
        if i < 0:
            i += self.size
        if not 0 <= i < self.size:
            raise IndexError(i)
        return tuple(self.value(col, i) for col in range(len(self.specs)))

    def column_view(self, col: int) -> Optional[np.ndarray]:
        """All values of a fixed-shape field as one array (``[N]`` numbers or ``[N, width]``
        vectors), or None for a field of variable-length or composite values."""
        spec = self.specs[col]
        if spec not in ("int", "float") and not (isinstance(spec, list) and spec[0] == "array"):
            return None
        k = self._field_slots[col][0]
        data, offsets = self._arrays[k]
        if offsets is None:
            return data
        width = self.slots[k].get("width")
        if width is None:
            return None
        return data.reshape(self.size, width).astype(np.dtype(spec[1]), copy=False)
