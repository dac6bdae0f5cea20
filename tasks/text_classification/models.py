"""Text classifiers: embeddings -> BoW / CNN / BiLSTM encoder -> MLP -> softmax."""
from __future__ import annotations

from typing import Any, Dict, Tuple

import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from wenxin.common.constants import InstanceName, Phase
from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import MAX_WIDTH, Key
from wenxin.metrics.classification import classifier_metrics, multi_label_metrics
from wenxin.models.base_model import BaseModel
from wenxin.models.encoders import ENCODER_SCHEMA, TextEncoder
from wenxin.models.ernie_task import ErnieTaskModel
from wenxin.models.outputs import classification_outputs
from wenxin.models.modules import BoWEncoder, CNNEncoder, RNNEncoder, TokenEmbedding


def text_and_labels(model: BaseModel) -> Tuple[Dict[str, Any], int]:
    """The text field's sizes and the number of classes of a classifier (``model.text_field``,
    ``model.num_labels`` or the label field's), checked."""
    p, info = model.model_params, model.data_info
    text_info = info.get(p["text_field"])
    if not text_info or not text_info.get("vocab_size"):
        raise ConfigError(f"model.text_field: '{p['text_field']}' is not a text field of the train_reader")
    num_labels = p["num_labels"] or info.get(p["label_field"], {}).get("num_labels", 0)
    if num_labels < 2:
        raise ConfigError(f"model.num_labels: need at least 2 classes, found {num_labels} "
                          f"(set num_labels or add a label field named '{p['label_field']}')")
    return text_info, num_labels


class BaseClassification(BaseModel):
    """Shared classifier head, loss and metrics; subclasses choose the encoder in ``build_encoder``."""

    config_schema = {
        "text_field": Key(str, "text_a", doc="name of the text field"),
        "label_field": Key(str, "label", doc="name of the label field"),
        "num_labels": Key(int, 0, minimum=0, doc="0: from the label field"),
        "embedding": Key(dict, {}, children={"emb_dim": Key(int, 128, minimum=1, maximum=MAX_WIDTH)}),
        "hidden_size": Key(int, 128, minimum=1, maximum=MAX_WIDTH, doc="MLP width over the encoder output"),
        "dropout": Key(float, 0.1, minimum=0.0, maximum=1.0),
    }

    def structure(self) -> None:
        p = self.model_params
        self.text_field, self.label_field = p["text_field"], p["label_field"]
        text_info, self.num_labels = text_and_labels(self)
        self.encoder = self.build_encoder(text_info)
        self.fc = nn.Linear(self.encoder.output_dim, p["hidden_size"])
        self.dropout = nn.Dropout(p["dropout"])
        self.output_layer = nn.Linear(p["hidden_size"], self.num_labels)

    def build_encoder(self, text_info: Dict[str, Any]) -> nn.Layer:
        """The encoder (with an ``output_dim``); embedding-based ones also set ``self.embedding``."""
        raise NotImplementedError

    def _embedding(self, text_info: Dict[str, Any]) -> int:
        emb_dim = self.model_params["embedding"]["emb_dim"]
        self.embedding = TokenEmbedding(text_info["vocab_size"], emb_dim, text_info["padding_id"])
        return emb_dim

    def encode(self, ids: paddle.Tensor, seq_lens: paddle.Tensor) -> paddle.Tensor:
        """ids ``[B, T]`` -> ``[B, H_enc]``."""
        return self.encoder(self.embedding(ids), seq_lens)

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        ids = fields_dict[self.text_field]  # [B, T]
        seq_lens = fields_dict[f"{self.text_field}_{InstanceName.SEQ_LENS}"]  # [B]
        encoded = self.encode(ids, seq_lens)  # [B, H_enc]
        hidden = self.dropout(paddle.tanh(self.fc(encoded)))  # [B, H]
        logits = self.output_layer(hidden).astype("float32")  # [B, C]
        return classification_outputs(logits, fields_dict, self.label_field, phase)

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        return classifier_metrics(outputs, meta_info.get("batch_sizes"), self.num_labels)


