"""The Python API, for notebooks and scripts: a task from a dict or a task file, trained,
evaluated and asked for predictions, as the command line does it.

    import wenxin
    task = wenxin.Task.from_file("examples/text_classification_bow.json", overrides={"trainer.epoch": 1})
    result = task.train()            # a progress bar in Jupyter; returns the result checkpoint and metrics
    task.evaluate(["dev"])           # {"dev_reader": {"acc": ...}}
    task.predict(["质量很好", "太差了"])  # [{"label": "1", "probability": ...}, ...]

Everything a task file can say, the dict can (the same keys, checked the same way, errors naming
the key). Relative paths in it are relative to the working folder, as for a task file; the task
package is looked for there too. A ``Task`` applies wenxin's process-wide speed settings before
Paddle loads, as the command line does (``wenxin.common.process_settings``). See docs/notebook.md.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Union

from wenxin.common.errors import ConfigError
from wenxin.common.process_settings import apply_process_settings
from wenxin.config.loader import config_from_dict, load_config

Overrides = Union[Mapping[str, Any], Iterable[str]]


class TrainResult(NamedTuple):
    """What ``Task.train`` returns."""

    checkpoint: Optional[str]  # the result: the best checkpoint (load_best_at_end) or the newest
    step: int  # the training step of that checkpoint
    metrics: Dict[str, Dict[str, float]]  # the final evaluation, by reader ("dev_reader": {"acc": ...})
    interrupted: bool  # stopped by SIGTERM / Ctrl-C (KeyboardInterrupt) after saving a checkpoint


def _override_list(overrides: Overrides) -> List[str]:
    """``{"trainer.epoch": 1}`` or ``["trainer.epoch=1"]`` as ``--set`` strings."""
    if isinstance(overrides, Mapping):
        return [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    if isinstance(overrides, str):
        raise ConfigError("overrides: a dict {key: value} or a list of 'key=value' strings, not one string")
    return list(overrides)


class Task:
    """A task: its validated config, and the run that ``train`` made.

    Args:
        config: a task file's content as a dict (not changed).
        overrides: ``{"trainer.epoch": 1}`` or ``["trainer.epoch=1"]``, applied as ``--set`` is.
        source: where the config counts as written (its folder is searched for the task
            package, and errors name it); by default a ``task.json`` in the working folder.
    """

    def __init__(self, config: Mapping[str, Any], overrides: Overrides = (), source: str = "") -> None:
        if not isinstance(config, Mapping):
            raise ConfigError(f"config: a dict, like a task file's content, not a {type(config).__name__}")
        apply_process_settings()  # before the task (and Paddle) loads
        self.source = source or os.path.join(os.getcwd(), "task.json")
        self.overrides = _override_list(overrides)
        self.config = config_from_dict(dict(config), self.source, self.overrides)
        self.trainer: Any = None  # the trainer of the last ``train``
        self.result: Optional[TrainResult] = None

    @classmethod
    def from_file(cls, path: str, overrides: Overrides = ()) -> "Task":
        """The task of a task file (JSON or YAML, native or ERNIE-kit's)."""
        apply_process_settings()  # before the task (and Paddle) loads
        task = cls.__new__(cls)
        task.source = os.path.abspath(path)
        task.overrides = _override_list(overrides)
        task.config = load_config(path, task.overrides)
        task.trainer, task.result = None, None
        return task

    @property
    def output_path(self) -> str:
        return str(self.config["trainer"]["output_path"])

    def _fresh_config(self) -> Dict[str, Any]:
        """A copy of the config for one build (a build adds run-time keys to it)."""
        import copy
        return copy.deepcopy(self.config)

    def train(self) -> TrainResult:
        """Train as ``wenxin train`` does (resuming where ``trainer.checkpoints.resume`` says); the result
        checkpoint, its step and the final metrics. A progress bar shows in a notebook (and on
        a terminal), with ``trainer.logging.progress_bar`` as the switch."""
        from wenxin.controller.summary import result_checkpoint
        from wenxin.runner import build_trainer
        self.trainer = build_trainer(self._fresh_config())
        metrics = self.trainer.do_train()
        checkpoint, step, _ = result_checkpoint(self.trainer)
        self.result = TrainResult(checkpoint, step, metrics, bool(self.trainer.state.interrupted))
        return self.result

    def _checkpoint(self, checkpoint: Optional[str], what: str) -> str:
        if checkpoint:
            return checkpoint
        if self.result is not None and self.result.checkpoint:
            return self.result.checkpoint
        from wenxin.controller.checkpoint_folders import CheckpointManager
        manager = CheckpointManager.for_trainer(self.config["trainer"])
        found = manager.latest()
        if found is None:
            raise ConfigError(f"checkpoint: nothing to {what}: no checkpoint in {manager.root} (train first, or pass "
                              f"checkpoint=<a checkpoint folder or params file>)")
        return found

    def evaluate(self, readers: Sequence[str] = (), checkpoint: Optional[str] = None) -> Dict[str, Dict[str, float]]:
        """The metrics of ``checkpoint`` (by default the last ``train``'s result, else the newest
        checkpoint in the output path) on ``readers`` (``"dev"``, ``"test"``; by default those
        configured), as ``wenxin evaluate``. Nothing is written to the output path."""
        from wenxin.runner import evaluate_config
        if isinstance(readers, str):
            readers = [readers]
        return evaluate_config(self._fresh_config(), self._checkpoint(checkpoint, "evaluate"), readers,
                               "readers", self.source)

    def export(self, checkpoint: Optional[str] = None, output: str = "", onnx: bool = False) -> str:
        """Export ``checkpoint`` (as in ``evaluate``) as an inference folder, by default
        ``<checkpoint>/inference``; returns its path."""
        from wenxin.runner import export_config
        formats = ("paddle", "onnx") if onnx else ("paddle",)
        return export_config(self._fresh_config(), self._checkpoint(checkpoint, "export"), output, formats)

    def predict(self, rows: Sequence[Union[str, Sequence[str]]], checkpoint: Optional[str] = None,
                batch_size: int = 64) -> List[Dict[str, Any]]:
        """Predictions for ``rows`` (a text each, or one text per input field) from
        ``checkpoint`` (as in ``evaluate``), exported first where it has no inference folder;
        one result a row, in the model's result format (a classifier's ``label``,
        ``probability`` and ``probs``)."""
        from wenxin.inference.predictor import Predictor
        from wenxin.data.export_bundle import inference_folder
        source = self._checkpoint(checkpoint, "predict with")
        try:
            folder = inference_folder(source)
        except ConfigError:
            folder = self.export(source)
        table = [[row] if isinstance(row, str) else list(row) for row in rows]
        return Predictor(folder, task=self.config.get("task") or "").predict(table, batch_size=batch_size)

    def __repr__(self) -> str:
        return f"Task({self.config.get('task')!r}, model {self.config['model']['type']!r}, output {self.output_path!r})"
