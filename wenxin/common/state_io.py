"""Training state on disk as JSON plus arrays (safetensors): nothing a load executes.

``save_state(folder, name, value)`` writes ``<name>.json`` (the structure and every non-array
value) and, when the value holds arrays, ``<name>.safetensors``; ``load_state`` reads them
back. Arrays are numpy arrays or Paddle tensors; tuples, non-finite floats and bytes are tagged
in the JSON so they come back as they went in. Parameters alone go to one safetensors file
(``save_arrays``). safetensors' own format is a JSON header and raw little-endian buffers.
"""
from __future__ import annotations

import base64
import json
import math
import os
from typing import Any, Dict, Mapping, Optional

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from wenxin.common.errors import CheckpointError

_ARRAY, _TUPLE, _FLOAT, _BYTES = "__array__", "__tuple__", "__float__", "__bytes__"


def as_numpy(value: Any) -> np.ndarray:
    """A numpy copy of a Paddle tensor or array-like value."""
    return np.ascontiguousarray(value.numpy() if hasattr(value, "numpy") else np.asarray(value))


def save_arrays(path: str, arrays: Mapping[str, Any], metadata: Optional[Dict[str, str]] = None) -> None:
    """A safetensors file of ``arrays``; a write that fails (a full disk) is an ``OSError``."""
    _save_file({name: as_numpy(value) for name, value in arrays.items()}, path, metadata)


def _save_file(arrays: Dict[str, np.ndarray], path: str, metadata: Optional[Dict[str, str]] = None) -> None:
    try:
        save_file(arrays, path, metadata=metadata)
    except SafetensorError as e:  # safetensors reports a full disk as its own error type
        raise OSError(str(e).replace("Error while serializing: ", "")) from None


def load_arrays(path: str, what: str) -> Dict[str, np.ndarray]:
    if not os.path.isfile(path):
        raise CheckpointError(f"{what} not found: {path}")
    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError, MemoryError) as e:
        raise CheckpointError(f"{what} is corrupt or unreadable: {path} ({type(e).__name__}: {e})") from None


def _encode(value: Any, arrays: Dict[str, np.ndarray], path: str) -> Any:
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"{path}: state keys must be strings, got {key!r}")
        return {key: _encode(v, arrays, f"{path}/{key}") for key, v in value.items()}
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v, arrays, f"{path}/{i}") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, arrays, f"{path}/{i}") for i, v in enumerate(value)]
    return _encode_leaf(value, arrays, path)


def _encode_leaf(value: Any, arrays: Dict[str, np.ndarray], path: str) -> Any:
    """A value that holds no others: as itself, a tagged float or bytes, or an array stored aside."""
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else {_FLOAT: repr(float(value))}
    if isinstance(value, bytes):
        return {_BYTES: base64.b64encode(value).decode("ascii")}
    if isinstance(value, np.ndarray) or hasattr(value, "numpy"):
        arrays[path] = as_numpy(value)
        return {_ARRAY: path}
    raise TypeError(f"{path}: cannot store a {type(value).__name__} in a checkpoint")


def _decode(value: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {_ARRAY}:
        return arrays[value[_ARRAY]]
    if set(value) == {_TUPLE}:
        return tuple(_decode(v, arrays) for v in value[_TUPLE])
    if set(value) == {_FLOAT}:
        return float(value[_FLOAT])
    if set(value) == {_BYTES}:
        return base64.b64decode(value[_BYTES])
    return {k: _decode(v, arrays) for k, v in value.items()}


def save_state(folder: str, name: str, value: Any) -> None:
    """Write ``value`` as ``<name>.json`` (+ ``<name>.safetensors`` for its arrays)."""
    arrays: Dict[str, np.ndarray] = {}
    tree = _encode(value, arrays, "")
    if arrays:
        _save_file(arrays, os.path.join(folder, f"{name}.safetensors"))
    with open(os.path.join(folder, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump({"format": 1, "has_arrays": bool(arrays), "value": tree}, f, ensure_ascii=False)


def state_files(name: str) -> tuple:
    return f"{name}.json", f"{name}.safetensors"


def load_state(folder: str, name: str, what: str) -> Any:
    """Read what ``save_state`` wrote; a missing, malformed or inconsistent file is a
    ``CheckpointError`` naming it."""
    json_path = os.path.join(folder, f"{name}.json")
    try:
        with open(json_path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{what} not found: {json_path}") from None
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{what} is corrupt or unreadable: {json_path} ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict) or "value" not in data:
        raise CheckpointError(f"{what} is malformed: {json_path}")
    arrays = load_arrays(os.path.join(folder, f"{name}.safetensors"), what) if data.get("has_arrays") else {}
    try:
        return _decode(data["value"], arrays)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{what} is malformed: {json_path} ({type(e).__name__}: {e})") from None
