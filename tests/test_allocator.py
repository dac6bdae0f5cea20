"""glibc's malloc thresholds (wenxin.common.allocator): raised by wenxin's entry points
(``wenxin.common.process_settings``), so a freed large tensor stays with the process; never over
the user's own malloc settings, and off with WENXIN_KEEP_FREED_MEMORY=0."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import List, Tuple

import pytest

from conftest import REPO
from wenxin.common import allocator


class RecordingLibc:
    def __init__(self) -> None:
        self.calls: List[Tuple[int, int]] = []

    def mallopt(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return 1


def test_both_thresholds_are_raised_unless_the_user_decided(monkeypatch):
    libc = RecordingLibc()
    monkeypatch.setattr(allocator, "glibc", lambda: libc)
    assert "WENXIN_KEEP_FREED_MEMORY=0" in allocator.keep_freed_memory({})
    assert libc.calls == [(allocator.M_MMAP_THRESHOLD, 1 << 30), (allocator.M_TRIM_THRESHOLD, 1 << 30)]
    for environ in ({"WENXIN_KEEP_FREED_MEMORY": "0"}, {"MALLOC_MMAP_THRESHOLD_": "65536"},
                    {"MALLOC_TRIM_THRESHOLD_": "0"}, {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}):
        libc.calls.clear()
        assert allocator.keep_freed_memory(environ) is None and libc.calls == [], environ
    monkeypatch.setattr(allocator, "glibc", lambda: None)  # musl, macOS, Windows
    assert allocator.keep_freed_memory({}) is None


def freed_megabytes(keep: bool, entry: str = "apply_process_settings()") -> float:
    """How much of a freed 64 MB array a fresh process gave back to the OS after importing wenxin
    and running ``entry`` (by default what wenxin's entry points run first)."""
    script = ("import wenxin, numpy as np\n"
              f"from wenxin.common.process_settings import apply_process_settings; {entry}\n"
              "def rss(): return int(open('/proc/self/statm').read().split()[1]) * 4096\n"
              "a = np.ones(8 * 1024 * 1024)\n"
              "before = rss(); del a; print((before - rss()) / 2 ** 20)\n")
    environ = {**os.environ, "WENXIN_KEEP_FREED_MEMORY": "1" if keep else "0", "PYTHONPATH": REPO}
    for name in allocator.USER_VARIABLES:
        environ.pop(name, None)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environ, timeout=120)
    assert result.returncode == 0, result.stderr
    return float(result.stdout.split()[-1])


@pytest.mark.skipif(allocator.glibc() is None or not os.path.exists("/proc/self/statm"), reason="glibc on Linux")
def test_the_process_settings_keep_a_freed_large_block_for_the_next_tensor():
    assert freed_megabytes(keep=True) < 8  # kept: the next large tensor reuses its pages
    assert freed_megabytes(keep=False) > 56  # glibc's default: unmapped, to be faulted in again
    assert freed_megabytes(keep=True, entry="pass") > 56  # importing wenxin alone leaves glibc's default
