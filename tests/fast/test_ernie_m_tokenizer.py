"""ERNIE-M's tokenizer and text field against PaddleNLP 2.8.1's ``ErnieMTokenizer`` (fixtures written
by ``tests/fixtures/make_ernie_m_reference.py``: a small SentencePiece model, its vocab.txt, and
the ids of 1,174 strings in many scripts, lower-cased ids of 300, and 300 truncated pairs) and,
with ``piece_rules: erniekit``, against ERNIE-kit's own ``FullTokenizerErnieM`` and ERNIE-M field
reader on the same strings (``make_ernie_m_erniekit_reference.py``)."""
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
with open(os.path.join(FIXTURES, "erniekit_tokenizer_reference.json"), encoding="utf-8") as _f:
    ERNIEKIT = json.load(_f)


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


@pytest.mark.parametrize("key", ["singles", "do_lower_case"])
def test_erniekit_rules_give_erniekits_ids(key):
    # ERNIE-kit's reader: [CLS] pieces [SEP], cut to max_seq_len - 2 pieces; with do_lower_case "true" too, which
    # its tokenizer ignores (so the translation gives lowercase false)
    reader = field(max_seq_len=ERNIEKIT["max_seq_len"], piece_rules="erniekit", lowercase=False)
    mismatches = [(c["text"], reader.convert(c["text"])[0].tolist(), c["ids"]) for c in ERNIEKIT[key]
                  if reader.convert(c["text"])[0].tolist() != c["ids"]]
    assert not mismatches, mismatches[:5]


def test_the_two_rules_differ_on_most_strings():
    # why the choice matters: most strings get other ids (ERNIE-kit keeps word-start marks, lone or not, and
    # multi-character Chinese pieces; PaddleNLP drops or splits them)
    differ = sum(a["ids"] != b["ids"] for a, b in zip(ERNIEKIT["singles"], REFERENCE["singles"]))
    assert differ > len(ERNIEKIT["singles"]) // 2
    erniekit, paddlenlp = field(piece_rules="erniekit").tokenizer, field().tokenizer
    assert erniekit.tokenize("中国人") == ["\u2581中", "国", "人"]  # the word-start mark stays on its piece
    assert paddlenlp.tokenize("中国人") == ["中", "国", "人"]
    # a lone word-start piece and a two-character Chinese piece; a number with its commas whole
    assert erniekit.tokenize("hello, 世界") == ["\u2581hello", ",", "\u2581", "世界"]
    assert paddlenlp.tokenize("hello, 世界") == ["\u2581hello", ",", "世", "界"]
    assert erniekit.tokenize("1,000") == ["\u25811,000"] and paddlenlp.tokenize("1,000") == ["1", ",", "000"]


def test_erniekit_cleaning_and_the_number_comma_rule():
    from wenxin.data.ernie_m import erniekit_clean, erniekit_pieces
    assert erniekit_clean("\u201ca\u201d \u2018b\u2019\u2014c\u200b\x00d\te\u3000f") == '"a" \'b\'-cd e f'
    encoded = {"x 12,": ["\u2581x", "\u258112,"], "12": ["\u2581", "12"]}
    assert erniekit_pieces(encoded.__getitem__, "x 12,") == ["\u2581x", "\u2581", "12", ","]


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
