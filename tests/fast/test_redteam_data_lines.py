"""The tests of tests/test_redteam_data.py that run no Paddle operation (the fast tier)."""

import os

import pytest
from wenxin.common.errors import DataError
from wenxin.data.lines import iter_lines
from wenxin.data.vocab import Vocab

from conftest import assert_one_error_block, task_config
from test_redteam_data import ERRORS, GOOD, SPLITLINES_BREAKS, _config, _run  # noqa: F401 (helpers and fixtures)


@pytest.mark.paddle
@pytest.mark.parametrize("name", sorted(ERRORS))
def test_bad_data_file_fails_clearly(tmp_path, data_dir, capsys, hang_guard, name):
    hang_guard(120)
    which, data, settings, expected = ERRORS[name]
    config, _ = _config(tmp_path, data_dir, which, data, settings)
    assert_one_error_block(*_run(tmp_path, config, capsys), expected)
    assert not os.path.exists(str(tmp_path / "out" / "checkpoints"))


@pytest.mark.paddle
def test_binary_file_inside_a_data_folder(tmp_path, data_dir, capsys):
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "a.tsv").write_bytes(GOOD)
    (folder / "b.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(200))
    config = task_config(data_dir, str(tmp_path / "out"))
    config["dataset_reader"]["train_reader"]["config"]["data_path"] = str(folder)
    assert_one_error_block(*_run(tmp_path, config, capsys), f"{folder / 'b.bin'}:1: binary data")


@pytest.mark.paddle
def test_fifo_as_data_path_does_not_hang(tmp_path, data_dir, capsys, hang_guard):
    hang_guard(60)
    fifo = str(tmp_path / "pipe.tsv")
    os.mkfifo(fifo)
    config = task_config(data_dir, str(tmp_path / "out"))
    config["dataset_reader"]["train_reader"]["config"]["data_path"] = fifo
    assert_one_error_block(*_run(tmp_path, config, capsys), "not a regular file")


@pytest.mark.parametrize("char", SPLITLINES_BREAKS, ids=[f"U+{ord(c):04X}" for c in SPLITLINES_BREAKS])
def test_only_newline_ends_a_line(tmp_path, char):
    path = tmp_path / "data.tsv"
    path.write_bytes(f"a{char}b\t1\nc\t0\n".encode("utf-8"))
    lines = list(iter_lines(str(path)))
    assert [(line.lineno, line.text) for line in lines] == [(1, f"a{char}b\t1"), (2, "c\t0")]


@pytest.mark.parametrize("content,expected", [
    (b"", "vocab file is empty"),
    (b"[PAD]\n[UNK]\n\nx\n", ":3: empty token"),
    (b"[PAD]\n\x00\x01\n", ":2: binary data"),
    (b"[PAD]\n\xff\n", ":2: not valid UTF-8"),
    (b"[PAD]\nx\n", "has no unknown token"),
])
def test_bad_vocab_files(tmp_path, content, expected):
    path = tmp_path / "vocab.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=expected):
        Vocab.load(str(path), "[UNK]")


def test_vocab_file_bom_crlf_and_line_separators(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes("\ufeff[PAD]\r\n[UNK]\r\na\u2028b\nc\x85d\n".encode("utf-8"))
    assert Vocab.load(str(path), "[UNK]").tokens == ["[PAD]", "[UNK]", "a\u2028b", "c\x85d"]


def test_cases_count():
    # the parametrized cases of this module, counted as data files
    assert len(ERRORS) + 2 + 3 + 1 + len(SPLITLINES_BREAKS) + 1 + 5 + 1 >= 40
