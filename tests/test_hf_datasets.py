"""Hugging Face ``datasets`` data (format: hf_dataset): a folder written by save_to_disk or a
dataset named in the datasets cache, read offline. The same rows train exactly as their TSV,
through the in-memory reader, the token cache cut into row ranges and the streamed reader;
ClassLabel columns give their names; bad rows and settings are errors naming file:row or the key."""
import json
import logging
import os
import socket
import sys

import numpy as np
import pytest

from conftest import build, checkpoint_params, make_sentences, task_config, write_config, write_tsv
from test_token_cache import assert_same_examples
from wenxin.common.errors import ConfigError, DataError
from wenxin.config.schema import validate
from wenxin.config.task_schema import READER
from wenxin.data import token_cache
from wenxin.data.cached_examples import CachedExamples
from wenxin.data.dataset_reader import BasicDataSetReader, build_readers
from wenxin.data.hf_datasets import HfDatasetFormat
from wenxin.data.lines import FilePart

FIELDS = [{"name": "text_a", "reader": {"type": "TextFieldReader"}, "tokenizer": {"type": "CharTokenizer"},
           "max_seq_len": 16},
          {"name": "label", "reader": {"type": "LabelFieldReader"}}]
HF_FIELDS = [dict(FIELDS[0], column="review"), FIELDS[1]]


datasets = None  # imported by the first test that runs, not when the suite is collected: its import
# reads HF_* variables once, and other tests in the same process set them for their own imports


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    global datasets
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("WENXIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(logging.getLogger("wenxin"), "propagate", True)
    monkeypatch.setattr(token_cache, "PART_BYTES", (512, 16 << 20))  # several parts of small files


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test: the datasets cache is read offline."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"a network connection was attempted: {args}")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def as_dataset(rows, names=("1", "0")):
    """Rows of (text, label) as a Dataset: the text in a column of another name, an extra id
    column, and the label a ClassLabel whose ids are not the label text ('1' is id 0), so the
    reader must give the names."""
    features = datasets.Features({"id": datasets.Value("int32"), "review": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=list(names))})
    return datasets.Dataset.from_dict({"id": list(range(len(rows))), "review": [t for t, _ in rows],
                                       "label": [list(names).index(str(label)) for _, label in rows]},
                                      features=features)


def save(splits, folder, shard_bytes="4KB"):
    datasets.DatasetDict(splits).save_to_disk(folder, max_shard_size=shard_bytes)
    return folder


def loaded(path, field_list=FIELDS, **config):
    configs = {"train_reader": validate({"fields": field_list, "config": {"data_path": path, **config}}, READER,
                                        "dataset_reader.train_reader")}
    return build_readers(configs, None)["train_reader"]


def reader_of(path, field_list=HF_FIELDS, **config):
    return BasicDataSetReader(validate({"fields": field_list, "config": {"data_path": path, "format": "hf_dataset",
                                                                          **config}}, READER,
                                       "dataset_reader.train_reader"), "train_reader")


@pytest.mark.parametrize("cache", [False, True])
def test_a_saved_dataset_converts_exactly_as_its_tsv(tmp_path, cache):
    rows = make_sentences(300, seed=1)
    tsv = write_tsv(str(tmp_path / "train.tsv"), rows)
    folder = save({"train": as_dataset(rows), "test": as_dataset(rows[:20])}, str(tmp_path / "saved"))
    assert len([n for n in os.listdir(os.path.join(folder, "train")) if n.endswith(".arrow")]) > 1  # shards
    options = {"cache": cache, "cache_processes": 2}
    expected = loaded(tsv, **options)
    got = loaded(folder, HF_FIELDS, format="hf_dataset", split="train", **options)
    assert isinstance(got.examples, CachedExamples) is cache
    assert len(got) == 300
    assert_same_examples(expected, got)


def test_token_cache_parts_of_an_arrow_file_are_row_ranges(tmp_path):
    rows = make_sentences(500, seed=2)
    folder = save({"train": as_dataset(rows)}, str(tmp_path / "saved"), shard_bytes="1MB")
    fmt = reader_of(folder).row_format
    files = fmt.data_files()
    _, parts, counts = token_cache.scan_files(files, 600, fmt)
    assert len(files) == 1 and len(parts) > 5 and sum(counts) == 500
    assert [p.first_lineno for p in parts] == [p.start + 1 for p in parts]
    numbered = [(lineno, columns) for part in parts for lineno, columns, _ in fmt.rows(part)]
    assert numbered == [(lineno, columns) for lineno, columns, _ in fmt.rows(FilePart(files[0], 0, None, 1))]
    assert [lineno for lineno, _ in numbered] == list(range(1, 501))
    assert [columns for _, columns in numbered] == [[text, str(label)] for text, label in rows]


