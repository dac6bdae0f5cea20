"""``ErnieTaskModel``: the base of task models on a pretrained ERNIE/BERT encoder."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle
import paddle.nn as nn

from wenxin.common.constants import InstanceName
from wenxin.common.errors import ConfigError
from wenxin.config.schema import REQUIRED, Key, path_key
from wenxin.data.ernie_fields import POS_IDS, SENT_IDS
from wenxin.models.base_model import BaseModel
from wenxin.models.ernie import ErnieConfig, ErnieEncoder

ENCODER_KEYS = {
    "pretrained": path_key("", doc="a PaddleNLP or ERNIE-kit model folder, or a model's name found in the PaddleNLP, "
                                   "AI Studio or Hugging Face Hub cache or wenxin's: fills encoder_config, "
                                   "trainer.checkpoints.pre_train_model and the ERNIE text fields' vocab_path "
                                   "where they are "
                                   "not set"),
    "pretrained_download": Key(bool, False, doc="model.pretrained may name an <org>/<name> that is downloaded from "
                                                "the hub $WENXIN_HUB names (huggingface, the default, modelscope or "
                                                "aistudio) into wenxin's cache, as wenxin download does; "
                                                "WENXIN_OFFLINE=1 keeps to the cache"),
    "encoder_config": Key(str, REQUIRED, non_empty=True,
                          doc="the pretrained model's config: its folder, or config.json / model_config.json "
                              "(PaddleNLP) / ernie_config.json (ERNIE-kit)"),
    "hidden_dropout_prob": Key((float, type(None)), None, minimum=0.0, maximum=1.0,
                               doc="override the config's dropout while fine-tuning (null: the config's)"),
}


class ErnieTaskModel(BaseModel):
    """Keeps the encoder at ``self.ernie``, where pretrained weights load (``ernie.*``: see
    ``wenxin.translation.pretrained``), and checks that text fields fit it."""

    # oneDNN 1.09x (2 layers of 128) to 1.44x (ERNIE 3.0-nano's shape) at batch 8, 1.5-1.7x at 16,
    # 1.9x at 32; 0.5-0.8x at 1 (docs/performance.md)
    onednn_min_rows = 8
    # attention and every layer cost follow the padded length: on ONNX Runtime, 64 rows as sorted
    # batches of 8 ran at 1.41-1.46x of one batch in their order, 16 rows at 1.16-1.18x (on Paddle,
    # which runs batches of 8 or more with oneDNN, a whole batch is faster: docs/performance.md)
    sorted_batch_rows = 8

    config_schema = dict(ENCODER_KEYS)

    def build_encoder(self) -> ErnieConfig:
        """``self.ernie`` from ``model.encoder_config``; returns its config."""
        p = self.model_params
        try:
            config = ErnieConfig.from_file(p["encoder_config"])
        except ConfigError as e:
            raise ConfigError(f"model.encoder_config: {e}") from None
        if p.get("hidden_dropout_prob") is not None:
            config.hidden_dropout_prob = p["hidden_dropout_prob"]
        self.ernie = ErnieEncoder(config)
        return config

    def head(self, inputs: int, outputs: int) -> nn.Linear:
        """A linear layer on the encoder's outputs, initialized as the encoder's own layers."""
        return nn.Linear(inputs, outputs, weight_attr=paddle.ParamAttr(
            initializer=nn.initializer.TruncatedNormal(0.0, self.ernie.config.initializer_range)))

    def ernie_field(self, name: str, key: str) -> Dict[str, Any]:
        """The info of text field ``name`` (named by config key ``key``), checked against the encoder."""
        info = self.data_info.get(name)
        if not info or not info.get("ernie_inputs"):
            ernie_fields = [n for n, i in self.data_info.items() if i.get("ernie_inputs")]
            raise ConfigError(f"{key}: '{name}' is not an ErnieTextFieldReader field of the train_reader "
                              f"(those: {', '.join(ernie_fields) or 'none'})")
        config = self.ernie.config
        if info["vocab_size"] > config.vocab_size:
            raise ConfigError(f"{key}: the vocab of '{name}' has {info['vocab_size']} tokens, more than the "
                              f"encoder's vocab_size {config.vocab_size} (model.encoder_config): another "
                              f"model's vocab.txt?")
        offset = info.get("position_offset", 0)
        if info["max_seq_len"] + offset > config.max_position_embeddings:
            raise ConfigError(f"{key}: max_seq_len {info['max_seq_len']} of '{name}'"
                              f"{f' (positions from {offset})' if offset else ''} is more than the encoder's "
                              f"max_position_embeddings {config.max_position_embeddings}")
        if config.model_type == "ernie_m" and not info.get("ernie_m"):
            raise ConfigError(f"{key}: the encoder is ERNIE-M (model.encoder_config), whose text fields are "
                              f"ErnieMTextFieldReader (its SentencePiece tokenizer, positions from 2); '{name}' "
                              f"is an ErnieTextFieldReader")
        if info.get("ernie_m") and config.model_type not in ("ernie_m", "ernie"):
            raise ConfigError(f"{key}: '{name}' reads ERNIE-M's inputs, but the encoder is a {config.model_type}")
        return info

    def encode(self, fields_dict: Dict[str, paddle.Tensor], name: str,
               task_ids: Optional[paddle.Tensor] = None) -> Tuple[paddle.Tensor, paddle.Tensor]:
        """Token states ``[B, T, H]`` and pooled vector ``[B, H]`` of ERNIE text field ``name``."""
        return self.ernie(fields_dict[name], fields_dict[f"{name}_{InstanceName.SEQ_LENS}"],
                          token_type_ids=fields_dict.get(f"{name}_{SENT_IDS}"),
                          position_ids=fields_dict.get(f"{name}_{POS_IDS}"), task_type_ids=task_ids)
