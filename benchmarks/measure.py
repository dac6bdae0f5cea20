"""What every benchmark here measures beside wall time: CPU time per unit of work, and the load
of the machine it ran on.

On a shared machine wall time counts the time a process waited for a core; its CPU time does
not, so ratios of CPU time per unit of work hold where wall-time ratios drift. The load average
before and after a run says how shared the machine was.
"""
from __future__ import annotations

import os
import time
import statistics
from typing import Any, Callable, Dict, Tuple


def load_note() -> str:
    """The machine's load: the 1-minute load average against its CPUs."""
    return f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"


def timed(fn: Callable[[], object], calls: int = 1) -> Tuple[float, float]:
    """``fn`` called ``calls`` times: (CPU seconds, wall seconds) per call. CPU time is this
    process's, all its threads."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.process_time() - cpu) / calls, (time.perf_counter() - wall) / calls


def alternating_cpu(ways: Dict[str, Callable[[Any], object]], fresh: Callable[[], Any], repeat: int) -> Dict[str, float]:
    """Each of ``ways`` called on a state of its own (``fresh()``, not timed) in ``repeat`` rounds
    that alternate their order: each way's median CPU seconds."""
    cpu: Dict[str, list] = {name: [] for name in ways}
    for round_ in range(repeat):
        for name in (list(ways) if round_ % 2 == 0 else list(reversed(list(ways)))):
            state = fresh()
            started = time.process_time()
            ways[name](state)
            cpu[name].append(time.process_time() - started)
    return {name: statistics.median(seconds) for name, seconds in cpu.items()}


def print_cpu_ms(heading: str, cpu: Dict[str, float]) -> None:
    """``heading``, then each way's CPU milliseconds (``cpu``: seconds, as ``alternating_cpu`` gives)."""
    print(heading)
    for name, seconds in cpu.items():
        print(f"  {name}: {seconds * 1e3:.1f} CPU-ms")


def resident_gib(pid: int, tree: bool = False) -> float:
    """Resident memory (GiB) of process ``pid``, and with ``tree`` of every living process below it
    too, read from ``/proc`` through psutil."""
    import psutil
    root = psutil.Process(pid)
    total = 0
    for process in [root, *(root.children(recursive=True) if tree else [])]:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:  # ended between the listing and the reading
            continue
    return round(total / 2**30, 3)


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) used so far by process ``pid`` and every living process
    below it (a service and its workers), read from ``/proc`` through psutil."""
    import psutil
    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:  # ended between the listing and the reading
            continue
        total += times.user + times.system
    return total
