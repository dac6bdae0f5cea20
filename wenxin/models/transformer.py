"""An ERNIE-style transformer encoder: embeddings, N self-attention layers and a pooler."""
from __future__ import annotations

from typing import Any, Dict, Tuple

import paddle
import paddle.nn as nn

from wenxin.config.schema import Key, Schema
from wenxin.models.modules import length_mask

TRANSFORMER_SCHEMA: Schema = {
    "hidden_size": Key(int, 128, minimum=8),
    "num_layers": Key(int, 2, minimum=1),
    "num_heads": Key(int, 4, minimum=1),
    "intermediate_size": Key(int, 0, minimum=0, doc="feed-forward width (0: 4 x hidden_size)"),
    "max_position": Key(int, 512, minimum=1, doc="longest input the position table covers"),
    "dropout": Key(float, 0.1, minimum=0.0, maximum=1.0),
    "attention_dropout": Key(float, 0.1, minimum=0.0, maximum=1.0),
    "pooling": Key(str, "first", choices=["first", "mean"],
                   doc="pooler input: the first token's state (ERNIE's [CLS]) or the mean of all"),
}


class TransformerEncoder(nn.Layer):
    """Word + position embeddings, LayerNorm and dropout, ``num_layers`` post-norm transformer
    layers (GELU), and a tanh pooler, initialized as ERNIE (normal, std 0.02).

    ``forward(ids [B, T], seq_lens [B])`` returns the token states ``[B, T, H]`` and the pooled
    vector ``[B, H]``. Parameter names (``word_embeddings``, ``layers``, ``pooler``) are what
    pretraining saves and fine-tuning loads.

    Args:
        vocab_size: rows of the word embedding table.
        padding_id: the padding token id (masked out of attention).
        config: ``TRANSFORMER_SCHEMA`` values.
    """

    def __init__(self, vocab_size: int, padding_id: int, config: Dict[str, Any]) -> None:
        super().__init__()
        hidden, heads = config["hidden_size"], config["num_heads"]
        if hidden % heads:
            raise ValueError(f"hidden_size {hidden} is not a multiple of num_heads {heads}")
        weights = paddle.ParamAttr(initializer=nn.initializer.Normal(0.0, 0.02))
        self.hidden_size = self.output_dim = hidden
        self.max_position = config["max_position"]
        self.pooling = config["pooling"]
        self.padding_id = padding_id
        self.word_embeddings = nn.Embedding(vocab_size, hidden, padding_idx=padding_id, weight_attr=weights)
        self.position_embeddings = nn.Embedding(self.max_position, hidden, weight_attr=weights)
        self.embedding_norm = nn.LayerNorm(hidden)
        self.embedding_dropout = nn.Dropout(config["dropout"])
        layer = nn.TransformerEncoderLayer(hidden, heads, config["intermediate_size"] or 4 * hidden,
                                           dropout=config["dropout"], activation="gelu",
                                           attn_dropout=config["attention_dropout"], act_dropout=0.0,
                                           weight_attr=weights)
        self.layers = nn.TransformerEncoder(layer, config["num_layers"])
        self.pooler = nn.Linear(hidden, hidden, weight_attr=weights)

    def forward(self, ids: paddle.Tensor, seq_lens: paddle.Tensor) -> Tuple[paddle.Tensor, paddle.Tensor]:
        max_len = paddle.shape(ids)[1]
        positions = paddle.arange(max_len, dtype="int64").unsqueeze(0)  # [1, T]
        x = self.word_embeddings(ids) + self.position_embeddings(positions)  # [B, T, H]
        x = self.embedding_dropout(self.embedding_norm(x))
        mask = length_mask(seq_lens, max_len, x.dtype)  # [B, T]
        attention_bias = ((1.0 - mask) * -1e4).unsqueeze([1, 2])  # [B, 1, 1, T]: padding gets no attention
        states = self.layers(x, attention_bias)  # [B, T, H]
        if self.pooling == "first":
            summary = states[:, 0]  # [B, H]
        else:
            weights = mask.unsqueeze(-1)  # [B, T, 1]
            summary = (states * weights).sum(axis=1) / paddle.clip(weights.sum(axis=1), min=1.0)
        return states, paddle.tanh(self.pooler(summary))
