"""Models by name (``model.pretrained``): a folder path, or a name found in the caches where
PaddleNLP, AI Studio and the Hugging Face Hub keep downloaded models, and, only where the task
allows it (``model.pretrained_download``), a download through wenxin's model hubs (``wenxin.hubs``:
Hugging Face, ModelScope or AI Studio, as ``$WENXIN_HUB`` chooses), as ``wenxin download`` does.

Looked up in order, the first found wins:

1. a folder at that path;
2. PaddleNLP's model cache: ``$PPNLP_HOME/models/<name>`` (``~/.paddlenlp/models``), where
   ``from_pretrained("ernie-3.0-mini-zh")`` puts a model;
3. AI Studio's cache as aistudio-sdk 0.1 (PaddleNLP 2.8's) writes it:
   ``$AISTUDIO_CACHE_HOME/.cache/aistudio/models/<repo>/snapshots/<revision>/<commit>`` (``$HOME``
   by default), the newest commit, for ``<user>/<repo>``;
4. the Hugging Face Hub's own cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ``~/.cache/huggingface/hub``),
   read through ``huggingface_hub`` with ``local_files_only``, for ``<org>/<name>``;
5. wenxin's hub cache (``wenxin download``'s), and with ``download`` the hub itself, for
   ``<org>/<name>`` (``--offline``'s ``$WENXIN_OFFLINE`` and the hubs' own offline settings keep to
   the cache).

Nothing is downloaded otherwise: a name found nowhere is one error listing where it was looked for.
"""
from __future__ import annotations

import os
import re
from typing import List, Optional, Tuple

from wenxin.common.errors import ConfigError, WenxinError
from wenxin.hubs import NAME
from wenxin.hubs import download as download_model

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def paddlenlp_models() -> str:
    home = os.environ.get("PPNLP_HOME") or os.path.join(os.path.expanduser("~"), ".paddlenlp")
    return os.path.join(home, "models")


def aistudio_models() -> str:
    home = os.environ.get("AISTUDIO_CACHE_HOME") or os.environ.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".cache", "aistudio", "models")


def _aistudio_snapshot(name: str) -> Optional[str]:
    """The newest cached commit of AI Studio repo ``<user>/<repo>``."""
    if "/" not in name:
        return None
    snapshots = os.path.join(aistudio_models(), name.split("/", 1)[1], "snapshots")
    commits = [os.path.join(snapshots, revision, commit) for revision in _listdir(snapshots)
               for commit in _listdir(os.path.join(snapshots, revision))]
    commits = [c for c in commits if os.path.isdir(c)]
    return max(commits, key=os.path.getmtime) if commits else None


def _listdir(folder: str) -> List[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _hugging_face_cache(name: str) -> Optional[str]:
    """The snapshot of ``name`` in the Hugging Face Hub's own cache, if huggingface_hub has one."""
    if not REPO_ID.match(name):
        return None
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    try:
        return snapshot_download(name, local_files_only=True)
    except Exception:  # noqa: BLE001 (not cached, or the cache unreadable: step 5 says more)
        return None


def _wenxin_hub(name: str, download: bool) -> Tuple[Optional[str], str]:
    """``name`` from wenxin's hub cache, or downloaded; or None and why."""
    if not NAME.match(name):
        return None, "not an <org>/<name> a hub holds"
    try:
        return download_model(name, offline=not download), ""
    except WenxinError as e:
        return None, str(e)


def is_model_name(text: str) -> bool:
    """A name a cache may hold (``ernie-3.0-mini-zh``, ``PaddlePaddle/ernie-3.0-mini-zh``), not a
    path (absolute, ``./``, ``~``, or deeper than ``<org>/<name>``)."""
    return bool(re.match(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$", text)) and ".." not in text.split("/")


def resolve_model(name: str, download: bool = False, key: str = "model.pretrained") -> str:
    """The model folder ``name`` names (see the module docstring); one ``ConfigError`` naming
    ``key`` and every place looked in when it is found nowhere."""
    if os.path.isdir(name):
        return name
    if os.path.exists(name):
        raise ConfigError(f"{key}: {name} is a file, not a model folder")
    if not is_model_name(name):
        raise ConfigError(f"{key}: model folder not found: {name}")
    looked = [f"no folder {name}"]
    paddlenlp = os.path.join(paddlenlp_models(), name)
    if os.path.isdir(paddlenlp):
        return paddlenlp
    looked.append(f"not in PaddleNLP's cache ({paddlenlp})")
    aistudio = _aistudio_snapshot(name)
    if aistudio is not None:
        return aistudio
    looked.append(f"not in AI Studio's cache ({aistudio_models()})")
    hugging_face = _hugging_face_cache(name)
    if hugging_face is not None:
        return hugging_face
    looked.append("not in the Hugging Face Hub's cache")
    hub, why = _wenxin_hub(name, download)
    if hub is not None:
        return hub
    looked.append(why)
    allow = "" if download else ("; set model.pretrained_download: true to download it (from the hub $WENXIN_HUB "
                                 "names: huggingface, the default, modelscope or aistudio)")
    raise ConfigError(f"{key}: model '{name}' not found: {'; '.join(looked)}{allow}")
