"""Paddle's dense tensor file format, read with numpy: no unpickling, no Paddle, one tensor in
memory at a time.

A tensor is written (Paddle's ``SerializeToStream`` of a ``DenseTensor``) as ``uint32`` version 0,
``uint64`` LoD levels (each a ``uint64`` byte size and its offsets), ``uint32`` version 0, ``int32``
size of a ``TensorDesc`` protobuf (data type, dims), then the data. ``paddle.static.save_vars``
and ERNIE-kit's ``params`` folders hold one such tensor a file (``parse_tensor``); Paddle's
``save_combine`` (an inference export's ``.pdiparams``) writes several one after the other, in the
order of their sorted names, without the names (``combined_records``, ``read_record``).
"""
from __future__ import annotations

import io
import math
import struct
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import numpy as np

# Paddle's VarType codes of the dtypes a parameter file may hold
DTYPES: Dict[int, "np.dtype[Any]"] = {code: np.dtype(dtype) for code, dtype in {
    0: np.bool_, 1: np.int16, 2: np.int32, 3: np.int64, 4: np.float16, 5: np.float32, 6: np.float64,
    20: np.uint8, 21: np.int8}.items()}
BFLOAT16 = 22  # numpy has no bfloat16: its bits are read as uint16 where a caller allows it
MAX_LOD_LEVELS = 16
MAX_DESC_BYTES = 4096


class BrokenTensor(ValueError):
    """A tensor of a combined file that is not whole: ``index`` is its place (from 0), ``start``
    the byte where it begins."""

    def __init__(self, index: int, start: int, why: str) -> None:
        super().__init__(f"tensor {index + 1} (at byte {start}): {why}")
        self.index, self.start = index, start


@dataclass(frozen=True)
class TensorRecord:
    """One tensor of a file: its type, shape, and where its data lies (``offset``, in bytes)."""

    dtype: "np.dtype[Any]"
    shape: Tuple[int, ...]
    offset: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def parse_tensor(data: bytes) -> np.ndarray:
    """The one tensor ``data`` holds (a copy); ValueError saying what is wrong with it."""
    record = record_at(io.BytesIO(data), len(data))
    if len(data) - record.offset != record.nbytes:
        raise ValueError(f"shape {list(record.shape)} of {record.dtype} needs {record.nbytes} bytes, "
                         f"the file has {len(data) - record.offset}")
    count = math.prod(record.shape)
    return np.frombuffer(data, dtype=record.dtype, count=count, offset=record.offset).reshape(record.shape).copy()


def combined_records(stream: io.BufferedIOBase, size: int, bfloat16: bool = False) -> List[TensorRecord]:
    """Every tensor of a ``save_combine`` file of ``size`` bytes open as ``stream``, in its order,
    read from their headers alone; ``BrokenTensor`` for the first that is not whole.
    ``bfloat16``: such tensors allowed, as uint16 (their bits)."""
    records: List[TensorRecord] = []
    stream.seek(0)
    while stream.tell() < size:
        start = stream.tell()
        try:
            record = record_at(stream, size, bfloat16)
        except (ValueError, struct.error) as e:
            raise BrokenTensor(len(records), start, str(e)) from None
        records.append(record)
        stream.seek(record.offset + record.nbytes)
    return records


def read_record(stream: io.BufferedIOBase, record: TensorRecord) -> np.ndarray:
    """``record``'s tensor read from ``stream`` into an array of its own."""
    array = np.empty(record.shape, dtype=record.dtype)
    stream.seek(record.offset)
    if record.nbytes and stream.readinto(array.data.cast("B")) != record.nbytes:
        raise ValueError(f"the file ends inside a tensor of {record.nbytes} bytes at byte {record.offset}")
    return array


def record_at(stream: io.BufferedIOBase, size: int, bfloat16: bool = False) -> TensorRecord:
    """The header of the tensor at ``stream``'s position, in a file of ``size`` bytes; the stream
    is left at its data. Checked: versions, sizes within the file, the data type."""
    version, levels = struct.unpack("<IQ", _read(stream, 12))
    if version != 0 or levels > MAX_LOD_LEVELS:
        raise ValueError(f"version {version}, {levels} LoD levels")
    for _ in range(levels):
        (level_bytes,) = struct.unpack("<Q", _read(stream, 8))
        if level_bytes > size - stream.tell():
            raise ValueError(f"a LoD level of {level_bytes} bytes in a file of {size}")
        stream.seek(level_bytes, io.SEEK_CUR)
    tensor_version, desc_size = struct.unpack("<Ii", _read(stream, 8))
    if tensor_version != 0 or not 0 < desc_size < MAX_DESC_BYTES:
        raise ValueError(f"tensor version {tensor_version}, description of {desc_size} bytes")
    dtype_code, dims = _parse_tensor_desc(_read(stream, desc_size))
    dtype: "np.dtype[Any]"
    if dtype_code == BFLOAT16 and bfloat16:
        dtype = np.dtype(np.uint16)
    elif dtype_code in DTYPES:
        dtype = DTYPES[dtype_code]
    else:
        raise ValueError(f"unsupported data type code {dtype_code}")
    if any(d < 0 for d in dims):
        raise ValueError(f"shape {dims}")
    record = TensorRecord(dtype, tuple(dims), stream.tell())
    if record.nbytes > size - record.offset:  # Python ints: a hostile shape cannot overflow
        raise ValueError(f"shape {dims} of {dtype} needs {record.nbytes} bytes, the file has "
                         f"{size - record.offset} left")
    return record


def _read(stream: io.BufferedIOBase, count: int) -> bytes:
    data = stream.read(count)
    if len(data) != count:
        raise ValueError(f"the file ends inside a tensor's header (wanted {count} bytes, {len(data)} left)")
    return data


def varint_bytes(value: int) -> bytes:
    """``value`` (at least 0) as a protobuf varint, seven bits a byte, the lowest first."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _varint(desc: bytes, pos: int) -> Tuple[int, int]:
    """The protobuf varint at ``desc[pos]``, and the position after it."""
    shift = result = 0
    while True:
        if pos >= len(desc):
            raise ValueError("truncated tensor description")
        byte = desc[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("malformed varint in tensor description")


def _parse_tensor_desc(desc: bytes) -> Tuple[int, List[int]]:
    """``TensorDesc { required Type data_type = 1; repeated int64 dims = 2; }`` (packed or not)."""
    pos, dtype_code, dims = 0, -1, []
    while pos < len(desc):
        key, pos = _varint(desc, pos)
        field, wire = key >> 3, key & 7
        if field == 1 and wire == 0:
            dtype_code, pos = _varint(desc, pos)
        elif field == 2 and wire == 0:
            dim, pos = _varint(desc, pos)
            dims.append(_signed(dim))
        elif field == 2 and wire == 2:
            length, pos = _varint(desc, pos)
            end = pos + length
            while pos < end:
                dim, pos = _varint(desc, pos)
                dims.append(_signed(dim))
        else:
            raise ValueError(f"unexpected field {field} in tensor description")
    return dtype_code, dims


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value
