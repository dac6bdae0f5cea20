"""Data formats beside ERNIE-kit's TSV: JSON lines (fields by key) and CSV (quoted records, fields
by header name). The same rows train exactly as their TSV, through the in-memory reader, the token
cache cut into parts and the streamed reader; malformed records are errors naming file:line."""
import csv
import io
import json
import logging
import os

import numpy as np
import pytest

from conftest import build, checkpoint_params, make_sentences, task_config, write_tsv
from test_token_cache import assert_same_examples
from wenxin.common.errors import DataError
from wenxin.config.schema import validate
from wenxin.config.task_schema import READER
from wenxin.data import token_cache
from wenxin.data.cached_examples import CachedExamples
from wenxin.data.dataset_reader import BasicDataSetReader, build_readers
from wenxin.data.lines import FilePart

FIELDS = [{"name": "text_a", "reader": {"type": "TextFieldReader"}, "tokenizer": {"type": "CharTokenizer"},
           "max_seq_len": 16},
          {"name": "label", "reader": {"type": "LabelFieldReader"}}]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WENXIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(logging.getLogger("wenxin"), "propagate", True)
    monkeypatch.setattr(token_cache, "PART_BYTES", (512, 16 << 20))  # several parts of small files


def reader_of(path, field_list=FIELDS, name="train_reader", **config):
    return BasicDataSetReader(validate({"fields": field_list, "config": {"data_path": path, **config}}, READER,
                                       f"dataset_reader.{name}"), name)


def loaded(path, field_list=FIELDS, **config):
    configs = {"train_reader": validate({"fields": field_list, "config": {"data_path": path, **config}}, READER,
                                        "dataset_reader.train_reader")}
    return build_readers(configs, None)["train_reader"]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return path


def as_jsonl(rows):
    """Rows of (text, label) as JSON lines: keys in another order, an extra key, labels as numbers
    where they are digits, every third text as a list of its space-separated words."""
    lines = []
    for i, (text, label) in enumerate(rows):
        value = text.split(" ") if i % 3 == 0 and "" not in text.split(" ") else text
        label = str(label)
        lines.append(json.dumps({"id": i, "label": int(label) if label.isdigit() else label, "text": value},
                                ensure_ascii=i % 2 == 0))
    return "\n".join(lines) + "\n"


