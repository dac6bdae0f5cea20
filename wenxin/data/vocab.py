"""Vocabularies: token <-> id tables, built from data or loaded from a file."""
from __future__ import annotations

import collections
import itertools
import logging
import os
from typing import Dict, Iterable, List, Optional, Sequence

from wenxin.common.errors import DataError
from wenxin.data.lines import iter_lines

logger = logging.getLogger("wenxin")

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"


class Vocab:
    """An ordered token table; a token's id is its position.

    Args:
        tokens: the tokens in id order.
        unk_token: token returned for unknown pieces (None: unknown pieces are an error).
    """

    def __init__(self, tokens: Sequence[str], unk_token: Optional[str] = None) -> None:
        self.tokens: List[str] = list(tokens)
        self.token_to_id: Dict[str, int] = {}
        for i, tok in enumerate(self.tokens):
            self.token_to_id.setdefault(tok, i)
        self.unk_token = unk_token
        self.unk_id = self.token_to_id.get(unk_token) if unk_token is not None else None

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self.token_to_id

    def lookup(self, token: str) -> Optional[int]:
        """The id of ``token``, the unknown id, or None when there is no unknown token."""
        return self.token_to_id.get(token, self.unk_id)

    def to_ids(self, tokens: Iterable[str]) -> List[int]:
        return list(map(self.token_to_id.get, tokens, itertools.repeat(self.unk_id)))  # type: ignore[arg-type]

    @classmethod
    def build(cls, token_lists: Iterable[Iterable[str]], specials: Sequence[str] = (PAD_TOKEN, UNK_TOKEN),
              unk_token: Optional[str] = UNK_TOKEN, min_freq: int = 1, max_size: int = 0) -> "Vocab":
        """Count tokens; most frequent first, ties broken alphabetically, so builds are reproducible."""
        counter: collections.Counter = collections.Counter()
        for tokens in token_lists:
            counter.update(tokens)
        return cls.from_counts(counter, specials, unk_token, min_freq, max_size)

    @classmethod
    def from_counts(cls, counter: "collections.Counter[str]", specials: Sequence[str] = (PAD_TOKEN, UNK_TOKEN),
                    unk_token: Optional[str] = UNK_TOKEN, min_freq: int = 1, max_size: int = 0) -> "Vocab":
        """``build`` from token counts (which can be summed over parts of the data)."""
        excluded = set(specials)
        ranked = sorted(t for t, c in counter.items() if c >= min_freq and t not in excluded)  # ties: alphabetical
        ranked.sort(key=counter.__getitem__, reverse=True)  # stable, so ties stay alphabetical; C-level keys
        if max_size:
            ranked = ranked[:max(0, max_size - len(specials))]
        return cls(list(specials) + ranked, unk_token)

    @classmethod
    def load(cls, path: str, unk_token: Optional[str] = None) -> "Vocab":
        """One token per line: ``token``, or ``token<TAB>id`` as ERNIE-kit writes them, or
        ``token<TAB>anything``. The id is the second column when the second columns are exactly
        the ids 0..N-1 (in any order); otherwise it is the line number (0-based)."""
        if not os.path.isfile(path):
            raise DataError(f"vocab file not found: {path}")
        tokens: List[str] = []
        seconds: List[str] = []
        seen: Dict[str, int] = {}
        for lineno, line, problem in iter_lines(path):
            if problem is not None:
                raise DataError(f"{path}:{lineno}: {problem}")
            columns = line.split("\t")
            token = columns[0]
            seconds.append(columns[1].strip() if len(columns) > 1 else "")
            if not token:
                raise DataError(f"{path}:{lineno}: empty token in vocab file")
            if token in seen:
                raise DataError(f"{path}:{lineno}: token {token!r} repeats line {seen[token]}")
            seen[token] = lineno
            tokens.append(token)
        if not tokens:
            raise DataError(f"vocab file is empty: {path}")
        tokens = _ordered_by_explicit_ids(tokens, seconds, path)
        if unk_token is not None and unk_token not in tokens:
            raise DataError(f"{path}: vocab has no unknown token {unk_token!r}")
        return cls(tokens, unk_token)

    def save(self, path: str) -> None:
        """One token per line, in id order (the line number is the id)."""
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(t + "\n" for t in self.tokens)


def _ordered_by_explicit_ids(tokens: List[str], seconds: List[str], path: str) -> List[str]:
    """Tokens in id order, when the second columns hold the ids 0..N-1 (ERNIE-kit's
    ``token<TAB>id``); unchanged when they hold something else (counts, or nothing)."""
    if not all(s.isdigit() for s in seconds):
        return tokens
    ids = [int(s) for s in seconds]
    if ids == list(range(len(tokens))):
        return tokens
    if sorted(ids) != list(range(len(tokens))):
        logger.warning("%s: the second column is not the ids 0..%d (repeated or missing ids); ids are the "
                       "line numbers", path, len(tokens) - 1)
        return tokens
    ordered = [""] * len(tokens)
    for token, index in zip(tokens, ids):
        ordered[index] = token
    return ordered
