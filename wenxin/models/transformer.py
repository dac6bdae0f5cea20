"""A transformer encoder trained from scratch: the ERNIE encoder shaped by task-file settings."""
from __future__ import annotations

from typing import Any, Dict

from wenxin.config.schema import MAX_WIDTH, Key, Schema
from wenxin.models.ernie import ErnieConfig, ErnieEncoder

TRANSFORMER_SCHEMA: Schema = {
    "hidden_size": Key(int, 128, minimum=8, maximum=MAX_WIDTH),
    "num_layers": Key(int, 2, minimum=1),
    "num_heads": Key(int, 4, minimum=1),
    "intermediate_size": Key(int, 0, minimum=0, maximum=MAX_WIDTH, doc="feed-forward width (0: 4 x hidden_size)"),
    "max_position": Key(int, 512, minimum=1, doc="longest input the position table covers"),
    "dropout": Key(float, 0.1, minimum=0.0, maximum=1.0),
    "attention_dropout": Key(float, 0.1, minimum=0.0, maximum=1.0),
    "pooling": Key(str, "first", choices=["first", "mean"],
                   doc="pooler input: the first token's state (ERNIE's [CLS]) or the mean of all"),
}


class TransformerEncoder(ErnieEncoder):
    """The ERNIE encoder (``wenxin.models.ernie``) shaped by task-file settings instead of a
    pretrained model's config: no token-type embeddings, initialized as ERNIE (std 0.02).

    ``forward(ids [B, T], seq_lens [B])`` returns the token states ``[B, T, H]`` and the pooled
    vector ``[B, H]``. Parameter names (``embeddings.*``, ``encoder.layers.*``, ``pooler.*``) are
    PaddleNLP's, so what pretraining saves loads like a PaddleNLP checkpoint.

    Args:
        vocab_size: rows of the word embedding table.
        padding_id: the padding token id.
        config: ``TRANSFORMER_SCHEMA`` values.
    """

    def __init__(self, vocab_size: int, padding_id: int, config: Dict[str, Any]) -> None:
        hidden, heads = config["hidden_size"], config["num_heads"]
        if hidden % heads:
            raise ValueError(f"hidden_size {hidden} is not a multiple of num_heads {heads}")
        super().__init__(ErnieConfig(
            vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=config["num_layers"],
            num_attention_heads=heads, intermediate_size=config["intermediate_size"],
            hidden_dropout_prob=config["dropout"], attention_probs_dropout_prob=config["attention_dropout"],
            max_position_embeddings=config["max_position"], type_vocab_size=0, pad_token_id=padding_id,
            layer_norm_eps=1e-5, pooling=config["pooling"]))
