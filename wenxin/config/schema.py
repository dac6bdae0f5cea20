"""A small schema language for task files: types, defaults, choices, bounds and nesting.

``validate(value, schema, path)`` returns a copy with defaults filled in (also inside nested
objects that were left out), or raises ``ConfigError`` listing every problem, each with its JSON
key path (``trainer.evaluation.eval_step``). With a ``Problems`` collector it records the problems there
instead and goes on, so that a caller can check several sections before reporting.
"""
from __future__ import annotations

import copy
import difflib
import math
from typing import Any, Dict, Optional, Sequence, Tuple

from wenxin.common.errors import Problems

REQUIRED = object()
_TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "string", dict: "object",
               list: "list", type(None): "null"}
INT64_MAX = 2**63 - 1
# The widest layer a task model's config may ask for (hidden sizes, embedding widths, filters):
# wider is a typo (10**7 accepted would build a model that never finishes a step), not a model.
MAX_WIDTH = 1 << 16
MAX_LISTED_KEYS = 12  # an unknown key's error lists the allowed ones up to this many


class Key:
    """Describes one key of a config object.

    Args:
        types: accepted Python types (``float`` also accepts ints; ``bool`` accepts 0/1).
        default: value used when the key is absent; ``REQUIRED`` makes it mandatory. An absent
            nested object (``children``) is filled in from its own keys' defaults.
        choices: allowed values.
        minimum / maximum: inclusive numeric bounds (integers are always within int64).
        children: schema of a nested object.
        items: schema (a ``Key``) of each element of a list, or of each value of an ``open_keys``
            object.
        open_keys: a nested object whose keys are not checked.
        non_empty: a string or list that must not be empty.
        doc: one line shown in the README reference.
        path: the value names a file or folder (the studio confines such a value to its root,
            whatever the key's name).
    """

    def __init__(self, types: Tuple[type, ...] | type, default: Any = REQUIRED, *,
                 choices: Optional[Sequence[Any]] = None, minimum: Optional[float] = None,
                 maximum: Optional[float] = None, children: Optional["Schema"] = None,
                 items: Optional["Key"] = None, open_keys: bool = False, non_empty: bool = False,
                 doc: str = "", path: bool = False) -> None:
        self.types = types if isinstance(types, tuple) else (types,)
        self.default = default
        self.choices = choices
        self.minimum = minimum
        self.maximum = maximum
        self.children = children
        self.items = items
        self.open_keys = open_keys
        self.non_empty = non_empty
        self.doc = doc
        self.path = path


Schema = Dict[str, Key]


def path_key(default: Any = REQUIRED, **settings: Any) -> Key:
    """A ``Key`` whose string value names a file or folder."""
    return Key(str, default, path=True, **settings)


class _Invalid(Exception):
    """One problem with one value (internal: turned into a ``Problems`` entry)."""


def _type_name(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _coerce(value: Any, key: Key) -> Any:
    """Check the type of ``value``; returns it, converted where the conversion is lossless."""
    for t in key.types:
        if t is bool and (isinstance(value, bool) or (type(value) is int and value in (0, 1))):
            return bool(value)
        if t is float and type(value) in (int, float):
            if not math.isfinite(value):
                raise _Invalid(f"{value!r} is not a finite number")
            return float(value)
        if t is int and type(value) is int:
            return value
        if t is int and type(value) is float and value.is_integer() and float not in key.types:
            return int(value)
        if t not in (bool, int, float) and isinstance(value, t):
            return value
    expected = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in key.types)
    raise _Invalid(f"expected {expected}, got {_type_name(value)} {_short(value)}")


def suggest(name: str, known: Sequence[str]) -> str:
    hint = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{hint[0]}'?)" if hint else ""


def validate(value: Any, schema: Schema, path: str = "", problems: Optional[Problems] = None) -> Dict[str, Any]:
    """Validate an object against ``schema`` and fill in defaults.

    Without ``problems``, raises ``ConfigError`` with every problem found; with it, records them
    there and returns what it could check (a bad value is replaced by its default, a bad
    required value is left out)."""
    own = problems if problems is not None else Problems()
    result = _validate_object(value, schema, path, own)
    if problems is None:
        own.raise_if_any()
    return result


