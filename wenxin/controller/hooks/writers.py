"""Metric writers: console, a JSON-lines file, and VisualDL."""
from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import threading
import time
import weakref
from typing import Dict, List, Optional, Tuple

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
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


class VisualDLWriter(MetricWriter):
    """Scalars to VisualDL as ``<tag>/<name>`` (view with ``visualdl --logdir <folder>``)."""

    def __init__(self, logdir: str) -> None:
        from visualdl import LogWriter  # imported lazily: it is slow to import
        self._writer = LogWriter(logdir=logdir)

    def write(self, tag: str, step: int, scalars: Dict[str, float]) -> None:
        for name, value in scalars.items():
            if isinstance(value, (int, float)) and value == value:  # skip NaN
                self._writer.add_scalar(tag=f"{tag}/{name}", value=float(value), step=step)

    def flush(self) -> None:
        self._writer.flush()


class BackgroundWriter(MetricWriter):
    """Hands records to ``inner`` on a daemon thread, so a slow writer costs the step only a
    queue put.

    VisualDL's ``add_scalar`` passes each scalar to VisualDL's own writer thread and waits on it,
    about 1 ms per training record on a 2-core machine (0.1 ms per step at the default log
    interval); from this thread it costs the step about 10 µs. Records keep their order;
    ``flush()`` (and interpreter exit) waits until every queued record is written. An error in
    the thread is raised, naming the writer, by the next ``write`` or ``flush``.
    """

    def __init__(self, inner: MetricWriter) -> None:
        self.inner = inner
        self._queue: "queue.Queue[Optional[Tuple[str, int, Dict[str, float]]]]" = queue.Queue()
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name=f"wenxin-{type(inner).__name__}", daemon=True)
        self._thread.start()
        atexit.register(_flush_at_exit, weakref.ref(self))

    def _run(self) -> None:
        while True:
            record = self._queue.get()
            try:
                if record is not None and self._error is None:
                    self.inner.write(*record)
            except BaseException as error:  # noqa: BLE001 (re-raised on the training thread)
                self._error = error
            finally:
                self._queue.task_done()
            if record is None:
                return

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"{type(self.inner).__name__} failed to write a metric record: {error}") from error

    def write(self, tag: str, step: int, scalars: Dict[str, float]) -> None:
        self._raise_error()
        self._queue.put((tag, step, dict(scalars)))

    def flush(self) -> None:
        if self._thread.is_alive():
            self._queue.join()
        self._raise_error()
        self.inner.flush()

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise_error()
        self.inner.flush()


def _flush_at_exit(ref: "weakref.ref[BackgroundWriter]") -> None:
    writer = ref()
    if writer is not None and writer._thread.is_alive():  # noqa: SLF001
        writer._queue.join()  # noqa: SLF001
        writer.inner.flush()


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
