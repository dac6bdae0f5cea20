"""What a train reader says about its data once it is loaded: each label map with its counts and
the labels too rare to be real classes, and whether a tagger's raw sentences give its training
tokens."""
from __future__ import annotations

import collections
import itertools
import logging
from typing import Callable, Iterable, List, Optional

from wenxin.data.field_reader import BaseFieldReader, TextFieldReader
from wenxin.data.label_fields import LabelFieldReader
from wenxin.data.reading import FirstSeen, RawLine

logger = logging.getLogger(__name__)

RARE_LABEL_COUNT = 3  # a label seen this often or less in a training set of 50+ lines is suspicious
RAW_TEXT_CHECK_LINES = 2000  # training lines whose tagged tokens must come out of their raw sentence


def first_seen(fields: List[BaseFieldReader], rows: Iterable[RawLine]) -> FirstSeen:
    """For each single-label field (by position), where each label first occurs."""
    cols = [col for col, f in enumerate(fields) if isinstance(f, LabelFieldReader) and f.single_label]
    first: FirstSeen = {col: {} for col in cols}
    for path, lineno, columns in rows:
        for col in cols:
            first[col].setdefault(columns[col].strip(), (path, lineno))
    return first


def report_labels(reader_name: str, fields: List[BaseFieldReader], first: FirstSeen,
                  label_ids: Optional[Callable[[int], Iterable[int]]], examples: int) -> None:
    """Log each label map with its counts (``label_ids(col)``: the label ids of the column, None
    for a streamed reader, whose maps are logged alone), and warn about labels so rare that they
    are more likely a stray header, an empty label or a typo (``01``) than a class."""
    for col, seen in first.items():
        field = fields[col]
        if field.vocab is None:
            continue
        names = field.vocab.tokens
        if label_ids is None:
            logger.info("%s: label map of '%s' (%d labels): %s", reader_name, field.name, len(names),
                        ", ".join(f"{i}={name!r}" for i, name in enumerate(names)))
            continue
        counts = collections.Counter(label_ids(col))
        logger.info("%s: label map of '%s' (%d labels): %s", reader_name, field.name, len(names),
                    ", ".join(f"{i}={name!r} x{counts.get(i, 0)}" for i, name in enumerate(names)))
        if examples < 50:
            continue
        for i, name in enumerate(names):
            if counts.get(i, 0) <= RARE_LABEL_COUNT:
                where = "{}:{}".format(*seen[name]) if name in seen else "no line"
                logger.warning("%s: label %r of '%s' occurs in only %d of %d lines (first at %s): a stray "
                               "header, an empty label or a typo adds a class silently", reader_name, name,
                               field.name, counts.get(i, 0), examples, where)


def check_raw_text(fields: List[BaseFieldReader], rows: Callable[[], Iterable[RawLine]]) -> None:
    """For each text field that tags align with (a tagger's input) and that is to tag raw
    sentences (``inference_text: raw``), check on the first ``rows()`` that the tokenizer forms
    the training tokens from the raw sentence; the first line that it does not is kept in the
    field's ``raw_text_issue`` (an error at export) and logged."""
    by_name = {f.name: f for f in fields}
    for tags in fields:
        text = by_name.get(tags.config.get("align_with") or "")
        if not isinstance(text, TextFieldReader) or text.word_pieces or text.config["inference_text"] != "raw":
            continue
        col = fields.index(text)
        for path, lineno, columns in itertools.islice(rows(), RAW_TEXT_CHECK_LINES):
            problem = text.raw_text_problem(columns[col])
            if problem:
                text.raw_text_issue = (f"{path}:{lineno}: {problem}; the tagger would tag raw sentences "
                                       f"with other tokens than it learned. Set {text.path}.tokenizer to "
                                       f"one that forms the training tokens from raw text (for one tag per "
                                       f"character: CharTokenizer with split_latin_digits: true), or "
                                       f"{text.path}.inference_text: tokenized if inference input will be "
                                       f"written like the training column")
                logger.warning("%s: %s", text.name, text.raw_text_issue)
                break
