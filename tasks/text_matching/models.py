"""Matching models: one shared text encoder applied to both texts of a pair."""
from __future__ import annotations

from typing import Any, Dict

import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from wenxin.common.constants import InstanceName, Phase
from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import MAX_WIDTH, Key
from wenxin.metrics.classification import accuracy, binary_auc, classifier_metrics
from wenxin.models.base_model import BaseModel
from wenxin.models.encoders import ENCODER_SCHEMA, TextEncoder, shared_vocab_info
from wenxin.models.ernie_task import ErnieTaskModel
from wenxin.models.outputs import classification_outputs
from wenxin.models.modules import BoWEncoder, TokenEmbedding


def _encode(encoder: TextEncoder, fields: Dict[str, paddle.Tensor], name: str) -> paddle.Tensor:
    """The pooled vector ``[B, D]`` of text field ``name``."""
    return encoder(fields[name], fields[f"{name}_{InstanceName.SEQ_LENS}"])[1]


def pair_labels(model: BaseModel, label_field: str, configured: int = 0) -> int:
    """The number of classes of a pointwise matcher (``num_labels`` or the label field's), checked."""
    num_labels = configured or model.data_info.get(label_field, {}).get("num_labels", 0)
    if num_labels < 2:
        raise ConfigError(f"model.label_field: '{label_field}' has {num_labels} labels; need 2 or more")
    return num_labels


@RegisterSet.models.register("PointwiseMatching")
class PointwiseMatching(BaseModel):
    """Classifies a pair: ``[u, v, |u - v|, u * v]`` of the two encodings -> MLP -> softmax.
    Outputs ``probs``, ``predictions`` and, with labels, ``loss`` and ``labels``."""

    config_schema = {
        "text_a_field": Key(str, "text_a"),
        "text_b_field": Key(str, "text_b"),
        "label_field": Key(str, "label"),
        "encoder": Key(dict, {}, children=ENCODER_SCHEMA, doc="shared by both texts"),
        "hidden_size": Key(int, 128, minimum=1, maximum=MAX_WIDTH),
        "dropout": Key(float, 0.1, minimum=0.0, maximum=1.0),
    }

    def structure(self) -> None:
        p = self.model_params
        self.a, self.b, self.label_field = p["text_a_field"], p["text_b_field"], p["label_field"]
        info = shared_vocab_info(self.data_info, {"model.text_a_field": self.a, "model.text_b_field": self.b})
        self.num_labels = pair_labels(self, self.label_field)
        self.encoder = TextEncoder(p["encoder"], info)
        self.fc = nn.Linear(4 * self.encoder.output_dim, p["hidden_size"])
        self.dropout = nn.Dropout(p["dropout"])
        self.output_layer = nn.Linear(p["hidden_size"], self.num_labels)

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        u, v = _encode(self.encoder, fields_dict, self.a), _encode(self.encoder, fields_dict, self.b)  # [B, D]
        features = paddle.concat([u, v, paddle.abs(u - v), u * v], axis=-1)  # [B, 4D]
        logits = self.output_layer(self.dropout(paddle.tanh(self.fc(features)))).astype("float32")  # [B, C]
        return classification_outputs(logits, fields_dict, self.label_field, phase)

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        return classifier_metrics(outputs, meta_info.get("batch_sizes"), self.num_labels, macro_f1=False)


