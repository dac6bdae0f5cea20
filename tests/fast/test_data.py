"""Tokenizers, vocab, field readers, dataset readers and the batch sampler."""

import numpy as np
import pytest
from wenxin.common.errors import DataError
from wenxin.config.schema import validate
from wenxin.config.task_schema import FIELD, READER
from wenxin.data.dataset_reader import BasicDataSetReader
from wenxin.data.field_reader import ScalarFieldReader, TextFieldReader
from wenxin.data.label_fields import LabelFieldReader
from wenxin.data.sampler import ResumableBatchSampler
from wenxin.data.tokenizers import CharTokenizer, WhitespaceTokenizer
from wenxin.data.vocab import Vocab

from conftest import fields, write_tsv


def field(**overrides):
    base = {"name": "text_a", "reader": {"type": "TextFieldReader"}, "tokenizer": {"type": "CharTokenizer"}}
    return validate({**base, **overrides}, FIELD, "f")


def reader_config(path, field_list=None, **config):
    return validate({"fields": field_list or fields(), "config": {"data_path": path, **config}}, READER, "r")


def test_char_tokenizer_chinese_latin_and_fullwidth():
    tok = CharTokenizer({"lowercase": True})
    assert tok.tokenize("质量不错，Lenovo 的ＡＢＣ 123元") == \
        ["质", "量", "不", "错", ",", "lenovo", "的", "abc", "123", "元"]
    assert tok.tokenize("") == [] and tok.tokenize("   ") == []


def test_char_tokenizer_shortcut_splits_as_the_pattern_does():
    """Text with no space, latin letter or digit is split by list(); anything else by the pattern."""
    import random
    import re
    import unicodedata
    pattern = re.compile(r"[A-Za-z0-9_]+|[^\sA-Za-z0-9_]")
    alphabet = "好书质量，。！?a Z9_\u3000\t\u200bＡ１é😀"
    rng = random.Random(0)
    tok = CharTokenizer({"lowercase": True})
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(3000)]
    texts += ["好书质量", "好书 质量", "好书Ａ质量", "好\u3000书"]
    for text in texts:
        assert tok.split(text) == pattern.findall(unicodedata.normalize("NFKC", text).lower()), repr(text)


def test_ngrams_and_whitespace_tokenizer():
    assert CharTokenizer({"ngram": 2}).tokenize("很好看") == ["很", "好", "看", "很好", "好看"]
    tok = WhitespaceTokenizer({"split_char": " ", "lowercase": False})
    assert tok.tokenize("我 爱  北京 Tiananmen") == ["我", "爱", "北京", "Tiananmen"]


def test_vocab_build_is_reproducible_and_respects_limits(tmp_path):
    docs = [["b", "a", "c"], ["a", "b"], ["a", "d"]]
    vocab = Vocab.build(docs)
    assert vocab.tokens == ["[PAD]", "[UNK]", "a", "b", "c", "d"]  # by count, ties alphabetical
    assert Vocab.build(docs, min_freq=2).tokens == ["[PAD]", "[UNK]", "a", "b"]
    assert Vocab.build(docs, max_size=3).tokens == ["[PAD]", "[UNK]", "a"]
    assert vocab.to_ids(["a", "zzz"]) == [2, 1]
    path = str(tmp_path / "v" / "vocab.txt")
    vocab.save(path)
    loaded = Vocab.load(path, "[UNK]")
    assert loaded.tokens == vocab.tokens and loaded.unk_id == 1


def test_vocab_load_errors(tmp_path):
    with pytest.raises(DataError, match="vocab file not found"):
        Vocab.load(str(tmp_path / "missing.txt"))
    bad = tmp_path / "bad.txt"
    bad.write_text("a\n\nb\n", encoding="utf-8")
    with pytest.raises(DataError, match=f"{bad}:2: empty token"):
        Vocab.load(str(bad))
    no_unk = tmp_path / "nounk.txt"
    no_unk.write_text("[PAD]\na\n", encoding="utf-8")
    with pytest.raises(DataError, match="no unknown token"):
        Vocab.load(str(no_unk), "[UNK]")


def test_vocab_lines_read_as_erniekit_and_paddlenlp_read_them(tmp_path):
    from conftest import wenxin_log
    """ERNIE-kit strips each line before splitting it (``<TAB>5`` is the token ``5``); a token on
    several lines maps to its last line's id, as PaddleNLP's and ERNIE-kit's loaders assign it."""
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\t0\n[UNK]\t1\n\t5\n的\t3\n5\t4\n", encoding="utf-8")  # cls_bow_ch's kind of line
    with wenxin_log() as messages:
        vocab = Vocab.load(str(path), "[UNK]")
    assert vocab.tokens == ["[PAD]", "[UNK]", "5", "的", "5"] and vocab.lookup("5") == 4
    assert any("'5' on lines 3, 5" in m and "last line's id" in m for m in messages), messages
    shuffled = tmp_path / "ids.txt"  # explicit ids in another order, with a repeated token
    shuffled.write_text("b\t2\n[UNK]\t0\na\t1\nb\t3\n", encoding="utf-8")
    vocab = Vocab.load(str(shuffled), "[UNK]")
    assert vocab.tokens == ["[UNK]", "a", "b", "b"] and vocab.lookup("b") == 3 and vocab.lookup("zz") == 0


