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
    """The SHA-256 of a file's bytes, as hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
