"""ERNIE-M's inputs: its SentencePiece tokenizer over its ``vocab.txt`` and the text field reader
of its ``[CLS] a [SEP]`` / ``[CLS] a [SEP] [SEP] b [SEP]`` inputs, whose positions
start at 2 (ERNIE-M's position table reserves the first two rows, as XLM-R's does).

The tokenizer turns SentencePiece's pieces into tokens by one of two rules (``piece_rules``), and
the two give other ids on most texts (960 of the 1,174 fixture strings):

- ``paddlenlp`` (the default): PaddleNLP's ``ErnieMTokenizer``, which splits out every CJK character,
  punctuation mark and digit run (``split_piece``); checked against PaddleNLP 2.8.1 in
  ``tests/fast/test_ernie_m_tokenizer.py``;
- ``erniekit``: ERNIE-kit's ``FullTokenizerErnieM``, which keeps the pieces as SentencePiece gives
  them (lone ``▁`` pieces, multi-character Chinese pieces) after its text cleaning
  (``erniekit_clean``), and encodes a number followed by a comma again without its word-start mark
  (``erniekit_pieces``); checked against ERNIE-kit's own code in the same test file. ERNIE-kit
  files translate to it, so their jobs feed the model the ids ERNIE-kit fed it.
"""
from __future__ import annotations

import os
import re
import unicodedata
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from wenxin.common.errors import ConfigError
from wenxin.common.files import file_sha256
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import validate
from wenxin.config.task_schema import TOKENIZER
from wenxin.data.ernie_fields import POS_IDS, SENT_IDS, ErnieExample, ErnieTextFieldReader, truncate_pair
from wenxin.data.field_reader import TensorSpec
from wenxin.data.tokenizers import BaseTokenizer

WORD_START = "\u2581"  # SentencePiece's mark of a word's start
PUNCTUATION = frozenset(",;:.?!~，；：。？！《》【】")
POSITION_OFFSET = 2


def _own_piece(char: str) -> bool:
    """Characters ERNIE-M makes pieces of their own: CJK ideographs (U+4E00-U+9FFF) and its
    punctuation."""
    return "\u4e00" <= char <= "\u9fff" or char in PUNCTUATION


def split_piece(piece: str) -> List[str]:
    """ERNIE-M's rules on one SentencePiece piece: word-start marks are dropped except at the
    piece's start, CJK characters and punctuation become pieces of their own, and a piece is cut
    where digits meet other characters (``▁abc123`` -> ``▁abc``, ``123``)."""
    if piece == WORD_START:
        return []
    parts: List[str] = []
    start = 0
    for i, char in enumerate(piece):
        if char == WORD_START:
            continue
        if _own_piece(char):
            if i > start and piece[start:i] != WORD_START:
                parts.append(piece[start:i])
            parts.append(char)
            start = i + 1
        elif i > 0 and char.isdigit() != piece[i - 1].isdigit():
            if i > start and piece[start:i] != WORD_START:
                parts.append(piece[start:i])
            start = i
    if len(piece) > start:
        parts.append(piece[start:])
    return parts


# ERNIE-kit's clean_text: typographic quotes and the long dash as ASCII
_ERNIEKIT_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'", "\u2014": "-"})


def erniekit_clean(text: str) -> str:
    """ERNIE-kit's ``clean_text`` before SentencePiece: typographic quotes and the em dash become
    ASCII, control and format characters (Unicode Cc, Cf; not tab, newline, return) are dropped, and
    every whitespace character (those three and Unicode Zs) becomes a space."""
    kept = []
    for char in text.translate(_ERNIEKIT_QUOTES):
        category = unicodedata.category(char)
        if char in "\t\n\r" or category == "Zs":
            kept.append(" ")
        elif category not in ("Cc", "Cf"):
            kept.append(char)
    return "".join(kept)


def erniekit_pieces(encode: Callable[[str], List[str]], text: str) -> List[str]:
    """ERNIE-kit's ``encode_pieces``: SentencePiece's pieces of the cleaned text, where a piece that
    ends in a digit and a comma (``▁1,``) is encoded again without its word-start marks, then the
    comma. (ERNIE-kit means to drop the word-start mark the second encoding adds; under Python 3 its
    test compares text with bytes and never holds, so the mark stays, and so it does here.)"""
    pieces: List[str] = []
    for piece in encode(erniekit_clean(text)):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            pieces.extend(encode(piece[:-1].replace(WORD_START, "")))
            pieces.append(",")
        else:
            pieces.append(piece)
    return pieces


_SPECIALS = re.compile(r"(\[CLS\]|\[SEP\]|\[PAD\]|\[UNK\]|\[MASK\])|([^\[]+|\[)")


