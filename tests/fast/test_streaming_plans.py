"""The tests of tests/test_streaming.py that run no Paddle operation (the fast tier)."""

import os

import pytest
from wenxin.common.errors import ConfigError, DataError
from wenxin.config.schema import validate
from wenxin.config.task_schema import READER
from wenxin.data.dataset_reader import build_readers

from conftest import fields, make_sentences, write_tsv
from test_streaming import data, reader, rows_of  # noqa: F401 (helpers and fixtures)


def test_the_order_is_seeded_by_epoch_and_shuffled_beyond_files(data):  # noqa: F811 (a fixture)
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


@pytest.mark.parametrize("cache", [True, False])
def test_vocabularies_come_from_the_streamed_pass(data, cache):  # noqa: F811 (a fixture)
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


def test_a_data_file_changed_while_streaming_is_an_error(data):  # noqa: F811 (a fixture)
    streamed = reader(data, streaming=True)
    sampler = streamed.make_sampler(16, False, 0)
    write_tsv(os.path.join(data, "b.tsv"), make_sentences(40, seed=2))
    with pytest.raises(DataError, match=r"b\.tsv: 40 rows now, 58 when the run started"):
        rows_of(sampler)


def test_only_the_train_reader_streams_and_not_with_length_buckets(data):  # noqa: F811 (a fixture)
    with pytest.raises(ConfigError, match=r"dataset_reader\.dev_reader\.config\.streaming: only the train_reader"):
        reader(data, name="dev_reader", streaming=True)
    with pytest.raises(ConfigError, match=r"bucket_batches: length bucketing"):
        reader(data, streaming=True, bucket_batches=10)
