"""What the studio reads from a run's folder: the files every ``wenxin train`` already writes
(``logs/metrics.jsonl``, ``checkpoints/index.json``, ``config.json``, the console log) and a
sweep's ``sweep.json``. Nothing here writes.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from wenxin.controller.hooks.trackers import WANDB_URL_FILE
from wenxin.studio.i18n import Notice, notice
from wenxin.studio.store import LOG_NAME

MAX_RECORDS = 5000  # metrics records one answer carries; the page asks again from where it stopped
MAX_LOG_BYTES = 64 * 1024


def output_folder(run_folder: str) -> str:
    return os.path.join(run_folder, "output")


def read_json(path: str) -> Optional[Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def metrics_since(run_folder: str, offset: int) -> Tuple[List[Dict[str, Any]], int]:
    """The metrics records written after byte ``offset`` of ``logs/metrics.jsonl`` (whole lines
    only), and the offset to ask from next."""
    path = os.path.join(output_folder(run_folder), "logs", "metrics.jsonl")
    records: List[Dict[str, Any]] = []
    try:
        with open(path, "rb") as f:
            f.seek(max(0, offset))
            data = f.read(8 * 1024 * 1024)
    except OSError:
        return records, offset
    end = data.rfind(b"\n") + 1  # a line still being written waits for the next answer
    consumed = 0
    for line in data[:end].splitlines(keepends=True):
        if len(records) >= MAX_RECORDS:
            break
        consumed += len(line)
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records, offset + consumed


def log_since(run_folder: str, offset: int, max_bytes: int = MAX_LOG_BYTES) -> Tuple[str, int]:
    """The console log's lines after byte ``offset`` (whole lines only; at most ``max_bytes``, the
    newest of them) and the offset to ask from next time. An offset past the end (the log was
    replaced) starts over."""
    path = os.path.join(run_folder, LOG_NAME)
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if offset > size:
                offset = 0
            start = max(offset, size - max_bytes)
            f.seek(start)
            data = f.read(size - start)
    except OSError:
        return "", 0
    end = data.rfind(b"\n") + 1  # a line still being written waits for its end
    data = data[:end]
    if start > offset and b"\n" in data:  # cut in the middle of a line: drop its start
        data = data.split(b"\n", 1)[1]
    return data.decode("utf-8", "replace"), start + end


def log_tail(run_folder: str, max_bytes: int = MAX_LOG_BYTES) -> str:
    path = os.path.join(run_folder, LOG_NAME)
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return text if len(data) < max_bytes else text.split("\n", 1)[-1]


def checkpoints(run_folder: str) -> Dict[str, Any]:
    """``checkpoints/index.json`` (the metric, and each checkpoint with its kind, step and score)."""
    index = read_json(os.path.join(output_folder(run_folder), "checkpoints", "index.json"))
    return index if isinstance(index, dict) else {"checkpoints": []}


def saved_step(run_folder: str, index: Optional[Dict[str, Any]] = None) -> Optional[int]:
    """The step of the run's newest resumable checkpoint (where it continues); None before one.
    ``index``: the run's :func:`checkpoints`, when the caller has read it already."""
    steps = [c.get("step") for c in (index or checkpoints(run_folder)).get("checkpoints", [])
             if c.get("resumable") and isinstance(c.get("step"), int)]
    return max(steps) if steps else None


def continuation(run_folder: str) -> Notice:
    """Where the run's next start begins, said truthfully: from its checkpoint at step N, or over."""
    step = saved_step(run_folder)
    return notice("notice.continues_from", step=step) if step is not None else notice("notice.starts_over")


def best_metric(run_folder: str, index: Optional[Dict[str, Any]] = None) -> Optional[Dict[str, Any]]:
    """The best dev score so far: {"metric", "value", "step"}; None before the first evaluation.
    ``index``: the run's :func:`checkpoints`, when the caller has read it already."""
    index = index or checkpoints(run_folder)
    best = [c for c in index.get("checkpoints", []) if c.get("kind") == "best" and c.get("metric") is not None]
    if best:
        return {"metric": index.get("metric"), "value": best[0]["metric"], "step": best[0].get("step")}
    return None


