"""Output dicts that several task models share."""
from __future__ import annotations

from typing import Dict

import wenxin.common.paddle_required  # noqa: F401 (before Paddle: one clear line if it cannot run wenxin)
import paddle
import paddle.nn.functional as F

from wenxin.common.constants import InstanceName, Phase


def classification_outputs(logits: paddle.Tensor, fields_dict: Dict[str, paddle.Tensor], label_field: str,
                           phase: str) -> Dict[str, paddle.Tensor]:
    """Probabilities, predictions and (with labels) the loss and labels of softmax ``logits``
    ``[B, C]`` (a text's class, or a pair's)."""
    probs = F.softmax(logits, axis=-1)
    outputs = {InstanceName.PROBS: probs, InstanceName.PREDICTIONS: paddle.argmax(probs, axis=-1)}
    if phase != Phase.PREDICT and label_field in fields_dict:
        labels = fields_dict[label_field]  # [B]
        outputs[InstanceName.LOSS] = F.cross_entropy(logits, labels.reshape([-1, 1])).mean()
        outputs[InstanceName.LABELS] = labels
    return outputs
