"""Data formats: how the lines of a data file become the columns of a reader's fields
(``dataset_reader.<name>.config.format``).

- ``tsv`` (the default, ERNIE-kit's): one example a line, its columns split at ``separator``
  (a tab), one column per field in order;
- ``jsonl``: one JSON object a line; each field reads the value at its ``column`` key (its
  name by default). A string is the column as is, a number its decimal text, a list of strings
  or numbers its items joined by the field's ``tokenizer.split_char`` (a space); a field that
  reads JSON (``reads_json``, e.g. an extraction's ``spo_list``) gets the value's JSON text;
- ``csv``: RFC 4180 records, fields quoted with ``"`` where they hold the delimiter (``separator``,
  a comma unless set), a quote (doubled) or line breaks (a record may span lines). With
  ``has_header`` each field reads the column its ``column`` (or name) heads, in any order;
  without, the columns are the fields in order.

A format names its data files (``data_files``: by default ``data_path``, a file or a folder of
them) and yields ``(line number, columns, problem)`` for each: columns for a well-formed example,
else the problem (the reader reports it as ``file:line``, or skips the line with
``skip_bad_lines``). A format whose files are not cut at line starts (CSV records may span lines;
``wenxin.data.hf_datasets`` counts rows of Arrow files) says where a file may be cut into parts
(``part_starts``), so the token cache's workers never start inside a record. Formats are a
registry (``RegisterSet.data_formats``): a task may register its own.
"""
from __future__ import annotations

import csv
import json
import os
import re
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from wenxin.common.errors import ConfigError, DataError
from wenxin.common.registry import RegisterSet
from wenxin.data.lines import FilePart, iter_lines, iter_lines_ending_at, list_data_files

FormattedRow = Tuple[int, Optional[List[str]], Optional[str]]  # (line number, columns, problem)
KEYS_SHOWN = 8  # keys of a JSON object named in a "no key" problem
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # a JSON escape of a UTF-16 surrogate


class RowFormat:
    """The base of data formats. ``config`` is the reader's validated ``config`` section,
    ``fields`` its field readers (each with ``name`` and ``config``), ``key_path`` the reader's
    key (``dataset_reader.train_reader``) for errors."""

    line_based = True  # files of text lines (sweep folds split them by line or record)

    def __init__(self, config: Dict[str, Any], fields: Sequence[Any], key_path: str) -> None:
        self.config, self.fields, self.key_path = config, list(fields), key_path
        self.names = [f.name for f in self.fields]

    @classmethod
    def source_problem(cls, config: Dict[str, Any], key_path: str) -> Optional[str]:
        """Why the reader ``config``'s data cannot be found, checked before anything heavy loads
        (``key_path``: the reader's key), or None."""
        data_path = config.get("data_path")
        if data_path and not os.path.exists(data_path):
            return f"{key_path}.config.data_path: data file not found: {data_path}"
        return None

    def data_files(self) -> List[str]:
        """The files to read: ``data_path``, a file or the sorted non-hidden files of a folder."""
        return list_data_files(self.config["data_path"], f"{self.key_path}.config.data_path")

    def rows(self, part: FilePart) -> Iterator[FormattedRow]:
        """The rows of one part of a file, in order."""
        raise NotImplementedError

    def predict_rows(self, part: FilePart) -> Iterator[FormattedRow]:
        """The rows of a file to predict (``wenxin infer``): ``rows``, unless a format keeps more
        (TSV keeps empty lines, so outputs stay aligned with input lines)."""
        return self.rows(part)

    def part_starts(self, path: str, part_bytes: int) -> Optional[List[Tuple[int, int]]]:
        """Where the token cache may cut a file into parts of about ``part_bytes``: None for line
        starts; else ``(position, line number)`` of the first record of each part (the first is
        ``(0, 1)``), and the file's end last as ``(end, lines + 1)``. A position is what
        ``rows`` takes as a ``FilePart``'s ``start`` and ``end``: a byte offset for text files."""
        return None

    @classmethod
    def group_lines(cls, lines: List[bytes], config: Dict[str, Any]) -> List[bytes]:
        """The records of a file given as its lines, for a reader ``config`` (``wenxin.folds``
        splits data by record)."""
        return lines

    def _lines(self, part: FilePart) -> Iterator[Any]:
        return iter_lines(part.path, self.config["max_line_bytes"], part.start, part.end, part.first_lineno)

    def source_key(self, field: Any) -> str:
        """The JSON key or CSV header a field reads: its ``column``, else its name."""
        return str(field.config.get("column") or field.name)

    def header_positions(self, path: str, header: List[str]) -> List[int]:
        """The column of each field in a file's header line: the one its ``column`` (or name)
        heads. A header without a field's column is an error naming the file, the field and the
        header's columns (a file without a header line would have its first example read as one)."""
        positions = []
        for field in self.fields:
            key = self.source_key(field)
            if key not in header:
                raise DataError(f"{path}:1: the header has no column {key!r} (field '{field.name}'"
                                f"{'' if key == field.name else ', its column'}); the columns are "
                                f"{', '.join(map(repr, header))[:300]} (has_header: true reads the first line as "
                                f"the columns' names)")
            positions.append(header.index(key))
        return positions


