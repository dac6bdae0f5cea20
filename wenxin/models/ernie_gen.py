"""ERNIE-Gen's infilling sequence-to-sequence network on the ERNIE encoder (``ErnieEncoder``).

One sequence holds the source and the target: ``[CLS] s1 [SEP] s2 [SEP] ...`` (each source text
its own token type) then ``[CLS] t1 ... [SEP]`` (type ``tgt_type_id``), numbered with continuous
positions. Two streams run through the same transformer layers:

- the **context** stream: source tokens see the whole source (bidirectional); target token ``j``
  sees the source and target tokens ``0..j`` (causal);
- the **query** stream: one ``[MASK]`` per target position ``i``, at that position, seeing the
  source, the context's target tokens before ``i`` and itself. Its state predicts target token
  ``i`` (``LmHead``). While training, some of the context's target tokens are replaced with
  ``[MASK]`` (ERNIE-Gen's infilling noise), so the model learns not to trust its history blindly.

Decoding runs the same computation with a key/value cache of the context stream, in one step
function (``infill_streams``; ``wenxin.models.infill_step``): the source and ``[CLS]`` once,
then per step the chosen token (whose keys and values join the cache) and the ``[MASK]`` after
it (whose do not). The batch layout here puts
the padded target after the padded source (``[B, S + T]``) and hides the padding with the
attention bias, which is the same computation as ERNIE-kit's packed layout.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from wenxin.models.ernie import ErnieEncoder

_HIDDEN = 1 << 30  # the rank of a key nobody may see (padding)
_NEG = -1e4  # ERNIE's additive attention bias for a hidden key


class LmHead(nn.Layer):
    """ERNIE-Gen's output layer: a dense layer with the encoder's activation, LayerNorm, then
    the word embedding's transpose (``weight_sharing``) or a layer of its own, plus a bias.
    ERNIE-kit's names: ``mask_lm_trans_fc``, ``mask_lm_trans_layer_norm_*``, ``mask_lm_out_fc``."""

    def __init__(self, hidden: int, vocab_size: int, activation: str, epsilon: float, weight_sharing: bool,
                 initializer_range: float) -> None:
        super().__init__()
        weights = paddle.ParamAttr(initializer=nn.initializer.TruncatedNormal(0.0, initializer_range))
        self.transform = nn.Linear(hidden, hidden, weight_attr=weights)
        self.activation = activation
        self.layer_norm = nn.LayerNorm(hidden, epsilon=epsilon)
        self.decoder = None if weight_sharing else nn.Linear(hidden, vocab_size, weight_attr=weights, bias_attr=False)
        self.bias = self.create_parameter([vocab_size], is_bias=True)

    def forward(self, states: paddle.Tensor, word_embeddings: paddle.Tensor) -> paddle.Tensor:
        """``[..., H]`` states -> ``[..., V]`` logits."""
        h = self.transform(states)
        h = F.gelu(h) if self.activation == "gelu" else F.relu(h)
        h = self.layer_norm(h)
        if self.decoder is None:
            return paddle.matmul(h, word_embeddings, transpose_y=True) + self.bias
        return self.decoder(h) + self.bias


def _heads(attn: nn.MultiHeadAttention, x: paddle.Tensor) -> paddle.Tensor:
    """``[B, T, H]`` -> ``[B, heads, T, H / heads]``."""
    return x.reshape([0, 0, attn.num_heads, attn.head_dim]).transpose([0, 2, 1, 3])


def keys_values(attn: nn.MultiHeadAttention, x: paddle.Tensor) -> Tuple[paddle.Tensor, paddle.Tensor]:
    """The attention keys and values of states ``x`` ``[B, T, H]``, each ``[B, heads, T, d]``."""
    return _heads(attn, attn.k_proj(x)), _heads(attn, attn.v_proj(x))


