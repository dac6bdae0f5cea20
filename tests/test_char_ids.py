"""The batch path for character fields (``CharBatchIds``) against the per-text path it replaces:
the same ids and lengths for every text, tokenizer and field setting, on hostile text too; both
ways it takes, the C kernel (``native``) and numpy."""
from __future__ import annotations

import os
import random
import re
import shutil
import sys
import sysconfig
from typing import Any, Dict, List

import numpy as np
import pytest

from wenxin.config.schema import validate
from wenxin.config.task_schema import FIELD
from wenxin.data import text_speedups
from wenxin.data.field_reader import TextFieldReader
from wenxin.data.vocab import Vocab
from wenxin.speedups import char_ids
from wenxin.speedups.nfkc import nfkc
from wenxin.speedups.nfkc import tables as tables_of_nfkc

# CJK, punctuation that NFKC rewrites, latin words and digits (full width too), whitespace of
# several kinds, casing traps (final sigma, dotted I), combining marks, astral characters
PIECES = ["好", "坏", "书", "质", "量", "很", "不", "错", "，", "。", "！", "…", "...", "ＡＢ", "１２", "abc",
          "Word", "x", "9", "_", "a_1", " ", "\t", "\u3000", "\u00a0", "ΟΔΟΣ", "σ", "İ", "e\u0301", "\u0301",
          "😀", "𠀀", "ﬁ", "Ⅻ", "㍿", "½", "A", "Z"]


def random_texts(rng: random.Random, n: int) -> List[str]:
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 25))) for _ in range(n)]


def field(vocab_tokens: List[str], **settings: Any) -> TextFieldReader:
    tokenizer = {"type": "CharTokenizer", "unk_token": "[UNK]", "ngram": settings.pop("ngram", 1),
                 "lowercase": settings.pop("lowercase", None)}
    spec: Dict[str, Any] = {"name": "text_a", "data_type": "string", "reader": {"type": "TextFieldReader"},
                            "tokenizer": tokenizer, "max_seq_len": 12, **settings}
    reader = TextFieldReader(validate(spec, FIELD, "f"), "f")
    reader.set_vocab(Vocab(["[PAD]", "[UNK]"] + vocab_tokens, "[UNK]"))
    return reader


def vocab_from(reader: TextFieldReader, texts: List[str], rng: random.Random) -> List[str]:
    """About half the tokens and n-grams the texts have, so that known and unknown ones mix."""
    seen = sorted({token for text in texts for token in reader.tokenizer.tokenize(text)})
    return [token for token in seen if rng.random() < 0.5]


def per_text(reader: TextFieldReader, texts: List[str]) -> Dict[str, np.ndarray]:
    return reader.collate([reader.convert(text) for text in texts])


def batch_ids_of(reader: TextFieldReader, native: bool) -> char_ids.CharBatchIds:
    """The field's batch converter, set to take the C kernel first or to go straight to numpy."""
    if native and char_ids._char_ids_native is None:
        pytest.skip("the C kernel was not built (no C compiler at install; test_the_c_kernel_is_built)")
    batch_ids = reader._batch_ids()
    assert batch_ids is not None
    batch_ids.use_native = native
    return batch_ids


def single_characters(batch_ids: char_ids.CharBatchIds, texts: List[str]) -> Any:
    """The single-character path's answer for the batch, as ``CharBatchIds`` calls it."""
    return batch_ids._single_characters(nfkc("\n".join(texts)), len(texts))


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("ngram", [1, 2, 3])
@pytest.mark.parametrize("truncation_type", [0, 1, 2])
@pytest.mark.parametrize("pad_to_max_seq_len", [False, True])
def test_batches_get_the_ids_of_text_by_text(ngram: int, truncation_type: int, pad_to_max_seq_len: bool,
                                             native: bool) -> None:
    rng = random.Random(ngram * 100 + truncation_type * 10 + pad_to_max_seq_len)
    probe = field([], ngram=ngram)
    for _ in range(30):
        texts = random_texts(rng, rng.randint(char_ids.MIN_BATCH_TEXTS, 9))
        reader = field(vocab_from(probe, texts, rng), ngram=ngram, truncation_type=truncation_type,
                       pad_to_max_seq_len=pad_to_max_seq_len, max_seq_len=rng.choice([1, 5, 12, 40]),
                       padding_id=rng.choice([0, 1]))
        arrays = batch_ids_of(reader, native)(texts)
        assert arrays is not None
        batch = {"text_a": arrays[0], "text_a_seq_lens": arrays[1]}
        expected = per_text(reader, texts)
        assert batch.keys() == expected.keys()
        for name in batch:
            np.testing.assert_array_equal(batch[name], expected[name], err_msg=f"{name} for {texts!r}")
            assert batch[name].dtype == np.int64