@RegisterSet.tokenizers.register("ErnieMTokenizer")
class ErnieMTokenizer(BaseTokenizer):
    """ERNIE-M's tokenizer: SentencePiece (``spm_model_file``, ERNIE-M's
    ``sentencepiece.bpe.model``) and ERNIE-M's piece rules (``split_piece``); ids come from the
    field's ``vocab_path`` (ERNIE-M's ``vocab.txt``), unknown pieces are ``unk_token``. Text that
    spells a special token (``[SEP]``) is read as text, as PaddleNLP reads it. Lower-cases only
    with ``lowercase: true`` (ERNIE-M is cased). ``piece_rules``: PaddleNLP's (``split_piece``) or
    ERNIE-kit's (``erniekit_pieces``), see the module's docstring."""

    needs_vocab = True
    lowercase_default = False

    def __init__(self, config: Dict[str, Any]) -> None:
        super().__init__(config)
        path = config.get("spm_model_file") or ""
        if not path:
            raise ConfigError("tokenizer.spm_model_file: ErnieMTokenizer needs ERNIE-M's SentencePiece model "
                              "(sentencepiece.bpe.model)")
        if not os.path.isfile(path):
            raise ConfigError(f"tokenizer.spm_model_file: file not found: {path}")
        try:
            import sentencepiece
        except ImportError:
            raise ConfigError("tokenizer.type: ErnieMTokenizer needs the sentencepiece package: "
                              "pip install sentencepiece (or wenxin[ernie-m])") from None
        self.model_file = path
        self.piece_rules = config.get("piece_rules", "paddlenlp")
        self.processor = sentencepiece.SentencePieceProcessor()
        try:
            self.processor.Load(path)
        except (OSError, RuntimeError) as e:
            raise ConfigError(f"tokenizer.spm_model_file: {path} is not a SentencePiece model ({e})") from None

    def content_digest(self) -> str:
        """The SentencePiece model's SHA-256 (the token cache keys on it: a model replaced at the
        same path converts again)."""
        return file_sha256(self.model_file)

    def split(self, text: str) -> List[str]:
        if not text:
            return []
        if self.lowercase:  # as PaddleNLP: spellings of the special tokens keep their case
            text = _SPECIALS.sub(lambda m: m.group(1) or m.group(2).lower(), text)
        if self.piece_rules == "erniekit":
            return erniekit_pieces(self.processor.EncodeAsPieces, text)
        return [part for piece in self.processor.EncodeAsPieces(text) for part in split_piece(piece)]

    def tokenize(self, text: str) -> List[str]:
        return self.split(text)


@RegisterSet.field_readers.register("ErnieMTextFieldReader")
class ErnieMTextFieldReader(ErnieTextFieldReader):
    """ERNIE-M's text: ``[CLS] a [SEP]``, or with ``pair_with`` ``[CLS] a [SEP] [SEP] b [SEP]``
    (truncated to ``max_seq_len - 4`` longest first), the whole text tokenized at once by
    ``ErnieMTokenizer`` (the default; give ``tokenizer.spm_model_file``). The tensors of
    ``ErnieTextFieldReader`` but the token types (ERNIE-M has none); positions start at 2.
    ERNIE-kit's ``ErnieTextFieldReaderForMultilingual``."""

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        tokenizer = config.get("tokenizer") or {}
        if tokenizer.get("type", "ErnieMTokenizer") != "ErnieMTokenizer":
            raise ConfigError(f"{path}.tokenizer.type: {tokenizer['type']!r}: ERNIE-M reads text with ErnieMTokenizer "
                              f"(its SentencePiece model)")
        config = {**config, "tokenizer": validate({**tokenizer, "type": "ErnieMTokenizer"}, TOKENIZER,
                                                  f"{path}.tokenizer")}
        super().__init__(config, path, scope)
        if self.max_seq_len < 4 and config.get("pair_with"):
            raise ConfigError(f"{path}.max_seq_len: {self.max_seq_len} leaves no room for a pair")

    def words(self, text: str) -> List[str]:
        return [text] if text.strip() else []

    def convert_pair(self, text_a: str, text_b: str) -> ErnieExample:
        a, b = truncate_pair(self._ids(text_a), self._ids(text_b), self.max_seq_len - 4)
        ids = [self.cls_id] + a + [self.sep_id, self.sep_id] + b + [self.sep_id]
        return np.asarray(ids, dtype=np.int64), np.zeros(len(ids), dtype=np.int64), []

    def collate(self, values: List[ErnieExample]) -> Dict[str, np.ndarray]:  # type: ignore[override]
        batch = super().collate(values)
        del batch[f"{self.name}_{SENT_IDS}"]  # ERNIE-M has no token types
        batch[f"{self.name}_{POS_IDS}"] = batch[f"{self.name}_{POS_IDS}"] + POSITION_OFFSET
        return batch

    def tensor_specs(self) -> List[TensorSpec]:
        return [spec for spec in super().tensor_specs() if spec.name != f"{self.name}_{SENT_IDS}"]

    def info(self) -> Dict[str, Any]:
        return {**super().info(), "ernie_m": True, "position_offset": POSITION_OFFSET}


__all__ = ["ErnieMTextFieldReader", "ErnieMTokenizer", "erniekit_clean", "erniekit_pieces", "split_piece"]
