"""Field readers: turn one column of raw text into model inputs, and declare their tensors.

A field reader is the single source of truth for a field's tensors: ``tensor_specs()`` drives
``paddle.static.data`` in static mode, ``InputSpec`` at export, and the preprocessing saved
beside an exported model.
"""
from __future__ import annotations

import collections
import dataclasses
import os
from typing import Any, Dict, Hashable, Iterable, List, Optional, Tuple

import numpy as np

from wenxin.common.constants import InstanceName
from wenxin.common.errors import ConfigError, DataError
from wenxin.common.registry import RegisterSet
from wenxin.data import text_speedups
from wenxin.data.tokenizers import BaseTokenizer
from wenxin.data.vocab import PAD_TOKEN, Vocab


class UnknownLabelError(ValueError):
    """A label or tag outside the label map: an error even with ``skip_bad_lines`` (skipping it
    would silently evaluate on fewer examples, or train without a class)."""


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """Name, shape (-1 for a dynamic size) and dtype of one input tensor."""

    name: str
    shape: List[int]
    dtype: str


class BaseFieldReader:
    """Converts raw column strings of one field; subclasses fill in the details.

    Args:
        config: the validated field config (see ``FIELD`` in the task schema).
        path: JSON path of the field config, used in error messages.
        scope: the task package, for looking up task-registered tokenizers.
    """

    #: format jsonl: the field's value is any JSON value, given to ``convert`` as its JSON text
    #: (e.g. a list of objects), not a string, a number or a list of them
    reads_json = False
    #: format jsonl: the field reads the whole JSON object of a line (its text), not one key's value
    reads_record = False
    #: its prompts are conversations (ERNIEKit's SFT line without the last answer): a chat model's
    reads_conversations = False
    #: format jsonl: the value must be a string (a number or list is refused, not turned into text):
    #: a text that character offsets point into
    reads_string = False

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        self.config = config
        self.name: str = config["name"]
        self.path = path
        self.vocab: Optional[Vocab] = None

    @property
    def needs_fit(self) -> bool:
        """True when the vocab must be built from training data."""
        return False

    label_by_default = False  # a field of this class is a gold answer unless its config says otherwise

    @property
    def is_label(self) -> bool:
        """A gold answer (read to train and evaluate), not an input of the exported model."""
        flag = self.config.get("is_label")
        return self.label_by_default if flag is None else bool(flag)

    def fit(self, columns: Iterable[str]) -> None:
        """Build the vocab from the training column."""

    def fit_items(self, column: str) -> Iterable[Hashable]:
        """What fitting counts in one training column (the column itself by default). Counts of
        parts of the data add up, so the token cache counts its parts in parallel."""
        return (column,)

    def fit_counts(self, counts: "collections.Counter[Hashable]") -> None:
        """Build the vocab from the summed ``fit_items`` counts of the training columns (by
        default ``fit`` on every column, as often as it occurs)."""
        self.fit(counts.elements())  # type: ignore[arg-type]

    def use_saved_vocab(self, path: str) -> None:
        """Take the vocab a run saved (``<output>/vocab`` or a checkpoint's) instead of fitting
        one, so a resumed run keeps its token ids even if the training data changed."""
        self.set_vocab(Vocab.load(path, self._unk_token()))

    def use_vocab_tokens(self, tokens: List[str]) -> None:
        """Take the vocab that fitting gave, as its tokens in id order (from the token cache)."""
        self.set_vocab(Vocab(tokens, self._unk_token()))

    def _unk_token(self) -> Optional[str]:
        tokenizer = getattr(self, "tokenizer", None)
        return tokenizer.unk_token if isinstance(self, TextFieldReader) and tokenizer is not None else None

    def share_vocab(self, other: "BaseFieldReader") -> None:
        """Use the vocab fitted by the training reader's field of the same name."""
        self.set_vocab(other.vocab)

    def set_vocab(self, vocab: Optional[Vocab]) -> None:
        """Take ``vocab`` (a file's, a saved one, or another field's), and give it to the field's
        tokenizer if it splits by a vocab."""
        self.vocab = vocab
        tokenizer = getattr(self, "tokenizer", None)
        if tokenizer is not None and vocab is not None:
            tokenizer.bind_vocab(vocab)

    def convert(self, text: str) -> Any:
        """One raw column -> a per-example value; raises ValueError for malformed input."""
        raise NotImplementedError

    def convert_column(self, texts: List[str]) -> Optional[Dict[str, np.ndarray]]:
        """A batch's arrays straight from its raw column, equal to ``collate`` of each text's
        ``convert``, where the field has a faster way than text by text; None where it has not
        (the caller then converts text by text)."""
        return None

    def check_example(self, example: Dict[str, Any]) -> None:
        """Check this field's value against the others of one example (by field name);
        raises ValueError when they do not fit together."""

    def link(self, fields: List["BaseFieldReader"]) -> None:
        """Find the other fields of the reader this one works with (called once they all exist)."""

    def combine(self, value: Any, example: Dict[str, Any]) -> Any:
        """This field's final value given the other fields' values of one example (by name),
        e.g. word tags spread over a text's word pieces; unchanged by default."""
        return value

    def collate(self, values: List[Any]) -> Dict[str, np.ndarray]:
        """Per-example values -> batch arrays named after ``tensor_specs``."""
        raise NotImplementedError

    def tensor_specs(self) -> List[TensorSpec]:
        raise NotImplementedError

    def length(self, value: Any) -> int:
        """The padded length of one example's value (0 for fields that are not padded)."""
        return 0

    def column(self, values: List[Any]) -> Optional[np.ndarray]:
        """All examples' values as one array whose rows are this field's single tensor, when its
        values have a fixed shape (labels, scalars, vectors); batches are then row selections.
        None for fields that need padding per batch."""
        return None

    def info(self) -> Dict[str, Any]:
        """Sizes a model needs (vocab size, padding id, number of labels)."""
        return {}

    def export_files(self, folder: str) -> Dict[str, Any]:
        """Copy the files the field reads (beyond its vocab) into the export ``folder``; returns
        the config keys to write for them, as paths relative to ``folder`` (none by default)."""
        return {}

    def save_vocab(self, folder: str) -> Optional[str]:
        """Write the vocab (if any) as ``<folder>/<field>.txt``; returns the path."""
        if self.vocab is None:
            return None
        path = os.path.join(folder, f"{self.name}.txt")
        self.vocab.save(path)
        return path


