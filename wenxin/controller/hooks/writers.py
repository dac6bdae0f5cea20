"""Metric writers: console, a JSON-lines file, and VisualDL."""
from __future__ import annotations

import json
import logging
import os
import time
from typing import BinaryIO, Dict, List, Optional

from wenxin.common.errors import TrainingError

logger = logging.getLogger("wenxin")


def format_duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class MetricWriter:
    """Receives ``(tag, step, scalars)`` records."""

    def write(self, tag: str, step: int, scalars: Dict[str, float]) -> None:
        raise NotImplementedError

    def flush(self) -> None: ...


class ConsoleWriter(MetricWriter):
    def write(self, tag: str, step: int, scalars: Dict[str, float]) -> None:
        parts = []
        for k, v in scalars.items():
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

    It writes VisualDL's own records (``visualdl.component.base_component``) in VisualDL's
    framing (``RecordWriter``) to a ``vdlrecords.*.log`` file on the training thread, flushing
    each record, so a crash keeps every earlier one. That costs about 60 µs per record.
    ``visualdl.LogWriter`` hands each scalar to its writer thread instead; on a 2-core machine
    the GIL's thread switches cost the training thread about 1 ms per record, even when
    ``add_scalar`` is called from another thread of ours: 7% of a small model's step time at
    the default log interval (benchmarks/README.md).
    """

    def __init__(self, logdir: str) -> None:
        # imported lazily: VisualDL is slow to import
        from visualdl.component.base_component import meta_data, scalar
        from visualdl.writer.record_writer import RecordWriter
        os.makedirs(logdir, exist_ok=True)
        self._scalar = scalar
        self._file = self._new_file(logdir)
        self.path = self._file.name
        self._records = RecordWriter(self._file)
        self._records.write(meta_data(display_name="").SerializeToString())
        self._file.flush()

    @staticmethod
    def _new_file(logdir: str) -> BinaryIO:
        """A new ``vdlrecords.<seconds>.<pid>[.<n>].log`` (each run keeps its own file, as with
        ``LogWriter``; a resumed run adds one beside the earlier ones)."""
        stem = os.path.join(logdir, f"vdlrecords.{int(time.time()):010d}.{os.getpid()}")
        for n in range(1000):
            try:
                return open(f"{stem}.{n}.log" if n else f"{stem}.log", "xb")  # noqa: SIM115
            except FileExistsError:
                continue
        raise OSError(f"cannot create a new VisualDL record file in {logdir}")

    def write(self, tag: str, step: int, scalars: Dict[str, float]) -> None:
        walltime = round(time.time() * 1000)
        for name, value in scalars.items():
            if isinstance(value, (int, float)) and value == value:  # skip NaN
                record = self._scalar(tag=f"{tag}/{name}", value=float(value), step=step, walltime=walltime)
                try:
                    self._records.write(record.SerializeToString())
                except OSError as e:
                    raise TrainingError(f"{self.path}: cannot write VisualDL records ({e.strerror or e})") from None
        try:
            self._file.flush()
        except OSError as e:
            raise TrainingError(f"{self.path}: cannot write VisualDL records ({e.strerror or e})") from None


class MetricLogger:
    """Fans records out to every writer."""

    def __init__(self, writers: Optional[List[MetricWriter]] = None) -> None:
        self.writers: List[MetricWriter] = writers or []

    def write(self, tag: str, step: int, scalars: Dict[str, float]) -> None:
        for w in self.writers:
            w.write(tag, step, scalars)

    def flush(self) -> None:
        for w in self.writers:
            w.flush()
