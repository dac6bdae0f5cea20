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
``load_ernie45`` reads it by path; nothing is downloaded.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn
from paddle.distributed.fleet.utils import recompute

from wenxin.common.errors import CheckpointError, ConfigError
from wenxin.common.files import read_json_object

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# checkpoint linear weights are [out, in]; Paddle's nn.Linear holds [in, out]
LINEAR_WEIGHTS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclasses.dataclass
class Ernie45Config:
    """The shape of an ERNIE 4.5 dense decoder, read from its ``config.json``."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    tie_word_embeddings: bool = True
    use_bias: bool = False
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2

    @classmethod
    def from_dict(cls, values: Dict[str, Any], source: str) -> "Ernie45Config":
        """The config from ``config.json``'s values; ``source`` names the file in errors."""
        problems: List[str] = []
        model_type = values.get("model_type")
        if model_type not in (None, "ernie4_5"):
            problems.append(f"{source}: model_type is {model_type!r}, not an ERNIE 4.5 dense decoder (ernie4_5)")
        if values.get("moe_num_experts"):
            problems.append(f"{source}: moe_num_experts: a mixture-of-experts model; only dense decoders are supported")
        if values.get("compression_ratio") not in (None, 1, 1.0):
            problems.append(f"{source}: compression_ratio {values['compression_ratio']!r}: positions scaled for "
                            f"longer contexts are not supported (1.0 only)")
        if values.get("rope_scaling"):
            problems.append(f"{source}: rope_scaling: scaled rotary embeddings are not supported")
        required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
        problems += [f"{source}: {key} is missing" for key in required if key not in values]
        if problems:
            raise ConfigError("\n".join(problems))
        heads = int(values["num_attention_heads"])
        fields = {f.name for f in dataclasses.fields(cls)}
        settings = {key: values[key] for key in fields if values.get(key) is not None}
        settings.setdefault("num_key_value_heads", heads)
        settings.setdefault("head_dim", int(values["hidden_size"]) // max(heads, 1))
        theta = (values.get("rope_parameters") or {}).get("rope_theta")
        if "rope_theta" not in settings and theta is not None:
            settings["rope_theta"] = theta
        config = cls(**settings)
        config.check(source)
        return config

    @classmethod
    def from_folder(cls, folder: str) -> "Ernie45Config":
        path = os.path.join(folder, CONFIG_FILE)
        if not os.path.isfile(path):
            raise ConfigError(f"{folder}: no {CONFIG_FILE} (an ERNIE 4.5 model folder holds config.json and "
                                  f"its safetensors weights)")
        return cls.from_dict(read_json_object(path), path)

    def check(self, source: str) -> None:
        problems = []
        for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "head_dim", "max_position_embeddings"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                problems.append(f"{source}: {key} must be a positive integer, got {value!r}")
        if not problems and self.num_attention_heads % self.num_key_value_heads:
            problems.append(f"{source}: num_attention_heads {self.num_attention_heads} is not a multiple of "
                            f"num_key_value_heads {self.num_key_value_heads}")
        if not problems and self.head_dim % 2:
            problems.append(f"{source}: head_dim {self.head_dim} must be even (rotary embeddings turn pairs)")
        if problems:
            raise ConfigError(problems=problems)


class RMSNorm(nn.Layer):
    """``x / sqrt(mean(x ** 2) + eps) * weight`` over the last axis, computed in float32."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = self.create_parameter([size], default_initializer=nn.initializer.Constant(1.0))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x32 = x.astype("float32")
        scaled = x32 * paddle.rsqrt(x32.pow(2).mean(axis=-1, keepdim=True) + self.eps)
        return scaled.astype(x.dtype) * self.weight


def rotary_angles(positions: paddle.Tensor, head_dim: int, theta: float) -> Tuple[paddle.Tensor, paddle.Tensor]:
    """``(sin, cos)`` ``[..., head_dim / 2]`` of positions ``[T]`` or ``[B, T]`` (float32)."""
    exponents = paddle.arange(0, head_dim, 2, dtype="float32") / head_dim  # [D/2]
    frequencies = 1.0 / (theta ** exponents)
    angles = positions.astype("float32").unsqueeze(-1) * frequencies  # [T, D/2] or [B, T, D/2]
    return paddle.sin(angles), paddle.cos(angles)


def rotate_pairs(x: paddle.Tensor, sin: paddle.Tensor, cos: paddle.Tensor) -> paddle.Tensor:
    """Turn features ``(2i, 2i + 1)`` of ``x`` ``[B, T, heads, D]`` by the angles of ``sin`` and
    ``cos`` ``[T, D/2]`` (the same positions in every row) or ``[B, T, D/2]``."""
    even, odd = x[..., 0::2], x[..., 1::2]  # [B, T, heads, D/2]
    sin, cos = sin.unsqueeze(-2), cos.unsqueeze(-2)  # [(B,) T, 1, D/2]: every head alike
    turned = paddle.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1)  # [B, T, heads, D/2, 2]
    return turned.reshape([0, 0, 0, -1])


class Ernie45Attention(nn.Layer):
    """Grouped-query self-attention with rotary positions, causal."""

    def __init__(self, config: Ernie45Config) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (config.num_attention_heads, config.num_key_value_heads,
                                                    config.head_dim)
        self.theta = config.rope_theta
        bias = None if config.use_bias else False
        self.q_proj = nn.Linear(config.hidden_size, self.heads * self.head_dim, bias_attr=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias_attr=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias_attr=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias_attr=bias)

    def forward(self, x: paddle.Tensor, sin: paddle.Tensor, cos: paddle.Tensor,
                bias: paddle.Tensor) -> paddle.Tensor:
        return self.attend(x, sin, cos, bias)[0]

    def attend(self, x: paddle.Tensor, sin: paddle.Tensor, cos: paddle.Tensor, bias: Optional[paddle.Tensor],
               past: Optional[Tuple[paddle.Tensor, paddle.Tensor]] = None
               ) -> Tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
        """``x`` ``[B, T, hidden]`` attending to ``past`` keys and values ``[B, KV, N, D]`` (a
        cache: earlier positions, rotated) and to itself -> the output ``[B, T, hidden]`` and the
        keys and values of all ``N + T`` positions ``[B, KV, N + T, D]``. ``bias`` ``[., 1, T, N + T]``
        or None (every key visible)."""
        q = self.q_proj(x).reshape([0, 0, self.heads, self.head_dim])  # [B, T, H, D]
        k = self.k_proj(x).reshape([0, 0, self.kv_heads, self.head_dim])  # [B, T, KV, D]
        v = self.v_proj(x).reshape([0, 0, self.kv_heads, self.head_dim])
        q, k = rotate_pairs(q, sin, cos), rotate_pairs(k, sin, cos)
        q, k, v = (t.transpose([0, 2, 1, 3]) for t in (q, k, v))  # [B, heads, T, D]
        if past is not None:
            k, v = paddle.concat([past[0], k], axis=2), paddle.concat([past[1], v], axis=2)  # [B, KV, N + T, D]
        # query head h reads key/value head h // G (G = H / KV): the G query heads of a key/value
        # head are rows of one product, [B, KV, G * T, D] x [B, KV, D, N + T], so the keys and
        # values are never repeated G times
        group = self.heads // self.kv_heads
        length = paddle.shape(q)[2]
        grouped = q.reshape([0, self.kv_heads, -1, self.head_dim])  # [B, KV, G * T, D]
        scores = paddle.matmul(grouped, k, transpose_y=True) * (self.head_dim ** -0.5)  # [B, KV, G * T, N + T]
        scores = scores.reshape([0, self.heads, length, -1])  # [B, H, T, N + T]
        if bias is not None:
            scores = scores + bias
        weights = F.softmax(scores.astype("float32"), axis=-1).astype(q.dtype)
        weights = weights.reshape([0, self.kv_heads, group * length, -1])  # [B, KV, G * T, N + T]
        out = paddle.matmul(weights, v).reshape([0, self.heads, length, self.head_dim])  # [B, H, T, D]
        out = out.transpose([0, 2, 1, 3])  # [B, T, H, D]
        return self.o_proj(out.reshape([0, 0, self.heads * self.head_dim])), k, v


class Ernie45MLP(nn.Layer):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, config: Ernie45Config) -> None:
        super().__init__()
        bias = None if config.use_bias else False
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias_attr=bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias_attr=bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias_attr=bias)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Ernie45DecoderLayer(nn.Layer):
    """Pre-norm attention and feed-forward, each added back to its input."""

    def __init__(self, config: Ernie45Config) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Ernie45Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = Ernie45MLP(config)

    def forward(self, x: paddle.Tensor, sin: paddle.Tensor, cos: paddle.Tensor, bias: paddle.Tensor) -> paddle.Tensor:
        return self.step(x, sin, cos, bias)[0]

    def step(self, x: paddle.Tensor, sin: paddle.Tensor, cos: paddle.Tensor, bias: Optional[paddle.Tensor],
             past: Optional[Tuple[paddle.Tensor, paddle.Tensor]] = None
             ) -> Tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
        """The layer over ``x`` with a key/value cache (see ``Ernie45Attention.attend``)."""
        attended, k, v = self.self_attn.attend(self.input_layernorm(x), sin, cos, bias, past)
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x)), k, v


class Ernie45Model(nn.Layer):
    """Token embeddings, the decoder layers and the final norm: hidden states ``[B, T, hidden]``."""

    def __init__(self, config: Ernie45Config) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.LayerList([Ernie45DecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.recompute = False  # gradient checkpointing per layer while training (eager)

    def forward(self, ids: paddle.Tensor, attention_mask: Optional[paddle.Tensor] = None,
                positions: Optional[paddle.Tensor] = None, segments: Optional[paddle.Tensor] = None) -> paddle.Tensor:
        """``ids`` ``[B, T]``; ``attention_mask`` ``[B, T]`` (1: a token, 0: padding) or None;
        packed rows give ``positions`` ``[B, T]`` (restarting in each sequence) and ``segments``
        ``[B, T]`` (1, 2, ... per sequence, 0: padding), and attend only within a segment."""
        length = paddle.shape(ids)[1]
        if positions is None:
            positions = paddle.arange(length)
        sin, cos = rotary_angles(positions, self.config.head_dim, self.config.rope_theta)
        bias = causal_bias(length, attention_mask) if segments is None else segment_bias(segments)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            if self.recompute and self.training:
                # not reentrant: the layer's parameters get their gradients even where x needs none
                # (frozen embeddings under LoRA), and dropout replays the same random numbers
                x = recompute(layer, x, sin, cos, bias, use_reentrant=False)
            else:
                x = layer(x, sin, cos, bias)
        return self.norm(x)


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
        x = self.embed_tokens(ids)
        cache = []
        for index, layer in enumerate(self.layers):
            x, k, v = layer.step(x, sin, cos, bias, None if past is None else (past[index, 0], past[index, 1]))
            cache.append(paddle.stack([k, v]))  # [2, 1, KV, N + S, D]
        return self.norm(x)[:, -1], paddle.stack(cache)

    def extend(self, tokens: paddle.Tensor, positions: paddle.Tensor, cache: paddle.Tensor,
               visible: Optional[paddle.Tensor] = None) -> Tuple[paddle.Tensor, paddle.Tensor]:
        """One token per row ``[R]`` at ``positions`` ``[R]`` after the cache ``[layers, 2, R, KV,
        N, D]`` -> its hidden state ``[R, hidden]`` and the cache grown by it ``[..., N + 1, D]``.
        ``visible`` ``[R, N + 1]`` (1: a column the row attends to, 0: padding; the last column is
        the token itself), or None: every row sees every column (``wenxin.models.batch_decoding``)."""
        sin, cos = rotary_angles(positions.unsqueeze(1), self.config.head_dim, self.config.rope_theta)  # [R, 1, D/2]
        x = self.embed_tokens(tokens.unsqueeze(1))  # [R, 1, hidden]
        bias = None if visible is None else ((visible - 1.0) * 1e9).unsqueeze(1).unsqueeze(1)  # [R, 1, 1, N + 1]
        grown = []
        for index, layer in enumerate(self.layers):
            x, k, v = layer.step(x, sin, cos, bias, (cache[index, 0], cache[index, 1]))
            grown.append(paddle.stack([k, v]))
        return self.norm(x)[:, 0], paddle.stack(grown)


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

    def __init__(self, config: Ernie45Config) -> None:
        super().__init__()
        self.weight = self.create_parameter([config.vocab_size, config.hidden_size])


class Ernie45ForCausalLM(nn.Layer):
    """An ERNIE 4.5 dense decoder with its output layer: logits ``[B, T, vocab]``. Parameter names
    are the checkpoint's (``model.layers.0.self_attn.q_proj.weight``, ``lm_head.weight``)."""

    def __init__(self, config: Ernie45Config) -> None:
        super().__init__()
        self.config = config
        self.model = Ernie45Model(config)
        self.lm_head = None if config.tie_word_embeddings else Ernie45Head(config)

    def output_weight(self) -> paddle.Tensor:
        """``[vocab, hidden]``: the token embedding where the two are tied."""
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

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


GENERATION_CONFIG_FILE = "generation_config.json"


def generation_defaults(folder: str) -> Dict[str, Any]:
    """Decoding settings the folder's ``generation_config.json`` gives (``strategy``: sample
    where it says ``do_sample``, else greedy; ``temperature``, ``top_p``, ``top_k``; the end
    tokens ``eos_token_id``, one id or a list), empty without the file."""
    path = os.path.join(folder, GENERATION_CONFIG_FILE)
    if not os.path.isfile(path):
        return {}
    values = read_json_object(path)
    settings: Dict[str, Any] = {"strategy": "sample" if values.get("do_sample") else "greedy"}
    for key, kind in (("temperature", float), ("top_p", float), ("top_k", int)):
        if values.get(key) is not None:
            if not isinstance(values[key], (int, float)) or isinstance(values[key], bool):
                raise ConfigError(f"{path}: {key} must be a number, got {values[key]!r}")
            settings[key] = kind(values[key])
    eos = values.get("eos_token_id")
    eos_ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in eos_ids):
        raise ConfigError(f"{path}: eos_token_id must be a token id or a list of them, got {eos!r}")
    settings["stop_ids"] = eos_ids
    return settings


