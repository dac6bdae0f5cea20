"""Checkpoint folders: atomic writes, checksums, discovery, retention, and parameter loading
with reports.

Layout under ``<output_path>/checkpoints``::

    step_<N>/            model.safetensors                 parameters by structured name
                         optimizer.json/.safetensors      optimizer state (JSON + arrays; by default
                                                          only in the newest: keep_optimizer_state)
                         extra.json/.safetensors          LR schedule, loss scaler, RNG, hooks
                         trainer_state.json, config.json, vocab/<field>.txt
                         manifest.json                    SHA-256 of every file above (last)
    best/                a copy of the best checkpoint by the configured metric
    top_step_<N>/        the ``save_top_k`` best checkpoints by that metric
    latest               the name of the newest complete checkpoint
    index.json           which folder is which: kind, step, dev metric, time (rewritten after
                         every change; the folders are the truth, the index is their summary)

Nothing in a checkpoint is executed on load: state is JSON and safetensors, never pickle. A
checkpoint is written to a hidden temporary folder, its manifest last, and renamed into place,
and ``latest`` is replaced after that, so a crash never leaves a half-written checkpoint that
looks complete. Loading verifies every checksum and names a damaged file.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union


from wenxin.common.errors import CheckpointError
from wenxin.common import manifest
from wenxin.common.files import write_text_atomically
from wenxin.common.manifest import MANIFEST_FILE
from wenxin.common.parsed import dict_at
from wenxin.common.state_io import load_arrays, load_state, save_arrays, save_state, state_files
from wenxin.data.export_bundle import INFERENCE_DIR  # noqa: F401 (where checkpoints keep their export)

logger = logging.getLogger("wenxin")

MODEL_FILE = "model.safetensors"
LEGACY_MODEL_FILE = "model.pdparams"  # Paddle's pickle format: only for foreign, trusted files
OPTIMIZER_STATE = "optimizer"
EXTRA_STATE = "extra"
STATE_FILE = "trainer_state.json"
CONFIG_FILE = "config.json"
VOCAB_DIR = "vocab"
LATEST_FILE = "latest"
BEST_DIR = "best"
INDEX_FILE = "index.json"
TOP_PREFIX = "top_"
FORMAT = 2
# Where checkpoints and exports go, by trainer.output_layout: (checkpoint folder, step-folder
# prefix, export folder or "" for <checkpoint>/inference, export prefix)
LAYOUTS = {"wenxin": ("checkpoints", "step_", "", ""),
           "erniekit": ("save_checkpoints", "checkpoints_step_", "save_inference_model", "inference_step_")}


def _fsync_tree(folder: str) -> None:
    for rel in manifest.files_of(folder) + [MANIFEST_FILE]:
        with open(os.path.join(folder, rel), "rb") as f:
            os.fsync(f.fileno())


def _write_json(path: str, data: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False, default=str)


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


def write_manifest(folder: str) -> None:
    """Record the size and SHA-256 of every file of a finished checkpoint (written last)."""
    manifest.write_manifest(folder, FORMAT)


def _refuse_older_format(folder: str) -> None:
    """An older wenxin's checkpoint (pickle files, no manifest) is named as such."""
    legacy = os.path.isfile(os.path.join(folder, "extra.pdstate"))
    if legacy and not os.path.isfile(os.path.join(folder, MANIFEST_FILE)):
        raise CheckpointError(f"{folder}: a checkpoint of an older wenxin (pickle files); it cannot be "
                              f"resumed, but trainer.load_parameters can take its {LEGACY_MODEL_FILE}")


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
    files (names, sizes, mtimes) are unchanged, is not hashed again. ``inference/`` is sealed by
    its own manifest."""
    def check() -> None:
        _refuse_older_format(folder)  # verify_folder reads the manifest itself, once
        manifest.verify_folder(folder, "checkpoint", CheckpointError, REQUIRED_FILES, sealed=(INFERENCE_DIR,),
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


class CheckpointManager:
    """Saves, lists, prunes and finds checkpoints under ``<output_path>/checkpoints`` (ERNIE-kit's
    layout: ``<output_path>/save_checkpoints/checkpoints_step_<N>``)."""

    def __init__(self, output_path: str, keep_max: int, layout: str = "wenxin",
                 keep_optimizer_state: str = "all", metric: str = "", metric_mode: str = "max") -> None:
        folder, self.prefix, exports, self.export_prefix = LAYOUTS[layout]
        self.keep_optimizer_state = keep_optimizer_state
        self.root = os.path.join(output_path, folder)
        self.export_root = os.path.join(output_path, exports) if exports else ""
        self.keep_max = keep_max
        self.metric, self.metric_mode = metric, metric_mode
        self._step_dir = re.compile(rf"^{re.escape(self.prefix)}(\d+)$")
        self._top_dir = re.compile(rf"^{re.escape(TOP_PREFIX + self.prefix)}(\d+)$")

    @classmethod
    def for_trainer(cls, cfg: Mapping[str, Any]) -> "CheckpointManager":
        """The manager of a ``trainer`` config section."""
        return cls(cfg["output_path"], cfg["keep_checkpoint_max"], cfg.get("output_layout", "wenxin"),
                   cfg.get("keep_optimizer_state", "all"), cfg.get("metric", ""), cfg.get("metric_mode", "max"))

    def step_name(self, step: int) -> str:
        return f"{self.prefix}{step}"

    def top_name(self, step: int) -> str:
        """The folder of a top-k checkpoint (``top_step_<N>``)."""
        return f"{TOP_PREFIX}{self.prefix}{step}"

    def export_folder(self, name: str, checkpoint: str) -> str:
        """Where the inference model of checkpoint ``name`` (at ``checkpoint``) is exported."""
        if not self.export_root:
            return os.path.join(checkpoint, INFERENCE_DIR)
        step = self._step_dir.match(name)
        return os.path.join(self.export_root, f"{self.export_prefix}{step.group(1)}" if step else f"inference_{name}")

    def step_dirs(self) -> List[Tuple[int, str]]:
        """(step, path) of complete periodic checkpoints, oldest first."""
        return self._dirs(self._step_dir)

    def top_dirs(self) -> List[Tuple[int, str]]:
        """(step, path) of complete top-k checkpoints, oldest first."""
        return self._dirs(self._top_dir)

    def _dirs(self, pattern: "re.Pattern[str]", complete: bool = True) -> List[Tuple[int, str]]:
        if not os.path.isdir(self.root):
            return []
        found = []
        for name in os.listdir(self.root):
            m = pattern.match(name)
            path = os.path.join(self.root, name)
            if m and (not complete or is_complete(path)):
                found.append((int(m.group(1)), path))
        return sorted(found)

    def remove(self, name: str) -> None:
        """Delete a checkpoint folder: renamed to a hidden name first, so a crash mid-delete never
        leaves a half-deleted folder that still looks complete."""
        path = os.path.join(self.root, name)
        if os.path.isdir(path):
            shutil.rmtree(_set_aside(path), ignore_errors=True)
        self.write_index()

    def remove_top_except(self, steps: "set[int]") -> List[str]:
        """Delete the top-k folders (complete or not) of steps not in ``steps``; returns their paths."""
        removed = [path for step, path in self._dirs(self._top_dir, complete=False) if step not in steps]
        for path in removed:
            shutil.rmtree(_set_aside(path), ignore_errors=True)
        if removed:
            self.write_index()
        return removed

    def set_aside_after(self, step: int) -> Optional[str]:
        """Move the periodic and top-k checkpoints of steps after ``step`` (a run continued from
        an earlier checkpoint abandons them) into ``after_step_<step>-<time>/``; returns it, or
        None when there were none. Nothing is deleted."""
        later = [path for pattern in (self._step_dir, self._top_dir)
                 for s, path in self._dirs(pattern, complete=False) if s > step]
        if not later:
            return None
        aside = os.path.join(self.root, f"after_step_{step}-{time.strftime('%Y%m%d-%H%M%S')}")
        os.makedirs(aside, exist_ok=True)
        for path in later:
            os.rename(path, os.path.join(aside, os.path.basename(path)))
        self.write_index()
        return aside

    def mark_latest(self, name: str) -> None:
        """Point the ``latest`` marker at ``name`` (what ``resume: auto`` continues)."""
        write_text_atomically(os.path.join(self.root, LATEST_FILE), name)

    def write_index(self) -> None:
        """Rewrite ``index.json``: every checkpoint folder with its kind (best, top, periodic),
        step, dev metric, time and whether a run can continue from it. Top-k entries come best
        first with their rank."""
        if not os.path.isdir(self.root):
            return
        entries = []
        best = os.path.join(self.root, BEST_DIR)
        if is_complete(best):
            entries.append(self._index_entry(BEST_DIR, "best"))
        tops = [self._index_entry(os.path.basename(p), "top") for _, p in self.top_dirs()]
        sign = -1.0 if self.metric_mode == "max" else 1.0
        tops.sort(key=lambda e: (sign * e["metric"] if isinstance(e["metric"], (int, float)) else math.inf,
                                 e["step"]))
        for rank, entry in enumerate(tops, 1):
            entries.append({**entry, "rank": rank})
        entries += [self._index_entry(os.path.basename(p), "periodic") for _, p in reversed(self.step_dirs())]
        marked = self._marked()
        index = {"metric": self.metric, "metric_mode": self.metric_mode,
                 "latest": os.path.basename(marked) if marked else None, "checkpoints": entries}
        try:
            write_text_atomically(os.path.join(self.root, INDEX_FILE), json.dumps(index, indent=2, ensure_ascii=False))
        except OSError as e:  # the index only describes the folders; a run goes on without it
            logger.warning("%s: cannot write (%s)", os.path.join(self.root, INDEX_FILE), e.strerror or e)

    def _index_entry(self, name: str, kind: str) -> Dict[str, Any]:
        folder = os.path.join(self.root, name)
        try:
            state = read_trainer_state(folder)
        except CheckpointError:
            state = {}
        metrics = dict_at(state, "dev_metrics")
        saved = state.get("time")
        return {"name": name, "kind": kind, "step": state.get("global_step"),
                "metric": metrics.get(self.metric),
                "time": (time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(saved))
                         if isinstance(saved, (int, float)) else None),
                "resumable": _resumable(folder)}

    def latest(self) -> Optional[str]:
        """The newest complete checkpoint whose checksums match and that holds optimizer state:
        the ``latest`` marker if it names one, else the newest ``step_<N>``. Others are skipped
        with a warning."""
        marked = self._marked()
        candidates = ([marked] if marked else []) + [path for _, path in reversed(self.step_dirs())]
        for path in dict.fromkeys(candidates):
            if not os.path.isdir(path):
                continue
            problem = is_valid(path)
            if problem is not None:
                logger.warning("resume: skipping a damaged checkpoint: %s", problem)
            elif not has_optimizer_state(path):
                logger.warning("resume: skipping %s: it holds no optimizer state (trainer.keep_optimizer_state: "
                               "latest keeps it only in the newest checkpoint)", path)
            else:
                return path
        return None

    def _marked(self) -> Optional[str]:
        """The checkpoint the ``latest`` marker names, if it names one."""
        marker = os.path.join(self.root, LATEST_FILE)
        if os.path.isfile(marker):
            try:
                with open(marker, encoding="utf-8") as f:
                    name = f.read(256).strip()
                if self._step_dir.match(name) or name == BEST_DIR:
                    return os.path.join(self.root, name)
            except (OSError, UnicodeDecodeError):
                pass
        return None

    def save(self, name: str, write: Callable[[str], None], update_latest: bool = True) -> str:
        """Write a checkpoint via ``write(tmp_folder)``, then move it into place atomically."""
        final = os.path.join(self.root, name)
        tmp = ""
        try:
            os.makedirs(self.root, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=self.root)
            write(tmp)
            write_manifest(tmp)
            _fsync_tree(tmp)
            replace_folder(tmp, final)  # the same step saved again (e.g. at the end) replaces it
        except OSError as e:  # a full disk, a quota: no partial checkpoint, the earlier ones stay
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
            raise CheckpointError(f"{final}: cannot write the checkpoint ({e.strerror or e}); "
                                  f"earlier checkpoints are kept") from None
        except BaseException:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        if update_latest:
            try:
                self.mark_latest(name)
            except OSError as e:
                raise CheckpointError(f"{os.path.join(self.root, LATEST_FILE)}: cannot write ({e.strerror or e}); "
                                      f"the checkpoint {final} is complete") from None
            self.prune()
        if self.keep_optimizer_state != "all":  # only once the new checkpoint is complete and named
            self._drop_stale_optimizer_states(final)
        self.write_index()
        return final

    def _drop_stale_optimizer_states(self, saved: str) -> None:
        """Drop the optimizer state of checkpoints no run resumes from. The resume point keeps it,
        and so does the newest resumable checkpoint before it: the fallback ``resume: auto`` takes
        when the newest is damaged. Nothing is dropped unless ``saved`` verifies."""
        problem = is_valid(saved)
        if problem:
            logger.warning("%s does not verify after saving (%s); older checkpoints keep their optimizer state",
                           saved, problem)
            return
        dirs = self.step_dirs()  # (step, path), oldest first
        steps = [path for _, path in dirs]
        resume_point = self._marked() or (steps[-1] if steps else None)  # what resume: auto continues
        resume_step = next((step for step, path in dirs if path == resume_point), None)
        fallback = next((path for step, path in reversed(dirs) if path != resume_point and _resumable(path)
                         and (resume_step is None or step < resume_step)), None)
        kept = {resume_point, fallback}
        if self.keep_optimizer_state == "latest_and_best":
            kept.add(os.path.join(self.root, BEST_DIR))
        for folder in steps + [path for _, path in self.top_dirs()] + [os.path.join(self.root, BEST_DIR)]:
            if folder not in kept:
                drop_optimizer_state(folder)

    def holds(self, folder: str) -> bool:
        """Whether ``folder`` is one of this run's checkpoints (not another run's)."""
        return os.path.dirname(os.path.abspath(folder)) == os.path.abspath(self.root)

    def prune(self) -> None:
        """Keep the newest ``keep_max`` periodic checkpoints; remove stale temporary folders.
        A checkpoint is renamed to a hidden name before it is deleted, so a crash mid-delete
        never leaves a half-deleted folder that still looks complete."""
        if not os.path.isdir(self.root):
            return
        for _, path in self.step_dirs()[:-self.keep_max]:
            shutil.rmtree(_set_aside(path), ignore_errors=True)
        for name in os.listdir(self.root):
            if name.startswith(".") and (".tmp-" in name or ".old-" in name):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

    def has_checkpoints(self) -> bool:
        """Any checkpoint folder, complete or not, of this or an older wenxin."""
        if self.export_root and os.path.isdir(self.export_root) and os.listdir(self.export_root):
            return True
        if not os.path.isdir(self.root):
            return False
        return any(self._step_dir.match(n) or self._top_dir.match(n) or n == BEST_DIR for n in os.listdir(self.root))


def has_optimizer_state(folder: str) -> bool:
    return state_files(OPTIMIZER_STATE)[0] in read_manifest(folder)


def _resumable(folder: str) -> bool:
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
        raise CheckpointError(f"{folder}: holds no optimizer state (trainer.keep_optimizer_state: latest keeps it "
                              f"only in the newest checkpoint), so a run cannot continue from it; "
                              f"trainer.load_parameters starts a new run from its weights")
    return {"model": load_arrays(os.path.join(folder, MODEL_FILE), "checkpoint model file"),
            "optimizer": load_state(folder, OPTIMIZER_STATE, "checkpoint optimizer state"),
            "extra": load_state(folder, EXTRA_STATE, "checkpoint extra state"),
            "trainer_state": read_trainer_state(folder),
            "config": read_config(folder)}
