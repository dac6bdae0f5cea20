"""Streamed readers: every row once per epoch across ranks and workers, seeded order, resume at
any batch, vocabularies from the streamed pass, and clear errors. (Exact resume across SIGKILLs
is in test_crash_safety.py.)"""
import logging
import os

import numpy as np
import pytest

from conftest import fields, make_sentences, write_tsv
from wenxin.common.errors import ConfigError, DataError
from wenxin.config.schema import validate
from wenxin.config.task_schema import READER
from wenxin.data.dataset_reader import build_readers
from wenxin.data.streaming import StreamSampler


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WENXIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(logging.getLogger("wenxin"), "propagate", True)


@pytest.fixture
def data(tmp_path):
    folder = tmp_path / "data"
    write_tsv(str(folder / "a.tsv"), make_sentences(103, seed=1))
    write_tsv(str(folder / "b.tsv"), make_sentences(58, seed=2))
    return str(folder)


def reader(data, name="train_reader", **config):
    configs = {name: validate({"fields": fields(), "config": {"data_path": data, "shuffle": True, **config}},
                              READER, f"dataset_reader.{name}")}
    if name != "train_reader":
        configs["train_reader"] = validate({"fields": fields(), "config": {"data_path": data}}, READER, "t")
    return build_readers(configs, None)[name]


def rows_of(batches):
    return [(path, line) for batch in batches for path, line, _ in batch]


def test_each_row_once_per_epoch_across_ranks_padded_like_the_in_memory_sampler(data):
    streamed = reader(data, streaming=True, shuffle_buffer=16)
    assert len(streamed) == 161
    samplers = [streamed.make_sampler(16, True, 7, rank=r, num_replicas=2) for r in range(2)]
    assert [len(s) for s in samplers] == [6, 6]  # 81 rows each: one padded
    per_rank = [rows_of(s) for s in samplers]
    assert [len(rows) for rows in per_rank] == [81, 81]
    everything = per_rank[0] + per_rank[1]
    assert len(set(everything)) == 161  # every row, one of them twice (the padding)
    assert per_rank[1][-1] == per_rank[0][0]  # padding continues from the start of the stream
    unpadded = [rows_of(streamed.make_sampler(16, False, 0, rank=r, num_replicas=2, pad=False)) for r in range(2)]
    assert sorted(unpadded[0] + unpadded[1]) == sorted(set(everything))


def test_the_order_is_seeded_by_epoch_and_shuffled_beyond_files(data):
    streamed = reader(data, streaming=True, shuffle_buffer=32)
    sampler = streamed.make_sampler(16, True, 7)
    first, again = rows_of(sampler), rows_of(sampler)
    sampler.set_epoch(1)
    second = rows_of(sampler)
    assert first == again and first != second and sorted(first) == sorted(second)
    files_in_first_32 = {path for path, _ in first[:32]}
    assert len(files_in_first_32) == 1  # files are whole units of the order ...
    assert [line for _, line in first[:32]] != sorted(line for _, line in first[:32])  # ... rows are mixed
    plain = rows_of(streamed.make_sampler(16, False, 7))
    assert plain == sorted(plain)  # no shuffle: file order


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resumed_epoch_sees_exactly_the_remaining_batches(data, workers):
    streamed = reader(data, streaming=True, shuffle_buffer=16, num_workers=workers)
    sampler = streamed.make_sampler(16, True, 7, rank=1, num_replicas=2)
    sampler.set_epoch(3)
    whole = [b["text_a"].numpy() if workers == 0 else np.asarray(b["text_a"]) for b in streamed.make_loader(sampler)]
    for start in (1, 4):
        sampler.set_epoch(3, start)
        rest = [np.asarray(b["text_a"]) for b in streamed.make_loader(sampler, numpy_batches=True)]
        assert len(rest) == len(whole) - start
        assert all(np.array_equal(a, b) for a, b in zip(whole[start:], rest))


