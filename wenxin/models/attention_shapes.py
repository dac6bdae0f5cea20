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

Rotating a head's feature pairs reads it as pairs (``head_pairs``, ``kv_pairs``: ``[B, T, heads,
D / 2, 2]``), and the softmax weights of a step after a cache are split at the cache's width
(``cached``, a size tensor ``[1]`` built once a call where known, else read from the cache): each
of these is one operator of the program rather than the several a size computed where it is used
costs (issue 69: a leaner step).
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional, Union

import paddle

Shape = Union[List, paddle.Tensor]  # a reshape's target: sizes (ints, or size tensors), or a shape tensor


class AttentionShapes(NamedTuple):
    """What ``core`` reshapes to, with ``B`` rows of ``T`` new tokens, ``H`` query heads and
    ``KV`` key/value heads of ``D`` features (``G`` = H / KV), ``C`` = N + T visible columns."""

    heads: Shape  # [B, T, H, D]: the queries
    kv: Shape  # [B, T, KV, D]: the keys and values
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
    return AttentionShapes([0, 0, heads, head_dim], [0, 0, kv_heads, head_dim], [0, kv_heads, -1, head_dim],
                           [0, heads, length, -1], [0, kv_heads, group * length, -1], [0, heads, length, head_dim],
                           [0, 0, heads * head_dim], [0, 0, heads, half, 2], [0, 0, kv_heads, half, 2])


def exact(heads: int, kv_heads: int, head_dim: int, rows: paddle.Tensor, length: paddle.Tensor,
          columns: paddle.Tensor) -> AttentionShapes:
    """Every size named, as shape tensors (``rows`` ``B``, ``length`` ``T``, ``columns`` ``C``:
    size tensors); right for a group of no rows. ``merged`` is flat, ``[B * T, H * D]``."""
    group, half, shape = heads // kv_heads, head_dim // 2, shape_tensor
    return AttentionShapes(shape(rows, length, heads, head_dim), shape(rows, length, kv_heads, head_dim),
                           shape(rows, kv_heads, length * group, head_dim), shape(rows, heads, length, columns),
                           shape(rows, kv_heads, length * group, columns), shape(rows, heads, length, head_dim),
                           shape(rows * length, heads * head_dim), shape(rows, length, heads, half, 2),
                           shape(rows, length, kv_heads, half, 2), shape(columns - length))


def shape_tensor(*sizes: Union[int, paddle.Tensor]) -> paddle.Tensor:
    """A shape ``[len(sizes)]`` int64 of sizes given as ints or as size tensors."""
    return paddle.concat([size.astype("int64").reshape([1]) if isinstance(size, paddle.Tensor)
                          else paddle.full([1], size, dtype="int64") for size in sizes])
