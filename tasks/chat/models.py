"""Chat models on ERNIE 4.5 dense decoders: ``Ernie45SFT`` (supervised fine-tuning) and
``Ernie45DPO`` (direct preference optimization)."""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, Mapping, Optional, Set, Tuple

import numpy as np
import paddle
import paddle.nn.functional as F

from wenxin.common.constants import InstanceName
from wenxin.data.field_reader import TensorSpec
from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import REQUIRED, Key, path_key
from wenxin.data.chat_fields import IGNORED
from wenxin.models.base_model import BaseModel
from wenxin.models.decoding import (MAX_BEAM_SIZE, MAX_LENGTH_PENALTY, MAX_SEED, MAX_TEMPERATURE, MAX_TOP_K,
                                    MIN_TEMPERATURE, DecodeSettings, PromptSource)
from wenxin.models.advance_pair import StepRows, advance_pair as pair_step
from wenxin.models.advance_step import ADVANCE, NEW_CACHE, PAIR, SECOND, layer_cache_names
from wenxin.models.ernie45 import (LINEAR_WEIGHTS, Ernie45Config, Ernie45Head, Ernie45Model, advance_step,
                                   generation_defaults, paddle_layout_weights, sized_layout)
from wenxin.models.ernie45_export import pt_layout_weights, write_pt_folder
from wenxin.models.ernie45_router_loss import RouterLossWeights, with_router_loss
from wenxin.models.held_dtype import BFLOAT16, FLOAT32, WEIGHT_DTYPES, WeightDtype, computed

from .preference import PREFERENCE_LOSSES
from wenxin.models.lora import (MAX_LORA_RANK, LoRASettings, adapter_parameter_names, adapters_disabled, apply_lora,
                                merged_weights)

GENERATED = "generated"  # the exported model's output: each prompt's answer ids [B, max_new_tokens], -1 after the end
GENERATION: Dict[str, Key] = {
    "strategy": Key((str, type(None)), None, choices=["greedy", "beam", "sample", None],
                    doc="null: sample where the folder's generation_config.json says do_sample, else greedy"),
    "max_new_tokens": Key(int, 128, minimum=1, doc="the longest answer, in tokens"),
    "temperature": Key((float, type(None)), None, minimum=MIN_TEMPERATURE, maximum=MAX_TEMPERATURE,
                       doc="sampling (null: the folder's, else 1.0)"),
    "top_p": Key((float, type(None)), None, minimum=1e-6, maximum=1.0, doc="sampling (null: the folder's, else 1.0)"),
    "top_k": Key((int, type(None)), None, minimum=0, maximum=MAX_TOP_K,
                 doc="sampling (null: the folder's, else 0, every token)"),
    "beam_size": Key(int, 4, minimum=1, maximum=MAX_BEAM_SIZE),
    "length_penalty": Key(float, 1.0, minimum=0.0, maximum=MAX_LENGTH_PENALTY, doc="beam search: GNMT's alpha"),
    "seed": Key(int, 0, minimum=0, maximum=MAX_SEED, doc="sampling's seed"),
}

