"""The token cache: cached examples equal converted ones, later runs reuse them, and stale,
damaged, killed or impossible caches are detected."""
import glob
import json
import logging
import os
import random

import numpy as np
import pytest

from conftest import fields, make_sentences, run_script, task_config, write_config, write_tsv
from ernie_helpers import ernie_text, make_ernie_model, make_tagged
from wenxin.common.errors import DataError
from wenxin.common.registry import RegisterSet
from wenxin.config.schema import validate
from wenxin.config.task_schema import READER
from wenxin.data import cache_store, token_cache
from wenxin.data.cached_examples import CachedExamples
from wenxin.data.dataset_reader import build_readers
from wenxin.data.field_reader import BaseFieldReader, TensorSpec


def reader(path, field_list, **config):
    return validate({"fields": field_list, "config": {"data_path": path, **config}}, READER, "r")


def load(train, field_list, cache, dev=None, saved_vocab_dir=None, **config):
    """The train (and dev) reader loaded with ``cache`` (True / False) and ``config``."""
    configs = {"train_reader": reader(train, field_list, cache=cache, **config)}
    if dev:
        configs["dev_reader"] = reader(dev, field_list, cache=cache, **config)
    return build_readers(configs, None, saved_vocab_dir=saved_vocab_dir)


def assert_same_examples(a, b):
    """Two readers hold the same examples, vocabularies, lengths and batches."""
    assert len(a) == len(b) and a.bad_lines == b.bad_lines and a.skipped == b.skipped
    for fa, fb in zip(a.fields, b.fields):
        assert (fa.vocab.tokens if fa.vocab else None) == (fb.vocab.tokens if fb.vocab else None), fa.name
    for x, y in zip(a.examples, b.examples):
        assert _same(x, y), (x, y)
    assert np.array_equal(a.example_lengths(), b.example_lengths())
    indices = list(range(0, len(a), 3))
    batch_a, batch_b = a.collate_rows(indices), b.collate_rows(indices)
    assert batch_a.keys() == batch_b.keys()
    for key in batch_a:
        assert batch_a[key].dtype == batch_b[key].dtype and np.array_equal(batch_a[key], batch_b[key]), key


def _same(x, y):
    if isinstance(x, tuple):
        return isinstance(y, tuple) and len(x) == len(y) and all(_same(u, v) for u, v in zip(x, y))
    if isinstance(x, np.ndarray):
        return isinstance(y, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y)
    return type(x) is type(y) and x == y


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("WENXIN_CACHE_DIR", str(folder))
    monkeypatch.setattr(logging.getLogger("wenxin"), "propagate", True)  # for caplog, after setup_logging
    monkeypatch.setattr(token_cache, "PART_BYTES", (2048, 16 << 20))  # several parts of small files
    return folder


def mixed_rows(n, seed):
    rng = random.Random(seed)
    rows = []
    for text, label in make_sentences(n, seed):
        tags = " ".join(rng.choice("BMES") for _ in text)
        vector = " ".join(f"{rng.uniform(-2, 2):.3f}" for _ in range(3))
        ids = " ".join(sorted({str(rng.randint(0, 3)) for _ in range(2)}))
        rows.append((text, text[::-1], label, f"{rng.random():.4f}", vector, ids, tags))
    return rows


MIXED = [
    {"name": "text_a", "reader": {"type": "TextFieldReader"}, "tokenizer": {"type": "CharTokenizer", "ngram": 2},
     "max_seq_len": 9, "min_freq": 2},
    {"name": "text_b", "reader": {"type": "TextFieldReader"}, "tokenizer": {"type": "CharTokenizer", "ngram": 2},
     "max_seq_len": 6, "vocab_from": "text_a", "truncation_type": 1},
    {"name": "label", "reader": {"type": "LabelFieldReader"}},
    {"name": "score", "reader": {"type": "ScalarFieldReader"}, "data_type": "float"},
    {"name": "vector", "reader": {"type": "FloatVectorFieldReader"}, "dim": 3},
    {"name": "topics", "reader": {"type": "MultiLabelFieldReader"}},
    {"name": "tags", "reader": {"type": "SequenceLabelFieldReader"}, "max_seq_len": 9},
]