def test_text_field_truncation_padding_and_specs():
    reader = TextFieldReader(field(max_seq_len=4), "f")
    reader.fit(["甲乙丙丁戊己", "甲乙"])
    ids = [reader.vocab.lookup(c) for c in "甲乙丙丁戊己"]
    assert reader.convert("甲乙丙丁戊己").tolist() == ids[:4]
    reader.config["truncation_type"] = 1
    assert reader.convert("甲乙丙丁戊己").tolist() == ids[-4:]
    reader.config["truncation_type"] = 2
    assert reader.convert("甲乙丙丁戊己").tolist() == ids[:2] + ids[-2:]
    batch = reader.collate([reader.convert("甲乙"), reader.convert(""), reader.convert("甲乙丙")])
    assert batch["text_a"].shape == (3, 3) and batch["text_a"].dtype == np.int64
    assert batch["text_a_seq_lens"].tolist() == [2, 0, 3]
    assert batch["text_a"][1].tolist() == [0, 0, 0]  # padding_id
    assert [s.name for s in reader.tensor_specs()] == ["text_a", "text_a_seq_lens"]
    assert reader.convert("子丑寅").tolist() == [1, 1, 1]  # out of vocabulary -> [UNK]


def test_label_and_scalar_fields():
    labels = LabelFieldReader(validate({"name": "label", "reader": {"type": "LabelFieldReader"}}, FIELD), "f")
    labels.fit(["10", "2", "2", "1"])
    assert labels.vocab.tokens == ["1", "2", "10"]  # numeric labels sorted numerically
    assert labels.convert(" 10 ") == 2
    with pytest.raises(ValueError, match="label '7' is not in the label map"):
        labels.convert("7")
    scalar = ScalarFieldReader(validate({"name": "w", "data_type": "float",
                                         "reader": {"type": "ScalarFieldReader"}}, FIELD), "f")
    assert scalar.collate([scalar.convert("0.5"), scalar.convert("2")])["w"].dtype == np.float32
    with pytest.raises(ValueError):
        scalar.convert("abc")


def test_malformed_line_names_file_and_line(tmp_path):
    path = write_tsv(str(tmp_path / "train.tsv"), [("好看", 1), ("难看",), ("一般", 0)])
    with pytest.raises(DataError) as info:
        BasicDataSetReader(reader_config(path), "train_reader").load()
    assert str(info.value).startswith(f"{path}:2: expected 2 columns (text_a, label), got 1")


def test_bad_value_names_file_and_line(tmp_path):
    path = write_tsv(str(tmp_path / "dev.tsv"), [("好看", 1), ("难看", "x")])
    train = BasicDataSetReader(reader_config(write_tsv(str(tmp_path / "t.tsv"), [("好", 1), ("坏", 0)])),
                               "train_reader").load()
    with pytest.raises(DataError, match=f"{path}:2: label 'x' is not in the label map"):
        BasicDataSetReader(reader_config(path), "dev_reader").load(train_reader=train)


def test_skip_bad_lines_counts_them(tmp_path):
    path = write_tsv(str(tmp_path / "train.tsv"), [("好看", 1), ("难看",), ("a", 0, "extra"), ("一般", 0)])
    reader = BasicDataSetReader(reader_config(path, skip_bad_lines=True), "train_reader").load()
    assert len(reader) == 2 and reader.bad_lines == 2


def test_folder_data_path_header_and_invalid_utf8(tmp_path):
    folder = tmp_path / "parts"
    write_tsv(str(folder / "a.tsv"), [("text_a", "label"), ("好", 1)])
    write_tsv(str(folder / "b.tsv"), [("text_a", "label"), ("坏", 0)])
    reader = BasicDataSetReader(reader_config(str(folder), has_header=True), "train_reader").load()
    assert len(reader) == 2
    binary = tmp_path / "bin.tsv"
    binary.write_bytes(b"\xff\xfd bad\t1\n")
    with pytest.raises(DataError, match=f"{binary}:1: not valid UTF-8"):
        BasicDataSetReader(reader_config(str(binary)), "train_reader").load()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="folder has no data files"):
        BasicDataSetReader(reader_config(str(empty)), "train_reader").load()


