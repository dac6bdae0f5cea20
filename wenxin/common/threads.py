"""How many threads Paddle's CPU kernels use in a training process (``trainer.environment.cpu_threads``).

When Paddle loads it sets ``OMP_NUM_THREADS=1`` unless the user set it, so by default its CPU
kernels (MKL's matrix products, the GRU/LSTM cells, Adam's update, elementwise ops) run on one core
whatever the machine has. Measured on this repository's 2-core machine, 2 threads made the BoW
example's step 0.35 -> 0.26 s (Adam over its 182,869 x 64 table: 0.21 -> 0.14 s) and the tagger
example's 0.31 -> 0.21 s; the losses agree to float rounding (a threaded reduction adds in another
order), and a run is repeatable with the same thread count.

``cpu_threads: 0`` (automatic) gives each training process its share of the cores it may use:
the cores of its CPU affinity, capped by a cgroup CPU quota, divided by the processes that
``paddle.distributed.launch`` starts on this machine, or the share a parent gave it
(``WENXIN_CPU_SHARE``: a sweep gives each of its parallel trials ``cores // parallel``). Once
the model is built, the share shrinks where a second thread would not pay (``fit_to_work``):

- a static program under ``STATIC_MODEL_PARAMETERS`` gets one thread: Paddle's executor already
  runs independent ops on threads of its own, and kernel threads hold only with its serial mode
  (``set_cpu_threads``), which gives that up. Measured on 2 cores against the plain static loop
  (1 thread, Paddle's default executor), 2 threads with the serial mode ran the CNN workload of
  ``benchmarks/framework_overhead.py`` (3.9M parameters) 0.73x and the transformer (4.2M) 0.96x,
  but the BoW example (11.7M, its step mostly Adam's update of the embedding table) 1.3x (150
  steps of examples/text_classification_bow_static.json, the whole run: 48.2 s against 37.5 s);
- a model under ``SMALL_MODEL_PARAMETERS`` trainable parameters gets one thread. Its ops are too
  small to split: every op would wait for its second thread, idle or not;
- on a machine whose other work keeps cores busy (the CPU time other processes use over half a
  second, from ``/proc/stat``: CPU time, not a timing), the threads fit the cores left free, at
  least one. A thread that has to wait for a busy core holds up every op it shares. (The 1-minute
  load average was the first measure: it lags by minutes, so a run started just after another
  took one thread on an idle machine.)

A resumed run keeps the thread count of the run it continues (a threaded reduction adds in another
order, so the count is part of what makes a resumed run bit-identical).

A user's own ``OMP_NUM_THREADS`` above 1 is kept. A value of 1 is not taken as a choice: it is what
Paddle writes into the environment when it loads, so every process started by one that imported
Paddle (``paddle.distributed.launch``, a test runner) inherits it; ``cpu_threads: 1`` asks for one
thread.
"""
from __future__ import annotations

import math
import os
import time
from typing import Callable, Mapping, Optional, Tuple

OMP_VARIABLE = "OMP_NUM_THREADS"
# a parent running several trainings at once (wenxin sweep) gives each child its share of the cores
SHARE_VARIABLE = "WENXIN_CPU_SHARE"
CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"  # cgroup v2: "<quota> <period>" or "max <period>"
PROC_STAT = "/proc/stat"
BUSY_WINDOW = 0.5  # seconds over which other processes' CPU time is counted

USER_THREADS: Optional[int] = None  # the user's OMP_NUM_THREADS, read when wenxin is imported
# Below this many trainable parameters a model trains on one thread. Measured with
# benchmarks/framework_overhead.py on 2 cores: the MLP workloads (83k and 1.1k parameters) gained
# nothing from a second thread idle and ran 4 to 7 times slower with it beside two CPU-bound
# processes; the BoW example (11.7M, its Adam update over the embedding table) ran 1.35x faster.
SMALL_MODEL_PARAMETERS = 1_000_000
STATIC_MODEL_PARAMETERS = 8_000_000  # the same for a static program (see the module docstring)


def user_threads(environ: Mapping[str, str] = os.environ) -> Optional[int]:
    """The user's ``OMP_NUM_THREADS`` when above 1 (Paddle's own value is 1), else None."""
    try:
        value = int(environ.get(OMP_VARIABLE, ""))
    except ValueError:
        return None
    return value if value > 1 else None


def available_cores(cpu_max: str = CGROUP_CPU_MAX) -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        with open(cpu_max, encoding="ascii") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.floor(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def busy_cores_of_others(window: float = BUSY_WINDOW) -> float:
    """The cores other processes keep busy: the machine's CPU time (``/proc/stat``) less this
    process's own (``os.times``) over ``window`` seconds, per second. CPU time, not a timing: a
    core another process uses counts whether this one waits or not. Without ``/proc/stat``, the
    1-minute load average (which lags by minutes)."""
    try:
        start, own_start = _machine_busy_seconds(), sum(os.times()[:2])
        time.sleep(window)
        end, own_end = _machine_busy_seconds(), sum(os.times()[:2])
    except (OSError, ValueError, IndexError):
        try:
            return os.getloadavg()[0]
        except OSError:
            return 0.0
    return max(0.0, (end - start - (own_end - own_start)) / window)


def _machine_busy_seconds() -> float:
    """CPU seconds every core of the machine has spent busy (not idle, not waiting for I/O)."""
    with open(PROC_STAT, encoding="ascii") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def fit_to_work(share: int, parameters: int, busy: Callable[[], float], cores: int,
                static: bool = False) -> Tuple[int, str]:
    """The automatic thread count once the model is known: ``share`` (from ``choose_threads``),
    fewer for a static program, a small model (``parameters`` trainable) or a machine whose cores
    other work keeps busy (``busy()``, called only when it decides: ``busy_cores_of_others``); with
    the reason, or "" when ``share`` stands."""
    if share <= 1:
        return share, ""
    if static and parameters < STATIC_MODEL_PARAMETERS:
        return 1, (f"a static program of {parameters:,} parameters: Paddle's executor runs independent ops "
                   f"on threads of its own, and kernel threads would need its serial mode (under "
                   f"{STATIC_MODEL_PARAMETERS:,})")
    if parameters < SMALL_MODEL_PARAMETERS:
        return 1, (f"a model of {parameters:,} parameters: too little work an op for a second thread "
                   f"(under {SMALL_MODEL_PARAMETERS:,})")
    others = busy()
    free = math.floor(cores - others + 0.5)
    if free < share:
        return max(1, free), f"{cores} cores, {others:.1f} of them busy with other work"
    return share, ""


def choose_threads(requested: int, environ: Mapping[str, str] = os.environ,
                   cores: Optional[int] = None, user: Optional[int] = None) -> Tuple[int, str]:
    """The thread count for ``trainer.environment.cpu_threads`` = ``requested``, and why (for the log)."""
    if requested > 0:
        return requested, "trainer.environment.cpu_threads"
    if user is not None:
        return user, f"{OMP_VARIABLE} set by the user"
    cores = available_cores() if cores is None else cores
    try:
        local_processes = max(1, int(environ.get("PADDLE_LOCAL_SIZE", "1")))
    except ValueError:
        local_processes = 1
    share = max(1, cores // local_processes)
    given = _positive_int(environ.get(SHARE_VARIABLE, ""))
    if given is not None and given < share:
        return given, f"the share of {given} core{'s' * (given > 1)} its parent gave it ({SHARE_VARIABLE})"
    if local_processes > 1:
        return share, f"{cores} cores shared by {local_processes} processes on this machine"
    return share, f"the {cores} cores this process may use"


def _positive_int(text: str) -> Optional[int]:
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value > 0 else None
