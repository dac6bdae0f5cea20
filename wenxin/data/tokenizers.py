"""Tokenizers: turn a raw string into a list of string tokens."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

from wenxin.common.registry import RegisterSet
from wenxin.data.text_speedups import nfkc

if TYPE_CHECKING:
    from wenxin.data.vocab import Vocab


class BaseTokenizer:
    """Splits text into tokens. Subclasses implement ``split``; ``tokenize`` adds n-grams
    (``ngram: 2`` turns ``[a, b, c]`` into ``[a, b, c, ab, bc]``). A tokenizer that splits by a
    given vocab (WordPiece) sets ``needs_vocab`` and receives the field's vocab in ``bind_vocab``."""

    needs_vocab = False
    lowercase_default = True  # where the config leaves ``lowercase`` unset (null)

    def __init__(self, config: Dict[str, Any]) -> None:
        self.config = config
        lowercase = config.get("lowercase")
        self.lowercase: bool = self.lowercase_default if lowercase is None else bool(lowercase)
        self.unk_token: str = config.get("unk_token", "[UNK]")
        self.ngram: int = config.get("ngram", 1)

    def normalize(self, text: str) -> str:
        text = nfkc(text)  # full-width latin/digits -> half-width (unicodedata's NFKC, faster on long text)
        return text.lower() if self.lowercase else text

    def bind_vocab(self, vocab: "Vocab") -> None:
        """Take the field's vocab (only tokenizers with ``needs_vocab`` use it)."""

    def split(self, text: str) -> List[str]:
        raise NotImplementedError

    def spans(self, text: str) -> List[Tuple[str, int, int]]:
        """``split(text)`` with each token's character offsets in ``text``: ``(token, start, end)``,
        ``text[start:end]`` being the characters the token came from (end exclusive).

        Tokens are found in order in the text normalized one character at a time, which maps
        each normalized character back to the raw one it came from. A token that is not found
        there (a tokenizer that rewrites text beyond normalization) is a ``ValueError``."""
        pieces = [(self.normalize(char), i) for i, char in enumerate(text)]
        normalized = "".join(piece for piece, _ in pieces)
        origin = [i for piece, i in pieces for _ in piece]  # normalized position -> raw position
        result, position = [], 0
        for token in self.split(text):
            found = normalized.find(token, position)
            if found < 0 or not token:
                raise ValueError(f"{type(self).__name__}: token {token!r} is not in the text as normalized "
                                 f"character by character, so it has no offsets")
            position = found + len(token)
            result.append((token, origin[found], origin[position - 1] + 1))
        return result

    def tokenize(self, text: str) -> List[str]:
        tokens = self.split(text)
        if self.ngram == 1:
            return tokens
        grams = list(tokens)
        for n in range(2, self.ngram + 1):  # zip of shifted lists: 1.8x faster than joining slices
            grams.extend(map("".join, zip(*[tokens[k:] for k in range(n)])))
        return grams


# One CJK (or other non-spaced script) character, a run of latin letters/digits, or one symbol.
_CHAR_PATTERN = re.compile(r"[A-Za-z0-9_]+|[^\sA-Za-z0-9_]")
# What makes a token other than one character: text without it is split by list() (4.5x faster
# than the pattern on Chinese reviews, measured: 2.6 against 11.8 us a text).
_NOT_ONE_CHAR = re.compile(r"[\sA-Za-z0-9_]")


@RegisterSet.tokenizers.register("CharTokenizer")
class CharTokenizer(BaseTokenizer):
    """Character-level tokens for Chinese; latin words and numbers stay whole, unless
    ``split_latin_digits`` makes every character a token (a character tagger's tokens, so that
    ``中 国 1 9 9 8`` and the raw ``中国1998`` give the same ones), normalized on its own (``…``
    stays one token, ``...``). Whitespace separates tokens and is never one; nor, in that mode,
    is ``split_char`` (ERNIE-kit's ``\x02`` between characters)."""

    def __init__(self, config: Dict[str, Any]) -> None:
        super().__init__(config)
        self.every_char: bool = bool(config.get("split_latin_digits", False))
        self.separators = set(config.get("split_char") or "")  # e.g. ERNIE-kit's "\x02" between characters

    def split(self, text: str) -> List[str]:
        if self.every_char:  # one token per raw character, even where NFKC expands it ("…" -> "...")
            return [self.normalize(c) for c in text if not c.isspace() and c not in self.separators]
        text = self.normalize(text)
        return list(text) if _NOT_ONE_CHAR.search(text) is None else _CHAR_PATTERN.findall(text)


@RegisterSet.tokenizers.register("WhitespaceTokenizer")
class WhitespaceTokenizer(BaseTokenizer):
    """Splits on ``split_char`` (a space by default); for pre-segmented text."""

    def split(self, text: str) -> List[str]:
        sep = self.config.get("split_char", " ") or None
        return [t for t in self.normalize(text).split(sep) if t]