LORA: Dict[str, Key] = {
    "rank": Key(int, 8, minimum=1, maximum=MAX_LORA_RANK,
                doc="the adapters' rank r (at most the smallest adapted layer's in or out size)"),
    "alpha": Key(float, 16.0, minimum=0.0, doc="the update is scaled by alpha / rank"),
    "dropout": Key(float, 0.0, minimum=0.0, maximum=0.9, doc="dropout on the adapters' input while training"),
    "target_modules": Key(list, list(LINEAR_WEIGHTS), items=Key(str, non_empty=True), non_empty=True,
                          doc="the linear layers that get adapters, by name: q_proj, k_proj, v_proj, o_proj, "
                              "gate_proj, up_proj, down_proj"),
    "experts": Key(str, "all", choices=["all", "shared", "none"],
                   doc="a mixture-of-experts model: whose gate_proj, up_proj and down_proj of target_modules get "
                       "adapters: every routed and shared expert's (all), the shared experts' (shared), or neither "
                       "(none: the dense layers' only)"),
}
# ERNIEKit's names for the router's training losses of a mixture-of-experts model, its defaults
ROUTER_LOSSES: Dict[str, Tuple[str, float, str]] = {
    "moe_aux_loss_lambda": ("aux", RouterLossWeights.aux, "load balancing"),
    "moe_z_loss_lambda": ("z", RouterLossWeights.z, "z-loss: the router's logits kept small"),
    "moe_orthogonal_loss_lambda": ("orthogonal", RouterLossWeights.orthogonal,
                                   "orthogonality of the router's expert rows"),
}
DECODER_KEYS = {
    "model_dir": path_key(REQUIRED, non_empty=True,
                     doc="the ERNIE 4.5 folder: config.json, safetensors weights, the tokenizer's files"),
    "load_weights": Key(bool, True, doc="start from the folder's weights (false: its architecture at random "
                                        "initialization)"),
    "lora": Key((dict, type(None)), None, children=LORA,
                doc="train LoRA adapters on the chosen linear layers, the decoder frozen; checkpoints hold only "
                    "the adapters, and exports merge them (null: full fine-tuning)"),
    **{key: Key((float, type(None)), None, minimum=0.0,
                doc=f"a mixture-of-experts model: the weight of the router's {what} loss, added to the gradient "
                    f"(the loss reported is the language model's; null: {default}, ERNIEKit's default)")
       for key, (_, default, what) in ROUTER_LOSSES.items()},
    "weight_dtype": Key(str, FLOAT32, choices=list(WEIGHT_DTYPES),
                        doc="what the decoder's frozen weights are held in: bfloat16 halves their memory (with lora "
                            "and in eager mode; the adapters, norms and router stay float32, and each layer computes "
                            "in float32 on its weights rounded to bfloat16)"),
    "generation": Key(dict, {}, children=GENERATION,
                      doc="how the exported model answers (wenxin predict, wenxin serve's /generate); a request "
                          "may change these within limits"),
}