def as_csv(rows, multiline=True):
    """Rows as CSV with a header (columns in another order, one extra), every text quoted where
    it must be; in every fifth row a line break follows each character (a record over several
    lines; the character tokenizer splits at it as at nothing)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["label", "note", "text"])
    for i, (text, label) in enumerate(rows):
        if multiline and i % 5 == 0:
            text = "\n".join(text)
        writer.writerow([label, 'a "quoted", note' if i % 4 == 0 else "", text])
    return out.getvalue()


def text_rows(n, seed):
    """Sentences with commas and quotes in them, as CSV must quote."""
    rows = make_sentences(n, seed)
    return [(f'{t}, "{t[:2]}"' if i % 7 == 0 else t, str(label)) for i, (t, label) in enumerate(rows)]


JSONL_FIELDS = [dict(FIELDS[0], column="text"), FIELDS[1]]
CSV_FIELDS = JSONL_FIELDS


@pytest.mark.parametrize("cache", [False, True])
def test_jsonl_and_csv_rows_convert_exactly_as_their_tsv(tmp_path, cache):
    rows = text_rows(300, seed=1)
    tsv = write_tsv(str(tmp_path / "train.tsv"), [(t.replace("\n", " "), label) for t, label in rows])
    jsonl = write(str(tmp_path / "train.jsonl"), as_jsonl(rows))
    csv_path = write(str(tmp_path / "train.csv"), as_csv(rows))
    options = {"cache": cache, "cache_processes": 2}
    expected = loaded(tsv, **options)
    for got in (loaded(jsonl, JSONL_FIELDS, format="jsonl", **options),
                loaded(csv_path, CSV_FIELDS, format="csv", has_header=True, **options)):
        assert isinstance(got.examples, CachedExamples) is cache
        assert len(got) == 300
        assert_same_examples(expected, got)


def test_csv_parts_of_the_token_cache_start_at_records_not_inside_them(tmp_path):
    """Every record spans lines: a cut at a line start inside one would split it."""
    rows = text_rows(200, seed=2)
    body = as_csv([(t.replace(" ", "\n") + "\nend", label) for t, label in rows], multiline=False)
    path = write(str(tmp_path / "train.csv"), body)
    fmt = reader_of(path, CSV_FIELDS, format="csv", has_header=True).row_format
    digests, parts, line_counts = token_cache.scan_files([path], 600, fmt)
    assert len(parts) > 5 and sum(line_counts) == body.count("\n")
    records = [r for part in parts for r in fmt.rows(part)]
    assert [lineno for lineno, _, _ in records] == [lineno for lineno, _, _ in fmt.rows(FilePart(path, 0, None, 1))]
    assert all(problem is None for _, _, problem in records) and len(records) == 200
    for part in parts[1:]:  # each part starts at the first line of a record
        assert any(lineno == part.first_lineno for lineno, _, _ in records), part


def test_streamed_jsonl_and_csv_batches_equal_the_tsv_stream(tmp_path):
    rows = text_rows(161, seed=3)
    tsv = write_tsv(str(tmp_path / "t" / "train.tsv"), [(t.replace("\n", " "), label) for t, label in rows])
    jsonl = write(str(tmp_path / "j" / "train.jsonl"), as_jsonl(rows))
    csv_path = write(str(tmp_path / "c" / "train.csv"), as_csv(rows))
    readers = [loaded(tsv, streaming=True, shuffle_buffer=16),
               loaded(jsonl, JSONL_FIELDS, format="jsonl", streaming=True, shuffle_buffer=16),
               loaded(csv_path, CSV_FIELDS, format="csv", has_header=True, streaming=True, shuffle_buffer=16)]
    batches = []
    for r in readers:
        sampler = r.make_sampler(16, True, 7)
        sampler.set_epoch(2, 3)  # a resumed epoch: from its fourth batch
        batches.append([(b["text_a"], b["label"]) for b in r.make_loader(sampler, numpy_batches=True)])
    assert len(batches[0]) == 11 - 3
    for other in batches[1:]:
        for (ta, la), (tb, lb) in zip(batches[0], other):
            assert np.array_equal(ta, tb) and np.array_equal(la, lb)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_run_on_jsonl_or_csv_trains_exactly_as_on_tsv(tmp_path, data_dir, fmt):
    """The whole task: train, dev and test readers in the format give the TSV run's parameters."""
    def config(folder, out, **reader_keys):
        c = task_config(folder, str(tmp_path / out), max_steps=12, save_model_step=12, is_eval_test=0)
        for name in ("train", "dev", "test"):
            reader = c["dataset_reader"][f"{name}_reader"]
            ext = {"tsv": "tsv", "jsonl": "jsonl", "csv": "csv"}[reader_keys.get("format", "tsv")]
            reader["config"]["data_path"] = os.path.join(folder, f"{name}.{ext}")
            reader["config"].update(reader_keys)
            if reader_keys:
                reader["fields"][0]["column"] = "text"
        return c

    converted = str(tmp_path / fmt)
    for name in ("train", "dev", "test"):
        with open(os.path.join(data_dir, f"{name}.tsv"), encoding="utf-8") as f:
            rows = [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]
        write(os.path.join(converted, f"{name}.{fmt}"), as_jsonl(rows) if fmt == "jsonl" else as_csv(rows))
    keys = {"format": fmt, "has_header": fmt == "csv"}
    reference = build(config(data_dir, "tsv_out"), tmp_path)
    reference.do_train()
    trainer = build(config(converted, "fmt_out", **keys), tmp_path)
    trainer.do_train()
    expected = checkpoint_params(str(tmp_path / "tsv_out" / "checkpoints" / "step_12"))
    got = checkpoint_params(str(tmp_path / "fmt_out" / "checkpoints" / "step_12"))
    for name, value in expected.items():
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(value), err_msg=name)


def bad_rows(reader):
    problems = []
    rows = list(reader.iter_rows(on_bad=lambda path, lineno, why: problems.append((os.path.basename(path), lineno, why))))
    return rows, problems


def test_cross_validation_folds_split_csv_by_record_with_the_header_in_each_part(tmp_path):
    from wenxin.data.row_formats import CsvFormat
    from wenxin.folds import split_folds
    rows = text_rows(40, seed=4)
    path = write(str(tmp_path / "data" / "train.csv"), as_csv(rows))
    config = reader_of(path, CSV_FIELDS, format="csv", has_header=True).reader_config
    split = split_folds(path, "key", True, 3, 0, str(tmp_path / "folds"), "csv",
                        lambda lines: CsvFormat.group_lines(lines, config))
    read_back = []
    for part in split.dev:
        rows_of_part, problems = bad_rows(reader_of(part, CSV_FIELDS, format="csv", has_header=True))
        assert not problems and open(part, encoding="utf-8").readline() == "label,note,text\n"
        read_back += [tuple(columns) for _, _, columns in rows_of_part]
    written = [("\n".join(text) if i % 5 == 0 else text, label) for i, (text, label) in enumerate(rows)]  # as_csv's
    assert sorted(read_back) == sorted(written)