def build_tokenizer(config: Optional[Dict[str, Any]], path: str, scope: Optional[str]) -> BaseTokenizer:
    """The field's tokenizer. A tokenizer checks its own config and names its keys from
    ``tokenizer.``; the field's path (``path``) goes before them here."""
    config = config or {"type": "CharTokenizer", "unk_token": "[UNK]", "lowercase": True}
    cls = RegisterSet.tokenizers.get(config["type"], scope, f"{path}.tokenizer.type")
    try:
        return cls(config)
    except ConfigError as e:
        raise ConfigError(problems=[f"{path}.{problem}" for problem in e.problems]) from None


@RegisterSet.field_readers.register("TextFieldReader")
class TextFieldReader(BaseFieldReader):
    """Tokenized text -> ids ``[batch, seq_len]`` (int64, padded) and ``<name>_seq_lens`` ``[batch]``."""

    word_pieces = False  # True where a tagger tags words that the field splits into pieces (ERNIE)

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        super().__init__(config, path, scope)
        self.tokenizer = build_tokenizer(config.get("tokenizer"), path, scope)
        self.max_seq_len: int = config["max_seq_len"]
        self.padding_id: int = config["padding_id"]
        self.raw_text_issue: Optional[str] = None  # why a tagger cannot tag raw sentences (see the reader)
        # (vocab, the speed-ups plugged in, their converter): see _batch_ids
        self._batch_cache: Optional[Tuple[Optional[Vocab], text_speedups.TextSpeedups,
                                          Optional[text_speedups.BatchIds]]] = None
        if self.tokenizer.needs_vocab and not config["vocab_path"]:
            raise ConfigError(f"{path}.vocab_path: {type(self.tokenizer).__name__} splits text by a given vocab: "
                              f"set vocab_path to the pretrained model's vocab.txt")
        if config["vocab_path"]:
            self.set_vocab(Vocab.load(config["vocab_path"], self.tokenizer.unk_token))
            self._check_padding()
            missing = [t for t in config["special_tokens"] if self.vocab is None or t not in self.vocab]
            if missing:
                raise ConfigError(f"{path}.special_tokens: {missing} not in {config['vocab_path']}")

    @property
    def needs_fit(self) -> bool:
        return self.vocab is None and self.config["need_convert"]

    def fit(self, columns: Iterable[str]) -> None:
        counts: collections.Counter = collections.Counter()
        for column in columns:
            counts.update(self.fit_items(column))
        self.fit_counts(counts)

    def fit_items(self, column: str) -> Iterable[Hashable]:
        return self.tokenizer.tokenize(column)

    def fit_counts(self, counts: "collections.Counter[Hashable]") -> None:
        specials = [PAD_TOKEN, self.tokenizer.unk_token]
        specials += [t for t in self.config["special_tokens"] if t not in specials]
        self.vocab = Vocab.from_counts(counts, specials=specials, unk_token=self.tokenizer.unk_token,  # type: ignore[arg-type]
                                       min_freq=self.config["min_freq"], max_size=self.config["max_vocab_size"])
        self._check_padding()

    def use_vocab_tokens(self, tokens: List[str]) -> None:
        super().use_vocab_tokens(tokens)
        self._check_padding()

    def _check_padding(self) -> None:
        assert self.vocab is not None
        if self.padding_id >= len(self.vocab):
            raise ConfigError(f"{self.path}.padding_id: {self.padding_id} is outside the vocab "
                              f"of {len(self.vocab)} tokens")

    def truncate(self, ids: List[int], budget: Optional[int] = None) -> List[int]:
        """``ids`` cut to ``budget`` (default ``max_seq_len``) by ``truncation_type``: 0 keeps the
        head, 1 the tail, 2 both ends."""
        n, kind = budget or self.max_seq_len, self.config["truncation_type"]
        if len(ids) <= n:
            return ids
        if kind == 0:
            return ids[:n]
        if kind == 1:
            return ids[-n:]
        head = (n + 1) // 2
        return ids[:head] + ids[len(ids) - (n - head):]

    def raw_text_problem(self, column: str) -> Optional[str]:
        """Why a tagger could not tag the raw sentence of this training column as it was
        tokenized, or None. The raw sentence joins the tokens as text is written: with a space
        only between two latin/digit tokens of which one is longer than a character (``John
        lives``), else directly (``中国1998``, ``Paris.``)."""
        try:
            spans = self.tokenizer.spans(column)
        except ValueError as e:
            return str(e)
        tokens = [token for token, _, _ in spans]
        raw = raw_sentence([column[start:end] for _, start, end in spans])  # the characters, not normalized
        again = self.tokenizer.split(raw)
        if again == tokens:
            return None
        first = next((i for i, (a, b) in enumerate(zip(tokens, again)) if a != b), min(len(tokens), len(again)))
        return (f"its tokens {tokens[max(0, first - 2):first + 3]} (from token {first}) come out of the raw "
                f"sentence {raw[:60]!r} as {again[max(0, first - 2):first + 3]}")

    def convert(self, text: str) -> np.ndarray:
        tokens = self.tokenizer.tokenize(text)
        if self.config["need_convert"]:
            if self.vocab is None:
                raise DataError(f"{self.path}: no vocab: set vocab_path or let the train_reader build one")
            ids = self.vocab.to_ids(tokens)
        else:
            ids = [int(t) for t in tokens]  # pre-converted ids, e.g. "12 7 311"
        return np.asarray(self.truncate(ids), dtype=np.int64)

    def length(self, value: np.ndarray) -> int:
        return len(value)

    def collate(self, values: List[np.ndarray]) -> Dict[str, np.ndarray]:
        ids, lengths = pad_sequences(values, self.padding_id, fixed_length(self.config))
        return {self.name: ids, f"{self.name}_{InstanceName.SEQ_LENS}": lengths}

    def convert_column(self, texts: List[str]) -> Optional[Dict[str, np.ndarray]]:
        """The whole column at once, where a speed-up plugged into ``wenxin.data.text_speedups``
        converts this field's batches; else None (each text takes ``convert``)."""
        batch_ids = self._batch_ids() if texts else None
        arrays = batch_ids(texts) if batch_ids is not None else None
        if arrays is None:
            return None
        return {self.name: arrays[0], f"{self.name}_{InstanceName.SEQ_LENS}": arrays[1]}

    def _batch_ids(self) -> Optional[text_speedups.BatchIds]:
        """The batch converter for this field's tokenizer and vocab, where one applies: this class's
        own conversion, ids from a vocab, and a converter plugged in that covers the tokenizer."""
        tokenizer, vocab, cached = self.tokenizer, self.vocab, self._batch_cache
        if cached is not None and cached[0] is vocab and cached[1] is text_speedups.active():
            return cached[2]
        usable = (type(self).convert is TextFieldReader.convert and type(self).collate is TextFieldReader.collate
                  and self.config["need_convert"] and vocab is not None)
        batch_ids = text_speedups.batch_converter(tokenizer, vocab, self.max_seq_len,
                                                  self.config["truncation_type"], self.padding_id,
                                                  fixed_length(self.config)) if usable else None
        self._batch_cache = (vocab, text_speedups.active(), batch_ids)
        return batch_ids

    def tensor_specs(self) -> List[TensorSpec]:
        return [TensorSpec(self.name, [-1, fixed_length(self.config) or -1], "int64"),
                TensorSpec(f"{self.name}_{InstanceName.SEQ_LENS}", [-1], "int64")]

    def info(self) -> Dict[str, Any]:
        return {"vocab_size": len(self.vocab) if self.vocab else 0, "padding_id": self.padding_id,
                "max_seq_len": self.max_seq_len, "vocab_from": self.config.get("vocab_from") or self.name,
                "token_ids": {t: self.vocab.lookup(t) for t in self.config["special_tokens"]} if self.vocab else {},
                "num_special": 2 + len(self.config["special_tokens"])}


