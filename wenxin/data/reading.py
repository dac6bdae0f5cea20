"""What the token cache and the streamed reader use of a dataset reader (``RowReader``, a
narrow protocol that ``BasicDataSetReader`` implements), and the rows and vocabulary fits they
pass between them."""
from __future__ import annotations

import collections
from typing import Any, Dict, Iterable, Iterator, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from wenxin.data.field_reader import BaseFieldReader, TextFieldReader
from wenxin.data.lines import FilePart
from wenxin.data.row_formats import RowFormat

RawLine = Tuple[str, int, List[str]]  # (file, line number, columns)

FirstSeen = Dict[int, Dict[str, Tuple[str, int]]]  # field position -> label -> (file, line) where it first occurs


class FitGroup:
    """A vocab fitted on training data: the ``owner`` field's, counted over the columns at
    ``columns`` (the owner's and those of fields naming it in ``vocab_from``)."""

    def __init__(self, owner: BaseFieldReader, columns: List[int]) -> None:
        self.owner, self.columns = owner, columns

    def count(self, rows: Iterable[RawLine]) -> "collections.Counter[Any]":
        """The owner's ``fit_items`` counted over these columns of ``rows``."""
        counts: collections.Counter = collections.Counter()
        items = self.owner.fit_items
        for _, _, columns in rows:
            for col in self.columns:
                counts.update(items(columns[col]))
        return counts

    def fit(self, rows: Iterable[RawLine]) -> None:
        self.owner.fit_counts(self.count(rows))

    def fits_while_converting(self, fields: Sequence[BaseFieldReader]) -> bool:
        """Whether the token cache may fit this vocab from the conversion itself
        (``vocab_counts.PartVocab``): every field of the group converts as ``TextFieldReader``
        does (the ids ``vocab.to_ids`` gives for ``fit_items``, cut to length) with the owner's
        tokenizer."""
        tokenizer = self.owner.config.get("tokenizer")
        return all(type(f).convert is TextFieldReader.convert and type(f).fit_items is TextFieldReader.fit_items
                   and f.config.get("tokenizer") == tokenizer for f in (fields[c] for c in self.columns))


class RowReader(Protocol):
    """A dataset reader as the token cache and the streamed reader see it.

    ``iter_rows`` and ``converted`` count malformed rows in ``bad_lines`` and keep the first in
    ``skipped`` (or raise, without ``skip_bad_lines``); the cache's workers reset and read them.
    """

    name: str  # train_reader, ...
    key_path: str  # dataset_reader.train_reader
    config: Dict[str, Any]  # the validated reader section
    reader_config: Dict[str, Any]  # its config section
    fields: List[BaseFieldReader]
    row_format: RowFormat
    show_progress: bool
    bad_lines: int
    skipped: List[Tuple[str, int, str]]

    def data_files(self) -> List[str]: ...

    def iter_rows(self, parts: Optional[Sequence[FilePart]] = None,
                  on_bad: Optional[Any] = None) -> Iterator[RawLine]: ...

    def converted(self, rows: Iterable[RawLine]) -> Iterator[Tuple[RawLine, Tuple[Any, ...]]]: ...

    def first_seen(self, rows: Iterable[RawLine]) -> FirstSeen: ...

    def example_length(self, example: Tuple[Any, ...]) -> int: ...

    def collate(self, examples: Sequence[Tuple[Any, ...]]) -> Dict[str, np.ndarray]: ...

    def share_fitted_vocabs(self) -> None: ...
