"""The few lines that end a training run: which checkpoint is the result, with its step and
metrics, where the run's outputs are, and the commands to run next."""
from __future__ import annotations

import json
import os
import shlex
from typing import Any, Dict, List, Optional, Sequence, Tuple

from wenxin.controller import checkpoint as ckpt
from wenxin.common.constants import METRICS_FILE

# overrides that choose the checkpoint a run starts from, left out of the command that resumes it
RESUME_OVERRIDES = tuple(f"trainer.{path}=" for path in ("resume", "load_checkpoint", "checkpoints.resume",
                                                         "checkpoints.load_checkpoint"))


def _records(path: str) -> List[Dict[str, Any]]:
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue  # a line cut by a crash
    except OSError:
        pass
    return records


def result_metrics(metrics_file: str, step: int, metric: str) -> str:
    """``dev acc 0.853, test acc 0.865``: the newest dev/test records of the weights of ``step``
    (``best_dev``/``best_test`` are the best checkpoint's, re-evaluated at the end)."""
    newest: Dict[str, float] = {}
    for record in _records(metrics_file):
        tag = str(record.get("tag", "")).replace("best_", "")
        if record.get("step") == step and tag in ("dev", "test") and metric in record:
            newest[tag] = record[metric]
    return ", ".join(f"{tag} {metric} {newest[tag]:.4g}" for tag in ("dev", "test") if tag in newest)


def result_checkpoint(trainer: Any) -> Tuple[Optional[str], int, str]:
    """The checkpoint a finished run's result is, its step, and why: the best one where the run
    loaded it at the end (``load_best_at_end``), else the newest (None if it saved none)."""
    evaluation, state, checkpoints = trainer.trainer_config["evaluation"], trainer.state, trainer.checkpoints
    best = os.path.join(checkpoints.root, ckpt.BEST_DIR)
    if state.best_step >= 0 and evaluation["load_best_at_end"] and os.path.isdir(best):
        return best, state.best_step, f"best dev {evaluation['metric']}"
    return checkpoints.latest(), state.global_step, "final"


def run_summary(trainer: Any, param_path: str, overrides: Sequence[str] = ()) -> List[str]:
    """The closing lines of a run (rank 0). The commands they suggest carry the run's ``--set``
    overrides, so that copied they act on this run and its output, not the task file's."""
    cfg, state, checkpoints = trainer.trainer_config, trainer.state, trainer.checkpoints
    output = cfg["output_path"]
    result, step, why = result_checkpoint(trainer)
    task = shlex.quote(param_path) + "".join(f" --set {shlex.quote(o)}" for o in overrides)
    kept = [o for o in overrides if not o.strip().startswith(RESUME_OVERRIDES)]
    resume_task = shlex.quote(param_path) + "".join(f" --set {shlex.quote(o)}" for o in kept)
    lines = []
    if state.interrupted:
        lines.append(f"stopped at step {state.global_step} of {state.max_steps} after saving a checkpoint; "
                     f"resume: wenxin train --param_path {resume_task} --set trainer.checkpoints.resume=auto")
    else:
        lines.append(f"done: step {state.global_step} of {state.max_steps}")
    if result is None:
        return lines + [f"outputs: {output}"]
    scores = result_metrics(os.path.join(output, METRICS_FILE), step, cfg["evaluation"]["metric"])
    lines.append(f"result: {result} (step {step}, {why}{'; ' + scores if scores else ''})")
    where = [f"checkpoints {checkpoints.root}", f"logs {os.path.join(output, 'logs')} (train.log, metrics.jsonl)"]
    if cfg["logging"]["visualdl"]:
        vdl = os.path.join(output, "vdl")
        where.append(f"VisualDL {vdl} (visualdl --logdir {shlex.quote(vdl)})")
    inference = checkpoints.export_folder(os.path.basename(result), result)
    has_inference = os.path.isdir(inference)
    if has_inference:
        onnx = os.path.isfile(os.path.join(inference, "model.onnx"))
        where.append(f"inference model {inference}" + (" (with model.onnx: predict and serve use ONNX Runtime)"
                                                         if onnx else ""))
    lines.append("outputs: " + "; ".join(where))
    folder = shlex.quote(inference)
    if has_inference:
        lines.append(f"next: wenxin predict --model_dir {folder} --text '...'; wenxin serve --model_dir {folder}")
    else:
        lines.append(f"next: wenxin export --param_path {task} --checkpoint {shlex.quote(result)}")
    lines.append(f"      wenxin evaluate --param_path {task} --checkpoint {shlex.quote(result)}")
    return lines
