"""A model's name is a model: ``baidu/ERNIE-4.5-0.3B-PT`` where a model folder is asked for is
downloaded through a model hub's own client library into wenxin's cache (or found there), and the
folder it lands in is used. Hubs are a registry (``RegisterSet.model_hubs``): each is one module
of ``wenxin.hubs`` with one ``ModelHub`` class; which one is ``--hub``, else ``$WENXIN_HUB``, else
``DEFAULT_HUB``. A path that exists is always a path, never a name. A download fetches only the
files a model folder needs (``MODEL_FILES``: not other frameworks' weights, pictures or READMEs)."""
from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from typing import Optional, Sequence

from wenxin.common.cache_folder import cache_root
from wenxin.common.errors import CheckpointError, ConfigError, InstallError
from wenxin.common.registry import RegisterSet

HUB_ENV = "WENXIN_HUB"
OFFLINE_ENV = "WENXIN_OFFLINE"
DEFAULT_HUB = "huggingface"
HUBS_DIR = "hubs"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
# the files a model folder needs: ERNIE 4.5's (json, tokenizer.model, safetensors) and the
# classic families' (vocab.txt, model_state.pdparams, sentencepiece models, a static model's params/)
MODEL_FILES = ("*.json", "*.txt", "*.model", "*.safetensors", "*.pdparams", "params/*")


class ModelHub(ABC):
    """One hub: ``download`` fetches a model by name into ``folder`` (the hub's part of wenxin's
    cache) with progress, resuming what an earlier try left, checking what the hub's checksums
    allow; only the files matching ``files`` (glob patterns); ``offline``: the cache alone.
    Errors are ``WenxinError``s naming the model and the hub."""

    title = ""  # how users know it (Hugging Face, ModelScope, AI Studio)
    extra = "hub"  # the pip extra that installs its client library (one for every hub's)

    @abstractmethod
    def download(self, name: str, revision: Optional[str], folder: str, offline: bool,
                 files: Sequence[str] = MODEL_FILES) -> str:
        """The local folder holding model ``name`` at ``revision`` (None: the hub's default)."""

    # ---- the errors every hub gives, worded alike ----------------------------------------------
    def where(self, name: str, revision: Optional[str]) -> str:
        return f"{name} on {self.title}" + (f" (revision {revision})" if revision else "")

    def needs_library(self, name: str, library: str,
                      otherwise: str = "download the folder yourself and give its path") -> InstallError:
        return InstallError(f"{name}: downloading from {self.title} needs {library}: pip install "
                            f"\"wenxin[{self.extra}]\" (or {otherwise})")

    def no_such_model(self, where: str) -> ConfigError:
        return ConfigError(f"{where}: no such model (check the name, or choose another hub with --hub or $WENXIN_HUB)")

    def not_cached(self, where: str, folder: str, command: str) -> ConfigError:
        return ConfigError(f"{where}: not in the cache ({folder}) and offline; run it once online (or: {command})")

    def stopped(self, where: str, why: str) -> CheckpointError:
        return CheckpointError(f"{where}: the download stopped ({why}); run it again: it goes on from what it has")


def looks_like_name(text: str) -> bool:
    """``owner/model`` and no such path here."""
    return bool(NAME.match(text)) and not os.path.exists(text)


def chosen_hub(hub: Optional[str] = None) -> str:
    return hub or os.environ.get(HUB_ENV) or DEFAULT_HUB


def offline_wanted(offline: bool = False) -> bool:
    return offline or os.environ.get(OFFLINE_ENV, "").lower() in ("1", "true", "yes")


def download(name: str, hub: Optional[str] = None, revision: Optional[str] = None, offline: bool = False,
             key: str = "--hub") -> str:
    """Model ``name`` from ``hub`` (``chosen_hub``), into or from wenxin's cache; its local folder."""
    if not NAME.match(name):
        raise ConfigError(f"{name!r} is not a model name (owner/model, such as baidu/ERNIE-4.5-0.3B-PT)")
    which = chosen_hub(hub)
    hub_class = RegisterSet.model_hubs.get(which, None, key)
    model_hub: ModelHub = hub_class()
    return model_hub.download(name, revision, os.path.join(cache_root(), HUBS_DIR, which), offline_wanted(offline))


_downloads = {"allowed": False}


def allow_downloads(allowed: bool = True) -> None:
    """Whether checking a task file may download the models it names (the command line's commands
    that run a task: yes; a page listing task files: no, it finds them in the cache or says how)."""
    _downloads["allowed"] = allowed


def task_model_folder(name: str) -> str:
    """A task file's ``model_dir`` name: its folder, downloaded now where downloads are allowed,
    else from the cache; not there is a ``ConfigError`` saying how to get it."""
    if _downloads["allowed"]:
        return download(name)
    try:
        return download(name, offline=True)
    except ConfigError:
        raise ConfigError(f"the model {name} is not downloaded yet: wenxin download {name} (wenxin train "
                          f"downloads it too)") from None


def resolve(path_or_name: str, hub: Optional[str] = None, revision: Optional[str] = None,
            offline: bool = False) -> str:
    """``path_or_name`` itself where it is a path (or not a name), else the folder its download is in."""
    if not looks_like_name(path_or_name):
        return path_or_name
    return download(path_or_name, hub, revision, offline)
