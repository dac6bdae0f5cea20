"""ERNIE-Gen's one step function, ``infill``, and the decoding calls run through it.

``infill`` feeds ``T`` new context tokens to each of ``R`` rows after their key/value cache, and
one ``[MASK]`` after them (at the last token's position + 1, of its type), whose state gives the
next token's logits::

    tokens [R, T], types [R, T], positions [R, T], visible [R, T, N + T], keys_0, values_0, ... [R, heads, N, d]
        -> logits [R, vocab], new_cache [L, 2, R, heads, T, d]

(``wenxin.models.ernie_gen.infill_streams``). Each layer's cached keys and values are inputs of
their own, as ``advance``'s are (``wenxin.models.advance_step``): a caller keeping its rows'
caches in place (``wenxin.models.kv_slots``) feeds them as they lie and writes the new keys and
values after them, so a decoding step copies no cache. A source's prefill is one row of the source
and the target's ``[CLS]`` after an empty cache, every source token seeing the source, the
``[CLS]`` all of it and itself; a decoding step is ``T`` = 1. An export holding ``infill`` alone
holds the weights once, and a serving process loads them once (the ``prefill`` and ``extend``
programs of earlier exports, which still load, were a predictor and a copy of the weights each,
and grew the whole cache at every step: issue 69).

``InfillRunner`` runs the calls every decoder makes as ``infill``: ``prefill`` of a source's
inputs, ``prefill_rows`` (several sources' prefills in one call:
``wenxin.models.batch_prefill.prefill_whole``), ``extend`` of one token a row on one cache array
(returned grown), and an in-place ``advance`` (``BatchDecoder``'s step over ``KVSlots``); the
export's step entry says what the ``[CLS]`` is (``TARGET_START``: its id and type, and whether
positions run on from the source).
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Tuple

import numpy as np

from wenxin.models.advance_step import (ADVANCE, COLUMN_AXIS, EXTEND, KEYS, NEW_CACHE, PREFILL, grown_cache,
                                        in_place_inputs)
from wenxin.models.decoding import StepRunner

INFILL = "infill"
# several sources' prefills in one infill call: each prompt input [R, S] padded at its end, and
# "lengths" [R] (wenxin.models.batch_prefill.prefill_whole splits the outputs per source)
PREFILL_ROWS = "prefill_rows"
LENGTHS = "lengths"
# infill's entry in preprocess.json's steps: {"id": [CLS], "type": the target's token type,
# "continuous": whether positions run on from the source (else they restart at 0 at [CLS])}
TARGET_START = "target_start"
# a prefill's inputs (ErnieInfillingGeneration.prompt_source): the source's ids and token types,
# and its positions where they restart in each source
SOURCE_IDS, SOURCE_TYPES, SOURCE_POSITIONS = "src_ids", "src_types", "src_positions"


def infill_steps(steps: Mapping[str, Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """``steps`` with ``prefill``, ``prefill_rows`` and ``extend`` described as ``InfillRunner``
    runs them, where the export has ``infill``; otherwise ``steps`` as they are."""
    described = {name: dict(entry) for name, entry in steps.items()}
    if INFILL not in steps:
        return described
    start = steps[INFILL][TARGET_START]
    empty = infill_cache(steps)  # [L, 2, 1, heads, 0, d]
    cache = {"name": "cache", "shape": [empty.shape[0], 2, -1, empty.shape[3], -1, empty.shape[5]], "dtype": "float32"}
    source = [{"name": name, "shape": [1, -1], "dtype": "int64"}
              for name in (SOURCE_IDS, SOURCE_TYPES, *(() if start["continuous"] else (SOURCE_POSITIONS,)))]
    row = {"shape": [-1], "dtype": "int64"}
    described[PREFILL] = {"inputs": source, "outputs": ["logits", "cache", "position"]}
    described[PREFILL_ROWS] = {"inputs": [{**i, "shape": [-1, -1]} for i in source] +
                               [{"name": LENGTHS, "shape": [-1], "dtype": "int64"}],
                               "outputs": ["logits", "cache", "position"]}
    described[EXTEND] = {"inputs": [{"name": "tokens", **row}, {"name": "positions", **row}, cache,
                                    {"name": "visible", "shape": [-1, -1], "dtype": "float32"}],
                         "outputs": ["logits", "cache"]}
    return described


def infill_cache(steps: Mapping[str, Mapping[str, Any]]) -> np.ndarray:
    """The key/value cache of one row holding nothing, ``[L, 2, 1, heads, 0, d]``, as ``infill``'s
    layer inputs (``keys_0``, ... ``[R, heads, N, d]``) describe it."""
    layers = [i for i in steps[INFILL]["inputs"] if i["name"].startswith(KEYS)]
    heads, width = layers[0]["shape"][1], layers[0]["shape"][3]
    return np.zeros((len(layers), 2, 1, heads, 0, width), dtype=np.float32)


class InfillRunner:
    """A step runner for an ERNIE-Gen model whose one step function is ``infill`` (``run``):
    ``prefill`` (a source's ``src_ids``/``src_types`` ``[1, S]``, and ``src_positions`` where
    they restart) runs as one row of the source and ``[CLS]`` after an empty cache and also
    gives the first target token's ``position`` ``[1]``; ``prefill_rows`` several sources in one
    call (``PREFILL_ROWS``: ``prefill_rows``); ``extend`` (``tokens``/``positions``
    ``[R]``, ``cache``, ``visible`` ``[R, N + 1]``) as one token a row, returning the cache
    grown; ``advance`` (``tokens``/``positions`` ``[R, 1]``, ``visible``, each layer's cache) as
    one target token a row, returning only the new keys and values (``NEW_CACHE``). ``entry``:
    ``infill``'s entry in the export's steps (its cache inputs' shapes and ``TARGET_START``)."""

    def __init__(self, run: StepRunner, entry: Mapping[str, Any]) -> None:
        self.run = run
        start = entry[TARGET_START]
        self.cls, self.target_type, self.continuous = int(start["id"]), int(start["type"]), bool(start["continuous"])
        self.empty = infill_cache({INFILL: entry})  # [L, 2, 1, heads, 0, d]

    def __call__(self, name: str, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        if name == PREFILL:  # one source: a row of no padding
            length = np.asarray([np.shape(inputs[SOURCE_IDS])[1]], dtype=np.int64)
            out = self.prefill_rows({**inputs, LENGTHS: length})
            return {**out, "cache": np.ascontiguousarray(out["cache"])}
        if name == PREFILL_ROWS:
            return self.prefill_rows(inputs)
        if name == ADVANCE:  # decoding rows whose caches stay in place: target tokens
            types = np.full_like(np.asarray(inputs["tokens"], dtype=np.int64), self.target_type)
            return dict(self.run(INFILL, {**inputs, "types": types}))
        if name == EXTEND:
            return self.extend(inputs)
        return dict(self.run(name, dict(inputs)))

    def prefill_rows(self, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Sources of ``lengths`` ``[R]`` tokens (each input ``[R, S]``, a row's tokens at its
        start) -> each row's first logits ``[R, V]``, the cache of its source and ``[CLS]`` at the
        end of the columns ``[L, 2, R, heads, S + 1, d]`` (the ``S - length`` columns before them
        padding, which nothing saw) and its first target token's ``position`` ``[R]``."""
        feed, next_position = self.prefill_feed(inputs)
        out = dict(self.run(INFILL, feed))
        return {"logits": out["logits"], "cache": np.asarray(out.pop(NEW_CACHE)),  # the new tokens': the cache
                "position": next_position}  # the first target token's, the [MASK]'s that predicted it

    def prefill_feed(self, inputs: Mapping[str, np.ndarray]) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
        """``infill``'s inputs for ``prefill_rows``: each row's source at the end of its columns and
        the ``[CLS]`` after it, after an empty cache; and each row's next position ``[R]``."""
        ids = np.asarray(inputs[SOURCE_IDS], dtype=np.int64)  # [R, S]
        rows, width = ids.shape
        lengths = np.asarray(inputs[LENGTHS], dtype=np.int64).reshape(rows)
        placed = np.arange(width)[None, :] - (width - lengths)[:, None]  # [R, S]: the input column at each
        real = placed >= 0  # [R, S]: a source token (else padding), each row's at its end
        taken = np.maximum(placed, 0)

        def moved(values: np.ndarray) -> np.ndarray:  # [R, S]: a row's tokens' values at its end, 0 before
            return np.where(real, np.take_along_axis(np.asarray(values, dtype=np.int64), taken, axis=1), 0)

        if self.continuous:
            positions, cls_position = moved(np.broadcast_to(np.arange(width), ids.shape)), lengths
        else:
            positions, cls_position = moved(inputs[SOURCE_POSITIONS]), np.zeros(rows, dtype=np.int64)
        visible = np.zeros((rows, width + 1, width + 1), dtype=np.float32)  # [R, S + 1, S + 1]
        visible[:, :width, :width] = real[:, :, None] & real[:, None, :]  # a source token sees its source
        visible[:, width, :width] = real  # the [CLS] sees the source and itself
        visible[:, width, width] = 1.0
        feed = {"tokens": np.concatenate([moved(ids), np.full((rows, 1), self.cls)], axis=1),  # [R, S + 1]
                "types": np.concatenate([moved(inputs[SOURCE_TYPES]), np.full((rows, 1), self.target_type)], axis=1),
                "positions": np.concatenate([positions, cls_position[:, None]], axis=1),
                **in_place_inputs(np.repeat(self.empty, rows, axis=2), visible)}  # a hidden column: N >= 1
        return feed, cls_position + 1

    def extend(self, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        tokens = np.asarray(inputs["tokens"], dtype=np.int64)[:, None]  # [R, 1]
        cache = np.asarray(inputs["cache"])
        visible = inputs.get("visible")
        if visible is None:  # every row sees every column
            visible = np.ones((len(tokens), int(cache.shape[COLUMN_AXIS]) + 1), dtype=np.float32)
        out = dict(self.run(INFILL, {"tokens": tokens, "types": np.full_like(tokens, self.target_type),
                                     "positions": np.asarray(inputs["positions"], dtype=np.int64)[:, None],
                                     **in_place_inputs(cache, np.asarray(visible, dtype=np.float32)[:, None])}))
        return {"logits": out["logits"], "cache": grown_cache(cache, np.asarray(out[NEW_CACHE]))}
