"""A run's checkpoint folders, with one record of what exists: the folders themselves.

A folder is a checkpoint when its manifest (written last) parses; its kind comes from its name
(``step_<N>`` periodic, ``top_step_<N>`` top-k, ``best``) and its step and dev metric from its own
``trainer_state.json``. Everything else is derived from them when it is needed:

- the checkpoint ``resume: auto`` continues is the newest periodic one that verifies and holds
  optimizer state;
- the top k are the k top-k folders with the best metric (ties: the earlier step);
- which folders keep their optimizer state follows from the resume point.

``index.json`` is a summary published for people and the studio after every change; nothing in
wenxin decides anything by reading it.

Every change is one sequence that starts by writing its intent to ``intent.json``:

- ``save``: write the folder hidden, its manifest last, and move it into place (an earlier
  folder of the same name is moved aside first and deleted after);
- ``continue_from``: a run continued from an earlier checkpoint of its own moves the later
  folders aside (or deletes those it will write again);

then tidy (prune to ``keep_checkpoint_max`` and the top k, drop stale optimizer state, delete
hidden leftovers, publish the index) and delete the intent. A process killed anywhere in a
sequence leaves its intent, and ``recover`` (run by the writing process before a run continues)
finishes it: a save whose folder is complete is moved into place, an incomplete one is discarded.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from wenxin.common.errors import CheckpointError
from wenxin.common.files import write_text_atomically
from wenxin.common.parsed import dict_at
from wenxin.controller.checkpoint import (
    BEST_DIR, INDEX_FILE, LAYOUTS, LEGACY_LATEST_FILE, TOP_PREFIX, drop_optimizer_state, fsync_tree,
    has_optimizer_state, is_complete, is_valid, read_trainer_state, resumable, write_manifest)
from wenxin.data.export_bundle import INFERENCE_DIR

logger = logging.getLogger("wenxin")

INTENT_FILE = "intent.json"
# hidden names a sequence works under (the folder being written, the one it replaces, one being deleted)
_WRITING, _REPLACED, _DELETING = ".tmp", ".old", ".deleting"
_HIDDEN = re.compile(r"^\..+\.(tmp|old|deleting)(-\w+)?$")  # also an older wenxin's ".name.tmp-xyz"


def _hidden(name: str, suffix: str) -> str:
    return f".{name}{suffix}"


def _fsync_dir(folder: str) -> None:
    """Make the renames inside ``folder`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class CheckpointManager:
    """Saves, lists, prunes and finds checkpoints under ``<output_path>/checkpoints`` (ERNIE-kit's
    layout: ``<output_path>/save_checkpoints/checkpoints_step_<N>``).

    Args:
        output_path: the run's output folder.
        keep_max: periodic checkpoints kept (the newest).
        layout: ``wenxin`` or ``erniekit`` (folder names).
        keep_optimizer_state: ``all``, ``latest`` or ``latest_and_best``.
        metric, metric_mode: the dev metric ranking ``best`` and the top k, and its direction.
        top_k: top-k checkpoints kept (0: the top-k folders are left as they are).
    """

    def __init__(self, output_path: str, keep_max: int, layout: str = "wenxin", keep_optimizer_state: str = "all",
                 metric: str = "", metric_mode: str = "max", top_k: int = 0) -> None:
        folder, self.prefix, exports, self.export_prefix = LAYOUTS[layout]
        self.keep_optimizer_state = keep_optimizer_state
        self.root = os.path.join(output_path, folder)
        self.export_root = os.path.join(output_path, exports) if exports else ""
        self.keep_max, self.top_k = keep_max, top_k
        self.metric, self.metric_mode = metric, metric_mode
        self._step_dir = re.compile(rf"^{re.escape(self.prefix)}(\d+)$")
        self._top_dir = re.compile(rf"^{re.escape(TOP_PREFIX + self.prefix)}(\d+)$")

    @classmethod
    def for_trainer(cls, cfg: Dict[str, Any]) -> "CheckpointManager":
        """The manager of a ``trainer`` config section: its output folder, its ``checkpoints``
        group and the ``evaluation`` metric that ranks the top k."""
        kept, evaluation = cfg["checkpoints"], cfg["evaluation"]
        return cls(cfg["output_path"], kept["keep_checkpoint_max"], kept["output_layout"], kept["keep_optimizer_state"],
                   evaluation["metric"], evaluation["metric_mode"], kept["save_top_k"])

    # ---- names -------------------------------------------------------------------------------
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

    def holds(self, folder: str) -> bool:
        """Whether ``folder`` is one of this run's checkpoints (not another run's)."""
        return os.path.dirname(os.path.abspath(folder)) == os.path.abspath(self.root)

    # ---- what exists (derived from the folders) ----------------------------------------------
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

    def top_ranking(self) -> List[Tuple[int, Optional[float]]]:
        """(step, dev metric) of the complete top-k folders, best first (ties: the earlier step;
        a folder without the metric last)."""
        return self.ranked([(step, metric_of(path, self.metric)) for step, path in self.top_dirs()])

    def ranked(self, entries: List[Tuple[int, Optional[float]]]) -> List[Tuple[int, Optional[float]]]:
        """(step, dev metric) pairs best first by ``metric_mode`` (ties: the earlier step; no metric last)."""
        sign = -1.0 if self.metric_mode == "max" else 1.0
        return sorted(entries, key=lambda entry: (sign * entry[1] if entry[1] is not None else math.inf, entry[0]))

    def latest(self) -> Optional[str]:
        """The checkpoint ``resume: auto`` continues: the newest periodic one whose checksums match
        and that holds optimizer state. Others are skipped with a warning."""
        for _, path in reversed(self.step_dirs()):
            problem = is_valid(path)
            if problem is not None:
                logger.warning("resume: skipping a damaged checkpoint: %s", problem)
            elif not has_optimizer_state(path):
                logger.warning("resume: skipping %s: it holds no optimizer state "
                               "(trainer.checkpoints.keep_optimizer_state: "
                               "latest keeps it only in the newest checkpoint)", path)
            else:
                return path
        return None

    def has_checkpoints(self) -> bool:
        """Any checkpoint folder, complete or not, of this or an older wenxin, or a sequence a
        crash cut short."""
        if self.export_root and os.path.isdir(self.export_root) and os.listdir(self.export_root):
            return True
        if not os.path.isdir(self.root):
            return False
        return any(self._step_dir.match(n) or self._top_dir.match(n) or n in (BEST_DIR, INTENT_FILE)
                   for n in os.listdir(self.root))

    def describe(self) -> Dict[str, Any]:
        """The index: every checkpoint folder with its kind (best, top, periodic), step, dev metric,
        time and whether a run can continue from it; top-k entries best first with their rank;
        ``latest``: the folder ``resume: auto`` continues."""
        entries = []
        if is_complete(os.path.join(self.root, BEST_DIR)):
            entries.append(index_entry(self.root, BEST_DIR, "best", self.metric))
        for rank, (step, _) in enumerate(self.top_ranking(), 1):
            entries.append({**index_entry(self.root, self.top_name(step), "top", self.metric), "rank": rank})
        entries += [index_entry(self.root, os.path.basename(path), "periodic", self.metric)
                    for _, path in reversed(self.step_dirs())]
        resume_point = self._resume_point()
        return {"metric": self.metric, "metric_mode": self.metric_mode,
                "latest": os.path.basename(resume_point) if resume_point else None, "checkpoints": entries}

    def _resume_point(self) -> Optional[str]:
        """The newest periodic checkpoint that lists optimizer state (checksums unchecked)."""
        return next((path for _, path in reversed(self.step_dirs()) if resumable(path)), None)

    # ---- sequences ---------------------------------------------------------------------------
    def save(self, name: str, write: Callable[[str], None]) -> str:
        """Write checkpoint ``name`` via ``write(folder)`` and move it into place; then prune, drop
        stale optimizer state and publish the index. On a full disk (or any write error) nothing
        partial is left and the earlier checkpoints stay."""
        final = os.path.join(self.root, name)
        tmp = os.path.join(self.root, _hidden(name, _WRITING))
        try:
            os.makedirs(self.root, exist_ok=True)
            self.recover()
            self._begin({"op": "save", "name": name})
            _delete(tmp)
            os.mkdir(tmp)
            write(tmp)
            write_manifest(tmp)
            fsync_tree(tmp)
        except OSError as e:  # a full disk, a quota: no partial checkpoint, the earlier ones stay
            self._abandon(tmp)
            raise CheckpointError(f"{final}: cannot write the checkpoint ({e.strerror or e}); "
                                  f"earlier checkpoints are kept") from None
        except BaseException:
            self._abandon(tmp)
            raise
        try:
            self._finish({"op": "save", "name": name})
        except OSError as e:
            raise CheckpointError(f"{final}: cannot move the written checkpoint into place ({e.strerror or e}); "
                                  f"the next start finishes it") from None
        return final

    def continue_from(self, folder: str, step: int, explicit: bool) -> Optional[str]:
        """A run continues from ``folder`` (one of this run's, at ``step``): the folders of later
        steps belong to a run it abandons. ``explicit`` (``resume: best``, ``load_checkpoint``):
        they move into ``after_step_<step>-<time>/`` (returned), nothing deleted. Otherwise
        (``resume: auto``) the top-k folders it writes again are deleted and only whole periodic
        ones (damaged, or auto would have taken them) are moved aside. A run continued from
        ``best`` gets it copied as its periodic checkpoint, the one ``resume: auto`` continues."""
        self.recover()
        later = self._later(step)
        aside = (f"after_step_{step}-{time.strftime('%Y%m%d-%H%M%S')}"
                 if any(self._kept_aside(path, explicit) for path in later) else None)
        source = os.path.basename(os.path.normpath(folder))
        if later or not self._step_dir.match(source):
            intent = {"op": "continue_from", "step": step, "source": source, "aside": aside, "explicit": explicit}
            self._begin(intent)
            self._finish(intent)
        else:
            self._tidy()
        return os.path.join(self.root, aside) if aside else None

    def recover(self) -> None:
        """Finish the sequence a killed process left (its ``intent.json``), if any. Run by the
        writing process only, before anything reads the folders to continue a run."""
        path = os.path.join(self.root, INTENT_FILE)
        if not os.path.isfile(path):
            return
        try:
            with open(path, encoding="utf-8") as f:
                intent = json.load(f)
            if not isinstance(intent, dict) or intent.get("op") not in ("save", "continue_from"):
                raise ValueError(f"not an intent: {intent!r:.80}")
        except (OSError, ValueError, RecursionError) as e:
            logger.warning("%s: unreadable (%s); tidying the checkpoint folders without it", path, e)
            intent = {"op": "tidy"}
        logger.info("checkpoints: finishing the %s a stopped process left in %s", intent["op"], self.root)
        self._finish(intent)

    def _begin(self, intent: Dict[str, Any]) -> None:
        write_text_atomically(os.path.join(self.root, INTENT_FILE), json.dumps(intent))

    def _abandon(self, tmp: str) -> None:
        """A save that failed before its folder was complete: no trace of it stays."""
        _delete(tmp)
        try:
            os.remove(os.path.join(self.root, INTENT_FILE))
        except OSError:
            pass

    def _finish(self, intent: Dict[str, Any]) -> None:
        """Carry out ``intent`` from wherever it stopped (every step can run again), then tidy."""
        if intent["op"] == "save":
            self._place(str(intent["name"]))
        elif intent["op"] == "continue_from":
            self._abandon_later(int(intent["step"]), intent.get("aside"), bool(intent.get("explicit")))
            if not self._step_dir.match(str(intent["source"])):
                self._copy_as_periodic(str(intent["source"]), int(intent["step"]))
        self._tidy()
        os.remove(os.path.join(self.root, INTENT_FILE))
        _fsync_dir(self.root)

    def _place(self, name: str) -> None:
        """Move the hidden, complete ``name`` into place, the folder it replaces aside first
        (deleted after); an incomplete one is discarded. (The folder it replaces is moved aside
        only once the new one is complete, so a kill never leaves neither.)"""
        final = os.path.join(self.root, name)
        tmp, replaced = (os.path.join(self.root, _hidden(name, s)) for s in (_WRITING, _REPLACED))
        if os.path.isdir(tmp) and is_complete(tmp):
            if os.path.exists(final):
                _delete(replaced)
                os.rename(final, replaced)
            os.rename(tmp, final)
            _fsync_dir(self.root)
        _delete(tmp)
        _delete(replaced)

    def _abandon_later(self, step: int, aside: Optional[str], explicit: bool) -> None:
        """Move the folders of steps after ``step`` into ``aside``, or delete them (see
        ``continue_from``)."""
        for path in self._later(step):
            if aside and self._kept_aside(path, explicit):
                target = os.path.join(self.root, aside)
                os.makedirs(target, exist_ok=True)
                os.rename(path, os.path.join(target, os.path.basename(path)))
                logger.warning("checkpoints: %s belongs to the run continued from step %d; moved to %s",
                               os.path.basename(path), step, target)
            else:
                _delete_folder(path)

    def _later(self, step: int) -> List[str]:
        """The periodic and top-k folders (complete or not) of steps after ``step``."""
        return [path for pattern in (self._step_dir, self._top_dir)
                for s, path in self._dirs(pattern, complete=False) if s > step]

    def _kept_aside(self, path: str, explicit: bool) -> bool:
        """Whether a later folder is moved aside rather than deleted: every whole one when the
        run was continued explicitly; otherwise whole periodic ones only."""
        return is_complete(path) and (explicit or bool(self._step_dir.match(os.path.basename(path))))

    def _copy_as_periodic(self, source: str, step: int) -> None:
        """``source`` (``best``) copied as the periodic checkpoint of ``step``."""
        name = self.step_name(step)
        if is_complete(os.path.join(self.root, name)):
            return
        tmp = os.path.join(self.root, _hidden(name, _WRITING))
        _delete(tmp)
        shutil.copytree(os.path.join(self.root, source), tmp)
        fsync_tree(tmp)
        self._place(name)

    def _tidy(self) -> None:
        """Prune to ``keep_max`` periodic and ``top_k`` top-k folders, drop stale optimizer state,
        delete hidden leftovers and publish the index. Every step is derived from the folders."""
        if not os.path.isdir(self.root):
            return
        for _, path in self.step_dirs()[:-self.keep_max]:
            _delete_folder(path)
        if self.top_k:
            for step, _ in self.top_ranking()[self.top_k:]:
                _delete_folder(os.path.join(self.root, self.top_name(step)))
        if self.keep_optimizer_state != "all":
            self._drop_stale_optimizer_states()
        for name in os.listdir(self.root):
            if _HIDDEN.match(name) or name in (LEGACY_LATEST_FILE, f"{LEGACY_LATEST_FILE}.tmp", f"{INDEX_FILE}.tmp"):
                _delete(os.path.join(self.root, name))
        _publish(os.path.join(self.root, INDEX_FILE), self.describe())

    def _drop_stale_optimizer_states(self) -> None:
        """Drop the optimizer state of checkpoints no run resumes from. The resume point keeps it,
        and so does the newest resumable checkpoint before it: the fallback ``resume: auto`` takes
        when the newest is damaged. Nothing is dropped unless the resume point verifies."""
        resume_point = self._resume_point()
        problem = is_valid(resume_point) if resume_point else None
        if resume_point is None or problem:
            if problem:
                logger.warning("%s does not verify (%s); older checkpoints keep their optimizer state",
                               resume_point, problem)
            return
        older = [path for _, path in self.step_dirs() if path != resume_point]
        best = os.path.join(self.root, BEST_DIR)
        kept = {resume_point, next((path for path in reversed(older) if resumable(path)), None)}
        if self.keep_optimizer_state == "latest_and_best":
            kept.add(best)
        for folder in older + [path for _, path in self.top_dirs()] + [best]:
            if folder not in kept:
                drop_optimizer_state(folder)


def _publish(path: str, index: Dict[str, Any]) -> None:
    """Write the index (a summary: a run goes on without it)."""
    try:
        write_text_atomically(path, json.dumps(index, indent=2, ensure_ascii=False))
    except OSError as e:
        logger.warning("%s: cannot write (%s)", path, e.strerror or e)


def metric_of(folder: str, metric: str) -> Optional[float]:
    """The dev ``metric`` a checkpoint was saved with (None when it has none)."""
    try:
        return _metric_in(read_trainer_state(folder), metric)
    except CheckpointError:
        return None


def _metric_in(state: Dict[str, Any], metric: str) -> Optional[float]:
    value = dict_at(state, "dev_metrics").get(metric)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def index_entry(root: str, name: str, kind: str, metric: str) -> Dict[str, Any]:
    """The index's entry of checkpoint ``name``: its kind, step, dev metric, time, and whether a
    run can continue from it."""
    folder = os.path.join(root, name)
    try:
        state = read_trainer_state(folder)
    except CheckpointError:
        state = {}
    saved = state.get("time")
    return {"name": name, "kind": kind, "step": state.get("global_step"), "metric": _metric_in(state, metric),
            "time": (time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(saved))
                     if isinstance(saved, (int, float)) else None),
            "resumable": resumable(folder)}


def _delete(path: str) -> None:
    """Delete a file or folder if it exists."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        try:
            os.remove(path)
        except OSError:
            pass


def _delete_folder(path: str) -> None:
    """Delete a checkpoint folder: renamed to a hidden name first, so a crash mid-delete never
    leaves a half-deleted folder that still looks complete."""
    if not os.path.isdir(path):
        return
    parent, name = os.path.split(path)
    hidden = os.path.join(parent, _hidden(name, _DELETING))
    _delete(hidden)
    os.rename(path, hidden)
    _delete(hidden)