@RegisterSet.data_formats.register("tsv")
class TsvFormat(RowFormat):
    """One example a line, columns split at ``separator`` (a tab), one per field in order."""

    def __init__(self, config: Dict[str, Any], fields: Sequence[Any], key_path: str) -> None:
        super().__init__(config, fields, key_path)
        self.separator = config["separator"] or "\t"
        self._headers: Dict[str, Tuple[List[int], int]] = {}

    def _header(self, path: str) -> Tuple[List[int], int]:
        """With ``has_header``: the column of each field, by the names of the file's first line
        (ERNIE-kit's generation reader reads its columns by name too), and how many columns it names."""
        if path not in self._headers:
            first = next(iter_lines(path, self.config["max_line_bytes"]), None)
            if first is None or first.problem is not None:
                raise DataError(f"{path}:1: {first.problem if first else 'the file is empty'}; has_header: true "
                                f"needs a header line naming the columns")
            header = [c.strip() for c in first.text.split(self.separator)]
            self._headers[path] = (self.header_positions(path, header), len(header))
        return self._headers[path]

    def rows(self, part: FilePart) -> Iterator[FormattedRow]:
        return self._split(part, predicting=False)

    def predict_rows(self, part: FilePart) -> Iterator[FormattedRow]:
        """Every line, empty ones too (outputs stay aligned with input lines); the first columns
        are the fields', extra columns (gold labels) are ignored."""
        return self._split(part, predicting=True)

    def _split(self, part: FilePart, predicting: bool) -> Iterator[FormattedRow]:
        """The lines' columns: training takes exactly one per field and skips empty lines;
        predicting keeps every line and takes the first columns."""
        n_fields, has_header = len(self.fields), self.config["has_header"]
        positions, n_header = self._header(part.path) if has_header else (None, 0)
        for lineno, line, problem in self._lines(part):
            if problem is not None:
                yield lineno, None, problem
                continue
            if (has_header and lineno == 1) or (not predicting and not line.strip()):
                continue
            columns = line.split(self.separator)
            if positions is not None:
                if len(columns) <= max(positions) and (line.strip() or not predicting):
                    yield lineno, None, f"{len(columns)} columns, fewer than the header's {n_header}"
                elif len(columns) > n_header and not predicting:  # a stray separator: the columns would shift
                    yield lineno, None, f"{len(columns)} columns, more than the header's {n_header}"
                else:
                    yield lineno, [columns[p] if p < len(columns) else "" for p in positions], None
            elif predicting and len(columns) >= n_fields:
                yield lineno, columns[:n_fields], None
            elif len(columns) == n_fields:
                yield lineno, columns, None
            else:
                least = "at least " if predicting else ""
                yield lineno, None, f"expected {least}{n_fields} columns ({', '.join(self.names)}), got {len(columns)}"


