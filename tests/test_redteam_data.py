"""Red team, data: broken, hostile and unusual data files, for training, vocabularies and
prediction. Each case ends in one ``error:`` block naming ``file:line`` (exit 2, no traceback, no
hang), or is read correctly: lines end at ``\\n`` only, a BOM is dropped, rare labels are warned
about, and unknown dev/test labels are errors."""
import os
import tracemalloc

import pytest

from conftest import assert_one_error_block, make_sentences, task_config, write_config
from wenxin.cli import main
from wenxin.data.lines import iter_lines

GOOD = "".join(f"{text}\t{label}\n" for text, label in make_sentences(60, seed=7)).encode("utf-8")
# characters str.splitlines() treats as line breaks; inside a line they are text
SPLITLINES_BREAKS = ["\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\r"]

# (which file, its bytes, reader settings, what the error must say)
ERRORS = {
    "empty-train": ("train", b"", {}, "the file is empty"),
    "blank-lines-only": ("train", b"\n\n  \n\t\n", {}, "no usable examples"),
    "binary": ("train", bytes(range(256)) * 64, {}, "train.tsv:1: binary data"),
    "nul-mid-line": ("train", GOOD + "好\x00看\t1\n".encode(), {}, "train.tsv:61: binary data"),
    "invalid-utf8": ("train", GOOD + b"\xff\xfe\xfd\t1\n", {}, "train.tsv:61: not valid UTF-8"),
    "latin1": ("train", "caf\xe9\t1\n".encode("latin-1") + GOOD, {}, "train.tsv:1: not valid UTF-8"),
    "gbk": ("train", "中文很好\t1\n".encode("gbk") + GOOD, {}, "train.tsv:1: not valid UTF-8"),
    "utf16": ("train", GOOD.decode().encode("utf-16"), {}, "UTF-16/UTF-32 encoded"),
    "utf32": ("train", GOOD.decode().encode("utf-32"), {}, "UTF-16/UTF-32 encoded"),
    "megabyte-line": ("train", GOOD + b"a" * (1 << 20) + b"\t1\n", {}, "train.tsv:61: line longer than"),
    "megabyte-no-newline": ("train", GOOD + b"b" * (3 << 20), {}, "train.tsv:61: line longer than"),
    "missing-column": ("train", GOOD + "只有文字\n".encode(), {}, "train.tsv:61: expected 2 columns"),
    "extra-column": ("train", GOOD + "文字\t1\t多余\n".encode(), {}, "train.tsv:61: expected 2 columns"),
    "comma-separated": ("train", b"good,1\nbad,0\n", {}, "train.tsv:1: expected 2 columns"),
    "dev-undeclared-header": ("dev", b"text_a\tlabel\n" + GOOD, {}, "dev.tsv:1: label 'label'"),
    "header-only": ("train", b"text_a\tlabel\n", {"has_header": True}, "no usable examples"),
    "long-line-limit": ("train", GOOD + b"x" * 200 + b"\t1\n", {"max_line_bytes": 100}, "train.tsv:61: line longer"),
    "dev-unknown-label": ("dev", GOOD + "好\t2\n".encode(), {}, "dev.tsv:61: label '2' is not in the label map"),
    "dev-unknown-label-skipping": ("dev", GOOD + "好\tpositive\n".encode(), {"skip_bad_lines": True},
                                   "dev.tsv:61: label 'positive'"),
    "test-unknown-label": ("test", "坏\tneg\n".encode() + GOOD, {}, "test.tsv:1: label 'neg'"),
    "dev-empty-label": ("dev", GOOD + "好\t\n".encode(), {}, "dev.tsv:61: label ''"),
    "dev-binary": ("dev", b"\x00\x01\x02\x03", {}, "dev.tsv:1: binary data"),
    "dev-empty": ("dev", b"", {}, "dev.tsv: the file is empty"),
    "dev-utf16": ("dev", GOOD.decode().encode("utf-16-le").join([b"\xff\xfe", b""]), {}, "UTF-16/UTF-32"),
    "all-lines-bad-skipped": ("train", b"a\nb\nc\n", {"skip_bad_lines": True},
                              ["no usable examples", "3 malformed lines skipped"]),
}


