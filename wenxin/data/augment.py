"""Text augmentation for data distillation: ERNIE-kit's three strategies, from Tang et al. 2019,
"Distilling Task-Specific Knowledge from BERT into Simple Neural Networks" (section 3.3).

For each copy of a sentence (a list of words, each with its part of speech where known), every
word is, with probability ``unk``, replaced by ``[UNK]``; else, with probability ``pos``, by a
word of the same part of speech drawn from the whole data (as often as it occurs); then, with
probability ``ngram``, the copy is cut to a random span of 1 to ``max_ngram`` words. Copies equal
to the sentence or to an earlier copy are dropped. Deterministic for a seed.

``wenxin augment`` writes ERNIE-kit's unlabeled-data lines, ``student text<TAB>teacher text``:
the words joined by spaces, and joined by ``join`` ("" for Chinese) as the teacher reads them,
without the ``[UNK]`` words: a WordPiece tokenizer would read ``[UNK]`` in raw text as the
characters ``[``, ``unk``, ``]``, so the teacher sees the sentence without the unknown word.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from wenxin.common.errors import ConfigError

UNK = "[UNK]"
Word = Tuple[str, Optional[str]]  # a word and its part of speech (None: unknown)


@dataclass(frozen=True)
class AugmentSettings:
    """The probabilities of Tang et al. (their defaults: 0.1, 0.1, 0.25, up to 5 words) and how
    many copies of each sentence to try."""

    copies: int = 20
    unk: float = 0.1
    pos: float = 0.1
    ngram: float = 0.25
    max_ngram: int = 5
    seed: int = 1

    def check(self) -> None:
        for name in ("unk", "pos", "ngram"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"--{name}: {value} is not a probability (0 to 1)")
        if self.copies < 1 or self.max_ngram < 1:
            raise ConfigError("--copies and --max_ngram must be at least 1")


def parse_tagged(line: str) -> List[Word]:
    """Words split by spaces, each ``word`` or ``word/TAG`` (the last ``/`` separates the tag)."""
    words: List[Word] = []
    for token in line.split():
        word, slash, tag = token.rpartition("/")
        words.append((word, tag) if slash and word and tag else (token, None))
    return words


def augment(sentences: Sequence[List[Word]], settings: AugmentSettings) -> Iterator[Tuple[int, List[str]]]:
    """``(index of the sentence, words)`` of each new copy (see the module docstring)."""
    settings.check()
    by_pos: Dict[str, List[str]] = {}
    for sentence in sentences:
        for word, tag in sentence:
            if tag is not None:
                by_pos.setdefault(tag, []).append(word)
    if settings.pos > 0 and not by_pos:
        raise ConfigError("--pos: same-part-of-speech replacement needs words tagged word/TAG; give --pos 0 "
                          "for untagged text")
    rng = random.Random(settings.seed)
    for index, sentence in enumerate(sentences):
        seen = {tuple(word for word, _ in sentence)}
        for _ in range(settings.copies):
            words = _one_copy(sentence, by_pos, settings, rng)
            if tuple(words) not in seen:
                seen.add(tuple(words))
                yield index, words


def _one_copy(sentence: Sequence[Word], by_pos: Dict[str, List[str]], settings: AugmentSettings,
              rng: random.Random) -> List[str]:
    """One copy of ``sentence``: each word masked, replaced by a word of its part of speech, or
    kept; then maybe cut to an n-gram of it."""
    words = []
    for word, tag in sentence:
        draw = rng.random()
        if draw < settings.unk:
            words.append(UNK)
        elif draw < settings.unk + settings.pos and tag in by_pos:
            words.append(rng.choice(by_pos[tag]))
        else:
            words.append(word)
    if words and rng.random() < settings.ngram:
        length = rng.randint(1, min(settings.max_ngram, len(words)))
        start = rng.randint(0, len(words) - length)
        words = words[start:start + length]
    return words


def teacher_text(words: Sequence[str], join: str) -> str:
    """The teacher's text of an augmented copy: its words but ``[UNK]``, joined by ``join``."""
    return join.join(word for word in words if word != UNK)