def test_prediction_files_in_jsonl_and_csv_predict_as_their_tsv(tmp_path, exported_classifier):
    """wenxin infer reads the predict_reader's format: the fields by key or header, extra keys
    and columns ignored; a malformed record is an error naming file:line."""
    from conftest import write_config
    from wenxin.inference.batch import run_inference
    rows = [("这本书很好", "1"), ("太差了, \"真的\"", "0"), ("一般 还行", "1")]
    inputs = {"tsv": write_tsv(str(tmp_path / "in.tsv"), rows),
              "jsonl": write(str(tmp_path / "in.jsonl"), "".join(
                  json.dumps({"gold": label, "text_a": t}, ensure_ascii=False) + "\n" for t, label in rows)),
              "csv": write(str(tmp_path / "in.csv"), as_csv(rows).replace("label,note,text", "gold,note,text_a", 1))}
    outputs = {}
    for fmt, path in inputs.items():
        reader = {"data_path": path, "format": fmt, "has_header": fmt == "csv"}
        infer = write_config(str(tmp_path / f"{fmt}.json"), {"model_dir": exported_classifier,
                                                            "output_file": str(tmp_path / f"out_{fmt}.tsv"),
                                                            "predict_reader": {"config": reader}})
        outputs[fmt] = open(run_inference(infer), encoding="utf-8").read()
    assert outputs["tsv"].count("\n") == 3
    assert outputs["jsonl"] == outputs["tsv"] and outputs["csv"] == outputs["tsv"]
    write(str(tmp_path / "bad.jsonl"), '{"text_a": "好"}\n{"text": "好"}\n')
    infer = write_config(str(tmp_path / "bad.json"), {"model_dir": exported_classifier,
                                                      "output_file": str(tmp_path / "out_bad.tsv"),
                                                      "predict_reader": {"config": {"data_path": str(tmp_path / "bad.jsonl"),
                                                                                    "format": "jsonl"}}})
    with pytest.raises(DataError, match=r"bad.jsonl:2: no key 'text_a' \(the object has 'text'\)"):
        run_inference(infer)
    assert not os.path.exists(tmp_path / "out_bad.tsv")


def test_a_tsv_header_names_the_columns_and_a_file_without_one_is_an_error(tmp_path):
    """With has_header a TSV's first line names its columns (as ERNIE-kit's generation reader reads
    them): columns in any order are read by name, and a file whose first line does not name the
    fields (no header: its first example; or other names) is one error naming the file and field,
    not a first example silently taken for a header."""
    rows, _ = bad_rows(reader_of(write(str(tmp_path / "swapped.tsv"), "label\ttext_a\n1\t好\n0\t坏\n"),
                                 has_header=True))
    assert [columns for _, _, columns in rows] == [["好", "1"], ["坏", "0"]]
    headless = write(str(tmp_path / "headless.tsv"), "好书\t1\n坏书\t0\n")
    with pytest.raises(DataError, match=r"headless\.tsv:1: the header has no column 'text_a' \(field 'text_a'\); "
                                        r"the columns are '好书', '1'"):
        bad_rows(reader_of(headless, has_header=True))
    renamed = write(str(tmp_path / "renamed.tsv"), "src\ttgt\n好书\t1\n")
    with pytest.raises(DataError, match=r"renamed\.tsv:1: the header has no column 'text_a'"):
        bad_rows(reader_of(renamed, has_header=True))
    short = write(str(tmp_path / "short.tsv"), "text_a\tlabel\n好书\n")
    assert bad_rows(reader_of(short, has_header=True))[1] == [("short.tsv", 2, "1 columns, fewer than the header's 2")]
    extra = write(str(tmp_path / "extra.tsv"), "text_a\tlabel\tsource\n好书\t1\tweb\n好\t书\t1\tweb\tx\n")
    rows, problems = bad_rows(reader_of(extra, has_header=True))  # a stray tab would shift the columns
    assert [columns for _, _, columns in rows] == [["好书", "1"]]
    assert problems == [("extra.tsv", 3, "5 columns, more than the header's 3")]


@pytest.mark.parametrize("cached", [False, True])
def test_converting_without_a_terminal_logs_its_progress(tmp_path, monkeypatch, caplog, cached):
    """No progress bar is drawn into a log file or a pipe; long reading says how far it is in log
    lines instead (at most every 30 s; here every call), in memory and through the token cache."""
    from wenxin.common import progress
    monkeypatch.setattr(progress, "LOG_EVERY_SECONDS", 0.0)
    tsv = write_tsv(str(tmp_path / "train.tsv"), [(t.replace("\n", " "), label) for t, label in text_rows(300, 1)])
    with caplog.at_level(logging.INFO, logger="wenxin"):
        loaded(tsv, cache=cached, cache_processes=2)
    lines = [r.getMessage() for r in caplog.records if "train_reader" in r.getMessage() and " lines, " in r.getMessage()]
    assert lines and lines[-1].startswith("train_reader ") and "300/300 lines" in lines[-1], lines
