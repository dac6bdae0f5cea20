"""Files written whole or not at all, their content digests, and JSON objects read with errors naming the file."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from typing import Any, Dict, Iterator, List, TextIO, Tuple

from wenxin.common.errors import ConfigError


def write_text_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through ``<path>.tmp``, flushed to disk and renamed over it, so
    a reader (or a crash) never finds a half-written file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def open_atomically(path: str) -> Iterator[TextIO]:
    """A text file to write ``path`` with, line by line: it is ``<path>.tmp``, renamed over
    ``path`` when the block ends; when the block raises, it is removed and ``path`` keeps what it
    held. Makes ``path``'s folder if it is missing."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            yield f
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@contextlib.contextmanager
def exclusive(lock_file: str) -> Iterator[None]:
    """Hold ``lock_file`` (created if missing) locked against other processes: one builds a cache
    entry at a time, and one started beside it waits, then finds the entry made."""
    with open(lock_file, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def file_sha256(path: str) -> str:
    """The SHA-256 of a file's bytes, as hex (read in 1 MiB blocks: ``hashlib.file_digest`` is
    Python 3.11+, and wenxin supports 3.9)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _DuplicateKey(Exception):
    """A JSON object names a key twice (``json`` keeps the last silently)."""


def _object_without_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    value: Dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise _DuplicateKey(key)
        value[key] = item
    return value


def read_json_object(path: str) -> Dict[str, Any]:
    """The JSON object in the file at ``path`` (a model folder's ``config.json``, a tokenizer's
    settings); a file that cannot be read, is not JSON, names a key twice in an object or holds
    another value is a ``ConfigError`` naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f, object_pairs_hook=_object_without_duplicates)
    except _DuplicateKey as e:
        raise ConfigError(f"{path}: the key {e.args[0]!r} appears twice in one object (which one is meant?)") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ConfigError(f"{path}: not a readable JSON object ({e})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value
