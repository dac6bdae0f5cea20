"""One step function for all of a generation model's decoding: ``advance``.

``advance`` feeds ``T`` new tokens to each of ``R`` rows after their key/value cache and returns
each row's next logits and the grown cache::

    tokens [R, T], positions [R, T], cache [layers, 2, R, heads, N, D], visible [R, T, N + T]
        -> logits [R, vocab] (after each row's last token), cache [layers, 2, R, heads, N + T, D]

A prompt's prefill is one row after an empty cache (``N`` = 0), each token seeing the columns up
to its own; a long prompt's next chunk is the same after the cache of its tokens so far; a
decoding step is ``T`` = 1. An export holding ``advance`` alone holds its weights once, and a
serving process loads them once (three programs each loaded its own copy: issue 69).

``AdvanceRunner`` runs the older step functions' calls (``prefill``, ``prefill_chunk``,
``extend``: ``wenxin.models.batch_decoding``'s) as ``advance``, so every caller of a step runner
works with either kind of model; ``advance_steps`` describes those calls as the older steps'
entries in ``preprocess.json`` did.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping

import numpy as np

from wenxin.models.decoding import StepRunner

ADVANCE = "advance"
PREFILL, CHUNK, EXTEND = "prefill", "prefill_chunk", "extend"


def empty_cache(steps: Mapping[str, Mapping[str, Any]], step: str = ADVANCE) -> np.ndarray:
    """The key/value cache of one row holding nothing, ``[layers, 2, 1, heads, 0, D]``, as
    ``step``'s ``cache`` input (``preprocess.json``'s ``steps``) describes it."""
    cache = next(i for i in steps[step]["inputs"] if i["name"] == "cache")
    shape = list(cache["shape"])
    shape[2], shape[4] = 1, 0
    return np.zeros(shape, dtype=cache.get("dtype", "float32"))


def causal_visible(before: int, length: int) -> np.ndarray:
    """``[1, length, before + length]``: each of ``length`` new tokens sees the ``before`` cached
    columns and the new ones up to itself."""
    columns = np.arange(before + length)[None, :]  # [1, N + S]
    own = before + np.arange(length)[:, None]  # [S, 1]: each new token's column
    return (columns <= own).astype(np.float32)[None]


def advance_steps(steps: Mapping[str, Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """``steps`` with ``prefill``, ``prefill_chunk`` and ``extend`` described as ``AdvanceRunner``
    runs them, where the export has ``advance``; otherwise ``steps`` as they are."""
    if ADVANCE not in steps:
        return {name: dict(entry) for name, entry in steps.items()}
    cache = next(dict(i) for i in steps[ADVANCE]["inputs"] if i["name"] == "cache")
    ids = {"name": "ids", "shape": [1, -1], "dtype": "int64"}
    row = {"shape": [-1], "dtype": "int64"}
    return {**{name: dict(entry) for name, entry in steps.items()},
            PREFILL: {"inputs": [ids], "outputs": ["logits", "cache", "position"]},
            CHUNK: {"inputs": [ids, cache], "outputs": ["logits", "cache", "position"]},
            EXTEND: {"inputs": [{"name": "tokens", **row}, {"name": "positions", **row}, cache,
                                {"name": "visible", "shape": [-1, -1], "dtype": "float32"}],
                     "outputs": ["logits", "cache"]}}


class AdvanceRunner:
    """A step runner for a model whose one step function is ``advance`` (``run``): ``prefill``
    (``ids`` ``[1, S]``) and ``prefill_chunk`` (``ids`` after a ``cache``) run as one row of
    ``advance`` and also give the next token's ``position`` ``[1]``; ``extend`` (one token per row,
    ``visible`` ``[R, N + 1]``) as ``advance`` of one token a row. ``empty``: the cache of one row
    holding nothing (``empty_cache``)."""

    def __init__(self, run: StepRunner, empty: np.ndarray) -> None:
        self.run, self.empty = run, empty

    def __call__(self, name: str, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        if name == ADVANCE:
            return dict(self.run(ADVANCE, dict(inputs)))
        if name in (PREFILL, CHUNK):
            ids = np.asarray(inputs["ids"], dtype=np.int64)  # [1, S]
            cache = np.asarray(inputs["cache"]) if name == CHUNK else self.empty
            before, length = int(cache.shape[4]), int(ids.shape[1])
            positions = (before + np.arange(length, dtype=np.int64))[None]  # [1, S]
            out = dict(self.run(ADVANCE, {"tokens": ids, "positions": positions, "cache": cache,
                                          "visible": causal_visible(before, length)}))
            out["position"] = np.asarray([before + length], dtype=np.int64)
            return out
        if name == EXTEND:
            tokens = np.asarray(inputs["tokens"], dtype=np.int64)
            cache = np.asarray(inputs["cache"])
            visible = inputs.get("visible")
            if visible is None:  # every row sees every column
                visible = np.ones((len(tokens), int(cache.shape[4]) + 1), dtype=np.float32)
            return dict(self.run(ADVANCE, {"tokens": tokens[:, None],
                                           "positions": np.asarray(inputs["positions"], dtype=np.int64)[:, None],
                                           "cache": cache, "visible": np.asarray(visible, dtype=np.float32)[:, None]}))
        raise KeyError(f"no step function {name!r} (this model's is {ADVANCE})")


def steps_runner(run: StepRunner, steps: Mapping[str, Mapping[str, Any]]) -> StepRunner:
    """``run`` itself, or an ``AdvanceRunner`` over it where ``steps`` (``preprocess.json``'s,
    or a model's ``step_specs`` as such entries) has ``advance``."""
    return AdvanceRunner(run, empty_cache(steps)) if ADVANCE in steps else run

