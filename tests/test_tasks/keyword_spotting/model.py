"""A minimal model written against the public BaseModel API only."""
from typing import Any, Dict

import numpy as np
import paddle
import paddle.nn.functional as F

from wenxin.common.constants import InstanceName, Phase
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import Key
from wenxin.metrics.classification import accuracy
from wenxin.models.base_model import BaseModel
from wenxin.models.modules import BoWEncoder, TokenEmbedding


@RegisterSet.models.register("KeywordModel")
class KeywordModel(BaseModel):
    """Max-pooled character embeddings -> one logit per class."""

    config_schema = {"emb_dim": Key(int, 8, minimum=1)}

    def structure(self) -> None:
        info = self.data_info["text"]
        self.embedding = TokenEmbedding(info["vocab_size"], self.model_params["emb_dim"], info["padding_id"])
        self.encoder = BoWEncoder(self.model_params["emb_dim"], pooling="max")
        self.out = paddle.nn.Linear(self.model_params["emb_dim"], self.data_info["has_keyword"]["num_labels"])

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        logits = self.out(self.encoder(self.embedding(fields_dict["text"]), fields_dict["text_seq_lens"]))
        outputs = {InstanceName.PREDICTIONS: paddle.argmax(logits, axis=-1)}
        if phase != Phase.PREDICT:
            labels = fields_dict["has_keyword"]
            outputs[InstanceName.LOSS] = F.cross_entropy(logits, labels.reshape([-1, 1])).mean()
            outputs[InstanceName.LABELS] = labels
        return outputs

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        return {"acc": accuracy(outputs["labels"], outputs["predictions"]),
                "examples": float(np.sum(meta_info["batch_sizes"]))}
