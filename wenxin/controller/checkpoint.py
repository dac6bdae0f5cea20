"""Checkpoint folders' format: atomic writes, checksums, verification, and the parts a checkpoint
holds. Which folders exist, and every change to them, is ``checkpoint_folders``'s.

Layout under ``<output_path>/checkpoints``::

    step_<N>/            model.safetensors                 parameters by structured name
                         optimizer.json/.safetensors      optimizer state (JSON + arrays; by default
                                                          only in the newest: keep_optimizer_state)
                         extra.json/.safetensors          LR schedule, loss scaler, RNG, hooks
                         trainer_state.json, config.json, vocab/<field>.txt
                         manifest.json                    SHA-256 of every file above (last)
                         inference/, pretrained/          exports of it, each sealed by its own manifest
    best/                a copy of the best checkpoint by the configured metric
    top_step_<N>/        the ``save_top_k`` best checkpoints by that metric
    index.json           a summary of the folders for people and the studio (never read back)
    intent.json          only while a change is under way (``checkpoint_folders``)

Nothing in a checkpoint is executed on load: state is JSON and safetensors, never pickle. A
checkpoint is written to a hidden temporary folder, its manifest last, and renamed into place,
so a crash never leaves a half-written checkpoint that looks complete. Loading verifies every
checksum and names a damaged file.
"""
from __future__ import annotations

import json
import logging
import os
import re
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union


from wenxin.common.errors import CheckpointError
from wenxin.common import manifest
from wenxin.common.files import write_text_atomically
from wenxin.common.manifest import MANIFEST_FILE
from wenxin.common.state_io import load_arrays, load_state, save_arrays, save_state, state_files
from wenxin.data.export_bundle import INFERENCE_DIR  # noqa: F401 (where checkpoints keep their export)

PRETRAINED_DIR = "pretrained"  # <checkpoint>/pretrained: its model folder export (export --format pt)

logger = logging.getLogger("wenxin")

MODEL_FILE = "model.safetensors"
LEGACY_MODEL_FILE = "model.pdparams"  # Paddle's pickle format: only for foreign, trusted files
OPTIMIZER_STATE = "optimizer"
EXTRA_STATE = "extra"
STATE_FILE = "trainer_state.json"
CONFIG_FILE = "config.json"
VOCAB_DIR = "vocab"
LEGACY_LATEST_FILE = "latest"  # an older wenxin's marker of the newest checkpoint (now derived; deleted)
BEST_DIR = "best"
INDEX_FILE = "index.json"
TOP_PREFIX = "top_"
FORMAT = 2
# Where checkpoints and exports go, by trainer.checkpoints.output_layout: (checkpoint folder, step-folder
# prefix, export folder or "" for <checkpoint>/inference, export prefix)
LAYOUTS = {"wenxin": ("checkpoints", "step_", "", ""),
           "erniekit": ("save_checkpoints", "checkpoints_step_", "save_inference_model", "inference_step_")}


def fsync_tree(folder: str) -> None:
    """Flush every file of a finished folder to disk."""
    for rel in manifest.files_of(folder) + [MANIFEST_FILE]:
        with open(os.path.join(folder, rel), "rb") as f:
            os.fsync(f.fileno())


def _write_json(path: str, data: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False, default=str)


def write_manifest(folder: str) -> None:
    """Record the size and SHA-256 of every file of a finished checkpoint (written last)."""
    manifest.write_manifest(folder, FORMAT)


def _refuse_older_format(folder: str) -> None:
    """An older wenxin's checkpoint (pickle files, no manifest) is named as such."""
    legacy = os.path.isfile(os.path.join(folder, "extra.pdstate"))
    if legacy and not os.path.isfile(os.path.join(folder, MANIFEST_FILE)):
        raise CheckpointError(f"{folder}: a checkpoint of an older wenxin (pickle files); it cannot be "
                              f"resumed, but trainer.checkpoints.load_parameters can take its {LEGACY_MODEL_FILE}")


def read_manifest(folder: str) -> Dict[str, Dict[str, Any]]:
    _refuse_older_format(folder)
    return manifest.read_manifest(folder, "checkpoint", CheckpointError)


# The files every checkpoint load reads, so its manifest must list them
REQUIRED_FILES = (MODEL_FILE, STATE_FILE, CONFIG_FILE, state_files(EXTRA_STATE)[0])
_verified = manifest.VerifiedCache()


def _dropped_optimizer_state(rel: str, files: Mapping[str, Any]) -> bool:
    """An optimizer state file left after the manifest stopped listing it (a crash inside
    ``drop_optimizer_state``): the loader never reads it."""
    return rel in state_files(OPTIMIZER_STATE) and state_files(OPTIMIZER_STATE)[0] not in files


def verify(folder: str) -> None:
    """Check every file against the manifest, which must list every file a load reads; the first
    damaged, missing or unlisted one is named. A folder verified before in this process, whose
    files (names, sizes, mtimes) are unchanged, is not hashed again. ``inference/`` and
    ``pretrained/``, the checkpoint's exports, are sealed by manifests of their own."""
    def check() -> None:
        _refuse_older_format(folder)  # verify_folder reads the manifest itself, once
        manifest.verify_folder(folder, "checkpoint", CheckpointError, REQUIRED_FILES,
                               sealed=(INFERENCE_DIR, PRETRAINED_DIR),
                               unlisted_ok=_dropped_optimizer_state)
    _verified.verify(folder, check)


