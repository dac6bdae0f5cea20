"""The ERNIE/BERT encoder: word, position, token-type and (ERNIE 3.0) task-type embeddings,
post-norm transformer blocks and a tanh pooler, configured from a pretrained model's config file.
ERNIE-M is the same network without token types (``model_type: ernie_m``); its text fields
number positions from 2 (``wenxin.data.ernie_m``).

Parameter names are those of PaddleNLP's ``ErnieModel``/``BertModel`` (``embeddings.*``,
``encoder.layers.N.*``, ``pooler.dense.*``), so PaddleNLP checkpoints load by name;
``wenxin.translation.pretrained`` maps ERNIE-kit's names onto them.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, Optional, Tuple

import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle
import paddle.nn as nn

from wenxin.common.errors import ConfigError
from wenxin.models.modules import length_mask

# config file names, in the order they are looked for in a model folder
CONFIG_FILES = ("config.json", "model_config.json", "ernie_config.json", "bert_config.json",
                "ernie_m_1.0_base_config.json")



def _typed(value: Any, kind: str, name: str, source: str) -> Any:
    """A config value of a field of type ``kind`` ("int", "float", "bool", "str"), checked."""
    if kind in ("int", "float") and (isinstance(value, bool) or not isinstance(value, (int, float))
                                     or (kind == "int" and not float(value).is_integer())):
        raise ConfigError(f"{source}: '{name}' must be a{'n integer' if kind == 'int' else ' number'}, got {value!r}")
    if kind == "bool" and not isinstance(value, bool):
        raise ConfigError(f"{source}: '{name}' must be true or false, got {value!r}")
    if kind == "str" and not isinstance(value, str):
        raise ConfigError(f"{source}: '{name}' must be a string, got {value!r}")
    return int(value) if kind == "int" else value


@dataclasses.dataclass
class ErnieConfig:
    """The shape of an ERNIE/BERT encoder. Field names follow PaddleNLP's ``config.json``;
    ``from_dict`` also reads ERNIE-kit's ``ernie_config.json`` spellings."""

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 0  # 0: 4 x hidden_size
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # 0: no token-type (sentence) embeddings
    use_task_id: bool = False
    task_type_vocab_size: int = 3
    task_id: int = 0  # the task type of every token when none is fed
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12  # PaddleNLP's default; ERNIE-kit's and older PaddleNLP's is 1e-5
    pad_token_id: int = 0
    pooling: str = "first"  # pooler input: the first token's state ([CLS]) or the mean of the real tokens
    model_type: str = "ernie"  # "ernie_m": ERNIE-M, whose text fields number positions from 2

    @classmethod
    def from_dict(cls, values: Dict[str, Any], source: str) -> "ErnieConfig":
        """From a ``config.json`` / ``model_config.json`` (PaddleNLP) or ``ernie_config.json``
        (ERNIE-kit) object; unknown keys are ignored, wrong types are errors naming ``source``."""
        # Paddle's LayerNorm default (1e-5) held where a config does not say: ERNIE-kit's
        # ernie_config.json and PaddleNLP's older model_config.json; PaddleNLP's config.json: 1e-12
        default_eps = 1e-12 if isinstance(values, dict) and "model_type" in values else 1e-5
        if "init_args" in values and isinstance(values["init_args"], list) and values["init_args"]:
            values = values["init_args"][0]  # PaddleNLP's older model_config.json
            if isinstance(values, dict) and "init_args" in values:  # a task model wrapping the encoder
                values = values["init_args"][0]
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: not an ERNIE/BERT config object")
        values = dict(values)
        if values.get("model_type") in ("ernie_m", "ernie-m"):
            # PaddleNLP's ErnieMModel: no token types, a feed-forward of 4 x hidden whatever
            # intermediate_size says, and Paddle's default LayerNorm epsilon
            values.update(model_type="ernie_m", type_vocab_size=0, intermediate_size=0, use_task_id=False)
            default_eps = 1e-5
        elif not isinstance(values.get("model_type"), str):
            values.pop("model_type", None)
        if "sent_type_vocab_size" in values:  # ERNIE-kit's name
            values["type_vocab_size"] = values.pop("sent_type_vocab_size")
        if values.get("use_sent_id") is False:
            values["type_vocab_size"] = 0
        if "emb_size" in values and values["emb_size"] != values.get("hidden_size"):
            raise ConfigError(f"{source}: emb_size {values['emb_size']} differs from hidden_size "
                              f"{values.get('hidden_size')}; factorized embeddings are not supported")
        if "vocab_size" not in values:
            raise ConfigError(f"{source}: no 'vocab_size'")
        kwargs = {field.name: _typed(values[field.name], str(field.type), field.name, source)
                  for field in dataclasses.fields(cls) if values.get(field.name) is not None}
        kwargs.setdefault("layer_norm_eps", default_eps)
        config = cls(**kwargs)
        config.check(source)
        return config

    @classmethod
    def from_file(cls, path: str) -> "ErnieConfig":
        """From a config file, or a model folder holding one of ``CONFIG_FILES``."""
        file = find_config_file(path)
        try:
            with open(file, encoding="utf-8") as f:
                values = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(f"{file}: cannot read the encoder config ({e})") from None
        return cls.from_dict(values, file)

    def check(self, source: str) -> None:
        problems = [f"{name} must be >= 1" for name in ("vocab_size", "hidden_size", "num_hidden_layers",
                                                         "num_attention_heads", "max_position_embeddings")
                    if getattr(self, name) < 1]
        if self.num_attention_heads >= 1 and self.hidden_size % self.num_attention_heads:
            problems.append(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                            f"{self.num_attention_heads}")
        if self.hidden_act not in ("gelu", "relu"):
            problems.append(f"hidden_act {self.hidden_act!r} is not gelu or relu")
        if not 0 <= self.pad_token_id < max(self.vocab_size, 1):
            problems.append(f"pad_token_id {self.pad_token_id} is outside the vocab of {self.vocab_size}")
        if self.use_task_id and not 0 <= self.task_id < self.task_type_vocab_size:
            problems.append(f"task_id {self.task_id} is outside task_type_vocab_size {self.task_type_vocab_size}")
        if self.pooling not in ("first", "mean"):
            problems.append(f"pooling {self.pooling!r} is not first or mean")
        if problems:
            raise ConfigError(f"{source}: " + "; ".join(problems))


