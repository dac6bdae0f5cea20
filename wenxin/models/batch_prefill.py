"""Prompts prefilled together, a part at a time: ``PromptPrefill`` and ``prefill_together``.

A service lets several prompts in at once and gives their prefill a budget of tokens a turn
(``fair_shares``: each gets an even share, a prompt needing less leaves the rest to the others),
so a short newcomer is prefilled in its first turn even while a long prompt is, and the running
answers step between turns. The parts of one turn run as rows of one ``advance`` call
(``wenxin.models.advance_step``) where the model has it: ``T`` new tokens a row, each row's tokens
at its end and its cache so far at the end of the cache columns, the columns before them padding
that ``visible`` hides, so each prompt's logits and cache are those it gets alone (within float32
rounding, tested). Rows whose parts differ much in length go in calls of their own
(``similar_lengths``), so padding never costs more than a quarter of a call's tokens. A model
without ``advance`` prefills each part alone (``prefill``, then ``prefill_chunk``). Where the
engine runs ``advance_pair``, a turn's longest parts of similar lengths go beside the decoding
rows in their step instead (``fused_and_rest``, ``PartRows``; ``wenxin.models.batch_decoding``).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar

import numpy as np

from wenxin.models.advance_step import ADVANCE, CHUNK, COLUMN_AXIS, PREFILL, ROW_AXIS, grown_cache, in_place_inputs
from wenxin.models.decoding import StepRunner
from wenxin.models.infill_step import LENGTHS, PREFILL_ROWS

MAX_PADDING = 0.25  # of a call's new tokens at most, padding (similar_lengths)


class PromptPrefill:
    """One prompt's prefill (its ``ids`` ``[1, S]``), a part at a time: how many tokens are done,
    the cache of those (``cache``, None before the first part) and, once ``done``, the outputs of
    the whole prompt's prefill (``outputs``: ``logits`` ``[1, V]``, ``cache``, ``position`` ``[1]``)."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        self.tokens_done = 0
        self.cache: Optional[np.ndarray] = None
        self.outputs: Optional[Dict[str, np.ndarray]] = None

    @property
    def remaining(self) -> int:
        return len(self.ids) - self.tokens_done

    @property
    def done(self) -> bool:
        return self.remaining <= 0

    def take(self, outputs: Dict[str, np.ndarray], count: int) -> None:
        """Its next ``count`` tokens were prefilled, giving ``outputs`` (the prompt so far)."""
        self.tokens_done += count
        self.cache = outputs["cache"]
        if self.done:
            self.outputs = outputs


def fair_shares(needs: Sequence[int], budget: int) -> List[int]:
    """``budget`` tokens split among prompts needing ``needs`` tokens: each an even share, a
    prompt needing less than its share taking what it needs and leaving the rest to the others
    (max-min fairness); the first prompts get the remainder of an uneven split. At least one token
    each where there is budget for it."""
    shares = [0] * len(needs)
    left = max(int(budget), 0)
    open_ = [i for i, need in enumerate(needs) if need > 0]
    while open_ and left > 0:
        even, extra = divmod(left, len(open_))
        if even == 0:  # fewer tokens than prompts: one each, in order
            for i in open_[:extra]:
                shares[i] += 1
            break
        still = []
        for rank, i in enumerate(open_):
            give = min(needs[i] - shares[i], even + (1 if rank < extra else 0))
            shares[i] += give
            left -= give
            if shares[i] < needs[i]:
                still.append(i)
        if len(still) == len(open_):  # everyone took a full share: the budget is spent
            break
        open_ = still
    return shares


def similar_lengths(counts: Sequence[int], max_padding: float = MAX_PADDING) -> List[List[int]]:
    """The indexes of ``counts`` (tokens a row) in groups, longest first, each group's padding
    (rows x its longest, less its tokens) at most ``max_padding`` of its tokens."""
    order = sorted((i for i, count in enumerate(counts) if count > 0), key=lambda i: -counts[i])
    groups: List[List[int]] = []
    for i in order:
        if groups:
            group = groups[-1]
            width = counts[group[0]]
            tokens = sum(counts[j] for j in group) + counts[i]
            if width * (len(group) + 1) - tokens <= max_padding * tokens:
                group.append(i)
                continue
        groups.append([i])
    return groups