@RegisterSet.models.register("PairwiseMatching")
class PairwiseMatching(BaseModel):
    """Scores a (query, title) pair by the cosine of their encodings, mapped to [0, 1].

    Training reads triples (``query``, ``pos_title``, ``neg_title``) and minimizes the margin
    loss ``max(0, margin - cos(q, pos) + cos(q, neg))``. Evaluation and prediction read pairs
    (``query``, ``title`` and, to evaluate, a 0/1 ``label``): ``scores`` ``[B]`` in [0, 1], AUC,
    and accuracy with ``score > threshold`` (default 0.5: a positive cosine) as "matches"."""

    config_schema = {
        "query_field": Key(str, "query"),
        "pos_field": Key(str, "pos_title", doc="training: the matching text"),
        "neg_field": Key(str, "neg_title", doc="training: the non-matching text"),
        "title_field": Key(str, "title", doc="evaluation and prediction: the text to score"),
        "label_field": Key(str, "label", doc="evaluation: 1 matches, 0 does not"),
        "encoder": Key(dict, {}, children=ENCODER_SCHEMA, doc="shared by all texts"),
        "margin": Key(float, 0.1, minimum=0.0),
        "threshold": Key(float, 0.5, minimum=0.0, maximum=1.0,
                         doc="score above which a pair is predicted to match (for acc); margin "
                             "training does not calibrate scores, so pick it on dev data"),
    }
    prediction_format = "score"

    def structure(self) -> None:
        p = self.model_params
        fields = {f"model.{k}": p[k] for k in ("query_field", "pos_field", "neg_field")}
        info = shared_vocab_info(self.data_info, fields)
        self.encoder = TextEncoder(p["encoder"], info)

    def embed(self, fields: Dict[str, paddle.Tensor], name: str) -> paddle.Tensor:
        """The vector ``[B, D]`` of text field ``name``."""
        return _encode(self.encoder, fields, name)

    def _similarity(self, fields: Dict[str, paddle.Tensor], other: str) -> paddle.Tensor:
        query = self.embed(fields, self.model_params["query_field"])
        return F.cosine_similarity(query, self.embed(fields, other), axis=-1)  # [B]

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        p = self.model_params
        if phase == Phase.TRAINING:
            positive = self._similarity(fields_dict, p["pos_field"])
            negative = self._similarity(fields_dict, p["neg_field"])
            loss = F.relu(p["margin"] - positive + negative).mean()
            return {InstanceName.LOSS: loss, InstanceName.SCORES: (positive + 1.0) / 2.0}
        if p["title_field"] not in fields_dict:
            raise ConfigError(f"{type(self).__name__}: evaluation and prediction read pairs: the reader needs "
                              f"fields '{p['query_field']}' and '{p['title_field']}' (and '{p['label_field']}')")
        scores = (self._similarity(fields_dict, p["title_field"]) + 1.0) / 2.0  # [B] in [0, 1]
        predictions = (scores > self.model_params["threshold"]).astype("int64")
        outputs = {InstanceName.SCORES: scores, InstanceName.PREDICTIONS: predictions}
        if phase != Phase.PREDICT and p["label_field"] in fields_dict:
            outputs[InstanceName.LABELS] = fields_dict[p["label_field"]]
        return outputs

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        labels = outputs[InstanceName.LABELS]
        return {"acc": accuracy(labels, outputs[InstanceName.PREDICTIONS]),
                "auc": binary_auc(labels, outputs[InstanceName.SCORES])}


