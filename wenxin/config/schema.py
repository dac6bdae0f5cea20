"""A small schema language for task files: types, defaults, choices, bounds and nesting.

``validate(value, schema, path)`` returns a copy with defaults filled in, or raises
``ConfigError`` naming the JSON key path (``trainer.eval_step``) of the first problem.
"""
from __future__ import annotations

import copy
import difflib
from typing import Any, Dict, Optional, Sequence, Tuple

from wenxin.common.errors import ConfigError

REQUIRED = object()
_TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "string", dict: "object",
               list: "list", type(None): "null"}


class Key:
    """Describes one key of a config object.

    Args:
        types: accepted Python types (``float`` also accepts ints; ``bool`` accepts 0/1).
        default: value used when the key is absent; ``REQUIRED`` makes it mandatory.
        choices: allowed values.
        minimum / maximum: inclusive numeric bounds.
        children: schema of a nested object.
        items: schema (a ``Key``) of each element of a list.
        open_keys: a nested object whose keys are not checked.
        doc: one line shown in the README reference.
    """

    def __init__(self, types: Tuple[type, ...] | type, default: Any = REQUIRED, *,
                 choices: Optional[Sequence[Any]] = None, minimum: Optional[float] = None,
                 maximum: Optional[float] = None, children: Optional["Schema"] = None,
                 items: Optional["Key"] = None, open_keys: bool = False, doc: str = "") -> None:
        self.types = types if isinstance(types, tuple) else (types,)
        self.default = default
        self.choices = choices
        self.minimum = minimum
        self.maximum = maximum
        self.children = children
        self.items = items
        self.open_keys = open_keys
        self.doc = doc


Schema = Dict[str, Key]


def _type_name(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _coerce(value: Any, key: Key, path: str) -> Any:
    """Check the type of ``value``; returns it, converted where the conversion is lossless."""
    for t in key.types:
        if t is bool and (isinstance(value, bool) or (type(value) is int and value in (0, 1))):
            return bool(value)
        if t is float and type(value) in (int, float):
            return float(value)
        if t is int and type(value) is int:
            return value
        if t is int and type(value) is float and value.is_integer() and float not in key.types:
            return int(value)
        if t not in (bool, int, float) and isinstance(value, t):
            return value
    expected = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in key.types)
    raise ConfigError(f"{path}: expected {expected}, got {_type_name(value)} {value!r}")


def suggest(name: str, known: Sequence[str]) -> str:
    hint = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{hint[0]}'?)" if hint else ""


def validate(value: Any, schema: Schema, path: str = "") -> Dict[str, Any]:
    """Validate an object against ``schema`` and fill in defaults."""
    if not isinstance(value, dict):
        raise ConfigError(f"{path or '<root>'}: expected object, got {_type_name(value)} {value!r}")
    for name in value:
        if name not in schema:
            known = sorted(schema)
            raise ConfigError(f"{_join(path, name)}: unknown key{suggest(name, known)}; "
                              f"allowed keys: {', '.join(known)}")
    result: Dict[str, Any] = {}
    for name, key in schema.items():
        key_path = _join(path, name)
        if name not in value:
            if key.default is REQUIRED:
                raise ConfigError(f"{key_path}: required key is missing")
            result[name] = copy.deepcopy(key.default)
            continue
        result[name] = validate_value(value[name], key, key_path)
    return result


def validate_value(value: Any, key: Key, path: str) -> Any:
    if value is None and type(None) in key.types:
        return None
    value = _coerce(value, key, path)
    if key.choices is not None and value not in key.choices:
        raise ConfigError(f"{path}: {value!r} is not one of {list(key.choices)}"
                          f"{suggest(str(value), [str(c) for c in key.choices])}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if key.minimum is not None and value < key.minimum:
            raise ConfigError(f"{path}: {value!r} is below the minimum {key.minimum}")
        if key.maximum is not None and value > key.maximum:
            raise ConfigError(f"{path}: {value!r} is above the maximum {key.maximum}")
    if isinstance(value, dict) and key.children is not None and not key.open_keys:
        return validate(value, key.children, path)
    if isinstance(value, list) and key.items is not None:
        return [validate_value(v, key.items, f"{path}[{i}]") for i, v in enumerate(value)]
    return copy.deepcopy(value)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
