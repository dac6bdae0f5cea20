"""Folders sealed by a manifest: the size and SHA-256 of every file, written last, checked before use.

Checkpoints (``wenxin.controller.checkpoint``) and inference exports (``wenxin.inference``)
both seal their folders this way, so training and serving share the format without either
importing the other. A manifest must cover every file its loader reads: ``verify_folder``
refuses a manifest that lists nothing, one that omits a required file, and a folder holding a
file the manifest does not list (hidden files and the ``sealed`` subfolders, which carry their
own manifest, excepted).
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Collection, Dict, List, Optional, Tuple

from wenxin.common.errors import WenxinError
from wenxin.common.files import file_sha256, write_text_atomically

MANIFEST_FILE = "manifest.json"
KIND_KEY = "kind"  # which writer sealed the folder (``wenxin.common.owned_folders``)

ErrorType = Callable[[str], WenxinError]


def files_of(folder: str) -> List[str]:
    """Every file below ``folder`` (relative paths with ``/``, sorted), the manifest excepted."""
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")
            if rel != MANIFEST_FILE:
                found.append(rel)
    return sorted(found)


def outside(rel: str) -> bool:
    """Whether a relative path recorded in a folder's own files points outside the folder."""
    return os.path.isabs(rel) or ".." in rel.replace("\\", "/").split("/")


def manifest_entries(folder: str, rels: Collection[str]) -> Dict[str, Dict[str, Any]]:
    return {rel: {"bytes": os.path.getsize(os.path.join(folder, rel)), "sha256": file_sha256(os.path.join(folder, rel))}
            for rel in sorted(rels)}


def write_manifest(folder: str, format_version: int, indent: int = 2, kind: Optional[str] = None) -> None:
    """Record every file of a finished folder (call it last); ``kind``: which writer made it, the
    proof ``wenxin.common.owned_folders`` asks before the folder is replaced."""
    sealed: Dict[str, Any] = {"format": format_version}
    if kind is not None:
        sealed[KIND_KEY] = kind
    sealed["files"] = manifest_entries(folder, files_of(folder))
    text = json.dumps(sealed, indent=indent, ensure_ascii=False)
    write_text_atomically(os.path.join(folder, MANIFEST_FILE), text)


def read_manifest(folder: str, what: str, error: ErrorType) -> Dict[str, Dict[str, Any]]:
    """The ``files`` table of ``folder``'s manifest; ``error`` (naming ``what``) when it is
    missing, unreadable, malformed or empty."""
    path = os.path.join(folder, MANIFEST_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise error(f"{what} is incomplete (no {MANIFEST_FILE}): {folder}") from None
    except (OSError, ValueError, RecursionError) as e:
        raise error(f"{what} manifest is unreadable: {path} ({type(e).__name__})") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, dict) and isinstance(v.get("sha256"), str)
                                              and type(v.get("bytes")) is int for v in files.values()):
        raise error(f"{what} manifest is malformed: {path}")
    if not files:
        raise error(f"{what} manifest is malformed: {path} lists no files")
    return files


def sealed_sha256(folder: str, rel: str) -> Optional[str]:
    """The SHA-256 ``folder``'s manifest records for its file ``rel``, or None (no manifest, or not listed)."""
    try:
        files = read_manifest(folder, "folder", WenxinError)
    except WenxinError:
        return None
    return files[rel]["sha256"] if rel in files else None


def verify_folder(folder: str, what: str, error: ErrorType, required: Collection[str] = (),
                  sealed: Collection[str] = (), unlisted_ok: Callable[[str, Dict[str, Any]], bool] = lambda r, f: False
                  ) -> Dict[str, Dict[str, Any]]:
    """Check every file of ``folder`` against its manifest and return the manifest's table.

    ``required``: files the loader always reads; the manifest must list them. ``sealed``:
    subfolders with a manifest of their own (not checked here). ``unlisted_ok(rel, files)``: a
    file present but unlisted that the loader will not read. The first problem is raised."""
    if not os.path.isdir(folder):
        raise error(f"{what} folder not found: {folder}")
    files = read_manifest(folder, what, error)
    manifest = os.path.join(folder, MANIFEST_FILE)
    omitted = [rel for rel in required if rel not in files]
    if omitted:
        raise error(f"{what} manifest does not list {omitted[0]}, which is always read: {manifest}")
    for rel in files:
        if outside(rel):
            raise error(f"{what} manifest names a file outside the {what}: {rel} ({folder})")
    for rel in files_of(folder):
        hidden = any(part.startswith(".") for part in rel.split("/"))
        if rel in files or hidden or rel.split("/")[0] in sealed or unlisted_ok(rel, files):
            continue
        raise error(f"{what} file is not in its manifest (added or left by something else): "
                    f"{os.path.join(folder, rel)}")
    for rel, expected in files.items():
        path = os.path.join(folder, rel)
        if not os.path.isfile(path):
            raise error(f"{what} file is missing: {path}")
        if os.path.getsize(path) != expected["bytes"] or file_sha256(path) != expected["sha256"]:
            raise error(f"{what} file is damaged (its checksum does not match the manifest): {path}")
    return files


class VerifiedCache:
    """Folders verified in this process: one whose files (names, sizes and mtimes, the manifest's
    included) are unchanged since it was verified is not hashed again."""

    def __init__(self) -> None:
        self._seen: Dict[str, Tuple[Tuple[str, int, int], ...]] = {}

    @staticmethod
    def _stamp(folder: str) -> Optional[Tuple[Tuple[str, int, int], ...]]:
        try:
            stats = [(rel, os.stat(os.path.join(folder, rel))) for rel in files_of(folder) + [MANIFEST_FILE]]
        except OSError:
            return None
        return tuple((rel, stat.st_size, stat.st_mtime_ns) for rel, stat in stats)

    def verify(self, folder: str, check: Callable[[], Any]) -> None:
        """Run ``check()`` unless ``folder`` passed it and has not changed since."""
        key = os.path.realpath(folder)
        stamp = self._stamp(folder) if os.path.isdir(folder) else None
        if stamp is not None and self._seen.get(key) == stamp:
            return
        self._seen.pop(key, None)
        check()
        if stamp is not None:
            self._seen[key] = stamp