@RegisterSet.models.register("BowClassification")
class BowClassification(BaseClassification):
    """Bag of words (with n-gram tokens: fastText-style): pooled token embeddings."""

    config_schema = {**BaseClassification.config_schema,
                     "pooling": Key(str, "mean", choices=["mean", "max", "mean_max"]),
                     "token_dropout": Key(float, 0.0, minimum=0.0, maximum=0.95,
                                          doc="drop tokens from the bag while training")}

    def build_encoder(self, text_info: Dict[str, Any]) -> nn.Layer:
        emb_dim = self._embedding(text_info)
        return BoWEncoder(emb_dim, self.model_params["pooling"], self.model_params["token_dropout"])


@RegisterSet.models.register("CnnClassification")
class CnnClassification(BaseClassification):
    """Convolutions of several widths, max-pooled over time."""

    onednn_min_rows = 8  # oneDNN 1.22x at batch 8, 1.83x at 16, 3.05x at 64; 0.39x at 1 (docs/performance.md)

    config_schema = {**BaseClassification.config_schema,
                     "num_filters": Key(int, 128, minimum=1, maximum=MAX_WIDTH),
                     "filter_sizes": Key(list, [2, 3, 4], items=Key(int, minimum=1))}

    def build_encoder(self, text_info: Dict[str, Any]) -> nn.Layer:
        emb_dim = self._embedding(text_info)
        return CNNEncoder(emb_dim, self.model_params["num_filters"], self.model_params["filter_sizes"])


@RegisterSet.models.register("LstmClassification")
class LstmClassification(BaseClassification):
    """Bidirectional LSTM (or GRU with ``cell: gru``), mean-pooled over the real time steps."""

    config_schema = {**BaseClassification.config_schema,
                     "rnn_hidden_size": Key(int, 128, minimum=1, maximum=MAX_WIDTH),
                     "num_layers": Key(int, 1, minimum=1),
                     "cell": Key(str, "lstm", choices=["lstm", "gru"])}

    def build_encoder(self, text_info: Dict[str, Any]) -> nn.Layer:
        p = self.model_params
        emb_dim = self._embedding(text_info)
        return RNNEncoder(emb_dim, p["rnn_hidden_size"], p["num_layers"], p["cell"], p["dropout"])


@RegisterSet.models.register("EncoderClassification")
class EncoderClassification(BaseClassification):
    """Any ``TextEncoder`` (``encoder.type``: bow, cnn, lstm, gru, transformer), its pooled vector
    -> MLP -> softmax. The encoder owns its embeddings (``embedding`` is unused), so a pretrained
    transformer loads as a whole: ``prefix_map: {"ernie.": "encoder.transformer."}``."""

    config_schema = {**BaseClassification.config_schema,
                     "encoder": Key(dict, {}, children=ENCODER_SCHEMA)}

    def build_encoder(self, text_info: Dict[str, Any]) -> nn.Layer:
        return TextEncoder(self.model_params["encoder"], text_info)

    def encode(self, ids: paddle.Tensor, seq_lens: paddle.Tensor) -> paddle.Tensor:
        return self.encoder(ids, seq_lens)[1]


@RegisterSet.models.register("TransformerClassification")
class TransformerClassification(EncoderClassification):
    """``EncoderClassification`` with wenxin's transformer encoder (trained from scratch, or
    warm-started from ``ErnieMaskedLM`` pretraining) by default. For a downloaded ERNIE/BERT
    model, use ``ErnieClassification``."""

    onednn_min_rows = 8  # oneDNN 1.57x at batch 8, 1.78x at 16, 2.03x at 64; 0.79x at 1 (docs/performance.md)

    config_schema = {**BaseClassification.config_schema,
                     "encoder": Key(dict, {}, children={**ENCODER_SCHEMA, "type": Key(
                         str, "transformer", choices=ENCODER_SCHEMA["type"].choices)})}