def attend(attn: nn.MultiHeadAttention, x: paddle.Tensor, keys: paddle.Tensor, values: paddle.Tensor,
           bias: Optional[paddle.Tensor]) -> paddle.Tensor:
    """Multi-head attention of queries from ``x`` ``[B, Tq, H]`` over ``keys``/``values``
    ``[B, heads, Tk, d]`` with an additive ``bias`` ``[B, 1, Tq, Tk]``: the computation of
    ``nn.MultiHeadAttention`` with its own projections, given keys and values computed apart."""
    q = _heads(attn, attn.q_proj(x))  # [B, heads, Tq, d]
    scores = paddle.matmul(q * (attn.head_dim ** -0.5), keys, transpose_y=True)  # [B, heads, Tq, Tk]
    if bias is not None:
        scores = scores + bias
    weights = F.softmax(scores)
    if attn.dropout:
        weights = F.dropout(weights, attn.dropout, training=attn.training, mode="upscale_in_train")
    out = paddle.matmul(weights, values).transpose([0, 2, 1, 3])  # [B, Tq, heads, d]
    return attn.out_proj(out.reshape([0, 0, attn.embed_dim]))


def finish_block(layer: nn.TransformerEncoderLayer, x: paddle.Tensor, attended: paddle.Tensor) -> paddle.Tensor:
    """The rest of a post-norm transformer block after its attention (residual, LayerNorm,
    feed-forward), as ``nn.TransformerEncoderLayer`` computes it."""
    x = layer.norm1(x + layer.dropout1(attended))
    return layer.norm2(x + layer.dropout2(layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))))


def visible_bias(visible: paddle.Tensor) -> paddle.Tensor:
    """``visible`` ``[R, T, K]`` (1: seen) as an additive attention bias ``[R, 1, T, K]``."""
    return ((visible - 1.0) * -_NEG).unsqueeze(1)


def two_stream_bias(src_lens: paddle.Tensor, tgt_lens: paddle.Tensor, src_width: paddle.Tensor,
                    tgt_width: paddle.Tensor, queries: paddle.Tensor) -> Tuple[paddle.Tensor, paddle.Tensor]:
    """Attention biases for a batch laid out ``[source (S) | target (T)]``: the context's
    ``[B, 1, S + T, S + T]`` and the query stream's ``[B, 1, Q, S + T + Q]`` (query ``i`` sees
    the source, target tokens ``< i`` and itself)."""
    src_pos = paddle.arange(src_width, dtype="int64").unsqueeze(0)  # [1, S]
    tgt_pos = paddle.arange(tgt_width, dtype="int64").unsqueeze(0)  # [1, T]
    # every key gets a rank: -1 for a real source token, j for target token j, _HIDDEN for padding
    src_rank = paddle.where(src_pos < src_lens.unsqueeze(1), paddle.full_like(src_pos, -1),
                            paddle.full_like(src_pos, _HIDDEN))  # [B, S]
    tgt_rank = paddle.where(tgt_pos < tgt_lens.unsqueeze(1), tgt_pos, paddle.full_like(tgt_pos, _HIDDEN))  # [B, T]
    key_rank = paddle.concat([src_rank, tgt_rank], axis=1).unsqueeze(1)  # [B, 1, S + T]
    # a row sees the keys ranked up to its limit: source rows -1, target row j: j, query i: i - 1
    row_limit = paddle.concat([paddle.full([src_width], -1, "int64"),
                               paddle.arange(tgt_width, dtype="int64")]).reshape([1, -1, 1])  # [1, S + T, 1]
    context = (key_rank <= row_limit).astype("float32")  # [B, S + T, S + T]
    query_limit = (paddle.arange(queries, dtype="int64") - 1).reshape([1, -1, 1])  # [1, Q, 1]
    seen = (key_rank <= query_limit).astype("float32")  # [B, Q, S + T]
    index = paddle.arange(queries, dtype="int64")
    itself = (index.unsqueeze(1) == index.unsqueeze(0)).astype("float32").unsqueeze(0)  # [1, Q, Q]
    itself = paddle.expand(itself, [paddle.shape(seen)[0], queries, queries])  # [B, Q, Q]
    query = paddle.concat([seen, itself], axis=2)  # [B, Q, S + T + Q]
    return visible_bias(context), visible_bias(query)