class Ernie45ChatModel(BaseModel):
    """What the chat models share: an ERNIE 4.5 decoder read from ``model_dir`` under the
    checkpoint's parameter names (``model.layers.0.self_attn.q_proj.weight``, ``lm_head.weight``),
    its weights loaded by the trainer before training (``load_weights``), optional LoRA adapters
    (``lora``: the decoder frozen, checkpoints holding only the adapters), recompute, and the
    per-token log-probabilities of a field's answer tokens."""

    config_schema: Dict[str, Key] = dict(DECODER_KEYS)
    prediction_format = "chat"
    prediction_outputs = (GENERATED,)  # what the exported model's Predictor returns
    field_key = "chat_field"  # the model key naming the data field
    field_info_flag = "chat"  # what the field's info must say
    field_reader = "ChatFieldReader"

    def structure(self) -> None:
        p = self.model_params
        self.field = p[self.field_key]
        info = self.data_info.get(self.field) or {}
        if not info.get(self.field_info_flag):
            others = [name for name, i in self.data_info.items() if i.get(self.field_info_flag)]
            raise ConfigError(f"model.{self.field_key}: '{self.field}' is not a {self.field_reader} field of the "
                              f"train_reader (those: {', '.join(others) or 'none'})")
        try:
            self.config = Ernie45Config.from_folder(p["model_dir"])
        except ConfigError as e:
            raise ConfigError(f"model.model_dir: {e}") from None
        if info["vocab_size"] > self.config.vocab_size:
            raise ConfigError(f"model.model_dir: the tokenizer of '{self.field}' ({info['model_dir']}) has "
                              f"{info['vocab_size']} tokens, more than the model's vocab_size "
                              f"{self.config.vocab_size}: another model's tokenizer?")
        if info["max_seq_len"] > self.config.max_position_embeddings:
            raise ConfigError(f"dataset_reader: max_seq_len {info['max_seq_len']} of '{self.field}' is more "
                              f"than the model's max_position_embeddings {self.config.max_position_embeddings}")
        self.layout = sized_layout(p["model_dir"], self.config) if p["load_weights"] else None  # before building
        weight_dtype = self._weight_dtype()
        self.model = Ernie45Model(self.config, weight_dtype)
        self.model.set_router_loss_weights(self._router_loss_weights())
        self.lm_head = None if self.config.tie_word_embeddings else Ernie45Head(self.config, weight_dtype)
        lora = p["lora"]
        self.adapters: Optional[Set[str]] = None
        if lora is not None:
            apply_lora(self.model, LoRASettings(lora["rank"], lora["alpha"], lora["dropout"], lora["target_modules"],
                                                lora["experts"]))
            if self.lm_head is not None:
                self.lm_head.weight.stop_gradient = True
                self.lm_head.weight.trainable = False
            self.adapters = adapter_parameter_names(self)
        self.special_ids: Dict[str, int] = dict(info["special_ids"])
        self.stop_ids = sorted(set(info["stop_ids"]))
        self.max_new_tokens_limit = self.config.max_position_embeddings - info["max_seq_len"]

    def _weight_dtype(self) -> WeightDtype:
        """``weight_dtype``, where it can hold: bfloat16 holds frozen weights, so it needs LoRA,
        and eager mode."""
        dtype: WeightDtype = self.model_params["weight_dtype"]  # the schema's choices
        if dtype == BFLOAT16 and self.model_params["lora"] is None:
            raise ConfigError("model.weight_dtype: bfloat16 holds the frozen weights of a LoRA fine-tuning; set "
                              "model.lora (for mixed precision in full fine-tuning: trainer.precision)")
        if dtype == BFLOAT16 and not self.model_params.get("is_dygraph", 1):
            raise ConfigError("model.weight_dtype: bfloat16 weights train in eager mode (model.is_dygraph 1)")
        return dtype

    def _router_loss_weights(self) -> Optional[RouterLossWeights]:
        """The task file's router-loss weights over ERNIEKit's defaults; set on a dense model, an error."""
        given = {key: self.model_params[key] for key in ROUTER_LOSSES if self.model_params[key] is not None}
        if not self.config.moe_num_experts:
            if given:
                raise ConfigError(f"model.{next(iter(given))}: the model in model_dir is dense (its config.json has "
                                  f"no moe_num_experts); router losses are a mixture-of-experts model's")
            return None
        return RouterLossWeights(**{field: given.get(key, default)
                                    for key, (field, default, _) in ROUTER_LOSSES.items()})

    def enable_recompute(self, key: str) -> None:
        self.model.recompute = True

    def checkpointed_names(self) -> Optional[Set[str]]:
        return self.adapters  # LoRA: the adapters alone (the decoder reloads from model_dir)

    def output_weight(self) -> paddle.Tensor:
        """``[vocab, hidden]``: the token embedding where the two are tied."""
        return computed(self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight)

    def draws_initial_weights(self) -> bool:
        return not self.model_params["load_weights"]  # the folder's weights; LoRA's adapters are NumPy's

    def own_pretrained_weights(self) -> Optional[Tuple[str, Dict[str, Any]]]:
        if not self.model_params["load_weights"]:
            return None
        return self.model_params["model_dir"], paddle_layout_weights(self.model_params["model_dir"], self.config,
                                                                     self.layout)

    def export_state(self, state: Any) -> Dict[str, Any]:
        return merged_weights(self, state)  # LoRA: the adapters merged (nothing without them)

    def write_pretrained_folder(self, folder: str, state: Mapping[str, Any], dtype: str,
                                max_shard_bytes: int) -> List[str]:
        """The decoder, its adapters merged, as an ERNIE 4.5 ``-PT`` folder (``ernie45_export``)
        beside ``model_dir``'s config and tokenizer."""
        merged = {**state, **self.export_state(state)}
        decoder = {name: value for name, value in merged.items()
                   if name.startswith("model.") or (name == "lm_head.weight" and self.lm_head is not None)}
        return write_pt_folder(folder, pt_layout_weights(decoder), self.model_params["model_dir"], dtype,
                               max_shard_bytes)

    # ---- step functions: what decoding runs (wenxin.models.decoding) ----------------------------
    def step_specs(self) -> Dict[str, Tuple[List[TensorSpec], List[str]]]:
        """The step functions: ``advance`` (``wenxin.models.advance_step``: prefill, a prompt's
        next chunk and a decoding step in one program, so an export and a service hold the
        weights once, reading each layer's cache where the caller keeps it), and ``advance_pair``
        (``wenxin.models.advance_pair``: two groups of rows in one step, a turn's decoding rows and
        prompt parts; its second group's inputs are ``advance``'s named ``second_...``): their
        inputs and output names. The export writes their parameters once (the same weights)."""
        c = self.config
        layers = [TensorSpec(name, [-1, c.num_key_value_heads, -1, c.head_dim], "float32")
                  for name in layer_cache_names(c.num_hidden_layers)]  # [R, KV, N, D] each
        group = [TensorSpec("tokens", [-1, -1], "int64"), TensorSpec("positions", [-1, -1], "int64"),
                 TensorSpec("visible", [-1, -1, -1], "float32"), *layers]
        second = [TensorSpec(SECOND + spec.name, spec.shape, spec.dtype) for spec in group]
        return {ADVANCE: (group, ["logits", NEW_CACHE]),
                PAIR: ([*group, *second], ["logits", NEW_CACHE, SECOND + NEW_CACHE])}

    def advance(self, tokens: paddle.Tensor, positions: paddle.Tensor, visible: paddle.Tensor,
                *past: paddle.Tensor) -> Tuple[paddle.Tensor, paddle.Tensor]:
        """New tokens ``[R, T]`` at ``positions`` ``[R, T]`` after each layer's cached keys and
        values (``past``: keys, values, keys, ... ``[R, KV, N, D]``), seeing the columns
        ``visible`` ``[R, T, N + T]`` marks -> each row's next logits ``[R, V]`` and the new
        tokens' keys and values ``[layers, 2, R, KV, T, D]``. Adapters are bypassed: the step
        functions run on merged weights (``export_state``)."""
        pairs = [(past[i], past[i + 1]) for i in range(0, len(past), 2)]
        with adapters_disabled(self.model):
            return advance_step(self.model, self.output_weight(), tokens, positions, visible, pairs)

    def advance_pair(self, *inputs: paddle.Tensor) -> Tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
        """Two groups of rows in one step, each group's inputs as ``advance``'s (the first's, then
        the second's) -> both groups' logits ``[Ra + Rb, V]`` and each group's new keys and values."""
        half = len(inputs) // 2
        groups = [StepRows(g[0], g[1], g[2], [(g[i], g[i + 1]) for i in range(3, len(g), 2)])
                  for g in (inputs[:half], inputs[half:])]
        with adapters_disabled(self.model):
            return pair_step(self.model, self.output_weight(), *groups)

    def decode_settings(self) -> DecodeSettings:
        """The task file's ``generation`` settings over the folder's ``generation_config.json``;
        answers end at the tokenizer's end of turn and end of text and the folder's end tokens."""
        g = self.model_params["generation"]
        folder = generation_defaults(self.model_params["model_dir"])
        chosen = {key: g[key] if g[key] is not None else folder.get(key, default)
                  for key, default in (("strategy", "greedy"), ("temperature", 1.0), ("top_p", 1.0), ("top_k", 0))}
        return DecodeSettings(strategy=chosen["strategy"], max_new_tokens=g["max_new_tokens"],
                              eos_id=self.special_ids["eos_token"], beam_size=g["beam_size"],
                              length_penalty=g["length_penalty"], temperature=chosen["temperature"],
                              top_k=chosen["top_k"], top_p=chosen["top_p"], seed=g["seed"],
                              stop_ids=tuple(sorted(set(self.stop_ids) | set(folder.get("stop_ids", [])))))

    def prompt_source(self) -> PromptSource:
        """A prompt is the chat field's ids up to its row's length."""
        return PromptSource({"ids": self.field}, f"{self.field}_lengths")

    def answer_logits(self, fields_dict: Dict[str, paddle.Tensor], decoder: Optional[Ernie45Model] = None,
                      output_weight: Optional[paddle.Tensor] = None
                      ) -> Tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor, Optional[paddle.Tensor]]:
        """``(logits [K, V], targets [K], positions [K], router loss)`` at the K answer positions of
        the field's rows (``positions`` index the flattened ``[R*T]`` rows), by ``decoder`` (the
        model's own by default); the router loss is the MoE layers' while training with one, else
        None. Only the answer positions go through the output layer: ``[K, H] x [H, V]`` instead of
        ``[R*T, H] x [H, V]``."""
        name = self.field
        decoder = decoder or self.model
        states, router = decoder.decode(fields_dict[name], positions=fields_dict[f"{name}_positions"],
                                        segments=fields_dict[f"{name}_segments"])  # [R, T, H]
        labels = fields_dict[f"{name}_labels"].reshape([-1])  # [R*T]: the next answer token, or IGNORED
        chosen = paddle.nonzero(labels != IGNORED).reshape([-1])  # [K]
        picked = paddle.gather(states.reshape([-1, self.config.hidden_size]), chosen)  # [K, H]
        targets = paddle.gather(labels, chosen)  # [K]
        weight = self.output_weight() if output_weight is None else output_weight
        logits = paddle.matmul(picked, weight, transpose_y=True).astype("float32")  # [K, V]
        return logits, targets, chosen, router


