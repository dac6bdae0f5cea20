"""``MlpClassification``: a multi-layer perceptron over a FloatVectorFieldReader field."""
from __future__ import annotations

from typing import Any, Dict

import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from wenxin.common.constants import InstanceName, Phase
from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import MAX_WIDTH, Key
from wenxin.metrics.classification import classifier_metrics
from wenxin.models.base_model import BaseModel


@RegisterSet.models.register("MlpClassification")
class MlpClassification(BaseModel):
    """Features ``[B, D]`` -> ``len(hidden_sizes)`` ReLU layers with dropout -> softmax."""

    config_schema = {
        "feature_field": Key(str, "features"),
        "label_field": Key(str, "label"),
        "hidden_sizes": Key(list, [256, 256], items=Key(int, minimum=1, maximum=MAX_WIDTH)),
        "dropout": Key(float, 0.1, minimum=0.0, maximum=1.0),
    }

    def structure(self) -> None:
        p = self.model_params
        self.feature_field, self.label_field = p["feature_field"], p["label_field"]
        dim = self.data_info.get(self.feature_field, {}).get("dim", 0)
        if not dim:
            raise ConfigError(f"model.feature_field: '{self.feature_field}' is not a FloatVectorFieldReader field")
        self.num_labels = self.data_info.get(self.label_field, {}).get("num_labels", 0)
        if self.num_labels < 2:
            raise ConfigError(f"model.label_field: '{self.label_field}' has {self.num_labels} labels; need 2 or more")
        layers = []
        for width in p["hidden_sizes"]:
            layers += [nn.Linear(dim, width), nn.ReLU(), nn.Dropout(p["dropout"])]
            dim = width
        self.hidden = nn.Sequential(*layers)
        self.output_layer = nn.Linear(dim, self.num_labels)

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        logits = self.output_layer(self.hidden(fields_dict[self.feature_field])).astype("float32")  # [B, C]
        probs = F.softmax(logits, axis=-1)
        outputs = {InstanceName.PROBS: probs, InstanceName.PREDICTIONS: paddle.argmax(probs, axis=-1)}
        if phase != Phase.PREDICT and self.label_field in fields_dict:
            labels = fields_dict[self.label_field]
            outputs[InstanceName.LOSS] = F.cross_entropy(logits, labels.unsqueeze(-1)).mean()
            outputs[InstanceName.LABELS] = labels
        return outputs

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        return classifier_metrics(outputs, meta_info.get("batch_sizes"), self.num_labels, macro_f1=False)
