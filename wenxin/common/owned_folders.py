"""Folders a command writes whole, and replaces only when it proves it wrote them.

An export (``wenxin export`` in any format, and the inference folder a run writes beside its
checkpoint) is written under a hidden name beside its destination, sealed by a manifest that
records which writer made it (its ``kind``), and swapped into place. Before anything at the
destination is replaced, it must prove to be an earlier folder of the same kind: a manifest of
that kind listing every file there (hidden ones included) at the recorded sizes. Anything else,
a checkpoint, another kind of export, a folder of the user's, a file, a symbolic link, is refused
with one error naming it and left as it was.

The swap is one step where the system offers it (Linux's ``renameat2`` with
``RENAME_EXCHANGE``: ``os`` has no binding, so it is called through ``ctypes``); a reader, or a
process killed at any instant, finds the old or the new folder whole. Elsewhere it is two
renames, and a process killed between them leaves the old folder aside, which the next write to
the same destination puts back before it starts. Either way the next write removes the hidden
leftovers of writers that are no longer running, and says so.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import re
import shutil
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Optional, Set

from wenxin.common.errors import CheckpointError, ConfigError, WenxinError
from wenxin.common.manifest import KIND_KEY, MANIFEST_FILE

logger = logging.getLogger("wenxin")

# hidden names beside the destination: a folder being written (after the swap: the old one), one set aside
_WRITING, _ASIDE = "writing", "aside"
_RENAME_EXCHANGE, _AT_FDCWD = 2, -100
_in_use: Set[str] = set()  # the hidden folders this process is writing now


def _leftover_pattern(name: str) -> "re.Pattern[str]":
    return re.compile(rf"^\.{re.escape(name)}\.({_WRITING}|{_ASIDE})-(\d+)-\w+$")


def legacy_kind(files: Dict[str, Any]) -> Optional[str]:
    """What wrote a sealed folder whose manifest records no kind (an older wenxin), told from the
    files it lists: a checkpoint, an inference export or a ``-PT`` model folder."""
    if "trainer_state.json" in files:
        return "checkpoint"
    if "preprocess.json" in files:
        return "inference"
    if "config.json" in files and any(rel.endswith(".safetensors") for rel in files):
        return "pretrained"
    return None


KIND_NAMES = {"checkpoint": "a checkpoint", "inference": "an inference export (wenxin export)",
              "pretrained": "a model folder export (wenxin export --format pt)"}
WRITTEN = {"inference": "inference model", "pretrained": "model folder"}  # what a writer of each kind writes
# files a writer of the kind adds to its sealed folder afterwards, through a temporary of its own
# (``wenxin export --format onnx`` writes ``.model.onnx.tmp``, then seals again)
ADDED_LATER = {"inference": ("model.onnx",)}


def _sealed_files(folder: str) -> Optional[Dict[str, Any]]:
    """The manifest of ``folder`` (its kind and files table), or None where it has none that parses."""
    try:
        with open(os.path.join(folder, MANIFEST_FILE), encoding="utf-8") as f:
            sealed = json.load(f)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(sealed, dict) or not isinstance(sealed.get("files"), dict):
        return None
    return sealed


def _kind_in(sealed: Dict[str, Any]) -> Optional[str]:
    recorded = sealed.get(KIND_KEY)
    return recorded if isinstance(recorded, str) else legacy_kind(sealed["files"])


def kind_of(folder: str) -> Optional[str]:
    """The kind of writer that sealed ``folder`` (recorded, or told from an older manifest's files)."""
    sealed = _sealed_files(folder)
    return None if sealed is None else _kind_in(sealed)


def _own_temporary(rel: str, listed: Dict[str, Any], kind: str) -> bool:
    """A temporary a writer of ``kind`` left when it was killed: ``X.tmp`` or ``.X.tmp`` beside X,
    where X is the manifest, a file it lists, or one the kind adds later (``ADDED_LATER``)."""
    if not rel.endswith(".tmp") or "/" in rel:
        return False
    stem = rel[:-len(".tmp")].lstrip(".")
    return stem == MANIFEST_FILE or stem in listed or stem in ADDED_LATER.get(kind, ())


def _all_files(folder: str) -> Dict[str, int]:
    """Every file below ``folder``, hidden ones included, with its size (symbolic links as files)."""
    found = {}
    for root, dirs, names in os.walk(folder):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder).replace(os.sep, "/")] = os.lstat(path).st_size
    return found


