"""The decoding batch's cache kept in place (``wenxin.models.kv_slots``, issue 69 point 2): on a
NumPy model with an in-place ``advance``, every prompt's logits in a batch that rows join and leave
equal its logits alone (every strategy); a step feeds each layer's cache as a view of the one array
and writes only the new tokens (the bytes counted); rows that stay are never copied, moved ones
alone are; growing costs a few copies of the cache over a whole answer, not one a step; the array
narrows when its longest row leaves."""
from __future__ import annotations

import numpy as np
import pytest

from decoding_helpers import compare, together
from decoding_helpers import alone as decoded_alone
from numpy_decoder import HEAD, HEADS, LAYERS, NumpyDecoder
from test_batch_decoding import PROMPTS, STRATEGIES
from wenxin.models.advance_step import AdvanceRunner
from wenxin.models.batch_decoding import BatchDecoder
from wenxin.models.decoding import DecodeSettings, new_search
from wenxin.models.kv_slots import BLOCK_GROWTH, COLUMN_STEP, KVSlots


def in_place_model() -> tuple:
    model = NumpyDecoder(in_place=True)
    return model, AdvanceRunner(model, model.empty(), in_place=True)


def random_cache(rows: int, length: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(LAYERS, 2, rows, HEADS, length, HEAD)).astype(np.float32)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_prompts_joining_and_leaving_the_in_place_batch_get_their_logits_alone(strategy):
    model, run = in_place_model()
    reference_model = NumpyDecoder()  # the same weights, the padded cache of older exports
    settings = STRATEGIES[strategy]
    references = [decoded_alone(reference_model, True, {"ids": np.asarray([p])}, settings) for p in PROMPTS]
    lone = [decoded_alone(run, True, {"ids": np.asarray([p])}, settings, model.empty()) for p in PROMPTS]
    assert [s.tokens for s in lone] == [r.tokens for r in references]
    searches = together(run, True, [{"ids": np.asarray([p])} for p in PROMPTS], settings, in_place=model.empty())
    assert len(searches[3].seen) < len(references[3].seen)  # it left part way
    compare(searches, references)
    assert model.calls["extend"] == 0 and model.calls["advance"] > 0  # every step ran advance in place


def test_a_step_feeds_the_cache_where_it_lies_and_writes_only_the_new_tokens():
    model, run = in_place_model()
    settings = DecodeSettings("greedy", max_new_tokens=40, eos_id=None)
    decoder = BatchDecoder(run, True, model.empty())
    for index, prompt in enumerate(PROMPTS):
        decoder.add(index, {"ids": np.asarray([prompt])}, new_search(settings))
    slots = decoder.cohorts[0].slots  # type: ignore[union-attr]
    for _ in range(30):
        before, columns = slots.bytes_copied, slots.columns
        decoder.step()
        for name in ("keys_0", "values_0", f"keys_{LAYERS - 1}", f"values_{LAYERS - 1}"):
            assert np.shares_memory(model.fed[name], slots.store)  # a view: nothing copied to feed it
        if slots.columns == columns:  # no growth this step: the new tokens' keys and values alone
            assert slots.bytes_copied - before == len(PROMPTS) * slots.token_bytes
    assert decoder.rows == len(PROMPTS)


def test_rows_that_stay_are_not_copied_and_a_leaving_row_costs_only_the_rows_moved():
    slots = KVSlots(NumpyDecoder.empty())
    caches = [random_cache(1, length, seed) for seed, length in enumerate([5, 9, 3, 7])]
    for cache in caches:
        slots.append(cache)
    written = slots.bytes_copied
    slots.keep([0, 1, 3])  # row 2 leaves: row 3 moves into its slot
    assert slots.bytes_copied - written == 7 * slots.token_bytes  # the moved row's 7 tokens alone
    slots.keep([0, 1, 2])  # nobody moves
    assert slots.bytes_copied - written == 7 * slots.token_bytes
    kept = slots.row_caches([0, 1, 2])
    for row, cache in enumerate([caches[0], caches[1], caches[3]]):
        length = cache.shape[4]
        np.testing.assert_array_equal(kept[:, :, row, :, :length], cache[:, :, 0])
    slots.keep([1, 1, 0])  # a beam copied: rows 0 and 1 get row 1, row 2 gets row 0
    np.testing.assert_array_equal(slots.row_caches([0])[:, :, 0, :, :9], caches[1][:, :, 0])
    np.testing.assert_array_equal(slots.row_caches([2])[:, :, 0, :, :5], caches[0][:, :, 0])
    assert slots.lengths.tolist() == [9, 9, 5]


