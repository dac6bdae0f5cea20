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


_PREAD = hasattr(os, "pread")  # where the system has it (not Windows): values read without mapping them


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
        self._files: Dict[int, Tuple[Any, int]] = {}  # ragged slot -> its data file and where its values start
        for k, slot in enumerate(self.slots):
            if slot["kind"] == "scalar":
                self._arrays.append((_open_array(os.path.join(folder, f"s{k}.npy")), None))
            else:
                data_path = os.path.join(folder, f"s{k}.data.npy")
                self._arrays.append((_open_array(data_path), _open_array(os.path.join(folder, f"s{k}.offsets.npy"))))
                if _PREAD and self._arrays[-1][0].size:
                    start = np.load(data_path, mmap_mode="r").offset  # the .npy header's length
                    self._files[k] = (open(data_path, "rb", buffering=0), start)  # noqa: SIM115 (closed with the object)
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
        start, end = int(offsets[i]), int(offsets[i + 1])
        read = self._files.get(k)
        if read is None:
            return data[start:end]
        # read, not mapped: a value read at random through the map brought its neighbours' pages
        # into the process too (the kernel maps what is around a fault), and a shuffled epoch
        # over a 1M-line entry made the trainer's memory grow by all 734 MB of its ids
        # (benchmarks/data_scale.py); read with pread, nothing stays in the process
        file, first = read
        size = data.itemsize
        return np.frombuffer(os.pread(file.fileno(), (end - start) * size, first + start * size), dtype=data.dtype)

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


# ---- writing an entry's arrays (the token cache's workers write parts, the parent joins them) ----
JOIN_CHUNK = 1 << 22  # values per step when part arrays are joined into an entry's file


def save_array(path: str, array: np.ndarray) -> None:
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


class PartWriter:
    """Collects a part's examples as slot values, then saves them as arrays (``fields``: the
    reader's, for ``path`` in errors; ``example_length``: an example's padded length)."""

    def __init__(self, fields: Sequence[Any], example_length: Callable[[Tuple[Any, ...]], int]) -> None:
        self.fields, self.example_length = list(fields), example_length
        self.specs: Optional[List[Spec]] = None
        self.leaves: List[List[Any]] = []
        self.lengths: List[int] = []

    def add(self, example: Tuple[Any, ...]) -> None:
        fields = self.fields
        if self.specs is None:
            specs = []
            for field, value in zip(fields, example):
                try:
                    specs.append(spec_of(value))
                except CacheUnavailable as e:
                    raise CacheUnavailable(f"{field.path}: the token cache cannot store {e}") from None
            self.specs = specs
            self.leaves = [[] for spec in specs for _ in leaf_kinds(spec)]
        out: List[Any] = []
        for field, value, spec in zip(fields, example, self.specs):
            try:
                flatten(value, spec, out)
            except CacheUnavailable as e:
                raise CacheUnavailable(f"{field.path}: the token cache cannot store {e}") from None
        for slot, leaf in zip(self.leaves, out):
            slot.append(leaf)
        self.lengths.append(self.example_length(example))

    def save(self, folder: str, index: int) -> Dict[str, Any]:
        slots: List[Dict[str, Any]] = []
        kinds = [kind for spec in self.specs or [] for kind in leaf_kinds(spec)]
        for k, ((kind, dtype), values) in enumerate(zip(kinds, self.leaves)):
            name = os.path.join(folder, f"p{index}.s{k}")
            if kind == "scalar":
                save_array(name + ".npy", np.asarray(values, dtype=dtype))
                slots.append({})
                continue
            sizes = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
            data = np.concatenate(values).astype(dtype, copy=False) if values else np.zeros(0, dtype)
            save_array(name + ".data.npy", data)
            save_array(name + ".sizes.npy", sizes)
            integers = data.size and data.dtype.kind in "iu"
            slots.append({"min": int(data.min()) if integers else 0, "max": int(data.max()) if integers else 0,
                          "widths": sorted(set(sizes.tolist()))[:2]})
        save_array(os.path.join(folder, f"p{index}.lengths.npy"), np.asarray(self.lengths, dtype=np.int64))
        return {"examples": len(self.lengths), "specs": self.specs, "slots": slots}


def join_parts(folder: str, names: List[str], target: Optional[str], dtype: np.dtype, count: int,
                tables: Optional[List[np.ndarray]] = None) -> np.ndarray:
    """Concatenate the part arrays ``names`` (deleting them, and mapping each through its part's
    table when given) into ``target`` (a file written a chunk at a time), or return them joined
    when ``target`` is None."""
    if target is None:
        arrays = [np.load(os.path.join(folder, n)) for n in names]
        for n in names:
            os.remove(os.path.join(folder, n))
        return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)
    path = os.path.join(folder, target)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (count,)}
    written = 0
    with open(path, "wb") as out:  # plain writes, not a memory map: a map's written pages count in
        np.lib.format.write_array_header_1_0(out, header)  # this process's RSS (734 MB at 1M lines)
        for i, n in enumerate(names):
            part = np.load(os.path.join(folder, n), mmap_mode="r")
            for start in range(0, len(part), JOIN_CHUNK):
                chunk = np.asarray(part[start:start + JOIN_CHUNK])
                if tables is not None:
                    chunk = tables[i][chunk]
                out.write(np.ascontiguousarray(chunk, dtype=dtype).data)
                written += len(chunk)
            del part
            os.remove(os.path.join(folder, n))
    assert written == count, (target, written, count)
    return np.zeros(0, dtype)
