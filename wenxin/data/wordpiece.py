"""``FullTokenizer``: BERT/ERNIE WordPiece tokenization (ERNIE-kit's name for it).

Basic tokenization (control characters dropped, whitespace normalized, CJK characters split,
punctuation split, optional lower-casing and accent stripping), then greedy longest-match
WordPiece with ``##`` continuations; a word longer than ``max_input_chars_per_word`` characters,
or one the vocab cannot spell, becomes the unknown token.

The work is done by the ``tokenizers`` library (Rust), configured to reproduce PaddleNLP 2.8's
``ErnieTokenizer``/``BertTokenizer`` exactly (``tests/test_wordpiece.py`` checks 1,200 strings
and 400 pairs against fixtures that PaddleNLP wrote). PaddleNLP also isolates symbols (Unicode
category S, e.g. emoji and currency signs); ERNIE-kit and Google's BERT keep them inside words:
``split_symbols: false`` gives that behaviour.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.data.tokenizers import BaseTokenizer
from wenxin.data.vocab import Vocab

# PaddleNLP's _is_symbol: category S, and a few letters and numbers it lists by code point
SYMBOLS = "[\\p{S}\u00AD\u00B2\u00BA\u3007\u00B5\u00D8\u014B\u01B1]"

SENTENCEPIECE_MARK = "\u2581"  # how a SentencePiece vocabulary marks a word's first piece


@RegisterSet.tokenizers.register("FullTokenizer")
class FullTokenizer(BaseTokenizer):
    """WordPiece over a pretrained model's ``vocab.txt`` (the text field's ``vocab_path``).

    Config: ``lowercase`` (default true; also strips accents unless ``strip_accents`` says
    otherwise), ``split_symbols`` (default true, as PaddleNLP), ``max_input_chars_per_word``
    (default 100), ``unk_token``.
    """

    needs_vocab = True

    def __init__(self, config: Dict[str, Any]) -> None:
        super().__init__(config)
        strip = config.get("strip_accents")
        self.strip_accents: bool = self.lowercase if strip is None else bool(strip)
        self.split_symbols: bool = config.get("split_symbols", True)
        self.max_chars: int = config.get("max_input_chars_per_word", 100)
        self._engine: Any = None
        self.vocab: Optional[Vocab] = None

    def bind_vocab(self, vocab: Vocab) -> None:
        from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

        if self.unk_token not in vocab:
            raise ConfigError(f"the vocab has no unknown token {self.unk_token!r}")
        marked = sum(1 for token in vocab.tokens if token.startswith(SENTENCEPIECE_MARK))
        if marked * 10 > len(vocab):  # WordPiece marks word pieces with ##, SentencePiece word starts with ▁
            raise ConfigError(f"the vocab is a SentencePiece vocabulary ({marked} of {len(vocab)} tokens start with "
                              f"'{SENTENCEPIECE_MARK}', as ERNIE-M's does); FullTokenizer reads WordPiece vocab.txt "
                              f"files: read ERNIE-M's with ErnieMTextFieldReader and ErnieMTokenizer")
        engine = Tokenizer(models.WordPiece(dict(vocab.token_to_id), unk_token=self.unk_token,
                                            max_input_chars_per_word=self.max_chars))
        engine.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                       strip_accents=self.strip_accents, lowercase=self.lowercase)
        splitters: List[pre_tokenizers.PreTokenizer] = [pre_tokenizers.BertPreTokenizer()]
        if self.split_symbols:
            splitters.append(pre_tokenizers.Split(Regex(SYMBOLS), "isolated"))
        engine.pre_tokenizer = pre_tokenizers.Sequence(splitters)
        self._engine, self.vocab = engine, vocab

    def _encode(self, text: str) -> Any:
        if self._engine is None:
            raise ConfigError("FullTokenizer needs the model's vocab.txt: set the field's vocab_path")
        return self._engine.encode(text, add_special_tokens=False)

    def tokenize(self, text: str) -> List[str]:
        return self._encode(text).tokens

    def split(self, text: str) -> List[str]:
        return self.tokenize(text)

    def to_ids(self, text: str) -> List[int]:
        """The WordPiece ids of ``text`` (no ``[CLS]``/``[SEP]``)."""
        return self._encode(text).ids

    def to_ids_batch(self, texts: List[str]) -> List[List[int]]:
        """``to_ids`` of many texts at once (the library spreads them over threads)."""
        if self._engine is None:
            self._encode("")
        return [e.ids for e in self._engine.encode_batch(texts, add_special_tokens=False)]


def detokenize(tokens: List[str]) -> str:
    """WordPiece tokens back to text: ``##`` pieces join their word, a space goes between two
    latin/digit words, nothing between CJK characters or around punctuation."""
    text = ""
    for token in tokens:
        if token.startswith("##"):
            text += token[2:]
        elif text and _latin(text[-1]) and _latin(token[0]):
            text += " " + token
        else:
            text += token
    return text


def _latin(char: str) -> bool:
    return char.isascii() and char.isalnum()
