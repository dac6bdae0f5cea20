"""The shapes one grouped-query attention call reshapes its tensors to (``Ernie45Attention.core``).

Written the usual way, each reshape names a size it keeps as 0 ("this size as it is") and one it
infers as -1, which costs nothing in a program: the shape is a constant. Neither holds for a group
of no rows, which ``advance_pair`` runs where a call has one group only (its second, empty): ONNX
Runtime cannot infer a -1 from no elements, and Paddle reads a 0 of a tensor with no elements as
0 (``[0, 1, 2048]`` reshaped to ``[0, 0, 16, 128]`` gave ``[0, 0, 16, 128]``, its second size
lost). ``exact`` names every size, as shape tensors built once a call from the group's rows, new
tokens and visible columns and shared by every layer (built in each layer, they added 5% to a
one-row step of ERNIE-4.5-0.3B on ONNX Runtime: measured); ``copying`` is the usual form, for
every other call.

The queries and keys are read as feature pairs straight from their projections (``head_pairs``,
``kv_pairs``: ``[B, T, heads, D / 2, 2]``), rotated and turned heads first as pairs; the softmax
weights of a step after a cache are split at the cache's width (``cached``, a size tensor ``[1]``
built once a call where known, else read from the cache); and ``exact``'s shapes are each one
``Concat`` of size tensors and constants: fewer operators than sizes computed where they are
used (issue 69: a leaner step).
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional, Union

import paddle

Shape = Union[List, paddle.Tensor]  # a reshape's target: sizes (ints, or size tensors), or a shape tensor


class AttentionShapes(NamedTuple):
    """What ``core`` reshapes to, with ``B`` rows of ``T`` new tokens, ``H`` query heads and
    ``KV`` key/value heads of ``D`` features (``G`` = H / KV), ``C`` = N + T visible columns."""

    kv: Shape  # [B, T, KV, D]: the values
    keys: Shape  # [B, KV, T, D]: the keys, rotated
    grouped: Shape  # [B, KV, G * T, D]: the queries of each key/value head as rows of one product
    scores: Shape  # [B, H, T, C]
    weights: Shape  # [B, KV, G * T, C]
    out: Shape  # [B, H, T, D]
    merged: Shape  # [B, T, H * D] (or [B * T, H * D], where the caller wants the tokens flat)
    head_pairs: Shape  # [B, T, H, D / 2, 2]: the queries' feature pairs
    kv_pairs: Shape  # [B, T, KV, D / 2, 2]: the keys'
    cached: Optional[paddle.Tensor] = None  # [1]: N, the columns of the cache (None: read from it)


def copying(heads: int, kv_heads: int, head_dim: int, length: paddle.Tensor) -> AttentionShapes:
    """The usual form: 0 keeps a size, -1 infers one (``length``: ``T``, a size tensor)."""
    group, half = heads // kv_heads, head_dim // 2
    return AttentionShapes([0, 0, kv_heads, head_dim], [0, 0, 0, head_dim], [0, kv_heads, -1, head_dim],
                           [0, heads, length, -1], [0, kv_heads, group * length, -1], [0, heads, length, head_dim],
                           [0, 0, heads * head_dim], [0, 0, heads, half, 2], [0, 0, kv_heads, half, 2])


def exact(heads: int, kv_heads: int, head_dim: int, sizes: paddle.Tensor, columns: paddle.Tensor) -> AttentionShapes:
    """Every size named, as shape tensors built of ``sizes`` ``[2]`` (``B`` and ``T``: the shape of
    the group's tokens) and ``columns`` ``[1]`` (``C``), each one ``Concat`` of them and constants;
    right for a group of no rows. ``merged`` is flat, ``[B * T, H * D]``."""
    group, half = heads // kv_heads, head_dim // 2
    rows, length = sizes[0:1], sizes[1:2]  # [1] each
    grouped_length = length * group
    return AttentionShapes(joined(sizes, [kv_heads, head_dim]), joined(rows, [kv_heads], length, [head_dim]),
                           joined(rows, [kv_heads], grouped_length, [head_dim]),
                           joined(rows, [heads], length, columns), joined(rows, [kv_heads], grouped_length, columns),
                           joined(rows, [heads], length, [head_dim]), joined(rows * length, [heads * head_dim]),
                           joined(sizes, [heads, half, 2]), joined(sizes, [kv_heads, half, 2]), columns - length)


def joined(*parts: Union[List[int], paddle.Tensor]) -> paddle.Tensor:
    """A shape ``[n]`` int64 of parts given as size tensors ``[k]`` or as lists of ints."""
    return paddle.concat([part if isinstance(part, paddle.Tensor) else paddle.to_tensor(part, dtype="int64")
                          for part in parts])
