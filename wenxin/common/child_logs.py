"""What a child process's log says went wrong: the one line a parent (a sweep, the studio's
keeper and supervisor) reports for a trial or a run that failed."""
from __future__ import annotations

import os

TAIL_BYTES = 65536  # a failed run's error is at the end of its log
MAX_CHARS = 300


def last_error(log_path: str) -> str:
    """The last line of the log's tail that reads as an error (wenxin's one-line ``error: ...``,
    a Python ``...Error: ...`` or ``Traceback``), else its last line; "" for no log."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.path.getsize(log_path) - TAIL_BYTES))
            lines = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if line.startswith(("error", "Error", "Traceback")) or "Error:" in line]
    return (errors or lines or [""])[-1][:MAX_CHARS]
