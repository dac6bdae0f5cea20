"""Stop strings: text that ends a generated answer where it first appears (OpenAI's ``stop``).

Decoding stops at the model's own end tokens; a request may add strings of text, which can span
several tokens and begin in the middle of one. The answer ends before the first of them, and a
stream never shows part of one: text that could still become a stop string is held back until
it either does (it is dropped) or cannot (it is sent).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

MAX_STOP_STRINGS = 4  # as OpenAI's API allows
MAX_STOP_CHARS = 256


def parse_stop_strings(value: Any) -> Tuple[str, ...]:
    """A request's ``stop``: null, a string, or a list of strings -> the strings; a
    ``ValueError`` says what is wrong."""
    if value is None:
        return ()
    strings = [value] if isinstance(value, str) else value
    if not isinstance(strings, list) or not all(isinstance(s, str) for s in strings):
        raise ValueError("expected a string or a list of strings")
    if len(strings) > MAX_STOP_STRINGS:
        raise ValueError(f"{len(strings)} strings; at most {MAX_STOP_STRINGS}")
    for s in strings:
        if not s or len(s) > MAX_STOP_CHARS:
            raise ValueError(f"each string needs 1 to {MAX_STOP_CHARS} characters, got {len(s)}")
    return tuple(strings)


class StopStrings:
    """Finds stop strings in a growing text (see the module docstring)."""

    def __init__(self, strings: Sequence[str]) -> None:
        self.strings = tuple(strings)
        self.longest = max((len(s) for s in self.strings), default=0)

    def __bool__(self) -> bool:
        return bool(self.strings)

    def find(self, text: str, checked: int) -> Optional[int]:
        """Where the first stop string in ``text`` begins, or None; ``text[:checked]`` was
        searched before (a match may still end after it)."""
        start = max(0, checked - self.longest + 1)
        found = [i for i in (text.find(s, start) for s in self.strings) if i >= 0]
        return min(found) if found else None

    def safe_length(self, text: str) -> int:
        """How much of ``text`` (which holds no stop string) can be shown: all but its longest
        end that begins a stop string."""
        for held in range(min(self.longest - 1, len(text)), 0, -1):
            tail = text[-held:]
            if any(s.startswith(tail) for s in self.strings):
                return len(text) - held
        return len(text)
