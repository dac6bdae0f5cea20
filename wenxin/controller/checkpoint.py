"""Checkpoint folders: atomic writes, discovery, retention, and parameter loading with reports.

Layout under ``<output_path>/checkpoints``::

    step_<N>/            model.pdparams, optimizer.pdopt, extra.pdstate (scheduler, scaler,
                         RNG, hooks), trainer_state.json (written last), config.json
    best/                a copy of the best checkpoint by the configured metric
    latest               the name of the newest complete checkpoint

A checkpoint is written to a hidden temporary folder and renamed into place, and ``latest`` is
replaced last, so a crash never leaves a half-written checkpoint that looks complete.
"""
from __future__ import annotations

import json
import logging
import os
import pickle
import re
import shutil
import tempfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np
import paddle

from wenxin.common.errors import CheckpointError

logger = logging.getLogger(__name__)

MODEL_FILE = "model.pdparams"
OPTIMIZER_FILE = "optimizer.pdopt"
EXTRA_FILE = "extra.pdstate"
STATE_FILE = "trainer_state.json"
CONFIG_FILE = "config.json"
LATEST_FILE = "latest"
BEST_DIR = "best"
_STEP_DIR = re.compile(r"^step_(\d+)$")


def _fsync_tree(folder: str) -> None:
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "rb") as f:
            os.fsync(f.fileno())


def _write_json(path: str, data: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False, default=str)


