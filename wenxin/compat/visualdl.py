"""VisualDL scalar records, written on the training thread.

``visualdl.LogWriter.add_scalar`` hands every scalar to a writer thread; on a 2-core machine the
GIL's thread switches cost the training thread about 1 ms a record (7% of a small model's step,
benchmarks/README.md). ``RecordFile`` writes VisualDL's own records
(``visualdl.component.base_component``) in VisualDL's framing (``visualdl.writer.record_writer``)
to a ``vdlrecords.*.log`` file, flushing each record, so a crash keeps every earlier one: about
60 µs a record. Both are VisualDL internals, so its file is checked at start by VisualDL's own
reader; where that fails, or with ``trainer.fast_paths.visualdl_records: false``,
``LogWriterRecords`` uses the public ``LogWriter``.
"""
from __future__ import annotations

import logging
import os
import time
from typing import BinaryIO, Dict

from wenxin.compat import warn_if_untested

logger = logging.getLogger("wenxin")


class RecordFile:
    """Scalar records appended to a new ``vdlrecords.<seconds>.<pid>[.<n>].log`` in ``logdir``
    (each run its own file, as with ``LogWriter``; a resumed run adds one beside the others)."""

    def __init__(self, logdir: str) -> None:
        import visualdl
        from visualdl.component.base_component import meta_data, scalar
        from visualdl.writer.record_writer import RecordWriter
        warn_if_untested("visualdl", visualdl.__version__)
        os.makedirs(logdir, exist_ok=True)
        self._scalar = scalar
        self._file = self._new_file(logdir)
        self.path = self._file.name
        self._writer = RecordWriter(self._file)
        self._writer.write(meta_data(display_name="").SerializeToString())
        self._file.flush()

    @staticmethod
    def _new_file(logdir: str) -> BinaryIO:
        stem = os.path.join(logdir, f"vdlrecords.{int(time.time()):010d}.{os.getpid()}")
        for n in range(1000):
            try:
                return open(f"{stem}.{n}.log" if n else f"{stem}.log", "xb")  # noqa: SIM115
            except FileExistsError:
                continue
        raise OSError(f"cannot create a new VisualDL record file in {logdir}")

    def write(self, values: Dict[str, float], step: int) -> None:
        walltime = round(time.time() * 1000)
        for tag, value in values.items():
            self._writer.write(self._scalar(tag=tag, value=value, step=step, walltime=walltime).SerializeToString())
        self._file.flush()

    def flush(self) -> None:
        self._file.flush()


class LogWriterRecords:
    """The same records through VisualDL's public ``LogWriter`` (its own writer thread)."""

    def __init__(self, logdir: str) -> None:
        from visualdl import LogWriter
        self._writer = LogWriter(logdir=logdir)
        self.path = logdir

    def write(self, values: Dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self._writer.add_scalar(tag=tag, value=value, step=step)

    def flush(self) -> None:
        self._writer.flush()


_records_verified: Dict[str, bool] = {}


def _record_file_reads_back() -> bool:
    """Whether VisualDL's own reader reads a ``RecordFile`` as written (checked once a process)."""
    if "ok" not in _records_verified:
        import shutil
        import tempfile
        folder = tempfile.mkdtemp(prefix="wenxin-vdl-check-")
        try:
            from visualdl import LogReader
            probe = RecordFile(folder)
            probe.write({"check/value": 1.5}, 3)
            probe._file.close()  # noqa: SLF001
            data = LogReader(file_path=probe.path).get_data("scalar", "check/value")
            _records_verified["ok"] = [(r.id, r.value) for r in data] == [(3, 1.5)]
        except Exception as e:  # noqa: BLE001 (VisualDL internals of another version)
            logger.debug("VisualDL record check failed: %r", e)
            _records_verified["ok"] = False
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if not _records_verified["ok"]:
            logger.warning("VisualDL's reader does not read wenxin's records back; using visualdl.LogWriter")
    return _records_verified["ok"]


def open_records(logdir: str, fast: bool = True) -> "RecordFile | LogWriterRecords":
    """Where scalars go: a ``RecordFile`` when ``fast`` and VisualDL reads it back, else
    ``LogWriter``."""
    if fast and _record_file_reads_back():
        return RecordFile(logdir)
    return LogWriterRecords(logdir)