def is_complete(folder: str) -> bool:
    """A checkpoint is complete when its manifest (written last) parses."""
    try:
        read_manifest(folder)
        return True
    except CheckpointError:
        return False


def is_valid(folder: str) -> Optional[str]:
    """None when every checksum of ``folder`` matches, else what is wrong."""
    try:
        verify(folder)
        return None
    except CheckpointError as e:
        return str(e)


def has_optimizer_state(folder: str) -> bool:
    return state_files(OPTIMIZER_STATE)[0] in read_manifest(folder)


def resumable(folder: str) -> bool:
    """Whether a run can continue from ``folder`` (its manifest lists optimizer state)."""
    try:
        return has_optimizer_state(folder)
    except CheckpointError:
        return False


def drop_optimizer_state(folder: str) -> None:
    """Remove the optimizer state of a checkpoint no run resumes from (``keep_optimizer_state:
    latest``); its weights, vocabularies and progress stay. The manifest is rewritten first, so a
    crash in between leaves a valid checkpoint with an unlisted file."""
    if not os.path.isfile(os.path.join(folder, MANIFEST_FILE)):
        return
    try:
        files = read_manifest(folder)
    except CheckpointError:
        return  # a damaged checkpoint is left as it is (resume skips it and says why)
    names = state_files(OPTIMIZER_STATE)
    kept = {rel: entry for rel, entry in files.items() if rel not in names}
    if len(kept) == len(files):
        return
    try:
        write_text_atomically(os.path.join(folder, MANIFEST_FILE), json.dumps({"format": FORMAT, "files": kept}))
        for name in names:
            if os.path.isfile(os.path.join(folder, name)):
                os.remove(os.path.join(folder, name))
    except OSError as e:
        logger.warning("%s: could not remove its optimizer state (%s)", folder, e.strerror or e)


def write_checkpoint(folder: str, model_state: Mapping[str, Any], optimizer_state: Mapping[str, Any],
                     extra: Mapping[str, Any], trainer_state: Mapping[str, Any],
                     config: Mapping[str, Any], write_vocabs: Optional[Callable[[str], None]] = None) -> None:
    """Write every part of a checkpoint into ``folder`` (the manager adds the manifest)."""
    save_arrays(os.path.join(folder, MODEL_FILE), model_state)
    save_state(folder, OPTIMIZER_STATE, dict(optimizer_state))
    save_state(folder, EXTRA_STATE, dict(extra))
    if write_vocabs is not None:
        write_vocabs(os.path.join(folder, VOCAB_DIR))
    _write_json(os.path.join(folder, CONFIG_FILE), dict(config))
    _write_json(os.path.join(folder, STATE_FILE), dict(trainer_state))


# The progress counters a checkpoint must hold, and their types.
# a periodic or top-k folder's name holds its step, in either layout (LAYOUTS)
_STEP_FOLDER = re.compile(rf"(?:{TOP_PREFIX})?(?:checkpoints_)?step_(\d+)")
_TRAINER_STATE_TYPES: Dict[str, Union[type, Tuple[type, ...]]] = {
    "global_step": int, "epoch": int, "step_in_epoch": int, "best_step": int, "best_metric": (float, int, type(None))}


def _read_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{what} not found: {path}") from None
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{what} is corrupt or unreadable: {path} ({type(e).__name__})") from None


def read_trainer_state(folder: str) -> Dict[str, Any]:
    path = os.path.join(folder, STATE_FILE)
    state = _read_json(path, "checkpoint trainer state")
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint trainer state is malformed: {path} (not an object)")
    for key, types in _TRAINER_STATE_TYPES.items():
        value = state.get(key)
        if key not in state or isinstance(value, bool) or not isinstance(value, types) or \
                (isinstance(value, int) and key != "best_step" and value < 0):
            raise CheckpointError(f"checkpoint trainer state is malformed: {path} ({key}: {value!r})")
    named = _STEP_FOLDER.fullmatch(os.path.basename(os.path.normpath(folder)))
    if named and int(named.group(1)) != state["global_step"]:  # edited, or another step's state copied in
        raise CheckpointError(f"checkpoint trainer state does not fit its folder: {path} says global_step "
                              f"{state['global_step']}, but the folder is step {named.group(1)}'s")
    return state


def read_config(folder: str) -> Dict[str, Any]:
    config = _read_json(os.path.join(folder, CONFIG_FILE), "checkpoint config")
    if not isinstance(config, dict):
        raise CheckpointError(f"checkpoint config is malformed: {os.path.join(folder, CONFIG_FILE)}")
    return config


def read_checkpoint(folder: str) -> Dict[str, Any]:
    """All parts of a checkpoint folder, after its checksums are verified."""
    verify(folder)
    if not has_optimizer_state(folder):
        raise CheckpointError(f"{folder}: holds no optimizer state (trainer.checkpoints.keep_optimizer_state: "
                              f"latest keeps it "
                              f"only in the newest checkpoint), so a run cannot continue from it; "
                              f"trainer.checkpoints.load_parameters starts a new run from its weights")
    return {"model": load_arrays(os.path.join(folder, MODEL_FILE), "checkpoint model file"),
            "optimizer": load_state(folder, OPTIMIZER_STATE, "checkpoint optimizer state"),
            "extra": load_state(folder, EXTRA_STATE, "checkpoint extra state"),
            "trainer_state": read_trainer_state(folder),
            "config": read_config(folder)}