def checkpoint_files(folder: str) -> Dict[str, str]:
    """Weight name -> the safetensors file that holds it, from the index or the single file."""
    index = os.path.join(folder, INDEX_FILE)
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index}: not a safetensors index with a weight_map ({e})") from None
        files = {name: os.path.join(folder, file) for name, file in weight_map.items()}
        missing = sorted({path for path in files.values() if not os.path.isfile(path)})
        if missing:
            raise CheckpointError(f"{index}: lists shards that are not in the folder: {', '.join(missing)}")
        return files
    single = os.path.join(folder, SINGLE_FILE)
    if not os.path.isfile(single):
        raise CheckpointError(f"{folder}: no {INDEX_FILE} and no {SINGLE_FILE}")
    from safetensors import safe_open
    with safe_open(single, "np") as f:
        return {name: single for name in f.keys()}


def read_weights(folder: str) -> Dict[str, np.ndarray]:
    """Every tensor of the folder's safetensors files, by name, as float32 numpy arrays (no
    pickle). bfloat16 tensors (ERNIE 4.5 ships them) are widened by ``bfloat16_tensors``:
    numpy has no bfloat16, and Paddle's safetensors backend reinterprets bytes with a strided
    view, which a trainer's process turns off (``FLAGS_use_stride_kernel``)."""
    from safetensors import SafetensorError, safe_open
    by_file: Dict[str, List[str]] = {}
    for name, path in checkpoint_files(folder).items():
        by_file.setdefault(path, []).append(name)
    weights: Dict[str, np.ndarray] = {}
    for path, names in by_file.items():
        try:
            wide = bfloat16_tensors(path)
            with safe_open(path, "np") as f:
                present = set(f.keys())
                absent = [name for name in names if name not in present]
                if absent:
                    raise CheckpointError(f"{path}: the index puts {absent[:3]} here, but the file does not hold them")
                for name in names:
                    weights[name] = wide[name] if name in wide else f.get_tensor(name).astype(np.float32)
        except SafetensorError as e:
            raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None
    return weights


