"""``ErnieMaskedLM``: the transformer encoder with a masked-language-model head."""
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
from wenxin.models.base_model import BaseModel
from wenxin.models.encoders import text_field_info
from wenxin.models.modules import length_mask
from wenxin.models.transformer import TRANSFORMER_SCHEMA, TransformerEncoder

IGNORED = -100  # label of the positions that are not predicted


@RegisterSet.models.register("ErnieMaskedLM")
class ErnieMaskedLM(BaseModel):
    """Masks ``mask_prob`` of the real tokens (BERT's 80/10/10: ``[MASK]``, a random token, kept)
    and predicts them with a head tied to the word embeddings.

    Masking happens inside the model with Paddle's RNG, so every epoch sees new masks, in both
    modes, and a resumed run continues the same stream. The encoder's parameters are named
    ``ernie.*``; fine-tuning loads them with ``prefix_map``. Predicting (and the exported model)
    returns the pooled sentence vector ``pooled`` ``[B, H]``."""

    config_schema = {
        "text_field": Key(str, "text_a"),
        "encoder": Key(dict, {}, children=TRANSFORMER_SCHEMA),
        "mask_token": Key(str, "[MASK]", doc="must be in the vocab (the field's special_tokens)"),
        "mask_prob": Key(float, 0.15, minimum=0.01, maximum=0.9),
    }
    prediction_format = "raw"

    def structure(self) -> None:
        p = self.model_params
        self.text_field = p["text_field"]
        info = text_field_info(self.data_info, self.text_field, "model.text_field")
        self.mask_id = info.get("token_ids", {}).get(p["mask_token"])
        if self.mask_id is None:
            raise ConfigError(f"model.mask_token: '{p['mask_token']}' is not in the vocab of '{self.text_field}'; "
                              f"add \"special_tokens\": [\"{p['mask_token']}\"] to the field")
        self.vocab_size = info["vocab_size"]
        self.num_special = max(info.get("num_special", 0), self.mask_id + 1)  # never drawn as random tokens
        hidden = p["encoder"]["hidden_size"]
        self.ernie = TransformerEncoder(self.vocab_size, info["padding_id"], p["encoder"])
        self.mlm_transform = nn.Linear(hidden, hidden)
        self.mlm_norm = nn.LayerNorm(hidden)
        self.mlm_bias = self.create_parameter([self.vocab_size], is_bias=True)

    def _mask(self, ids: paddle.Tensor, seq_lens: paddle.Tensor):  # noqa: ANN202
        """-> (masked ids ``[B, T]``, labels ``[B, T]`` with IGNORED where nothing is predicted)."""
        real = length_mask(seq_lens, paddle.shape(ids)[1], "float32")  # [B, T]
        draw = paddle.rand(paddle.shape(ids))  # [B, T] one draw decides chosen / how replaced
        rate = self.model_params["mask_prob"]
        chosen = (draw < rate).astype("float32") * real * (ids >= self.num_special).astype("float32")
        labels = paddle.where(chosen > 0, ids, paddle.full_like(ids, IGNORED))
        to_mask = (draw < rate * 0.8).astype("int64") * chosen.astype("int64")
        to_random = ((draw >= rate * 0.8) & (draw < rate * 0.9)).astype("int64") * chosen.astype("int64")
        random_ids = paddle.randint(self.num_special, self.vocab_size, paddle.shape(ids), dtype="int64")
        masked = ids * (1 - to_mask - to_random) + self.mask_id * to_mask + random_ids * to_random
        return masked, labels

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        ids = fields_dict[self.text_field]  # [B, T]
        seq_lens = fields_dict[f"{self.text_field}_{InstanceName.SEQ_LENS}"]
        if phase == Phase.PREDICT:
            return {"pooled": self.ernie(ids, seq_lens)[1]}
        masked, labels = self._mask(ids, seq_lens)
        states, _ = self.ernie(masked, seq_lens)  # [B, T, H]
        # predict only the chosen positions: one [K, H] x [H, V] product instead of [B*T, H] x [H, V]
        flat_labels = labels.reshape([-1])  # [B*T]
        chosen = paddle.nonzero(flat_labels != IGNORED).reshape([-1])  # [K]
        picked = paddle.gather(states.reshape([-1, states.shape[-1]]), chosen)  # [K, H]
        targets = paddle.gather(flat_labels, chosen)  # [K]
        hidden = self.mlm_norm(F.gelu(self.mlm_transform(picked)))
        embeddings = self.ernie.embeddings.word_embeddings.weight  # [V, H]
        logits = paddle.matmul(hidden, embeddings, transpose_y=True) + self.mlm_bias  # [K, V]
        count = paddle.shape(targets)[0].astype("float32")  # K, the masked positions
        token_loss = F.cross_entropy(logits.astype("float32"), targets.unsqueeze(-1), reduction="none")  # [K, 1]
        loss = token_loss.sum() / paddle.clip(count, min=1.0)
        correct = (paddle.argmax(logits, axis=-1) == targets).astype("float32").sum()
        return {InstanceName.LOSS: loss, "masked_correct": correct, "masked_count": count}

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        counts = outputs["masked_count"]
        loss = float(np.sum(outputs[InstanceName.LOSS] * counts) / max(float(np.sum(counts)), 1.0))
        return {"mlm_acc": float(np.sum(outputs["masked_correct"]) / max(float(np.sum(counts)), 1.0)),
                "loss": loss, "ppl": float(np.exp(min(loss, 50.0)))}