@RegisterSet.field_readers.register("FloatVectorFieldReader")
class FloatVectorFieldReader(BaseFieldReader):
    """A fixed-length vector of numbers separated by ``tokenizer.split_char`` (a space by default)
    -> ``[batch, dim]`` float32, e.g. the features of a tabular example."""

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        super().__init__(config, path, scope)
        self.dim: int = config["dim"]
        if self.dim < 1:
            raise ConfigError(f"{path}.dim: FloatVectorFieldReader needs the vector length (dim >= 1)")
        self.separator = (config.get("tokenizer") or {}).get("split_char", " ") or None

    def convert(self, text: str) -> np.ndarray:
        values = text.split(self.separator)
        if len(values) != self.dim:
            raise ValueError(f"field '{self.name}': expected {self.dim} numbers, got {len(values)}")
        try:
            vector = np.asarray(values, dtype=np.float32)
        except ValueError as e:
            raise ValueError(f"field '{self.name}': {e}") from None
        if not np.isfinite(vector).all():
            raise ValueError(f"field '{self.name}': NaN or Inf among the numbers (or beyond float32)")
        return vector

    def collate(self, values: List[np.ndarray]) -> Dict[str, np.ndarray]:
        return {self.name: self.column(values)}

    def column(self, values: List[np.ndarray]) -> np.ndarray:
        if isinstance(values, np.ndarray):  # [N, dim] already (the token cache's column)
            return values.astype(np.float32, copy=False)
        return np.stack(values) if values else np.zeros((0, self.dim), np.float32)

    def tensor_specs(self) -> List[TensorSpec]:
        return [TensorSpec(self.name, [-1, self.dim], "float32")]

    def info(self) -> Dict[str, Any]:
        return {"dim": self.dim}


