"""Field readers for ERNIE/BERT inputs: ``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]`` with token
types, as ERNIE-kit's ``ErnieTextFieldReader`` writes them."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from wenxin.common.constants import InstanceName
from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.data.field_reader import TensorSpec, TextFieldReader, fixed_length, pad_sequences

CLS_TOKEN, SEP_TOKEN = "[CLS]", "[SEP]"
SENT_IDS, POS_IDS = "sent_ids", "pos_ids"

ErnieExample = Tuple[np.ndarray, np.ndarray]  # (ids [T], token types [T])


def truncate_pair(a: List[int], b: List[int], budget: int) -> Tuple[List[int], List[int]]:
    """Drop tokens from the end of the longer text (of ``b`` on ties) until both fit ``budget``,
    as PaddleNLP's ``longest_first`` does."""
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        if len(a) > len(b):
            a.pop()
        else:
            b.pop()
    return a, b


@RegisterSet.field_readers.register("ErnieTextFieldReader")
class ErnieTextFieldReader(TextFieldReader):
    """One text, or a pair with ``pair_with``, as an ERNIE/BERT encoder reads it.

    Tensors: ``<name>`` ids ``[B, T]`` (``[CLS] a [SEP] (b [SEP])``, padded with ``padding_id``),
    ``<name>_sent_ids`` token types ``[B, T]`` (0 for ``[CLS] a [SEP]``, 1 for ``b [SEP]``),
    ``<name>_pos_ids`` positions ``[B, T]`` and ``<name>_seq_lens`` ``[B]``. The tokenizer is
    ``FullTokenizer`` unless configured; ``vocab_path`` is the pretrained model's ``vocab.txt``.
    A single text is cut to ``max_seq_len - 2`` tokens by ``truncation_type``; a pair to
    ``max_seq_len - 3``, longest first.
    """

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        if not config.get("tokenizer"):
            config = {**config, "tokenizer": {"type": "FullTokenizer", "split_char": " ", "unk_token": "[UNK]",
                                              "lowercase": True, "ngram": 1, "strip_accents": None,
                                              "split_symbols": True, "max_input_chars_per_word": 100,
                                              "params": None}}
        if not config.get("vocab_path"):
            raise ConfigError(f"{path}.vocab_path: ErnieTextFieldReader needs the pretrained model's vocab.txt")
        super().__init__(config, path, scope)
        if self.max_seq_len < 3:
            raise ConfigError(f"{path}.max_seq_len: {self.max_seq_len} leaves no room for text between "
                              f"{CLS_TOKEN} and {SEP_TOKEN}")
        assert self.vocab is not None
        missing = [t for t in (CLS_TOKEN, SEP_TOKEN) if t not in self.vocab]
        if missing:
            raise ConfigError(f"{path}.vocab_path: {', '.join(missing)} not in {config['vocab_path']}")
        self.cls_id, self.sep_id = self.vocab.token_to_id[CLS_TOKEN], self.vocab.token_to_id[SEP_TOKEN]
        self.pair_index: Optional[int] = None

    def _ids(self, text: str) -> List[int]:
        if not self.config["need_convert"]:
            return [int(t) for t in text.split()]  # pre-converted ids, e.g. "12 7 311"
        to_ids = getattr(self.tokenizer, "to_ids", None)
        if to_ids is not None:
            return to_ids(text)
        assert self.vocab is not None
        return self.vocab.to_ids(self.tokenizer.tokenize(text))

    def _cut(self, ids: List[int], budget: int) -> List[int]:
        kind = self.config["truncation_type"]
        if len(ids) <= budget:
            return ids
        if kind == 0:
            return ids[:budget]
        if kind == 1:
            return ids[len(ids) - budget:]
        head = (budget + 1) // 2
        return ids[:head] + ids[len(ids) - (budget - head):]

    def convert(self, text: str) -> ErnieExample:  # type: ignore[override]
        ids = [self.cls_id] + self._cut(self._ids(text), self.max_seq_len - 2) + [self.sep_id]
        return np.asarray(ids, dtype=np.int64), np.zeros(len(ids), dtype=np.int64)

    def convert_pair(self, text_a: str, text_b: str) -> ErnieExample:
        a, b = truncate_pair(self._ids(text_a), self._ids(text_b), self.max_seq_len - 3)
        ids = [self.cls_id] + a + [self.sep_id] + b + [self.sep_id]
        types = np.zeros(len(ids), dtype=np.int64)
        types[len(a) + 2:] = 1
        return np.asarray(ids, dtype=np.int64), types

    def collate(self, values: List[ErnieExample]) -> Dict[str, np.ndarray]:  # type: ignore[override]
        width = fixed_length(self.config)
        ids, lengths = pad_sequences([v[0] for v in values], self.padding_id, width)  # [B, T], [B]
        types, _ = pad_sequences([v[1] for v in values], 0, width)  # [B, T]
        positions = np.broadcast_to(np.arange(ids.shape[1], dtype=np.int64), ids.shape).copy()  # [B, T]
        return {self.name: ids, f"{self.name}_{SENT_IDS}": types, f"{self.name}_{POS_IDS}": positions,
                f"{self.name}_{InstanceName.SEQ_LENS}": lengths}

    def tensor_specs(self) -> List[TensorSpec]:
        width = fixed_length(self.config) or -1
        return [TensorSpec(self.name, [-1, width], "int64"),
                TensorSpec(f"{self.name}_{SENT_IDS}", [-1, width], "int64"),
                TensorSpec(f"{self.name}_{POS_IDS}", [-1, width], "int64"),
                TensorSpec(f"{self.name}_{InstanceName.SEQ_LENS}", [-1], "int64")]

    def info(self) -> Dict[str, Any]:
        return {**super().info(), "ernie_inputs": True, "pair": self.pair_index is not None}