@pytest.mark.parametrize("processes", [1, 2])
def test_cached_examples_equal_converted_ones_for_every_field_kind(tmp_path, processes):
    rows = mixed_rows(400, seed=1)
    rows[57] = rows[57][:4] + ("1.0 nan 2",) + rows[57][5:]  # a malformed vector: skipped
    rows[230] = rows[230][:3]  # too few columns: skipped
    train = write_tsv(str(tmp_path / "train.tsv"), rows)
    dev = write_tsv(str(tmp_path / "dev.tsv"), mixed_rows(80, seed=2))
    options = {"skip_bad_lines": True, "cache_processes": processes}
    memory = load(train, MIXED, False, dev, **options)
    cold = load(train, MIXED, True, dev, **options)
    warm = load(train, MIXED, True, dev, **options)
    for name in ("train_reader", "dev_reader"):
        assert isinstance(cold[name].examples, CachedExamples)
        assert_same_examples(memory[name], cold[name])
        assert_same_examples(memory[name], warm[name])
    assert memory["train_reader"].bad_lines == 2
    assert [line for _, line, _ in cold["train_reader"].skipped] == [58, 231]
    assert len(glob.glob(str(tmp_path / "cache" / "ex-*"))) == 2  # train and dev
    assert len(glob.glob(str(tmp_path / "cache" / "fit-*"))) == 1


def test_a_warm_cache_converts_nothing_and_a_resume_finds_the_first_runs_entry(tmp_path, monkeypatch):
    train = write_tsv(str(tmp_path / "train.tsv"), make_sentences(300, seed=1))
    first = load(train, fields(), True)["train_reader"]
    saved = str(tmp_path / "vocab")
    for field in first.fields:
        field.save_vocab(saved)
    from wenxin.data import field_reader

    def no_conversion(*_):
        raise AssertionError("a warm cache converted a line")
    monkeypatch.setattr(field_reader.TextFieldReader, "convert", no_conversion)
    monkeypatch.setattr(field_reader.TextFieldReader, "fit_items", no_conversion)
    warm = load(train, fields(), True)["train_reader"]
    resumed = load(train, fields(), True, saved_vocab_dir=saved)["train_reader"]
    for other in (warm, resumed):
        assert other.examples.folder == first.examples.folder
        assert other.field("text_a").vocab.tokens == first.field("text_a").vocab.tokens


def test_edited_data_is_converted_again_and_replaces_the_old_entry(tmp_path, cache_dir):
    rows = make_sentences(200, seed=1)
    train = write_tsv(str(tmp_path / "train.tsv"), rows)
    before = load(train, fields(), True)["train_reader"]
    stat = os.stat(train)
    text = rows[100][0]
    rows[100] = (text[1:] + text[0], rows[100][1])  # same size
    write_tsv(train, rows)
    os.utime(train, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime
    after = load(train, fields(), True)["train_reader"]
    assert after.examples.folder != before.examples.folder
    assert_same_examples(load(train, fields(), False)["train_reader"], after)
    assert not os.path.exists(before.examples.folder)  # replaced, not piled up
    assert len(glob.glob(str(cache_dir / "ex-*"))) == 1


def _edit_meta(folder, change):
    path = os.path.join(folder, "meta.json")
    with open(path) as f:
        meta = json.load(f)
    change(meta)
    with open(path, "w") as f:
        json.dump(meta, f)


META_EDITS = {  # each once sealed: the digest tells it; the last two also re-digested, as a hostile edit would be
    "files emptied": lambda meta: meta.update(files={}),
    "a file dropped": lambda meta: meta["files"].pop("s0.data.npy"),
    "examples changed": lambda meta: meta.update(examples=3),
    "files emptied, digest redone": lambda meta: meta.update(files={}, digest=cache_store._meta_digest({**meta, "files": {}})),
    "entry not a pair, digest redone": lambda meta: meta.update(
        files={**meta["files"], "s0.data.npy": 5},
        digest=cache_store._meta_digest({**meta, "files": {**meta["files"], "s0.data.npy": 5}})),
}


@pytest.mark.parametrize("damage", ["truncate", "flip", "meta", "planted file"] + sorted(META_EDITS))
def test_a_damaged_entry_is_rebuilt_not_used(tmp_path, caplog, damage):
    train = write_tsv(str(tmp_path / "train.tsv"), make_sentences(300, seed=1))
    first = load(train, fields(), True)["train_reader"]
    folder = first.examples.folder
    data = glob.glob(os.path.join(folder, "s0.data.npy"))[0]
    del first
    if damage == "truncate":
        with open(data, "r+b") as f:
            f.truncate(os.path.getsize(data) - 8)
    elif damage == "flip":
        with open(data, "r+b") as f:
            f.seek(-3, os.SEEK_END)
            byte = f.read(1)
            f.seek(-3, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0xFF]))
    elif damage == "meta":
        with open(os.path.join(folder, "meta.json"), "w") as f:
            f.write("{not json")
    elif damage == "planted file":
        with open(os.path.join(folder, "s9.npy"), "wb") as f:
            f.write(b"unlisted")
    else:
        _edit_meta(folder, META_EDITS[damage])
    again = load(train, fields(), True)["train_reader"]
    assert "is damaged" in caplog.text and "rebuilding" in caplog.text
    assert_same_examples(load(train, fields(), False)["train_reader"], again)