@pytest.mark.parametrize("native", [True, False])
def test_chinese_only_batches_and_case_settings(native: bool) -> None:
    """The each-character-a-token path (no latin, digits or spaces), with lowercase on and off."""
    rng = random.Random(7)
    cjk = [p for p in PIECES if re.fullmatch(r"[^\sA-Za-z0-9_ＡＢ１２]+", p) and p not in ("ﬁ", "Ⅻ", "㍿")]
    for lowercase in (True, False):
        for ngram in (1, 2, 3):
            texts = ["".join(rng.choice(cjk) for _ in range(rng.randint(0, 30))) for _ in range(16)]
            probe = field([], ngram=ngram, lowercase=lowercase)
            reader = field(vocab_from(probe, texts, rng), ngram=ngram, lowercase=lowercase, max_seq_len=64)
            batch_ids_of(reader, native)
            batch = reader.convert_column(texts)
            assert batch is not None
            for name, array in per_text(reader, texts).items():
                np.testing.assert_array_equal(batch[name], array)


# what the single-character path must see through: casing (final sigma, dotted I, titlecase
# digraphs, Greek, Cyrillic), NFKC forms that become latin or digits (ﬁ, full width, ½, Ⅻ),
# combining marks, astral characters; spaces and latin follow the Chinese, inside a row's kept
# characters or past them
SINGLE = ["好", "坏", "书", "质", "量", "很", "，", "。", "…", "ΟΔΟΣ", "σ", "Σ", "İ", "ǅ", "Ä", "Ж", "ﬁ", "ＡＢ",
          "１", "½", "Ⅻ", "\u0301", "😀", "𠀀", "𐐀"]
TAILS = ["", "", "", " x", "a", "好 好", "\u3000", "_"]


@pytest.mark.parametrize("truncation_type", [0, 1, 2])
@pytest.mark.parametrize("pad_to_max_seq_len", [False, True])
def test_the_single_character_path_gets_the_ids_of_text_by_text(truncation_type: int, pad_to_max_seq_len: bool
                                                                 ) -> None:
    """Where it takes a batch, it gives the per-text ids; where a kept character is not a token of
    its own it leaves the batch to the general path. It takes most batches here (counted, so
    that the test cannot pass by never taking one)."""
    rng = random.Random(truncation_type * 10 + pad_to_max_seq_len)
    taken = 0
    for _ in range(120):
        texts = []
        for _ in range(rng.randint(1, 9)):
            text = "".join(rng.choice(SINGLE[:9]) for _ in range(rng.randint(0, 20)))
            if rng.random() < 0.3:
                text += rng.choice(SINGLE)
            tail = rng.choice(TAILS)  # where truncation cuts first: at the end, the start, the middle
            middle = len(text) // 2
            texts.append([text + tail, tail + text, text[:middle] + tail + text[middle:]][truncation_type])
        lowercase = rng.choice([None, False])
        probe = field([], lowercase=lowercase)
        reader = field(vocab_from(probe, texts, rng), truncation_type=truncation_type, lowercase=lowercase,
                       pad_to_max_seq_len=pad_to_max_seq_len, max_seq_len=rng.choice([1, 5, 12, 40]),
                       padding_id=rng.choice([0, 1]))
        batch_ids = batch_ids_of(reader, False)
        assert batch_ids.char_table is not None
        arrays = single_characters(batch_ids, texts)
        if arrays is None:
            continue
        taken += 1
        expected = per_text(reader, texts)
        np.testing.assert_array_equal(arrays[0], expected["text_a"], err_msg=repr(texts))
        np.testing.assert_array_equal(arrays[1], expected["text_a_seq_lens"], err_msg=repr(texts))
        assert arrays[0].dtype == arrays[1].dtype == np.int64
    assert taken >= 30, taken  # 39 to 57 of the 120


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("lowercase", [None, False])
def test_every_cased_character_converts_as_text_by_text(lowercase: Any, native: bool) -> None:
    """Each of the 1,433 code points that ``str.lower`` changes, alone, between Chinese characters
    and at a text's end (final sigma), with half of their lowercase forms in the vocab."""
    cased = sorted(char_ids._cased())
    rng = random.Random(3)
    probe = field([], lowercase=lowercase)
    texts = [text for code in cased for text in (chr(code), f"好{chr(code)}好", f"好{chr(code)}")]
    reader = field(vocab_from(probe, texts, rng), lowercase=lowercase, max_seq_len=8)
    batch_ids_of(reader, native)
    for start in range(0, len(texts), 64):
        chunk = texts[start:start + 64]
        batch = reader.convert_column(chunk)
        assert batch is not None
        for name, array in per_text(reader, chunk).items():
            np.testing.assert_array_equal(batch[name], array, err_msg=repr(chunk))
    batch_ids = reader._batch_ids()
    assert batch_ids is not None

    def single(texts: List[str]) -> Any:
        return single_characters(batch_ids, texts)
    refused = lowercase is None  # lowercasing: Σ depends on its neighbours, İ becomes two characters
    assert single(["好ж"]) is not None and (single(["好Σ"]) is None) == refused and (single(["İ"]) is None) == refused


