"""One step function for all of a generation model's decoding: ``advance``.

``advance`` feeds ``T`` new tokens to each of ``R`` rows after their key/value cache and returns
each row's next logits and the new tokens' keys and values::

    tokens [R, T], positions [R, T], visible [R, T, N + T], keys_0, values_0, ... [R, KV, N, D]
        -> logits [R, vocab] (after each row's last token), new_cache [layers, 2, R, KV, T, D]

Each layer's cached keys and values are inputs of their own (``layer_cache_names``), so a caller
that keeps its rows' caches in one array ``[layers, 2, rows, KV, columns, D]`` feeds each layer's
first ``R`` rows as they lie, and the program never copies the cache: it attends to the cached
and the new keys side by side, and returns only the new ones for the caller to write in place
(``wenxin.models.kv_slots``). ``N`` is at least 1 (Paddle 3.0's matmul fails on an empty
operand): an empty cache is one column that ``visible`` hides (``with_hidden_column``).

A prompt's prefill is one row after an empty cache, each token seeing the columns up to its own;
a long prompt's next chunk is the same after the cache of its tokens so far; a decoding step is
``T`` = 1. An export holding ``advance`` alone holds its weights once, and a serving process
loads them once (three programs each loaded its own copy: issue 69).

``AdvanceRunner`` runs the older step functions' calls (``prefill``, ``prefill_chunk``,
``extend``, and ``advance`` on one ``cache`` array returning it grown: an export's before the
cache stayed in place) as ``advance``, so every caller of a step runner works with either kind
of model; ``advance_steps`` describes those calls as the older steps' entries in
``preprocess.json`` did.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Tuple

import numpy as np

from wenxin.models.decoding import StepRunner

ADVANCE = "advance"
PREFILL, CHUNK, EXTEND = "prefill", "prefill_chunk", "extend"
NEW_CACHE = "new_cache"  # advance's output: the new tokens' keys and values
KEYS, VALUES = "keys_", "values_"  # advance's inputs: each layer's cached keys and values
ROW_AXIS, COLUMN_AXIS = 2, 4  # of a cache array [layers, 2, rows, KV, columns, D]
# two groups of rows in one step (wenxin.models.advance_pair): the program, and the prefix of its
# second group's inputs and new keys and values (its first group's are advance's own names)
PAIR, SECOND = "advance_pair", "second_"
# the pair's flag in preprocess.json's steps: its second group may have no rows, so an engine that
# holds only the pair runs a one-group call beside no rows (exports since 2026-12-06; an older
# export's pair fails on no rows and runs beside a lone row: ``advance_by_pair``)
EMPTY_SECOND = "empty_second"


def layer_cache_names(layers: int) -> List[str]:
    """``advance``'s cache inputs, in order: ``keys_0``, ``values_0``, ``keys_1``, ..."""
    return [f"{kind}{layer}" for layer in range(layers) for kind in (KEYS, VALUES)]


