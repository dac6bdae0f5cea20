"""Console and file logging for the ``wenxin`` logger (nothing here imports Paddle, so the
command line logs before Paddle loads)."""
from __future__ import annotations

import logging
import os
import sys
import time

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_LEVEL_ENV = "WENXIN_LOG_LEVEL"  # DEBUG, INFO (the default), WARNING or ERROR; also --log-level
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
CONSOLE = "console"  # logger.info(..., extra={CONSOLE: False}): the record goes to the log file only
_console = {"stream": "stdout"}  # console records: stdout in a notebook or script; the command line sets stderr


def set_console_stream(stream: str) -> str:
    """Send console records to ``stream`` (``stdout`` or ``stderr``: a command whose stdout
    carries its result, ``wenxin predict``, ``inspect --json``, ``evaluate``, ...); returns the
    previous one."""
    previous, _console["stream"] = _console["stream"], stream
    return previous


def configured_level() -> int:
    """The level ``WENXIN_LOG_LEVEL`` names (INFO when unset); an unknown name is INFO."""
    name = os.environ.get(LOG_LEVEL_ENV, "").strip().upper()
    return getattr(logging, name) if name in LOG_LEVELS else logging.INFO


class _Formatter(logging.Formatter):
    """``LOG_FORMAT``, its date and time worked out once a second (``logging.Formatter`` calls
    ``strftime`` for every record: a service logs a line a request)."""

    _second: tuple[int, str] = (-1, "")  # one attribute: handlers on other threads may share the formatter

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second, text = self._second
        if int(record.created) != second:
            text = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = (int(record.created), text)
        return text if self.default_msec_format is None else self.default_msec_format % (text, record.msecs)


def lean_records() -> None:
    """Records without what ``LOG_FORMAT`` does not show (the calling file and line, the thread,
    the process), for a process that logs a line a request: the options of the logging HOWTO's
    "Optimization" section. Process-wide, so only for the service's own processes."""
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None  # the HOWTO's way: no caller lookup


class _CurrentStdoutHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stdout`` (or, after ``log_to_stderr``, ``sys.stderr``) is at the
    time of each record (it may be replaced after logging is set up: notebooks, test capture,
    redirection)."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    @property
    def stream(self):  # noqa: ANN201
        return sys.stderr if _console["stream"] == "stderr" else sys.stdout

    @stream.setter
    def stream(self, value) -> None:  # noqa: ANN001
        pass

    def emit(self, record: logging.LogRecord) -> None:
        if not getattr(record, CONSOLE, True):
            return  # the caller shows this record itself (train's closing summary goes to stdout as its result)
        progress = sys.modules.get("wenxin.common.progress")  # loaded only where a bar is drawn
        if progress is not None and progress.ProgressBar.active is not None:
            progress.ProgressBar.active.clear()  # the bar redraws below the record at its next update
        super().emit(record)


def setup_logging(log_file: str | None = None, level: int | None = None) -> None:
    """Console logging for the ``wenxin`` logger, plus a file when ``log_file`` is given; the
    level is ``level``, else ``WENXIN_LOG_LEVEL``'s, else INFO."""
    root = logging.getLogger("wenxin")
    root.setLevel(level if level is not None else configured_level())
    root.propagate = False
    formatter = _Formatter(LOG_FORMAT)
    if not any(getattr(h, "_wenxin_console", False) for h in root.handlers):
        console = _CurrentStdoutHandler()
        console.setFormatter(formatter)
        console._wenxin_console = True  # type: ignore[attr-defined]
        root.addHandler(console)
    for h in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(h)
        h.close()
    if log_file:
        os.makedirs(os.path.dirname(log_file), exist_ok=True)
        handler = logging.FileHandler(log_file, encoding="utf-8")
        handler.setFormatter(formatter)
        root.addHandler(handler)

