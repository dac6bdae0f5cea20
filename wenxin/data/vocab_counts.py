"""Counting tokens part by part, in worker processes, and merging the parts' counts.

``PartVocab`` numbers a part's tokens as it converts them, before the vocabulary is fitted;
``PackedCounts`` is how a part's counts travel to the parent; ``merge_part_vocabs`` joins the
parts' local numbering into one, and ``merge_first_seen`` where each label first occurs.
"""
from __future__ import annotations

import collections
import itertools
from typing import Any, Dict, Iterable, List, NamedTuple, Sequence, Tuple

import numpy as np

FLUSH_ROWS = 2000  # PartVocab sums its lookups into counts every this many rows


class PartVocab:
    """Stands in for a text field's vocab while the token cache converts one part before the
    vocab is fitted: each new token gets the next part-local id, and every token looked up is
    counted (``to_ids`` sees a column's tokens before truncation, as fitting counts them). The
    parent sums the parts' counts, fits the vocab, and renumbers the ids. Each line is thus
    tokenized once, where fitting first and converting after tokenized it twice."""

    def __init__(self) -> None:
        self.token_to_id = NumberingDict()
        self.looked_up: List[List[int]] = []  # this row's and recent rows' lookups
        self._counts = np.zeros(0, dtype=np.int64)
        self._row_start = 0

    def to_ids(self, tokens: Iterable[str]) -> List[int]:
        ids = list(map(self.token_to_id.__getitem__, tokens))
        self.looked_up.append(ids)
        return ids

    def start_row(self) -> None:
        if len(self.looked_up) >= FLUSH_ROWS:
            self._flush()
        self._row_start = len(self.looked_up)

    def undo_row(self) -> None:
        """Forget the lookups of a row whose conversion failed (it is counted again in full)."""
        del self.looked_up[self._row_start:]

    def _flush(self) -> None:
        ids = np.fromiter(itertools.chain.from_iterable(self.looked_up), dtype=np.int64)
        counts = np.bincount(ids, minlength=len(self.token_to_id))
        counts[:len(self._counts)] += self._counts
        self._counts, self.looked_up = counts, []

    def counts(self) -> np.ndarray:
        """``[local ids]``: how often each token was looked up."""
        self._flush()
        return self._counts


class NumberingDict(dict):
    """token -> id; an unseen token gets the next id (``__missing__`` runs for new tokens only,
    so lookups stay in C)."""

    def __missing__(self, token: str) -> int:
        number = self[token] = len(self)
        return number


class PackedCounts(NamedTuple):
    """A part's distinct tokens and their counts, as a worker sends them to the parent. Text
    tokens travel as one newline-joined string (a pickled list of millions of ``str`` took ten
    times the memory: 1.2 GB of a 1M-line build's parent); other keys travel as a list."""

    tokens: Any  # str (newline-joined) or List[Hashable]
    size: int
    counts: np.ndarray  # [size] int64

    def token_list(self) -> List[Any]:
        if isinstance(self.tokens, str):
            return self.tokens.split("\n") if self.size else []
        return self.tokens


def pack_counts(tokens: List[Any], counts: np.ndarray) -> PackedCounts:
    """``tokens`` (distinct) packed: joined when they are all strings without a newline."""
    try:
        joined = "\n".join(tokens)
    except TypeError:  # not all strings (label values, say)
        return PackedCounts(tokens, len(tokens), counts)
    if joined.count("\n") != max(len(tokens) - 1, 0):
        return PackedCounts(tokens, len(tokens), counts)  # a token holds a newline
    return PackedCounts(joined, len(tokens), counts)


def pack_counter(counter: "collections.Counter[Any]", join: bool = True) -> PackedCounts:
    """``counter`` packed (``join``: for a trip between processes)."""
    tokens, counts = list(counter), np.fromiter(counter.values(), dtype=np.int64, count=len(counter))
    return pack_counts(tokens, counts) if join else PackedCounts(tokens, len(tokens), counts)


def as_packed(counts: Any) -> PackedCounts:
    """Counts from a worker, or a Counter of this process (not joined: it travels nowhere)."""
    return counts if isinstance(counts, PackedCounts) else pack_counter(counts, join=False)


def merge_part_vocabs(local: Sequence[PackedCounts]) -> Tuple[List[str], np.ndarray, List[np.ndarray]]:
    """The parts' local vocabs joined: every token once, its summed count, and for each part the
    index of each of its local ids in that list. One part's tokens are unpacked at a time, so the
    parent holds the distinct tokens once. (Dictionaries and NumPy here: a ``Counter.update`` per
    part costs a Python loop per token, a third of a 200k-line build.)"""
    index = NumberingDict()
    positions = []
    for part in local:
        tokens = part.token_list()
        positions.append(np.fromiter(map(index.__getitem__, tokens), dtype=np.int64, count=len(tokens)))
        del tokens
    totals = np.zeros(len(index), dtype=np.int64)
    for where, part in zip(positions, local):
        totals[where] += part.counts  # a part's local tokens are distinct, so no index repeats
    return list(index), totals, positions


def summed(parts: Sequence[PackedCounts]) -> "collections.Counter[Any]":
    """The sum of the parts' counts (see ``merge_part_vocabs`` for why not ``Counter.update``)."""
    tokens, totals, _ = merge_part_vocabs(parts)
    return collections.Counter(dict(zip(tokens, totals.tolist())))


def merge_first_seen(parts: Iterable[Iterable[Tuple[Any, Dict[str, Any]]]]) -> Dict[Any, Dict[str, List[Any]]]:
    """Where each label first occurs, over parts in file order (each part's ``(column, {label:
    where})`` pairs): the earliest part's place wins. Every column named is kept, even without
    labels."""
    merged: Dict[Any, Dict[str, List[Any]]] = {}
    for pairs in parts:
        for col, seen in pairs:
            column = merged.setdefault(col, {})
            for label, where in seen.items():
                column.setdefault(label, list(where))
    return merged
