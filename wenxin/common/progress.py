"""A one-line terminal progress bar with rate and ETA, for loading data, training and evaluation.

It redraws at most every ``min_interval`` seconds, so a step costs one clock read; the console
log handler clears the bar's line before a log record and the bar redraws after it.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO

BAR_WIDTH = 24


def format_duration(seconds: float) -> str:
    """``H:MM:SS``."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def progress_enabled(setting: str, stream: Optional[TextIO] = None) -> bool:
    """``on``, ``off``, or ``auto``: on only when ``stream`` (stderr) is a terminal."""
    if setting == "auto":
        stream = stream or sys.stderr
        return bool(getattr(stream, "isatty", lambda: False)())
    return setting == "on"


class ProgressBar:
    """``[train]  45%|███████▏        | 1310/2912 [01:52<02:17, 11.7 it/s] loss 1.23``

    Args:
        total: the count that means done.
        desc: the label in brackets.
        initial: where the count starts (a resumed run).
        stream: where to draw (stderr by default, looked up at each draw).
        min_interval: seconds between redraws.
        clock: seconds as a float (``time.perf_counter``; tests pass their own).
    """

    active: Optional["ProgressBar"] = None  # the bar on screen, cleared around log records

    def __init__(self, total: int, desc: str, initial: int = 0, stream: Optional[TextIO] = None,
                 min_interval: float = 0.2, clock: Callable[[], float] = time.perf_counter) -> None:
        self.total, self.desc = max(total, 1), desc
        self.initial = self.done = initial
        self._stream = stream
        self.min_interval = min_interval
        self.clock = clock
        self.start = clock()
        self._last_draw = 0.0
        self.draws = 0
        ProgressBar.active = self

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr

    def update(self, done: int, postfix: Optional[Callable[[], str]] = None) -> None:
        """Set the count; redraws when ``min_interval`` has passed (``postfix`` is only called then)."""
        self.done = done
        now = self.clock()
        if now - self._last_draw >= self.min_interval or done >= self.total:
            self._last_draw = now
            self._draw(now, postfix() if postfix else "")

    def _draw(self, now: float, postfix: str) -> None:
        fraction = min(self.done / self.total, 1.0)
        filled = int(fraction * BAR_WIDTH)
        bar = "█" * filled + " " * (BAR_WIDTH - filled)
        elapsed = now - self.start
        rate = (self.done - self.initial) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        line = (f"[{self.desc}] {fraction * 100:3.0f}%|{bar}| {self.done}/{self.total} "
                f"[{format_duration(elapsed)}<{format_duration(eta)}, {rate:.1f} it/s]")
        self.stream.write("\r\033[K" + line + (f" {postfix}" if postfix else ""))
        self.stream.flush()
        self.draws += 1

    def clear(self) -> None:
        """Erase the bar's line (before a log record); the next update redraws it."""
        self.stream.write("\r\033[K")
        self.stream.flush()
        self._last_draw = 0.0

    def close(self, keep: bool = True) -> None:
        """Draw the final state and end the line (``keep``), or erase it."""
        if keep:
            self._draw(self.clock(), "")
            self.stream.write("\n")
            self.stream.flush()
        else:
            self.clear()
        if ProgressBar.active is self:
            ProgressBar.active = None
