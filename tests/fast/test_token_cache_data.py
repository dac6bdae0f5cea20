"""The tests of tests/test_token_cache.py that run no Paddle operation (the fast tier)."""

import random

import pytest
from wenxin.data import part_pool, vocab_counts
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


def _die_on_the_third(task):
    """A worker process that is killed while it works on task 3."""
    import os
    import signal
    if task == 3 and os.getpid() != part_pool.context():
        os.kill(os.getpid(), signal.SIGKILL)
    return task * 10


def test_a_worker_killed_mid_part_never_leaves_the_build_waiting(hang_guard):
    """The pool once waited forever for the result of a task whose worker died (seen as a hung
    CI run); now the parts without a result run in this process, after a warning."""
    import logging
    import os
    from conftest import wenxin_log
    hang_guard(120)
    with wenxin_log(logging.WARNING) as messages:
        results = part_pool.run_parts(_die_on_the_third, list(range(8)), processes=2, shared=os.getpid(),
                                      progress="test parts")
    assert results == [t * 10 for t in range(8)]
    assert any(m.startswith("test parts: a worker process died (killed or crashed)") for m in messages), messages
