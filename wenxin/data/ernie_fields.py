"""Field readers for ERNIE/BERT inputs: ``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]`` with token
types, as ERNIE-kit's ``ErnieTextFieldReader`` writes them."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple, Type, TypeVar

import numpy as np

from wenxin.common.constants import InstanceName
from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import validate
from wenxin.config.task_schema import TOKENIZER
from wenxin.data.field_reader import BaseFieldReader, TensorSpec, TextFieldReader, fixed_length, pad_sequences
from wenxin.data.label_fields import SequenceLabelFieldReader
from wenxin.data.vocab import Vocab

CLS_TOKEN, SEP_TOKEN = "[CLS]", "[SEP]"
SENT_IDS, POS_IDS = "sent_ids", "pos_ids"

ErnieExample = Tuple[np.ndarray, np.ndarray, List[int]]  # (ids [T], token types [T], pieces per word)


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

    word_pieces = True

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        if not config.get("tokenizer"):  # FullTokenizer with its schema defaults
            config = {**config, "tokenizer": validate({"type": "FullTokenizer"}, TOKENIZER, f"{path}.tokenizer")}
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

    def words(self, text: str) -> List[str]:
        """The text's words: split on the tokenizer's ``split_char`` (a space by default; ``\x02``
        in ERNIE-kit's tagging data), each then tokenized on its own."""
        sep = (self.config.get("tokenizer") or {}).get("split_char", " ") or None
        return [w for w in text.split(sep) if w]

    def word_ids(self, words: List[str]) -> List[List[int]]:
        """The ids of each of ``words`` (a word may give several pieces, or none)."""
        if not self.config["need_convert"]:
            return [[int(t)] for t in words]  # pre-converted ids, e.g. "12 7 311"
        to_ids_batch = getattr(self.tokenizer, "to_ids_batch", None)
        if to_ids_batch is not None:
            return to_ids_batch(words)
        assert self.vocab is not None
        return [self.vocab.to_ids(self.tokenizer.tokenize(w)) for w in words]

    def _ids(self, text: str) -> List[int]:
        return [i for ids in self.word_ids(self.words(text)) for i in ids]

    def convert(self, text: str) -> ErnieExample:  # type: ignore[override]
        pieces = self.word_ids(self.words(text))
        ids = [self.cls_id] + self.truncate([i for w in pieces for i in w], self.max_seq_len - 2) + [self.sep_id]
        # the third value, pieces per word, lets a tag field spread word tags over the pieces
        return np.asarray(ids, dtype=np.int64), np.zeros(len(ids), dtype=np.int64), [len(w) for w in pieces]

    def length(self, value: ErnieExample) -> int:  # type: ignore[override]
        """Its ids' count (the value is ids, segment ids and pieces per word): what length
        bucketing sorts by and ``wenxin inspect`` counts as kept."""
        return len(value[0])

    def convert_pair(self, text_a: str, text_b: str) -> ErnieExample:
        a, b = truncate_pair(self._ids(text_a), self._ids(text_b), self.max_seq_len - 3)
        ids = [self.cls_id] + a + [self.sep_id] + b + [self.sep_id]
        types = np.zeros(len(ids), dtype=np.int64)
        types[len(a) + 2:] = 1
        return np.asarray(ids, dtype=np.int64), types, []

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


T = TypeVar("T", bound=BaseFieldReader)


def aligned_text_field(fields: List[BaseFieldReader], kind: Type[T], name: str, path: str, verb: str) -> T:
    """The text field a label field labels: the ``kind`` field named ``name`` (its
    ``align_with``), or the first ``kind`` field when ``name`` is empty; else one error naming
    ``<path>.align_with``."""
    texts = [f for f in fields if isinstance(f, kind) and (not name or f.name == name)]
    if not texts:
        raise ConfigError(f"{path}.align_with: no {kind.__name__} field {repr(name) + ' ' if name else ''}"
                          f"in this reader to {verb}")
    return texts[0]


@RegisterSet.field_readers.register("ErnieSeqlabelLabelFieldReader")
class ErnieSeqlabelLabelFieldReader(SequenceLabelFieldReader):
    """One tag per word of an ``ErnieTextFieldReader`` field (``align_with``, default the first),
    spread over its word pieces -> tag ids ``[B, T]`` aligned with that field's ids.

    The ``[CLS]`` and ``[SEP]`` positions get the outside tag (the tokenizer's ``unk_token`` if it
    is a tag, as ERNIE-kit does, else ``O``). A word's first piece gets the word's tag, and its
    other pieces the inside tag of the same type (``B-X`` -> ``I-X`` when ``I-X`` is a tag, else
    the word's tag), so that pieces form the same chunks as the words. ERNIE-kit itself pairs
    tags with pieces by position, which is the same where every word is one piece (Chinese
    characters) and misaligns otherwise. A line whose tag count differs from its word count is
    malformed."""

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        super().__init__(config, path, scope)
        self.text_field: str = config.get("align_with") or ""
        self.text_reader: Optional[ErnieTextFieldReader] = None
        self.outside_id = 0
        if self.vocab is not None:
            self._set_outside()

    def link(self, fields: List[BaseFieldReader]) -> None:
        self.text_reader = aligned_text_field(fields, ErnieTextFieldReader, self.text_field, self.path, "tag")
        self.text_field = self.text_reader.name

    def _set_outside(self) -> None:
        assert self.vocab is not None
        for tag in (self.tokenizer.unk_token, "O"):
            if tag in self.vocab:
                self.outside_id = self.vocab.token_to_id[tag]
                return
        raise ConfigError(f"{self.path}: the tag map has no outside tag ({self.tokenizer.unk_token!r} or 'O') "
                          f"for the [CLS]/[SEP] positions")

    def fit(self, columns: Iterable[str]) -> None:
        """The training tags, plus ``I-X`` for each ``B-X`` (a word's later pieces need it)."""
        tags = {t for c in columns for t in self.tokenizer.tokenize(c)}
        tags |= {f"I-{t[2:]}" for t in tags if t.startswith("B-")}
        self.set_vocab(Vocab(sorted(tags)))

    def set_vocab(self, vocab: Optional[Vocab]) -> None:
        super().set_vocab(vocab)
        if vocab is not None:
            self._set_outside()

    def convert(self, text: str) -> np.ndarray:  # type: ignore[override]  # a tag per token
        return self.tag_ids(self.tokenizer.tokenize(text))  # cut in combine, as the text's pieces are

    def inside_of(self, tag_id: int) -> int:
        assert self.vocab is not None
        tag = self.vocab.tokens[tag_id]
        if tag.startswith("B-") and f"I-{tag[2:]}" in self.vocab:
            return self.vocab.token_to_id[f"I-{tag[2:]}"]
        return tag_id

    def check_example(self, example: Dict[str, Any]) -> None:
        """Checked in ``combine``, against the text's words."""

    def combine(self, value: np.ndarray, example: Dict[str, Any]) -> np.ndarray:
        ids, _, pieces_per_word = example[self.text_field]
        if len(value) != len(pieces_per_word):
            raise ValueError(f"{len(value)} tags in '{self.name}' for {len(pieces_per_word)} words in "
                             f"'{self.text_field}'")
        assert self.text_reader is not None, "linked when the reader was built"
        tags: List[int] = []
        for tag, pieces in zip(value.tolist(), pieces_per_word):
            tags.extend([tag] + [self.inside_of(tag)] * (pieces - 1))
        tags = self.text_reader.truncate(tags, self.text_reader.max_seq_len - 2)  # as the text was cut
        return np.asarray([self.outside_id] + tags + [self.outside_id], dtype=np.int64)
