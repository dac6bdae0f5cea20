"""``TextEncoder``: one configurable text encoder (ids -> token states and a pooled vector) that
any task's model can use, so tasks choose BoW, CNN, BiLSTM/BiGRU or a transformer in task.json."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle
import paddle.nn as nn

from wenxin.common.errors import ConfigError
from wenxin.config.schema import MAX_WIDTH, Key, Schema
from wenxin.models.modules import BoWEncoder, CNNEncoder, RNNEncoder, TokenEmbedding
from wenxin.models.transformer import TRANSFORMER_SCHEMA, TransformerEncoder

SEQUENCE_ENCODERS = ("lstm", "gru", "transformer")  # those with per-token states

ENCODER_SCHEMA: Schema = {
    "type": Key(str, "gru", choices=["bow", "cnn", "lstm", "gru", "transformer"]),
    "emb_dim": Key(int, 128, minimum=1, maximum=MAX_WIDTH, doc="bow/cnn/lstm/gru: embedding width"),
    "hidden_size": Key(int, 128, minimum=1, maximum=MAX_WIDTH, doc="lstm/gru: units per direction"),
    "num_layers": Key(int, 1, minimum=1, doc="lstm/gru: stacked layers"),
    "num_filters": Key(int, 128, minimum=1, maximum=MAX_WIDTH, doc="cnn: filters per width"),
    "filter_sizes": Key(list, [2, 3, 4], items=Key(int, minimum=1), doc="cnn: filter widths"),
    "pooling": Key(str, "mean", choices=["mean", "max", "mean_max"], doc="bow: pooling"),
    "dropout": Key(float, 0.0, minimum=0.0, maximum=1.0, doc="lstm/gru: between stacked layers"),
    "bigram_buckets": Key(int, 0, minimum=0, doc="lstm/gru: also embed each token's two bigrams (with the "
                                                 "token before and after it), hashed into this many rows "
                                                 "(0: off)"),
    "bigram_dim": Key(int, 32, minimum=1, maximum=MAX_WIDTH, doc="lstm/gru: width of each bigram embedding"),
    "bigram_hashes": Key(int, 1, minimum=1, maximum=4, doc="lstm/gru: rows summed for each bigram, each by its "
                                                           "own hash, so two bigrams rarely share all of them"),
    "input_dropout": Key(float, 0.0, minimum=0.0, maximum=1.0, doc="lstm/gru: dropout on the embeddings"),
    "transformer": Key(dict, {}, children=TRANSFORMER_SCHEMA, doc="transformer: its settings"),
}


class TextEncoder(nn.Layer):
    """Embeds and encodes ids ``[B, T]`` with lengths ``[B]``.

    ``forward`` returns ``(states, pooled)``: token states ``[B, T, state_dim]`` (None for bow
    and cnn, which have none) and a sentence vector ``[B, output_dim]``.

    Args:
        config: ``ENCODER_SCHEMA`` values.
        text_info: the text field's ``info()`` (``vocab_size``, ``padding_id``, ``max_seq_len``).
        key_path: the config key of ``config``, for errors.
    """

    def __init__(self, config: Dict[str, Any], text_info: Dict[str, Any], key_path: str = "model.encoder") -> None:
        super().__init__()
        self.kind = config["type"]
        vocab_size, padding_id = text_info["vocab_size"], text_info["padding_id"]
        self.state_dim: Optional[int] = None
        if self.kind == "transformer":
            settings = config["transformer"]
            if text_info.get("max_seq_len", 0) > settings["max_position"]:
                raise ConfigError(f"{key_path}.transformer.max_position: {settings['max_position']} is less "
                                  f"than the text field's max_seq_len {text_info['max_seq_len']}")
            self.transformer = TransformerEncoder(vocab_size, padding_id, settings)
            self.state_dim = self.output_dim = self.transformer.output_dim
            return
        emb_dim = config["emb_dim"]
        self.embedding = TokenEmbedding(vocab_size, emb_dim, padding_id)
        self.bigrams: Optional[HashedBigrams] = None
        if config["bigram_buckets"]:
            if self.kind not in ("lstm", "gru"):
                raise ConfigError(f"{key_path}.bigram_buckets: bigram features are for the lstm and gru "
                                  f"encoders, not '{self.kind}'")
            self.bigrams = HashedBigrams(vocab_size, padding_id, config["bigram_buckets"], config["bigram_dim"],
                                         config["bigram_hashes"])
            emb_dim += self.bigrams.output_dim
        self.input_dropout = nn.Dropout(config["input_dropout"]) if config["input_dropout"] else None
        if self.kind == "bow":
            self.encoder: nn.Layer = BoWEncoder(emb_dim, config["pooling"])
        elif self.kind == "cnn":
            self.encoder = CNNEncoder(emb_dim, config["num_filters"], config["filter_sizes"])
        else:
            self.encoder = RNNEncoder(emb_dim, config["hidden_size"], config["num_layers"], self.kind,
                                      config["dropout"])
            self.state_dim = self.encoder.output_dim
        self.output_dim = self.encoder.output_dim

    def forward(self, ids: paddle.Tensor, seq_lens: paddle.Tensor) -> Tuple[Optional[paddle.Tensor], paddle.Tensor]:
        if self.kind == "transformer":
            return self.transformer(ids, seq_lens)
        embedded = self.embedding(ids)  # [B, T, E]
        if self.bigrams is not None:
            embedded = paddle.concat([embedded, self.bigrams(ids)], axis=-1)  # [B, T, E + 2 * bigram_dim]
        if self.input_dropout is not None:
            embedded = self.input_dropout(embedded)
        if isinstance(self.encoder, RNNEncoder):
            states = self.encoder.states(embedded, seq_lens)  # [B, T, 2H]
            return states, self.encoder.pool(states, seq_lens)
        return None, self.encoder(embedded, seq_lens)


class HashedBigrams(nn.Layer):
    """Embeds each token's bigrams with its left and right neighbour, ``[B, T]`` ids ->
    ``[B, T, 2 * dim]``. A bigram ``(a, b)`` is the sum of ``hashes`` rows of one table: rows
    ``(a * vocab_size + b) % p`` for the ``hashes`` largest primes ``p <= buckets``. They are
    computed in the graph from the token ids, so the exported model needs no bigram vocab and
    cannot drift from training. Bigrams share a row; with two hashes, two bigrams share both rows
    only if their numbers are equal modulo the product of the primes (never, while it exceeds
    ``vocab_size ** 2``). The sequence's edges pair with the padding id.

    Args:
        vocab_size / padding_id: of the token ids.
        buckets: rows of the bigram table.
        dim: width of one bigram embedding.
        hashes: rows summed per bigram.
    """

    def __init__(self, vocab_size: int, padding_id: int, buckets: int, dim: int, hashes: int = 1) -> None:
        super().__init__()
        self.vocab_size, self.padding_id = vocab_size, padding_id
        self.moduli = largest_primes(buckets, hashes)
        self.table = nn.Embedding(buckets, dim)
        self.output_dim = 2 * dim

    def forward(self, ids: paddle.Tensor) -> paddle.Tensor:
        # The T + 1 bigrams of a row, (pad, x0), (x0, x1) ... (x[T-1], pad): token t's left bigram
        # is bigram t and its right one bigram t + 1, so each is looked up once, and every row
        # of every hash in one lookup (one gradient of the table, not one per lookup).
        pad = paddle.full_like(ids[:, :1], self.padding_id)  # [B, 1]
        padded = paddle.concat([pad, ids, pad], axis=1)  # [B, T + 2]
        bigrams = padded[:, :-1] * self.vocab_size + padded[:, 1:]  # [B, T + 1]
        rows = paddle.stack([bigrams % p for p in self.moduli])  # [hashes, B, T + 1]
        embedded = self.table(rows).sum(axis=0)  # [B, T + 1, dim]
        return paddle.concat([embedded[:, :-1], embedded[:, 1:]], axis=-1)  # [B, T, 2 * dim]: left, right


def largest_primes(limit: int, count: int) -> List[int]:
    """The ``count`` largest primes not above ``limit`` (fewer if there are none)."""
    primes: List[int] = []
    n = limit
    while n >= 2 and len(primes) < count:
        if all(n % d for d in range(2, int(n ** 0.5) + 1)):
            primes.append(n)
        n -= 1
    return primes or [max(limit, 1)]


def text_field_info(data_info: Dict[str, Dict[str, Any]], field: str, key: str) -> Dict[str, Any]:
    """The named text field's ``info()``, or a ConfigError naming ``key``."""
    info = data_info.get(field)
    if not info or not info.get("vocab_size"):
        raise ConfigError(f"{key}: '{field}' is not a text field of the train_reader "
                          f"(fields: {', '.join(data_info)})")
    return info


def shared_vocab_info(data_info: Dict[str, Dict[str, Any]], fields_by_key: Dict[str, str]) -> Dict[str, Any]:
    """The info of text fields that one encoder reads (``{"model.text_a_field": "text_a", ...}``):
    they must share one vocab (``vocab_from``), or their ids would mean different tokens."""
    infos = {key: text_field_info(data_info, name, key) for key, name in fields_by_key.items()}
    (first_key, first), *others = infos.items()
    for key, info in others:
        if info.get("vocab_from") != first.get("vocab_from"):
            raise ConfigError(f"{key}: '{fields_by_key[key]}' has its own vocab, but the shared encoder "
                              f"reads it like '{fields_by_key[first_key]}': set \"vocab_from\": "
                              f"\"{first.get('vocab_from')}\" on that field in every reader")
    return first