@RegisterSet.data_formats.register("jsonl")
class JsonLinesFormat(RowFormat):
    """One JSON object a line; each field reads the value at its key (see the module docstring)."""

    def __init__(self, config: Dict[str, Any], fields: Sequence[Any], key_path: str) -> None:
        super().__init__(config, fields, key_path)
        if config["has_header"]:
            raise ConfigError(f"{key_path}.config.has_header: JSON lines have no header line (format: jsonl); "
                              f"set has_header: false")
        self.keys = [self.source_key(f) for f in self.fields]
        self.joiners = [None if getattr(f, "reads_json", False) else
                        ((f.config.get("tokenizer") or {}).get("split_char") or " ") for f in self.fields]

    def rows(self, part: FilePart) -> Iterator[FormattedRow]:
        for lineno, line, problem in self._lines(part):
            if problem is None and not line.strip():
                continue
            columns = None
            if problem is None:
                columns, problem = self.columns(line)
            yield lineno, columns, problem

    def columns(self, line: str) -> Tuple[Optional[List[str]], Optional[str]]:
        """The fields' columns of one line, or why there are none."""
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as e:
            return None, f"not a JSON object ({e if isinstance(e, ValueError) else 'nested too deeply'})"
        if not isinstance(record, dict):
            return None, f"a JSON {type(record).__name__}, not an object ({{\"key\": value, ...}})"
        if _SURROGATE_ESCAPE.search(line):  # only an escape can put a lone surrogate in decoded text
            where = lone_surrogate(record)
            if where is not None:
                return None, f"{where} holds an unpaired surrogate (JSON's \\ud800 alone is not a character)"
        columns = []
        for field, key, joiner in zip(self.fields, self.keys, self.joiners):
            if getattr(field, "reads_record", False):  # the whole object (a conversation)
                columns.append(line)
                continue
            if key not in record:
                keys = ", ".join(map(repr, list(record)[:KEYS_SHOWN])) + (", ..." if len(record) > KEYS_SHOWN else "")
                return None, f"no key {key!r} (the object has {keys or 'no keys'})"
            if getattr(field, "reads_string", False) and not isinstance(record[key], str):
                return None, (f"key {key!r}: expected a string (a text that character offsets point into), got "
                              f"{json.dumps(record[key], ensure_ascii=False)[:60]}")
            text, problem = (json.dumps(record[key], ensure_ascii=False), None) if joiner is None \
                else as_text(record[key], joiner)
            if problem is not None:
                return None, f"key {key!r}: {problem}"
            columns.append(text)
        return columns, None


def lone_surrogate(value: Any, where: str = "the object") -> Optional[str]:
    """Where a decoded JSON value holds a lone UTF-16 surrogate (a key path), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = lone_surrogate(key, where) if isinstance(key, str) else None
        found = found or lone_surrogate(item, f"key {key!r}" if where == "the object" else f"{where}[{key!r}]")
        if found:
            return found
    return None


def as_text(value: Any, joiner: str) -> Tuple[str, Optional[str]]:
    """A JSON value as a column's text: a string as is, a number in decimal, a list of them
    joined by ``joiner``; anything else is a problem."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, bool) or value is None:
        return "", f"{json.dumps(value)} is not a string, a number or a list of them"
    if isinstance(value, (int, float)):
        return str(value), None
    if isinstance(value, list):
        items = []
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                return "", f"item {i} is a {type(item).__name__}, not a string or a number"
            text = str(item)
            if joiner in text or not text:
                return "", (f"item {i} ({text!r}) is empty or holds the separator {joiner!r} that joins "
                            f"the items (the field's tokenizer.split_char), so it would not stay one item")
            items.append(text)
        return joiner.join(items), None
    return "", f"a JSON {type(value).__name__} is not a string, a number or a list of them"