@RegisterSet.models.register("ErnieKitBowMatchingPairwise")
class ErnieKitBowMatchingPairwise(BaseModel):
    """ERNIE-kit's ``BowMatchingPairwise`` network, which ERNIE-kit task files select (see
    ``wenxin.translation.erniekit``). Each text: the sum of its tokens' embeddings -> softsign ->
    linear -> ReLU, one embedding table for all texts. Trained on (query ``text_a``, matching
    ``text_b``, non-matching ``text_c``) with the margin ranking loss on cosines (margin 0.1);
    evaluated and exported on (``text_a``, ``text_b``) pairs as ``[1 - s, s]`` with
    ``s = (cos + 1) / 2``, against a 0/1 ``label``. Padding is left out of the sums."""

    config_schema = {
        "vocab_size": Key(int, 0, minimum=0, doc="rows of the embedding table (0: the vocab's size)"),
        "emb_dim": Key(int, 128, minimum=1, maximum=MAX_WIDTH),
        "hid_dim": Key(int, 128, minimum=1, maximum=MAX_WIDTH),
        "margin": Key(float, 0.1, minimum=0.0),
    }
    FIELDS = ("text_a", "text_b", "text_c")

    def structure(self) -> None:
        p = self.model_params
        sizes = {name: self.data_info[name]["vocab_size"] for name in self.FIELDS
                 if self.data_info.get(name, {}).get("vocab_size")}
        if "text_a" not in sizes:
            raise ConfigError("dataset_reader.train_reader: ErnieKitBowMatchingPairwise reads text fields "
                              "text_a, text_b and text_c")
        if len(set(sizes.values())) > 1:
            raise ConfigError(f"dataset_reader.train_reader: the texts share one embedding table, but their vocabs "
                              f"differ in size: {sizes}")
        vocab_size = p["vocab_size"] or sizes["text_a"]
        if vocab_size < sizes["text_a"]:
            raise ConfigError(f"model.vocab_size: {vocab_size} is smaller than the vocab ({sizes['text_a']} tokens)")
        self.embedding = TokenEmbedding(vocab_size, p["emb_dim"], self.data_info["text_a"]["padding_id"])
        self.pool = BoWEncoder(p["emb_dim"], pooling="sum")
        self.fc = nn.Linear(p["emb_dim"], p["hid_dim"])

    def _encode(self, fields: Dict[str, paddle.Tensor], name: str) -> paddle.Tensor:
        summed = self.pool(self.embedding(fields[name]), fields[f"{name}_{InstanceName.SEQ_LENS}"])  # [B, E]
        return F.relu(self.fc(F.softsign(summed)))  # [B, H]

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        query = self._encode(fields_dict, "text_a")
        positive = F.cosine_similarity(query, self._encode(fields_dict, "text_b"), axis=1)  # [B]
        if phase == Phase.TRAINING:
            negative = F.cosine_similarity(query, self._encode(fields_dict, "text_c"), axis=1)  # [B]
            loss = F.relu(self.model_params["margin"] - positive + negative).mean()
            return {InstanceName.LOSS: loss}
        score = ((positive + 1.0) / 2.0).reshape([-1, 1])  # [B, 1]
        probs = paddle.concat([1.0 - score, score], axis=-1)  # [B, 2]
        outputs = {InstanceName.PROBS: probs, InstanceName.PREDICTIONS: paddle.argmax(probs, axis=-1)}
        if phase != Phase.PREDICT and "label" in fields_dict:
            labels = fields_dict["label"]  # [B]
            outputs[InstanceName.LOSS] = F.nll_loss(paddle.log(paddle.clip(probs, min=1e-12)), labels)
            outputs[InstanceName.LABELS] = labels
        return outputs

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        return classifier_metrics(outputs, meta_info.get("batch_sizes"), 2)


@RegisterSet.models.register("ErnieMatchingFcPointwise")
class ErnieMatchingFcPointwise(ErnieTaskModel):
    """ERNIE-kit's ``ErnieMatchingFcPointwise``: the pair encoded together (an
    ``ErnieTextFieldReader`` with ``pair_with``: ``[CLS] a [SEP] b [SEP]``), its pooled vector ->
    dropout -> two linear layers -> softmax."""

    config_schema = {**ErnieTaskModel.config_schema,
                     "text_field": Key(str, "text_a", doc="the ErnieTextFieldReader field holding the pair"),
                     "label_field": Key(str, "label"),
                     "num_labels": Key(int, 0, minimum=0, doc="0: from the label field"),
                     "dropout": Key(float, 0.1, minimum=0.0, maximum=1.0)}

    def structure(self) -> None:
        p = self.model_params
        config = self.build_encoder()
        self.ernie_field(p["text_field"], "model.text_field")
        self.num_labels = pair_labels(self, p["label_field"], p["num_labels"])
        self.dropout = nn.Dropout(p["dropout"])
        self.fc_prediction = self.head(config.hidden_size, self.num_labels)
        self.fc = nn.Linear(self.num_labels, self.num_labels)

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        _, pooled = self.encode(fields_dict, self.model_params["text_field"])  # [B, H]
        logits = self.fc(self.fc_prediction(self.dropout(pooled))).astype("float32")  # [B, C]
        return classification_outputs(logits, fields_dict, self.model_params["label_field"], phase)

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        return classifier_metrics(outputs, meta_info.get("batch_sizes"), self.num_labels, macro_f1=False)


