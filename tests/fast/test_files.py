"""wenxin.common.files: atomic writes and content digests."""
from __future__ import annotations

import hashlib
import os

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
