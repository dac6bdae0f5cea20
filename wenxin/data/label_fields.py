"""Label field readers: a class label, a tag sequence, a set of labels, each to ids by a label map."""
from __future__ import annotations

import collections
from typing import Any, Dict, Hashable, Iterable, List, Optional

import numpy as np

from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.data.field_reader import (BaseFieldReader, TensorSpec, UnknownLabelError, is_int, build_tokenizer,
                                      fixed_length, pad_sequences)
from wenxin.data.vocab import Vocab


@RegisterSet.field_readers.register("LabelFieldReader")
class LabelFieldReader(BaseFieldReader):
    """A class label (any string) -> its id in a label map ``[batch]`` int64.

    The label map is loaded from ``vocab_path`` or built from the training labels, sorted.
    """

    single_label = True  # one label per example (the label counts are reported)
    label_by_default = True

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        super().__init__(config, path, scope)
        if config["vocab_path"]:
            self.vocab = Vocab.load(config["vocab_path"])
            self.display_names()

    @property
    def needs_fit(self) -> bool:
        return self.vocab is None

    def fit_counts(self, counts: "collections.Counter[Hashable]") -> None:
        self.fit(str(column) for column in counts)  # a label map depends only on which columns occur

    def fit(self, columns: Iterable[str]) -> None:
        labels = {c.strip() for c in columns}
        numeric = all(is_int(label) for label in labels)
        self.vocab = Vocab(sorted(labels, key=int if numeric else str))
        self.display_names()  # its label_names checked against the labels at once

    def display_names(self) -> List[str]:
        """The name each label id is shown with (``label_names``; empty without them). A name for
        a label the map lacks, or one name for two labels, is a ``ConfigError`` naming the key."""
        names: Dict[str, str] = self.config.get("label_names") or {}
        if not names:
            return []
        assert self.vocab is not None, "label map is built before its names are read"
        key = f"{self.path}.label_names"
        unknown = [label for label in names if self.vocab.lookup(label) is None]
        if unknown:
            raise ConfigError(f"{key}: {unknown[0]!r} is not a label of the label map {self.vocab.tokens[:10]}")
        shown = [names.get(label, label) for label in self.vocab.tokens]
        if len(set(shown)) != len(shown):
            raise ConfigError(f"{key}: two labels would be shown as the same name ({shown})")
        return shown

    def convert(self, text: str) -> int:
        label = text.strip()
        assert self.vocab is not None, "label map is built before conversion"
        idx = self.vocab.lookup(label)
        if idx is None:
            raise UnknownLabelError(f"label {label!r} is not in the label map {self.vocab.tokens[:10]}"
                                    f"{' ...' if len(self.vocab) > 10 else ''} (the training labels)")
        return idx

    def collate(self, values: List[int]) -> Dict[str, np.ndarray]:
        return {self.name: np.asarray(values, dtype=np.int64)}

    def column(self, values: List[int]) -> Optional[np.ndarray]:
        return np.asarray(values, dtype=np.int64)

    def tensor_specs(self) -> List[TensorSpec]:
        return [TensorSpec(self.name, [-1], "int64")]

    def info(self) -> Dict[str, Any]:
        return {"num_labels": len(self.vocab) if self.vocab else 0,
                "labels": list(self.vocab.tokens) if self.vocab else []}


