"""Errors that the framework raises for bad user input.

Every error names what the user must fix: the JSON key path, the file and line, or the
checkpoint path. Entry points catch ``WenxinError`` and print it without a traceback: one
``error:`` line, or, when a check found several problems at once, an ``error:`` header followed
by one line per problem (``format_error``).
"""
from __future__ import annotations

import contextlib
from typing import Iterator, List, Optional, Sequence


# Exit statuses of the command line (documented in the README's "Exit codes")
EXIT_OK = 0
EXIT_CONFIG = 2  # usage, task-file or installation error (and any other WenxinError)
EXIT_DATA = 3  # a data file or line
EXIT_CHECKPOINT = 4  # a checkpoint or pretrained-parameter file
EXIT_PREEMPTED = 75  # stopped by SIGTERM / Ctrl-C after saving a checkpoint: resume it (EX_TEMPFAIL)
EXIT_INTERRUPTED = 130  # Ctrl-C before training started: nothing saved
EXIT_TERMINATED = 143  # SIGTERM before training started: nothing saved


class WenxinError(Exception):
    """Base class of all user-facing errors.

    Args:
        message: the problem (used when ``problems`` is empty).
        problems: several independent problems found by one check, each naming its key path,
            ``file:line`` or path.
    """

    def __init__(self, message: str = "", problems: Sequence[str] = ()) -> None:
        self.problems: List[str] = list(problems) or [message]
        super().__init__("\n".join(self.problems))


class ConfigError(WenxinError):
    """A task file is malformed, has an unknown key, or a value of the wrong type."""


class DataError(WenxinError):
    """A data file is missing or a line in it is malformed."""


class CheckpointError(WenxinError):
    """A checkpoint or pretrained-parameter file is missing, corrupt or incompatible."""


class ExportError(WenxinError):
    """An exported inference folder is missing, incomplete, damaged or malformed."""


class InferenceError(WenxinError):
    """An export folder is missing, incomplete or corrupt, or an input cannot be predicted."""


class InstallError(WenxinError, ImportError):
    """PaddlePaddle is missing, too old, installed twice, or cannot run on the configured device."""


class TrainingError(WenxinError):
    """Training cannot continue (for example the loss became NaN/Inf)."""


class Problems:
    """Collects the problems of a check, so that one run reports all of them.

    ``add`` records one; ``catch()`` records the problems of a ``WenxinError`` raised inside it
    and lets the check go on; ``raise_if_any`` raises them together as one error.
    """

    def __init__(self) -> None:
        self.messages: List[str] = []
        self._keys: set = set()
        self._kinds: set = set()  # the error classes of the problems recorded

    def add(self, message: str, key: Optional[str] = None, kind: Optional[type] = None) -> None:
        """Record ``message``; with ``key`` (a key path), only the first problem of that key is kept.
        ``kind``: the error class the problem alone would raise (``DataError`` for a missing data
        file, so the exit status says so when it is the only kind of problem)."""
        if key is not None:
            if key in self._keys:
                return
            self._keys.add(key)
        if message not in self.messages:
            self.messages.append(message)
            self._kinds.add(kind)

    def __bool__(self) -> bool:
        return bool(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    @contextlib.contextmanager
    def catch(self) -> Iterator[None]:
        try:
            yield
        except WenxinError as e:
            for message in e.problems:
                self.add(message, kind=type(e))

    def raise_if_any(self, error_type: type = ConfigError) -> None:
        """Raise every problem as one error: of their own class when they share one more specific
        than ``error_type`` (all data problems: ``DataError``), else ``error_type``."""
        if self.messages:
            kinds = self._kinds - {None, error_type}
            if len(kinds) == 1 and None not in self._kinds and error_type not in self._kinds:
                kind = next(iter(kinds))
                if issubclass(kind, WenxinError) and not issubclass(error_type, kind):
                    raise kind(problems=self.messages)
            raise error_type(problems=self.messages)


def format_error(error: WenxinError) -> str:
    """The text entry points print: ``error: <problem>``, or a header and one problem a line."""
    problems = error.problems
    if len(problems) == 1:
        first, *rest = problems[0].splitlines() or [""]
        return "\n".join([f"error: {first}", *(f"  {line}" for line in rest)])
    lines = [f"error: {len(problems)} problems:"]
    for problem in problems:
        first, *rest = problem.splitlines() or [""]
        lines.append(f"  - {first}")
        lines.extend(f"    {line}" for line in rest)
    return "\n".join(lines)


def exit_status(error: WenxinError) -> int:
    """The exit status of a run that ended with ``error``."""
    if isinstance(error, DataError):
        return EXIT_DATA
    if isinstance(error, CheckpointError):
        return EXIT_CHECKPOINT
    return EXIT_CONFIG