def test_sampler_is_seeded_and_resumable():
    a = ResumableBatchSampler(10, 3, shuffle=True, seed=7)
    b = ResumableBatchSampler(10, 3, shuffle=True, seed=7)
    a.set_epoch(1)
    b.set_epoch(1)
    full = list(a)
    assert full == list(b) and len(full) == 4 == len(a)
    assert sorted(i for batch in full for i in batch) == list(range(10))
    a.set_epoch(2)
    assert list(a) != full  # a new permutation each epoch
    b.set_epoch(1, start_batch=2)
    assert list(b) == full[2:]
    ranks = [ResumableBatchSampler(10, 2, True, 7, rank=r, num_replicas=2) for r in range(2)]
    shards = [sorted(i for batch in s for i in batch) for s in ranks]
    assert sorted(shards[0] + shards[1]) == list(range(10))


def test_length_buckets_are_seeded_resumable_and_cover_every_example_once():
    lengths = np.random.RandomState(0).randint(1, 100, size=103)
    make = lambda **kw: ResumableBatchSampler(103, 8, shuffle=True, seed=5, lengths=lengths,  # noqa: E731
                                              bucket_batches=4, **kw)
    a, b = make(), make()
    a.set_epoch(3)
    b.set_epoch(3)
    batches = list(a)
    assert batches == list(b) and len(batches) == len(a) == 13
    assert sorted(i for batch in batches for i in batch) == list(range(103))
    # each pool of 4 batches was sorted by length: within a batch the lengths are close
    spread = np.mean([np.ptp(lengths[batch]) for batch in batches])
    unsorted = ResumableBatchSampler(103, 8, shuffle=True, seed=5)
    unsorted.set_epoch(3)
    assert spread < 0.5 * np.mean([np.ptp(lengths[batch]) for batch in unsorted])
    first_pool = set(a._indices()[:32].tolist())  # the epoch's first 32 shuffled examples
    from_it = [batch for batch in batches if set(batch) <= first_pool]
    assert len(from_it) == 4 and set().union(*from_it) == first_pool  # batches never mix pools
    b.set_epoch(3, start_batch=5)
    assert list(b) == batches[5:]  # a resumed run sees the same batches
    a.set_epoch(4)
    assert list(a) != batches
    a.shuffle = b.shuffle = False  # evaluation order: sorted pools, batches in pool order
    a.set_epoch(0)
    assert [lengths[batch].max() <= lengths[nxt].min() for batch, nxt in zip(list(a)[:3], list(a)[1:4])] == [True] * 3


def test_character_tokens_and_their_offsets_in_the_raw_text():
    every = CharTokenizer({"split_latin_digits": True, "lowercase": False})
    assert every.split("中 国 １ ９ ９ ８ N B A") == every.split("中国１９９８NBA") == \
        ["中", "国", "1", "9", "9", "8", "N", "B", "A"]
    assert every.split("好…") == ["好", "..."]  # NFKC expands a character: still one token
    erniekit = CharTokenizer({"split_latin_digits": True, "lowercase": False, "split_char": "\x02"})
    assert erniekit.split("中\x02国\x021\x029") == erniekit.split("中国19") == ["中", "国", "1", "9"]
    assert every.spans("“好…” Ａb") == [("“", 0, 1), ("好", 1, 2), ("...", 2, 3), ("”", 3, 4), ("A", 5, 6),
                                        ("b", 6, 7)]
    words = CharTokenizer({"lowercase": True})
    assert words.spans("中国ＮＢＡ 2024年") == [("中", 0, 1), ("国", 1, 2), ("nba", 2, 5), ("2024", 6, 10),
                                              ("年", 10, 11)]
    assert WhitespaceTokenizer({"lowercase": False}).spans("  John  lives ") == [("John", 2, 6), ("lives", 8, 13)]


def test_vocab_files_with_erniekit_token_id_lines(tmp_path):
    from wenxin.data.vocab import Vocab
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\t0\n[CLS]\t1\n[UNK]\t2\n好\t3\n", encoding="utf-8")  # ids are the line numbers
    vocab = Vocab.load(str(path), "[UNK]")
    assert vocab.tokens == ["[PAD]", "[CLS]", "[UNK]", "好"] and vocab.unk_id == 2
    path.write_text("好\t3\n[UNK]\t1\n[PAD]\t0\n坏\t2\n", encoding="utf-8")  # explicit ids in another order
    vocab = Vocab.load(str(path), "[UNK]")
    assert vocab.tokens == ["[PAD]", "[UNK]", "坏", "好"] and vocab.lookup("好") == 3 and vocab.unk_id == 1
    path.write_text("[PAD]\t120\n[UNK]\t7\n好\t7\n", encoding="utf-8")  # counts, not ids: line numbers
    assert Vocab.load(str(path), "[UNK]").tokens == ["[PAD]", "[UNK]", "好"]
