"""ModelScope (魔搭), through its own client library, ``modelscope-hub`` (the hub client that
``modelscope`` itself calls since 1.40; Python 3.10 and newer). ``MODELSCOPE_ENDPOINT`` chooses
the server (``MODELSCOPE_DOMAIN``, older, too). The library lists every file with its size and
SHA-256 and checks each download against them; a dropped connection is tried again from the byte
it reached (a Range request), and a download that stops keeps its part, so the next run goes on
from there (measured with modelscope-hub 0.5.1 against tests/fake_hubs.py's loopback server)."""
from __future__ import annotations

import os
from typing import Optional, Sequence

from wenxin.common.registry import RegisterSet
from wenxin.hubs import MODEL_FILES, ModelHub


@RegisterSet.model_hubs.register("modelscope")
class ModelScopeHub(ModelHub):
    """ModelScope, or a server that answers as it does (``MODELSCOPE_ENDPOINT``)."""

    title = "ModelScope"

    def download(self, name: str, revision: Optional[str], folder: str, offline: bool,
                 files: Sequence[str] = MODEL_FILES) -> str:
        try:
            from modelscope_hub import HubApi, errors
        except ImportError:
            raise self.needs_library(name, "modelscope-hub (Python 3.10 or newer)",
                                     f"modelscope download {name} --local-dir FOLDER, and give the folder's "
                                     f"path") from None
        where = self.where(name, revision)
        try:
            # the library reads its settings once a process; the endpoint is read each time here
            api = HubApi(endpoint=os.environ.get("MODELSCOPE_ENDPOINT") or None)
            local = api.download_repo(name, "model", revision=revision, cache_dir=folder,
                                      allow_patterns=list(files), local_files_only=offline)
        except errors.CacheNotFound:
            raise self.not_cached(where, folder, f"wenxin download {name} --hub modelscope") from None
        except errors.NotExistError:
            raise self.no_such_model(where) from None
        except errors.FileDownloadError as e:
            failed = getattr(e, "failed_files", None) or {}
            said = "; ".join(f"{path}: {why}" for path, why in sorted(failed.items())) or str(e)
            raise self.stopped(where, said[:400]) from None
        except errors.HubError as e:  # the network, the server, authentication: said by the library
            raise self.stopped(where, f"{type(e).__name__}: {str(e)[:300]}") from None
        return str(local)