def latest_records(run_folder: str, tags: Sequence[str] = ("train", "dev", "test")) -> Dict[str, Dict[str, Any]]:
    """The newest record of each tag in ``tags`` (the train record's ``eta_sec``, ``step``; the
    final dev and test metrics), read from the last 64 KB of the metrics log. The train record
    gains ``mean_steps_per_sec``: the mean of the speeds logged there (not one interval's)."""
    path = os.path.join(output_folder(run_folder), "logs", "metrics.jsonl")
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - 65536))
            lines = f.read().splitlines()
    except OSError:
        return {}
    found: Dict[str, Dict[str, Any]] = {}
    speeds: List[float] = []
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        tag = record.get("tag") if isinstance(record, dict) else None
        if tag == "train" and isinstance(record.get("steps_per_sec"), (int, float)):
            speeds.append(float(record["steps_per_sec"]))
        if isinstance(tag, str) and tag in tags and tag not in found:
            found[tag] = record
    if "train" in found and speeds:
        found["train"] = {**found["train"], "mean_steps_per_sec": sum(speeds) / len(speeds)}
    return found


def resolved_config(run_folder: str) -> Optional[Dict[str, Any]]:
    config = read_json(os.path.join(output_folder(run_folder), "config.json"))
    return config if isinstance(config, dict) else None


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(4096)
    except OSError:
        return ""


def trackers(run_folder: str, root: str) -> List[Dict[str, str]]:
    """Where the run's VisualDL, TensorBoard, MLflow and wandb records are, as the resolved config
    says: a label, the command that opens each (``open``), and, for VisualDL and TensorBoard, the
    folder their viewer reads (``view``, ``logdir``; relative paths mean the root, the runs' working
    folder), or a tracking server's or an online run's address (``url``)."""
    config = resolved_config(run_folder) or {}
    trainer = config.get("trainer", {})
    output = output_folder(run_folder)
    found: List[Dict[str, str]] = []
    vdl = os.path.join(output, "vdl")
    # the run's config.json: grouped keys, or flat ones where an older wenxin wrote it
    if trainer.get("logging", trainer).get("visualdl", True) and os.path.isdir(vdl):
        found.append({"name": "VisualDL", "open": f"visualdl --logdir {vdl}", "view": "visualdl", "logdir": vdl})
    for hook in trainer.get("hooks", []):
        kind, params = hook.get("type"), hook.get("params", {}) or {}
        if kind == "TensorBoardHook":
            logdir = os.path.join(root, params.get("logdir") or os.path.join(output, "tensorboard"))
            found.append({"name": "TensorBoard", "open": f"tensorboard --logdir {logdir}", "view": "tensorboard",
                          "logdir": logdir})
        elif kind == "MLflowHook":
            uri = params.get("tracking_uri") or f"sqlite:///{os.path.join(output, 'mlflow.db')}"
            if uri.startswith(("http://", "https://")):  # a tracking server: its page is a link
                found.append({"name": "MLflow", "open": uri, "url": uri})
            else:  # a local store: MLflow's page needs the full mlflow package (wenxin uses mlflow-skinny)
                found.append({"name": "MLflow", "open": f"mlflow ui --backend-store-uri {uri}"})
        elif kind == "WandbHook":
            folder = os.path.join(root, params.get("dir") or output, "wandb")
            url = read_text(os.path.join(folder, WANDB_URL_FILE)).strip()
            if url.startswith("https://"):  # an online run: its page on the W&B server
                found.append({"name": "wandb", "open": url, "url": url})
            else:
                found.append({"name": "wandb", "open": f"wandb sync {os.path.join(folder, 'offline-run-*')}"})
    return found


def sweep_table(run_folder: str, sweep_output: str = "") -> Optional[Dict[str, Any]]:
    """A sweep run's trials so far (``sweep.json``): in the run's folder, or where the sweep
    file's ``output`` puts them."""
    state = read_json(os.path.join(sweep_output or os.path.join(output_folder(run_folder), "sweep"), "sweep.json"))
    return state if isinstance(state, dict) else None
