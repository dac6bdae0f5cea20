"""A content-addressed store of sealed folders: the token cache's entries.

An entry is a folder under the store's root, named by the caller from a digest of everything its
content depends on, holding ``meta.json``: what the entry holds, the size and CRC-32 of each of
its other files, and the digest of the meta itself. Opening an entry checks them all (about
3 GB/s); a damaged entry is logged and rebuilt. Entries are built in a temporary folder renamed
into place under a file lock, so a killed build leaves no partial entry and processes starting
together build once. A new entry replaces the older ones of the same name prefix (up to its last
``-``), so edits do not pile up copies.
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import logging
import os
import shutil
import zlib
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from wenxin.data.cached_examples import CacheUnavailable

logger = logging.getLogger(__name__)

FORMAT = 2  # bump when the entry layout or the meaning of a key changes (2: meta.json carries its own digest)
CHECK_BLOCK = 16 << 20


class Damaged(Exception):
    """An entry whose files do not match its ``meta.json``."""


def cache_root(configured: str = "") -> str:
    """The folder holding the entries: ``configured``, else ``$WENXIN_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/wenxin`` (``~/.cache/wenxin``)."""
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    if os.environ.get("WENXIN_CACHE_DIR"):
        return os.path.abspath(os.path.expanduser(os.environ["WENXIN_CACHE_DIR"]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "wenxin")


def digest(value: Any) -> str:
    """The SHA-256 of ``value`` as JSON with sorted keys."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def file_checksum(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(CHECK_BLOCK)
            if not block:
                return crc
            crc = zlib.crc32(block, crc)


def _meta_digest(meta: Mapping[str, Any]) -> str:
    """The SHA-256 of ``meta`` as JSON (its ``digest`` key left out), so an edited or damaged
    ``meta.json`` is told from the one that was sealed."""
    return digest({k: v for k, v in json.loads(json.dumps(meta)).items() if k != "digest"})


def _entry_files(folder: str) -> List[str]:
    """Every file of an entry but ``meta.json`` (relative paths)."""
    found: List[str] = []
    for root, _, names in os.walk(folder):
        found.extend(os.path.relpath(os.path.join(root, name), folder) for name in names)
    return sorted(rel for rel in found if rel != "meta.json")