def test_streamed_dataset_batches_equal_the_tsv_stream(tmp_path):
    """A streamed epoch shuffles the order of the files: the dataset's shards stream as a folder of
    TSV files holding the same rows."""
    rows = make_sentences(161, seed=3)
    folder = save({"train": as_dataset(rows)}, str(tmp_path / "saved"))
    shards = reader_of(folder).row_format.data_files()
    assert len(shards) > 1
    start = 0
    for k, shard in enumerate(shards):
        count = sum(1 for _ in reader_of(folder).row_format.rows(FilePart(shard, 0, None, 1)))
        write_tsv(str(tmp_path / "t" / f"part_{k}.tsv"), rows[start:start + count])
        start += count
    tsv = str(tmp_path / "t")
    readers = [loaded(tsv, streaming=True, shuffle_buffer=16),
               loaded(folder, HF_FIELDS, format="hf_dataset", streaming=True, shuffle_buffer=16)]
    batches = []
    for r in readers:
        sampler = r.make_sampler(16, True, 7)
        sampler.set_epoch(2, 3)  # a resumed epoch: from its fourth batch
        batches.append([(b["text_a"], b["label"]) for b in r.make_loader(sampler, numpy_batches=True)])
    assert len(batches[0]) == len(batches[1]) == 11 - 3
    for (ta, la), (tb, lb) in zip(*batches):
        assert np.array_equal(ta, tb) and np.array_equal(la, lb)


def test_a_run_on_a_dataset_trains_exactly_as_on_tsv_and_predicts_its_label_names(tmp_path, data_dir):
    """train, validation and test splits of one saved DatasetDict give the TSV run's parameters;
    wenxin infer reads the test split and writes the ClassLabel names."""
    from wenxin.inference.batch import run_inference
    from wenxin.inference.predictor import Predictor

    def config(out, folder=None):
        c = task_config(data_dir, str(tmp_path / out), max_steps=12, save_model_step=12, is_eval_test=0)
        for name, split in (("train", "train"), ("dev", "validation"), ("test", "test")):
            if folder:
                reader = c["dataset_reader"][f"{name}_reader"]
                reader["config"].update(data_path=folder, format="hf_dataset", split=split)
                reader["fields"][0]["column"] = "review"
        return c

    splits = {}
    for name, split in (("train", "train"), ("dev", "validation"), ("test", "test")):
        with open(os.path.join(data_dir, f"{name}.tsv"), encoding="utf-8") as f:
            rows = [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]
        splits[split] = as_dataset(rows, names=("0", "1"))
    folder = save(splits, str(tmp_path / "saved"))
    reference = build(config("tsv_out"), tmp_path)
    reference.do_train()
    trainer = build(config("hf_out", folder), tmp_path)
    trainer.do_train()
    expected = checkpoint_params(str(tmp_path / "tsv_out" / "checkpoints" / "step_12"))
    got = checkpoint_params(str(tmp_path / "hf_out" / "checkpoints" / "step_12"))
    for name, value in expected.items():
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(value), err_msg=name)

    # label names: the same rows with the labels named 'neg' and 'pos' train to the same parameters
    named = {split: as_dataset([(t, ("neg", "pos")[int(d.features["label"].int2str(i))])
                                for t, i in zip(d["review"], d["label"])], names=("neg", "pos"))
             for split, d in splits.items()}
    named_folder = save(named, str(tmp_path / "named"))
    trainer = build(config("named_out", named_folder), tmp_path)
    trainer.do_train()
    assert trainer.readers["train_reader"].field("label").vocab.tokens == ["neg", "pos"]
    model = trainer.export_inference(str(tmp_path / "model"))
    infer = write_config(str(tmp_path / "infer.json"), {
        "model_dir": model, "output_file": str(tmp_path / "pred.tsv"),
        "predict_reader": {"config": {"data_path": named_folder, "format": "hf_dataset", "split": "test"}}})
    out = run_inference(infer)
    lines = open(out, encoding="utf-8").read().splitlines()
    direct = Predictor(model).predict([[text] for text in named["test"]["review"]])
    assert len(lines) == len(named["test"]) == 60
    assert [line.split("\t")[0] for line in lines] == [p["label"] for p in direct]
    assert {line.split("\t")[0] for line in lines} <= {"neg", "pos"}


