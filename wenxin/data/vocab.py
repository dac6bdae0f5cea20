"""Vocabularies: token <-> id tables, built from data or loaded from a file."""
from __future__ import annotations

import collections
import itertools
import logging
import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

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

    def __init__(self, tokens: Sequence[str], unk_token: Optional[str] = None,
                 token_to_id: Optional[Dict[str, int]] = None) -> None:
        self.tokens: List[str] = list(tokens)
        # a token listed twice maps to its later id, as PaddleNLP's and ERNIE-kit's loaders do
        self.token_to_id: Dict[str, int] = dict(token_to_id) if token_to_id is not None else \
            {tok: i for i, tok in enumerate(self.tokens)}
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
        """One token per line, read as ERNIE-kit and PaddleNLP read them: the line stripped, then
        ``token``, or ``token<TAB>id`` as ERNIE-kit writes them, or ``token<TAB>anything``. The id
        is the second column when the lines' ids (the second column, else the line number) are
        exactly 0..N-1; otherwise it is the line number (0-based). A token on several lines maps
        to its last line's id (logged once, with the lines); every id keeps its line's token."""
        if not os.path.isfile(path):
            raise DataError(f"vocab file not found: {path}")
        tokens: List[str] = []
        seconds: List[Optional[str]] = []
        lines: Dict[str, List[int]] = collections.defaultdict(list)
        for lineno, line, problem in iter_lines(path):
            if problem is not None:
                raise DataError(f"{path}:{lineno}: {problem}")
            columns = line.strip().split("\t")  # ERNIE-kit strips the line first: "<TAB>5" is the token "5"
            token = columns[0].strip()
            if not token:
                raise DataError(f"{path}:{lineno}: empty token in vocab file")
            seconds.append(columns[1].strip() if len(columns) > 1 else None)
            lines[token].append(lineno)
            tokens.append(token)
        if not tokens:
            raise DataError(f"vocab file is empty: {path}")
        ids = _explicit_ids(seconds, path)
        repeated = {token: where for token, where in lines.items() if len(where) > 1}
        if repeated:
            shown = "; ".join(f"{token!r} on lines {', '.join(map(str, where))}"
                              for token, where in list(repeated.items())[:5])
            warn_once(path, "%s: %d tokens are listed more than once (%s%s); each maps to its last line's id, as "
                      "PaddleNLP and ERNIE-kit read it", len(repeated), shown, ", ..." if len(repeated) > 5 else "")
        ordered = [""] * len(tokens)
        token_to_id: Dict[str, int] = {}
        for token, index in zip(tokens, ids):
            ordered[index] = token
            token_to_id[token] = index  # the later line wins
        if unk_token is not None and unk_token not in token_to_id:
            raise DataError(f"{path}: vocab has no unknown token {unk_token!r}")
        return cls(ordered, unk_token, token_to_id)

    def save(self, path: str) -> None:
        """One token per line, in id order (the line number is the id)."""
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(t + "\n" for t in self.tokens)


_WARNED: Set[Tuple[str, str]] = set()


def warn_once(path: str, message: str, *args: Any) -> None:
    """A vocab file's warning, logged once a process: a script builds readers over one vocab many
    times, and the file says the same each time."""
    key = (os.path.realpath(path), message)
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning(message, path, *args)


def _explicit_ids(seconds: List[Optional[str]], path: str) -> List[int]:
    """Each line's id: its second column (ERNIE-kit's ``token<TAB>id``; a line without one takes
    its line number) when those are exactly the ids 0..N-1, else the line numbers (the second
    columns hold counts, say)."""
    numbers = list(range(len(seconds)))
    if not all(s is None or s.isdigit() for s in seconds) or all(s is None for s in seconds):
        return numbers
    ids = [int(s) if s is not None else n for n, s in zip(numbers, seconds)]
    if sorted(ids) != numbers:
        warn_once(path, "%s: the second column is not the ids 0..%d (repeated or missing ids); ids are the "
                  "line numbers", len(seconds) - 1)
        return numbers
    return ids