@RegisterSet.models.register("ErnieMatchingSiamesePointwise")
class ErnieMatchingSiamesePointwise(ErnieTaskModel):
    """ERNIE-kit's ``ErnieMatchingSiamesePointwise``: each text encoded on its own by the shared
    encoder, the two pooled vectors concatenated -> tanh layer -> linear -> softmax."""

    config_schema = {**ErnieTaskModel.config_schema,
                     "text_a_field": Key(str, "text_a"),
                     "text_b_field": Key(str, "text_b"),
                     "label_field": Key(str, "label"),
                     "num_labels": Key(int, 0, minimum=0, doc="0: from the label field"),
                     "hidden_size": Key(int, 0, minimum=0, maximum=MAX_WIDTH,
                                        doc="the tanh layer's width (0: the encoder's)")}

    def structure(self) -> None:
        p = self.model_params
        config = self.build_encoder()
        for key in ("text_a_field", "text_b_field"):
            self.ernie_field(p[key], f"model.{key}")
        self.num_labels = pair_labels(self, p["label_field"], p["num_labels"])
        hidden = p["hidden_size"] or config.hidden_size
        self.concat_fc = self.head(2 * config.hidden_size, hidden)
        self.output_layer = self.head(hidden, self.num_labels)

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        p = self.model_params
        u = self.encode(fields_dict, p["text_a_field"])[1]  # [B, H]
        v = self.encode(fields_dict, p["text_b_field"])[1]  # [B, H]
        hidden = paddle.tanh(self.concat_fc(paddle.concat([u, v], axis=-1)))  # [B, hidden]
        logits = self.output_layer(hidden).astype("float32")  # [B, C]
        return classification_outputs(logits, fields_dict, p["label_field"], phase)

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        return classifier_metrics(outputs, meta_info.get("batch_sizes"), self.num_labels, macro_f1=False)


@RegisterSet.models.register("ErnieMatchingSiamesePairwise")
class ErnieMatchingSiamesePairwise(PairwiseMatching, ErnieTaskModel):
    """ERNIE-kit's ``ErnieMatchingSiamesePairwise``: ``PairwiseMatching`` (margin loss on the
    cosines of query/positive and query/negative) over the shared encoder's pooled vectors, with
    dropout; ERNIE-kit's field names (``text_a`` query, ``text_b`` title, ``text_c`` negative
    title) and margin (0.2) are the defaults."""

    config_schema = {**ErnieTaskModel.config_schema,
                     **{k: v for k, v in PairwiseMatching.config_schema.items() if k != "encoder"},
                     "query_field": Key(str, "text_a"),
                     "pos_field": Key(str, "text_b", doc="training: the matching text"),
                     "neg_field": Key(str, "text_c", doc="training: the non-matching text"),
                     "title_field": Key(str, "text_b", doc="evaluation and prediction: the text to score"),
                     "margin": Key(float, 0.2, minimum=0.0),
                     "dropout": Key(float, 0.1, minimum=0.0, maximum=1.0)}

    def structure(self) -> None:
        p = self.model_params
        self.build_encoder()
        for key in ("query_field", "pos_field", "neg_field"):
            self.ernie_field(p[key], f"model.{key}")
        self.dropout = nn.Dropout(p["dropout"])

    def embed(self, fields: Dict[str, paddle.Tensor], name: str) -> paddle.Tensor:
        return self.dropout(self.encode(fields, name)[1])