def test_lists_and_label_lists_are_joined_by_the_fields_split_char(tmp_path):
    """A tagger's data: tokens a list of strings, tags a list of ClassLabel ids."""
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(datasets.ClassLabel(names=["O", "B-PER", "I-PER"]))})
    data = datasets.Dataset.from_dict({"tokens": [["张", "三", "来"], ["好"], ["a b"]],
                                       "ner_tags": [[1, 2, 0], [0], [0]]}, features=features)
    folder = save({"train": data}, str(tmp_path / "saved"))
    tagger = [{"name": "tokens", "reader": {"type": "TextFieldReader"}, "tokenizer": {"type": "WhitespaceTokenizer",
                                                                                          "split_char": "\002"}},
              {"name": "tags", "column": "ner_tags", "reader": {"type": "TextFieldReader"},
               "tokenizer": {"type": "WhitespaceTokenizer", "split_char": "\002"}}]
    fmt = reader_of(folder, tagger).row_format
    rows = list(fmt.rows(FilePart(fmt.data_files()[0], 0, None, 1)))
    assert rows[0] == (1, ["张\002三\002来", "B-PER\002I-PER\002O"], None)
    assert rows[1] == (2, ["好", "O"], None)
    space = [dict(f, tokenizer={"type": "WhitespaceTokenizer"}) for f in tagger]
    row = list(reader_of(folder, space).row_format.rows(FilePart(fmt.data_files()[0], 2, None, 3)))
    assert row == [(3, None, "column 'tokens': item 0 ('a b') is empty or holds the separator ' ' that joins the "
                             "items (the field's tokenizer.split_char), so it would not stay one item")]


def cached_dataset(tmp_path, monkeypatch, name="someuser/reviews"):
    """A dataset in the datasets cache as load_dataset leaves it after a download
    (<cache>/<org>___<name>/default/0.0.0/<hash>/), built from JSON lines without the Hub."""
    from datasets.packaged_modules.json.json import Json
    rows = make_sentences(50, seed=5)
    source = tmp_path / "source.jsonl"
    source.write_text("".join(json.dumps({"review": t, "label": str(label)}, ensure_ascii=False) + "\n"
                              for t, label in rows), encoding="utf-8")
    root = tmp_path / "hf_cache"
    org, short = name.split("/")
    builder = Json(cache_dir=str(root), dataset_name=short, config_name="default", hash="0123abcd",
                   data_files={"train": str(source), "test": str(source)})
    builder.download_and_prepare()
    built = root / short
    (built / os.listdir(built)[0]).rename(built / "default")  # the config folder of a Hub dataset
    built.rename(root / f"{org}___{short}")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", root)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    return rows


def test_a_dataset_named_in_the_cache_is_read_offline(tmp_path, monkeypatch, no_network):
    rows = cached_dataset(tmp_path, monkeypatch)
    reader = loaded("someuser/reviews", HF_FIELDS, format="hf_dataset", split="train")
    assert len(reader) == 50
    expected = loaded(write_tsv(str(tmp_path / "train.tsv"), rows))
    assert_same_examples(expected, reader)
    assert datasets.config.HF_HUB_OFFLINE is False  # the library's setting is left as it was
    with pytest.raises(DataError, match=r"dataset_reader.train_reader.config.data_path: someuser/other: cannot load "
                                        r"the dataset: .*set dataset_reader.train_reader.config.download: true"):
        loaded("someuser/other", HF_FIELDS, format="hf_dataset", split="train")
    with pytest.raises(DataError, match=r"^dataset_reader.train_reader.config.split: 'validation': someuser/reviews "
                                        r"has the splits 'train', 'test'$"):
        loaded("someuser/reviews", HF_FIELDS, format="hf_dataset", split="validation")
    with pytest.raises(DataError, match=r"config.split: 'train\[:10\]': someuser/reviews has the splits 'train', "
                                        r"'test'; a slice of a split is not read: name the split, and use "
                                        r"sampling_rate"):
        loaded("someuser/reviews", HF_FIELDS, format="hf_dataset", split="train[:10]")