@RegisterSet.models.register("Ernie45SFT")
class Ernie45SFT(Ernie45ChatModel):
    """An ERNIE 4.5 decoder fine-tuned on the conversations of a ``ChatFieldReader`` field:
    cross-entropy of each answer token given the tokens before it in its conversation (packed rows
    attend within a conversation only), averaged over the answer tokens of the batch. See
    ``Ernie45ChatModel`` for the decoder, its weights and LoRA.

    Metrics: ``loss`` and ``ppl`` per answer token, and ``token_acc``, the share of answer tokens
    the model ranks first."""

    config_schema = {**DECODER_KEYS,
                     "chat_field": Key(str, "conversation", doc="the ChatFieldReader field of the train_reader")}

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        logits, targets, _, router = self.answer_logits(fields_dict)
        count = paddle.shape(targets)[0].astype("float32")
        token_loss = F.cross_entropy(logits, targets.unsqueeze(-1), reduction="none")  # [K, 1]
        loss = token_loss.sum() / paddle.clip(count, min=1.0)
        correct = (paddle.argmax(logits, axis=-1) == targets).astype("float32").sum()
        return {InstanceName.LOSS: with_router_loss(loss, router), "answer_correct": correct, "answer_tokens": count,
                **router_loss_output(router)}

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        counts = np.asarray(outputs["answer_tokens"], dtype=np.float64)
        total = max(float(np.sum(counts)), 1.0)
        loss = float(np.sum(np.asarray(outputs[InstanceName.LOSS]) * counts) / total)
        return {"loss": loss, "ppl": float(np.exp(min(loss, 50.0))),
                "token_acc": float(np.sum(outputs["answer_correct"]) / total), **router_loss_metric(outputs)}


