"""A process killed at every file operation of a save: on the numpy engine, a run is stopped at
each operation that changes the disk while it saves step 6 (a top-k folder that pushes another
out, a new ``best`` replacing the old one, the periodic folder that prunes an older one and drops
optimizer state), then resumed with ``resume: auto``. Every resumed run must end with the
uninterrupted run's parameters and exactly its checkpoint folders, index and optimizer states.

The kill is modelled in the process: the operation raises ``Killed`` (a ``BaseException``, which
no ``except Exception`` catches) and every file operation after it raises too, so no cleanup
handler touches the disk, as none runs after SIGKILL."""
import builtins
import json
import os
import shutil
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest
from fake_engine import numpy_trainer
from wenxin.common import state_io
from wenxin.controller.checkpoint import has_optimizer_state, is_valid
from wenxin.controller.checkpoint_folders import INTENT_FILE, CheckpointManager

from conftest import task_config, write_sentence_splits

KILLED_STEP = 6


class Killed(BaseException):
    """The process is gone: nothing after this reaches the disk."""


class FileOperations:
    """Counts the operations that change the disk while ``counting``; raises ``Killed`` at the
    ``kill_at``-th and at every operation after it."""

    def __init__(self, kill_at: Optional[int] = None) -> None:
        self.kill_at, self.count, self.dead, self.counting = kill_at, 0, False, False
        self.seen: List[Tuple[str, str]] = []

    def __call__(self, what: str, path: Any) -> None:
        if self.dead:
            raise Killed(what)
        if not self.counting:
            return
        self.count += 1
        self.seen.append((what, os.path.basename(str(path))))
        if self.count == self.kill_at:
            self.dead = True
            raise Killed(f"{what} {path}")


class Process:
    """The process under test: its file operations and its trainer (the one being killed, or
    the next one, which nothing kills)."""

    def __init__(self) -> None:
        self.ops, self.trainer = FileOperations(), None


def watch(monkeypatch: pytest.MonkeyPatch, process: Process) -> None:
    """Route every disk-changing operation wenxin's checkpoint code uses through the process's
    operations, counting those of every save (and what follows it) at ``KILLED_STEP``."""
    def wrap(module: Any, name: str, path_at: int = 0) -> None:
        real = getattr(module, name)

        def watched(*args: Any, **kwargs: Any) -> Any:
            process.ops(name, args[path_at])
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, watched)

    for name in ("rename", "replace", "remove", "unlink", "rmdir", "mkdir"):
        wrap(os, name)
    wrap(state_io, "save_file", path_at=1)  # safetensors writes from Rust: one operation per file
    real_open = builtins.open

    def watched_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wax+"):
            process.ops("open-for-writing", file)
        return real_open(file, mode, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", watched_open)
    real_save = CheckpointManager.save

    def save(manager: CheckpointManager, name: str, write: Any) -> str:
        process.ops.counting = process.trainer is not None and process.trainer.state.global_step == KILLED_STEP
        try:
            return real_save(manager, name, write)
        finally:
            process.ops.counting = False
    monkeypatch.setattr(CheckpointManager, "save", save)


@pytest.fixture
def data(tmp_path):
    return write_sentence_splits(str(tmp_path / "data"), 48, 16, 8)


def config(data: str, out: Any) -> Dict[str, Any]:
    c = task_config(data, str(out), type="CustomTrainer", train_log_step=1000, is_eval_test=0, max_steps=8,
                    eval_step=2, save_model_step=2, keep_checkpoint_max=2, save_top_k=2,
                    metric="loss", metric_mode="min", keep_optimizer_state="latest", resume="auto")
    c["dataset_reader"]["train_reader"]["config"]["batch_size"] = 8
    c["model"]["optimization"]["learning_rate"] = 0.3
    return c


def outcome(out: Any, trainer: Any) -> Dict[str, Any]:
    """What a finished run leaves: its parameters, its checkpoint folders (each verified), which
    hold optimizer state, and the published index without its times."""
    root = os.path.join(str(out), "checkpoints")
    names = sorted(os.listdir(root))
    folders = [n for n in names if os.path.isdir(os.path.join(root, n))]
    for name in folders:
        assert is_valid(os.path.join(root, name)) is None, name
    with open(os.path.join(root, "index.json"), encoding="utf-8") as f:
        index = json.load(f)
    for entry in index["checkpoints"]:
        entry.pop("time")
    return {"params": {k: np.asarray(v) for k, v in trainer.engine.model_state_dict().items()}, "names": names,
            "optimizer": {n: has_optimizer_state(os.path.join(root, n)) for n in folders}, "index": index}


def assert_same_outcome(got: Dict[str, Any], expected: Dict[str, Any], where: str) -> None:
    assert got["names"] == expected["names"], where
    assert got["optimizer"] == expected["optimizer"], where
    assert got["index"] == expected["index"], where
    for name, value in expected["params"].items():
        np.testing.assert_array_equal(got["params"][name], value, err_msg=f"{where}: {name}")


def test_a_kill_at_every_file_operation_of_a_save_resumes_and_prunes_as_an_uninterrupted_run(
        data, tmp_path, monkeypatch):
    process = Process()
    watch(monkeypatch, process)
    reference = process.trainer = numpy_trainer(config(data, tmp_path / "reference"), tmp_path)
    reference.do_train()
    expected = outcome(tmp_path / "reference", reference)
    total = process.ops.count
    kinds = {what for what, _ in process.ops.seen}
    names = {name for _, name in process.ops.seen}
    # the saves at step 6 write, rename, replace, and delete (the pushed-out top-k folder, the old
    # best, the pruned step_2, dropped optimizer state), all behind an intent
    assert {"rename", "save_file", "open-for-writing", "unlink", "rmdir"} <= kinds, kinds
    assert {INTENT_FILE, ".best.old", ".step_2.deleting", ".top_step_2.deleting"} <= names, sorted(names)
    assert expected["names"] == ["best", "index.json", "step_6", "step_8", "top_step_6", "top_step_8"]
    assert expected["optimizer"] == {"best": False, "step_6": True, "step_8": True, "top_step_6": False,
                                     "top_step_8": False}

    for kill_at in range(1, total + 1):
        out = tmp_path / f"killed_{kill_at}"
        process.ops, process.trainer = FileOperations(kill_at), None
        process.trainer = trainer = numpy_trainer(config(data, out), tmp_path)
        with pytest.raises(Killed):
            trainer.do_train()
        seen = process.ops.seen
        what = f"killed at operation {kill_at} of {total} ({seen[-1][0]} {seen[-1][1]})"
        process.ops, process.trainer = FileOperations(), None  # the next process: nothing is killed
        resumed = numpy_trainer(config(data, out), tmp_path)
        assert resumed.state.global_step in (4, KILLED_STEP), what
        assert not os.path.exists(os.path.join(str(out), "checkpoints", INTENT_FILE)), what
        resumed.do_train()
        assert_same_outcome(outcome(out, resumed), expected, what)
        shutil.rmtree(str(out))