def test_dataloader_workers_split_batches_without_overlap(data):
    single = reader(data, streaming=True, shuffle_buffer=16)
    sampler = single.make_sampler(8, True, 3)
    expected = [b for b in single.make_loader(sampler, numpy_batches=True)]
    workers = reader(data, streaming=True, shuffle_buffer=16, num_workers=3)
    got = list(workers.make_loader(workers.make_sampler(8, True, 3), numpy_batches=True))
    assert len(got) == len(expected) == 21
    for a, b in zip(expected, got):
        assert np.array_equal(a["text_a"], np.asarray(b["text_a"])) and np.array_equal(a["label"], np.asarray(b["label"]))
    shares = [list(StreamSampler.batches(workers.make_sampler(8, True, 3), w, 3)) for w in range(3)]
    numbers = sorted(b for share in shares for b, _ in share)
    assert numbers == list(range(21))


@pytest.mark.parametrize("cache", [True, False])
def test_vocabularies_come_from_the_streamed_pass(data, cache):
    streamed = reader(data, streaming=True, cache=cache)
    memory = reader(data)
    for name in ("text_a", "label"):
        assert streamed.field(name).vocab.tokens == memory.field(name).vocab.tokens
    assert streamed.examples == []  # nothing held
    again = reader(data, streaming=True, cache=cache)
    assert again.field("text_a").vocab.tokens == memory.field("text_a").vocab.tokens
    assert streamed.collate_rows([0, 1])["label"].tolist() == memory.collate_rows([0, 1])["label"].tolist()


def test_malformed_rows_shorten_their_batch_and_a_batch_of_only_bad_rows_is_an_error(tmp_path):
    rows = [(text, f"{i / 10}", label) for i, (text, label) in enumerate(make_sentences(40, seed=1))]
    rows[5] = ("坏\t行", "1", "0")  # four columns: found by the pass before training
    with_score = fields()[:1] + [{"name": "score", "reader": {"type": "ScalarFieldReader"}, "data_type": "float"},
                                 fields()[1]]

    def streamed(path, **config):
        return build_readers({"train_reader": validate({"fields": with_score, "config": {"data_path": path, **config}},
                                                       READER, "r")}, None)["train_reader"]
    path = write_tsv(str(tmp_path / "a.tsv"), rows)
    with pytest.raises(DataError, match=r"a\.tsv:6: expected 3 columns"):
        streamed(path, streaming=True)
    rows[5] = rows[4]
    rows[9] = (rows[9][0], "not a number", rows[9][2])  # converts badly: found while training
    path = write_tsv(str(tmp_path / "a.tsv"), rows)
    good = streamed(path, streaming=True, skip_bad_lines=True)
    sizes = [len(b["label"]) for b in good.make_loader(good.make_sampler(8, False, 0), numpy_batches=True)]
    assert sizes == [8, 7, 8, 8, 8]  # line 10 is in the second batch
    for i in range(8, 16):
        rows[i] = (rows[i][0], "bad", rows[i][2])
    path = write_tsv(str(tmp_path / "a.tsv"), rows)
    bad = streamed(path, streaming=True, skip_bad_lines=True)
    with pytest.raises(DataError, match=r"a\.tsv:9 to .*a\.tsv:16: every line of a batch is malformed"):
        list(bad.make_loader(bad.make_sampler(8, False, 0), numpy_batches=True))


def test_a_data_file_changed_while_streaming_is_an_error(data):
    streamed = reader(data, streaming=True)
    sampler = streamed.make_sampler(16, False, 0)
    write_tsv(os.path.join(data, "b.tsv"), make_sentences(40, seed=2))
    with pytest.raises(DataError, match=r"b\.tsv: 40 rows now, 58 when the run started"):
        rows_of(sampler)


def test_only_the_train_reader_streams_and_not_with_length_buckets(data):
    with pytest.raises(ConfigError, match=r"dataset_reader\.dev_reader\.config\.streaming: only the train_reader"):
        reader(data, name="dev_reader", streaming=True)
    with pytest.raises(ConfigError, match=r"bucket_batches: length bucketing"):
        reader(data, streaming=True, bucket_batches=10)