def bfloat16_tensors(path: str) -> Dict[str, np.ndarray]:
    """The bfloat16 tensors of a safetensors file as float32 (exact: a bfloat16 is the high half
    of a float32). The format: an 8-byte little-endian header length, a JSON header giving each
    tensor's dtype, shape and byte range after the header, then the data."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        try:
            header = json.loads(f.read(size))
        except ValueError as e:
            raise CheckpointError(f"{path}: not a readable safetensors file (its header: {e})") from None
        wanted = {name: spec for name, spec in header.items()
                  if name != "__metadata__" and isinstance(spec, dict) and spec.get("dtype") == "BF16"}
        tensors = {}
        for name, spec in wanted.items():
            begin, end = spec["data_offsets"]
            f.seek(8 + size + begin)
            halves = np.frombuffer(f.read(end - begin), dtype="<u2")
            if halves.size != int(np.prod(spec["shape"])):
                raise CheckpointError(f"{path}: {name} holds {halves.size} values, its shape {spec['shape']} "
                                      f"asks for {int(np.prod(spec['shape']))}")
            tensors[name] = (halves.astype(np.uint32) << 16).view(np.float32).reshape(spec["shape"])
    return tensors


def paddle_layout_weights(folder: str, config: Ernie45Config) -> Dict[str, np.ndarray]:
    """The folder's weights by checkpoint name (``model.layers.0.self_attn.q_proj.weight``), as
    Paddle holds them (linear weights ``[in, out]``); a tied model's stored copy of the output
    layer is dropped. The folder holds either layout Baidu publishes: the one Hugging Face's and
    PaddleFormers' checkpoints share (``model.`` names, linear weights ``[out, in]``, the ``-PT``
    folders), or ERNIEKit's own (``ernie.`` names, the ``-Paddle`` folders: ``erniekit_layout``)."""
    weights = read_weights(folder)
    if any(name.startswith(ERNIEKIT_PREFIX) for name in weights):
        weights = erniekit_layout(weights, config, folder)
    else:
        for name, value in weights.items():
            if name.split(".")[-2] in LINEAR_WEIGHTS and value.ndim == 2:
                weights[name] = np.ascontiguousarray(value.T)
    if config.tie_word_embeddings:
        weights.pop("lm_head.weight", None)  # some writers store the shared matrix twice
    return weights


