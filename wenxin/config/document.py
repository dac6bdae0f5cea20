"""Reading a task file (JSON or YAML) into plain JSON values, safely.

Everything a hostile or broken file can do is turned into a ``ConfigError`` that names the file,
the position or the key path: encodings other than UTF-8, binary files, folders, huge files,
duplicate keys, nesting deeper than ``MAX_DEPTH``, YAML aliases that expand to more than
``MAX_VALUES`` values (or refer to themselves), non-JSON YAML values (dates, sets, bytes),
non-string keys, NaN/Infinity and integers outside int64.
"""
from __future__ import annotations

import codecs
import json
import math
import os
import stat
from typing import Any, Dict, List, Tuple

import yaml

from wenxin.common.errors import ConfigError, Problems

MAX_FILE_BYTES = 16 << 20
MAX_DEPTH = 64
MAX_VALUES = 200_000
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
_UTF16_32_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


class _Object(dict):
    """A parsed mapping that remembers keys it saw more than once (reported with their path)."""

    duplicates: List[str]


class _BigInteger(str):
    """An integer literal too long to be a number wenxin, Paddle or NumPy could use."""


def _json_object(pairs: List[Tuple[str, Any]]) -> _Object:
    obj = _Object()
    obj.duplicates = []
    for key, value in pairs:
        if key in obj and key not in obj.duplicates:
            obj.duplicates.append(key)
        obj[key] = value
    return obj


def _json_int(text: str) -> Any:
    return _BigInteger(text) if len(text.lstrip("-")) > 19 else int(text)


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, recording duplicate keys and refusing huge integers."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> _Object:
        own = sum(1 for key_node, _ in node.value if key_node.tag != "tag:yaml.org,2002:merge")
        self.flatten_mapping(node)  # merged (<<: *base) pairs first, then the mapping's own
        merged = len(node.value) - own
        obj = _Object()
        obj.duplicates = []
        own_keys: set = set()
        for index, (key_node, value_node) in enumerate(node.value):
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "a key must be a string",
                                                        key_node.start_mark) from None
            if index >= merged:  # a key set twice by the mapping itself; overriding a merged key is the point
                if key in own_keys and key not in obj.duplicates:
                    obj.duplicates.append(key)
                own_keys.add(key)
            obj[key] = self.construct_object(value_node, deep=deep)
        return obj

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        text = str(node.value).replace("_", "")
        if len(text.lstrip("+-")) > 19:
            return _BigInteger(text)
        return super().construct_yaml_int(node)


_YamlLoader.add_constructor("tag:yaml.org,2002:map", _YamlLoader.construct_mapping)
_YamlLoader.add_constructor("tag:yaml.org,2002:int", _YamlLoader.construct_yaml_int)


def read_text(path: str, what: str = "task file") -> str:
    """The UTF-8 text of ``path`` (a leading BOM removed), or a ``ConfigError`` saying why not."""
    if os.path.isdir(path):
        raise ConfigError(f"{path}: is a folder, not a {what}")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        raise ConfigError(f"{what} not found: {path}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):  # a pipe: bash's <(...) (read up to the limit)
        kind = "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
        raise ConfigError(f"{path}: {kind}, not a {what}")
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: {size} bytes; a {what} may have at most {MAX_FILE_BYTES}")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the {what}: {e.strerror}") from None
    if data.startswith(_UTF16_32_BOMS):
        raise ConfigError(f"{path}: the {what} is UTF-16/UTF-32 encoded; save it as UTF-8")
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    if b"\x00" in data:
        raise ConfigError(f"{path}: the {what} holds NUL bytes (binary, or UTF-16 without a BOM); "
                          f"a {what} is UTF-8 text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(f"{path}:{line}:{column}: not valid UTF-8 ({e.reason}); "
                          f"save the {what} as UTF-8") from None


def parse_document(path: str, text: str) -> Any:
    """Parse JSON (or YAML for ``.yaml``/``.yml``); syntax errors name the line and column."""
    try:
        if path.lower().endswith((".yaml", ".yml")):
            return _parse_yaml(path, text)
        return json.loads(text, object_pairs_hook=_json_object, parse_int=_json_int)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise ConfigError(f"{path}: invalid value: {e}") from None


def _parse_yaml(path: str, text: str) -> Any:
    try:
        return yaml.load(text, Loader=_YamlLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}{where}: invalid YAML: {problem}") from None


def check_structure(path: str, data: Any) -> None:
    """Refuse documents that are too deep, expand to too many values, or refer to themselves.

    YAML aliases share one object between places, so sizes are counted per object (memoized)
    and the expanded size is known without expanding it."""
    sizes: Dict[int, Tuple[int, int]] = {}  # id -> (values when expanded, depth)
    active: set = set()

    def measure(value: Any, depth: int) -> Tuple[int, int]:
        if not isinstance(value, (dict, list)):
            return 1, 0
        key = id(value)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ConfigError(f"{path}: a YAML alias refers to itself (a recursive structure)")
        if depth > MAX_DEPTH:
            raise ConfigError(f"{path}: nested deeper than {MAX_DEPTH} levels")
        active.add(key)
        total, deepest = 1, 0
        for child in (value.values() if isinstance(value, dict) else value):
            n, d = measure(child, depth + 1)
            total, deepest = total + n, max(deepest, d + 1)
            if total > MAX_VALUES:
                raise ConfigError(f"{path}: expands to more than {MAX_VALUES} values "
                                  f"(YAML aliases repeated many times?)")
        active.discard(key)
        sizes[key] = (total, deepest)
        return sizes[key]

    measure(data, 0)


def check_values(data: Any, problems: Problems, path: str = "") -> None:
    """Record every value that is not plain JSON a config can use, by key path."""
    if isinstance(data, dict):
        _check_object(data, problems, path)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            check_values(value, problems, f"{path}[{i}]")
    else:
        _check_scalar(data, problems, path)


def _check_object(data: Dict[Any, Any], problems: Problems, path: str) -> None:
    """An object's keys (strings, each set once) and each of its values."""
    for key in getattr(data, "duplicates", []):
        problems.add(f"{_join(path, key)}: duplicate key (the file sets it more than once)", key=_join(path, key))
    for key, value in data.items():
        if not isinstance(key, str):
            problems.add(f"{_join(path, key)}: keys must be strings, got {type(key).__name__} {key!r}",
                         key=_join(path, key))
            continue
        check_values(value, problems, _join(path, key))


def _check_scalar(data: Any, problems: Problems, path: str) -> None:
    """A value that holds no others: a string, bool, null, an int64 or a finite float."""
    where = path or "<root>"
    if isinstance(data, _BigInteger):
        problems.add(f"{where}: integer {data[:20]}... ({len(data)} digits) is outside int64", key=path)
    elif isinstance(data, bool) or data is None or isinstance(data, str):
        return
    elif isinstance(data, int):
        if not INT64_MIN <= data <= INT64_MAX:
            problems.add(f"{where}: integer {data} is outside int64", key=path)
    elif isinstance(data, float):
        if not math.isfinite(data):
            problems.add(f"{where}: {data!r} is not a finite number", key=path)
    else:
        problems.add(f"{where}: {type(data).__name__} {str(data)[:40]!r} is not a JSON value "
                     f"(quote it to make it a string)", key=path)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def read_document(path: str, what: str = "task file") -> Any:
    """Read, parse and check the structure of a JSON/YAML file. The values are checked by
    ``check_values`` (after any overrides); duplicate keys are remembered until then."""
    data = parse_document(path, read_text(path, what))
    check_structure(path, data)
    return data
