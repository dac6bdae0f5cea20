"""ModelScope (魔搭), through its own client library, ``modelscope-hub`` (the hub client that
``modelscope`` itself calls since 1.40; Python 3.10 and newer). ``MODELSCOPE_ENDPOINT`` chooses
the server (``MODELSCOPE_DOMAIN``, older, too). The library lists every file with its size and
SHA-256 and checks each download against them; a dropped connection is tried again from the byte
it reached (a Range request), and a download that stops keeps its part, so the next run goes on
from there (measured with modelscope-hub 0.5.1 against tests/fake_hubs.py's loopback server)."""
from __future__ import annotations

import os
from typing import Optional, Sequence

from wenxin.common.errors import CheckpointError, ConfigError, InstallError
from wenxin.common.registry import RegisterSet
from wenxin.hubs import MODEL_FILES, ModelHub


@RegisterSet.model_hubs.register("modelscope")
class ModelScopeHub(ModelHub):
    """ModelScope, or a server that answers as it does (``MODELSCOPE_ENDPOINT``)."""

    title = "ModelScope"
    extra = "hub"

    def download(self, name: str, revision: Optional[str], folder: str, offline: bool,
                 files: Sequence[str] = MODEL_FILES) -> str:
        try:
            from modelscope_hub import HubApi, errors
        except ImportError:
            raise InstallError(f"{name}: downloading from ModelScope needs modelscope-hub (Python 3.10 or newer): "
                               f"pip install \"wenxin[hub]\" (or: modelscope download --model {name} --local_dir "
                               f"FOLDER, and give the folder's path)") from None
        where = f"{name} on {self.title}" + (f" (revision {revision})" if revision else "")
        try:
            # the library reads its settings once a process; the endpoint is read each time here
            api = HubApi(endpoint=os.environ.get("MODELSCOPE_ENDPOINT") or None)
            local = api.download_repo(name, "model", revision=revision, cache_dir=folder,
                                           allow_patterns=list(files), local_files_only=offline)
        except errors.CacheNotFound:
            raise ConfigError(f"{where}: not in the cache ({folder}) and offline; run it once online (or: wenxin "
                              f"download {name} --hub modelscope)") from None
        except errors.NotExistError:
            raise ConfigError(f"{where}: no such model (check the name, or choose another hub with --hub or "
                              f"$WENXIN_HUB)") from None
        except errors.FileDownloadError as e:
            failed = getattr(e, "failed_files", None) or {}
            said = "; ".join(f"{path}: {why}" for path, why in sorted(failed.items())) or str(e)
            raise CheckpointError(f"{where}: the download stopped ({said[:400]}); run it again: it goes on from "
                                  f"what it has") from None
        except errors.HubError as e:  # the network, the server, authentication: said by the library
            raise CheckpointError(f"{where}: the download stopped ({type(e).__name__}: {str(e)[:300]}); run it "
                                  f"again: it goes on from what it has") from None
        return str(local)
