"""The tests of tests/test_token_cache.py that run no Paddle operation (the fast tier)."""

import random

import pytest
from wenxin.data import vocab_counts
from wenxin.data.vocab import Vocab


def test_vocab_ranking_matches_the_reference_order():
    counts = {"b": 3, "a": 3, "c": 1, "d": 5, "[PAD]": 9, "e": 1}
    import collections
    vocab = Vocab.from_counts(collections.Counter(counts))
    reference = sorted((t for t in counts if t not in ("[PAD]", "[UNK]")), key=lambda t: (-counts[t], t))
    assert vocab.tokens == ["[PAD]", "[UNK]"] + reference


@pytest.mark.parametrize("parts", [
    [["a", "b", "c"], ["c", "d"], [], ["a"]],  # text tokens: joined for the trip between processes
    [["x\ny", "x"], ["x", "y"]],  # a token with a newline: travels as a list
    [[""], ["", "z"]],  # empty tokens
    [[1, 2], [2, "2"]],  # label values that are not strings
])
def test_packed_part_counts_sum_as_counters_do_after_a_trip_through_pickle(parts):
    import collections
    import pickle
    rng = random.Random(0)
    counters = [collections.Counter({token: rng.randint(1, 9) for token in tokens}) for tokens in parts]
    packed = [pickle.loads(pickle.dumps(vocab_counts.pack_counter(c))) for c in counters]
    assert [p.token_list() for p in packed] == [list(c) for c in counters]
    joinable = all(isinstance(t, str) and "\n" not in t for tokens in parts for t in tokens)
    assert all(isinstance(p.tokens, str) for p in packed) == joinable
    expected: collections.Counter = collections.Counter()
    for c in counters:
        expected.update(c)
    assert vocab_counts.summed(packed) == expected
    tokens, totals, positions = vocab_counts.merge_part_vocabs(packed)
    for c, where in zip(counters, positions):  # each part's local ids point at its tokens
        assert [tokens[i] for i in where] == list(c)