@RegisterSet.data_formats.register("csv")
class CsvFormat(RowFormat):
    """RFC 4180 comma-separated records with quoting (see the module docstring)."""

    def __init__(self, config: Dict[str, Any], fields: Sequence[Any], key_path: str) -> None:
        super().__init__(config, fields, key_path)
        self.delimiter = self.delimiter_of(config)
        if len(self.delimiter) != 1 or self.delimiter in "\"\r\n":
            raise ConfigError(f"{key_path}.config.separator: {self.delimiter!r}: a CSV delimiter is one character, "
                              f"not a quote or a line break")
        self._headers: Dict[str, Tuple[List[int], int]] = {}

    @staticmethod
    def delimiter_of(config: Dict[str, Any]) -> str:
        """The delimiter of a reader ``config``: its ``separator``, else a comma."""
        return str(config["separator"] or ",")

    # ---- records ----
    def records(self, part: FilePart) -> Iterator[Tuple[int, int, Optional[str], Optional[str], int]]:
        """``(first line, last line, text, problem, end offset)`` of each record of a part: its
        lines, joined while a quoted field is open."""
        limit = self.config["max_line_bytes"]
        pending: List[str] = []
        first = size = 0
        quoted = False
        for (lineno, line, problem), end in iter_lines_ending_at(part.path, limit, part.start, part.end,
                                                                  part.first_lineno):
            if not pending:
                first, size = lineno, 0
            if problem is not None:
                yield first, lineno, None, problem, end
                pending, quoted = [], False
                continue
            pending.append(line)
            size += len(line) + 1
            quoted = still_quoted(line, quoted, self.delimiter)
            if quoted and size > limit:
                yield first, lineno, None, (f"a record longer than {limit} bytes (reader key max_line_bytes): "
                                            f"the quoted field opened on line {first} is not closed"), end
                pending, quoted = [], False
            elif not quoted:
                yield first, lineno, "\n".join(pending), None, end
                pending = []
        if pending:
            yield first, first + len(pending) - 1, None, f"the quoted field opened on line {first} is never closed", -1

    @classmethod
    def group_lines(cls, lines: List[bytes], config: Dict[str, Any]) -> List[bytes]:
        grouped: List[bytes] = []
        pending: List[bytes] = []
        quoted = False
        delimiter = cls.delimiter_of(config)
        for line in lines:
            pending.append(line)
            quoted = still_quoted(line.decode("utf-8", "replace"), quoted, delimiter)
            if not quoted:
                grouped.append(b"\n".join(pending))
                pending = []
        return grouped + ([b"\n".join(pending)] if pending else [])  # an unclosed quote: the reader names it

    def part_starts(self, path: str, part_bytes: int) -> List[Tuple[int, int]]:
        starts, target = [(0, 1)], part_bytes
        last_line, position = 0, 0
        for _, last, _, _, end in self.records(FilePart(path, 0, None, 1)):
            last_line = last
            if end >= 0:
                position = end
            if end >= target:
                starts.append((end, last + 1))
                target = end + part_bytes
        if len(starts) > 1 and starts[-1][1] > last_line:
            starts.pop()  # a cut at the very end
        return starts + [(position, last_line + 1)]

    # ---- columns ----
    def rows(self, part: FilePart) -> Iterator[FormattedRow]:
        positions, n_header = self._header(part.path) if self.config["has_header"] else (None, 0)
        n_fields = len(self.fields)
        for lineno, _, text, problem, _ in self.records(part):
            if problem is not None:
                yield lineno, None, problem
                continue
            assert text is not None
            if (self.config["has_header"] and lineno == 1) or not text.strip():
                continue
            try:
                values = next(csv.reader([text], delimiter=self.delimiter, strict=True))
            except csv.Error as e:
                yield lineno, None, f"not a well-formed CSV record ({e})"
                continue
            if positions is None:
                if len(values) != n_fields:
                    yield lineno, None, f"expected {n_fields} columns ({', '.join(self.names)}), got {len(values)}"
                    continue
                yield lineno, values, None
            elif len(values) <= max(positions):
                yield lineno, None, f"{len(values)} columns, fewer than the header's {n_header}"
            elif len(values) > n_header:
                yield lineno, None, f"{len(values)} columns, more than the header's {n_header}"
            else:
                yield lineno, [values[p] for p in positions], None

    def _header(self, path: str) -> Tuple[List[int], int]:
        """The column of each field in the file's header (its first record), and how many it names."""
        if path not in self._headers:
            first = next(self.records(FilePart(path, 0, None, 1)), None)
            if first is None or first[2] is None:
                raise DataError(f"{path}:1: {first[3] if first else 'the file is empty'}; has_header: true "
                                f"needs a header naming the columns")
            header = [name.strip() for name in next(csv.reader([first[2]], delimiter=self.delimiter))]
            self._headers[path] = (self.header_positions(path, header), len(header))
        return self._headers[path]


def still_quoted(line: str, quoted: bool, delimiter: str) -> bool:
    """Whether a CSV record is inside a quoted field at the end of ``line`` (``quoted``: at its
    start; if not, the line starts a record). A ``"`` at the start of a field opens one, ``""``
    inside it is a quote, and a lone ``"`` closes it; a quote elsewhere is text, as Python's csv
    module reads it."""
    i = 0
    while True:
        j = line.find('"', i)
        if j < 0:
            return quoted
        if quoted:
            if line.startswith('""', j):
                i = j + 2
                continue
            quoted = False
        elif j == 0 or line[j - 1] == delimiter:
            quoted = True
        i = j + 1