def run_two_streams(ernie: ErnieEncoder, context: paddle.Tensor, query: paddle.Tensor, context_bias: paddle.Tensor,
                    query_bias: paddle.Tensor) -> paddle.Tensor:
    """The query stream's final states ``[B, Q, H]``. ``context``/``query`` are embedded inputs
    ``[B, N, H]``/``[B, Q, H]``; the last layer's context states are not needed, so not computed."""
    layers = list(ernie.encoder.layers)
    for index, layer in enumerate(layers):
        attn = layer.self_attn
        keys, values = keys_values(attn, context)  # [B, heads, N, d]
        query_keys, query_values = keys_values(attn, query)  # [B, heads, Q, d]
        attended = attend(attn, query, paddle.concat([keys, query_keys], axis=2),
                          paddle.concat([values, query_values], axis=2), query_bias)
        if index + 1 < len(layers):
            context = finish_block(layer, context, attend(attn, context, keys, values, context_bias))
        query = finish_block(layer, query, attended)
    return query


def infill_streams(ernie: ErnieEncoder, tokens: paddle.Tensor, mask: paddle.Tensor, visible: paddle.Tensor,
                   past: Sequence[Tuple[paddle.Tensor, paddle.Tensor]]) -> Tuple[paddle.Tensor, paddle.Tensor]:
    """``T`` new context tokens of each of ``R`` rows after their cache, and one ``[MASK]`` after
    them: decoding's one step (``wenxin.models.infill_step``). ``tokens`` ``[R, T, H]`` and
    ``mask`` ``[R, 1, H]`` are embedded; ``past`` holds each layer's cached context keys and values
    ``[R, heads, N, d]`` (read where they lie); new token ``t`` sees the cached and new columns
    where ``visible`` ``[R, T, N + T]`` is 1, and the ``[MASK]`` sees what the last new token sees,
    that token and itself. Returns the ``[MASK]``'s final state ``[R, 1, H]`` and the new tokens'
    keys and values ``[L, 2, R, heads, T, d]`` (the caller keeps them after the cache). A source's
    prefill is its tokens and the target's ``[CLS]`` after an empty cache (each source token
    seeing the source, the ``[CLS]`` all), a decoding step the chosen token (``T`` = 1): the
    computation of ``run_two_streams``."""
    layers = list(ernie.encoder.layers)
    token_bias = visible_bias(visible)  # [R, 1, T, N + T]
    last = visible[:, -1:, :]  # [R, 1, N + T]: what the last new token sees
    mask_bias = visible_bias(paddle.concat([last, paddle.ones_like(last[:, :, :1])], axis=2))  # [R, 1, 1, N + T + 1]
    new: List[paddle.Tensor] = []
    for index, (layer, (cached_keys, cached_values)) in enumerate(zip(layers, past)):
        attn = layer.self_attn
        new_keys, new_values = keys_values(attn, tokens)  # [R, heads, T, d]
        new.append(paddle.stack([new_keys, new_values]))  # [2, R, heads, T, d]
        keys = paddle.concat([cached_keys, new_keys], axis=2)  # [R, heads, N + T, d]
        values = paddle.concat([cached_values, new_values], axis=2)
        mask_keys, mask_values = keys_values(attn, mask)  # [R, heads, 1, d]
        attended = attend(attn, mask, paddle.concat([keys, mask_keys], axis=2),
                          paddle.concat([values, mask_values], axis=2), mask_bias)
        if index + 1 < len(layers):
            tokens = finish_block(layer, tokens, attend(attn, tokens, keys, values, token_bias))
        mask = finish_block(layer, mask, attended)
    return mask, paddle.stack(new)
