"""Two groups of rows in one step of an ERNIE 4.5 decoder: ``advance_pair`` (issue 69, point 3).

A service's turn steps its decoding rows (one new token each, after its cache) and prefills
newcomers' prompt parts (``T`` tokens each, after theirs). As two ``advance`` calls
(``wenxin.models.advance_step``) each call reads every weight once; the prompt parts cannot join
the decoding rows' call without padding every decoding row to ``T`` tokens. ``advance_pair``
takes both groups, each as ``advance`` takes its rows (tokens ``[R, T]``, positions, ``visible``
``[R, T, N + T]`` and each layer's cached keys and values ``[R, KV, N, D]``), runs the tokens of
both through the dense layers as one batch ``[Ra * Ta + Rb * Tb, hidden]`` (one pass over the
weights) and attends within each group, to its own cache. It returns both groups' next logits,
``[Ra + Rb, vocab]`` (the first group's rows first), and each group's new keys and values
``[layers, 2, R, KV, T, D]``. Each row gets the logits and keys it gets alone in ``advance``
(within float32 rounding: tested).

Measured at ERNIE-4.5-0.3B's shape on ONNX Runtime float32, one thread
(``benchmarks/advance_pair_step.py``, docs/serving.md): 16 decoding rows after 128 tokens and a
32-token prompt part cost 257 CPU-ms in one call against 353 in two (16 rows alone: 167), so a
turn that also prefills 32 prompt tokens costs 1.5x one that does not, instead of 2.1x.

An export holds it beside ``advance`` (``step_specs`` of ERNIE 4.5 chat models; one parameters
file for both), and it is every engine's one program: either group may have no rows (every
reshape names its sizes for such a group: ``wenxin.models.attention_shapes``), so Paddle
Inference, ONNX Runtime float32 (``advance_pair.onnx``) and int8 (``advance_pair.int8.onnx``)
each hold the pair alone, the weights once, run a serving turn's decoding rows and the longest of
its prompt parts in one call (``BatchDecoder.step``'s ``beside``) and every other call beside no
rows (``advance_step.advance_by_pair``). Measured at ERNIE-4.5-0.3B's shape, one thread, against
``advance`` alone (``benchmarks/onnx_step.py``, docs/serving.md): a one-row decoding step beside
no rows costs -2% to +4% on ONNX Runtime float32 and -2% to +10% on Paddle Inference (runs in
either order), a 16-row one -1% to +2%; in int8, 9% less than beside a lone row, which an export
made before this (its pair without ``empty_second`` in ``preprocess.json``) still needs: it runs
the pair on the int8 engine only.
"""
from __future__ import annotations

from typing import Any, List, NamedTuple, Sequence, Tuple

import paddle

from wenxin.models.attention_shapes import AttentionShapes, exact, joined
from wenxin.models.ernie45 import LAST, Ernie45Model, rotary_angles


class StepRows(NamedTuple):
    """One group of ``advance_pair``: ``R`` rows of ``T`` new tokens (see ``Ernie45Model.advance``)."""

    tokens: paddle.Tensor  # [R, T] int64
    positions: paddle.Tensor  # [R, T] int64
    visible: paddle.Tensor  # [R, T, N + T] float32: 1 where a token sees a column
    past: Sequence[Tuple[paddle.Tensor, paddle.Tensor]]  # each layer's cached keys and values [R, KV, N, D]


def advance_pair(decoder: Ernie45Model, output_weight: paddle.Tensor, first: StepRows, second: StepRows
                 ) -> Tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
    """Both groups' next logits ``[Ra + Rb, vocab]`` (float32) and each group's new keys and values
    ``[layers, 2, R, KV, T, D]`` (see the module docstring); ``output_weight`` ``[vocab, hidden]``.
    Either group may have no rows."""
    config = decoder.config
    groups = (first, second)
    sizes = [_GroupSizes.of(config, group) for group in groups]  # every layer reshapes to these
    # each group's rotation tables [R, T, 1, D/2, 2]
    angles = [rotary_angles(group.positions, config.head_dim, config.rope_theta) for group in groups]
    biases = [((group.visible - 1.0) * 1e9).unsqueeze(1) for group in groups]  # [R, 1, T, N + T]
    ends = sizes[0].tokens  # [1]: where the first group's tokens end
    x = paddle.concat([decoder.embed(g.tokens).reshape(size.flat) for g, size in zip(groups, sizes)])  # [M, hidden]
    new: List[List[paddle.Tensor]] = [[], []]
    for index, layer in enumerate(decoder.layers):
        attention = layer.self_attn
        q, k, v = attention.project(layer.input_layernorm(x))  # [M, H * D], [M, KV * D] x 2
        outputs = []
        for number, (group, size, (sin, cos), bias) in enumerate(zip(groups, sizes, angles, biases)):
            part = [_group_part(t, ends, number) for t in (q, k, v)]  # [R * T, .]: core reshapes them
            out, keys, values = attention.core(*part, sin, cos, bias, group.past[index], size.attention)
            outputs.append(out)  # [R * T, H * D] (the attention shapes' ``merged`` is flat)
            new[number].append(paddle.stack([keys, values]))  # [2, R, KV, T, D]
        x = x + attention.o_proj(paddle.concat(outputs))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    last = [_group_part(x, ends, number).reshape(size.rows)[:, -1] for number, size in enumerate(sizes)]  # [R, hidden]
    states = decoder.norm(paddle.concat(last))  # [Ra + Rb, hidden]
    logits = paddle.matmul(states, output_weight, transpose_y=True).astype("float32")
    return logits, paddle.stack(new[0]), paddle.stack(new[1])


class _GroupSizes(NamedTuple):
    """A group's sizes and the shapes its layers reshape to, built once a call."""

    tokens: paddle.Tensor  # [1]: R * T
    flat: paddle.Tensor  # [R * T, hidden]
    rows: paddle.Tensor  # [R, T, hidden]
    attention: AttentionShapes  # its ``merged`` flat: [R * T, H * D]

    @classmethod
    def of(cls, config: Any, group: StepRows) -> "_GroupSizes":
        sizes = paddle.shape(group.tokens).astype("int64")  # [2]: R, T
        count = sizes[0:1] * sizes[1:2]  # [1]
        heads, kv_heads, head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        return cls(count, joined(count, [config.hidden_size]), joined(sizes, [config.hidden_size]),
                   exact(heads, kv_heads, head_dim, sizes, paddle.shape(group.visible)[2:3].astype("int64")))


def _group_part(x: paddle.Tensor, ends: paddle.Tensor, number: int) -> paddle.Tensor:
    """The first group's tokens of ``x`` ``[M, width]`` (``number`` 0), or the second's; ``ends``
    ``[1]``: how many the first group has (a slice by a size tensor ``[1]`` is one operator of the
    program; an index by a size was four: ``Reshape``, ``Unsqueeze``, ``Concat``, ``Slice``)."""
    return paddle.slice(x, [0], [0], ends) if number == 0 else paddle.slice(x, [0], ends, [LAST])
