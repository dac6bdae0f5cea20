"""A model's parameters changed for a block and put back after it, bit for bit; and the numpy
copy of a parameter that keeps a bfloat16 one's values (``exact_array``)."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, Mapping

import numpy as np


@contextlib.contextmanager
def state_held(state: Mapping[str, Any], changes: Mapping[str, Any],
               set_state: Callable[[Dict[str, Any]], None]) -> Iterator[None]:
    """Inside: ``changes`` set through ``set_state``. After: the changed entries of ``state`` (a
    model's parameters by structured name, live tensors or arrays) as they were, bit for bit;
    only those are copied."""
    originals = {name: exact_array(state[name], copy=True) for name in changes}
    set_state(dict(changes))
    try:
        yield
    finally:
        set_state(originals)


def exact_array(value: Any, copy: bool = False) -> np.ndarray:
    """A tensor or array as numpy; a bfloat16 tensor (which numpy lacks, and Paddle gives as its
    uint16 bit patterns) as its exact float32 values."""
    if str(getattr(value, "dtype", "")) != "paddle.bfloat16":
        array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
        return np.array(array) if copy else array
    bits = value.numpy().astype(np.uint32)
    return (bits << 16).view(np.float32)
