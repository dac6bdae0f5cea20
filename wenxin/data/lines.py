"""Reading the lines of a data file one at a time, the same way everywhere.

A line ends at ``\\n`` only (a ``\\r`` before it is removed), never at U+2028, U+2029, ``\\x0b``,
``\\x0c``, ``\\x1c``-``\\x1e`` or ``\\x85``, which ``str.splitlines()`` and text-mode files treat as
line breaks: a review containing one of them stays one example, so outputs stay aligned with
inputs. A UTF-8 BOM at the start of a file is removed. Files are read line by line in binary
mode, so a huge line or a binary file is reported by ``file:line`` without being read whole.
"""
from __future__ import annotations

import codecs
import os
from typing import Iterator, List, NamedTuple, Optional, Tuple

from wenxin.common.constants import DEFAULT_MAX_LINE_BYTES
from wenxin.common.errors import DataError

_CHUNK = 1 << 20
_UTF16_32_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


class Line(NamedTuple):
    """One line of a file: its number (from 1), its text, or ("" and) why it cannot be used."""

    lineno: int
    text: str
    problem: Optional[str] = None


class FilePart(NamedTuple):
    """Lines of one file: from byte ``start`` (a line start, line number ``first_lineno``) to
    ``end`` (None: the end of the file)."""

    path: str
    start: int
    end: Optional[int]
    first_lineno: int


def iter_lines(path: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, start: int = 0,
               end: Optional[int] = None, first_lineno: int = 1) -> Iterator[Line]:
    """Every line of ``path``; a line that is too long, holds a NUL byte or is not UTF-8 comes
    with a ``problem`` instead of text (the caller reports or skips it).

    ``start`` / ``end`` (byte offsets at line starts, ``first_lineno`` the number of the line at
    ``start``) read one part of the file, as the workers of the token cache do."""
    for line, _ in iter_lines_ending_at(path, max_line_bytes, start, end, first_lineno):
        yield line


def iter_lines_ending_at(path: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, start: int = 0,
                         end: Optional[int] = None, first_lineno: int = 1) -> Iterator[Tuple[Line, int]]:
    """``iter_lines``, each line with the byte offset just past it (where the next line starts)."""
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed below; a generator)
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror}") from None
    with f:
        if start:
            f.seek(start)
        lineno, position = first_lineno - 1, start
        while end is None or position < end:
            raw = f.readline(max_line_bytes + 1)
            if not raw:
                return
            lineno += 1
            position += len(raw)
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # skip the rest of the line, a chunk at a time
                    raw = f.readline(_CHUNK)
                    position += len(raw)
                yield Line(lineno, "", f"line longer than {max_line_bytes} bytes (reader key max_line_bytes)"), position
                continue
            yield _line(raw, lineno, lineno == 1 and start == 0, path), position


def _line(raw: bytes, lineno: int, first_of_file: bool, path: str) -> Line:
    """One raw line (with its line break) as text, or as the problem that keeps it from being text."""
    if raw.endswith(b"\n"):
        raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    if first_of_file and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    elif first_of_file and raw.startswith(_UTF16_32_BOMS):
        raise DataError(f"{path}: the file is UTF-16/UTF-32 encoded; data files must be UTF-8")
    if b"\x00" in raw:
        return Line(lineno, "", "binary data (a NUL byte), not a line of UTF-8 text")
    try:
        return Line(lineno, raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        return Line(lineno, "", f"not valid UTF-8 ({e.reason} at byte {e.start} of the line)")


def list_data_files(data_path: str, key_path: str) -> List[str]:
    """A file, or the sorted non-hidden files of a folder."""
    if os.path.isfile(data_path):
        return [data_path]
    if os.path.isdir(data_path):
        files = sorted(os.path.join(data_path, n) for n in os.listdir(data_path)
                       if not n.startswith(".") and os.path.isfile(os.path.join(data_path, n)))
        if not files:
            raise DataError(f"{key_path}: folder has no data files: {data_path}")
        return files
    if os.path.exists(data_path):
        raise DataError(f"{key_path}: not a regular file or folder (a FIFO or a device?): {data_path}")
    raise DataError(f"{key_path}: data file not found: {data_path}")
