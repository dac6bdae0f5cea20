"""Files written whole or not at all, and their content digests."""
from __future__ import annotations

import hashlib
import os


def write_text_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through ``<path>.tmp``, flushed to disk and renamed over it, so
    a reader (or a crash) never finds a half-written file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def file_sha256(path: str) -> str:
    """The SHA-256 of a file's bytes, as hex (read in 1 MiB blocks: ``hashlib.file_digest`` is
    Python 3.11+, and wenxin supports 3.9)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
