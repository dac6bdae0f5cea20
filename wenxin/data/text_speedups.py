"""The one seam where optional speed-ups of text conversion plug in.

What runs when nothing is plugged in (the plain defaults):

- ``nfkc(text)`` is ``unicodedata.normalize("NFKC", text)``;
- ``batch_converter(...)`` is None, so each text of a batch takes its field reader's own per-text
  path (tokenize, look up, truncate).

``wenxin.speedups`` (hand-written for measured reasons, issue 39: a numpy normalizer, a numpy
batch converter and an optional C kernel) registers faster versions of both when it is imported.
The registry imports it with the built-in modules unless ``WENXIN_SPEEDUPS=0``. Its tests check
that it gives the same text and the same ids as these defaults. Nothing in ``wenxin.data``
imports it.
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence, Tuple

import numpy as np

# a batch's texts -> (ids [batch, length], lengths [batch]); None where it cannot take the batch
BatchIds = Callable[[Sequence[str]], Optional[Tuple[np.ndarray, np.ndarray]]]


class BatchConverterFactory(Protocol):
    """Makes the batch converter of one field (its tokenizer, vocab and length rules), or returns
    None where it has none for them. (The tokenizer and vocab are typed ``Any``: this seam sits
    below ``wenxin.data.tokenizers``, which normalizes through it.)"""

    def __call__(self, tokenizer: Any, vocab: Any, max_seq_len: int, truncation_type: int,
                 padding_id: int, fixed_length: int) -> Optional[BatchIds]: ...


def plain_nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


@dataclass(frozen=True)
class TextSpeedups:
    """What a speed-up module plugs in: a normalizer giving ``plain_nfkc``'s text, a batch
    converter factory giving the per-text path's ids, and a warm-up (a service calls it before
    its first request)."""

    name: str = "plain"
    normalize: Callable[[str], str] = plain_nfkc
    batch_converter: Optional[BatchConverterFactory] = None
    prepare: Callable[[], None] = lambda: None


PLAIN = TextSpeedups()
_active = PLAIN


def register(speedups: TextSpeedups) -> None:
    """Plug ``speedups`` in (``PLAIN`` takes them out again)."""
    global _active
    _active = speedups


def active() -> TextSpeedups:
    return _active


def nfkc(text: str) -> str:
    """``text`` in Unicode's NFKC form."""
    return _active.normalize(text)


def batch_converter(tokenizer: Any, vocab: Any, max_seq_len: int, truncation_type: int,
                    padding_id: int, fixed_length: int) -> Optional[BatchIds]:
    """The batch converter of a field, or None (the per-text path)."""
    factory = _active.batch_converter
    return factory(tokenizer, vocab, max_seq_len, truncation_type, padding_id, fixed_length) if factory else None


def prepare() -> None:
    """Build the plugged-in tables now, not at the first text that needs them."""
    _active.prepare()
