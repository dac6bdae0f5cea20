"""Large tensors without page faults: glibc's malloc thresholds, set by wenxin's entry points
(``wenxin.common.process_settings``; importing wenxin does not).

Paddle's CPU tensors come from ``malloc``. glibc serves a block above its mmap threshold with
fresh pages from the kernel and hands them back when the block is freed, and it trims free
memory at the top of its heap; so every large tensor a step allocates anew page-faults on first
touch. Measured on this repository's machine: an out-of-place add of two ``[2048, 1248]`` float32
tensors took 4.0 ms against 0.40 ms with freed blocks kept, ``paddle.matmul`` on an ERNIE-nano
layer's shapes ran 15% faster, and an ERNIE-nano fine-tuning step took 11% (eager) and 16%
(static) less CPU (``benchmarks/ernie_step.py``). Results are unchanged: only where memory comes
from changes.

``mallopt`` raises both thresholds to ``KEEP_BELOW`` (1 GiB): freed blocks below it stay with
the process for the next tensor, so a process keeps the memory of its largest step instead of
returning it between steps. It is left alone off glibc, when the user set glibc's malloc
variables (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``GLIBC_TUNABLES``), and when
``WENXIN_KEEP_FREED_MEMORY=0``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Mapping, Optional

SWITCH = "WENXIN_KEEP_FREED_MEMORY"  # "0" leaves glibc's defaults
USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
KEEP_BELOW = 1 << 30


def glibc() -> Optional[ctypes.CDLL]:
    """The C library this process runs on when it is glibc (it has ``gnu_get_libc_version``),
    else None: the process's own symbols first (no search for the library's file, which needs
    ``ldconfig``), then the library found by name."""
    for name in (None, ctypes.util.find_library("c")):
        try:
            libc = ctypes.CDLL(name)
            libc.gnu_get_libc_version  # noqa: B018 (only glibc has it)
            libc.mallopt  # noqa: B018
        except (OSError, AttributeError, TypeError):
            continue
        return libc
    return None


def keep_freed_memory(environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """Raise glibc's mmap and trim thresholds where nobody decided otherwise; returns the line to
    log, or None when nothing was set."""
    if environ.get(SWITCH, "1") == "0" or any(name in environ for name in USER_VARIABLES):
        return None
    libc = glibc()
    if libc is None:
        return None
    if not (libc.mallopt(M_MMAP_THRESHOLD, KEEP_BELOW) and libc.mallopt(M_TRIM_THRESHOLD, KEEP_BELOW)):
        return None
    return (f"freed tensors below {KEEP_BELOW >> 30} GiB stay with the process for the next ones (glibc's mmap "
            f"and trim thresholds; no page faults on every large tensor; {SWITCH}=0 turns this off)")