def test_rows_shifting_down_in_order_are_each_copied_with_their_own_columns():
    slots = KVSlots(NumpyDecoder.empty())
    caches = [random_cache(1, length, seed) for seed, length in enumerate([5, 9, 3, 7, 4])]
    for cache in caches:
        slots.append(cache)
    written = slots.bytes_copied
    slots.keep([0, 2, 3, 4])  # row 1 leaves: rows 2, 3 and 4 each move down a slot
    assert slots.bytes_copied - written == (3 + 7 + 4) * slots.token_bytes
    for row, cache in enumerate([caches[0], caches[2], caches[3], caches[4]]):
        np.testing.assert_array_equal(slots.row_caches([row])[:, :, 0, :, :cache.shape[4]], cache[:, :, 0])


def test_a_row_leaving_the_decoding_batch_moves_only_the_last_row_into_its_slot():
    """``BatchDecoder`` reorders its one-row members so that the fewest rows move: where a row in
    the middle leaves, the last row takes its slot (every row after it moved before), and every
    prompt still gets its tokens alone."""
    model, run = in_place_model()
    settings = DecodeSettings("greedy", max_new_tokens=12, eos_id=None)
    lone = [decoded_alone(run, True, {"ids": np.asarray([p])}, settings, model.empty()).tokens for p in PROMPTS]
    decoder = BatchDecoder(run, True, model.empty())
    searches = {}
    for index, prompt in enumerate(PROMPTS):
        searches[index] = new_search(settings)
        decoder.add(index, {"ids": np.asarray([prompt])}, searches[index])
    decoder.step()
    slots = decoder.cohorts[0].slots  # type: ignore[union-attr]
    last = int(slots.lengths[-1])
    written = slots.bytes_copied
    assert decoder.remove(1)
    assert slots.bytes_copied - written == last * slots.token_bytes  # the last row alone
    assert decoder.keys == [0, len(PROMPTS) - 1, 2, 3]
    while decoder.rows:
        decoder.step()
    assert [searches[i].tokens for i in (0, 2, 3, 4)] == [lone[i] for i in (0, 2, 3, 4)]


@pytest.mark.parametrize("rows, expected", [
    ([0, 1, 3, 4, 5], [0, 1, 5, 3, 4]),  # row 2 left: the last row takes its slot, 3 and 4 stay
    ([2, 3, 4], [3, 4, 2]),  # rows 0 and 1 left: row 2 stays, 3 and 4 fill slots 0 and 1 in order
    ([5, 0, 9], [0, 5, 9]),  # row 0 stays; 5 and 9, past the end, fill the gaps
    ([0, 1, 2], [0, 1, 2]),  # nobody left
])
def test_fewest_moves_keeps_rows_in_their_slots_and_fills_gaps_from_the_end(rows, expected):
    from wenxin.models.batch_decoding import _Member, fewest_moves
    members = [_Member(row, None, 1) for row in rows]  # type: ignore[arg-type]
    moved_rows, moved_members, tokens = fewest_moves(rows, members, [10 * row for row in rows])
    assert moved_rows == expected
    assert [m.key for m in moved_members] == expected and tokens == [10 * row for row in expected]


def test_fewest_moves_leaves_a_beam_searchs_rows_as_they_are():
    from wenxin.models.batch_decoding import _Member, fewest_moves
    members = [_Member("a", None, 1), _Member("b", None, 3)]  # type: ignore[arg-type]
    assert fewest_moves([4, 1, 1, 2], members, [7, 8, 9, 6]) == ([4, 1, 1, 2], members, [7, 8, 9, 6])


def test_growing_over_a_long_answer_copies_the_cache_a_few_times_not_once_a_step():
    slots = KVSlots(NumpyDecoder.empty())
    slots.append(random_cache(4, 10))
    steps = 600
    rng = np.random.default_rng(1)
    for _ in range(steps):
        slots.inputs(1)
        slots.write(rng.normal(size=(LAYERS, 2, 4, HEADS, 1, HEAD)).astype(np.float32))
    final = 4 * (10 + steps) * slots.token_bytes  # the cache's bytes at the end
    written = (4 * 10 + 4 * steps) * slots.token_bytes  # every token written once
    # a growth moves the live rows (one every COLUMN_STEP tokens at most, fewer as rows grow longer):
    # at most steps / COLUMN_STEP times the final cache in all; copying the whole cache at every step
    # would have been about steps / 2 times it
    assert written < slots.bytes_copied <= written + steps // COLUMN_STEP * final
    assert 10 + steps <= slots.columns <= 10 + steps + 2 * COLUMN_STEP and slots.columns % COLUMN_STEP == 0


def test_the_array_narrows_when_its_longest_row_leaves():
    slots = KVSlots(NumpyDecoder.empty())
    slots.append(random_cache(1, 900))
    slots.append(random_cache(1, 4, seed=1))
    wide = slots.columns
    assert wide >= 900
    slots.keep([1])
    assert slots.columns == COLUMN_STEP and slots.lengths.tolist() == [4]
    np.testing.assert_array_equal(slots.row_caches([0]), random_cache(1, 4, seed=1))