def test_download_true_lets_datasets_go_online(tmp_path, monkeypatch):
    seen = []

    def load_dataset(path):
        seen.append((path, datasets.config.HF_HUB_OFFLINE))
        raise ConnectionError("stopped here")

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    for download in (False, True):
        with pytest.raises(DataError, match="cannot load the dataset: stopped here"):
            loaded("someuser/reviews", HF_FIELDS, format="hf_dataset", split="train", download=download)
    assert seen == [("someuser/reviews", True), ("someuser/reviews", False)]
    assert datasets.config.HF_HUB_OFFLINE is False


def test_splits_columns_and_labels_that_do_not_fit_are_clear_errors(tmp_path):
    rows = make_sentences(30, seed=4)
    folder = save({"train": as_dataset(rows), "test": as_dataset(rows[:5])}, str(tmp_path / "saved"))
    with pytest.raises(DataError, match=r"^dataset_reader.train_reader.config.split: .*saved has the splits 'train', "
                                        r"'test'; name the one to read$"):
        loaded(folder, HF_FIELDS, format="hf_dataset")
    with pytest.raises(DataError, match=r"config.split: 'dev': .*saved has the splits 'train', 'test'$"):
        loaded(folder, HF_FIELDS, format="hf_dataset", split="dev")
    with pytest.raises(DataError, match=r"data-00000-of-00001.arrow: the dataset has no column 'text_a' \(field "
                                        r"'text_a'\); its columns are 'id', 'review', 'label'"):
        loaded(folder, FIELDS, format="hf_dataset", split="test")
    one = str(tmp_path / "one")
    as_dataset(rows).save_to_disk(one)
    assert len(loaded(one, HF_FIELDS, format="hf_dataset")) == 30  # a Dataset folder: no split to name
    with pytest.raises(DataError, match="config.split: 'train', but .*one holds one dataset"):
        loaded(one, HF_FIELDS, format="hf_dataset", split="train")

    # a row without a label (-1, as in many test splits) is a bad row named by file:row
    unlabelled = as_dataset(rows).map(lambda r, i: {"label": -1 if i == 6 else r["label"]}, with_indices=True)
    unlabelled.save_to_disk(str(tmp_path / "unlabelled"))
    with pytest.raises(DataError, match=r"data-00000-of-00001.arrow:7: column 'label': label -1 is not one of the 2 "
                                        r"names of its ClassLabel \(-1 marks a row without a label\) \(set "
                                        r"skip_bad_lines"):
        loaded(str(tmp_path / "unlabelled"), HF_FIELDS, format="hf_dataset")
    reader = loaded(str(tmp_path / "unlabelled"), HF_FIELDS, format="hf_dataset", skip_bad_lines=True)
    assert len(reader) == 29 and reader.bad_lines == 1


