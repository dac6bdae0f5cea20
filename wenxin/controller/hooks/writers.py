"""Metric writers: console, a JSON-lines file, and VisualDL."""
from __future__ import annotations

import json
import logging
import os
import time
from typing import Dict, List, Mapping, Optional

from wenxin.common.constants import METRICS_FILE  # where the JSONL writer writes (summaries read it)
from wenxin.common.errors import TrainingError
from wenxin.common.progress import format_duration

logger = logging.getLogger("wenxin")


def numeric_scalars(scalars: Mapping[str, object]) -> Dict[str, float]:
    """The numbers of a record as floats, for writers that chart them: no strings, no bools, no NaN."""
    return {k: float(v) for k, v in scalars.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v}


class MetricWriter:
    """Receives ``(tag, step, scalars)`` records."""

    def write(self, tag: str, step: int, scalars: Dict[str, float]) -> None:
        raise NotImplementedError

    def flush(self) -> None: ...


class ConsoleWriter(MetricWriter):
    def write(self, tag: str, step: int, scalars: Dict[str, float]) -> None:
        parts = []
        for k, v in scalars.items():
            if k == "total_steps":
                continue  # the console line is already long; the step's total is for progress bars
            if k == "eta_sec":
                parts.append(f"eta {format_duration(v)}")
            elif isinstance(v, float):
                parts.append(f"{k} {v:.6g}")
            else:
                parts.append(f"{k} {v}")
        logger.info("[%s] step %d: %s", tag, step, ", ".join(parts))


class JsonlWriter(MetricWriter):
    """Appends one JSON object per record to ``path``; each record is appended and closed at
    once (records come at log intervals), so a crash keeps every earlier line."""

    def __init__(self, path: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path

    def write(self, tag: str, step: int, scalars: Dict[str, float]) -> None:
        record = {"tag": tag, "step": step, "time": round(time.time(), 3), **scalars}
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        except OSError as e:
            raise TrainingError(f"{self.path}: cannot write the metrics log ({e.strerror or e})") from None


class VisualDLWriter(MetricWriter):
    """Scalars to VisualDL as ``<tag>/<name>`` (view with ``visualdl --logdir <folder>``).

    By default the records are written on the training thread (``wenxin.compat.visualdl``),
    about 60 µs a record; with ``fast=False`` (``trainer.fast_paths.visualdl_records``) through
    ``visualdl.LogWriter``, whose writer thread costs a 2-core machine about 1 ms a record.
    """

    def __init__(self, logdir: str, fast: bool = True) -> None:
        from wenxin.compat.visualdl import open_records
        self._records = open_records(logdir, fast)
        self.path = self._records.path

    def write(self, tag: str, step: int, scalars: Dict[str, float]) -> None:
        values = {f"{tag}/{name}": value for name, value in numeric_scalars(scalars).items()}
        try:
            self._records.write(values, step)
        except OSError as e:
            raise TrainingError(f"{self.path}: cannot write VisualDL records ({e.strerror or e})") from None

    def flush(self) -> None:
        self._records.flush()


class MetricLogger:
    """Fans records out to every writer."""

    def __init__(self, writers: Optional[List[MetricWriter]] = None) -> None:
        self.writers: List[MetricWriter] = writers or []

    def write(self, tag: str, step: int, scalars: Dict[str, float], console: bool = True) -> None:
        """Send a record to every writer; ``console=False`` leaves the console out (records
        too long to read there, such as per-layer values)."""
        for w in self.writers:
            if console or not isinstance(w, ConsoleWriter):
                w.write(tag, step, scalars)

    def flush(self) -> None:
        for w in self.writers:
            w.flush()


def make_writers(output_path: str, is_writer: bool, visualdl: bool, fast_visualdl: bool) -> List[MetricWriter]:
    """The console, and on the writing rank ``metrics.jsonl`` in ``output_path`` (and VisualDL's
    records in ``output_path/vdl`` with ``trainer.logging.visualdl``)."""
    writers: List[MetricWriter] = [ConsoleWriter()]
    if is_writer:
        writers.append(JsonlWriter(os.path.join(output_path, METRICS_FILE)))
        if visualdl:
            writers.append(VisualDLWriter(os.path.join(output_path, "vdl"), fast=fast_visualdl))
    return writers
