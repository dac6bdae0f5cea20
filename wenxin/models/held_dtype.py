"""Frozen weights held in bfloat16 (an ERNIE 4.5 chat model's ``weight_dtype``), computed in
float32.

A model held this way creates its linear layers' and embeddings' weights in bfloat16 (half the
memory of float32: ERNIE-4.5-21B-A3B's 81 GiB become 41), and each layer casts its weight to its
input's dtype where it is used (``HeldLinear``; ``computed``), so a step computes as in float32
on weights rounded to bfloat16. With recompute, only the layer being computed holds a float32
copy. numpy has no bfloat16: ``exact_array`` (``wenxin.common.held_state``) and ``to_held``
convert between a bfloat16 tensor and float32 values (every bfloat16 value is a float32 value;
the way back rounds to nearest, ties to even, as Paddle's cast does).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Literal

import numpy as np
import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle
import paddle.nn.functional as F
from paddle import nn

from wenxin.common.held_state import exact_array

WeightDtype = Literal["float32", "bfloat16"]
FLOAT32: WeightDtype = "float32"
BFLOAT16: WeightDtype = "bfloat16"
WEIGHT_DTYPES = (FLOAT32, BFLOAT16)


@contextlib.contextmanager
def default_dtype(dtype: WeightDtype) -> Iterator[None]:
    """Inside: layers create their parameters in ``dtype``."""
    before = paddle.get_default_dtype()
    paddle.set_default_dtype(dtype)
    try:
        yield
    finally:
        paddle.set_default_dtype(before)


def is_bfloat16(value: Any) -> bool:
    return getattr(value, "dtype", None) == paddle.bfloat16


@paddle.jit.not_to_static  # plain Python at trace time: a cast is in the program or it is not
def computed(weight: paddle.Tensor, dtype: Any = "float32") -> paddle.Tensor:
    """``weight`` in the dtype a layer computes in (a cast only where it is held in another)."""
    return weight if weight.dtype == dtype or str(weight.dtype) == f"paddle.{dtype}" else weight.astype(dtype)


class HeldLinear(nn.Linear):
    """``nn.Linear`` whose weight and bias may be held in another dtype than its input: they are
    cast to the input's dtype where used."""

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        bias = None if self.bias is None else computed(self.bias, x.dtype)
        return F.linear(x, computed(self.weight, x.dtype), bias)


def to_held(value: Any, like: paddle.Tensor) -> Any:
    """``value`` (float values: an array or a tensor) as a tensor of ``like``'s dtype where that
    is bfloat16 (rounded to nearest, ties to even); anything else unchanged."""
    if not is_bfloat16(like) or is_bfloat16(value):
        return value
    array = np.asarray(exact_array(value), dtype=np.float32)
    return paddle.to_tensor(array, place=paddle.CPUPlace()).astype(BFLOAT16)