def test_after_a_batch_it_does_not_fit_the_single_character_path_rests() -> None:
    """A batch with latin makes the next ``SINGLE_RETRY - 1`` batches skip the single-character
    path (they take the general one, with the same ids); then it is tried again."""
    reader = field(["好", "坏", "abc"], max_seq_len=8)
    batch_ids = batch_ids_of(reader, False)
    batches = [["好abc", "坏 好", "好"]] + [["好坏", "坏", "好好好"]] * char_ids.SINGLE_RETRY
    skips = []
    for texts in batches:
        batch = reader.convert_column(texts)
        assert batch is not None
        for name, array in per_text(reader, texts).items():
            np.testing.assert_array_equal(batch[name], array)
        skips.append(batch_ids.skip_single)
    assert skips == list(range(char_ids.SINGLE_RETRY - 1, -1, -1)) + [0]


def test_what_the_batch_path_leaves_to_text_by_text() -> None:
    """A text with a line break of its own (numpy's path), and fields the path does not cover,
    give None (the caller converts text by text)."""
    reader = field(["好"])
    batch_ids_of(reader, False)
    assert reader.convert_column(["好\n好", "好", "好"]) is None
    assert reader.convert_column(["\ud800好", "好 a", "坏"]) is None  # a lone surrogate (no UTF-32 for it)
    assert reader.convert_column(["\ud800好"]) is None
    assert reader.convert_column([]) is None
    assert reader.convert_column(["好 a"] * (char_ids.MIN_BATCH_TEXTS - 1)) is None  # the general path: too few
    assert reader.convert_column(["好 a"] * char_ids.MIN_BATCH_TEXTS) is not None
    assert field(["好"]).convert_column(["好"]) is not None  # the single-character path, from one text on
    every_char = field(["好"])
    every_char.tokenizer.every_char = True  # type: ignore[attr-defined]
    every_char._batch_cache = None
    assert every_char.convert_column(["好"] * 3) is None
    assert field(["好"], ngram=4).convert_column(["好"] * 3) is None

    class OwnConversion(TextFieldReader):
        def convert(self, text: str) -> np.ndarray:
            return super().convert(text)[::-1].copy()
    spec = {"name": "t", "data_type": "string", "reader": {"type": "TextFieldReader"}, "max_seq_len": 8}
    own = OwnConversion(validate(spec, FIELD, "f"), "f")
    own.set_vocab(Vocab(["[PAD]", "[UNK]", "好"], "[UNK]"))
    assert own.convert_column(["好"] * 3) is None


def test_the_kind_table_is_what_the_tokenizer_pattern_matches() -> None:
    """Every code point's kind equals the regular expressions' view of it: ``\\s`` (whitespace,
    all of it below ``_SPACE_LIMIT``) and ``[A-Za-z0-9_]``."""
    space, word = re.compile(r"\s"), re.compile(r"[A-Za-z0-9_]")
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        kind = char_ids._WORD if word.match(char) else char_ids._SPACE if space.match(char) else char_ids._OTHER
        assert char_ids._KINDS[code] == kind, hex(code)