def find_config_file(path: str) -> str:
    """``path`` itself, or the first of ``CONFIG_FILES`` in the folder ``path``."""
    if os.path.isdir(path):
        for name in CONFIG_FILES:
            if os.path.isfile(os.path.join(path, name)):
                return os.path.join(path, name)
        raise ConfigError(f"{path}: no encoder config in this folder (looked for {', '.join(CONFIG_FILES)})")
    if not os.path.isfile(path):
        raise ConfigError(f"encoder config not found: {path}")
    return path


class ErnieEmbeddings(nn.Layer):
    """Sum of word, position, token-type and task-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: ErnieConfig) -> None:
        super().__init__()
        weights = paddle.ParamAttr(initializer=nn.initializer.Normal(0.0, config.initializer_range))
        hidden = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, hidden, padding_idx=config.pad_token_id,
                                            weight_attr=weights)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, hidden, weight_attr=weights)
        self.token_type_embeddings = (nn.Embedding(config.type_vocab_size, hidden, weight_attr=weights)
                                      if config.type_vocab_size else None)
        self.task_type_embeddings = (nn.Embedding(config.task_type_vocab_size, hidden, weight_attr=weights)
                                     if config.use_task_id else None)
        self.task_id = config.task_id
        self.layer_norm = nn.LayerNorm(hidden, epsilon=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, ids: paddle.Tensor, token_type_ids: Optional[paddle.Tensor] = None,
                position_ids: Optional[paddle.Tensor] = None,
                task_type_ids: Optional[paddle.Tensor] = None) -> paddle.Tensor:
        if position_ids is None:
            position_ids = paddle.arange(paddle.shape(ids)[1], dtype="int64").unsqueeze(0)  # [1, T]
        x = self.word_embeddings(ids) + self.position_embeddings(position_ids)  # [B, T, H]
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = paddle.zeros_like(ids)
            x = x + self.token_type_embeddings(token_type_ids)
        if self.task_type_embeddings is not None:
            if task_type_ids is None:
                task_type_ids = paddle.full_like(ids, self.task_id)
            x = x + self.task_type_embeddings(task_type_ids)
        return self.dropout(self.layer_norm(x))


class ErniePooler(nn.Layer):
    """tanh(linear(summary)) of the first token's state, or of the mean of the real tokens."""

    def __init__(self, hidden: int, pooling: str, initializer_range: float) -> None:
        super().__init__()
        self.pooling = pooling
        self.dense = nn.Linear(hidden, hidden, weight_attr=paddle.ParamAttr(
            initializer=nn.initializer.Normal(0.0, initializer_range)))

    def forward(self, states: paddle.Tensor, mask: paddle.Tensor) -> paddle.Tensor:
        if self.pooling == "first":
            summary = states[:, 0]  # [B, H]
        else:
            weights = mask.unsqueeze(-1)  # [B, T, 1]
            summary = (states * weights).sum(axis=1) / paddle.clip(weights.sum(axis=1), min=1.0)
        return paddle.tanh(self.dense(summary))


