"""FullTokenizer and ErnieTextFieldReader against PaddleNLP 2.8.1's ErnieTokenizer/BertTokenizer
(fixtures written by ``tests/fixtures/make_ernie_reference.py``)."""
from __future__ import annotations

import json
import os

import pytest
from wenxin.common.errors import ConfigError
from wenxin.config.schema import validate
from wenxin.config.task_schema import FIELD
from wenxin.data.ernie_fields import ErnieTextFieldReader, truncate_pair

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "ernie")
VOCAB = os.path.join(FIXTURES, "vocab.txt")
with open(os.path.join(FIXTURES, "tokenizer_reference.json"), encoding="utf-8") as _f:
    REFERENCE = json.load(_f)


def field(max_seq_len: int = 100000, truncation_type: int = 0, **tokenizer) -> ErnieTextFieldReader:
    config = {"name": "text_a", "reader": {"type": "ErnieTextFieldReader"}, "vocab_path": VOCAB,
              "max_seq_len": max_seq_len, "truncation_type": truncation_type}
    if tokenizer:
        config["tokenizer"] = {"type": "FullTokenizer", **tokenizer}
    return ErnieTextFieldReader(validate(config, FIELD, "field"), "field")


def mismatches(reader, key):
    return [(case["text"], reader.convert(case["text"])[0].tolist(), case[key]) for case in REFERENCE["singles"]
            if reader.convert(case["text"])[0].tolist() != case[key]]


def test_the_fixture_covers_what_the_issue_asks():
    texts = [c["text"] for c in REFERENCE["singles"]]
    assert len(texts) >= 1000 and len(REFERENCE["pairs"]) >= 300
    for sample in ["😀", "ＡＢＣ", "é", "\u3000", "a" * 101, "，", "\U00020000"]:
        assert any(sample in t for t in texts), sample
    assert sum(4 in c["lower"] for c in REFERENCE["singles"]) > 100  # [UNK] (id 4) is exercised


@pytest.mark.parametrize("key,settings", [("lower", {}), ("cased", {"lowercase": False}),
                                          ("symbols_kept", {"split_symbols": False})])
def test_single_texts_match_the_reference(key, settings):
    reader = field(**settings) if settings else field()
    assert mismatches(reader, key) == []


def test_truncated_single_texts_match_the_reference():
    for case in REFERENCE["single_truncated"]:
        ids, types, _ = field(case["max_seq_len"]).convert(case["text"])
        assert ids.tolist() == case["ids"], case["text"]
        assert types.tolist() == [0] * len(ids)


def test_pairs_match_the_reference_with_token_types_and_longest_first_truncation():
    for case in REFERENCE["pairs"]:
        ids, types, _ = field(case["max_seq_len"]).convert_pair(case["a"], case["b"])
        assert (ids.tolist(), types.tolist()) == (case["ids"], case["token_type_ids"]), case


def test_truncation_types_of_a_single_text():
    reader = field(6, truncation_type=0)
    ids = reader._ids("的一是在不了有")
    assert reader.convert("的一是在不了有")[0].tolist() == [1, *ids[:4], 2]
    assert field(6, truncation_type=1).convert("的一是在不了有")[0].tolist() == [1, *ids[-4:], 2]
    assert field(6, truncation_type=2).convert("的一是在不了有")[0].tolist() == [1, *ids[:2], *ids[-2:], 2]
    assert truncate_pair([1, 2, 3], [4, 5, 6], 4) == ([1, 2], [4, 5])
    assert truncate_pair([1, 2, 3, 4, 5], [6], 3) == ([1, 2], [6])


def test_fields_and_tokenizer_need_the_model_vocab(tmp_path):
    bad = tmp_path / "vocab.txt"
    bad.write_text("[PAD]\n[UNK]\n的\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[CLS\], \[SEP\] not in"):
        ErnieTextFieldReader(validate({"name": "t", "reader": {"type": "ErnieTextFieldReader"},
                                       "vocab_path": str(bad)}, FIELD, "f"), "f")
    from wenxin.data.field_reader import TextFieldReader
    with pytest.raises(ConfigError, match="f.vocab_path: FullTokenizer splits text by a given vocab"):
        TextFieldReader(validate({"name": "t", "reader": {"type": "TextFieldReader"},
                                  "tokenizer": {"type": "FullTokenizer"}}, FIELD, "f"), "f")


def test_a_vocab_with_repeated_tokens_gives_paddlenlps_ids(monkeypatch):
    """A real vocab.txt can list a token twice; PaddleNLP (and ERNIE-kit) let the later line win.
    The warning comes once a process, not once a reader (a script builds dozens)."""
    from wenxin.data import vocab
    monkeypatch.setattr(vocab, "_WARNED", set())
    with open(os.path.join(FIXTURES, "repeated_vocab_reference.json"), encoding="utf-8") as f:
        reference = json.load(f)
    config = {"name": "text_a", "reader": {"type": "ErnieTextFieldReader"},
              "vocab_path": os.path.join(FIXTURES, "vocab_repeated.txt"), "max_seq_len": 100000}
    from conftest import wenxin_log
    with wenxin_log() as messages:
        reader = ErnieTextFieldReader(validate(config, FIELD, "field"), "field")
    assert any("7 tokens are listed more than once" in m for m in messages), messages
    with wenxin_log() as again:
        ErnieTextFieldReader(validate(config, FIELD, "field"), "field")
    assert not any("listed more than once" in m for m in again), again
    for token, index in reference["token_ids"].items():
        assert reader.vocab.lookup(token) == index
    assert [(c["text"], reader.convert(c["text"])[0].tolist()) for c in reference["cases"]] == \
        [(c["text"], c["ids"]) for c in reference["cases"]]
