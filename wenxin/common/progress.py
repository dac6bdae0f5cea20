"""A one-line progress bar with rate and ETA, for loading data, training and evaluation.

It redraws at most every ``min_interval`` seconds, so a step costs one clock read. On a terminal
it redraws its line of stderr: the console log handler clears the line before a log record and
the bar redraws after it. In a Jupyter kernel (stderr is no terminal there, and ``\r`` and ANSI
codes do not redraw a cell's output) it is one output of the cell, replaced in place through
IPython's display protocol (``display_id``), beside the log records.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO

BAR_WIDTH = 24
LOG_EVERY_SECONDS = 30.0  # progress as log lines (no terminal): at most this long between two


def format_duration(seconds: float) -> str:
    """``H:MM:SS``."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (an IPython shell with a kernel runs it)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return getattr(shell, "kernel", None) is not None


def progress_enabled(setting: str, stream: Optional[TextIO] = None) -> bool:
    """``on``, ``off``, or ``auto``: on only when ``stream`` (stderr) is a terminal, or in a
    Jupyter kernel."""
    if setting == "auto":
        stream = stream or sys.stderr
        return bool(getattr(stream, "isatty", lambda: False)()) or in_notebook()
    return setting == "on"


class _NotebookLine:
    """One text output of the running notebook cell, replaced in place."""

    def __init__(self) -> None:
        from IPython.display import Pretty, display
        self._pretty = Pretty
        self._handle = display(Pretty(""), display_id=True)

    def show(self, text: str) -> None:
        self._handle.update(self._pretty(text))


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
        self._notebook: Optional[_NotebookLine] = None
        self._in_notebook = stream is None and in_notebook()
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
        line += f" {postfix}" if postfix else ""
        if self._in_notebook:
            self._notebook = self._notebook or _NotebookLine()
            self._notebook.show(line)
        else:
            self.stream.write("\r\033[K" + line)
            self.stream.flush()
        self.draws += 1

    def clear(self) -> None:
        """Erase the bar's line (before a log record); the next update redraws it. (A notebook's
        bar is an output of its own, which log records do not cross.)"""
        if self._in_notebook:
            return
        self.stream.write("\r\033[K")
        self.stream.flush()
        self._last_draw = 0.0

    def close(self, keep: bool = True) -> None:
        """Draw the final state and end the line (``keep``), or erase it."""
        if keep:
            self._draw(self.clock(), "")
            if not self._in_notebook:
                self.stream.write("\n")
                self.stream.flush()
        elif self._notebook is not None:
            self._notebook.show("")
        else:
            self.clear()
        if ProgressBar.active is self:
            ProgressBar.active = None


class ProgressLog:
    """Progress of long work where no bar is drawn (a log file, a pipe): ``say`` gets a line of
    the work done of all, its rate and the time left at most every ``every`` seconds, and one at
    the end (where the work took longer than ``every``). Call it with the count done."""

    def __init__(self, what: str, total: int, say: Callable[[str], None], unit: str = "rows",
                 every: Optional[float] = None) -> None:
        self.what, self.total, self.say, self.unit = what, total, say, unit
        self.every = LOG_EVERY_SECONDS if every is None else every
        self.start = self.last = time.monotonic()
        self.done = 0

    def update(self, done: int) -> None:
        """As a ``ProgressBar`` is advanced (the two stand for each other)."""
        self(done)

    def close(self, keep: bool = True) -> None:
        """Nothing to clear: its lines are the log's."""

    def __call__(self, done: int) -> None:
        self.done = done
        now = time.monotonic()
        finished = done >= self.total
        if now - (self.start if finished else self.last) < self.every:
            return  # too soon for a line (finished: the work was short, no line needed)
        self.last = now
        rate = done / max(now - self.start, 1e-9)
        left = f", about {format_duration((self.total - done) / rate)} left" if 0 < done < self.total else ""
        self.say(f"{self.what}: {done}/{self.total} {self.unit}, {rate:.3g} {self.unit}/s{left}")


def progress_of(total: int, what: str, bar: bool, say: Callable[[str], None], unit: str = "rows"
                ) -> "ProgressBar | ProgressLog":
    """How long work shows its progress: a bar where one is drawn (a terminal, a notebook), else
    a log line every 30 s (a log file or a pipe must not fall silent for minutes)."""
    return ProgressBar(total, what) if bar else ProgressLog(what, total, say, unit)
