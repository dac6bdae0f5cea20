"""``wenxin.common.paddle_tensor_files`` on files written here byte by byte in Paddle's dense
tensor format (``tests/test_onnx_convert.py`` reads Paddle's own files against Paddle's loader):
every record of a combined file found from its headers alone, read one at a time, and a file that
is cut short, declares an impossible shape or a type it does not know refused with the tensor's
place, never read past its end."""
import io
import struct

import numpy as np
import pytest

from wenxin.common.paddle_tensor_files import BrokenTensor, combined_records, parse_tensor, read_record, varint_bytes

CODES = {np.dtype(np.float32): 5, np.dtype(np.int64): 3, np.dtype(np.float16): 4, np.dtype(np.int8): 21}


def varint(value):
    return varint_bytes(value & (2**64 - 1))  # a negative int64 as protobuf writes it


def serialized(array, code=None, lod=(), packed=True, shape=None):
    """One tensor as Paddle's ``SerializeToStream`` writes it (``shape``: another one declared)."""
    shape = array.shape if shape is None else shape
    dims = b"".join(varint(d) for d in shape)
    desc = bytes([0x08]) + varint(CODES[array.dtype] if code is None else code)
    desc += (bytes([0x12]) + varint(len(dims)) + dims) if packed else \
        b"".join(bytes([0x10]) + varint(d) for d in shape)
    head = struct.pack("<IQ", 0, len(lod)) + b"".join(struct.pack("<Q", len(level)) + level for level in lod)
    return head + struct.pack("<Ii", 0, len(desc)) + desc + array.tobytes()


def test_every_tensor_of_a_combined_file_is_found_from_its_headers_and_read_alone():
    arrays = [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([7, -1], np.int64),
              np.ones((2, 1, 3), np.float16), np.array(5, np.int8).reshape(()), np.zeros((0, 4), np.float32)]
    data = b"".join(serialized(a, packed=i % 2 == 0, lod=[struct.pack("<QQ", 0, 1)] * (i == 1))
                    for i, a in enumerate(arrays))
    stream = io.BytesIO(data)
    records = combined_records(stream, len(data))
    assert [(r.dtype, r.shape) for r in records] == [(a.dtype, a.shape) for a in arrays]
    for record, array in reversed(list(zip(records, arrays))):  # any order: each read where it lies
        read = read_record(stream, record)
        assert read.dtype == array.dtype and np.array_equal(read, array)
    assert np.array_equal(parse_tensor(serialized(arrays[0])), arrays[0])


def test_bfloat16_is_read_as_its_bits_only_where_the_caller_allows_it():
    bits = np.array([0x3FC0, 0xBF80], np.uint16)  # 1.5, -1.0
    data = serialized(bits, code=22)
    with pytest.raises(BrokenTensor, match="tensor 1 .*unsupported data type code 22"):
        combined_records(io.BytesIO(data), len(data))
    (record,) = combined_records(io.BytesIO(data), len(data), bfloat16=True)
    assert np.array_equal(read_record(io.BytesIO(data), record), bits)


FIRST = len(serialized(np.ones((3, 3), np.float32)))  # where the second tensor starts: 62


@pytest.mark.parametrize("damage, why", [
    (lambda d: d[:-3], r"tensor 2 \(at byte 62\): shape \[2, 2\] of float32 needs 16 bytes, the file has 13 left"),
    (lambda d: d[:FIRST + 6], r"tensor 2 \(at byte 62\): the file ends inside a tensor's header"),
    (lambda d: d[:FIRST] + struct.pack("<IQ", 0, 2**40) + d[FIRST + 12:], r"tensor 2 .*version 0, 1099511627776 LoD"),
    (lambda d: d[:FIRST] + struct.pack("<IQ", 1, 0) + d[FIRST + 12:], r"tensor 2 .*version 1, 0 LoD levels"),
    (lambda d: d[:FIRST] + struct.pack("<IQQ", 0, 1, 2**20) + d[FIRST + 12:], r"tensor 2 .*LoD level of 1048576 bytes"),
    (lambda d: d + b"\x00" * 5, r"tensor 3 \(at byte 104\): the file ends inside a tensor's header"),
    (lambda d: d + serialized(np.ones(2, np.float32), code=99), r"tensor 3 .*unsupported data type code 99"),
    (lambda d: d + serialized(np.ones(2, np.float32), shape=(2, -1)), r"tensor 3 .*shape \[2, -1\]"),
])
def test_a_damaged_file_is_refused_naming_the_tensors_place(damage, why):
    data = damage(serialized(np.ones((3, 3), np.float32)) + serialized(np.ones((2, 2), np.float32)))
    with pytest.raises(BrokenTensor, match=why) as caught:
        combined_records(io.BytesIO(data), len(data))
    assert caught.value.index == int(why.split()[1]) - 1


def test_a_shape_larger_than_the_file_is_refused_before_anything_is_allocated():
    data = serialized(np.zeros(0, np.float32), shape=(2**34,))
    with pytest.raises(BrokenTensor, match=r"shape \[17179869184\] of float32 needs 68719476736 bytes"):
        combined_records(io.BytesIO(data), len(data))
    with pytest.raises(ValueError, match="needs 68719476736 bytes"):
        parse_tensor(data)


def test_a_record_read_from_a_file_that_shrank_since_is_refused():
    data = serialized(np.ones(4, np.float32))
    (record,) = combined_records(io.BytesIO(data), len(data))
    with pytest.raises(ValueError, match="the file ends inside a tensor of 16 bytes"):
        read_record(io.BytesIO(data[:-1]), record)
