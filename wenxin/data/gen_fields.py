"""Field readers for ERNIE-Gen's sequence-to-sequence data, as ERNIE-kit's ``InfillingGenReader``
reads it: one or more source columns and one target column.

- ``ErnieGenSourceFieldReader``: a source text. Every source field of a reader contributes to one
  sequence, ``[CLS] s1 [SEP] s2 [SEP] ...``, the k-th source with token type k; the first source
  field holds the tensors (``<name>`` ids ``[B, S]``, ``<name>_sent_ids`` ``[B, S]``,
  ``<name>_pos_ids`` ``[B, S]``: positions restarting at 1 in each source after ``[CLS]`` at 0,
  which a model without ``continuous_position`` uses, ``<name>_seq_lens`` ``[B]``), the others
  have none. Each text is cut to ``max_seq_len - 2``
  tokens (ERNIE-kit's ``max_src_len``); the whole source is then cut to ``source_budget`` tokens
  from its end (default: no further cut), which ERNIE-kit did not do (its positions could run past
  the position table).
- ``ErnieGenTargetFieldReader``: the target, ``[CLS] t [SEP]`` cut to ``max_seq_len`` tokens
  (ERNIE-kit's ``max_tgt_len``; a cut target loses its ``[SEP]``, as in ERNIE-kit): ``<name>``
  ``[B, T]`` and ``<name>_seq_lens`` ``[B]``. It is a label: the exported model does not read it.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from wenxin.common.constants import InstanceName
from wenxin.common.errors import ConfigError
from wenxin.data.ernie_fields import POS_IDS, SENT_IDS, ErnieTextFieldReader
from wenxin.data.field_reader import BaseFieldReader, TensorSpec, pad_sequences
from wenxin.common.registry import RegisterSet

MASK_TOKEN = "[MASK]"


@RegisterSet.field_readers.register("ErnieGenSourceFieldReader")
class ErnieGenSourceFieldReader(ErnieTextFieldReader):
    """A source text of an ERNIE-Gen example (see the module docstring). ``source_budget`` of the
    first source field bounds the whole source (default: 1 + the sum of each source's
    ``max_seq_len - 1``, the longest the texts' own cuts allow)."""

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        if config.get("pair_with"):
            raise ConfigError(f"{path}.pair_with: a generation source is one text; give each source column a "
                              f"field of its own")
        super().__init__(config, path, scope)
        self.parts: List[str] = []  # the first source field: every source field's name, in order
        self.owner: Optional[str] = None  # the others: the first source field's name
        self.source_budget: int = config.get("source_budget") or 0  # 0: set in link, no cut beyond the texts'
        if self.source_budget and self.source_budget < 3:
            raise ConfigError(f"{path}.source_budget: {self.source_budget} leaves no room for a source between "
                              f"[CLS] and [SEP]")

    def link(self, fields: List[BaseFieldReader]) -> None:
        sources = [f for f in fields if isinstance(f, ErnieGenSourceFieldReader)]
        if sources[0] is self:
            self.parts = [f.name for f in sources]
            if not self.config.get("source_budget"):  # the longest source the texts' own cuts allow
                self.source_budget = 1 + sum(f.max_seq_len - 1 for f in sources)
            if len(sources) > 1 and any(f.vocab is not None and self.vocab is not None
                                        and f.vocab.tokens != self.vocab.tokens for f in sources[1:]):
                raise ConfigError(f"{self.path}.vocab_path: the source fields of one reader share one vocab")
        else:
            self.owner = sources[0].name

    def convert(self, text: str) -> Any:
        """The text's ids, cut to ``max_seq_len - 2`` and followed by ``[SEP]``."""
        return self.truncate(self._ids(text), self.max_seq_len - 2) + [self.sep_id]

    def combine(self, value: Any, example: Dict[str, Any]) -> Any:
        if self.owner is not None:
            return None  # the first source field holds this text
        ids, types = [self.cls_id], [0]
        for kind, name in enumerate(self.parts):
            ids += example[name]
            types += [kind] * len(example[name])
        positions = [0]
        for name in self.parts:
            positions += range(1, len(example[name]) + 1)
        if len(ids) > self.source_budget:  # keep the start, end on [SEP]
            ids, types = ids[:self.source_budget - 1] + [self.sep_id], types[:self.source_budget]
            positions = positions[:self.source_budget]
        return (np.asarray(ids, dtype=np.int64), np.asarray(types, dtype=np.int64),
                np.asarray(positions, dtype=np.int64))

    def length(self, value: Any) -> int:
        return 0 if value is None else len(value[0])

    def collate(self, values: List[Any]) -> Dict[str, np.ndarray]:
        if self.owner is not None:
            return {}
        ids, lengths = pad_sequences([v[0] for v in values], self.padding_id, 0)  # [B, S], [B]
        types, _ = pad_sequences([v[1] for v in values], 0, 0)  # [B, S]
        positions, _ = pad_sequences([v[2] for v in values], 0, 0)  # [B, S]
        return {self.name: ids, f"{self.name}_{SENT_IDS}": types, f"{self.name}_{POS_IDS}": positions,
                f"{self.name}_{InstanceName.SEQ_LENS}": lengths}

    def tensor_specs(self) -> List[TensorSpec]:
        if self.owner is not None:
            return []
        return [TensorSpec(self.name, [-1, -1], "int64"), TensorSpec(f"{self.name}_{SENT_IDS}", [-1, -1], "int64"),
                TensorSpec(f"{self.name}_{POS_IDS}", [-1, -1], "int64"),
                TensorSpec(f"{self.name}_{InstanceName.SEQ_LENS}", [-1], "int64")]

    def info(self) -> Dict[str, Any]:
        return {**super().info(), "gen_source": True, "source_of": self.owner, "sources": list(self.parts),
                "max_seq_len": self.source_budget}


@RegisterSet.field_readers.register("ErnieGenTargetFieldReader")
class ErnieGenTargetFieldReader(ErnieTextFieldReader):
    """The target text of an ERNIE-Gen example (see the module docstring)."""

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        if config.get("pair_with"):
            raise ConfigError(f"{path}.pair_with: a generation target is one text")
        if config.get("is_label") is None:
            config = {**config, "is_label": True}
        super().__init__(config, path, scope)
        assert self.vocab is not None
        if MASK_TOKEN not in self.vocab:
            raise ConfigError(f"{path}.vocab_path: {MASK_TOKEN} not in {config['vocab_path']} (ERNIE-Gen's "
                              f"query stream is made of it)")
        self.mask_id = self.vocab.token_to_id[MASK_TOKEN]

    def convert(self, text: str) -> np.ndarray:  # type: ignore[override]
        ids = [self.cls_id] + (self._ids(text) + [self.sep_id])[:self.max_seq_len - 1]
        return np.asarray(ids, dtype=np.int64)

    def length(self, value: np.ndarray) -> int:  # type: ignore[override]
        return len(value)

    def collate(self, values: List[np.ndarray]) -> Dict[str, np.ndarray]:  # type: ignore[override]
        ids, lengths = pad_sequences(values, self.padding_id, 0)  # [B, T], [B]
        return {self.name: ids, f"{self.name}_{InstanceName.SEQ_LENS}": lengths}

    def tensor_specs(self) -> List[TensorSpec]:
        return [TensorSpec(self.name, [-1, -1], "int64"),
                TensorSpec(f"{self.name}_{InstanceName.SEQ_LENS}", [-1], "int64")]

    def info(self) -> Dict[str, Any]:
        return {**super().info(), "gen_target": True, "mask_id": self.mask_id, "cls_id": self.cls_id,
                "sep_id": self.sep_id, "vocab_path": self.config["vocab_path"]}
