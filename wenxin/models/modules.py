"""Reusable layers: embeddings and text encoders.

Every encoder maps ids ``[batch, seq_len]`` (+ lengths ``[batch]``) to a fixed vector
``[batch, output_dim]`` and works the same in eager and static-graph mode.
"""
from __future__ import annotations

from typing import Any, List, Sequence

import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from wenxin.compat.paddle_internals import onednn_flag_on


def length_mask(seq_lens: paddle.Tensor, max_len: paddle.Tensor | int, dtype: Any = "float32") -> paddle.Tensor:
    """``[batch]`` lengths -> ``[batch, max_len]`` mask of 1 for real tokens, 0 for padding, in
    ``dtype`` (a Paddle dtype or its name)."""
    positions = paddle.arange(max_len, dtype=seq_lens.dtype).unsqueeze(0)  # [1, T]
    return (positions < seq_lens.unsqueeze(1)).astype(dtype)  # [B, T]


def max_over_time(x: paddle.Tensor) -> paddle.Tensor:
    """``[B, D, T]`` -> ``[B, D]``, the maximum over the last axis.

    Uses max-pooling, whose CPU backward is ~12x faster than ``max()``; except in static graphs
    with oneDNN (``FLAGS_use_onednn``), where Paddle 3.3's ``adaptive_max_pool1d`` throws, so
    ``amax`` is used there instead."""
    if not paddle.in_dynamic_mode() and onednn_flag_on():
        return paddle.amax(x, axis=-1)
    return F.adaptive_max_pool1d(x, 1).squeeze(-1)


class TokenEmbedding(nn.Embedding):
    """An embedding table whose padding row stays zero."""

    def __init__(self, vocab_size: int, emb_dim: int, padding_idx: int = 0) -> None:
        super().__init__(vocab_size, emb_dim, padding_idx=padding_idx)


class BoWEncoder(nn.Layer):
    """Pools the embeddings of the real tokens: ``mean``, ``max``, both concatenated
    (``mean_max``) or ``sum``. ``[B, T, D]`` -> ``[B, D]`` (``[B, 2D]`` for ``mean_max``).

    ``token_dropout`` drops whole tokens from the bag while training (a regularizer for
    bag-of-n-gram models, which otherwise memorize rare n-grams)."""

    def __init__(self, emb_dim: int, pooling: str = "mean", token_dropout: float = 0.0) -> None:
        super().__init__()
        if pooling not in ("mean", "max", "mean_max", "sum"):
            raise ValueError(f"unknown pooling {pooling!r}")
        self.pooling = pooling
        self.token_dropout = token_dropout
        self.output_dim = emb_dim * (2 if pooling == "mean_max" else 1)

    def forward(self, embedded: paddle.Tensor, seq_lens: paddle.Tensor) -> paddle.Tensor:
        mask = length_mask(seq_lens, paddle.shape(embedded)[1], embedded.dtype).unsqueeze(-1)  # [B, T, 1]
        if self.training and self.token_dropout > 0:
            keep = (paddle.rand(paddle.shape(mask), dtype=mask.dtype) >= self.token_dropout).astype(mask.dtype)
            mask = mask * keep  # [B, T, 1]
        pooled = []
        if self.pooling == "sum":
            pooled.append((embedded * mask).sum(axis=1))  # [B, D]
        if self.pooling in ("mean", "mean_max"):
            count = paddle.clip(mask.sum(axis=1), min=1.0)  # [B, 1] tokens kept
            pooled.append((embedded * mask).sum(axis=1) / count)  # [B, D]
        if self.pooling in ("max", "mean_max"):
            masked = embedded * mask - (1.0 - mask) * 1e4  # padding never wins the max
            pooled.append(max_over_time(masked.transpose([0, 2, 1])))  # [B, D]
        return pooled[0] if len(pooled) == 1 else paddle.concat(pooled, axis=-1)


class CNNEncoder(nn.Layer):
    """Parallel 1-D convolutions of several widths, ReLU (or ``tanh``), max-pooled over time.
    ``[B, T, D]`` -> ``[B, num_filters * len(filter_sizes)]``."""

    def __init__(self, emb_dim: int, num_filters: int, filter_sizes: Sequence[int], activation: str = "relu") -> None:
        super().__init__()
        self.convs = nn.LayerList([nn.Conv1D(emb_dim, num_filters, k, padding=k // 2) for k in filter_sizes])
        self.output_dim = num_filters * len(filter_sizes)
        self.activation = {"relu": F.relu, "tanh": paddle.tanh}[activation]

    def forward(self, embedded: paddle.Tensor, seq_lens: paddle.Tensor) -> paddle.Tensor:
        x = embedded.transpose([0, 2, 1])  # [B, D, T]
        max_len = paddle.shape(embedded)[1]
        mask = length_mask(seq_lens, max_len, embedded.dtype)  # [B, T]
        pooled: List[paddle.Tensor] = []
        for conv in self.convs:
            h = self.activation(conv(x))[:, :, :max_len]  # [B, F, T] (even widths give T+1: cut)
            h = h * mask.unsqueeze(1) - (1.0 - mask.unsqueeze(1)) * 1e4  # padding never wins the max
            pooled.append(max_over_time(h))  # [B, F, T] -> [B, F]
        return paddle.concat(pooled, axis=1)


class RNNEncoder(nn.Layer):
    """Bidirectional LSTM or GRU; returns the mean of the real time steps' outputs.
    ``[B, T, D]`` -> ``[B, 2 * hidden_size]``."""

    def __init__(self, emb_dim: int, hidden_size: int, num_layers: int = 1, cell: str = "lstm",
                 dropout: float = 0.0) -> None:
        super().__init__()
        rnn_cls = {"lstm": nn.LSTM, "gru": nn.GRU}[cell]
        self.rnn = rnn_cls(emb_dim, hidden_size, num_layers=num_layers, direction="bidirect",
                           dropout=dropout if num_layers > 1 else 0.0)
        self.output_dim = 2 * hidden_size
        self.pool = BoWEncoder(self.output_dim)

    def states(self, embedded: paddle.Tensor, seq_lens: paddle.Tensor) -> paddle.Tensor:
        """Per-token outputs of both directions ``[B, T, 2H]`` (zeros past each length)."""
        outputs, _ = self.rnn(embedded, sequence_length=seq_lens.astype("int32"))
        return outputs

    def forward(self, embedded: paddle.Tensor, seq_lens: paddle.Tensor) -> paddle.Tensor:
        return self.pool(self.states(embedded, seq_lens), seq_lens)  # [B, T, 2H] -> [B, 2H]