class ErnieEncoder(nn.Layer):
    """ERNIE 1.0/2.0/3.0 and BERT: embeddings, ``num_hidden_layers`` post-norm transformer blocks
    (GELU or ReLU) and the pooler.

    ``forward(ids [B, T], seq_lens [B], token_type_ids, position_ids, task_type_ids)`` returns
    the token states ``[B, T, H]`` and the pooled vector ``[B, H]``. Attention ignores the
    positions past each sequence's length (the padding); the optional ids default to zeros
    (token and task types) and ``0..T-1`` (positions), as in PaddleNLP and ERNIE-kit.

    Args:
        config: the encoder's shape (``ErnieConfig.from_file`` reads a pretrained model's).
    """

    def __init__(self, config: ErnieConfig) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = self.output_dim = config.hidden_size
        self.max_position = config.max_position_embeddings
        self.embeddings = ErnieEmbeddings(config)
        weights = paddle.ParamAttr(initializer=nn.initializer.Normal(0.0, config.initializer_range))
        layer = nn.TransformerEncoderLayer(
            config.hidden_size, config.num_attention_heads, config.intermediate_size or 4 * config.hidden_size,
            dropout=config.hidden_dropout_prob, activation=config.hidden_act,
            attn_dropout=config.attention_probs_dropout_prob, act_dropout=0.0, weight_attr=weights,
            layer_norm_eps=config.layer_norm_eps)
        self.encoder = nn.TransformerEncoder(layer, config.num_hidden_layers)
        self.pooler = ErniePooler(config.hidden_size, config.pooling, config.initializer_range)

    @property
    def word_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def forward(self, ids: paddle.Tensor, seq_lens: paddle.Tensor, token_type_ids: Optional[paddle.Tensor] = None,
                position_ids: Optional[paddle.Tensor] = None,
                task_type_ids: Optional[paddle.Tensor] = None) -> Tuple[paddle.Tensor, paddle.Tensor]:
        x = self.embeddings(ids, token_type_ids, position_ids, task_type_ids)  # [B, T, H]
        batch, length = paddle.shape(ids)[0], paddle.shape(ids)[1]
        mask = length_mask(seq_lens, length, x.dtype)  # [B, T]
        attention_bias = ((1.0 - mask) * -1e4).unsqueeze([1, 2])  # [B, 1, 1, T]: padding gets no attention
        # [B, heads, T, T], made once for every layer: Paddle's CPU add of the attention scores and
        # a broadcast [B, 1, 1, T] took 8x as long as of a same-shape one (9.9 against 1.2 ms, ERNIE-nano)
        attention_bias = paddle.expand(attention_bias, [batch, self.config.num_attention_heads, length, length])
        states = self.encoder(x, attention_bias)  # [B, T, H]
        return states, self.pooler(states, mask)