def test_a_killed_build_leaves_no_entry_and_the_next_run_builds_one(tmp_path, cache_dir, monkeypatch):
    train = write_tsv(str(tmp_path / "train.tsv"), make_sentences(300, seed=1))

    def killed(self, tmp, *args, **kwargs):
        with open(os.path.join(tmp, "s0.data.npy"), "wb") as f:
            f.write(b"half")
        raise KeyboardInterrupt  # as a SIGKILL would stop it, but leaving the scratch folder behind
    with monkeypatch.context() as patch:
        patch.setattr(token_cache.TokenCache, "_build_examples", killed)
        patch.setattr(cache_store.shutil, "rmtree", lambda *a, **k: None)  # a killed process cleans nothing
        with pytest.raises(KeyboardInterrupt):
            load(train, fields(), True)
    assert glob.glob(str(cache_dir / ".tmp-*")) and not glob.glob(str(cache_dir / "ex-*"))
    reader = load(train, fields(), True)["train_reader"]
    assert_same_examples(load(train, fields(), False)["train_reader"], reader)
    assert not glob.glob(str(cache_dir / ".tmp-*"))


def test_the_first_bad_line_in_file_order_is_the_error_from_parallel_workers(tmp_path):
    rows = make_sentences(600, seed=1)
    rows[150] = (rows[150][0],)
    rows[500] = (rows[500][0],)
    train = write_tsv(str(tmp_path / "train.tsv"), rows)
    with pytest.raises(DataError, match=r"train\.tsv:151: expected 2 columns"):
        load(train, fields(), True, cache_processes=2)


def test_an_unwritable_cache_folder_is_an_error_naming_the_key_or_converts_in_memory(tmp_path, caplog):
    train = write_tsv(str(tmp_path / "train.tsv"), make_sentences(100, seed=1))
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(DataError, match=r"r\.config\.cache_dir: cannot write the token cache"):
        load(train, fields(), True, cache_dir=str(blocker / "cache"))
    memory = load(train, fields(), "auto", cache_dir=str(blocker / "cache"))["train_reader"]
    assert isinstance(memory.examples, list) and len(memory) == 100
    assert "token cache is not used" not in caplog.text  # auto: too small to cache at all
    token_cache_min = token_cache.AUTO_MIN_BYTES
    try:
        token_cache.AUTO_MIN_BYTES = 0
        memory = load(train, fields(), "auto", cache_dir=str(blocker / "cache"))["train_reader"]
    finally:
        token_cache.AUTO_MIN_BYTES = token_cache_min
    assert isinstance(memory.examples, list) and "the token cache is not used" in caplog.text


@RegisterSet.field_readers.register("TestWordCountsFieldReader")
class WordCounts(BaseFieldReader):
    """A field whose values (dicts) the cache cannot store."""

    def convert(self, text):
        return {"chars": len(text)}

    def collate(self, values):
        return {self.name: np.asarray([v["chars"] for v in values], dtype=np.int64)}

    def tensor_specs(self):
        return [TensorSpec(self.name, [-1], "int64")]


def test_values_the_cache_cannot_store_are_named_by_field(tmp_path, monkeypatch):
    train = write_tsv(str(tmp_path / "train.tsv"), make_sentences(100, seed=1))
    odd = [fields()[0], {"name": "label", "reader": {"type": "TestWordCountsFieldReader"}}]
    with pytest.raises(DataError, match=r"r\.fields\[1\]: the token cache cannot store values of type dict"):
        load(train, odd, True)
    monkeypatch.setattr(token_cache, "AUTO_MIN_BYTES", 0)
    assert isinstance(load(train, odd, "auto")["train_reader"].examples, list)


def test_cached_examples_survive_pickling_for_dataloader_workers(tmp_path):
    import pickle
    train = write_tsv(str(tmp_path / "train.tsv"), make_sentences(100, seed=1))
    examples = load(train, fields(), True)["train_reader"].examples
    again = pickle.loads(pickle.dumps(examples))
    assert len(pickle.dumps(examples)) < 1000  # the folder, not the arrays
    assert all(_same(a, b) for a, b in zip(examples, again))


