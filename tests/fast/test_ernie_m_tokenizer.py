"""ERNIE-M's tokenizer and text field against PaddleNLP 2.8.1's ``ErnieMTokenizer`` (fixtures written
by ``tests/fixtures/make_ernie_m_reference.py``: a small SentencePiece model, its vocab.txt, and
the ids of 1,174 strings in many scripts, lower-cased ids of 300, and 300 truncated pairs)."""
from __future__ import annotations

import json
import os

import pytest

from wenxin.common.errors import ConfigError
from wenxin.config.schema import validate
from wenxin.config.task_schema import FIELD
from wenxin.data.ernie_m import ErnieMTextFieldReader, split_piece

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "ernie_m")
VOCAB = os.path.join(FIXTURES, "vocab.txt")
SPM = os.path.join(FIXTURES, "sentencepiece.bpe.model")
with open(os.path.join(FIXTURES, "tokenizer_reference.json"), encoding="utf-8") as _f:
    REFERENCE = json.load(_f)


def field(max_seq_len: int = 100000, pair: bool = False, **tokenizer) -> ErnieMTextFieldReader:
    config = {"name": "text_a", "reader": {"type": "ErnieMTextFieldReader"}, "vocab_path": VOCAB,
              "max_seq_len": max_seq_len, "tokenizer": {"type": "ErnieMTokenizer", "spm_model_file": SPM, **tokenizer}}
    if pair:
        config["pair_with"] = "text_b"
    return ErnieMTextFieldReader(validate(config, FIELD, "field"), "field")


def test_the_fixture_covers_scripts_specials_and_unknown_pieces():
    texts = [c["text"] for c in REFERENCE["singles"]]
    for sample in ["こんにちは", "Москва", "[SEP]", "abc123def", "Ａｂｃ１２３", "😀", "\u3000", "1,000"]:
        assert any(sample in t for t in texts), sample
    assert sum(3 in c["ids"] for c in REFERENCE["singles"]) > 10  # [UNK] (id 3) is exercised


@pytest.mark.parametrize("key, lowercase", [("singles", None), ("lower", True)])
def test_ids_equal_paddlenlps(key, lowercase):
    reader = field(**({} if lowercase is None else {"lowercase": lowercase}))
    mismatches = [(c["text"], reader.convert(c["text"])[0].tolist(), c["ids"]) for c in REFERENCE[key]
                  if reader.convert(c["text"])[0].tolist() != c["ids"]]
    assert not mismatches, mismatches[:5]


def test_pairs_equal_paddlenlps_truncated_pairs():
    reader = field(max_seq_len=24, pair=True)
    mismatches = [(c["a"], c["b"]) for c in REFERENCE["pairs"]
                  if reader.convert_pair(c["a"], c["b"])[0].tolist() != c["ids"]]
    assert not mismatches, mismatches[:5]


def test_positions_start_at_two_and_there_are_no_token_types():
    reader = field()
    batch = reader.collate([reader.convert("hello world"), reader.convert("你好")])
    assert batch["text_a_pos_ids"][0].tolist()[:3] == [2, 3, 4]
    assert "text_a_sent_ids" not in batch and [s.name for s in reader.tensor_specs()] == \
        ["text_a", "text_a_pos_ids", "text_a_seq_lens"]
    assert reader.info()["position_offset"] == 2


def test_piece_rules():
    assert split_piece("\u2581abc123def") == ["\u2581abc", "123", "def"]
    assert split_piece("\u2581中国") == ["中", "国"]
    assert split_piece("\u2581") == []
    assert split_piece("a，b") == ["a", "，", "b"]


def test_a_missing_or_broken_sentencepiece_model_is_one_error(tmp_path):
    with pytest.raises(ConfigError, match=r"field.tokenizer.spm_model_file: ErnieMTokenizer needs"):
        field(spm_model_file="")
    with pytest.raises(ConfigError, match="field.tokenizer.spm_model_file: file not found"):
        field(spm_model_file=str(tmp_path / "missing.model"))
    broken = tmp_path / "broken.model"
    broken.write_bytes(b"not a model")
    with pytest.raises(ConfigError, match="is not a SentencePiece model"):
        field(spm_model_file=str(broken))
    with pytest.raises(ConfigError, match="ERNIE-M reads text with ErnieMTokenizer"):
        ErnieMTextFieldReader(validate({"name": "t", "reader": {"type": "ErnieMTextFieldReader"}, "vocab_path": VOCAB,
                                        "tokenizer": {"type": "FullTokenizer"}}, FIELD, "f"), "f")