@RegisterSet.models.register("ErnieClassification")
class ErnieClassification(ErnieTaskModel):
    """A pretrained ERNIE/BERT encoder (``model.encoder_config``) and one linear layer on its
    pooled ``[CLS]`` vector, as ERNIE-kit's ``ErnieClassification`` and PaddleNLP's
    ``ErnieForSequenceClassification`` (whose ``classifier.*`` weights also load). The text
    field is an ``ErnieTextFieldReader`` (one text, or a pair with ``pair_with``)."""

    config_schema = {**ErnieTaskModel.config_schema,
                     "text_field": Key(str, "text_a", doc="name of the ErnieTextFieldReader field"),
                     "label_field": Key(str, "label", doc="name of the label field"),
                     "num_labels": Key(int, 0, minimum=0, doc="0: from the label field"),
                     "dropout": Key(float, 0.1, minimum=0.0, maximum=1.0, doc="on the pooled vector")}

    def structure(self) -> None:
        p = self.model_params
        config = self.build_encoder()
        self.ernie_field(p["text_field"], "model.text_field")
        _, self.num_labels = text_and_labels(self)
        self.dropout = nn.Dropout(p["dropout"])
        self.classifier = self.head(config.hidden_size, self.num_labels)

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        _, pooled = self.encode(fields_dict, self.model_params["text_field"])  # [B, H]
        logits = self.classifier(self.dropout(pooled)).astype("float32")  # [B, C]
        return classification_outputs(logits, fields_dict, self.model_params["label_field"], phase)

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        return classifier_metrics(outputs, meta_info.get("batch_sizes"), self.num_labels)


@RegisterSet.models.register("MultiLabelClassification")
class MultiLabelClassification(ErnieTaskModel):
    """ERNIE-kit's ``MultiLabelClassification``: a pretrained ERNIE/BERT encoder, one linear
    layer on the pooled vector and an independent sigmoid per label, trained with binary
    cross-entropy. The labels are a ``MultiLabelFieldReader`` field; a label is predicted when
    its probability exceeds ``threshold``."""

    config_schema = {**ErnieTaskModel.config_schema,
                     "text_field": Key(str, "text_a", doc="name of the ErnieTextFieldReader field"),
                     "label_field": Key(str, "label", doc="name of the MultiLabelFieldReader field"),
                     "num_labels": Key(int, 0, minimum=0, doc="0: from the label field"),
                     "dropout": Key(float, 0.1, minimum=0.0, maximum=1.0, doc="on the pooled vector"),
                     "threshold": Key(float, 0.5, minimum=0.0, maximum=1.0, doc="probability that predicts a label")}
    prediction_format = "multi_label"

    def structure(self) -> None:
        p = self.model_params
        config = self.build_encoder()
        self.ernie_field(p["text_field"], "model.text_field")
        found = self.data_info.get(p["label_field"], {}).get("num_labels", 0)
        self.num_labels = p["num_labels"] or found
        if self.num_labels < 1 or (found and found != self.num_labels):
            raise ConfigError(f"model.num_labels: {p['num_labels']}, but the label field '{p['label_field']}' has "
                              f"{found} labels" if found else f"model.label_field: '{p['label_field']}' is not a "
                              f"MultiLabelFieldReader field of the train_reader (or set num_labels)")
        self.dropout = nn.Dropout(p["dropout"])
        self.fc_layer = self.head(config.hidden_size, self.num_labels)

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        p = self.model_params
        _, pooled = self.encode(fields_dict, p["text_field"])  # [B, H]
        logits = self.fc_layer(self.dropout(pooled)).astype("float32")  # [B, C]
        probs = F.sigmoid(logits)
        outputs = {InstanceName.PROBS: probs,
                   InstanceName.PREDICTIONS: (probs > p["threshold"]).astype("int64")}  # [B, C]
        if phase != Phase.PREDICT and p["label_field"] in fields_dict:
            labels = fields_dict[p["label_field"]]  # [B, C] multi-hot
            outputs[InstanceName.LOSS] = F.binary_cross_entropy_with_logits(logits, labels)
            outputs[InstanceName.LABELS] = labels
        return outputs

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        return multi_label_metrics(outputs, meta_info.get("batch_sizes"), self.model_params["threshold"])


