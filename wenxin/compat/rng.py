"""Paddle's random-generator states as JSON values, without pickle.

``paddle.get_rng_state()`` returns ``GeneratorState`` objects, which Paddle itself saves with
pickle. Their pickle protocol (``__getstate__``/``__setstate__``) is the only way into them: a
tuple ``(device, seed, offset, state)`` where ``state`` is the Mersenne-Twister text as a list of
byte values. Here that tuple becomes plain JSON, and back.
"""
from __future__ import annotations

from typing import Any, Dict, List

import paddle


def generator_states() -> List[Dict[str, Any]]:
    """The states of Paddle's generators (``paddle.get_rng_state()``) as JSON objects."""
    states = []
    for state in paddle.get_rng_state():
        device, seed, offset, engine = state.__getstate__()
        states.append({"device": int(device), "seed": int(seed), "offset": int(offset),
                       "engine": bytes(engine).decode("ascii")})
    return states


def set_generator_states(states: List[Dict[str, Any]]) -> None:
    """Restore states made by ``generator_states``; raises ``ValueError`` on malformed ones."""
    cls = type(paddle.get_rng_state()[0])
    restored = []
    for item in states:
        if not isinstance(item, dict) or set(item) != {"device", "seed", "offset", "engine"}:
            raise ValueError(f"not a generator state: {str(item)[:80]}")
        state = cls.__new__(cls)
        state.__setstate__((int(item["device"]), int(item["seed"]), int(item["offset"]),
                            list(str(item["engine"]).encode("ascii"))))
        restored.append(state)
    paddle.set_rng_state(restored)
