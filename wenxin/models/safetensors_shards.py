"""Writing weights as the safetensors shards other runtimes read: ``model.safetensors``, or
``model-0000i-of-0000n.safetensors`` files and ``model.safetensors.index.json`` (the layout
Hugging Face and PaddleFormers write and load), in float32 or bfloat16.

float32 files are written by the safetensors library. bfloat16 ones are written here: numpy has no
bfloat16, so the library's numpy API cannot write one, and its Paddle API writes Paddle's bfloat16
tensors as bfloat16 only in its newer releases (older ones store them as uint16, which no loader
reads as weights). The format is small and fixed (an 8-byte little-endian header length, a JSON
header naming each tensor's dtype, shape and byte range, then the bytes), and a test reads what
this writes with the library. The values are rounded to bfloat16 by Paddle's own cast (to the
nearest, ties to even).
"""
from __future__ import annotations

import json
import os
import struct
from typing import Collection, Dict, List, Mapping, Tuple

import numpy as np

from wenxin.common.errors import ConfigError
from wenxin.common.state_io import save_arrays

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
DTYPES = ("float32", "bfloat16")
HEADER_ALIGNMENT = 8  # the header is padded with spaces so the data starts 8-byte aligned
BFLOAT16_EXPONENT = 0x7F80  # all its bits set: infinity or NaN


def as_bfloat16_bits(value: np.ndarray) -> np.ndarray:
    """The bfloat16 nearest each float32 value, as its 16 bits (``uint16``), by Paddle's cast."""
    import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
    import paddle
    bits = paddle.to_tensor(np.ascontiguousarray(value, dtype=np.float32)).astype("bfloat16").numpy()
    return bits.view(np.uint16)


def write_bfloat16_file(path: str, tensors: Mapping[str, np.ndarray], float32_names: Collection[str] = ()) -> None:
    """One safetensors file of ``tensors`` (finite float32 arrays) stored as bfloat16, but those of
    ``float32_names`` as float32; a value beyond bfloat16's range is an error naming its tensor."""
    header: Dict[str, object] = {}
    chunks: List[bytes] = []
    offset = 0
    for name, value in tensors.items():
        if name in float32_names:
            data, dtype = np.ascontiguousarray(value, dtype="<f4").tobytes(), "F32"
        else:
            bits = as_bfloat16_bits(value)
            if ((bits & BFLOAT16_EXPONENT) == BFLOAT16_EXPONENT).any():
                raise ConfigError(f"export: {name} holds a value beyond bfloat16's range (about 3.39e38); "
                                  f"export it in float32")
            data, dtype = bits.astype("<u2", copy=False).tobytes(), "BF16"
        header[name] = {"dtype": dtype, "shape": list(value.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % HEADER_ALIGNMENT)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for chunk in chunks:
            f.write(chunk)


def write_file(path: str, tensors: Mapping[str, np.ndarray], dtype: str, float32_names: Collection[str] = ()
               ) -> None:
    """One safetensors file of ``tensors`` in ``dtype`` (``DTYPES``), ``float32_names`` in float32."""
    if dtype == "bfloat16":
        write_bfloat16_file(path, tensors, float32_names)
    else:
        save_arrays(path, {name: np.ascontiguousarray(value, dtype=np.float32) for name, value in tensors.items()},
                    metadata={"format": "pt"})
        os.chmod(path, 0o666 & ~_umask())  # the library makes its files private; an export is shared as others


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def shard_plan(sizes: Mapping[str, int], max_shard_bytes: int) -> List[List[str]]:
    """The tensors of each shard, in order: each shard takes tensors in the given order until the
    next would make it larger than ``max_shard_bytes`` (a tensor larger than that is a shard of
    its own)."""
    shards: List[List[str]] = [[]]
    filled = 0
    for name, size in sizes.items():
        if shards[-1] and filled + size > max_shard_bytes:
            shards.append([])
            filled = 0
        shards[-1].append(name)
        filled += size
    return shards


def write_shards(folder: str, tensors: Mapping[str, np.ndarray], dtype: str, max_shard_bytes: int,
                 float32_names: Collection[str] = ()) -> Tuple[List[str], int]:
    """Write ``tensors`` into ``folder`` as one ``model.safetensors`` or as numbered shards with
    their index, in ``dtype`` but ``float32_names`` in float32; returns the files written and the
    bytes of the tensors."""
    sizes = {name: int(np.prod(value.shape)) * (2 if dtype == "bfloat16" and name not in float32_names else 4)
             for name, value in tensors.items()}
    shards = shard_plan(sizes, max_shard_bytes)
    total = sum(sizes.values())
    if len(shards) == 1:
        write_file(os.path.join(folder, SINGLE_FILE), tensors, dtype, float32_names)
        return [SINGLE_FILE], total
    names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    weight_map: Dict[str, str] = {}
    for file_name, members in zip(names, shards):
        write_file(os.path.join(folder, file_name), {name: tensors[name] for name in members}, dtype, float32_names)
        weight_map.update({name: file_name for name in members})
    with open(os.path.join(folder, INDEX_FILE), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return names + [INDEX_FILE], total