def _validate_object(value: Any, schema: Schema, path: str, problems: Problems) -> Dict[str, Any]:
    if not isinstance(value, dict):
        problems.add(f"{path or '<root>'}: expected object, got {_type_name(value)} {_short(value)}", key=path)
        value = {}
    for name in value:
        if name not in schema:
            known = sorted(schema)
            allowed = f"allowed keys: {', '.join(known)}" if len(known) <= MAX_LISTED_KEYS else \
                f"{path or 'the top level'} has {len(known)} keys, listed in docs/reference.md"
            problems.add(f"{_join(path, name)}: unknown key{suggest(str(name), known)}; {allowed}",
                         key=_join(path, name))
    result: Dict[str, Any] = {}
    for name, key in schema.items():
        key_path = _join(path, name)
        if name in value:
            checked = _validate_value(value[name], key, key_path, problems)
            if checked is not _MISSING:
                result[name] = checked
                continue
        elif key.default is REQUIRED:
            problems.add(f"{key_path}: required key is missing", key=key_path)
            continue
        default = _default(key, key_path, problems)
        if default is not _MISSING:
            result[name] = default
    return result


_MISSING = object()


def _default(key: Key, path: str, problems: Problems) -> Any:
    """The default of ``key``; an object default is completed from its children's defaults."""
    if key.default is REQUIRED:
        return _MISSING
    default = copy.deepcopy(key.default)
    if isinstance(default, dict) and key.children is not None and not key.open_keys:
        return _validate_object(default, key.children, path, problems)
    return default


def validate_value(value: Any, key: Key, path: str, problems: Optional[Problems] = None) -> Any:
    """Check one value against ``key``; raises ``ConfigError`` (or records into ``problems``)."""
    own = problems if problems is not None else Problems()
    result = _validate_value(value, key, path, own)
    if problems is None:
        own.raise_if_any()
    return None if result is _MISSING else result


def _validate_value(value: Any, key: Key, path: str, problems: Problems) -> Any:
    """The checked value, or ``_MISSING`` after recording a problem."""
    if value is None and type(None) in key.types:
        return None
    try:
        value = _coerce(value, key)
        _check_range(value, key)
    except _Invalid as e:
        problems.add(f"{path}: {e}", key=path)
        return _MISSING
    if isinstance(value, dict) and key.children is not None and not key.open_keys:
        return _validate_object(value, key.children, path, problems)
    if isinstance(value, list) and key.items is not None:
        checked = [_validate_value(v, key.items, f"{path}[{i}]", problems) for i, v in enumerate(value)]
        return [v for v in checked if v is not _MISSING]
    if isinstance(value, dict) and key.open_keys and key.items is not None:  # free keys, checked values
        values = {name: _validate_value(v, key.items, _join(path, name), problems) for name, v in value.items()}
        return {name: v for name, v in values.items() if v is not _MISSING}
    return copy.deepcopy(value)


def _check_range(value: Any, key: Key) -> None:
    if key.choices is not None and value not in key.choices:
        raise _Invalid(f"{_short(value)} is not one of {list(key.choices)}"
                       f"{suggest(str(value), [str(c) for c in key.choices])}")
    if key.non_empty and isinstance(value, (str, list)) and not value:
        raise _Invalid("must not be empty")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if key.minimum is not None and value < key.minimum:
            raise _Invalid(f"{_short(value)} is below the minimum {key.minimum}")
        maximum = key.maximum if key.maximum is not None else (INT64_MAX if isinstance(value, int) else None)
        if maximum is not None and value > maximum:
            raise _Invalid(f"{_short(value)} is above the maximum {maximum}")
        if isinstance(value, int) and value < -INT64_MAX - 1:
            raise _Invalid(f"{_short(value)} is below the minimum {-INT64_MAX - 1}")


def _join(path: str, name: Any) -> str:
    return f"{path}.{name}" if path else str(name)
