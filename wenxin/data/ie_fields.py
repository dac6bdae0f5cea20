"""Field readers for many-to-many information extraction, as ERNIE-kit's ``IEReader`` reads
JSON lines ``{"text": ..., "spo_list": [{"predicate", "subject": [start, end], "object": [start,
end]}]}`` (character offsets, end exclusive).

The text is cut into words as ERNIE-kit cuts it (a run of ASCII letters and digits is one word,
every other character a word of its own), each word into word pieces; the labels mark, per
piece, where subjects and objects start (``B-<predicate>@S`` / ``@O``) and which pieces continue
them (``I``), several labels per piece where entities overlap (see ``wenxin.metrics.spo``).
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from wenxin.common.errors import ConfigError, DataError
from wenxin.common.registry import RegisterSet
from wenxin.data.ernie_fields import ErnieTextFieldReader, aligned_text_field
from wenxin.data.field_reader import BaseFieldReader, TensorSpec, UnknownLabelError
from wenxin.data.label_fields import LabelFieldReader
from wenxin.data.vocab import Vocab
from wenxin.metrics.spo import INSIDE, OUTSIDE

WORD = re.compile(r"[0-9a-zA-Z]+|.", re.DOTALL)  # ERNIE-kit's IE words

# (ids [T], token types [T], pieces per word, piece starts [P], piece ends [P]): offsets in the
# text of the word each kept piece belongs to, end exclusive, for the P pieces between [CLS] and [SEP]
IeExample = Tuple[np.ndarray, np.ndarray, List[int], np.ndarray, np.ndarray]


@RegisterSet.field_readers.register("ErnieIeTextFieldReader")
class ErnieIeTextFieldReader(ErnieTextFieldReader):
    """An ERNIE text for extraction: ``[CLS] pieces [SEP]`` like ``ErnieTextFieldReader`` (the
    same tensors), with words cut as ERNIE-kit's ``IEReader`` cuts them and each piece's place in
    the text kept for the label field and for decoding predictions back to character offsets.
    Long texts keep their head (``truncation_type`` 0) in training; inference splits them."""

    reads_string = True  # the spans' character offsets point into it

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        super().__init__(config, path, scope)
        if config["truncation_type"] != 0:
            raise ConfigError(f"{path}.truncation_type: {config['truncation_type']}: an extraction text keeps its "
                              f"head (0), so that its labels' offsets stay those of the text")
        if config.get("pair_with"):
            raise ConfigError(f"{path}.pair_with: an extraction text is one text, not a pair")

    def words(self, text: str) -> List[str]:
        return WORD.findall(text)

    def convert(self, text: str) -> IeExample:  # type: ignore[override]
        words = self.words(text)
        pieces = self.word_ids(words)
        kept: List[int] = []
        starts: List[int] = []
        ends: List[int] = []
        position = 0
        budget = self.max_seq_len - 2
        for word, ids in zip(words, pieces):
            take = ids[:budget - len(kept)]
            kept.extend(take)
            starts.extend([position] * len(take))
            ends.extend([position + len(word)] * len(take))
            position += len(word)
        ids_array = np.asarray([self.cls_id] + kept + [self.sep_id], dtype=np.int64)
        return (ids_array, np.zeros(len(ids_array), dtype=np.int64), [len(p) for p in pieces],
                np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))

    def info(self) -> Dict[str, Any]:
        return {**super().info(), "ie_text": True}


def read_label_map(path: str, key_path: str) -> List[str]:
    """The labels of an extraction label map in id order: ERNIE-kit's JSON object (label -> id)
    or one label a line (a saved vocab). Checked against ERNIE-kit's rules: ``O`` is 0, ``I`` is
    1, then ``B-<predicate>@S`` at even ids, each followed by its ``B-<predicate>@O``."""
    if not os.path.isfile(path):
        raise ConfigError(f"{key_path}: label map not found: {path}")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    labels = _json_labels(text, path) if text.lstrip().startswith("{") else Vocab.load(path).tokens
    _check_extraction_labels(labels, path)
    return labels


def _json_labels(text: str, path: str) -> List[str]:
    """ERNIE-kit's JSON label map (label -> id) as labels in id order."""
    try:
        mapping = json.loads(text)
    except ValueError as e:
        raise DataError(f"{path}: not a JSON label map ({e})") from None
    ids = sorted(mapping.values()) if all(isinstance(v, int) and not isinstance(v, bool)
                                          for v in mapping.values()) else None
    if ids != list(range(len(mapping))):
        raise DataError(f"{path}: a label map's ids must be the integers 0..{len(mapping) - 1}, once each")
    labels = [""] * len(mapping)
    for label, idx in mapping.items():
        labels[idx] = label
    return labels