@RegisterSet.models.register("Ernie45DPO")
class Ernie45DPO(Ernie45ChatModel):
    """Preference optimization of an ERNIE 4.5 decoder on the pairs of a ``PreferenceFieldReader``
    field (row ``2i`` chosen, ``2i + 1`` rejected): DPO, SimPO or ORPO (``loss_type``; the losses
    are in ``preference``).

    With ``log p(y|x)`` the sum of the answer tokens' log-probabilities, DPO's loss of a pair is
    ``-log sigmoid(beta * ((log p(yc|x) - log q(yc|x)) - (log p(yr|x) - log q(yr|x))))`` for the
    policy ``p`` being trained and the frozen reference ``q``, averaged over the batch's pairs.
    The reference is the model as loaded from ``model_dir``: under LoRA the same decoder with its
    adapters bypassed; in full fine-tuning a frozen copy (``reference.*``, never checkpointed: it
    loads from ``model_dir`` again on resume). SimPO and ORPO need no reference.

    Metrics: ``loss``, ``reward_acc`` (the share of pairs whose margin, the value inside the
    log-sigmoid, is positive) and ``reward_margin`` (its mean)."""

    config_schema = {**DECODER_KEYS,
                     "preference_field": Key(str, "pair", doc="the PreferenceFieldReader field of the train_reader"),
                     "loss_type": Key(str, "sigmoid", choices=sorted(PREFERENCE_LOSSES),
                                      doc="sigmoid (DPO), simpo (SimPO) or orpo (ORPO; or, as PaddleFormers names "
                                          "it), as ERNIEKit names them; simpo and orpo need no reference model"),
                     "beta": Key(float, 0.1, minimum=1e-6,
                                 doc="DPO: how far the policy may move from the reference; SimPO: the scale of the "
                                     "answers' mean log-probabilities"),
                     "simpo_gamma": Key(float, 0.5, minimum=0.0,
                                        doc="SimPO: the margin the chosen answer must win by"),
                     "pref_loss_ratio": Key(float, 1.0, minimum=0.0,
                                            doc="the preference loss's weight (ORPO's lambda)"),
                     "sft_loss_ratio": Key((float, type(None)), None, minimum=0.0,
                                           doc="the weight of the chosen answers' token-mean negative log-likelihood "
                                               "added to the loss (null: 1 for orpo, as ERNIEKit, else 0)")}
    field_key = "preference_field"
    field_info_flag = "preference"
    field_reader = "PreferenceFieldReader"

    def structure(self) -> None:
        super().structure()
        self.preference = PREFERENCE_LOSSES[self.model_params["loss_type"]]
        sft = self.model_params["sft_loss_ratio"]
        self.sft_loss_ratio = self.preference.sft_loss_ratio if sft is None else sft
        self.reference: Optional[Ernie45Model] = None
        self.reference_head: Optional[Ernie45Head] = None
        if self.adapters is None and not self.preference.reference_free:  # full fine-tuning: a frozen copy
            self.reference = Ernie45Model(self.config)
            self.reference_head = None if self.config.tie_word_embeddings else Ernie45Head(self.config)
            for name, parameter in self.named_parameters():
                if name.startswith("reference"):
                    parameter.stop_gradient = True
                    parameter.trainable = False

    def own_pretrained_weights(self) -> Optional[Tuple[str, Dict[str, Any]]]:
        own = super().own_pretrained_weights()
        if own is None or self.reference is None:
            return own
        source, weights = own
        copies = {f"reference.{name[len('model.'):]}": value for name, value in weights.items()
                  if name.startswith("model.")}
        if "lm_head.weight" in weights and self.reference_head is not None:
            copies["reference_head.weight"] = weights["lm_head.weight"]
        return source, {**weights, **copies}

    def checkpointed_names(self) -> Optional[Set[str]]:
        if self.adapters is not None:
            return self.adapters
        return {name for name, _ in self.named_parameters() if not name.startswith("reference")}

    @contextlib.contextmanager
    def _as_reference(self) -> Iterator[Tuple[Ernie45Model, paddle.Tensor]]:
        """The reference decoder and output weight (under LoRA: the adapters bypassed inside)."""
        if self.reference is None:
            with adapters_disabled(self.model):
                yield self.model, self.output_weight()
        else:
            head = computed(self.reference.embed_tokens.weight if self.reference_head is None
                            else self.reference_head.weight)
            yield self.reference, head

    def sequence_log_probs(self, fields_dict: Dict[str, paddle.Tensor], decoder: Ernie45Model,
                           output_weight: paddle.Tensor) -> Tuple[paddle.Tensor, Optional[paddle.Tensor]]:
        """``[R]``: each row's sum of its answer tokens' log-probabilities; and the router loss
        (``answer_logits``)."""
        logits, targets, positions, router = self.answer_logits(fields_dict, decoder, output_weight)
        token_log_probs = -F.cross_entropy(logits, targets.unsqueeze(-1), reduction="none").reshape([-1])  # [K]
        shape = paddle.shape(fields_dict[f"{self.field}_labels"])  # [R, T]
        flat = paddle.zeros([shape[0] * shape[1]], dtype="float32")
        flat = paddle.scatter(flat, positions, token_log_probs, overwrite=True)  # [R*T], 0 off the answers
        return flat.reshape([-1, shape[1]]).sum(axis=1), router  # [R]

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        sums, router = self.sequence_log_probs(fields_dict, self.model, self.output_weight())
        sums = sums.reshape([-1, 2])  # [B, 2]
        tokens = (fields_dict[f"{self.field}_labels"] != IGNORED).astype("float32").sum(axis=1).reshape([-1, 2])
        policy = sums / tokens if self.preference.per_token else sums  # [B, 2]: chosen, rejected
        if self.preference.reference_free:
            reference = paddle.zeros_like(policy)
        else:
            with self._as_reference() as (decoder, weight):
                reference = self.sequence_log_probs(fields_dict, decoder, weight)[0].reshape([-1, 2]).detach()
        margin = self.preference.margin(policy[:, 0], policy[:, 1], reference[:, 0], reference[:, 1],
                                        self.model_params)  # [B]
        loss = -F.log_sigmoid(margin).mean()
        if self.model_params["pref_loss_ratio"] != 1.0:
            loss = loss * self.model_params["pref_loss_ratio"]
        if self.sft_loss_ratio:  # the chosen answers' negative log-likelihood, a mean over their tokens
            loss = loss + self.sft_loss_ratio * (-sums[:, 0].sum() / tokens[:, 0].sum())
        pairs = paddle.shape(margin)[0].astype("float32")
        return {InstanceName.LOSS: with_router_loss(loss, router), "pairs": pairs,
                "reward_wins": (margin > 0).astype("float32").sum(), "margin_sum": margin.sum(),
                **router_loss_output(router)}

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        pairs = np.asarray(outputs["pairs"], dtype=np.float64)
        total = max(float(np.sum(pairs)), 1.0)
        return {"loss": float(np.sum(np.asarray(outputs[InstanceName.LOSS]) * pairs) / total),
                "reward_acc": float(np.sum(outputs["reward_wins"]) / total),
                "reward_margin": float(np.sum(outputs["margin_sum"]) / total), **router_loss_metric(outputs)}


ROUTER_LOSS = "router_loss"  # the MoE layers' router loss of a training batch (a metric)


def router_loss_output(router: Optional[paddle.Tensor]) -> Dict[str, paddle.Tensor]:
    """The forward's output of the router loss, where there is one."""
    return {} if router is None else {ROUTER_LOSS: router.detach()}


def router_loss_metric(outputs: Dict[str, Any]) -> Dict[str, float]:
    """The batches' mean router loss, where the forward gave one."""
    return {} if ROUTER_LOSS not in outputs else {ROUTER_LOSS: float(np.mean(outputs[ROUTER_LOSS]))}