def _latin_or_digit(char: str) -> bool:
    return char.isascii() and char.isalnum()


def raw_sentence(tokens: List[str]) -> str:
    """Tokens joined as a sentence is written (see ``TextFieldReader.raw_text_problem``)."""
    parts: List[str] = []
    for i, token in enumerate(tokens):
        if i and _latin_or_digit(tokens[i - 1][-1]) and _latin_or_digit(token[0]) \
                and max(len(tokens[i - 1]), len(token)) > 1:
            parts.append(" ")
        parts.append(token)
    return "".join(parts)


def fixed_length(config: Dict[str, Any]) -> int:
    """The padded length of a sequence field: ``max_seq_len`` with ``pad_to_max_seq_len``, else 0
    (each batch's longest)."""
    return config["max_seq_len"] if config["pad_to_max_seq_len"] else 0


def pad_sequences(values: List[np.ndarray], padding_id: int, width: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """Id sequences -> ``[batch, width]`` padded ids (``width`` 0: the longest) and ``[batch]`` lengths."""
    lengths = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    width = width or max(1, int(lengths.max()) if len(values) else 1)
    ids = np.full((len(values), width), padding_id, dtype=np.int64)  # [B, T]
    for row, v in enumerate(values):
        ids[row, :len(v)] = v
    return ids, lengths


@RegisterSet.field_readers.register("ScalarFieldReader")
class ScalarFieldReader(BaseFieldReader):
    """A number (``data_type`` int or float) -> ``[batch]`` int64 or float32."""

    def convert(self, text: str) -> float:
        try:
            value: float = int(text) if self.config["data_type"] == "int" else float(text)
        except ValueError:
            kind = "an int" if self.config["data_type"] == "int" else "a number"
            raise ValueError(f"field '{self.name}': {text[:40]!r} is not {kind}") from None
        if self.config["data_type"] == "int" and not -2**63 <= value < 2**63:
            raise ValueError(f"field '{self.name}': {value} is outside int64")
        if self.config["data_type"] != "int" and not (np.isfinite(value) and abs(value) <= np.finfo(np.float32).max):
            raise ValueError(f"field '{self.name}': {text[:40]!r} is not a finite float32 number")
        return value

    def collate(self, values: List[float]) -> Dict[str, np.ndarray]:
        return {self.name: np.asarray(values, dtype=self._dtype())}

    def column(self, values: List[float]) -> Optional[np.ndarray]:
        return np.asarray(values, dtype=self._dtype())

    def _dtype(self) -> str:
        return "int64" if self.config["data_type"] == "int" else "float32"

    def tensor_specs(self) -> List[TensorSpec]:
        return [TensorSpec(self.name, [-1], self._dtype())]


def is_int(text: str) -> bool:
    try:
        int(text)
        return True
    except ValueError:
        return False


class PairColumn(BaseFieldReader):
    """Stands in for a field whose column another field reads as the second text of a pair
    (``pair_with``): it has no tensors of its own."""

    def __init__(self, original: BaseFieldReader, owner: str) -> None:
        super().__init__(original.config, original.path)
        self.owner = owner
        self.vocab = original.vocab  # exported with the model, so the partner can be rebuilt there

    @property
    def is_label(self) -> bool:
        return False

    def convert(self, text: str) -> None:
        return None

    def collate(self, values: List[Any]) -> Dict[str, np.ndarray]:
        return {}

    def tensor_specs(self) -> List[TensorSpec]:
        return []


def link_fields(fields: List[BaseFieldReader]) -> List[BaseFieldReader]:
    """Fields whose config names ``pair_with`` read that field's column as their second text;
    the partner becomes a ``PairColumn``. Then each field links to the others it works with
    (``BaseFieldReader.link``). Returns the fields with partners replaced."""
    names = [f.name for f in fields]
    linked = list(fields)
    for field in fields:
        partner = field.config.get("pair_with")
        if not partner:
            continue
        if not hasattr(field, "convert_pair"):
            raise ConfigError(f"{field.path}.pair_with: {field.config['reader']['type']} does not read pairs "
                              f"(ErnieTextFieldReader does)")
        if partner not in names or partner == field.name:
            raise ConfigError(f"{field.path}.pair_with: no other field named '{partner}' in this reader "
                              f"(fields: {', '.join(names)})")
        index = names.index(partner)
        if isinstance(linked[index], PairColumn) or linked[index].config.get("pair_with"):
            raise ConfigError(f"{field.path}.pair_with: '{partner}' is already part of a pair")
        linked[index] = PairColumn(fields[index], owner=field.name)
        field.pair_index = index  # type: ignore[attr-defined]
    for field in linked:
        field.link(linked)
    return linked


def convert_row(fields: List[BaseFieldReader], columns: List[str]) -> Tuple[Any, ...]:
    """One row's columns -> per-field values; a field with a pair reads its partner's column too,
    and each field may then adjust its value to the others' (``combine``)."""
    values = [field.convert_pair(text, columns[field.pair_index])  # type: ignore[attr-defined]
              if getattr(field, "pair_index", None) is not None else field.convert(text)
              for field, text in zip(fields, columns)]
    by_name = {field.name: value for field, value in zip(fields, values)}
    return tuple(field.combine(value, by_name) for field, value in zip(fields, values))