def _check_extraction_labels(labels: List[str], path: str) -> None:
    """ERNIE-kit's rules for an extraction label map (see ``read_label_map``), every broken one named."""
    problems = []
    if labels[:2] != ["O", "I"]:
        problems.append(f"ids 0 and 1 must be 'O' and 'I', not {labels[:2]}")
    for idx in range(2, len(labels), 2):
        subject = labels[idx]
        if not (subject.startswith("B-") and subject.endswith("@S")):
            problems.append(f"id {idx} must be a subject label 'B-<predicate>@S', not {subject!r}")
        elif idx + 1 >= len(labels) or labels[idx + 1] != subject[:-2] + "@O":
            problems.append(f"id {idx + 1} must be {subject[:-2] + '@O'!r} (after {subject!r})")
    if problems or len(labels) < 4:
        raise DataError(f"{path}: not an extraction label map: " + "; ".join(problems or ["no predicate"]))


@RegisterSet.field_readers.register("IeSpoLabelFieldReader")
class IeSpoLabelFieldReader(LabelFieldReader):
    """The ``spo_list`` of a JSON line, labelled on the pieces of an ``ErnieIeTextFieldReader``
    field (``align_with``, default the first) with ``vocab_path``'s label map.

    Tensors: ``<name>`` ``[B, T, N]`` float32, each piece's labels as 0/1 (``[CLS]``, ``[SEP]``,
    padding and unlabelled pieces: ``O``), and ``<name>_triples`` ``[B, K, 5]`` int64, the gold
    triples (subject label id, subject's first and last piece, object's first and last piece;
    rows of zeros pad). A subject or object that does not start at a word's start, lies beyond the
    kept pieces, or was not found in the text (start -1, as ERNIE-kit's DuIE conversion writes
    it) labels nothing and has span -1: it counts in recall, and nothing can match it."""

    reads_json = True
    single_label = False

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        BaseFieldReader.__init__(self, config, path, scope)
        if not config["vocab_path"]:
            raise ConfigError(f"{path}.vocab_path: IeSpoLabelFieldReader needs the label map (ERNIE-kit's "
                              f"label_map_config)")
        self.vocab = Vocab(read_label_map(config["vocab_path"], f"{path}.vocab_path"))
        if config["num_labels"] and config["num_labels"] != len(self.vocab):
            raise ConfigError(f"{path}.num_labels: {config['num_labels']}, but the label map "
                              f"{config['vocab_path']} has {len(self.vocab)} labels")
        self.text_field: str = config.get("align_with") or ""

    @property
    def needs_fit(self) -> bool:
        return False

    def use_saved_vocab(self, path: str) -> None:
        self.vocab = Vocab(read_label_map(path, self.path))

    def link(self, fields: List[BaseFieldReader]) -> None:
        self.text_field = aligned_text_field(fields, ErnieIeTextFieldReader, self.text_field, self.path, "label").name

    def convert(self, text: str) -> List[Tuple[int, int, int, int, int]]:  # type: ignore[override]
        """The ``spo_list`` JSON -> ``(subject label id, subject start, end, object start, end)``."""
        try:
            spo_list = json.loads(text) if text.strip() else []
        except ValueError as e:
            raise ValueError(f"spo_list is not JSON ({e})") from None
        if not isinstance(spo_list, list):
            raise ValueError(f"spo_list must be a list, not a {type(spo_list).__name__}")
        assert self.vocab is not None
        found = []
        for i, spo in enumerate(spo_list):
            if not isinstance(spo, dict) or not {"predicate", "subject", "object"} <= set(spo):
                raise ValueError(f"spo_list[{i}] must be an object with predicate, subject and object")
            label = self.vocab.lookup(f"B-{spo['predicate']}@S")
            if label is None:
                predicates = [t[2:-2] for t in self.vocab.tokens[2::2]]
                raise UnknownLabelError(f"spo_list[{i}].predicate {spo['predicate']!r} is not in the label map "
                                        f"(predicates: {', '.join(predicates)})")
            spans = []
            for role in ("subject", "object"):
                span = spo[role]
                if not (isinstance(span, list) and len(span) == 2 and all(type(v) is int for v in span)
                        and (0 <= span[0] < span[1] or span[0] == -1)):
                    raise ValueError(f"spo_list[{i}].{role} must be [start, end] character offsets with "
                                     f"0 <= start < end (start -1: not found in the text), not {span!r}")
                spans.extend(span)
            found.append((label, *spans))
        return found

    def check_example(self, example: Dict[str, Any]) -> None:
        """Checked in ``combine``, against the text."""

    def label_names(self, value: Any) -> List[str]:
        """What ``wenxin inspect`` counts of a line: each triple's predicate."""
        assert self.vocab is not None
        triples = value[3].reshape(-1, 5) if isinstance(value, tuple) else np.asarray(value).reshape(-1, 5)
        return [self.vocab.tokens[int(label)][2:-2] for label in triples[:, 0]]

    def combine(self, value: List[Tuple[int, int, int, int, int]], example: Dict[str, Any]
                ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """-> (``[1]`` the sequence length, positions ``[M]`` and label ids ``[M]`` of the marks,
        the gold triples flattened ``[5K]``), positions counting ``[CLS]`` as 0."""
        _, _, pieces, starts, ends = example[self.text_field]
        if len(starts) == sum(pieces):  # the whole text was kept: its length is known
            # the last piece's word ends it, but for words with no pieces (a space), each one character
            trailing = len(pieces) - len(np.trim_zeros(np.asarray(pieces, dtype=np.int64), "b"))
            length = int(ends[-1]) + trailing if len(ends) else len(pieces)
            for i, (_, *offsets) in enumerate(value):
                for role, end in (("subject", offsets[1]), ("object", offsets[3])):
                    if end > length:
                        raise ValueError(f"spo_list[{i}].{role} ends at character {end}, past the end of the "
                                         f"text ({length} characters)")
        marks: Dict[Tuple[int, int], None] = {}  # (position, label), in first-seen order
        triples: List[int] = []
        first_piece = np.ones(len(starts), dtype=bool)
        first_piece[1:] = starts[1:] != starts[:-1]
        for label, *offsets in value:
            row = [label]
            for role_label, (start, end) in ((label, offsets[:2]), (label + 1, offsets[2:])):
                at_start = starts == start
                begins = np.flatnonzero(at_start & first_piece)
                inside = np.flatnonzero((at_start & ~first_piece) | ((starts > start) & (ends <= end)))
                for p in begins.tolist():
                    marks[(p + 1, role_label)] = None
                for p in inside.tolist():  # as ERNIE-kit marks them, with or without a start
                    marks[(p + 1, INSIDE)] = None
                if len(begins):
                    first = int(begins[0])
                    row.extend([first, max(first, int(inside.max()) if len(inside) else first)])
                else:  # not at a word's start, or cut off
                    row.extend([-1, -1])
            triples.extend(row)
        positions = np.fromiter((p for p, _ in marks), dtype=np.int64, count=len(marks))
        labels = np.fromiter((lab for _, lab in marks), dtype=np.int64, count=len(marks))
        return (np.asarray([len(starts) + 2], dtype=np.int64), positions, labels,
                np.asarray(triples, dtype=np.int64))

    def collate(self, values: List[Tuple[np.ndarray, ...]]) -> Dict[str, np.ndarray]:  # type: ignore[override]
        assert self.vocab is not None
        width = max(1, max(int(v[0][0]) for v in values))
        marks = np.zeros((len(values), width, len(self.vocab)), dtype=np.float32)  # [B, T, N]
        for row, (_, positions, labels, _) in enumerate(values):
            marks[row, positions, labels] = 1.0
        marks[:, :, OUTSIDE] = marks.sum(axis=-1) == 0
        count = max(1, max(len(v[3]) // 5 for v in values))
        triples = np.zeros((len(values), count, 5), dtype=np.int64)  # [B, K, 5]
        for row, value in enumerate(values):
            triples[row, :len(value[3]) // 5] = value[3].reshape(-1, 5)
        return {self.name: marks, f"{self.name}_triples": triples}

    def column(self, values: List[Any]) -> Optional[np.ndarray]:
        return None

    def tensor_specs(self) -> List[TensorSpec]:
        assert self.vocab is not None
        return [TensorSpec(self.name, [-1, -1, len(self.vocab)], "float32"),
                TensorSpec(f"{self.name}_triples", [-1, -1, 5], "int64")]
