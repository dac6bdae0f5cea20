"""ERNIE 4.5 dense decoders (ERNIE-4.5-0.3B and models of its shape): a causal language model
read from the checkpoint folders people download.

The architecture, as Baidu's ``config.json`` describes it: token embeddings; ``num_hidden_layers``
pre-norm decoder layers, each RMSNorm, then grouped-query self-attention (``num_attention_heads``
query heads share ``num_key_value_heads`` key/value heads, ``head_dim`` wide) with rotary position
embeddings, added back, then RMSNorm and a SwiGLU feed-forward layer, added back; a final RMSNorm;
and an output layer, its own or the token embedding (``tie_word_embeddings``). No linear layer has
a bias unless ``use_bias``.

Rotary embeddings rotate interleaved pairs: features ``2i`` and ``2i + 1`` of a head turn by the
angle ``position / rope_theta ** (2i / head_dim)``.

The folder holds ``config.json`` and the weights as safetensors: one ``model.safetensors``, or
shards listed by ``model.safetensors.index.json`` (float32, bfloat16 or float16), in either layout
Baidu publishes: the names and layout PaddleFormers and Hugging Face write (linear weights
``[out, in]``; the ``-PT`` folders), or ERNIEKit's (``erniekit_layout``; the ``-Paddle`` folders).
``load_ernie45`` reads it by path; nothing is downloaded. The files are read and checked by
``ernie45_folder``.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle
import paddle.nn.functional as F
from paddle import nn
from paddle.distributed.fleet.utils import recompute

from wenxin.common.errors import CheckpointError
from wenxin.models.attention_shapes import AttentionShapes, copying
from wenxin.models.ernie45_moe import Ernie45SparseMoE
from wenxin.models.ernie45_router_loss import RouterLossWeights
from wenxin.models.held_dtype import FLOAT32, HeldLinear, WeightDtype, computed, default_dtype
from wenxin.models.ernie45_folder import (CONFIG_FILE, GENERATION_CONFIG_FILE, INDEX_FILE, SINGLE_FILE,  # noqa: F401
                                          Ernie45Config, TensorSpec, checkpoint_files, generation_defaults,
                                          read_weights, sized_layout, weight_layout)

LAST = 2 ** 62  # a slice's end "to the last" (Paddle and ONNX clamp it)
# checkpoint linear weights are [out, in]; Paddle's nn.Linear holds [in, out]
LINEAR_WEIGHTS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class RMSNorm(nn.Layer):
    """``x / sqrt(mean(x ** 2) + eps) * weight`` over the last axis, computed in float32."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = self.create_parameter([size], dtype="float32",  # float32 however the model is held
                                            default_initializer=nn.initializer.Constant(1.0))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x32 = x.astype("float32")
        # the epsilon as a tensor: ``+ float`` is Paddle's ``scale`` (x * 1 + eps), two operators
        # of an exported program rather than one
        mean_square = x32.pow(2).mean(axis=-1, keepdim=True) + paddle.full([], self.eps, "float32")
        scaled = x32 * paddle.rsqrt(mean_square)
        return scaled.astype(x.dtype) * self.weight


