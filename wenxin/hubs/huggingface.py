"""Hugging Face (``huggingface_hub``'s ``snapshot_download``; ``HF_ENDPOINT`` chooses the server,
such as a mirror, and ``HF_HUB_OFFLINE=1`` or ``--offline`` the cache alone). A dropped connection
is tried again by the library; a download that stops keeps the files it finished, and the next
try fetches only the rest (a file cut off is fetched whole again: measured with huggingface_hub
2.4, whose retries asked for no byte range). The hub's checksums are its LFS files'
SHA-256, which the library names each such file's blob by: every one is checked after the
download, and a file that does not match is deleted and named."""
from __future__ import annotations

import os
import re
from typing import Optional, Sequence

from wenxin.common.errors import CheckpointError, ConfigError
from wenxin.common.files import file_sha256
from wenxin.common.registry import RegisterSet
from wenxin.hubs import MODEL_FILES, ModelHub

SHA256 = re.compile(r"^[0-9a-f]{64}$")


@RegisterSet.model_hubs.register("huggingface")
class HuggingFaceHub(ModelHub):
    """Hugging Face, or a server that answers as it does (``HF_ENDPOINT``)."""

    title = "Hugging Face"

    def download(self, name: str, revision: Optional[str], folder: str, offline: bool,
                 files: Sequence[str] = MODEL_FILES) -> str:
        try:
            import huggingface_hub
            from huggingface_hub import errors
        except ImportError:
            raise self.needs_library(name, "huggingface_hub") from None
        where = self.where(name, revision)
        try:
            local = huggingface_hub.snapshot_download(name, revision=revision, cache_dir=folder,
                                                      local_files_only=offline, allow_patterns=list(files),
                                                      endpoint=os.environ.get("HF_ENDPOINT") or None)
        except errors.RepositoryNotFoundError:
            raise self.no_such_model(where) from None
        except errors.RevisionNotFoundError:
            raise ConfigError(f"{where}: no such revision") from None
        except errors.LocalEntryNotFoundError:
            raise self.not_cached(where, folder, f"wenxin download {name}") from None
        except Exception as e:  # noqa: BLE001 (HTTP errors, OSError, and the HTTP library's own: a dropped connection)
            raise self.stopped(where, f"{type(e).__name__}: {str(e)[:200]}") from None
        check_lfs_files(local, where)
        return local


def check_lfs_files(snapshot: str, where: str) -> None:
    """Each file whose blob is named by a SHA-256 (an LFS file: the hub's checksum) has that
    SHA-256; one that does not is deleted (blob and link), so the next try downloads it again."""
    for top, _, names in os.walk(snapshot):
        for file_name in names:
            path = os.path.join(top, file_name)
            blob = os.path.realpath(path)
            expected = os.path.basename(blob)
            if not SHA256.match(expected):
                continue
            found = file_sha256(blob)
            if found != expected:
                os.remove(blob)
                os.remove(path)
                raise CheckpointError(f"{where}: {os.path.relpath(path, snapshot)} does not match the hub's "
                                      f"checksum (SHA-256 {found[:16]}..., the hub says "
                                      f"{expected[:16]}...); it is deleted: download again")
