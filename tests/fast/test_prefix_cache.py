"""``wenxin.models.prefix_cache.PrefixCache`` on stand-in caches whose column ``j`` holds the id of
token ``j`` (so a start's cache says which tokens it was made from): a prompt starts after the
longest kept start it shares, in whole blocks and never its last token, with a cache of its own;
ids that share a hash chain but not their tokens are not a match; the kept caches stay within the
budget, the least recently used going first."""
import numpy as np

from wenxin.models import prefix_cache
from wenxin.models.prefix_cache import PrefixCache

LAYERS, KV, DIM = 2, 1, 3


def cache_of(ids):
    """``[layers, 2, 1, KV, S, D]``, every value of column ``j`` the id of token ``j``."""
    ids = np.asarray(ids, dtype=np.float32)
    return np.broadcast_to(ids[None, None, None, None, :, None], (LAYERS, 2, 1, KV, len(ids), DIM)).copy()


def column_ids(cache):
    return cache[0, 0, 0, 0, :, 0].astype(np.int64).tolist()


def test_a_prompt_starts_after_the_longest_kept_start_it_shares_in_whole_blocks():
    prefixes = PrefixCache(budget_bytes=1 << 20, block=4)
    system = list(range(100, 110))  # 10 tokens: two whole blocks of 4
    first = system + [1, 2, 3]
    prefixes.keep(np.asarray(first), cache_of(first))
    assert prefixes.bytes == cache_of(first[:12]).nbytes  # its three whole blocks

    second = system + [7, 8, 9, 10, 11]
    prompt = prefixes.start(np.asarray(second))
    assert prompt.tokens_done == 8 and column_ids(prompt.cache) == second[:8]  # blocks of 4: 8 of the 10 shared
    assert prompt.remaining == len(second) - 8
    prompt.cache[...] = -1  # its own copy: the kept one is untouched
    assert column_ids(prefixes.start(np.asarray(second)).cache) == second[:8]

    again = prefixes.start(np.asarray(first))  # the same prompt: all but its last token at most
    assert again.tokens_done == 12 and again.remaining == 1
    short = prefixes.start(np.asarray(first[:12]))  # 12 tokens: its last block ends at its last token
    assert short.tokens_done == 8
    assert prefixes.start(np.asarray([5, 6, 7, 8, 9])).tokens_done == 0 and prefixes.hits == 4
    assert prefixes.tokens_saved == 8 + 8 + 12 + 8


def test_a_hash_chain_that_matches_other_tokens_is_not_a_match(monkeypatch):
    prefixes = PrefixCache(budget_bytes=1 << 20, block=4)
    monkeypatch.setattr(prefix_cache, "block_hashes", lambda ids, block: [1] * (len(ids) // block))  # all collide
    prefixes.keep(np.asarray([1, 2, 3, 4, 5]), cache_of([1, 2, 3, 4, 5]))
    assert prefixes.start(np.asarray([9, 9, 9, 9, 9])).tokens_done == 0
    assert prefixes.start(np.asarray([1, 2, 3, 4, 9])).tokens_done == 4


def test_the_kept_caches_stay_within_the_budget_the_least_recently_used_going_first():
    one = cache_of(range(8)).nbytes  # a prompt of 8 tokens: two blocks of 4
    prefixes = PrefixCache(budget_bytes=2 * one, block=4)
    prompts = [[p] * 8 + [0] for p in (1, 2, 3)]
    prefixes.keep(np.asarray(prompts[0]), cache_of(prompts[0]))
    prefixes.keep(np.asarray(prompts[1]), cache_of(prompts[1]))
    assert prefixes.start(np.asarray(prompts[0])).tokens_done == 8  # used: now the most recent
    prefixes.keep(np.asarray(prompts[2]), cache_of(prompts[2]))  # over the budget: the second goes
    assert prefixes.bytes == 2 * one
    assert [prefixes.start(np.asarray(p)).tokens_done for p in prompts] == [8, 0, 8]
    prefixes.keep(np.asarray(prompts[2][:6]), cache_of(prompts[2][:6]))  # covered by a kept start: nothing more
    assert prefixes.bytes == 2 * one
    larger = list(range(40))
    prefixes.keep(np.asarray(larger), cache_of(larger))  # larger than the whole budget: not kept, nothing dropped
    assert prefixes.bytes == 2 * one and prefixes.start(np.asarray(larger)).tokens_done == 0
    none = PrefixCache(budget_bytes=0, block=4)
    none.keep(np.asarray(prompts[0]), cache_of(prompts[0]))
    assert none.bytes == 0 and none.start(np.asarray(prompts[0])).tokens_done == 0


def test_a_dropped_prompts_start_is_still_served_by_another_that_shares_it():
    one = cache_of(range(8)).nbytes
    prefixes = PrefixCache(budget_bytes=2 * one, block=4)
    shared = [5, 5, 5, 5]
    a, b, c = shared + [1] * 4 + [0], shared + [2] * 4 + [0], [3] * 8 + [0]
    for prompt in (a, b):  # the start's hash points at b, the newest holder
        prefixes.keep(np.asarray(prompt), cache_of(prompt))
    prefixes.start(np.asarray(a))  # a used: b is the least recent
    prefixes.keep(np.asarray(c), cache_of(c))  # b goes; the shared start is a's
    start = prefixes.start(np.asarray(shared + [9, 9]))
    assert start.tokens_done == 4 and column_ids(start.cache) == shared


def test_the_index_of_starts_stays_that_of_the_kept_prompts_through_keeps_and_drops():
    """Each block chain's hash names exactly the kept prompts that hold it, whatever was kept,
    used and dropped (a drop updates only its own blocks' entries)."""
    rng = np.random.default_rng(0)
    one = cache_of(range(12)).nbytes
    prefixes = PrefixCache(budget_bytes=5 * one, block=4)
    starts = [[7] * 4, [7] * 4 + [8] * 4, [6] * 4]
    newly_kept = 0
    for _ in range(300):
        prompt = list(starts[rng.integers(3)]) + list(rng.integers(0, 3, size=rng.integers(1, 9))) + [0]
        if rng.random() < 0.5:
            before = set(prefixes._kept)
            prefixes.keep(np.asarray(prompt), cache_of(prompt))
            newly_kept += bool(set(prefixes._kept) - before)
        else:
            start = prefixes.start(np.asarray(prompt))
            if start.tokens_done:
                assert column_ids(start.cache) == prompt[:start.tokens_done]
        expected = {}
        for key, kept in prefixes._kept.items():
            for value in kept.hashes:
                expected.setdefault(value, set()).add(key)
        assert {value: set(holders) for value, holders in prefixes._by_hash.items()} == expected
        assert prefixes.bytes == sum(kept.cache.nbytes for kept in prefixes._kept.values()) <= 5 * one
    assert newly_kept > len(prefixes._kept) + 20  # many were dropped on the way