def rotary_angles(positions: paddle.Tensor, head_dim: int, theta: float) -> Tuple[paddle.Tensor, paddle.Tensor]:
    """``(sin, cos)`` ``[..., 1, head_dim / 2, 2]`` of positions ``[T]`` or ``[B, T]`` (float32),
    as ``rotate_pairs`` takes them: both features of pair ``i`` have its angle, and ``sin`` is
    negated at the pair's first (the 1: every head alike)."""
    exponents = paddle.arange(0, head_dim, 2, dtype="float32") / head_dim  # [D/2]
    frequencies = 1.0 / (theta ** exponents)
    each_feature = paddle.stack([frequencies, frequencies], axis=-1)  # [D/2, 2]
    angles = positions.astype("float32").unsqueeze([-1, -2]) * each_feature  # [T, D/2, 2] or [B, T, D/2, 2]
    sign = paddle.stack([-paddle.ones([head_dim // 2]), paddle.ones([head_dim // 2])], axis=-1)  # [D/2, 2]
    return (paddle.sin(angles) * sign).unsqueeze(-3), paddle.cos(angles).unsqueeze(-3)


def rotate_pairs(pairs: paddle.Tensor, sin: paddle.Tensor, cos: paddle.Tensor) -> paddle.Tensor:
    """Turn each feature pair ``(2i, 2i + 1)`` of a head, ``pairs`` ``[B, T, heads, D / 2, 2]``
    (the head's features read as pairs), by the angles of ``sin`` and ``cos`` (``rotary_angles``:
    ``[T, 1, D / 2, 2]``, the same positions in every row, or ``[B, T, 1, D / 2, 2]``).

    Each pair ``(a, b)`` becomes ``(a cos - b sin, b cos + a sin)``: ``pairs * cos + swapped *
    sin``, ``swapped`` each pair's two features exchanged (one reversing slice) and ``sin``
    negated at the pair's first. The same arithmetic as slicing the even and odd features apart
    and interleaving them again, in 4 operators of an exported program where that took 11 (issue
    69: a leaner step)."""
    return pairs * cos + pairs[..., ::-1] * sin


class Ernie45Attention(nn.Layer):
    """Grouped-query self-attention with rotary positions, causal."""

    def __init__(self, config: Ernie45Config) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (config.num_attention_heads, config.num_key_value_heads,
                                                    config.head_dim)
        self.theta = config.rope_theta
        bias = None if config.use_bias else False
        self.q_proj = HeldLinear(config.hidden_size, self.heads * self.head_dim, bias_attr=bias)
        self.k_proj = HeldLinear(config.hidden_size, self.kv_heads * self.head_dim, bias_attr=bias)
        self.v_proj = HeldLinear(config.hidden_size, self.kv_heads * self.head_dim, bias_attr=bias)
        self.o_proj = HeldLinear(self.heads * self.head_dim, config.hidden_size, bias_attr=bias)

    def forward(self, x: paddle.Tensor, sin: paddle.Tensor, cos: paddle.Tensor,
                bias: paddle.Tensor) -> paddle.Tensor:
        return self.attend(x, sin, cos, bias)[0]

    def attend(self, x: paddle.Tensor, sin: paddle.Tensor, cos: paddle.Tensor, bias: Optional[paddle.Tensor],
               past: Optional[Tuple[paddle.Tensor, paddle.Tensor]] = None
               ) -> Tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
        """``x`` ``[B, T, hidden]`` attending to ``past`` keys and values ``[B, KV, N, D]`` (a
        cache: earlier positions, rotated; ``N`` at least 1) and to itself -> the output ``[B, T,
        hidden]`` and the keys and values of its own ``T`` positions ``[B, KV, T, D]`` (the caller
        grows its cache by them). ``bias`` ``[., 1, T, N + T]`` or None (every key visible).

        The cached and the new keys and values are attended to side by side, never concatenated
        (only the scores are, ``[B, H, T, N + T]``: at a decoding step H / (KV x D) of the cache's
        size), so a step reads its cache where the caller keeps it and copies none of it (issue
        69, point 2; ``wenxin.models.kv_slots``). An empty ``past`` (``N`` = 0) is not allowed:
        Paddle 3.0's matmul fails on it (callers pass one hidden column instead)."""
        q, k, v = self.project(x)
        out, k, v = self.core(q, k, v, sin, cos, bias, past)
        return self.o_proj(out), k, v

    def project(self, x: paddle.Tensor) -> Tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
        """``x`` ``[..., hidden]`` -> its queries ``[..., H * D]``, keys and values ``[..., KV * D]``."""
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    def core(self, q: paddle.Tensor, k: paddle.Tensor, v: paddle.Tensor, sin: paddle.Tensor, cos: paddle.Tensor,
             bias: Optional[paddle.Tensor], past: Optional[Tuple[paddle.Tensor, paddle.Tensor]] = None,
             shapes: Optional[AttentionShapes] = None) -> Tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
        """Attention between projections ``[B, T, H * D]`` (queries) and ``[B, T, KV * D]`` (keys,
        values) and ``past`` -> its output before ``o_proj`` ``[B, T, H * D]`` and the rotated keys
        and values of the ``T`` positions ``[B, KV, T, D]`` (see ``attend``). ``shapes``: what it
        reshapes to (``attention_shapes.exact``, for a group that may have no rows), or None for
        the usual reshapes."""
        s = shapes or copying(self.heads, self.kv_heads, self.head_dim, paddle.shape(q)[1])
        heads_first = [0, 2, 1, 3, 4]  # [B, T, heads, D/2, 2] -> [B, heads, T, D/2, 2]
        q = rotate_pairs(q.reshape(s.head_pairs), sin, cos).transpose(heads_first)  # [B, H, T, D/2, 2]
        k = rotate_pairs(k.reshape(s.kv_pairs), sin, cos).transpose(heads_first).reshape(s.keys)  # [B, KV, T, D]
        v = v.reshape(s.kv).transpose([0, 2, 1, 3])  # [B, KV, T, D]
        # query head h reads key/value head h // G (G = H / KV): the G query heads of a key/value
        # head are rows of one product, [B, KV, G * T, D] x [B, KV, D, N + T], so the keys and
        # values are never repeated G times
        grouped = q.reshape(s.grouped)  # [B, KV, G * T, D]
        scores = paddle.matmul(grouped, k, transpose_y=True)  # [B, KV, G * T, T]
        if past is not None:
            scores = paddle.concat([paddle.matmul(grouped, past[0], transpose_y=True), scores], axis=-1)  # N + T
        scale = paddle.full([], self.head_dim ** -0.5, "float32")  # a tensor: ``* float`` is two operators
        scores = (scores * scale.astype(scores.dtype)).reshape(s.scores)  # [B, H, T, N + T]
        if bias is not None:
            scores = scores + bias
        weights = F.softmax(scores.astype("float32"), axis=-1).astype(q.dtype)
        weights = weights.reshape(s.weights)  # [B, KV, G * T, N + T]
        if past is None:
            out = paddle.matmul(weights, v)  # [B, KV, G * T, D]
        else:
            cached = paddle.shape(past[1])[2:3] if s.cached is None else s.cached  # [1]: N
            old, new = paddle.slice(weights, [3], [0], cached), paddle.slice(weights, [3], cached, [LAST])
            out = paddle.matmul(old, past[1]) + paddle.matmul(new, v)
        out = out.reshape(s.out).transpose([0, 2, 1, 3])  # [B, T, H, D]
        return out.reshape(s.merged), k, v


class Ernie45MLP(nn.Layer):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, config: Ernie45Config) -> None:
        super().__init__()
        bias = None if config.use_bias else False
        self.gate_proj = HeldLinear(config.hidden_size, config.intermediate_size, bias_attr=bias)
        self.up_proj = HeldLinear(config.hidden_size, config.intermediate_size, bias_attr=bias)
        self.down_proj = HeldLinear(config.intermediate_size, config.hidden_size, bias_attr=bias)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Ernie45DecoderLayer(nn.Layer):
    """Pre-norm attention and feed-forward, each added back to its input; the feed-forward part
    of a MoE decoder's MoE layers (``Ernie45Config.is_moe_layer``) is ``Ernie45SparseMoE``."""

    def __init__(self, config: Ernie45Config, index: int = 0) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Ernie45Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = Ernie45SparseMoE(config) if config.is_moe_layer(index) else Ernie45MLP(config)

    def forward(self, x: paddle.Tensor, sin: paddle.Tensor, cos: paddle.Tensor, bias: paddle.Tensor) -> paddle.Tensor:
        return self.step(x, sin, cos, bias)[0]

    def computes_router_loss(self) -> bool:
        """Whether this is a MoE layer training with router losses (``Ernie45SparseMoE.routed``)."""
        return isinstance(self.mlp, Ernie45SparseMoE) and self.mlp.computes_router_loss()

    def with_router_loss(self, x: paddle.Tensor, sin: paddle.Tensor, cos: paddle.Tensor, bias: paddle.Tensor,
                         token_mask: Optional[paddle.Tensor]) -> Tuple[paddle.Tensor, paddle.Tensor]:
        """``forward`` of a MoE layer, and its router loss (a scalar)."""
        assert isinstance(self.mlp, Ernie45SparseMoE)
        x = x + self.self_attn(self.input_layernorm(x), sin, cos, bias)
        out, loss = self.mlp.routed(self.post_attention_layernorm(x), token_mask)
        assert loss is not None, "with_router_loss runs only where computes_router_loss"
        return x + out, loss

    def step(self, x: paddle.Tensor, sin: paddle.Tensor, cos: paddle.Tensor, bias: Optional[paddle.Tensor],
             past: Optional[Tuple[paddle.Tensor, paddle.Tensor]] = None
             ) -> Tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
        """The layer over ``x`` with a key/value cache (see ``Ernie45Attention.attend``)."""
        attended, k, v = self.self_attn.attend(self.input_layernorm(x), sin, cos, bias, past)
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x)), k, v


class Ernie45Model(nn.Layer):
    """Token embeddings, the decoder layers and the final norm: hidden states ``[B, T, hidden]``.
    ``weight_dtype`` bfloat16 holds the embeddings' and linear layers' weights in bfloat16
    (``held_dtype``; the norms and the router stay float32), and computes in float32."""

    def __init__(self, config: Ernie45Config, weight_dtype: WeightDtype = FLOAT32) -> None:
        super().__init__()
        self.config = config
        with default_dtype(weight_dtype):
            self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
            self.layers = nn.LayerList([Ernie45DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.recompute = False  # gradient checkpointing per layer while training (eager)

    def embed(self, ids: paddle.Tensor) -> paddle.Tensor:
        """The token embeddings of ``ids``, in float32."""
        return computed(self.embed_tokens(ids))

    def set_router_loss_weights(self, weights: Optional[RouterLossWeights]) -> None:
        """Train the MoE layers' routers with these losses (None: without)."""
        for layer in self.layers:
            if isinstance(layer.mlp, Ernie45SparseMoE):
                layer.mlp.router_loss_weights = weights

    def forward(self, ids: paddle.Tensor, attention_mask: Optional[paddle.Tensor] = None,
                positions: Optional[paddle.Tensor] = None, segments: Optional[paddle.Tensor] = None) -> paddle.Tensor:
        """``ids`` ``[B, T]``; ``attention_mask`` ``[B, T]`` (1: a token, 0: padding) or None;
        packed rows give ``positions`` ``[B, T]`` (restarting in each sequence) and ``segments``
        ``[B, T]`` (1, 2, ... per sequence, 0: padding), and attend only within a segment."""
        return self.decode(ids, attention_mask, positions, segments)[0]

    def decode(self, ids: paddle.Tensor, attention_mask: Optional[paddle.Tensor] = None,
               positions: Optional[paddle.Tensor] = None, segments: Optional[paddle.Tensor] = None
               ) -> Tuple[paddle.Tensor, Optional[paddle.Tensor]]:
        """``forward``'s hidden states ``[B, T, hidden]``, and the sum of the MoE layers' router
        losses where training with them (else None), padding left out."""
        length = paddle.shape(ids)[1]
        if positions is None:
            positions = paddle.arange(length)
        sin, cos = rotary_angles(positions, self.config.head_dim, self.config.rope_theta)
        bias = causal_bias(length, attention_mask) if segments is None else segment_bias(segments)
        token_mask = attention_mask if segments is None else segments != 0  # [B, T] or None
        x = self.embed(ids)
        losses = []
        for layer in self.layers:
            if layer.computes_router_loss():
                x, loss = self._run(layer.with_router_loss, x, sin, cos, bias, token_mask)
                losses.append(loss)
            else:
                x = self._run(layer, x, sin, cos, bias)
        return self.norm(x), (paddle.add_n(losses) if losses else None)

    def _run(self, function: Callable[..., Any], *inputs: Any) -> Any:
        if self.recompute and self.training:
            # not reentrant: the layer's parameters get their gradients even where x needs none
            # (frozen embeddings under LoRA), and dropout replays the same random numbers
            return recompute(function, *inputs, use_reentrant=False)
        return function(*inputs)


    def prefill(self, ids: paddle.Tensor, past: Optional[paddle.Tensor] = None) -> Tuple[paddle.Tensor, paddle.Tensor]:
        """A prompt ``[1, S]`` (no padding) -> the last position's hidden state ``[1, hidden]``
        and the key/value cache ``[layers, 2, 1, KV, S, D]``. With ``past`` (the cache of the
        prompt's first ``N`` tokens, ``[layers, 2, 1, KV, N, D]``), ``ids`` are its next tokens, at
        positions ``N..N + S - 1``, and the cache returned holds all ``N + S`` (a chunked prefill)."""
        length = paddle.shape(ids)[1]
        if past is None:
            positions, bias = paddle.arange(length), causal_bias(length, None)
        else:
            start = paddle.shape(past)[4]
            positions = paddle.arange(length) + start
            ahead = paddle.arange(start + length).unsqueeze(0) > positions.unsqueeze(1)  # [S, N + S]: key after query
            bias = ahead.astype("float32").unsqueeze(0).unsqueeze(0) * -1e9  # [1, 1, S, N + S]
        sin, cos = rotary_angles(positions, self.config.head_dim, self.config.rope_theta)
        x = self.embed(ids)
        cache = []
        for index, layer in enumerate(self.layers):
            x, k, v = layer.step(x, sin, cos, bias, None if past is None else (past[index, 0], past[index, 1]))
            cache.append(paddle.stack([k, v]))  # [2, 1, KV, S, D]: the new positions'
        new = paddle.stack(cache)  # [layers, 2, 1, KV, S, D]
        return self.norm(x)[:, -1], (new if past is None else paddle.concat([past, new], axis=4))

    def extend(self, tokens: paddle.Tensor, positions: paddle.Tensor, cache: paddle.Tensor,
               visible: Optional[paddle.Tensor] = None) -> Tuple[paddle.Tensor, paddle.Tensor]:
        """One token per row ``[R]`` at ``positions`` ``[R]`` after the cache ``[layers, 2, R, KV,
        N, D]`` (``N`` at least 1) -> its hidden state ``[R, hidden]`` and the cache grown by it
        ``[..., N + 1, D]``. ``visible`` ``[R, N + 1]`` (1: a column the row attends to, 0:
        padding; the last column is the token itself), or None: every row sees every column."""
        state, new = self.advance(tokens.unsqueeze(1), positions.unsqueeze(1),
                                  None if visible is None else visible.unsqueeze(1),
                                  [(cache[index, 0], cache[index, 1]) for index in range(len(self.layers))])
        return state, paddle.concat([cache, new], axis=4)

    def advance(self, tokens: paddle.Tensor, positions: paddle.Tensor, visible: Optional[paddle.Tensor],
                past: Sequence[Tuple[paddle.Tensor, paddle.Tensor]]) -> Tuple[paddle.Tensor, paddle.Tensor]:
        """``T`` tokens per row ``[R, T]`` at ``positions`` ``[R, T]`` after each layer's cached
        keys and values ``past`` (``[R, KV, N, D]`` each, ``N`` at least 1) -> the last token's
        hidden state ``[R, hidden]`` and the new tokens' keys and values ``[layers, 2, R, KV, T,
        D]`` (the caller keeps them: the cache is read where it lies, never copied).
        ``visible`` ``[R, T, N + T]``: 1 where a token attends to a column (a cached one or a new
        one), 0 where not (padding, a later token); None: every token sees every column. A
        prompt's prefill is one row after one hidden column; a decoding step is ``T`` = 1
        (``wenxin.models.advance_step``)."""
        sin, cos = rotary_angles(positions, self.config.head_dim, self.config.rope_theta)  # [R, T, 1, D/2, 2]
        x = self.embed(tokens)  # [R, T, hidden]
        bias = None if visible is None else ((visible - 1.0) * 1e9).unsqueeze(1)  # [R, 1, T, N + T]
        new = []
        for layer, cached in zip(self.layers, past):
            x, k, v = layer.step(x, sin, cos, bias, cached)
            new.append(paddle.stack([k, v]))  # [2, R, KV, T, D]
        return self.norm(x[:, -1:])[:, 0], paddle.stack(new)


def causal_bias(length: Any, attention_mask: Optional[paddle.Tensor]) -> paddle.Tensor:
    """``[1 or B, 1, T, T]`` added to attention scores: a large negative where a position would
    look ahead, or at padding."""
    positions = paddle.arange(length)
    ahead = positions.unsqueeze(0) > positions.unsqueeze(1)  # [T, T]: key after query
    blocked = ahead.unsqueeze(0).unsqueeze(0)  # [1, 1, T, T]
    if attention_mask is not None:
        blocked = paddle.logical_or(blocked, (attention_mask == 0).unsqueeze(1).unsqueeze(1))  # [B, 1, T, T]
    return blocked.astype("float32") * -1e9


def segment_bias(segments: paddle.Tensor) -> paddle.Tensor:
    """``[B, 1, T, T]`` added to attention scores of packed rows: a large negative where a query
    would look ahead, into another segment, or at padding (segment 0)."""
    positions = paddle.arange(paddle.shape(segments)[1])
    ahead = (positions.unsqueeze(0) > positions.unsqueeze(1)).unsqueeze(0)  # [1, T, T]: key after query
    other = segments.unsqueeze(2) != segments.unsqueeze(1)  # [B, T, T]: query's segment, key's segment
    padding = (segments == 0).unsqueeze(1)  # [B, 1, T]: the key is padding
    blocked = paddle.logical_or(paddle.logical_or(ahead, other), padding)  # [B, T, T]
    return blocked.unsqueeze(1).astype("float32") * -1e9


class Ernie45Head(nn.Layer):
    """An output layer of its own (untied): ``weight`` ``[vocab, hidden]``, as checkpoints hold it."""

    def __init__(self, config: Ernie45Config, weight_dtype: WeightDtype = FLOAT32) -> None:
        super().__init__()
        self.weight = self.create_parameter([config.vocab_size, config.hidden_size], dtype=weight_dtype)


class Ernie45ForCausalLM(nn.Layer):
    """An ERNIE 4.5 dense decoder with its output layer: logits ``[B, T, vocab]``. Parameter names
    are the checkpoint's (``model.layers.0.self_attn.q_proj.weight``, ``lm_head.weight``)."""

    def __init__(self, config: Ernie45Config) -> None:
        super().__init__()
        self.config = config
        self.model = Ernie45Model(config)
        self.lm_head = None if config.tie_word_embeddings else Ernie45Head(config)

    def output_weight(self) -> paddle.Tensor:
        """``[vocab, hidden]`` (float32): the token embedding where the two are tied."""
        return computed(self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight)

    def forward(self, ids: paddle.Tensor, attention_mask: Optional[paddle.Tensor] = None,
                positions: Optional[paddle.Tensor] = None, segments: Optional[paddle.Tensor] = None) -> paddle.Tensor:
        states = self.model(ids, attention_mask, positions, segments)  # [B, T, hidden]
        return paddle.matmul(states, self.output_weight(), transpose_y=True)  # [B, T, vocab]

    def prefill(self, ids: paddle.Tensor) -> Tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
        """Decoding's first step function (``wenxin.models.decoding``): see ``prefill_step``."""
        return prefill_step(self.model, self.output_weight(), ids)

    def extend(self, tokens: paddle.Tensor, positions: paddle.Tensor, cache: paddle.Tensor,
               visible: Optional[paddle.Tensor] = None) -> Tuple[paddle.Tensor, paddle.Tensor]:
        """Decoding's next step function: see ``extend_step``."""
        return extend_step(self.model, self.output_weight(), tokens, positions, cache, visible)


def prefill_step(decoder: Ernie45Model, output_weight: paddle.Tensor, ids: paddle.Tensor,
                 past: Optional[paddle.Tensor] = None) -> Tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
    """A prompt ``[1, S]`` -> the next token's logits ``[1, vocab]`` (float32), the key/value cache
    and the next token's position ``[1]``; ``output_weight`` ``[vocab, hidden]``; ``past``: the
    cache of the prompt's tokens before ``ids`` (see ``Ernie45Model.prefill``)."""
    state, cache = decoder.prefill(ids, past)
    position = paddle.full([1], 0, dtype="int64") + paddle.shape(cache)[4].astype("int64")
    return paddle.matmul(state, output_weight, transpose_y=True).astype("float32"), cache, position


def extend_step(decoder: Ernie45Model, output_weight: paddle.Tensor, tokens: paddle.Tensor, positions: paddle.Tensor,
                cache: paddle.Tensor, visible: Optional[paddle.Tensor] = None) -> Tuple[paddle.Tensor, paddle.Tensor]:
    """Chosen tokens ``[R]`` at ``positions`` ``[R]`` -> the next logits ``[R, vocab]`` (float32)
    and the grown cache (``visible``: see ``Ernie45Model.extend``)."""
    state, grown = decoder.extend(tokens, positions, cache, visible)
    return paddle.matmul(state, output_weight, transpose_y=True).astype("float32"), grown


def advance_step(decoder: Ernie45Model, output_weight: paddle.Tensor, tokens: paddle.Tensor, positions: paddle.Tensor,
                 visible: paddle.Tensor, past: Sequence[Tuple[paddle.Tensor, paddle.Tensor]]
                 ) -> Tuple[paddle.Tensor, paddle.Tensor]:
    """New tokens ``[R, T]`` at ``positions`` ``[R, T]`` -> each row's next logits ``[R, vocab]``
    (float32, after its last token) and the new tokens' keys and values ``[layers, 2, R, KV, T,
    D]`` (see ``Ernie45Model.advance``): prefill, a prompt's next chunk and a decoding step in one
    program, which reads each layer's cache ``past`` where the caller keeps it."""
    state, new = decoder.advance(tokens, positions, visible, past)
    return paddle.matmul(state, output_weight, transpose_y=True).astype("float32"), new


def paddle_layout_weights(folder: str, config: Ernie45Config,
                          layout: Optional[Tuple[Dict[str, str], Dict[str, Dict[str, TensorSpec]]]] = None
                          ) -> Dict[str, np.ndarray]:
    """The folder's weights by checkpoint name (``model.layers.0.self_attn.q_proj.weight``), as
    Paddle holds them (linear weights ``[in, out]``); a tied model's stored copy of the output
    layer is dropped. The folder holds either layout Baidu publishes: the one Hugging Face's and
    PaddleFormers' checkpoints share (``model.`` names, linear weights ``[out, in]``, the ``-PT``
    folders), or ERNIEKit's own (``ernie.`` names, the ``-Paddle`` folders: ``erniekit_layout``).
    ``layout``: the folder's checked ``weight_layout``, when read already."""
    weights = read_weights(folder, layout)
    for name in [n for n in weights if n.split(".")[1:2] and n.split(".")[1].startswith(MTP_PREFIX)]:
        del weights[name]  # multi-token prediction: a training aid the decoder does not use (as transformers)
    if any(name.startswith(ERNIEKIT_PREFIX) for name in weights):
        weights = erniekit_layout(weights, config, folder)
    else:
        for name, value in weights.items():
            if is_linear_weight(name) and value.ndim == 2:
                weights[name] = np.ascontiguousarray(value.T)
    if config.tie_word_embeddings:
        weights.pop("lm_head.weight", None)  # some writers store the shared matrix twice
    return weights


ERNIEKIT_PREFIX = "ernie."  # the names of ERNIEKit's (and FastDeploy's) checkpoints
MTP_PREFIX = "mtp"  # model.mtp_block.*, mtp_emb_norm, mtp_hidden_norm, mtp_linear_proj


def is_linear_weight(name: str) -> bool:
    """A weight the checkpoint holds ``[out, in]`` and Paddle ``[in, out]``: the projections, and a
    MoE layer's router (``mlp.gate.weight``)."""
    parts = name.split(".")
    return len(parts) >= 3 and parts[-1] == "weight" and (parts[-2] in LINEAR_WEIGHTS
                                                          or parts[-3:-1] == ["mlp", "gate"])


def fused_inner_size(module: str, config: Ernie45Config) -> Tuple[str, int]:
    """The config key and size of the SwiGLU whose fused ``up_gate_proj`` is ``module``."""
    parts = module.split(".")
    if "shared_experts" in parts:
        return ("moe_intermediate_size * moe_num_shared_experts",
                config.moe_intermediate_size * config.moe_num_shared_experts)
    if "experts" in parts:
        return "moe_intermediate_size", config.moe_intermediate_size
    return "intermediate_size", config.intermediate_size


def erniekit_layout(weights: Dict[str, np.ndarray], config: Ernie45Config, folder: str) -> Dict[str, np.ndarray]:
    """ERNIEKit's checkpoint layout -> this model's names, as Paddle holds them.

    ERNIEKit (``baidu/ERNIE-4.5-*-Paddle``) names weights ``ernie.layers.0...``, holds linear
    weights ``[in, out]`` already, and fuses two groups of projections, which this splits:

    - ``self_attn.qkv_proj`` (``[hidden, (heads + 2 kv heads) * head_dim]``): with grouped-query
      attention, every query head, then the key heads, then the value heads; with as many key/value
      heads as query heads, each head's query, key and value in turn (how ERNIEKit's attention
      reshapes and splits its output);
    - ``mlp.up_gate_proj`` (``[hidden, 2 * intermediate]``): first the half that goes through SiLU
      (``gate_proj``), then ``up_proj``; in a MoE decoder each expert's and the shared experts'
      too (their router, ``mlp.gate``, is ``[hidden, experts]`` already).

    Its own output layer (untied) is ``[hidden, vocab]``, this model's ``[vocab, hidden]``."""
    heads, kv_heads, width = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    converted: Dict[str, np.ndarray] = {}
    for name, value in weights.items():
        if name.startswith("model."):  # it would be taken as is, beside (or over) the converted ones
            raise CheckpointError(f"{folder}: {name} is named as the -PT layout names weights, in a folder of "
                                  f"ERNIEKit's {ERNIEKIT_PREFIX} names: a folder holds one layout (a stray tensor, "
                                  f"or the files of two models?)")
        target = "model." + name[len(ERNIEKIT_PREFIX):] if name.startswith(ERNIEKIT_PREFIX) else name
        module, _, kind = target.rpartition(".")  # kind: weight or bias
        if module.endswith("self_attn.qkv_proj"):
            expected = (heads + 2 * kv_heads) * width
            if value.shape[-1] != expected:
                raise CheckpointError(f"{folder}: {name} has shape {list(value.shape)}; config.json's heads "
                                      f"({heads} query, {kv_heads} key/value, {width} wide) make it {expected} wide")
            if heads == kv_heads:  # per head: its query, key and value
                split = value.reshape(value.shape[:-1] + (heads, 3, width))
                parts = [split[..., i, :].reshape(value.shape[:-1] + (heads * width,)) for i in range(3)]
            else:
                parts = np.split(value, [heads * width, (heads + kv_heads) * width], axis=-1)
            attention = module[:-len("qkv_proj")]
            for projection, part in zip(("q_proj", "k_proj", "v_proj"), parts):
                converted[f"{attention}{projection}.{kind}"] = np.ascontiguousarray(part)
        elif module.endswith("up_gate_proj"):  # a dense layer's, an expert's or the shared experts'
            key, inner = fused_inner_size(module, config)
            if value.shape[-1] != 2 * inner:
                raise CheckpointError(f"{folder}: {name} has shape {list(value.shape)}; config.json's "
                                      f"{key} makes it {2 * inner} wide")
            gate, up = np.split(value, 2, axis=-1)
            mlp = module[:-len("up_gate_proj")]
            converted[f"{mlp}gate_proj.{kind}"] = np.ascontiguousarray(gate)
            converted[f"{mlp}up_proj.{kind}"] = np.ascontiguousarray(up)
        elif target == "lm_head.weight" and not config.tie_word_embeddings and value.ndim == 2:
            converted[target] = np.ascontiguousarray(value.T)
        else:
            converted[target] = value
    return converted


def load_ernie45(folder: str) -> Ernie45ForCausalLM:
    """The model of a checkpoint folder, its weights loaded: every parameter must be in the files,
    with its shape, and no weight may be left over (each mismatch names the weight and folder)."""
    config = Ernie45Config.from_folder(folder)
    layout = sized_layout(folder, config)  # before a model of the config's size is built
    model = Ernie45ForCausalLM(config)
    weights = paddle_layout_weights(folder, config, layout)
    state = model.state_dict()
    missing = sorted(set(state) - set(weights))
    extra = sorted(set(weights) - set(state))
    if missing or extra:
        raise CheckpointError(f"{folder}: the weights do not fit an ERNIE 4.5 decoder of its config.json: "
                              f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}; "
                              f"not used {extra[:5]}{' ...' if len(extra) > 5 else ''}")
    for name, parameter in state.items():
        value = weights[name]
        if list(value.shape) != list(parameter.shape):
            raise CheckpointError(f"{folder}: {name} has shape {list(value.shape)} (as Paddle holds it), the "
                                  f"config asks for {list(parameter.shape)}")
        parameter.set_value(np.ascontiguousarray(value, dtype=np.float32))
    return model