@pytest.mark.parametrize("size", [0, 1, 7, 5000])
def test_the_key_table_answers_as_a_dict_does(size: int) -> None:
    """Keys crowded into few slots (multiples of a power of two, neighbours) and spread ones;
    lookups of keys present and absent, repeated, in any order."""
    rng = np.random.default_rng(size)
    keys = np.unique(np.concatenate([rng.integers(0, 2 ** 62, size), np.arange(size) * 2 ** 40,
                                     np.arange(size) + 12345]))[:size]
    values = rng.integers(0, 10 ** 6, len(keys))
    table = char_ids.KeyTable(keys, values, missing=-7)
    expected = dict(zip(keys.tolist(), values.tolist()))
    queries = np.concatenate([keys, keys[::-1], rng.integers(0, 2 ** 62, 3 * size + 3), np.arange(size + 3)])
    np.testing.assert_array_equal(table.get(queries), [expected.get(q, -7) for q in queries.tolist()])
    assert table.get(np.zeros(0, dtype=np.int64)).shape == (0,)


# what the C kernel takes whole: NFKC that expands (to 18 characters: ﷽; to capitals: ㎒), line
# breaks and other whitespace inside a text, latin runs in n-grams, astral characters, casing
# that does not depend on its neighbours
KERNEL_PIECES = ["好", "坏", "书", "，", "…", "﷽", "㎒", "ＡＢ", "abc", "Word", "x", "9", "a_1", " ", "\n", "\t",
                 "\u3000", "σ", "ǅ", "Ж", "😀", "𠀀", "ﬁ", "½", "Ⅻ"]


@pytest.mark.parametrize("lowercase", [None, False])
@pytest.mark.parametrize("ngram", [1, 2, 3])
def test_the_c_kernel_takes_every_batch_of_context_free_text(ngram: int, lowercase: Any) -> None:
    """Batches of 1 to 9 texts (one text too: the kernel has no lower bound), each converted by
    the kernel itself, not by the numpy path after a refusal."""
    rng = random.Random(ngram * 10 + (lowercase is None))
    probe = field([], ngram=ngram, lowercase=lowercase)
    for _ in range(40):
        texts = ["".join(rng.choice(KERNEL_PIECES) for _ in range(rng.randint(0, 30)))
                 for _ in range(rng.randint(1, 9))]
        reader = field(vocab_from(probe, texts, rng), ngram=ngram, lowercase=lowercase,
                       truncation_type=rng.choice([0, 1, 2]), max_seq_len=rng.choice([1, 5, 12, 40]),
                       pad_to_max_seq_len=rng.random() < 0.3, padding_id=rng.choice([0, 1]))
        arrays = batch_ids_of(reader, True)._native(texts)
        assert arrays is not None, repr(texts)
        expected = per_text(reader, texts)
        np.testing.assert_array_equal(arrays[0], expected["text_a"], err_msg=repr(texts))
        np.testing.assert_array_equal(arrays[1], expected["text_a_seq_lens"], err_msg=repr(texts))
        assert arrays[0].dtype == arrays[1].dtype == np.int64 and arrays[0].flags.c_contiguous


def test_the_c_kernel_refuses_what_depends_on_neighbours_and_numpy_takes_it() -> None:
    """A combining mark (NFKC composes it), ``Σ`` and ``İ`` where the field lowercases, and a lone
    surrogate: the kernel gives None, and the batch path still gives the per-text ids (or None
    for the surrogate, which then goes text by text)."""
    for lowercase, text, refused in [(None, "好e\u0301", True), (False, "好e\u0301", True), (None, "好Σ", True),
                                     (False, "好Σ", False), (None, "İ好", True), (False, "İ好", False),
                                     (None, "好σ", False)]:
        texts = [text, "坏 abc", "好"]
        reader = field(["好", "坏", "abc", "σ", "ς", "Σ", "é"], lowercase=lowercase)
        batch_ids = batch_ids_of(reader, True)
        assert (batch_ids._native(texts) is None) == refused, (text, lowercase)
        batch = reader.convert_column(texts)
        assert batch is not None
        for name, array in per_text(reader, texts).items():
            np.testing.assert_array_equal(batch[name], array, err_msg=repr(texts))
    reader = field(["好"])
    assert batch_ids_of(reader, True)._native(["\ud800好", "好"]) is None
    assert reader.convert_column(["\ud800好", "好 a", "坏"]) is None


