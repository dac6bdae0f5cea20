"""The key/value caches of prompts' starts, kept for later prompts that begin the same way:
``PrefixCache``.

Chat prompts share their start: the chat template and a system prompt, and in a conversation each
turn's prompt is the whole conversation so far. A prompt whose prefill is done is kept (its cache
``[layers, 2, 1, KV, S, D]`` and its ids); a later prompt starts its prefill after the longest
kept start it shares (``start``: a ``batch_prefill.PromptPrefill`` with those tokens already done
and their cache), so only the rest is prefilled. A kept prompt's first ``k`` tokens have the
keys and values a prefill of those ``k`` alone gives (attention is causal), so the logits after a
shared start are those of a whole prefill within float32 rounding (tested).

Starts are matched in blocks of ``block`` tokens (a chain of hashes, one a block, as vLLM's
automatic prefix caching), then checked token by token; at least one token of a prompt is always
prefilled (its logits choose the first answer token). The kept caches hold at most
``budget_bytes``; the least recently used go first.
"""
from __future__ import annotations

import collections
from typing import Dict, List, Optional, Tuple

import numpy as np

from wenxin.models.advance_step import COLUMN_AXIS
from wenxin.models.batch_prefill import PromptPrefill

BLOCK = 16  # tokens a block: starts are shared in whole blocks


def block_hashes(ids: np.ndarray, block: int) -> List[int]:
    """One hash a whole block of ``ids``, each of the block and all before it (a chain)."""
    hashes, previous = [], 0
    for end in range(block, len(ids) + 1, block):
        previous = hash((previous, ids[end - block:end].tobytes()))
        hashes.append(previous)
    return hashes


class _Kept:
    __slots__ = ("ids", "cache", "hashes")

    def __init__(self, ids: np.ndarray, cache: np.ndarray, hashes: List[int]) -> None:
        self.ids, self.cache, self.hashes = ids, cache, hashes


class PrefixCache:
    """Kept prompt caches (see the module docstring). ``hits`` and ``tokens_saved`` count what
    ``start`` found; ``bytes`` is what is kept."""

    def __init__(self, budget_bytes: int, block: int = BLOCK) -> None:
        self.budget_bytes, self.block = int(budget_bytes), int(block)
        self._kept: "collections.OrderedDict[int, _Kept]" = collections.OrderedDict()  # by its last hash, oldest first
        # a block chain's hash -> the kept prompts holding it (an ordered set: the newest serves)
        self._by_hash: Dict[int, Dict[int, None]] = {}
        self.bytes = 0
        self.hits = 0
        self.tokens_saved = 0

    def start(self, ids: np.ndarray) -> PromptPrefill:
        """A prefill of ``ids`` starting after the longest kept start it shares (whole blocks, at
        most all but its last token)."""
        prompt = PromptPrefill(ids)
        found = self._longest(prompt.ids)
        if found is not None:
            kept, length = found
            prompt.tokens_done = length
            prompt.cache = np.ascontiguousarray(kept.cache[:, :, :, :, :length])  # its own: the prefill grows it
            self.hits += 1
            self.tokens_saved += length
        return prompt

    def keep(self, ids: np.ndarray, cache: np.ndarray) -> None:
        """Keep a prefilled prompt's cache ``[layers, 2, 1, KV, S, D]`` (its whole blocks), unless
        kept starts already cover them or it is larger than the whole budget."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        hashes = block_hashes(ids, self.block)
        if not hashes or self.budget_bytes <= 0:
            return
        holders = self._by_hash.get(hashes[-1])
        if holders:  # a kept prompt starts with all of its blocks already
            self._kept.move_to_end(next(reversed(holders)))
            return
        length = len(hashes) * self.block
        own = np.ascontiguousarray(cache[:, :, :, :, :length])
        if own.shape[COLUMN_AXIS] != length or own.nbytes > self.budget_bytes:
            return
        while self._kept and self.bytes + own.nbytes > self.budget_bytes:
            self._drop(next(iter(self._kept)))
        kept = _Kept(ids[:length].copy(), own, hashes)
        self._kept[hashes[-1]] = kept
        self.bytes += own.nbytes
        for value in hashes:
            self._by_hash.setdefault(value, {})[hashes[-1]] = None

    def _longest(self, ids: np.ndarray) -> Optional[Tuple[_Kept, int]]:
        hashes = block_hashes(ids[:len(ids) - 1], self.block)  # its last token is always prefilled
        for count in range(len(hashes), 0, -1):
            holders = self._by_hash.get(hashes[count - 1])
            if not holders:
                continue
            holder = next(reversed(holders))  # the newest prompt holding this start serves it
            kept = self._kept[holder]
            length = count * self.block
            if np.array_equal(kept.ids[:length], ids[:length]):  # not a hash collision
                self._kept.move_to_end(holder)
                return kept, length
        return None

    def _drop(self, key: int) -> None:
        """Forget a kept prompt: a start it shares with other kept prompts stays served by them.
        The work is its own blocks' (each hash's holders are an ordered set), not all kept ones'."""
        kept = self._kept.pop(key)
        self.bytes -= kept.cache.nbytes
        for value in kept.hashes:
            holders = self._by_hash[value]
            del holders[key]
            if not holders:
                del self._by_hash[value]