def prefill_together(run: StepRunner, parts: Sequence[Tuple[PromptPrefill, int]],
                     empty: Optional[np.ndarray]) -> None:
    """Prefill each prompt's next ``count`` tokens (``parts``): in ``advance`` calls of prompts of
    similar counts where the model has ``advance`` (``empty``: its cache of one row holding
    nothing, ``advance_step.empty_cache``), else (``empty`` None) one call a part. Each prompt's
    ``take`` is told its outputs."""
    if empty is None:
        for prompt, count in parts:
            if count > 0:
                _alone(run, prompt, count)
        return
    for group in similar_lengths([count for _, count in parts]):
        if len(group) == 1:
            _alone(run, *parts[group[0]])
        else:
            _rows(run, [parts[i] for i in group], empty)


def _alone(run: StepRunner, prompt: PromptPrefill, count: int) -> None:
    ids = prompt.ids[prompt.tokens_done:prompt.tokens_done + count][None]  # [1, count]
    if prompt.cache is None:
        outputs = dict(run(PREFILL, {"ids": ids}))
    else:
        outputs = dict(run(CHUNK, {"ids": ids, "cache": prompt.cache}))
    prompt.take(outputs, count)


def _rows(run: StepRunner, parts: Sequence[Tuple[PromptPrefill, int]], empty: np.ndarray) -> None:
    """One ``advance`` call: a row a prompt, its cache so far right-aligned in ``N`` columns and
    its new tokens in ``T`` (see the module docstring)."""
    rows = _PartLayout(parts, empty)
    out = run(ADVANCE, {**rows.inputs, "cache": rows.cache})
    rows.took(np.asarray(out["logits"]), np.asarray(out["cache"]))


class _PartLayout:
    """Prompt parts as rows of one ``advance`` call (see the module docstring): ``inputs`` (tokens,
    positions, ``visible``) and ``cache`` ``[L, 2, R, KV, N, D]``, each row's cached columns last."""

    def __init__(self, parts: Sequence[Tuple[PromptPrefill, int]], empty: np.ndarray) -> None:
        self.parts = list(parts)
        caches = [prompt.cache for prompt, _ in parts]
        rows, self.width = len(parts), max(count for _, count in parts)
        self.before = [0 if c is None else int(c.shape[COLUMN_AXIS]) for c in caches]
        columns = self.columns = max(self.before)
        layout = list(empty.shape)
        layout[ROW_AXIS], layout[COLUMN_AXIS] = rows, columns
        self.cache = np.zeros(layout, dtype=empty.dtype)  # [L, 2, R, KV, N, D]
        for row, c in enumerate(caches):
            if c is not None:
                self.cache[:, :, row, :, columns - self.before[row]:] = c[:, :, 0]
        width = self.width
        tokens = np.zeros((rows, width), dtype=np.int64)
        positions = np.zeros((rows, width), dtype=np.int64)
        visible = np.zeros((rows, width, columns + width), dtype=np.float32)  # [R, T, N + T]
        for row, (prompt, count) in enumerate(parts):
            pad = width - count
            tokens[row, pad:] = prompt.ids[prompt.tokens_done:prompt.tokens_done + count]
            positions[row, pad:] = self.before[row] + np.arange(count)
            visible[row, :, columns - self.before[row]:columns] = 1.0  # its own cached columns
            visible[row, pad:, columns + pad:] = np.tril(np.ones((count, count), dtype=np.float32))
            visible[row, np.arange(pad), columns + np.arange(pad)] = 1.0  # padding sees itself: no empty row
        self.inputs: Dict[str, np.ndarray] = {"tokens": tokens, "positions": positions, "visible": visible}

    def took(self, logits: np.ndarray, grown: np.ndarray) -> None:
        """Each prompt's ``take`` of what the call gave: ``logits`` ``[R, V]`` and the cache grown
        by the new tokens ``[L, 2, R, KV, N + T, D]``."""
        columns, width = self.columns, self.width
        for row, ((prompt, count), before) in enumerate(zip(self.parts, self.before)):
            own = [grown[:, :, row:row + 1, :, columns - before:columns],  # its cached columns, then its new ones
                   grown[:, :, row:row + 1, :, columns + width - count:]]
            prompt.take({"logits": logits[row:row + 1], "cache": np.concatenate(own, axis=COLUMN_AXIS),
                         "position": np.asarray([before + count], dtype=np.int64)}, count)


