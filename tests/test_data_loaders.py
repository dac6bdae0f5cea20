"""Readers' batches as eager tensors (the Paddle side of tests/fast/test_data.py)."""
import os

from conftest import fields, write_tsv
from wenxin.config.schema import validate
from wenxin.config.task_schema import READER
from wenxin.data.dataset_reader import build_readers


def reader_config(path, field_list=None, **config):
    return validate({"fields": field_list or fields(), "config": {"data_path": path, **config}}, READER, "r")


def test_dev_reader_shares_train_vocab_and_loader_batches(tmp_path):
    train = write_tsv(str(tmp_path / "train.tsv"), [("好看好看", 1), ("难看", 0), ("一般般", 0)])
    dev = write_tsv(str(tmp_path / "dev.tsv"), [("好难", 1)])
    readers = build_readers({"train_reader": reader_config(train), "dev_reader": reader_config(dev)}, None)
    train_vocab = readers["train_reader"].field("text_a").vocab
    assert readers["dev_reader"].field("text_a").vocab is train_vocab
    loader = readers["train_reader"].make_loader(readers["train_reader"].make_sampler(2, False, 0))
    batches = list(loader)
    assert [b["label"].shape[0] for b in batches] == [2, 1]
    assert batches[0]["text_a"].shape == [2, 4]
    out = str(tmp_path / "vocab")
    assert os.path.isfile(readers["train_reader"].field("text_a").save_vocab(out))
