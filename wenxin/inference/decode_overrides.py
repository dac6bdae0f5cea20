"""A request's decoding settings: an export's own with the request's changes, checked."""
from __future__ import annotations

from typing import Any, Mapping

from wenxin.common.errors import InferenceError, WenxinError
from wenxin.models.decoding import DecodeSettings

FIXED = frozenset({"eos_id", "stop_ids"})  # the end tokens are the model's


def settings_with(base_settings: DecodeSettings, changes: Mapping[str, Any], max_new_tokens_limit: int
                  ) -> DecodeSettings:
    """``base_settings`` with ``changes`` (e.g. ``{"max_new_tokens": 8}``) applied; an unknown or
    bad setting, or more new tokens than ``max_new_tokens_limit``, is an ``InferenceError``
    naming it."""
    base = base_settings.as_dict()
    unknown = sorted(set(changes) - set(base) | (FIXED & set(changes)))
    if unknown:
        known = sorted(set(base) - FIXED)
        raise InferenceError(f"unknown decoding settings {unknown} (known: {', '.join(known)})")
    for key, value in changes.items():
        kind = type(base[key])
        if kind is str:
            fits, what = isinstance(value, str), "a string"
        elif kind is int:
            fits, what = isinstance(value, int) and not isinstance(value, bool), "an integer"
        else:
            fits, what = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
        if not fits:
            raise InferenceError(f"decoding setting {key}: {value!r} is not {what}")
    settings = DecodeSettings(**{**base, **changes})
    try:
        settings.check()
    except WenxinError as e:
        raise InferenceError(str(e)) from None
    if settings.max_new_tokens > max_new_tokens_limit:
        raise InferenceError(f"max_new_tokens {settings.max_new_tokens} is more than the {max_new_tokens_limit} "
                             f"tokens this export can add after a prompt of its longest length (the positions its "
                             f"model has, less the max_seq_len it was exported with)")
    return settings
