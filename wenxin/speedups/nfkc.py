"""``unicodedata.normalize("NFKC", text)``, faster on long text that needs it, with the same result.

Hand-written for a measured reason (issue 39): on the sentiment example's Chinese reviews, NFKC
took 70% of converting a batch of texts to ids. About 6% of their characters change (full-width
punctuation such as ``，`` to ``,``; ``…`` to ``...``), and CPython then decomposes and recomposes the
whole text, at 60-140 ns a character. Here a table lookup in numpy maps the characters instead.

That is exact when every character of the text is *context-free*: its own canonical combining
class is 0, it composes with no character before it, and neither does the first character of its
compatibility decomposition. Then no character's decomposition reorders or composes with its
neighbours', so the text's NFKC is the concatenation of each character's own NFKC. A text with any
other character (a combining mark, a Hangul vowel jamo, ...) goes to ``unicodedata`` whole, as
does a short text (below ``MIN_LENGTH``) or one already normalized (``unicodedata`` checks those
in one quick pass). The tables come from the running Python's own ``unicodedata`` (its Unicode
version), built once per process on first use (about 0.2 s).
"""
from __future__ import annotations

import unicodedata
from typing import Dict, Optional, Set, Tuple

import numpy as np

# below this length unicodedata is as fast (measured on review text: 2.3 µs of numpy calls against
# about 60 ns a character; 2.5 µs both at 48 characters)
MIN_LENGTH = 48
_UNCHANGED, _ONE, _MANY, _CONTEXT = 0, 1, 2, 3  # a character's class: what NFKC does to it
_LAST = 0x110000
_HANGUL_BACKWARD = [*range(0x1161, 0x1176), *range(0x11A8, 0x11C3)]  # vowel and trailing jamo compose backward
_Tables = Tuple[np.ndarray, np.ndarray, Dict[int, str]]
_TABLES: Optional[_Tables] = None


def _decompositions() -> Dict[int, str]:
    """Every code point's decomposition field, where it has one (5,795 of them)."""
    decomposition = unicodedata.decomposition
    return {code: field for code in range(_LAST) if (field := decomposition(chr(code)))}


def _composes_backward(decompositions: Dict[int, str]) -> Set[int]:
    """Every character that canonical composition joins to a character before it: the second of
    each primary composite's two-character decomposition, and Hangul's vowel and trailing jamo."""
    backward = set(_HANGUL_BACKWARD)
    for code, field in decompositions.items():
        parts = field.split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            first, second = (chr(int(part, 16)) for part in parts)
            if unicodedata.normalize("NFC", first + second) == chr(code):  # not excluded from composition
                backward.add(ord(second))
    return backward


def _tables() -> _Tables:
    """``(classes [0x110000] uint8, one [0x110000] uint32, many)``: each code point's class; what
    a ``_ONE`` character becomes (every other maps to itself); what a ``_MANY`` one becomes."""
    global _TABLES
    if _TABLES is None:
        decompositions = _decompositions()
        backward = _composes_backward(decompositions)
        combining = unicodedata.combining
        classes = np.zeros(_LAST, dtype=np.uint8)
        classes[[code for code in range(_LAST) if combining(chr(code))]] = _CONTEXT
        classes[list(backward)] = _CONTEXT
        one = np.arange(_LAST, dtype=np.uint32)
        many: Dict[int, str] = {}
        for code in decompositions:  # the others (Hangul syllables among them) stay as they are
            char = chr(code)
            lead = unicodedata.normalize("NFKD", char)[0]
            normal = unicodedata.normalize("NFKC", char)
            if classes[code] == _CONTEXT or combining(lead) or ord(lead) in backward:
                classes[code] = _CONTEXT
            elif len(normal) > 1:
                classes[code], many[code] = _MANY, normal
            elif normal != char:
                classes[code], one[code] = _ONE, ord(normal)
        _TABLES = (classes, one, many)
    return _TABLES


def code_points(text: str) -> Optional[np.ndarray]:
    """The text's code points ``[len(text)]`` (uint32); None where it holds a lone surrogate,
    which UTF-32 cannot encode."""
    try:
        return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    except UnicodeEncodeError:
        return None


def tables() -> _Tables:
    """``(classes, one, many)``, the tables ``nfkc`` maps by (built on first use): for the C
    kernel of ``wenxin.speedups.char_ids``, which maps characters by them too."""
    return _tables()


def prepare() -> None:
    """Build the tables now (a service's warm-up), not at the first long text that needs them."""
    _tables()


def nfkc(text: str) -> str:
    """``unicodedata.normalize("NFKC", text)``, mapped character by character where that is exact."""
    if len(text) < MIN_LENGTH:
        return unicodedata.normalize("NFKC", text)
    if unicodedata.is_normalized("NFKC", text):  # (stops at the first character NFKC changes)
        return text
    codes = code_points(text)  # [N]
    if codes is None:
        return unicodedata.normalize("NFKC", text)
    classes, one, many = _tables()
    kinds = classes.take(codes)  # [N]
    top = kinds[kinds.argmax()]
    if top == _CONTEXT:
        return unicodedata.normalize("NFKC", text)
    result = one.take(codes).tobytes().decode("utf-32-le")
    if top == _MANY:
        for code in np.unique(codes[kinds == _MANY]).tolist():
            result = result.replace(chr(code), many[code])
    return result
