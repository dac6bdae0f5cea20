"""``ErnieInfillingGeneration``: ERNIE-Gen's infilling sequence-to-sequence model (ERNIE-kit's)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import paddle
import paddle.nn.functional as F

from wenxin.common.constants import InstanceName, Phase
from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import Key
from wenxin.data.ernie_fields import POS_IDS, SENT_IDS
from wenxin.data.field_reader import TensorSpec
from wenxin.data.vocab import Vocab
from wenxin.data.wordpiece import detokenize
from wenxin.metrics.generation import generation_metrics
from wenxin.models.batch_decoding import generate_batch
from wenxin.models.decoding import (MAX_BEAM_SIZE, MAX_LENGTH_PENALTY, MAX_SEED, MAX_TEMPERATURE, MAX_TOP_K,
                                    MIN_TEMPERATURE, DecodeSettings, PromptSource, StepRunner)
from wenxin.models.ernie_gen import LmHead, infill_streams, run_two_streams, two_stream_bias
from wenxin.models.advance_step import NEW_CACHE, layer_cache_names
from wenxin.models.infill_step import INFILL, TARGET_START
from wenxin.models.ernie_task import ErnieTaskModel

from .scoring import GENERATED_UNKNOWN, REFERENCE_UNKNOWN, UNKNOWN, metric_tokens

GENERATED = "generated"  # output: the decoded token ids of each example [B, max_dec_len], -1 after the end
REFERENCES = "references"  # output: the gold targets' ids [B, T] ([CLS] t [SEP])


@RegisterSet.models.register("ErnieInfillingGeneration")
class ErnieInfillingGeneration(ErnieTaskModel):
    """ERNIE-Gen (``wenxin.models.ernie_gen``) on a pretrained ERNIE: the sources of an
    ``ErnieGenSourceFieldReader`` field generate the ``ErnieGenTargetFieldReader`` target.

    Training: cross-entropy of the query stream's predictions of the target tokens (with
    ``label_smooth``), the context's target tokens replaced by ``[MASK]`` with probability
    ``mask_prob``. Evaluation: the loss, and the targets decoded (``decoding``: greedy, beam
    search with ``beam_size`` and ``length_penalty``, or sampling) and scored by BLEU-4 and
    ROUGE-L against the gold targets. The step function ``infill`` is what decoding runs
    (``wenxin.models.infill_step``), in either graph mode and in the exported model."""

    config_schema = {**ErnieTaskModel.config_schema,
                     "source_field": Key(str, "src", doc="the first ErnieGenSourceFieldReader field"),
                     "target_field": Key(str, "tgt", doc="the ErnieGenTargetFieldReader field"),
                     "tgt_type_id": Key(int, 1, minimum=0, doc="the target's token type"),
                     "max_dec_len": Key(int, 32, minimum=1, doc="the most tokens a decoded target has"),
                     "label_smooth": Key(float, 0.0, minimum=0.0, maximum=1.0),
                     "mask_prob": Key(float, 0.5, minimum=0.0, maximum=1.0,
                                      doc="training: the chance a target token of the context becomes [MASK]"),
                     "weight_sharing": Key(bool, True, doc="the output layer is the word embedding's transpose"),
                     "continuous_position": Key(bool, True, doc="positions run on over the sources and the target "
                                                                "(ERNIE-kit's default); false: they restart at 1 in "
                                                                "each source and at 0 at the target's [CLS]"),
                     "decoding": Key(str, "beam", choices=["greedy", "beam", "sample"]),
                     "beam_size": Key(int, 1, minimum=1, maximum=MAX_BEAM_SIZE),
                     "length_penalty": Key(float, 1.0, minimum=0.0, maximum=MAX_LENGTH_PENALTY,
                                           doc="beam search: GNMT's alpha"),
                     "temperature": Key(float, 1.0, minimum=MIN_TEMPERATURE, maximum=MAX_TEMPERATURE),
                     "top_k": Key(int, 0, minimum=0, maximum=MAX_TOP_K),
                     "top_p": Key(float, 1.0, minimum=1e-6, maximum=1.0),
                     "seed": Key(int, 0, minimum=0, maximum=MAX_SEED, doc="sampling's seed"),
                     "decode_in_eval": Key(bool, True, doc="evaluation decodes and reports BLEU-4 and ROUGE-L")}
    prediction_format = "generation"
    prediction_outputs = (GENERATED,)  # what the exported model's Predictor.run returns

    def structure(self) -> None:
        p = self.model_params
        config = self.build_encoder()
        source = self.ernie_field(p["source_field"], "model.source_field")
        if not source.get("gen_source") or source.get("source_of"):
            raise ConfigError(f"model.source_field: '{p['source_field']}' must be the first "
                              f"ErnieGenSourceFieldReader field of the train_reader")
        target = self.data_info.get(p["target_field"]) or {}
        if not target.get("gen_target"):
            raise ConfigError(f"model.target_field: '{p['target_field']}' is not an ErnieGenTargetFieldReader "
                              f"field of the train_reader")
        if not 0 <= p["tgt_type_id"] < max(config.type_vocab_size, 1):
            raise ConfigError(f"model.tgt_type_id: {p['tgt_type_id']} is outside the encoder's type_vocab_size "
                              f"{config.type_vocab_size} (model.encoder_config)")
        if len(source["sources"]) > p["tgt_type_id"] and config.type_vocab_size:  # ERNIE-kit asserted it too
            raise ConfigError(f"model.tgt_type_id: {p['tgt_type_id']}, but the {len(source['sources'])} sources "
                              f"take the token types 0..{len(source['sources']) - 1}")
        target_len = max(target["max_seq_len"], p["max_dec_len"] + 1)
        longest = source["max_seq_len"] + target_len if p["continuous_position"] else max(source["max_seq_len"],
                                                                                             target_len)
        if longest > config.max_position_embeddings:
            raise ConfigError(f"model.max_dec_len: a source of {source['max_seq_len']} tokens and a target of "
                              f"{max(target['max_seq_len'], p['max_dec_len'] + 1)} need {longest} positions, more "
                              f"than the encoder's max_position_embeddings {config.max_position_embeddings}: "
                              f"lower the source field's source_budget")
        self.special = {k: int(target[k]) for k in ("mask_id", "cls_id", "sep_id")}
        # the most tokens a decoding may add: the positions past the longest source and the [CLS]
        self.max_new_tokens_limit = config.max_position_embeddings - 1 - (
            source["max_seq_len"] if p["continuous_position"] else 0)
        self.lm_head = LmHead(config.hidden_size, config.vocab_size, config.hidden_act, config.layer_norm_eps,
                              p["weight_sharing"], config.initializer_range)
        self._tokens: Optional[List[str]] = None

    # ---- the network ------------------------------------------------------------------------
    def embed(self, ids: paddle.Tensor, types: Optional[paddle.Tensor], positions: paddle.Tensor) -> paddle.Tensor:
        return self.ernie.embeddings(ids, token_type_ids=types, position_ids=positions)

    def logits(self, states: paddle.Tensor) -> paddle.Tensor:
        return self.lm_head(states, self.ernie.word_embeddings.weight).astype("float32")

    def streams(self, src: paddle.Tensor, src_types: paddle.Tensor, src_positions: Optional[paddle.Tensor],
                src_lens: paddle.Tensor, tgt: paddle.Tensor, tgt_lens: paddle.Tensor,
                queries: Any) -> paddle.Tensor:
        """The query stream's states ``[B, Q, H]`` for queries ``0..Q-1`` over the batch laid out
        ``[source [B, S] | target [B, T]]``. The
        positions run on from the source into the target (``continuous_position``), or restart:
        ``src_positions`` ``[B, S]`` in the source, 0 at the target's ``[CLS]``."""
        src_width, tgt_width = paddle.shape(src)[1], paddle.shape(tgt)[1]
        tgt_type = paddle.full_like(tgt, self.model_params["tgt_type_id"])
        start = src_lens.unsqueeze(1) if self.model_params["continuous_position"] else paddle.zeros_like(
            src_lens).unsqueeze(1)  # [B, 1]: the position of the target's [CLS]
        if src_positions is None:  # continuous
            src_positions = paddle.arange(src_width, dtype="int64").unsqueeze(0).expand_as(src)  # [B, S]
        tgt_positions = start + paddle.arange(tgt_width, dtype="int64").unsqueeze(0)  # [B, T]
        context = paddle.concat([self.embed(src, src_types, src_positions),
                                 self.embed(tgt, tgt_type, tgt_positions)], axis=1)  # [B, S + T, H]
        query_positions = start + paddle.arange(queries, dtype="int64").unsqueeze(0)  # [B, Q]
        mask_ids = paddle.full_like(query_positions, self.special["mask_id"])
        query = self.embed(mask_ids, paddle.full_like(mask_ids, self.model_params["tgt_type_id"]),
                           query_positions)  # [B, Q, H]
        context_bias, query_bias = two_stream_bias(src_lens, tgt_lens, src_width, tgt_width, queries)
        return run_two_streams(self.ernie, context, query, context_bias, query_bias)

    def forward(self, fields_dict: Dict[str, paddle.Tensor], phase: str) -> Dict[str, paddle.Tensor]:
        p = self.model_params
        src, tgt = p["source_field"], p["target_field"]
        if tgt not in fields_dict:
            raise ConfigError(f"model.target_field: '{tgt}' is not read here: a generation model's prediction "
                              f"runs its step function (infill), not its forward")
        target = fields_dict[tgt]  # [B, T]: [CLS] t1 ... [SEP]
        tgt_lens = fields_dict[f"{tgt}_{InstanceName.SEQ_LENS}"]  # [B]
        width = paddle.shape(target)[1]
        positions = paddle.arange(width, dtype="int64").unsqueeze(0)  # [1, T]
        context_target = target
        if phase == Phase.TRAINING and self.training and p["mask_prob"] > 0:
            noise = (paddle.rand(paddle.shape(target)) < p["mask_prob"]) & (positions >= 1)  # never the [CLS]
            context_target = paddle.where(noise, paddle.full_like(target, self.special["mask_id"]), target)
        states = self.streams(fields_dict[src], fields_dict[f"{src}_{SENT_IDS}"], self.source_positions(fields_dict),
                                 fields_dict[f"{src}_{InstanceName.SEQ_LENS}"], context_target, tgt_lens, width)
        logits = self.logits(states)  # [B, T, V]: query i predicts target token i
        # cross_entropy and logsumexp rather than log_softmax, whose CPU backward is 30x slower
        # (measured: 0.37 s against 0.012 s on [16, 16, 3429] logits)
        nll = F.cross_entropy(logits, target.unsqueeze(-1), reduction="none").squeeze(-1)  # [B, T]
        smooth = p["label_smooth"] if phase == Phase.TRAINING else 0.0
        if smooth:  # against the uniform distribution: -mean(log p) = logsumexp(logits) - mean(logits)
            nll = (1.0 - smooth) * nll + smooth * (paddle.logsumexp(logits, axis=-1) - logits.mean(axis=-1))
        weights = ((positions >= 1) & (positions < tgt_lens.unsqueeze(1))).astype("float32")  # [B, T]
        loss = (nll * weights).sum() / paddle.clip(weights.sum(), min=1.0)
        return {InstanceName.LOSS: loss}

    def source_positions(self, fields_dict: Dict[str, paddle.Tensor]) -> Optional[paddle.Tensor]:
        """The source's own positions ``[B, S]`` when they restart per source, else None."""
        if self.model_params["continuous_position"]:
            return None
        return fields_dict[f"{self.model_params['source_field']}_{POS_IDS}"]

    # ---- the step function: what decoding runs ------------------------------------------------
    def step_specs(self) -> Dict[str, Tuple[List[TensorSpec], List[str]]]:
        """The one step function's inputs and output names (``wenxin.models.infill_step``)."""
        config = self.ernie.config
        heads = config.num_attention_heads
        new = [TensorSpec(name, [-1, -1], "int64") for name in ("tokens", "types", "positions")]
        past = [TensorSpec(name, [-1, heads, -1, config.hidden_size // heads], "float32")
                for name in layer_cache_names(config.num_hidden_layers)]  # [R, heads, N, d] each
        return {INFILL: ([*new, TensorSpec("visible", [-1, -1, -1], "float32"), *past], ["logits", NEW_CACHE])}

    def step_notes(self) -> Dict[str, Dict[str, Any]]:
        """What a caller of ``infill`` needs besides its inputs: the target's ``[CLS]``."""
        return {INFILL: {TARGET_START: {"id": self.special["cls_id"], "type": self.model_params["tgt_type_id"],
                                        "continuous": self.model_params["continuous_position"]}}}

    def infill(self, tokens: paddle.Tensor, types: paddle.Tensor, positions: paddle.Tensor, visible: paddle.Tensor,
               *past: paddle.Tensor) -> Tuple[paddle.Tensor, paddle.Tensor]:
        """``T`` new context tokens of each row (ids, token types, positions ``[R, T]``) after each
        layer's cached keys and values (``past``: keys, values, keys, ... ``[R, heads, N, d]``),
        each seeing the columns where ``visible`` ``[R, T, N + T]`` is 1 -> the logits ``[R, V]``
        of the ``[MASK]`` after the last one (one position further, of its type) and the new
        tokens' keys and values ``[L, 2, R, heads, T, d]``."""
        token = self.embed(tokens, types, positions)  # [R, T, H]
        masks = paddle.full_like(tokens[:, -1:], self.special["mask_id"])  # [R, 1]
        mask = self.embed(masks, types[:, -1:], positions[:, -1:] + 1)  # [R, 1, H]
        pairs = [(past[i], past[i + 1]) for i in range(0, len(past), 2)]
        states, new = infill_streams(self.ernie, token, mask, visible, pairs)
        return self.logits(states[:, 0]), new

    # ---- decoding and metrics ----------------------------------------------------------------
    def decode_settings(self) -> DecodeSettings:
        p = self.model_params
        return DecodeSettings(strategy=p["decoding"], max_new_tokens=p["max_dec_len"], eos_id=self.special["sep_id"],
                              beam_size=p["beam_size"], length_penalty=p["length_penalty"],
                              temperature=p["temperature"], top_k=p["top_k"], top_p=p["top_p"], seed=p["seed"])

    def prompt_source(self) -> PromptSource:
        """Where a batch keeps each source: the first source field's ids, types (positions when
        they restart per source) and lengths."""
        src = self.model_params["source_field"]
        inputs = {"src_ids": src, "src_types": f"{src}_{SENT_IDS}"}
        if not self.model_params["continuous_position"]:
            inputs["src_positions"] = f"{src}_{POS_IDS}"
        return PromptSource(inputs, f"{src}_{InstanceName.SEQ_LENS}")

    def generate_outputs(self, batch: Dict[str, np.ndarray], run: StepRunner) -> Dict[str, np.ndarray]:
        """``generated`` ``[B, max_dec_len]`` (-1 after each target's end): each source of a batch
        decoded through the step functions that ``run`` runs; and the gold ``references``."""
        if not self.model_params["decode_in_eval"]:
            return {}
        config = self.ernie.config
        heads = config.num_attention_heads
        empty = np.zeros((config.num_hidden_layers, 2, 1, heads, 0, config.hidden_size // heads), np.float32)
        # infill prefills several sources in one call, and reads the rows' caches where they lie
        generated = generate_batch(run, batch, self.prompt_source(), self.decode_settings(), masked=True,
                                   in_place=empty, together=True)
        return {GENERATED: generated, REFERENCES: np.asarray(batch[self.model_params["target_field"]])}

    def tokens(self) -> List[str]:
        if self._tokens is None:
            info = self.data_info[self.model_params["target_field"]]
            self._tokens = Vocab.load(info["vocab_path"]).tokens
        return self._tokens

    def words_of(self, ids: np.ndarray) -> List[str]:
        """The WordPiece tokens of token ids, up to the first ``[SEP]`` or -1."""
        vocab, words = self.tokens(), []
        for token_id in ids.tolist():
            if token_id < 0 or token_id == self.special["sep_id"]:
                break
            words.append(vocab[token_id] if token_id < len(vocab) else UNKNOWN)
        return words

    def text_of(self, ids: np.ndarray) -> str:
        """The text of token ids, up to the first ``[SEP]`` or -1."""
        return detokenize(self.words_of(ids))

    def get_metrics(self, outputs: Dict[str, Any], meta_info: Dict[str, Any], phase: str) -> Dict[str, float]:
        metrics: Dict[str, float] = {}
        if InstanceName.LOSS in outputs:
            loss = float(np.average(outputs[InstanceName.LOSS], weights=meta_info["batch_sizes"]))
            metrics.update(loss=loss, ppl=float(np.exp(min(loss, 50.0))))
        if GENERATED in outputs:
            # an unknown character is one token that matches nothing, as against the raw text (scoring.py)
            references = [metric_tokens(self.words_of(row[1:]), REFERENCE_UNKNOWN) for row in outputs[REFERENCES]]
            hypotheses = [metric_tokens(self.words_of(row), GENERATED_UNKNOWN) for row in outputs[GENERATED]]
            metrics.update(generation_metrics(references, hypotheses))
        return metrics
