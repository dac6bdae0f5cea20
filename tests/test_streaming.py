"""Streamed readers: every row once per epoch across ranks and workers, seeded order, resume at
any batch, vocabularies from the streamed pass, and clear errors. (Exact resume across SIGKILLs
is in test_crash_safety.py.)"""
import logging

import numpy as np
import pytest

from conftest import fields, make_sentences, write_tsv
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