ERNIEKIT_PREFIX = "ernie."  # the names of ERNIEKit's (and FastDeploy's) checkpoints


def erniekit_layout(weights: Dict[str, np.ndarray], config: Ernie45Config, folder: str) -> Dict[str, np.ndarray]:
    """ERNIEKit's checkpoint layout -> this model's names, as Paddle holds them.

    ERNIEKit (``baidu/ERNIE-4.5-*-Paddle``) names weights ``ernie.layers.0...``, holds linear
    weights ``[in, out]`` already, and fuses two groups of projections, which this splits:

    - ``self_attn.qkv_proj`` (``[hidden, (heads + 2 kv heads) * head_dim]``): with grouped-query
      attention, every query head, then the key heads, then the value heads; with as many key/value
      heads as query heads, each head's query, key and value in turn (how ERNIEKit's attention
      reshapes and splits its output);
    - ``mlp.up_gate_proj`` (``[hidden, 2 * intermediate]``): first the half that goes through SiLU
      (``gate_proj``), then ``up_proj``.

    Its own output layer (untied) is ``[hidden, vocab]``, this model's ``[vocab, hidden]``."""
    heads, kv_heads, width = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    converted: Dict[str, np.ndarray] = {}
    for name, value in weights.items():
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
        elif module.endswith("mlp.up_gate_proj"):
            if value.shape[-1] != 2 * config.intermediate_size:
                raise CheckpointError(f"{folder}: {name} has shape {list(value.shape)}; config.json's "
                                      f"intermediate_size {config.intermediate_size} makes it "
                                      f"{2 * config.intermediate_size} wide")
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
    model = Ernie45ForCausalLM(config)
    weights = paddle_layout_weights(folder, config)
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
