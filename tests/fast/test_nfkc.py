"""``wenxin.speedups.nfkc`` against ``unicodedata.normalize("NFKC")``: every code point, in random
company, through the table path; and the texts the table path must leave to unicodedata."""
from __future__ import annotations

import random
import sys
import types
import unicodedata
from typing import List

import pytest

from wenxin.speedups import nfkc

PUNCTUATION = "，。！？：；（）…～０１ＡＢ"


def chunks_of_every_code_point(seed: int, size: int) -> List[str]:
    """Every code point that is no surrogate and that the tables do not send to unicodedata,
    shuffled into texts of ``size`` characters."""
    classes = nfkc._tables()[0]
    codes = [code for code in range(sys.maxunicode + 1)
             if not 0xD800 <= code < 0xE000 and classes[code] != nfkc._CONTEXT]
    random.Random(seed).shuffle(codes)
    return ["".join(map(chr, codes[i:i + size])) for i in range(0, len(codes), size)]


@pytest.mark.parametrize("seed", [0, 1])
def test_every_context_free_code_point_normalizes_as_unicodedata_does(seed: int) -> None:
    """All 1.1 million, 64 to a text, each beside random others (the texts that need NFKC's
    changes take the table path: counted)."""
    mapped = 0
    for text in chunks_of_every_code_point(seed, 64):
        expected = unicodedata.normalize("NFKC", text)
        assert nfkc.nfkc(text) == expected, [hex(ord(c)) for c in text]
        mapped += expected != text
    assert mapped > 1000, mapped


def test_the_classes_are_what_nfkc_does_to_each_character() -> None:
    classes, one, many = nfkc._tables()
    for code in range(sys.maxunicode + 1):
        kind, char = classes[code], chr(code)
        if kind == nfkc._UNCHANGED:
            assert unicodedata.normalize("NFKC", char) == char or 0xD800 <= code < 0xE000, hex(code)
        elif kind == nfkc._ONE:
            assert unicodedata.normalize("NFKC", char) == chr(one[code]), hex(code)
        elif kind == nfkc._MANY:
            assert unicodedata.normalize("NFKC", char) == many[code], hex(code)
    # what composes or reorders with a neighbour goes to unicodedata
    for char in ["\u0301", "\u0308", "\u1161", "\u11a8", "\u3099", "\u0344", "\u0f73"]:
        assert classes[ord(char)] == nfkc._CONTEXT, hex(ord(char))


@pytest.mark.parametrize("seed", range(3))
def test_texts_with_composing_neighbours_are_right(seed: int) -> None:
    """Review-like text with the characters that change under NFKC next to combining marks,
    Hangul jamo (compatibility ones become composing ones), expansions and lone surrogates."""
    rng = random.Random(seed)
    pieces = list(PUNCTUATION) + ["好", "书", "e", "A", "Ａ", "\u0301", "\u0323", "ㄱ", "ㅏ", "\u1100", "\u1161",
                                  "\u11a8", "가", "℃", "ǅ", "¨", "½", "ﬁ", "Ω", "Å", "\ud800", "😀", "\uff9e", "ｶ"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 120)))
        assert nfkc.nfkc(text) == unicodedata.normalize("NFKC", text), [hex(ord(c)) for c in text]


def test_long_review_text_takes_the_table_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not every text goes to unicodedata: a long review with full-width punctuation and an
    ellipsis is mapped by the tables (unicodedata's normalize is not called)."""
    nfkc._tables()
    calls = []
    spy = types.SimpleNamespace(**{name: getattr(unicodedata, name) for name in dir(unicodedata)
                                   if not name.startswith("_")})
    spy.normalize = lambda form, text: calls.append(text) or unicodedata.normalize(form, text)
    monkeypatch.setattr(nfkc, "unicodedata", spy)
    text = "这本书的质量很好，印刷清晰！不过（封面）有点旧…总体满意：推荐购买～" * 3
    assert nfkc.nfkc(text) == unicodedata.normalize("NFKC", text) and calls == []
    assert nfkc.nfkc(text + "\u0301") == unicodedata.normalize("NFKC", text + "\u0301") and len(calls) == 1


def test_prepare_builds_the_tables_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A service's warm-up builds them (``Predictor.warm_up`` calls ``prepare``); later calls
    keep the same ones."""
    monkeypatch.setattr(nfkc, "_TABLES", None)
    nfkc.prepare()
    built = nfkc._TABLES
    assert built is not None
    nfkc.prepare()
    assert nfkc._TABLES is built