def foreign_content(final: str, kind: str) -> Optional[str]:
    """Why ``final`` may not be replaced by a folder of ``kind`` (None: it may). It may when it
    does not exist, is an empty folder, or is a folder ``kind``'s writer sealed whose files are
    exactly the ones its manifest lists, at their sizes."""
    if os.path.islink(final):
        target = os.readlink(final)
        return (f"is a symbolic link (to {target}{'' if os.path.exists(final) else ', which does not exist'}); "
                f"give the folder itself")
    if not os.path.lexists(final):
        ancestor = os.path.dirname(final)
        while ancestor != os.path.dirname(ancestor) and not os.path.lexists(ancestor):
            ancestor = os.path.dirname(ancestor)
        return None if os.path.isdir(ancestor) else f"is inside {ancestor}, which is not a folder"
    if not os.path.isdir(final):
        return "is a file, not a folder"
    present = _all_files(final)
    if not present and not os.listdir(final):
        return None
    sealed = _sealed_files(final)
    found = None if sealed is None else _kind_in(sealed)
    if sealed is None or found is None:
        return "exists and is not an earlier export (it holds no export manifest)"
    if found != kind:
        return f"holds {KIND_NAMES.get(found, f'a folder of another kind ({found})')}, not {KIND_NAMES[kind]}"
    present.pop(MANIFEST_FILE, None)
    listed = sealed["files"]
    extra = sorted(rel for rel in set(present) - set(listed) if not _own_temporary(rel, listed, kind))
    if extra:
        return f"holds {extra[0]}, which the earlier export did not write"
    changed = sorted(rel for rel, entry in listed.items()
                     if rel in present and not (isinstance(entry, dict) and entry.get("bytes") == present[rel]))
    if changed:
        return f"holds {changed[0]}, changed since the earlier export wrote it"
    return None


def refuse_foreign(final: str, kind: str) -> None:
    """One ``ConfigError`` naming ``final`` when a folder of ``kind`` may not replace it
    (``foreign_content``): callers check before the slow work that precedes ``writing``."""
    problem = foreign_content(os.path.abspath(final), kind)
    if problem:
        raise ConfigError(f"{os.path.abspath(final)} {problem}; an export replaces only an earlier {WRITTEN[kind]} "
                          f"there: choose another folder, or move it away")


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: running
        return True
    return True


def _exchange(a: str, b: str) -> bool:
    """Swap the folders ``a`` and ``b`` in one step; False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: this file system or kernel cannot
        return False
    raise OSError(errno, os.strerror(errno), b)


exchange: Callable[[str, str], bool] = _exchange  # tests replace it to exercise the two-rename swap


def _delete(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        with contextlib.suppress(OSError):
            os.remove(path)


def tidy_leftovers(final: str) -> List[str]:
    """Finish what a killed writer of ``final`` left: the old folder set aside goes back when
    ``final`` is missing; every other hidden folder of a writer no longer running is deleted.
    Returns what was removed or put back."""
    parent, name = os.path.split(os.path.abspath(final))
    if not os.path.isdir(parent):
        return []
    pattern, done = _leftover_pattern(name), []
    leftovers = []
    for entry in os.listdir(parent):
        match = pattern.match(entry)
        path = os.path.join(parent, entry)
        if match and path not in _in_use and (int(match.group(2)) == os.getpid() or
                                              not _pid_running(int(match.group(2)))):
            leftovers.append((match.group(1), path))
    if not os.path.lexists(final):
        asides = sorted((path for what, path in leftovers if what == _ASIDE), key=os.path.getmtime)
        if asides:
            os.rename(asides[-1], final)
            leftovers = [(what, path) for what, path in leftovers if path != asides[-1]]
            done.append(f"put back {final}, which an interrupted export had set aside")
    for _, path in leftovers:
        _delete(path)
        done.append(f"removed {path}, left by an interrupted export")
    for line in done:
        logger.info("%s", line)
    return done


def _swap_in(tmp: str, final: str) -> None:
    """Move the finished ``tmp`` to ``final``, replacing what is there; ``tmp`` is gone after."""
    if not os.path.lexists(final):
        os.rename(tmp, final)
        return
    if exchange(tmp, final):
        _delete(tmp)  # now the old folder
        return
    parent, name = os.path.split(final)
    aside = tempfile.mkdtemp(prefix=f".{name}.{_ASIDE}-{os.getpid()}-", dir=parent)
    os.rmdir(aside)
    os.rename(final, aside)
    os.rename(tmp, final)
    _delete(aside)


@contextlib.contextmanager
def writing(final: str, kind: str, error: Callable[[str], WenxinError] = CheckpointError) -> Iterator[str]:
    """Yields a new hidden folder beside ``final`` to write a whole folder of ``kind`` into, sealed
    (its manifest records ``kind``) before the block ends; then it replaces ``final``. Refused
    before anything is written (``ConfigError``) when ``final`` is not replaceable
    (``foreign_content``). If the block raises, the folder is deleted and ``final`` stays as it
    was; a failed write (a full disk, a read-only folder) is one ``error`` naming ``final``."""
    final, what = os.path.abspath(final), WRITTEN[kind]
    refuse_foreign(final, kind)
    parent, name = os.path.split(final)
    tmp = ""
    try:
        tidy_leftovers(final)
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{name}.{_WRITING}-{os.getpid()}-", dir=parent)
        _in_use.add(tmp)
        yield tmp
        if kind_of(tmp) != kind:
            raise RuntimeError(f"{tmp}: the {what} was not sealed as {kind}")
        problem = foreign_content(final, kind)  # again: something may have appeared while it was written
        if problem:
            raise ConfigError(f"{final} {problem}; the {what} was not put there")
        _swap_in(tmp, final)
    except OSError as e:
        kept = "the earlier one is kept" if os.path.lexists(final) else "nothing was written"
        raise error(f"{final}: cannot write the {what} ({e.strerror or e}); {kept}") from None
    finally:
        if tmp:
            _in_use.discard(tmp)
            _delete(tmp)
