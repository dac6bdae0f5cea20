"""``TaskConfig``: a validated task file, and where it came from.

The sections of a task file (``dataset_reader``, ``model``, ``trainer``, ...) are the dict itself,
as a task's code has always read them; what the loader knows about the file (its path, and what
translating an ERNIE-kit file changed) is kept in attributes, so it never mixes with the keys a
checkpoint or a tracker records.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Tuple


class TaskConfig(Dict[str, Any]):
    """A checked config: its sections by name, plus ``source`` (the task file's absolute path,
    whose folder is searched for the task package) and ``translations`` (one note per translation
    made: each ERNIE-kit name, and the flat trainer keys read into their groups). Copies
    (``copy.deepcopy``, pickling) keep both."""

    def __init__(self, sections: Mapping[str, Any], source: str = "", translations: Iterable[str] = ()) -> None:
        super().__init__(sections)
        self.source = source
        self.translations = list(translations)


def source_of(config: Mapping[str, Any]) -> str:
    """The task file ``config`` was loaded from ('' for a dict that was not loaded from one)."""
    return config.source if isinstance(config, TaskConfig) else ""


def translations_of(config: Mapping[str, Any]) -> Tuple[str, ...]:
    """What translating ``config`` changed (an ERNIE-kit file's names, flat trainer keys), one
    note each (none for a dict that was not loaded from a file)."""
    return tuple(config.translations) if isinstance(config, TaskConfig) else ()
