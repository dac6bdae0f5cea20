"""Paced, paired timing of several training processes that share one machine.

On a small VM the speed of the machine drifts (other tenants, frequency), and a few percent
between two variants that ran minutes apart is not a measurement. Here every variant runs in its
own long-lived process, and the processes take turns: each runs one *window* of steps while the
others wait, blocked, then hands over. Window ``k`` of every variant thus runs within seconds of
window ``k`` of the others, and ratios are taken between those paired windows, so drift cancels.

The child side is :class:`PacedClock`: call ``tick()`` at the end of every training step (from a
hook or a callback, inside the loop being measured). After the warm-up steps, and after every
window, it reports to the parent and blocks until told to go on; the time it waits is not counted.
The parent side is :func:`run_paced_round`. The protocol is one line per message: the child writes
``ready`` or ``window <wall seconds> <CPU seconds>`` to the file descriptor named by
``PACED_REPORT_FD``; the parent answers ``go`` on the child's stdin, or closes it to let the child
run on unpaced.

Each window is timed twice: wall time, and the child's CPU time (``time.process_time``, all its
threads). On a machine that others share, wall time counts the time the child waited for a core;
CPU time per step does not, so a ratio of CPU times holds where wall times drift.
"""
from __future__ import annotations

import os
import dataclasses
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

REPORT_FD_ENV = "PACED_REPORT_FD"
# libiomp5 (Paddle's OpenMP) keeps its threads spinning for KMP_BLOCKTIME (200 ms) after the
# last parallel region; a paused process must stop spinning before the next one's window starts.
SETTLE_SECONDS = 0.3


class PacedClock:
    """Pauses a training loop every ``window`` steps after ``warmup`` steps (see the module doc).

    Without ``PACED_REPORT_FD`` in the environment it only counts steps, so a child can also be
    run by hand.
    """

    def __init__(self, warmup: int, window: int) -> None:
        if warmup < 1 or window < 1:
            raise ValueError(f"warmup ({warmup}) and window ({window}) must be >= 1")
        self.warmup, self.window = warmup, window
        self.steps = 0
        self.start, self.cpu_start = 0.0, 0.0
        fd = os.environ.get(REPORT_FD_ENV)
        self.reports = os.fdopen(int(fd), "w", buffering=1) if fd else None

    def tick(self) -> None:
        self.steps += 1
        timed = self.steps - self.warmup
        if self.reports is None or timed < 0 or timed % self.window:
            return
        elapsed, cpu = time.perf_counter() - self.start, time.process_time() - self.cpu_start
        self.reports.write("ready\n" if timed == 0 else f"window {elapsed!r} {cpu!r}\n")
        if sys.stdin.readline().strip() == "go":
            self.start, self.cpu_start = time.perf_counter(), time.process_time()
        else:  # the parent is done with this process: run on without pausing
            self.reports.close()
            self.reports = None


class PacedChild:
    """One paced training process, as seen by the parent."""

    def __init__(self, name: str, command: Sequence[str], log_path: str, cwd: str) -> None:
        self.name, self.log_path = name, log_path
        read_end, write_end = os.pipe()
        with open(log_path, "w", encoding="utf-8") as log:
            self.process = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=cwd, text=True, pass_fds=(write_end,),
                                            env={**os.environ, REPORT_FD_ENV: str(write_end)})
        os.close(write_end)
        self.reports = os.fdopen(read_end, "r")

    def next_report(self) -> str:
        """The child's next message, or ``""`` when it exited without one."""
        return self.reports.readline().strip()

    def go(self) -> None:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def finish(self, timeout: float = 600.0) -> int:
        """Lets the child run to its end unpaced and returns its exit code."""
        try:
            self.process.stdin.close()
        except BrokenPipeError:
            pass
        code = self.process.wait(timeout)
        self.reports.close()
        return code

    def failure(self, what: str) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as log:
            return f"{self.name} {what}; the end of its output ({self.log_path}):\n{log.read()[-2000:]}"


@dataclasses.dataclass
class PacedRound:
    """What one round measured: per variant, each finished window's wall seconds and CPU seconds
    (a failed variant keeps the windows it finished), and the failure messages."""

    wall: Dict[str, List[float]]
    cpu: Dict[str, List[float]]
    failures: List[str]


def run_paced_round(commands: Dict[str, Sequence[str]], windows: int, log_folder: str, cwd: str,
                    first: int = 0) -> PacedRound:
    """Starts one process per command, one after the other up to its ``ready``, then runs
    ``windows`` windows in turns: in window ``k``, the variants go in the commands' order rotated
    by ``first + k``, so no variant always follows the same one."""
    children: Dict[str, PacedChild] = {}
    failures: List[str] = []
    for name, command in commands.items():
        child = PacedChild(name, command, os.path.join(log_folder, f"{name}.log"), cwd)
        report = child.next_report()
        if report == "ready":
            children[name] = child
        else:
            failures.append(child.failure(f"did not get ready (it said {report!r})"))
            child.finish()
    result = PacedRound({name: [] for name in commands}, {name: [] for name in commands}, failures)
    for k in range(windows):
        names = list(children)
        shift = (first + k) % max(len(names), 1)
        for name in names[shift:] + names[:shift]:
            child = children[name]
            time.sleep(SETTLE_SECONDS)
            child.go()
            report = child.next_report()
            if report.startswith("window "):
                _, wall, cpu = report.split()
                result.wall[name].append(float(wall))
                result.cpu[name].append(float(cpu))
            else:
                failures.append(child.failure(f"stopped in window {k + 1} (it said {report!r})"))
                del children[name]
                child.finish()
    for child in children.values():
        code = child.finish()
        if code:
            failures.append(child.failure(f"exited with {code} after its last window"))
    return result


def window_ratios(base: Sequence[float], other: Sequence[float]) -> List[float]:
    """``base[i] / other[i]`` for the windows both finished: above 1 where ``other`` is faster."""
    return [b / o for b, o in zip(base, other)]


def paired_ratio(base: Sequence[float], other: Sequence[float]) -> Optional[float]:
    """Median of :func:`window_ratios`; ``None`` without a pair."""
    pairs = window_ratios(base, other)
    return statistics.median(pairs) if pairs else None
