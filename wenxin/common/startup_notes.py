"""Lines about what an entry point set up in the process, held until a command can log them.

``wenxin.common.process_settings`` adjusts the process before Paddle loads (the BLAS path in
``wenxin.common.blas``, glibc's thresholds in ``wenxin.common.allocator``), before logging is
configured. Each adjustment leaves one line here; the training runner logs them and ``wenxin
serve`` prints them, each once per process.
"""
from __future__ import annotations

from typing import List, Optional

_PENDING: List[str] = []


def add(note: Optional[str]) -> None:
    """Keep ``note`` for the first command that reports; None (nothing was set) is skipped."""
    if note:
        _PENDING.append(note)


def take() -> List[str]:
    """The notes kept so far, in the order they were added; later calls get only newer ones."""
    notes = list(_PENDING)
    _PENDING.clear()
    return notes
