"""``Ernie45SFT``: supervised fine-tuning of an ERNIE 4.5 dense decoder on conversations."""
from __future__ import annotations

from typing import Any, Dict, Optional, Set, Tuple

import numpy as np
import paddle
import paddle.nn.functional as F

from wenxin.common.constants import InstanceName
from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import REQUIRED, Key
from wenxin.data.chat_fields import IGNORED
from wenxin.models.base_model import BaseModel
from wenxin.models.ernie45 import LINEAR_WEIGHTS, Ernie45Config, Ernie45Head, Ernie45Model, paddle_layout_weights
from wenxin.models.lora import LoRASettings, adapter_parameter_names, apply_lora

LORA: Dict[str, Key] = {
    "rank": Key(int, 8, minimum=1, doc="the adapters' rank r"),
    "alpha": Key(float, 16.0, minimum=0.0, doc="the update is scaled by alpha / rank"),
    "dropout": Key(float, 0.0, minimum=0.0, maximum=0.9, doc="dropout on the adapters' input while training"),
    "target_modules": Key(list, list(LINEAR_WEIGHTS), items=Key(str, non_empty=True),
                          doc="the linear layers that get adapters, by name: q_proj, k_proj, v_proj, o_proj, "
                              "gate_proj, up_proj, down_proj"),
}


@RegisterSet.models.register("Ernie45SFT")
class Ernie45SFT(BaseModel):
    """An ERNIE 4.5 decoder (``model_dir``: the folder users download) fine-tuned on the
    conversations of a ``ChatFieldReader`` field: cross-entropy of each answer token given the
    tokens before it in its conversation (packed rows attend within a conversation only), averaged
    over the answer tokens of the batch.

    The parameters are named as in the checkpoint (``model.layers.0.self_attn.q_proj.weight``,
    ``lm_head.weight``), and the folder's weights load before training (``load_weights``). With
    ``lora`` the decoder is frozen and adapters train on the chosen projections
    (``wenxin.models.lora``).
    Metrics: ``loss`` and ``ppl`` per answer token, and ``token_acc``, the share of answer tokens
    the model ranks first."""

    config_schema = {
        "model_dir": Key(str, REQUIRED, non_empty=True,
                         doc="the ERNIE 4.5 folder: config.json, safetensors weights, the tokenizer's files"),
        "chat_field": Key(str, "conversation", doc="the ChatFieldReader field of the train_reader"),
        "load_weights": Key(bool, True, doc="start from the folder's weights (false: its architecture at random "
                                            "initialization)"),
        "lora": Key((dict, type(None)), None, children=LORA,
                    doc="train LoRA adapters on the chosen linear layers, the decoder frozen; checkpoints hold only "
                        "the adapters, and exports merge them (null: full fine-tuning)"),
    }
    prediction_format = "raw"

    def structure(self) -> None:
        p = self.model_params
        self.chat_field = p["chat_field"]
        info = self.data_info.get(self.chat_field) or {}
        if not info.get("chat"):
            chats = [name for name, i in self.data_info.items() if i.get("chat")]
            raise ConfigError(f"model.chat_field: '{self.chat_field}' is not a ChatFieldReader field of the "
                              f"train_reader (those: {', '.join(chats) or 'none'})")
        try:
            self.config = Ernie45Config.from_folder(p["model_dir"])
        except ConfigError as e:
            raise ConfigError(f"model.model_dir: {e}") from None
        if info["vocab_size"] > self.config.vocab_size:
            raise ConfigError(f"model.model_dir: the tokenizer of '{self.chat_field}' ({info['model_dir']}) has "
                              f"{info['vocab_size']} tokens, more than the model's vocab_size "
                              f"{self.config.vocab_size}: another model's tokenizer?")
        if info["max_seq_len"] > self.config.max_position_embeddings:
            raise ConfigError(f"dataset_reader: max_seq_len {info['max_seq_len']} of '{self.chat_field}' is more "
                              f"than the model's max_position_embeddings {self.config.max_position_embeddings}")
        self.model = Ernie45Model(self.config)
        self.lm_head = None if self.config.tie_word_embeddings else Ernie45Head(self.config)
        lora = p["lora"]
        self.adapters: Optional[Set[str]] = None
        if lora is not None:
            apply_lora(self.model, LoRASettings(lora["rank"], lora["alpha"], lora["dropout"], lora["target_modules"]))
            if self.lm_head is not None:
                self.lm_head.weight.stop_gradient = True
            self.adapters = adapter_parameter_names(self)

    def enable_recompute(self, key: str) -> None:
        self.model.recompute = True

    def checkpointed_names(self) -> Optional[Set[str]]:
        return self.adapters  # LoRA: the adapters alone (the decoder reloads from model_dir)

    def output_weight(self) -> paddle.Tensor:
        """``[vocab, hidden]``: the token embedding where the two are tied."""
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def own_pretrained_weights(self) -> Optional[Tuple[str, Dict[str, Any]]]:
        if not self.model_params["load_weights"]:
            return None
        return self.model_params["model_dir"], paddle_layout_weights(self.model_params["model_dir"], self.config)

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        name = self.chat_field
        ids = fields_dict[name]  # [R, T]: packed conversations
        states = self.model(ids, positions=fields_dict[f"{name}_positions"],
                            segments=fields_dict[f"{name}_segments"])  # [R, T, H]
        labels = fields_dict[f"{name}_labels"].reshape([-1])  # [R*T]: the next answer token, or IGNORED
        # only the answer positions go through the output layer: [K, H] x [H, V] instead of [R*T, H] x [H, V]
        chosen = paddle.nonzero(labels != IGNORED).reshape([-1])  # [K]
        picked = paddle.gather(states.reshape([-1, self.config.hidden_size]), chosen)  # [K, H]
        targets = paddle.gather(labels, chosen)  # [K]
        logits = paddle.matmul(picked, self.output_weight(), transpose_y=True).astype("float32")  # [K, V]
        count = paddle.shape(targets)[0].astype("float32")
        token_loss = F.cross_entropy(logits, targets.unsqueeze(-1), reduction="none")  # [K, 1]
        loss = token_loss.sum() / paddle.clip(count, min=1.0)
        correct = (paddle.argmax(logits, axis=-1) == targets).astype("float32").sum()
        return {InstanceName.LOSS: loss, "answer_correct": correct, "answer_tokens": count}

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        counts = np.asarray(outputs["answer_tokens"], dtype=np.float64)
        total = max(float(np.sum(counts)), 1.0)
        loss = float(np.sum(np.asarray(outputs[InstanceName.LOSS]) * counts) / total)
        return {"loss": loss, "ppl": float(np.exp(min(loss, 50.0))),
                "token_acc": float(np.sum(outputs["answer_correct"]) / total)}