@RegisterSet.field_readers.register("SequenceLabelFieldReader")
class SequenceLabelFieldReader(LabelFieldReader):
    """One tag per token (``B M E S``, ``B-PER I-PER O``) -> tag ids ``[batch, seq_len]`` int64,
    padded with tag 0 (models mask padding by the text field's lengths).

    Tags are split by the field's tokenizer (whitespace by default) and truncated like a text field
    of the same ``max_seq_len``; with ``align_with``, a line whose tag count differs from that text
    field's token count is malformed."""

    single_label = False

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        super().__init__(config, path, scope)
        self.tokenizer = build_tokenizer(config.get("tokenizer") or {"type": "WhitespaceTokenizer",
                                                                      "lowercase": False}, path, scope)
        self.max_seq_len: int = config["max_seq_len"]

    def fit(self, columns: Iterable[str]) -> None:
        tags = {t for c in columns for t in self.tokenizer.tokenize(c)}
        self.vocab = Vocab(sorted(tags))

    def convert(self, text: str) -> np.ndarray:  # type: ignore[override]  # a tag per token, not one label
        return self.tag_ids(self.tokenizer.tokenize(text)[:self.max_seq_len])

    def tag_ids(self, tags: List[str]) -> np.ndarray:
        """The ids of ``tags``; a tag outside the tag map is an ``UnknownLabelError``."""
        assert self.vocab is not None, "tag map is built before conversion"
        ids = []
        for tag in tags:
            idx = self.vocab.lookup(tag)
            if idx is None:
                raise UnknownLabelError(f"tag {tag!r} is not in the tag map {self.vocab.tokens[:20]} "
                                        f"(the training tags)")
            ids.append(idx)
        return np.asarray(ids, dtype=np.int64)

    def column(self, values: List[np.ndarray]) -> Optional[np.ndarray]:  # type: ignore[override]
        return None  # tag sequences are padded per batch

    def check_example(self, example: Dict[str, Any]) -> None:
        other = self.config["align_with"]
        if other and len(example[self.name]) != len(example[other]):
            raise ValueError(f"{len(example[self.name])} tags in '{self.name}' for "
                             f"{len(example[other])} tokens in '{other}'")

    def collate(self, values: List[np.ndarray]) -> Dict[str, np.ndarray]:  # type: ignore[override]
        ids, _ = pad_sequences(values, 0, fixed_length(self.config))
        return {self.name: ids}

    def tensor_specs(self) -> List[TensorSpec]:
        return [TensorSpec(self.name, [-1, fixed_length(self.config) or -1], "int64")]


@RegisterSet.field_readers.register("MultiLabelFieldReader")
class MultiLabelFieldReader(LabelFieldReader):
    """Any number of labels of one example, separated by ``tokenizer.split_char`` (a space by
    default; ``0 2``, or names with a ``vocab_path`` label map) -> a multi-hot ``[batch,
    num_labels]`` float32 row. Labels are the ids ``0..num_labels-1`` when the field sets
    ``num_labels`` (ERNIE-kit's form), else the label map's or the training data's labels. An
    empty column means no label."""

    single_label = False

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        super().__init__(config, path, scope)
        self.separator = (config.get("tokenizer") or {}).get("split_char", " ") or None
        if self.vocab is None and config.get("num_labels"):
            self.vocab = Vocab([str(i) for i in range(config["num_labels"])])

    def fit(self, columns: Iterable[str]) -> None:
        labels = {label for c in columns for label in c.split(self.separator) if label}
        if labels and all(is_int(label) and int(label) >= 0 for label in labels):
            self.vocab = Vocab([str(i) for i in range(max(int(label) for label in labels) + 1)])
        else:
            self.vocab = Vocab(sorted(labels))

    def convert(self, text: str) -> np.ndarray:  # type: ignore[override]
        assert self.vocab is not None, "label map is built before conversion"
        row = np.zeros(len(self.vocab), dtype=np.float32)
        for label in text.split(self.separator):
            if not label:
                continue
            idx = self.vocab.lookup(label.strip())
            if idx is None:
                raise UnknownLabelError(f"label {label!r} is not one of the {len(self.vocab)} labels "
                                        f"{self.vocab.tokens[:10]}{' ...' if len(self.vocab) > 10 else ''}")
            row[idx] = 1.0
        return row

    def collate(self, values: List[np.ndarray]) -> Dict[str, np.ndarray]:  # type: ignore[override]
        return {self.name: self.column(values)}

    def column(self, values: List[np.ndarray]) -> np.ndarray:  # type: ignore[override]
        width = len(self.vocab) if self.vocab is not None else 0
        if isinstance(values, np.ndarray):  # [N, width] already (the token cache's column)
            return values.astype(np.float32, copy=False)
        return np.stack(values) if values else np.zeros((0, width), np.float32)

    def tensor_specs(self) -> List[TensorSpec]:
        return [TensorSpec(self.name, [-1, len(self.vocab) if self.vocab is not None else -1], "float32")]
