"""Taggers: text encoder -> per-token tag scores -> linear-chain CRF (or softmax)."""
from __future__ import annotations

from typing import Any, Dict

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from wenxin.common.constants import InstanceName, Phase
from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import Key
from wenxin.metrics.chunking import chunk_f1
from wenxin.models.base_model import BaseModel
from wenxin.models.crf import LinearChainCrf
from wenxin.models.encoders import ENCODER_SCHEMA, SEQUENCE_ENCODERS, TextEncoder, text_field_info
from wenxin.models.ernie_task import ErnieTaskModel
from wenxin.models.modules import length_mask


@RegisterSet.models.register("SequenceTagger")
class SequenceTagger(BaseModel):
    """Tags every token of ``text_field`` with one of the ``label_field`` tags.

    Outputs: ``predictions`` ``[B, T]`` tag ids (0 past each length), ``seq_lens`` ``[B]``, and
    with gold tags ``loss`` (CRF: mean sequence negative log-likelihood; softmax: mean token
    cross-entropy) and ``labels``."""

    config_schema = {
        "text_field": Key(str, "text_a", doc="the text field (one token per tag)"),
        "label_field": Key(str, "label", doc="the SequenceLabelFieldReader field"),
        "encoder": Key(dict, {}, children=ENCODER_SCHEMA, doc="lstm, gru or transformer"),
        "decoder": Key(str, "crf", choices=["crf", "softmax"]),
        "dropout": Key(float, 0.1, minimum=0.0, maximum=1.0, doc="on the token states"),
    }
    prediction_format = "tagging"

    def structure(self) -> None:
        p = self.model_params
        self.text_field, self.label_field = p["text_field"], p["label_field"]
        text_info = text_field_info(self.data_info, self.text_field, "model.text_field")
        self.tags = self._tags()
        if p["encoder"]["type"] not in SEQUENCE_ENCODERS:
            raise ConfigError(f"model.encoder.type: a tagger needs per-token states: one of "
                              f"{', '.join(SEQUENCE_ENCODERS)}, not '{p['encoder']['type']}'")
        self.encoder = TextEncoder(p["encoder"], text_info)
        self.dropout = nn.Dropout(p["dropout"])
        assert self.encoder.state_dim is not None, "checked above: a sequence encoder"
        self.emissions = nn.Linear(self.encoder.state_dim, len(self.tags))
        self.crf = LinearChainCrf(len(self.tags)) if p["decoder"] == "crf" else None

    def _tags(self) -> list:
        tags = list(self.data_info.get(self.label_field, {}).get("labels", []))
        if len(tags) < 2:
            raise ConfigError(f"model.label_field: '{self.label_field}' has {len(tags)} tags; "
                              f"a tagger needs a SequenceLabelFieldReader field with at least 2")
        return tags

    def token_states(self, fields_dict: Dict[str, paddle.Tensor]) -> paddle.Tensor:
        """The encoder's states ``[B, T, H]`` of the text field's tokens."""
        ids = fields_dict[self.text_field]  # [B, T]
        return self.encoder(ids, fields_dict[f"{self.text_field}_{InstanceName.SEQ_LENS}"])[0]

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        ids = fields_dict[self.text_field]  # [B, T]
        seq_lens = fields_dict[f"{self.text_field}_{InstanceName.SEQ_LENS}"]  # [B]
        states = self.token_states(fields_dict)  # [B, T, H]
        emissions = self.emissions(self.dropout(states)).astype("float32")  # [B, T, N]
        mask = length_mask(seq_lens, paddle.shape(ids)[1], "int64")  # [B, T]
        if self.crf is not None:
            predictions = self.crf.decode(emissions, seq_lens)
        else:
            predictions = paddle.argmax(emissions, axis=-1) * mask
        outputs = {InstanceName.PREDICTIONS: predictions}
        if phase == Phase.PREDICT:
            return outputs
        outputs[InstanceName.SEQ_LENS] = seq_lens  # for the metrics (an exported graph cannot echo an input)
        if self.label_field in fields_dict:
            tags = fields_dict[self.label_field]  # [B, T]
            if self.crf is not None:
                loss = self.crf.negative_log_likelihood(emissions, tags, seq_lens).mean()
            else:
                token_loss = F.cross_entropy(emissions, tags.unsqueeze(-1), reduction="none").squeeze(-1)
                weights = mask.astype("float32")
                loss = (token_loss * weights).sum() / paddle.clip(weights.sum(), min=1.0)
            outputs[InstanceName.LOSS] = loss
            outputs[InstanceName.LABELS] = tags
        return outputs

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        lengths = outputs[InstanceName.SEQ_LENS]

        def names(rows: np.ndarray) -> list:
            return [[self.tags[t] for t in row[:n]] for row, n in zip(rows, lengths)]

        metrics = chunk_f1(names(outputs[InstanceName.LABELS]), names(outputs[InstanceName.PREDICTIONS]))
        if InstanceName.LOSS in outputs:
            metrics["loss"] = float(np.average(outputs[InstanceName.LOSS], weights=meta_info["batch_sizes"]))
        return metrics


@RegisterSet.models.register("BiGruCrf")
class BiGruCrf(SequenceTagger):
    """A bidirectional GRU with a linear-chain CRF (the defaults of ``SequenceTagger``)."""


@RegisterSet.models.register("BiGruSoftmax")
class BiGruSoftmax(SequenceTagger):
    """A bidirectional GRU with an independent softmax per token."""

    config_schema = {**SequenceTagger.config_schema, "decoder": Key(str, "softmax", choices=["crf", "softmax"])}


@RegisterSet.models.register("ErnieFcSeqLabel")
class ErnieFcSeqLabel(SequenceTagger, ErnieTaskModel):
    """A pretrained ERNIE/BERT encoder (``model.encoder_config``) and a per-token linear layer,
    with a softmax per token (ERNIE-kit's ``ErnieFcSeqLabel``) or a linear-chain CRF
    (``decoder: crf``). The text field is an ``ErnieTextFieldReader``, the tags an
    ``ErnieSeqlabelLabelFieldReader`` (word tags spread over word pieces); exported predictions
    are one tag per word."""

    config_schema = {**ErnieTaskModel.config_schema,
                     **{k: v for k, v in SequenceTagger.config_schema.items() if k != "encoder"},
                     "decoder": Key(str, "softmax", choices=["crf", "softmax"])}

    def structure(self) -> None:
        p = self.model_params
        self.text_field, self.label_field = p["text_field"], p["label_field"]
        config = self.build_encoder()
        self.ernie_field(self.text_field, "model.text_field")
        self.tags = self._tags()
        self.dropout = nn.Dropout(p["dropout"])
        self.emissions = self.head(config.hidden_size, len(self.tags))
        self.crf = LinearChainCrf(len(self.tags)) if p["decoder"] == "crf" else None

    def token_states(self, fields_dict: Dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.encode(fields_dict, self.text_field)[0]
