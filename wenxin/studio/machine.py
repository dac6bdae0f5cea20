"""What a run's process and the machine use now: CPU, memory, threads, and GPUs where there are
any. GPUs are read with ``nvidia-smi`` (the driver's own tool, present wherever an NVIDIA GPU
works); without it the machine has no GPU figures, and nothing else changes."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from typing import Any, Dict, List, Optional

from wenxin.studio.store import ACTIVE

GPU_QUERY = ["--query-gpu=index,name,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"]
APPS_QUERY = ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
GPU_SECONDS = 5.0  # a driver that does not answer in this long gives no figures this time
GPU_CACHE_SECONDS = 2.0  # pages poll every few seconds, from any number of tabs: one reading serves them


def _smi(arguments: List[str]) -> List[List[str]]:
    """``nvidia-smi``'s CSV rows, or [] without it (or when it fails or hangs)."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    try:
        done = subprocess.run([tool, *arguments], capture_output=True, text=True, timeout=GPU_SECONDS, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    return [[part.strip() for part in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:  # "[N/A]" on some boards
        return None


class GpuReader:
    """The GPUs' use (``{"index", "name", "percent", "memory_used", "memory_total"}``, bytes) and
    each process's GPU memory, read at most once every ``GPU_CACHE_SECONDS``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_at = -GPU_CACHE_SECONDS
        self._gpus: List[Dict[str, Any]] = []
        self._by_pid: Dict[int, int] = {}

    def _refresh(self) -> None:
        with self._lock:
            if time.monotonic() - self._read_at < GPU_CACHE_SECONDS:
                return
            gpus = []
            for row in _smi(GPU_QUERY):
                if len(row) == 5:
                    used, total = _number(row[3]), _number(row[4])
                    gpus.append({"index": row[0], "name": row[1], "percent": _number(row[2]),
                                 "memory_used": int(used * 2**20) if used is not None else None,
                                 "memory_total": int(total * 2**20) if total is not None else None})
            by_pid: Dict[int, int] = {}
            for row in _smi(APPS_QUERY) if gpus else []:
                if len(row) == 2 and row[0].isdigit() and _number(row[1]) is not None:
                    by_pid[int(row[0])] = by_pid.get(int(row[0]), 0) + int(float(row[1]) * 2**20)
            self._gpus, self._by_pid, self._read_at = gpus, by_pid, time.monotonic()

    def gpus(self) -> List[Dict[str, Any]]:
        self._refresh()
        return self._gpus

    def process_memory(self, pid: int) -> Optional[int]:
        """The GPU memory ``pid`` holds on all GPUs; None when it holds none (or there are none)."""
        self._refresh()
        return self._by_pid.get(pid)


GPUS = GpuReader()


def process_use(run: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The run's training process now: its CPU seconds so far (the page turns two readings into a
    share of a core), resident memory, threads and GPU memory; None when it is not running."""
    if run["status"] not in ACTIVE or not run.get("train_pid"):
        return None
    import psutil
    try:
        process = psutil.Process(run["train_pid"])
        with process.oneshot():
            times = process.cpu_times()
            use = {"cpu_seconds": times.user + times.system, "rss_bytes": process.memory_info().rss,
                   "threads": process.num_threads(), "time": time.time()}
    except (psutil.Error, OSError):
        return None
    return {**use, "gpu_memory": GPUS.process_memory(run["train_pid"])}


def machine_use() -> Dict[str, Any]:
    """The machine's CPU share in use (since the last call), cores, memory, load and GPUs."""
    import psutil
    memory = psutil.virtual_memory()
    return {"cpu_percent": psutil.cpu_percent(None), "cores": psutil.cpu_count() or 1,
            "memory_used": memory.total - memory.available, "memory_total": memory.total,
            "load": list(os.getloadavg()) if hasattr(os, "getloadavg") else None, "gpus": GPUS.gpus()}