@RegisterSet.models.register("ErnieKitBowClassification")
class ErnieKitBowClassification(BaseModel):
    """ERNIE-kit's ``BowClassification`` network, which ERNIE-kit task files select (see
    ``wenxin.translation.erniekit``): the sum of the tokens' embeddings, two tanh layers (``hid_dim``,
    ``hid_dim2``) and a softmax. wenxin's own ``BowClassification`` mean/max-pools n-gram bags into
    one hidden layer. Unlike ERNIE-kit, padding is left out of the sum, so a text's vector does not
    depend on the batch it is in."""

    config_schema = {
        "text_field": Key(str, "text_a"),
        "label_field": Key(str, "label"),
        "vocab_size": Key(int, 0, minimum=0, doc="rows of the embedding table (0: the vocab's size); "
                                                 "at least the vocab's size"),
        "num_labels": Key(int, 0, minimum=0, doc="0: from the label field"),
        "emb_dim": Key(int, 128, minimum=1, maximum=MAX_WIDTH),
        "hid_dim": Key(int, 128, minimum=1, maximum=MAX_WIDTH),
        "hid_dim2": Key(int, 96, minimum=1, maximum=MAX_WIDTH),
    }

    def structure(self) -> None:
        p = self.model_params
        self._embedding_and_labels()
        self.encoder: nn.Layer = BoWEncoder(p["emb_dim"], pooling="sum")
        self.fc_1 = nn.Linear(p["emb_dim"], p["hid_dim"])
        self.fc_2 = nn.Linear(p["hid_dim"], p["hid_dim2"])
        self.fc_prediction = nn.Linear(p["hid_dim2"], self.num_labels)

    def _embedding_and_labels(self) -> None:
        """The embedding table (``vocab_size`` rows, checked against the vocab) and ``num_labels``."""
        p = self.model_params
        text_info, self.num_labels = text_and_labels(self)
        vocab_size = p["vocab_size"] or text_info["vocab_size"]
        if vocab_size < text_info["vocab_size"]:
            raise ConfigError(f"model.vocab_size: {vocab_size} is smaller than the vocab of "
                              f"'{p['text_field']}' ({text_info['vocab_size']} tokens)")
        found = self.data_info.get(p["label_field"], {}).get("num_labels", 0)
        if found and p["num_labels"] and found > p["num_labels"]:
            raise ConfigError(f"model.num_labels: {p['num_labels']}, but the training data has {found} labels")
        self.embedding = TokenEmbedding(vocab_size, p["emb_dim"], text_info["padding_id"])

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        p = self.model_params
        ids = fields_dict[p["text_field"]]  # [B, T]
        bag = self.encoder(self.embedding(ids), fields_dict[f"{p['text_field']}_{InstanceName.SEQ_LENS}"])  # [B, E]
        hidden = paddle.tanh(self.fc_2(paddle.tanh(self.fc_1(bag))))  # [B, H2]
        logits = self.fc_prediction(hidden).astype("float32")  # [B, C]
        return classification_outputs(logits, fields_dict, p["label_field"], phase)

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        return classifier_metrics(outputs, meta_info.get("batch_sizes"), self.num_labels)


@RegisterSet.models.register("ErnieKitCnnClassification")
class ErnieKitCnnClassification(ErnieKitBowClassification):
    """ERNIE-kit's ``CNNClassification`` network, which ERNIE-kit task files select: convolutions
    of the ``filter_sizes`` widths with ``hid_dim`` filters each and tanh, max-pooled over time,
    then a linear layer to ``hid_dim2`` (no activation, as in ERNIE-kit) and a softmax. Unlike
    ERNIE-kit, convolutions are padded and the padding never wins the max, so a text's vector
    does not depend on its batch. (wenxin's ``CnnClassification`` has ReLU and one tanh layer.)"""

    config_schema = {**{k: v for k, v in ErnieKitBowClassification.config_schema.items() if k != "hid_dim2"},
                     "hid_dim2": Key(int, 96, minimum=1, maximum=MAX_WIDTH),
                     "filter_sizes": Key(list, [3], items=Key(int, minimum=1))}

    def structure(self) -> None:
        p = self.model_params
        self._embedding_and_labels()
        self.encoder = CNNEncoder(p["emb_dim"], p["hid_dim"], p["filter_sizes"], activation="tanh")
        self.fc_1 = nn.Linear(self.encoder.output_dim, p["hid_dim2"])
        self.fc_prediction = nn.Linear(p["hid_dim2"], self.num_labels)

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        p = self.model_params
        ids = fields_dict[p["text_field"]]  # [B, T]
        pooled = self.encoder(self.embedding(ids), fields_dict[f"{p['text_field']}_{InstanceName.SEQ_LENS}"])  # [B, F]
        logits = self.fc_prediction(self.fc_1(pooled)).astype("float32")  # [B, C]
        return classification_outputs(logits, fields_dict, p["label_field"], phase)