def seal(folder: str, meta: Dict[str, Any]) -> None:
    """Write ``meta.json`` with the size and checksum of every other file of the entry, and the
    digest of the meta itself."""
    meta["files"] = {rel: [os.path.getsize(os.path.join(folder, rel)), file_checksum(os.path.join(folder, rel))]
                     for rel in _entry_files(folder)}
    meta["digest"] = _meta_digest(meta)
    with open(os.path.join(folder, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())


def verify(folder: str) -> Optional[Dict[str, Any]]:
    """The entry's meta, None when there is no entry; ``Damaged`` when ``meta.json`` is not the
    one sealed, or the entry's files are not the ones it lists."""
    if not os.path.isdir(folder):
        return None
    try:
        with open(os.path.join(folder, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError, RecursionError) as e:
        raise Damaged(f"meta.json: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise Damaged("meta.json is not of this cache format")
    if meta.get("digest") != _meta_digest(meta):
        raise Damaged("meta.json does not match its digest (edited or damaged)")
    files = meta.get("files")
    if not isinstance(files, dict) or not files or sorted(files) != _entry_files(folder):
        raise Damaged("meta.json does not list exactly the entry's files")
    _check_files(folder, files)
    return meta


def _check_files(folder: str, files: Dict[str, Any]) -> None:
    """Each file's size and checksum as ``meta.json`` lists them (``Damaged`` naming the first
    that differs)."""
    for rel, entry in files.items():
        path = os.path.join(folder, rel)
        try:
            size, crc = entry
            if os.path.getsize(path) != size:
                raise Damaged(f"{rel} has {os.path.getsize(path)} bytes, not {size}")
            if file_checksum(path) != crc:
                raise Damaged(f"{rel}: checksum mismatch")
        except OSError as e:
            raise Damaged(f"{rel}: {e.strerror}") from None
        except (TypeError, ValueError) as e:  # a sealed meta of another shape
            raise Damaged(f"meta.json: {rel}: {e}") from None


@contextlib.contextmanager
def _holding(fd: int, entry: str) -> Iterator[None]:
    """An exclusive lock on the open lock file ``fd`` (released when the process ends, however
    it ends), closed afterwards."""
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("token cache: waiting for another process writing %s", entry)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class EntryStore:
    """The entries under ``root``; ``key_path`` names the config key of the root in errors (an
    unwritable folder is ``CacheUnavailable``)."""

    def __init__(self, root: str, key_path: str) -> None:
        self.root, self.key_path = root, key_path

    def folder(self, name: str) -> str:
        return os.path.join(self.root, name)

    def lookup(self, name: str) -> Optional[Dict[str, Any]]:
        """The verified meta of entry ``name``; None when it is missing or damaged."""
        try:
            return verify(self.folder(name))
        except Damaged:
            return None

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        try:
            os.makedirs(os.path.join(self.root, ".locks"), exist_ok=True)
            fd = os.open(os.path.join(self.root, ".locks", name), os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as e:
            raise CacheUnavailable(f"{self.key_path}: cannot write the token cache in {self.root}: "
                                   f"{e.strerror}") from None
        with _holding(fd, self.folder(name)):
            yield

    def checked(self, name: str) -> Optional[Dict[str, Any]]:
        """Under the entry's lock: its meta; a damaged entry is logged and removed."""
        folder = self.folder(name)
        try:
            return verify(folder)
        except Damaged as e:
            logger.warning("token cache: %s is damaged (%s); rebuilding it", folder, e)
            shutil.rmtree(folder)
            return None

    @contextlib.contextmanager
    def scratch(self, name: str) -> Iterator[str]:
        """A temporary folder for building entry ``name`` (removed unless published)."""
        for stale in glob.glob(os.path.join(self.root, f".tmp-{name}-*")):
            shutil.rmtree(stale, ignore_errors=True)  # a build that was killed (we hold the lock)
        tmp = os.path.join(self.root, f".tmp-{name}-{os.getpid()}")
        try:
            os.makedirs(tmp)
            yield tmp
        except OSError as e:
            raise CacheUnavailable(f"{self.key_path}: writing the token cache in {self.root} failed: {e}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def publish(self, tmp: str, name: str, meta: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
        """Seal ``tmp`` and rename it to entry ``name`` (the caller holds its lock)."""
        meta["format"] = FORMAT
        seal(tmp, meta)
        folder = self.folder(name)
        os.rename(tmp, folder)
        self._evict(name)
        return folder, meta

    def entry(self, name: str, build: Callable[[str], Dict[str, Any]]) -> Tuple[str, Dict[str, Any], bool]:
        """The entry ``name``, built first (``build(folder)`` fills a scratch folder and returns
        its meta) if it is missing or damaged; returns its folder, meta, and whether it was built
        now."""
        meta = self.lookup(name)
        if meta is not None:
            return self.folder(name), meta, False
        with self.lock(name):
            meta = self.checked(name)  # another process may have built it meanwhile
            if meta is not None:
                return self.folder(name), meta, False
            with self.scratch(name) as tmp:
                folder, meta = self.publish(tmp, name, build(tmp))
            return folder, meta, True

    def _evict(self, name: str) -> None:
        """Remove older entries of the same name prefix (their data or vocabs changed)."""
        prefix = name[:name.rindex("-") + 1]
        for other in glob.glob(os.path.join(self.root, prefix + "*")):
            if os.path.basename(other) != name:
                logger.info("token cache: removing the outdated %s", other)
                shutil.rmtree(other, ignore_errors=True)
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(self.root, ".locks", os.path.basename(other)))