def test_visible_hides_each_rows_columns_past_its_own_and_the_later_new_tokens():
    slots = KVSlots(NumpyDecoder.empty())
    slots.append(random_cache(1, 3))
    slots.append(random_cache(1, 1))
    feed = slots.inputs(2)
    columns = slots.columns
    visible = feed["visible"]  # [R, T, C + T]
    assert visible.shape == (2, 2, columns + 2)
    assert visible[0, :, :columns].sum(axis=1).tolist() == [3, 3] and visible[1, :, :columns].sum(axis=1).tolist() == [1, 1]
    assert visible[:, :, columns:].tolist() == [[[1, 0], [1, 1]]] * 2
    assert feed["keys_0"].shape == (2, HEADS, columns, HEAD) and feed["keys_0"].flags["C_CONTIGUOUS"]


def test_rows_keep_their_tokens_while_the_array_is_laid_out_again_in_place():
    """Rows join, grow and leave at random (slots and columns growing and shrinking, together and
    apart): every row's tokens stay its own, checked against each row's cache kept apart."""
    rng = np.random.default_rng(3)
    slots = KVSlots(NumpyDecoder.empty())
    kept: list = []  # each row's cache [layers, 2, KV, length, D], kept apart
    laid_in_place = made = 0
    for _ in range(120):
        memory, columns, capacity = slots.memory, slots.columns, slots.store.shape[2]
        action = rng.choice(["join", "grow", "leave"], p=[0.3, 0.5, 0.2])
        if action == "join" or not kept:
            count, length = int(rng.integers(1, 4)), int(rng.integers(1, 150))
            cache = rng.normal(size=(LAYERS, 2, count, HEADS, length, HEAD)).astype(np.float32)
            slots.append(cache)
            kept += [cache[:, :, row] for row in range(count)]
        elif action == "grow":
            count = int(rng.integers(1, 40))
            new = rng.normal(size=(LAYERS, 2, len(kept), HEADS, count, HEAD)).astype(np.float32)
            slots.inputs(count)
            slots.write(new)
            kept = [np.concatenate([cache, new[:, :, row]], axis=3) for row, cache in enumerate(kept)]
        else:
            stay = sorted(rng.choice(len(kept), int(rng.integers(0, len(kept))), replace=False).tolist())
            slots.keep(stay)
            kept = [kept[row] for row in stay]
        assert slots.lengths.tolist() == [cache.shape[3] for cache in kept]
        for row, cache in enumerate(kept):
            np.testing.assert_array_equal(slots.row_caches([row])[:, :, 0, :, :cache.shape[3]], cache)
        assert np.shares_memory(slots.store, slots.memory) and slots.store.base is not None
        if (slots.columns, slots.store.shape[2]) != (columns, capacity):
            laid_in_place += slots.memory is memory
            made += slots.memory is not memory
    assert laid_in_place > 10 and made > 2  # both ways were taken


def test_the_array_is_laid_out_in_its_own_memory_until_it_outgrows_it_or_spans_a_quarter():
    slots = KVSlots(NumpyDecoder.empty())
    slots.append(random_cache(4, 100))
    memory = slots.memory
    assert memory.size == BLOCK_GROWTH * slots.store.size
    slots.keep([0, 1])  # fewer rows: the same columns
    slots.append(random_cache(2, 20, seed=1))  # into the freed slots
    assert slots.memory is memory
    grown_in_place = 0
    while slots._size(slots.store.shape[2], slots.columns + COLUMN_STEP) <= memory.size:
        before = slots.columns
        slots.inputs(before - int(slots.lengths.max()) + 1)  # one token past the room there is
        assert before < slots.columns and slots.memory is memory
        grown_in_place += 1
    assert grown_in_place >= 3
    slots.inputs(slots.columns)  # far past it: a new, larger block
    assert slots.memory is not memory and slots.memory.size == BLOCK_GROWTH * slots.store.size
    grown = slots.memory
    slots.keep([2, 3])  # the long rows left: 20 tokens in a block made for hundreds
    assert slots.columns == COLUMN_STEP and slots.memory is not grown
    assert slots.memory.size < grown.size / 4
    np.testing.assert_array_equal(slots.row_caches([0])[:, :, 0, :, :20], random_cache(2, 20, seed=1)[:, :, 0])


def test_a_block_is_made_just_the_arrays_size_where_the_system_will_not_promise_twice(monkeypatch):
    from wenxin.models import kv_slots
    zeros = np.zeros
    refused = []

    def promised(count, dtype=float):  # a system with overcommit off: the first block asked for is refused
        if isinstance(count, int) and count > 1000 and not refused:
            refused.append(count)
            raise MemoryError(f"cannot allocate {count}")
        return zeros(count, dtype=dtype)

    slots = KVSlots(NumpyDecoder.empty())
    monkeypatch.setattr(kv_slots.np, "zeros", promised)  # (numpy's own, while the cache grows)
    slots.append(random_cache(2, 40))
    assert refused == [BLOCK_GROWTH * slots.store.size] and slots.memory.size == slots.store.size
    np.testing.assert_array_equal(slots.row_caches([0, 1]), random_cache(2, 40))
