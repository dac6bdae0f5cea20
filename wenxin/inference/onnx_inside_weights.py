"""An ONNX program whose weights lie inside its file, read without them: ``program_without_weights``.

``onnx.load`` reads a program whole, its weights with it, and the int8 copy of a program holding
its weights (ERNIE-4.5-0.3B's float32 ``advance_pair.onnx``, 1.44 GB) wrote it to a scratch copy
with the weights beside it so that they could be read a group at a time: the int8 step's process
held 2.2 GiB for that, and the step took 40.5 s where it now takes 30.6-32.6 (peak 2.97 -> 2.80
GiB, the same file). Here the file is walked as
protobuf frames it (each field a key, then a length where its value is a message or bytes) without
reading a weight: every other part of the program is parsed by protobuf as usual, and each
initializer whose ``raw_data`` is ``SMALLEST`` bytes or more is given without it, as external data
that points into the program's own file (ONNX's ``location``, ``offset`` and ``length``), which
``onnx.external_data_helper`` reads where a weight is needed. A message may come in several frames
(protobuf merges them; wenxin's conversion writes each weight as a frame of its own), and the
frames are walked in the order written.
"""
from __future__ import annotations

import mmap
import os
from typing import Any, Iterator, List, NamedTuple, Tuple

SMALLEST = 1024  # raw_data of fewer bytes stays in the tensor as read
VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5  # protobuf's wire types (groups, 3 and 4, are not used by ONNX)


class Field(NamedTuple):
    """One protobuf field of a buffer: its number, wire type and where its frame and value lie."""

    number: int
    wire: int
    start: int  # the frame (key) starts here
    value: int  # the value (after a length's varint) starts here
    end: int


def _varint(buffer: Any, at: int, end: int) -> Tuple[int, int]:
    """The varint at ``at``, and where it ends."""
    result, shift = 0, 0
    while True:
        if at >= end:
            raise ValueError("a protobuf varint runs past its message")
        byte = buffer[at]
        result |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return result, at
        shift += 7


def fields(buffer: Any, start: int, end: int) -> Iterator[Field]:
    """The fields of the message ``buffer[start:end]``, in order."""
    at = start
    while at < end:
        key, value = _varint(buffer, at, end)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            after = _varint(buffer, value, end)[1]
        elif wire == LENGTH:
            length, value = _varint(buffer, value, end)
            after = value + length
        elif wire in (FIXED64, FIXED32):
            after = value + (8 if wire == FIXED64 else 4)
        else:
            raise ValueError(f"protobuf wire type {wire} (field {number}) is not one an ONNX file uses")
        if after > end:
            raise ValueError(f"protobuf field {number} runs past its message (the file is cut short?)")
        yield Field(number, wire, at, value, after)
        at = after


def program_without_weights(path: str) -> "onnx.ModelProto":  # type: ignore[name-defined]  # noqa: F821
    """The program in ``path`` with each large weight's ``raw_data`` left in the file: the tensor
    names it as external data in ``path`` itself (its base name; the folder is ``path``'s)."""
    import onnx
    model_number = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
    initializer_number = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
        model_parts: List[bytes] = []
        graph_parts: List[bytes] = []
        tensors = []
        for field in fields(buffer, 0, len(buffer)):
            if field.number != model_number or field.wire != LENGTH:
                model_parts.append(buffer[field.start:field.end])
                continue
            for part in fields(buffer, field.value, field.end):
                if part.number == initializer_number and part.wire == LENGTH:
                    tensors.append(_tensor_without_data(buffer, part, os.path.basename(path)))
                else:
                    graph_parts.append(buffer[part.start:part.end])
    model = onnx.ModelProto.FromString(b"".join(model_parts))
    model.graph.MergeFromString(b"".join(graph_parts))
    model.graph.initializer.extend(tensors)
    return model


def _tensor_without_data(buffer: Any, tensor: Field, location: str) -> "onnx.TensorProto":  # type: ignore[name-defined]  # noqa: F821,E501
    """The initializer framed by ``tensor``, its ``raw_data`` (where large) named as external data
    at its place in the file (``location``)."""
    import onnx
    raw_number = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number
    parts = list(fields(buffer, tensor.value, tensor.end))
    raws = [field for field in parts if field.number == raw_number and field.wire == LENGTH]
    if len(raws) != 1 or raws[0].end - raws[0].value < SMALLEST:  # small, or framed unlike a writer's
        return onnx.TensorProto.FromString(buffer[tensor.value:tensor.end])
    raw = raws[0]
    parsed = onnx.TensorProto.FromString(b"".join(buffer[f.start:f.end] for f in parts if f is not raw))
    parsed.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", raw.value), ("length", raw.end - raw.value)):
        parsed.external_data.add(key=key, value=str(value))
    return parsed
