"""Reading values out of parsed JSON/YAML that a user wrote (task files, checkpoint states), where
any value may have the wrong type."""
from __future__ import annotations

from typing import Any, Dict, Mapping


def dict_at(mapping: Mapping[str, Any], key: str) -> Dict[str, Any]:
    """The dict under ``key``, or a new empty one when the value is missing or not a dict (the
    caller's checks report it where that matters)."""
    value = mapping.get(key)
    return value if isinstance(value, dict) else {}


def plain(data: Any) -> Any:
    """A copy made of plain dicts and lists (no parse-time bookkeeping, no shared objects)."""
    if isinstance(data, dict):
        return {k: plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [plain(v) for v in data]
    return data