def test_the_c_kernel_converts_every_code_point_as_text_by_text() -> None:
    """Every code point but the surrogates, in texts of 64 random ones, a text at a time: the
    kernel's ids where it takes the text (most of them: it refuses one holding a character whose
    NFKC or lower case depends on its neighbours)."""
    rng = random.Random(11)
    codes = [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    rng.shuffle(codes)
    texts = ["".join(map(chr, codes[start:start + 64])) for start in range(0, len(codes), 64)]
    reader = field(vocab_from(field([], ngram=2), texts[::50], rng), ngram=2, max_seq_len=200)
    batch_ids = batch_ids_of(reader, True)
    taken = 0
    for text in texts:
        arrays = batch_ids._native([text])
        if arrays is None:
            continue
        taken += 1
        expected = reader.convert(text)
        np.testing.assert_array_equal(arrays[0][0, :len(expected)], expected, err_msg=repr(text))
        assert arrays[1][0] == len(expected)
    assert taken > 0.7 * len(texts), (taken, len(texts))


def test_the_c_kernel_is_built_where_a_c_compiler_is() -> None:
    """``pip install`` builds the kernel where it finds a C compiler and Python's headers; then
    its absence is a failed build, not a machine without a compiler."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if shutil.which(compiler) is None or not os.path.isfile(headers):
        pytest.skip(f"no C compiler ({compiler}) or no Python headers here: the numpy path converts")
    assert char_ids._char_ids_native is not None, \
        "wenxin.speedups._char_ids_native is missing: run pip install -e . and read its warning"


def test_the_c_kernel_checks_its_tables() -> None:
    native = char_ids._char_ids_native
    if native is None:
        pytest.skip("the C kernel was not built")
    empty = char_ids.KeyTable(np.zeros(0, np.int64), np.zeros(0, np.int64), missing=1)
    grams = ((empty.keys, empty.values, int(empty.shift), empty.mask),) * 2  # n = 2 and 3
    tables = dict(kinds=char_ids._KINDS, classes=np.zeros(10, np.uint8), one=np.zeros(10, np.uint32),
                  lower=np.zeros(10, np.uint32), single_ids=np.zeros(3, np.int64), gram_tables=grams, many={},
                  token_to_id={}, unk_id=1, padding_id=0, max_seq_len=8, width=0, ngram=1, truncation_type=0,
                  lowercase=True)
    with pytest.raises(ValueError, match="every code point"):
        native.Kernel(**tables)
    with pytest.raises(ValueError, match="ngram 1-3"):
        native.Kernel(**{**tables, "gram_tables": grams[:1]})
    with pytest.raises(ValueError, match="split -2 to"):
        native.Kernel(**{**tables, "split": -3})
    classes, one, _ = tables_of_nfkc()
    with pytest.raises(ValueError, match="mask \\+ 1 slots"):
        native.Kernel(**{**tables, "classes": classes, "one": one,
                         "gram_tables": ((empty.keys, empty.values[:3], 0, empty.mask),) * 2})
    native.Kernel(**{**tables, "classes": classes, "one": one})  # the tables it checks, right
    with pytest.raises(ValueError, match="1-d array of 8-byte"):
        native.Kernel(**{**tables, "single_ids": np.zeros(3, np.int32)})


def whitespace_field(vocab_tokens: List[str], split_char: str, **settings: Any) -> TextFieldReader:
    tokenizer = {"type": "WhitespaceTokenizer", "unk_token": "[UNK]", "ngram": settings.pop("ngram", 1),
                 "lowercase": settings.pop("lowercase", None), "split_char": split_char}
    spec: Dict[str, Any] = {"name": "text_a", "data_type": "string", "reader": {"type": "TextFieldReader"},
                            "tokenizer": tokenizer, "max_seq_len": 12, **settings}
    reader = TextFieldReader(validate(spec, FIELD, "f"), "f")
    reader.set_vocab(Vocab(["[PAD]", "[UNK]"] + vocab_tokens, "[UNK]"))
    return reader


# pre-segmented text (ERNIE-kit's CustomTokenizer): words of one or more characters, separators
# of every kind, characters NFKC turns into a separator (U+3000 and U+00A0 into a space)
WORDS = ["好", "好坏", "质量", "abc", "Word", "ＡＢ", "…", "﷽", "ǅ", "x", "9", "😀", " ", " ", " ", "  ", "\t", "|",
         "||", "\u3000", "\u00a0", "\n", "σ"]


@pytest.mark.parametrize("split_char", [" ", "", "|", "\t"])
@pytest.mark.parametrize("ngram", [1, 2, 3])
def test_whitespace_fields_take_the_c_kernel_with_the_ids_of_text_by_text(split_char: str, ngram: int) -> None:
    rng = random.Random(ngram * 10 + len(split_char))
    probe = whitespace_field([], split_char, ngram=ngram)
    for _ in range(40):
        texts = ["".join(rng.choice(WORDS) for _ in range(rng.randint(0, 25))) for _ in range(rng.randint(1, 9))]
        reader = whitespace_field(vocab_from(probe, texts, rng), split_char, ngram=ngram,
                                  lowercase=rng.choice([None, False]), truncation_type=rng.choice([0, 1, 2]),
                                  max_seq_len=rng.choice([1, 5, 12, 40]), pad_to_max_seq_len=rng.random() < 0.3,
                                  padding_id=rng.choice([0, 1]))
        batch_ids = batch_ids_of(reader, True)
        assert not batch_ids.numpy_path
        batch = reader.convert_column(texts)
        assert batch is not None, repr(texts)
        for name, array in per_text(reader, texts).items():
            np.testing.assert_array_equal(batch[name], array, err_msg=repr(texts))


def test_whitespace_fields_go_text_by_text_where_the_kernel_does_not_take_them(monkeypatch: Any) -> None:
    """A batch the kernel refuses (a combining mark), a separator of two characters, and a machine
    without the kernel: no batch path (numpy's does not split at separators)."""
    reader = whitespace_field(["好", "坏"], " ")
    batch_ids_of(reader, True)
    assert reader.convert_column(["好 坏", "好 e\u0301"]) is None
    assert reader.convert_column(["好 坏", "好"]) is not None
    assert whitespace_field(["好"], "ab").convert_column(["好ab坏"]) is None
    monkeypatch.setattr(char_ids, "_char_ids_native", None)
    assert char_ids.kernel_split(whitespace_field(["好"], " ").tokenizer) is None
    assert whitespace_field(["好"], " ").convert_column(["好 坏"]) is None
    assert char_ids.kernel_split(field(["好"]).tokenizer) == char_ids._CHAR_RULE  # numpy's path stays


def test_the_split_rules_are_the_kernels() -> None:
    native = char_ids._char_ids_native
    if native is None:
        pytest.skip("the C kernel was not built")
    assert (char_ids._CHAR_RULE, char_ids._SPLIT_AT_SPACE) == (native.CHAR_RULE, native.SPLIT_AT_SPACE)


def test_the_speedups_plug_into_one_seam_and_the_plain_path_gives_their_ids(monkeypatch):
    """Importing ``wenxin.speedups`` plugs it in; taken out, a field has no batch path, text is
    normalized by ``unicodedata``, and the per-text ids equal the batch path's."""
    import unicodedata

    import wenxin.speedups
    rng = random.Random(3)
    texts = random_texts(rng, 40)
    reader = field([], ngram=2)
    reader.set_vocab(Vocab(["[PAD]", "[UNK]"] + vocab_from(reader, texts, rng), "[UNK]"))
    assert text_speedups.active() is wenxin.speedups.SPEEDUPS
    fast = reader.convert_column(texts)
    assert fast is not None
    monkeypatch.setattr(text_speedups, "_active", text_speedups.PLAIN)
    assert reader.convert_column(texts) is None  # nothing plugged in: each text takes convert
    long_text = "全角ＡＢＣ１２３，" * 10  # long enough for the numpy normalizer to take it
    assert text_speedups.nfkc(long_text) == unicodedata.normalize("NFKC", long_text)
    plain = per_text(reader, texts)
    assert sorted(plain) == sorted(fast)
    for name in plain:
        np.testing.assert_array_equal(fast[name], plain[name], err_msg=name)


@pytest.mark.parametrize("switch, loaded", [("0", False), ("1", True)])
def test_wenxin_speedups_0_keeps_them_out(switch, loaded):
    import subprocess
    code = ("import sys; from wenxin.common.registry import load_builtins; load_builtins(); "
            "from wenxin.data import text_speedups; print('wenxin.speedups' in sys.modules, text_speedups.active().name)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "WENXIN_SPEEDUPS": switch, "GLOG_minloglevel": "2"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-2:] == ([str(loaded), "wenxin.speedups" if loaded else "plain"])