def test_training_twice_reuses_the_cache_through_the_cli(tmp_path):
    data = tmp_path / "data"
    for name, seed, n in (("train", 1, 240), ("dev", 2, 60), ("test", 3, 60)):
        write_tsv(str(data / f"{name}.tsv"), make_sentences(n, seed))
    config = task_config(str(data), str(tmp_path / "out"), epoch=1)
    for name in ("train_reader", "dev_reader", "test_reader"):
        config["dataset_reader"][name]["config"]["cache"] = True
    path = write_config(str(tmp_path / "task.json"), config)
    runs = [run_script(tmp_path, ["--param_path", path, "--set", f"trainer.output_path={tmp_path / out}"])
            for out in ("first", "second")]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
    assert runs[0].stderr.count("token cache built") == 3 and runs[1].stderr.count("token cache opened") == 3
    timing = ("time", "step_time", "step_cpu_time", "data_time", "steps_per_sec", "eta_sec")
    metrics = [[{k: v for k, v in json.loads(line).items() if k not in timing}
                for line in open(tmp_path / out / "logs" / "metrics.jsonl")] for out in ("first", "second")]
    assert metrics[0] == metrics[1] and any("acc" in record for record in metrics[0])


def test_sampling_rate_and_ernie_fields_cache_as_they_convert(tmp_path):
    model = str(tmp_path / "ernie")
    make_ernie_model(model)
    tagged = write_tsv(str(tmp_path / "tags.tsv"), make_tagged(300, seed=3))
    tagger = [ernie_text("text_a", model, max_seq_len=8),
              {"name": "label", "reader": {"type": "ErnieSeqlabelLabelFieldReader"}}]
    pairs = write_tsv(str(tmp_path / "pairs.tsv"), [(a, b[::-1], label) for (a, label), (b, _) in
                                                    zip(make_sentences(300, 4), make_sentences(300, 5))])
    pair = [ernie_text("text_a", model, max_seq_len=12, pair_with="text_b"), ernie_text("text_b", model),
            {"name": "label", "reader": {"type": "LabelFieldReader"}}]
    for path, field_list in ((tagged, tagger), (pairs, pair)):
        options = {"sampling_rate": 0.6, "cache_processes": 2}
        memory, cached = load(path, field_list, False, **options), load(path, field_list, True, **options)
        assert 120 < len(memory["train_reader"]) < 240
        assert_same_examples(memory["train_reader"], cached["train_reader"])


def mapped_kb(folder):
    """Resident KB of this process's mappings of the ``.data.npy`` files under ``folder``."""
    total, current = 0, ""
    with open("/proc/self/smaps", encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and "-" in parts[0] and ":" not in parts[0]:
                current = parts[5] if len(parts) > 5 else ""
            elif line.startswith("Rss:") and current.startswith(folder) and current.endswith(".data.npy"):
                total += int(parts[1])
    return total


@pytest.mark.skipif(not (os.path.exists("/proc/self/smaps") and hasattr(os, "pread")), reason="Linux's pread and smaps")
def test_values_read_at_random_leave_the_entry_unmapped(tmp_path):
    """Issue 67: read at random through the memory map, a shuffled epoch mapped its whole entry
    into the trainer (the kernel maps a fault's neighbours too: 734 MB at 1M lines). Values are
    read with pread instead, equal to the map's, and nothing of the entry stays mapped."""
    train = write_tsv(str(tmp_path / "train.tsv"), make_sentences(20000, seed=1))
    examples = load(train, fields(), True)["train_reader"].examples
    folder = examples.folder
    size_kb = sum(os.path.getsize(p) for p in glob.glob(os.path.join(folder, "*.data.npy"))) // 1024
    assert size_kb > 500
    order = np.random.default_rng(0).permutation(len(examples))
    read = [examples[int(i)] for i in order]
    assert mapped_kb(folder) < size_kb // 10, (mapped_kb(folder), size_kb)
    mapped = CachedExamples.open(folder)
    mapped._files.clear()  # slices of the map, as before
    for i, example in zip(order, read):
        got = mapped[int(i)]
        assert len(got) == len(example) and all(np.array_equal(a, b) for a, b in zip(got, example))
    assert mapped_kb(folder) > size_kb // 2  # what the map's reads left behind
