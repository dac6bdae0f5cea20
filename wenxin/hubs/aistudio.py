"""AI Studio (飞桨星河社区), through its own client library, ``aistudio-sdk``; ``STUDIO_GIT_HOST``
chooses the server (its Gitea), and ``AISTUDIO_ACCESS_TOKEN`` (or ``aistudio-sdk``'s saved login)
signs in. The library checks a file against the SHA-256 the hub gives for it, tries a dropped
connection again (three times) and goes on from the part an interrupted download left (a Range
request, in whole megabytes). It reports each download to AI Studio's statistics itself.

Measured with aistudio-sdk 0.3.9 against tests/fake_hubs.py's loopback server, and mended here:
- a file that fails (dropped connections, a wrong checksum) is printed and skipped, and the
  download returns as if it had finished: wenxin lists the model's files again and names any that
  did not arrive;
- a file whose download was resumed (a dropped connection tried again, or the part an earlier run
  left) is downloaded whole into the library's ``._tmp`` folder but never put in place, and every
  later run stops at it the same way: wenxin finishes such a part as the library would (its size
  and the hub's SHA-256 checked, then the library's own cache puts it in place), and deletes a part
  that does not match, so the next run fetches it afresh;
- the library prints to standard output, which is wenxin's answer (``wenxin download`` prints the
  folder), so its words go to standard error."""
from __future__ import annotations

import contextlib
import fnmatch
import os
import sys
from typing import List, Optional, Sequence

from wenxin.common.errors import CheckpointError
from wenxin.common.files import file_sha256
from wenxin.common.registry import RegisterSet
from wenxin.hubs import MODEL_FILES, ModelHub

CACHED_FILES = ".msc"  # aistudio-sdk's list of the files a folder holds


@RegisterSet.model_hubs.register("aistudio")
class AIStudioHub(ModelHub):
    """AI Studio, or a server that answers as its Gitea does (``STUDIO_GIT_HOST``)."""

    title = "AI Studio"

    def download(self, name: str, revision: Optional[str], folder: str, offline: bool,
                 files: Sequence[str] = MODEL_FILES) -> str:
        try:
            from aistudio_sdk import errors
            from aistudio_sdk.snapshot_download import get_model_files, snapshot_download
        except ImportError:
            raise self.needs_library(name, "aistudio-sdk") from None
        where = self.where(name, revision)
        local = os.path.join(folder, *name.split("/"), revision or "master")
        if offline:
            if not os.path.exists(os.path.join(local, CACHED_FILES)):
                raise self.not_cached(where, folder, f"wenxin download {name} --hub aistudio")
            return local
        try:
            with contextlib.redirect_stdout(sys.stderr):
                snapshot_download(repo_id=name, revision=revision, local_dir=local, allow_patterns=list(files))
                listed, _ = get_model_files(name, revision or "master")
        except errors.NotExistError:
            raise self.no_such_model(where) from None
        except Exception as e:  # noqa: BLE001 (the network, the server: the library's own errors and requests')
            raise self.stopped(where, f"{type(e).__name__}: {str(e)[:300]}") from None
        missing = [path for path in wanted_files(listed, files) if not os.path.isfile(os.path.join(local, path))]
        if missing:
            finish_parts(name, revision or "master", local, missing)
            missing = [path for path in missing if not os.path.isfile(os.path.join(local, path))]
        if missing:
            raise CheckpointError(f"{where}: {', '.join(missing)} did not arrive (the download failed or did not "
                                  f"match the hub's SHA-256: aistudio-sdk said which above); run it again: it goes on "
                                  f"from what it has")
        return local


def wanted_files(listed: List[dict], files: Sequence[str]) -> List[str]:
    """The paths of the hub's file list that ``files`` asks for (as aistudio-sdk matches them)."""
    return [entry["path"] for entry in listed if entry.get("type") != "tree"
            and any(fnmatch.fnmatch(entry["path"], pattern) for pattern in files)]


def finish_parts(name: str, revision: str, local: str, paths: List[str]) -> None:
    """Put in place the whole parts aistudio-sdk left in ``local``'s ``._tmp`` for ``paths`` (see the
    module docstring): a part of the size the hub lists and, where it gives one, its SHA-256 goes in
    through the library's cache; a part that is too long or does not match is deleted."""
    from aistudio_sdk.file_download import create_temporary_directory_and_cache, get_git_info

    parts, cache = create_temporary_directory_and_cache(name, local_dir=local)
    for path in paths:
        part = os.path.join(parts, path)
        if not os.path.isfile(part):
            continue
        listed = get_git_info(name, path, revision, None)
        size, expected = listed.get("size"), listed.get("Sha256")
        if not isinstance(size, int) or os.path.getsize(part) < size:
            continue  # still short: the next run goes on from it
        if os.path.getsize(part) == size and (not expected or file_sha256(part) == expected):
            cache.put_file(listed, part)
        else:
            os.remove(part)
