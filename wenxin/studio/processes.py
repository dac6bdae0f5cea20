"""Processes known by pid and start time: a studio run's keeper and training outlive the studio,
and a pid alone could by then name another process."""
from __future__ import annotations

from typing import Any, Optional


def process_alive(pid: Optional[int], started: Optional[float]) -> bool:
    """Whether the process ``pid`` that started at ``started`` (psutil's create time) still runs
    (a pid reused by another process does not count)."""
    if not pid or started is None:
        return False
    import psutil
    try:
        process = psutil.Process(pid)
        return abs(process.create_time() - started) < 0.5 and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def run_process(pid: Optional[int], folder: str) -> Optional[Any]:
    """The live psutil process ``pid`` when it is the training of the run in ``folder`` (its
    command line names the folder; a reused pid does not)."""
    if not pid:
        return None
    import psutil
    try:
        process = psutil.Process(pid)
        if process.status() != psutil.STATUS_ZOMBIE and any(folder in part for part in process.cmdline()):
            return process
    except psutil.Error:
        pass
    return None


def process_start_time(pid: int) -> Optional[float]:
    import psutil
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None
