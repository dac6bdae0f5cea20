"""``ErnieFcIe``: ERNIE token states -> one sigmoid per label and token (ERNIE-kit's model)."""
from __future__ import annotations

from typing import Any, Dict, List, Set

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from wenxin.common.constants import InstanceName, Phase
from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import Key
from wenxin.metrics.spo import Triple, decode_triples, gold_triples, tidy_marks, triple_f1
from wenxin.models.ernie_task import ErnieTaskModel
from wenxin.models.modules import length_mask

TRIPLES = "triples"


@RegisterSet.models.register("ErnieFcIe")
class ErnieFcIe(ErnieTaskModel):
    """ERNIE-kit's ``ErnieFcIe``: a pretrained ERNIE/BERT encoder, dropout and a linear layer
    giving every word piece an independent probability per label of an ``IeSpoLabelFieldReader``
    label map, trained with binary cross-entropy. ERNIE-kit averaged the loss over padding too,
    so it depended on the batch's longest text; here it is the mean over the texts' pieces.

    Outputs: ``probs`` ``[B, T, N]``, ``predictions`` (the labels over ``threshold``, 0/1); with
    gold labels ``loss``, ``labels`` (the gold triples ``[B, K, 5]``) and ``seq_lens``. Metrics:
    triple-level precision, recall and F1 of the decoded triples (``wenxin.metrics.spo``), as
    inference reports them."""

    config_schema = {**ErnieTaskModel.config_schema,
                     "text_field": Key(str, "text_a", doc="name of the ErnieIeTextFieldReader field"),
                     "label_field": Key(str, "label", doc="name of the IeSpoLabelFieldReader field"),
                     "num_labels": Key(int, 0, minimum=0, doc="0: from the label map"),
                     "dropout": Key(float, 0.1, minimum=0.0, maximum=1.0, doc="on the token states"),
                     "threshold": Key(float, 0.5, minimum=0.0, maximum=1.0,
                                      doc="probability from which a piece carries a label")}
    prediction_format = "spo"

    def structure(self) -> None:
        p = self.model_params
        config = self.build_encoder()
        info = self.ernie_field(p["text_field"], "model.text_field")
        if not info.get("ie_text"):
            raise ConfigError(f"model.text_field: '{p['text_field']}' must be an ErnieIeTextFieldReader field "
                              f"(extraction cuts words as ERNIE-kit's IEReader does)")
        labels = self.data_info.get(p["label_field"], {}).get("labels") or []
        if not labels:
            raise ConfigError(f"model.label_field: '{p['label_field']}' is not an IeSpoLabelFieldReader field "
                              f"of the train_reader")
        if p["num_labels"] and p["num_labels"] != len(labels):
            raise ConfigError(f"model.num_labels: {p['num_labels']}, but the label map of '{p['label_field']}' "
                              f"has {len(labels)} labels")
        self.labels: List[str] = list(labels)
        self.dropout = nn.Dropout(p["dropout"])
        self.fc_prediction = self.head(config.hidden_size, len(labels))

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        p = self.model_params
        states, _ = self.encode(fields_dict, p["text_field"])  # [B, T, H]
        logits = self.fc_prediction(self.dropout(states)).astype("float32")  # [B, T, N]
        probs = F.sigmoid(logits)
        outputs = {InstanceName.PROBS: probs,  # [B, T, N], and the marks over the threshold:
                   InstanceName.PREDICTIONS: (probs >= p["threshold"]).astype("int64")}
        if phase == Phase.PREDICT or p["label_field"] not in fields_dict:
            return outputs
        ids = fields_dict[p["text_field"]]  # [B, T]
        seq_lens = fields_dict[f"{p['text_field']}_{InstanceName.SEQ_LENS}"]  # [B]
        marks = fields_dict[p["label_field"]]  # [B, T, N]
        per_piece = F.binary_cross_entropy_with_logits(logits, marks, reduction="none").mean(axis=-1)  # [B, T]
        weights = length_mask(seq_lens, paddle.shape(ids)[1], "float32")  # [B, T]
        outputs[InstanceName.LOSS] = (per_piece * weights).sum() / paddle.clip(weights.sum(), min=1.0)
        outputs[InstanceName.LABELS] = fields_dict[f"{p['label_field']}_{TRIPLES}"]  # [B, K, 5]
        outputs[InstanceName.SEQ_LENS] = seq_lens
        return outputs

    @staticmethod
    def predicted_triples(marks: np.ndarray, probs: np.ndarray, length: int) -> Set[Triple]:
        """The triples decoded from one text's ``[T, N]`` marks and probabilities, in piece positions."""
        tidy = tidy_marks(marks[:length], probs[:length])[1:length - 1]
        return set(decode_triples(tidy, range(len(tidy))))

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        lengths = outputs[InstanceName.SEQ_LENS]
        predicted = [self.predicted_triples(m, p, int(n)) for m, p, n in
                     zip(outputs[InstanceName.PREDICTIONS], outputs[InstanceName.PROBS], lengths)]
        metrics = triple_f1([gold_triples(rows) for rows in outputs[InstanceName.LABELS]], predicted)
        if InstanceName.LOSS in outputs:
            metrics["loss"] = float(np.average(outputs[InstanceName.LOSS], weights=meta_info["batch_sizes"]))
        return metrics