def _run(tmp_path, config, capsys):
    code = main(["train", "--param_path", write_config(str(tmp_path / "task.json"), config)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _config(tmp_path, data_dir, which, data, reader_settings, **trainer):
    path = os.path.join(data_dir, f"{which}.tsv")
    with open(path, "wb") as f:
        f.write(data)
    config = task_config(data_dir, str(tmp_path / "out"), **trainer)
    for name in ("train_reader", "dev_reader", "test_reader"):
        if name.startswith(which) or reader_settings.get("skip_bad_lines") is None:
            config["dataset_reader"][name]["config"].update(reader_settings)
    return config, path


# ---- valid but unusual data: read exactly, with warnings where something looks wrong ---------------
def _train_once(tmp_path, config, capsys):
    """Train one step; returns the log (stderr)."""
    config["trainer"].update(max_steps=1, is_eval_dev=0, is_eval_test=0)
    code, out, err = _run(tmp_path, config, capsys)
    assert code == 0, err[-3000:]
    return err


@pytest.mark.parametrize("label", ["label", "", "01"])
def test_rare_labels_are_warned_about_and_the_label_map_is_logged(tmp_path, data_dir, capsys, label):
    config, path = _config(tmp_path, data_dir, "train", GOOD + f"文字\t{label}\n".encode(), {})
    log = _train_once(tmp_path, config, capsys)
    assert "label map of 'label' (3 labels)" in log
    assert f"label {label!r} of 'label' occurs in only 1 of 61 lines (first at {path}:61)" in log


def test_crlf_bom_and_no_final_newline(tmp_path, data_dir, capsys):
    data = b"\xef\xbb\xbf" + GOOD.replace(b"\n", b"\r\n")[:-2]
    config, _ = _config(tmp_path, data_dir, "train", data, {})
    log = _train_once(tmp_path, config, capsys)
    assert "train_reader: 60 examples" in log and "(2 labels)" in log  # no '1\r' or BOM label


def test_reading_a_huge_line_keeps_memory_small(tmp_path):
    path = tmp_path / "huge.tsv"
    with open(path, "wb") as f:
        for _ in range(64):
            f.write(b"z" * (1 << 20))  # 64 MB without a newline
        f.write(b"\nok\t1\n")
    tracemalloc.start()
    lines = list(iter_lines(str(path)))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert lines[0].problem.startswith("line longer than") and lines[1].text == "ok\t1"
    assert peak < 8 << 20, peak


EXPLODING_RUN = """
import sys
sys.path.insert(0, {repo!r})
from wenxin.common.registry import RegisterSet
from wenxin.data.field_reader import TextFieldReader

@RegisterSet.field_readers.register("ExplodingTextFieldReader")
class ExplodingTextFieldReader(TextFieldReader):
    def collate(self, values):
        raise MemoryError("Unable to allocate 7.45 TiB for an array")

from wenxin.cli import main
sys.exit(main(["train", "--param_path", sys.argv[1]]))
"""


@pytest.mark.parametrize("mode,workers", [("dynamic", 0), ("static", 0), ("dynamic", 1)])
def test_a_batch_that_cannot_be_assembled_ends_the_run(tmp_path, data_dir, mode, workers):
    """The DataLoader thread used to die on such a batch while the loop waited forever."""
    import subprocess
    import sys
    from conftest import REPO
    config = task_config(data_dir, str(tmp_path / "out"))
    train = config["dataset_reader"]["train_reader"]  # evaluation works: the loop meets the batch
    train["fields"][0]["reader"]["type"] = "ExplodingTextFieldReader"
    train["config"]["num_workers"] = workers
    if mode == "static":
        config["model"]["is_dygraph"] = 0
        config["trainer"]["type"] = "CustomStaticTrainer"
    script = tmp_path / "run.py"
    script.write_text(EXPLODING_RUN.format(repo=REPO))
    proc = subprocess.run([sys.executable, str(script), write_config(str(tmp_path / "task.json"), config)],
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "GLOG_minloglevel": "2"})
    assert_one_error_block(proc.returncode, proc.stdout, proc.stderr, ["dataset_reader.train_reader",
                                                                       "Unable to allocate"], started=True)


def test_an_evaluation_batch_that_cannot_be_assembled_fails_before_training(tmp_path, data_dir):
    """The dev reader's first batch is evaluated before the first step (preflight)."""
    import subprocess
    import sys
    from conftest import REPO
    config = task_config(data_dir, str(tmp_path / "out"))
    config["dataset_reader"]["dev_reader"]["fields"][0]["reader"]["type"] = "ExplodingTextFieldReader"
    script = tmp_path / "run.py"
    script.write_text(EXPLODING_RUN.format(repo=REPO))
    proc = subprocess.run([sys.executable, str(script), write_config(str(tmp_path / "task.json"), config)],
                          capture_output=True, text=True, timeout=240, env={**os.environ, "GLOG_minloglevel": "2"})
    assert_one_error_block(proc.returncode, proc.stdout, proc.stderr, ["dataset_reader.dev_reader",
                                                                       "Unable to allocate"])
    assert not os.path.exists(tmp_path / "out" / "checkpoints")