def in_place(steps: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether ``steps`` (``preprocess.json``'s, or a model's ``step_specs`` as such entries) has an
    ``advance`` that reads each layer's cache where it lies and returns the new keys and values."""
    return ADVANCE in steps and any(i["name"] == f"{KEYS}0" for i in steps[ADVANCE]["inputs"])


def empty_cache(steps: Mapping[str, Mapping[str, Any]], step: str = ADVANCE) -> np.ndarray:
    """The key/value cache of one row holding nothing, ``[layers, 2, 1, heads, 0, D]``, as
    ``step``'s ``cache`` input (or, for an in-place ``advance``, its layers' inputs) describes it."""
    inputs = steps[step]["inputs"]
    if step == ADVANCE and in_place(steps):
        first = next(i for i in inputs if i["name"] == f"{KEYS}0")  # [R, KV, N, D]
        layers = sum(1 for i in inputs if i["name"].startswith(KEYS))
        shape = [layers, 2, 1, first["shape"][1], 0, first["shape"][3]]
        return np.zeros(shape, dtype=first.get("dtype", "float32"))
    cache = next(i for i in inputs if i["name"] == "cache")
    shape = list(cache["shape"])
    shape[2], shape[4] = 1, 0
    return np.zeros(shape, dtype=cache.get("dtype", "float32"))


def layer_inputs(cache: np.ndarray) -> Dict[str, np.ndarray]:
    """An in-place ``advance``'s cache inputs from one array ``[layers, 2, R, KV, N, D]``: each
    layer's keys and values as views (no copy where ``cache`` is contiguous)."""
    return {name: cache[index // 2, index % 2] for index, name in enumerate(layer_cache_names(cache.shape[0]))}


def with_hidden_column(cache: np.ndarray, visible: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``cache`` ``[L, 2, R, KV, N, D]`` and ``visible`` ``[R, T, N + T]``, with one zero column
    before the cache's that no token sees where ``N`` is 0 (``advance`` needs ``N`` >= 1)."""
    if cache.shape[COLUMN_AXIS] > 0:
        return cache, visible
    shape = list(cache.shape)
    shape[COLUMN_AXIS] = 1
    hidden = np.zeros(visible.shape[:2] + (1,), dtype=np.float32)
    return np.zeros(shape, dtype=cache.dtype), np.concatenate([hidden, visible], axis=2)


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
    empty = empty_cache(steps)
    cache = {"name": "cache", "shape": [empty.shape[0], 2, -1, empty.shape[3], -1, empty.shape[5]],
             "dtype": str(empty.dtype)}
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
    ``visible`` ``[R, N + 1]``) as ``advance`` of one token a row; ``advance`` on one ``cache``
    array ``[L, 2, R, KV, N, D]`` gives it grown by the new tokens (``cache``), whichever kind the
    model's ``advance`` is. ``advance`` on each layer's cache (``layer_cache_names``) goes to an
    in-place model as it is. ``empty``: the cache of one row holding nothing (``empty_cache``);
    ``in_place``: whether the model's ``advance`` is of the kind the module docstring describes
    (an export's before it returned the whole grown ``cache``)."""

    def __init__(self, run: StepRunner, empty: np.ndarray, in_place: bool = False) -> None:
        self.run, self.empty, self.in_place = run, empty, in_place

    def __call__(self, name: str, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        if name == ADVANCE:
            if "cache" not in inputs:
                return dict(self.run(ADVANCE, dict(inputs)))
            return self._grown(inputs["tokens"], inputs["positions"], np.asarray(inputs["cache"]), inputs["visible"])
        if name in (PREFILL, CHUNK):
            ids = np.asarray(inputs["ids"], dtype=np.int64)  # [1, S]
            cache = np.asarray(inputs["cache"]) if name == CHUNK else self.empty
            before, length = int(cache.shape[4]), int(ids.shape[1])
            positions = (before + np.arange(length, dtype=np.int64))[None]  # [1, S]
            out = self._grown(ids, positions, cache, causal_visible(before, length))
            out["position"] = np.asarray([before + length], dtype=np.int64)
            return out
        if name == EXTEND:
            tokens = np.asarray(inputs["tokens"], dtype=np.int64)
            cache = np.asarray(inputs["cache"])
            visible = inputs.get("visible")
            if visible is None:  # every row sees every column
                visible = np.ones((len(tokens), int(cache.shape[4]) + 1), dtype=np.float32)
            return self._grown(tokens[:, None], np.asarray(inputs["positions"], dtype=np.int64)[:, None], cache,
                               np.asarray(visible, dtype=np.float32)[:, None])
        raise KeyError(f"no step function {name!r} (this model's is {ADVANCE})")

    def _grown(self, tokens: np.ndarray, positions: np.ndarray, cache: np.ndarray,
               visible: np.ndarray) -> Dict[str, np.ndarray]:
        """``advance`` after ``cache`` ``[L, 2, R, KV, N, D]``: ``logits`` and ``cache`` grown by
        the new tokens ``[..., N + T, D]``."""
        feed = {"tokens": np.asarray(tokens, dtype=np.int64), "positions": np.asarray(positions, dtype=np.int64)}
        visible = np.asarray(visible, dtype=np.float32)
        if not self.in_place:
            return dict(self.run(ADVANCE, {**feed, "cache": cache, "visible": visible}))
        out = dict(self.run(ADVANCE, {**feed, **in_place_inputs(cache, visible)}))
        out["cache"] = grown_cache(cache, out.pop(NEW_CACHE))
        return out


def in_place_inputs(cache: np.ndarray, visible: np.ndarray) -> Dict[str, np.ndarray]:
    """An in-place ``advance``'s ``visible`` and each layer's cache inputs for rows whose caches
    lie in ``cache`` ``[L, 2, R, KV, N, D]`` (a hidden column where ``N`` is 0:
    ``with_hidden_column``)."""
    fed, visible = with_hidden_column(np.ascontiguousarray(cache), visible)
    return {"visible": visible, **layer_inputs(fed)}


def grown_cache(cache: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``cache`` ``[L, 2, R, KV, N, D]`` with an in-place ``advance``'s new keys and values
    ``[..., T, D]`` after each row's: ``[..., N + T, D]``."""
    return np.concatenate([cache, new], axis=COLUMN_AXIS) if cache.shape[COLUMN_AXIS] else np.asarray(new)


def pair_feed(first: Mapping[str, np.ndarray], second: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """``advance_pair``'s inputs: two groups' in-place ``advance`` inputs, the second's names prefixed."""
    return {**first, **{SECOND + name: value for name, value in second.items()}}


def lone_row(like: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """An in-place ``advance``'s inputs for one row of one token (id 0) after one column it does
    not see, each layer's cache shaped as ``like``'s: the second group of an ``advance_pair`` call
    that has only one, in an export whose pair cannot run a group of no rows (its logits and keys
    are dropped)."""
    layers = {name: np.zeros((1, *value.shape[1:2], 1, *value.shape[3:]), dtype=value.dtype)
              for name, value in like.items() if name.startswith((KEYS, VALUES))}  # [1, KV, 1, D]
    return {"tokens": np.zeros((1, 1), dtype=np.int64), "positions": np.zeros((1, 1), dtype=np.int64),
            "visible": np.asarray([[[0.0, 1.0]]], dtype=np.float32), **layers}


def no_rows(like: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """An in-place ``advance``'s inputs for no rows (of one token after one column), each layer's
    cache shaped as ``like``'s: the second group of an ``advance_pair`` call that has only one."""
    return {name: value[:0] for name, value in lone_row(like).items()}


def pair_runs_alone(steps: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether ``steps`` (``preprocess.json``'s) has an ``advance_pair`` whose second group may
    have no rows (``EMPTY_SECOND``): an engine can then hold it alone at a one-group call's cost."""
    return bool(steps.get(PAIR, {}).get(EMPTY_SECOND))


def advance_by_pair(run_pair: Callable[[Dict[str, np.ndarray]], Mapping[str, np.ndarray]],
                    inputs: Mapping[str, np.ndarray], empty_second: bool) -> Dict[str, np.ndarray]:
    """An in-place ``advance`` on ``inputs`` run as ``advance_pair`` (``run_pair``): an engine that
    holds only the pair's program (one copy of the weights) runs every call so, its second group
    no rows (``empty_second``: ``pair_runs_alone``), or else a lone row (an older export's pair;
    10% of a one-row int8 step at ERNIE-4.5-0.3B's shape, 2% of a 16-row one: docs/serving.md)."""
    out = run_pair(pair_feed(inputs, no_rows(inputs) if empty_second else lone_row(inputs)))
    rows = len(inputs["tokens"])
    return {"logits": np.asarray(out["logits"])[:rows], NEW_CACHE: np.asarray(out[NEW_CACHE])}