def prefill_whole(run: StepRunner, prompts: Sequence[Mapping[str, np.ndarray]], together: bool,
                  before_call: Optional[Callable[[], None]] = None) -> List[Dict[str, np.ndarray]]:
    """Each whole prompt's ``prefill`` outputs (its inputs ``[1, S]``), in order. ``together``:
    the model's runner prefills several in one call (``PREFILL_ROWS``: ERNIE-Gen's ``infill``),
    so prompts of similar lengths (``similar_lengths``) run as rows of one call, each row's
    outputs those it gets alone (within float32 rounding, tested); else one call a prompt.
    ``before_call`` is called before each call (an exception it raises ends the prefills)."""
    outputs: List[Dict[str, np.ndarray]] = [{} for _ in prompts]
    lengths = [int(next(iter(prompt.values())).shape[1]) for prompt in prompts]
    groups = similar_lengths(lengths) if together else [[i] for i in range(len(prompts))]
    for group in groups:
        if before_call is not None:
            before_call()
        if len(group) == 1:
            outputs[group[0]] = dict(run(PREFILL, dict(prompts[group[0]])))
            continue
        width = max(lengths[i] for i in group)
        inputs = {name: np.concatenate([np.pad(np.asarray(prompts[i][name]), [(0, 0), (0, width - lengths[i])])
                                        for i in group]) for name in prompts[group[0]]}  # [R, S], each at its start
        out = run(PREFILL_ROWS, {**inputs, LENGTHS: np.asarray([lengths[i] for i in group], dtype=np.int64)})
        logits, cache, position = (np.asarray(out[k]) for k in ("logits", "cache", "position"))
        for row, i in enumerate(group):  # a row's cache: its last lengths[i] + 1 columns
            outputs[i] = {"logits": logits[row:row + 1], "position": position[row:row + 1],
                          "cache": np.ascontiguousarray(cache[:, :, row:row + 1, :, width - lengths[i]:])}
    return outputs


class PartRows:
    """A turn's prompt parts of similar lengths as the second group of an ``advance_pair`` call
    beside the decoding rows (``BatchDecoder.step``'s ``beside``): their in-place ``advance``
    inputs (``inputs``) and, given the call's outputs for them, each prompt's ``take`` (``took``)."""

    def __init__(self, parts: Sequence[Tuple[PromptPrefill, int]], empty: np.ndarray) -> None:
        self.layout = _PartLayout(parts, empty)
        self.inputs: Dict[str, np.ndarray] = {**self.layout.inputs,
                                              **in_place_inputs(self.layout.cache, self.layout.inputs["visible"])}

    def took(self, logits: np.ndarray, new: np.ndarray) -> None:
        """The call gave these rows ``logits`` ``[R, V]`` and their new keys and values
        ``[L, 2, R, KV, T, D]``."""
        self.layout.took(logits, grown_cache(self.layout.cache, new))


Part = TypeVar("Part")  # what a turn's part names: a PromptPrefill, or the request whose prompt it is


def fused_and_rest(parts: Sequence[Tuple[Part, int]]) -> Tuple[List[Tuple[Part, int]], List[Tuple[Part, int]]]:
    """A turn's parts (each with its count of tokens) split into those that go beside the decoding
    rows in one ``advance_pair`` call (the first group of ``similar_lengths``: the longest parts)
    and the rest (prefilled in calls of their own, ``prefill_together``)."""
    groups = similar_lengths([count for _, count in parts])
    if not groups:
        return [], list(parts)
    fused = set(groups[0])
    return [parts[i] for i in groups[0]], [part for i, part in enumerate(parts) if i not in fused]