def test_settings_that_cannot_work_are_named_by_their_key(tmp_path, monkeypatch):
    folder = save({"train": as_dataset(make_sentences(10, seed=1))}, str(tmp_path / "saved"))
    with pytest.raises(ConfigError, match="dataset_reader.train_reader.config.has_header: a dataset's columns have "
                                          "names"):
        reader_of(folder, has_header=True)
    assert HfDatasetFormat.source_problem({"data_path": "org/name"}, "dataset_reader.train_reader") is None
    assert HfDatasetFormat.source_problem({"data_path": folder}, "dataset_reader.train_reader") is None
    assert HfDatasetFormat.source_problem({"data_path": "./no/such/folder"}, "dataset_reader.dev_reader") == (
        "dataset_reader.dev_reader.config.data_path: not found: ./no/such/folder (format hf_dataset: a folder, a "
        "file, or a dataset name such as org/name)")
    damaged = save({"train": as_dataset(make_sentences(10, seed=1))}, str(tmp_path / "damaged"))
    arrow = os.path.join(damaged, "train", "data-00000-of-00001.arrow")
    os.truncate(arrow, os.path.getsize(arrow) // 2)
    with pytest.raises(DataError, match=r"config.data_path: .*damaged: cannot load the dataset \(Arrow"):
        loaded(damaged, HF_FIELDS, format="hf_dataset", split="train")
    (tmp_path / "damaged" / "dataset_dict.json").write_text("{", encoding="utf-8")
    with pytest.raises(DataError, match=r"config.data_path: .*damaged: cannot load the dataset \(JSONDecodeError"):
        loaded(damaged, HF_FIELDS, format="hf_dataset", split="train")
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(ConfigError, match=r'format hf_dataset reads data with the Hugging Face datasets package, '
                                          r'which is not installed: pip install "wenxin\[datasets\]"'):
        loaded(folder, HF_FIELDS, format="hf_dataset")


def test_the_config_check_finds_a_missing_folder_before_paddle_loads(tmp_path, data_dir):
    from test_cli import _train_reporting_paddle
    config = task_config(data_dir, str(tmp_path / "out"))
    config["dataset_reader"]["train_reader"]["config"].update(data_path="./no/such/folder", format="hf_dataset")
    config["dataset_reader"]["dev_reader"]["config"].update(data_path="org/name", format="hf_dataset")  # a name
    proc = _train_reporting_paddle(tmp_path, config)
    assert proc.returncode == 3 and proc.stdout.strip() == "paddle loaded: False", proc
    assert proc.stderr.strip() == ("error: dataset_reader.train_reader.config.data_path: not found: ./no/such/folder "
                                   "(format hf_dataset: a folder, a file, or a dataset name such as org/name)")


def test_a_dataset_that_is_not_exactly_its_files_is_refused(tmp_path):
    """What load_from_disk or the cache never give, but a library change could: rows held in memory,
    or an indices mapping over the files; reading the files then would read other rows."""
    from wenxin.data.hf_datasets import split_files
    folder = save({"train": as_dataset(make_sentences(10, seed=1))}, str(tmp_path / "saved"))
    whole = datasets.load_from_disk(folder)["train"]
    assert split_files(whole, folder, "dataset_reader.train_reader") == [entry["filename"] for entry in whole.cache_files]
    with pytest.raises(DataError, match=r"saved: the dataset holds 4 of the 10 rows of its files; save it with "
                                        r"save_to_disk"):
        split_files(whole.select([1, 3, 5, 7]), folder, "dataset_reader.train_reader")
    with pytest.raises(DataError, match=r"saved: the dataset is held in memory, not in Arrow files"):
        split_files(as_dataset(make_sentences(3, seed=1)), folder, "dataset_reader.train_reader")


def test_a_dataset_saved_anew_at_the_same_path_is_read_anew(tmp_path):
    """A notebook saves, trains, edits the data, saves to the same folder and trains again: the
    second run reads the new rows, not the first files' memory maps."""
    import shutil
    folder = str(tmp_path / "saved")
    first, second = make_sentences(40, seed=1), make_sentences(25, seed=2)
    save({"train": as_dataset(first)}, folder)
    assert len(loaded(folder, HF_FIELDS, format="hf_dataset")) == 40
    shutil.rmtree(folder)
    save({"train": as_dataset(second)}, folder)
    again = loaded(folder, HF_FIELDS, format="hf_dataset")
    assert_same_examples(loaded(write_tsv(str(tmp_path / "second.tsv"), second)), again)


def test_a_folder_of_files_is_read_through_load_dataset_offline(tmp_path, monkeypatch, no_network):
    """A folder load_dataset reads (JSON lines named by split here), converted into the datasets
    cache once, without the Hub."""
    rows = make_sentences(30, seed=6)
    folder = tmp_path / "raw"
    folder.mkdir()
    for split, part in (("train", rows[:20]), ("test", rows[20:])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"review": t, "label": str(label)}) + "\n"
                                                       for t, label in part), encoding="utf-8")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    reader = loaded(str(folder), HF_FIELDS, format="hf_dataset", split="train")
    assert_same_examples(loaded(write_tsv(str(tmp_path / "train.tsv"), rows[:20])), reader)
    assert all(path.startswith(str(tmp_path / "hf_cache")) for path in reader.row_format.data_files())


def test_cross_validation_folds_refuse_a_dataset(tmp_path, data_dir):
    from wenxin.sweep import Sweep
    folder = save({"train": as_dataset(make_sentences(20, seed=1))}, str(tmp_path / "saved"))
    config = task_config(data_dir, str(tmp_path / "out"))
    config["dataset_reader"]["train_reader"]["config"].update(data_path=folder, format="hf_dataset")
    config["dataset_reader"]["train_reader"]["fields"][0]["column"] = "review"
    spec = write_config(str(tmp_path / "cv.json"), {"method": "grid", "folds": 3, "output": str(tmp_path / "cv"),
                                                    "parameters": {"model.optimization.learning_rate": [0.01]}})
    with pytest.raises(ConfigError, match=r"cv.json: folds: cross-validation splits data files by line or record, "
                                          r"and format 'hf_dataset' reads no lines; .*format: jsonl"):
        Sweep(write_config(str(tmp_path / "task.json"), config), spec)
    assert not os.path.exists(tmp_path / "cv")
