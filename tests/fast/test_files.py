"""wenxin.common.files: atomic writes and content digests."""
from __future__ import annotations

import hashlib
import os
import threading

import pytest
from wenxin.common.files import file_sha256, open_atomically, write_text_atomically


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (3 << 20) + 17])  # around the 1 MiB block
def test_file_sha256_is_hashlibs_digest_of_the_bytes(tmp_path, size):
    data = os.urandom(size)
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert file_sha256(str(path)) == hashlib.sha256(data).hexdigest()


def test_an_atomic_write_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("old", encoding="utf-8")
    write_text_atomically(str(path), "新的")
    assert path.read_text(encoding="utf-8") == "新的" and os.listdir(tmp_path) == ["state.json"]


def test_a_file_opened_atomically_appears_whole_or_not_at_all(tmp_path):
    path = tmp_path / "new" / "out.txt"  # its folder is made
    with open_atomically(str(path)) as f:
        f.write("a\n")
        assert not path.exists()  # nothing at the path before the block ends
    assert path.read_text(encoding="utf-8") == "a\n"
    with pytest.raises(RuntimeError):
        with open_atomically(str(path)) as f:
            f.write("half")
            raise RuntimeError("interrupted")
    assert path.read_text(encoding="utf-8") == "a\n" and not (tmp_path / "new" / "out.txt.tmp").exists()


def test_predict_input_is_a_file_or_a_pipe_not_a_device_or_a_folder(tmp_path):
    """``wenxin predict --input /dev/zero`` said "file not found" (and reading it would never end)."""
    from wenxin.cli_handlers import read_input
    from wenxin.common.errors import DataError
    with pytest.raises(DataError, match=r"--input: /dev/zero is a device; give a file of one input a line"):
        read_input("/dev/zero")
    with pytest.raises(DataError, match=rf"--input: {tmp_path} is a folder"):
        read_input(str(tmp_path))
    with pytest.raises(DataError, match=r"--input: file not found: .*missing"):
        read_input(str(tmp_path / "missing"))
    pipe = str(tmp_path / "pipe")
    os.mkfifo(pipe)
    def write() -> None:
        with open(pipe, "w", encoding="utf-8") as f:
            f.write("甲\n乙\n")
    writer = threading.Thread(target=write)
    writer.start()
    assert read_input(pipe) == ["甲", "乙"]  # --input <(command)
    writer.join()