def _replace_file(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _set_aside(path: str) -> str:
    """Rename ``path`` into a new hidden sibling folder (atomic) and return that folder."""
    parent, name = os.path.split(os.path.abspath(path))
    trash = tempfile.mkdtemp(prefix=f".{name}.old-", dir=parent)
    os.rename(path, os.path.join(trash, name))
    return trash


def replace_folder(tmp: str, final: str) -> None:
    """Move the finished folder ``tmp`` to ``final``. An existing ``final`` is renamed aside first
    and deleted only after the new one is in place, so a crash never leaves neither."""
    trash = _set_aside(final) if os.path.exists(final) else None
    os.rename(tmp, final)
    if trash:
        shutil.rmtree(trash, ignore_errors=True)


def is_complete(folder: str) -> bool:
    """A checkpoint is complete when its trainer state (written last) parses."""
    try:
        with open(os.path.join(folder, STATE_FILE), encoding="utf-8") as f:
            return isinstance(json.load(f), dict)
    except (OSError, ValueError):
        return False


class CheckpointManager:
    """Saves, lists, prunes and finds checkpoints under ``<output_path>/checkpoints``."""

    def __init__(self, output_path: str, keep_max: int) -> None:
        self.root = os.path.join(output_path, "checkpoints")
        self.keep_max = keep_max

    def step_dirs(self) -> List[Tuple[int, str]]:
        """(step, path) of complete periodic checkpoints, oldest first."""
        if not os.path.isdir(self.root):
            return []
        found = []
        for name in os.listdir(self.root):
            m = _STEP_DIR.match(name)
            path = os.path.join(self.root, name)
            if m and is_complete(path):
                found.append((int(m.group(1)), path))
        return sorted(found)

    def latest(self) -> Optional[str]:
        """The newest complete checkpoint: the ``latest`` marker if valid, else a scan."""
        marker = os.path.join(self.root, LATEST_FILE)
        if os.path.isfile(marker):
            with open(marker, encoding="utf-8") as f:
                path = os.path.join(self.root, f.read().strip())
            if is_complete(path):
                return path
        dirs = self.step_dirs()
        return dirs[-1][1] if dirs else None

    def save(self, name: str, write: Callable[[str], None], update_latest: bool = True) -> str:
        """Write a checkpoint via ``write(tmp_folder)``, then move it into place atomically."""
        os.makedirs(self.root, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=self.root)
        try:
            write(tmp)
            _fsync_tree(tmp)
            final = os.path.join(self.root, name)
            replace_folder(tmp, final)  # the same step saved again (e.g. at the end) replaces it
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if update_latest:
            _replace_file(os.path.join(self.root, LATEST_FILE), name)
            self.prune()
        return final

    def prune(self) -> None:
        """Keep the newest ``keep_max`` periodic checkpoints; remove stale temporary folders.
        A checkpoint is renamed to a hidden name before it is deleted, so a crash mid-delete
        never leaves a half-deleted folder that still looks complete."""
        for step, path in self.step_dirs()[:-self.keep_max]:
            shutil.rmtree(_set_aside(path), ignore_errors=True)
        for name in os.listdir(self.root):
            if name.startswith(".") and (".tmp-" in name or ".old-" in name):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

    def has_checkpoints(self) -> bool:
        return bool(self.step_dirs()) or os.path.isdir(os.path.join(self.root, BEST_DIR))


def write_checkpoint(folder: str, model_state: Mapping[str, Any], optimizer_state: Mapping[str, Any],
                     extra: Mapping[str, Any], trainer_state: Mapping[str, Any],
                     config: Mapping[str, Any]) -> None:
    paddle.save(dict(model_state), os.path.join(folder, MODEL_FILE))
    paddle.save(dict(optimizer_state), os.path.join(folder, OPTIMIZER_FILE))
    with open(os.path.join(folder, EXTRA_FILE), "wb") as f:  # RNG states are not tensors: plain pickle
        pickle.dump(dict(extra), f, protocol=4)
    _write_json(os.path.join(folder, CONFIG_FILE), {k: v for k, v in config.items() if not k.startswith("_")})
    _write_json(os.path.join(folder, STATE_FILE), trainer_state)  # last: marks completeness


def load_file(path: str, what: str, plain_pickle: bool = False) -> Any:
    """``paddle.load`` (or ``pickle.load``) with a clear error for missing, truncated or corrupt files."""
    if not os.path.isfile(path):
        raise CheckpointError(f"{what} not found: {path}")
    try:
        if plain_pickle:
            with open(path, "rb") as f:
                return pickle.load(f)
        return paddle.load(path)
    except Exception as e:  # paddle and pickle raise many types for corrupt files
        raise CheckpointError(f"{what} is corrupt or unreadable: {path} ({type(e).__name__}: {e})") from None


def read_checkpoint(folder: str) -> Dict[str, Any]:
    """All parts of a checkpoint folder, checked for completeness."""
    if not os.path.isdir(folder):
        raise CheckpointError(f"checkpoint folder not found: {folder}")
    if not is_complete(folder):
        raise CheckpointError(f"checkpoint is incomplete (no readable {STATE_FILE}): {folder}")
    with open(os.path.join(folder, STATE_FILE), encoding="utf-8") as f:
        state = json.load(f)
    return {"model": load_file(os.path.join(folder, MODEL_FILE), "checkpoint model file"),
            "optimizer": load_file(os.path.join(folder, OPTIMIZER_FILE), "checkpoint optimizer file"),
            "extra": load_file(os.path.join(folder, EXTRA_FILE), "checkpoint state file", plain_pickle=True),
            "trainer_state": state}


def resolve_params_file(path: str) -> str:
    """A params file, or a checkpoint folder (its model file)."""
    if os.path.isdir(path):
        return os.path.join(path, MODEL_FILE)
    return path


def _as_array(value: Any) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


class LoadReport:
    """What a parameter load matched, missed, did not expect and skipped for shape mismatch."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.loaded: List[str] = []
        self.missing: List[str] = []
        self.unexpected: List[str] = []
        self.mismatched: List[Tuple[str, Tuple[int, ...], Tuple[int, ...]]] = []

    def summary(self) -> str:
        lines = [f"loaded {len(self.loaded)} parameters from {self.source}"]
        if self.missing:
            lines.append(f"  missing in file ({len(self.missing)}, keep their init): {', '.join(self.missing)}")
        if self.unexpected:
            lines.append(f"  unexpected in file ({len(self.unexpected)}, ignored): {', '.join(self.unexpected)}")
        for name, want, got in self.mismatched:
            lines.append(f"  shape mismatch, skipped: {name}: model {list(want)} vs file {list(got)}")
        return "\n".join(lines)


def match_parameters(model_state: Mapping[str, Any], loaded: Mapping[str, Any], source: str,
                     prefix_map: Optional[Mapping[str, str]] = None) -> Tuple[Dict[str, np.ndarray], LoadReport]:
    """Rename ``loaded`` by ``prefix_map`` and keep what fits ``model_state`` by name and shape."""
    if not isinstance(loaded, Mapping):
        raise CheckpointError(f"{source}: not a parameter dict (got {type(loaded).__name__})")
    renamed: Dict[str, Any] = {}
    for name, value in loaded.items():
        for old, new in (prefix_map or {}).items():
            if name.startswith(old):
                name = new + name[len(old):]
                break
        renamed[name] = value
    report = LoadReport(source)
    matched: Dict[str, np.ndarray] = {}
    for name, param in model_state.items():
        if name not in renamed:
            report.missing.append(name)
            continue
        value = _as_array(renamed[name])
        want = tuple(param.shape)
        if tuple(value.shape) != want:
            report.mismatched.append((name, want, tuple(value.shape)))
            continue
        matched[name] = value
        report.loaded.append(name)
    report.unexpected = sorted(set(renamed) - set(model_state))
    return matched, report


def rename_state_keys(state: Mapping[str, Any], names: Mapping[str, str]) -> Dict[str, Any]:
    """Rename optimizer-state keys ``<param name>_<suffix>`` by the longest matching param name.

    Optimizer accumulators are named after Paddle's internal parameter names (``linear_3.w_0``),
    which depend on creation order; checkpoints store them under structured names
    (``fc.weight_moment1_0``) so they load into a model built in another process or mode."""
    ordered = sorted(names, key=len, reverse=True)
    renamed: Dict[str, Any] = {}
    for key, value in state.items():
        if isinstance(value, Mapping):  # e.g. master_weights, LR_Scheduler
            renamed[key] = rename_state_keys(value, names) if key == "master_weights" else dict(value)
            continue
        new = key
        for old in ordered:
            if key == old or key.startswith(old + "_"):
                new = names[old] + key[len(old):]
                break
        renamed[new] = value
    return renamed
