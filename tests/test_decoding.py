"""Decoding (``wenxin.models.decoding``) on a small causal transformer: the key/value-cached model
gives the same tokens as recomputing the whole sequence every step, for greedy, beam and seeded
sampling; beam search equals an exhaustive search where that is feasible; sampling draws from
exactly the top-k / top-p set."""
from __future__ import annotations

import itertools
from typing import Any, List, Tuple

import numpy as np
import paddle
import paddle.nn as nn
import pytest

from wenxin.common.errors import ConfigError
from wenxin.models.decoding import DecodeSettings, decode, length_penalty, log_softmax, sample_token

VOCAB, HIDDEN, EOS = 23, 32, 1


class TinyCausalLM(nn.Layer):
    """Embeddings, two causal self-attention blocks, a vocabulary projection."""

    def __init__(self, seed: int = 3) -> None:
        super().__init__()
        paddle.seed(seed)
        self.words = nn.Embedding(VOCAB, HIDDEN)
        self.positions = nn.Embedding(64, HIDDEN)
        self.blocks = nn.TransformerEncoder(nn.TransformerEncoderLayer(HIDDEN, 4, 64, dropout=0.0), 2)
        self.out = nn.Linear(HIDDEN, VOCAB)
        self.eval()

    def embed(self, ids: List[List[int]], start: int) -> paddle.Tensor:
        tokens = paddle.to_tensor(np.asarray(ids, dtype=np.int64))  # [B, T]
        positions = paddle.arange(start, start + tokens.shape[1], dtype="int64").unsqueeze(0)
        return self.words(tokens) + self.positions(positions)  # [B, T, H]

    @staticmethod
    def causal(length: int, past: int) -> paddle.Tensor:
        allowed = np.tril(np.ones((length, past + length), dtype=bool), k=past)  # [T, past + T]
        return paddle.to_tensor(np.where(allowed, 0.0, -1e9).astype("float32"))

    # uncached: the whole sequence every step
    def logits_of(self, ids: List[int]) -> np.ndarray:
        with paddle.no_grad():
            states = self.blocks(self.embed([ids], 0), self.causal(len(ids), 0))
            return self.out(states[:, -1]).numpy()


class Cached:
    """``IncrementalModel`` over the layer's key/value caches."""

    def __init__(self, model: TinyCausalLM) -> None:
        self.model = model

    def prefill(self, prompt: List[int]) -> Tuple[Any, Any]:
        with paddle.no_grad():
            x = self.model.embed([prompt], 0)
            cache = self.model.blocks.gen_cache(x)
            states, cache = self.model.blocks(x, self.model.causal(len(prompt), 0), cache)
            return self.model.out(states[:, -1]).numpy(), (cache, len(prompt))

    def extend(self, tokens: List[int], state: Any) -> Tuple[Any, Any]:
        cache, length = state
        with paddle.no_grad():
            x = self.model.embed([[t] for t in tokens], length)
            states, cache = self.model.blocks(x, None, cache)  # one new token attends to all before it
            return self.model.out(states[:, -1]).numpy(), (cache, length + 1)

    def select(self, state: Any, rows: List[int]) -> Any:
        cache, length = state
        index = paddle.to_tensor(np.asarray(rows, dtype=np.int64))
        return [type(c)(paddle.index_select(c.k, index), paddle.index_select(c.v, index)) for c in cache], length


class Uncached:
    """The same model, recomputing every sequence from its start (the cache holds the tokens)."""

    def __init__(self, model: TinyCausalLM) -> None:
        self.model = model

    def prefill(self, prompt: List[int]) -> Tuple[Any, Any]:
        return self.model.logits_of(prompt), [list(prompt)]

    def extend(self, tokens: List[int], seqs: Any) -> Tuple[Any, Any]:
        seqs = [seq + [t] for seq, t in zip(seqs, tokens)]
        return np.concatenate([self.model.logits_of(seq) for seq in seqs]), seqs

    def select(self, seqs: Any, rows: List[int]) -> Any:
        return [list(seqs[r]) for r in rows]


PROMPTS = [[5, 9, 2], [7], [3, 3, 3, 8, 12, 4], [20, 21]]


@pytest.fixture(scope="module")
def model():
    return TinyCausalLM()


def test_the_cache_gives_the_logits_of_recomputing(model):
    cached = Cached(model)
    logits, state = cached.prefill([5, 9, 2])
    seq = [5, 9, 2]
    for token in [4, 11, 6, 0]:
        np.testing.assert_allclose(logits, model.logits_of(seq), atol=1e-5, rtol=0)
        seq.append(token)
        logits, state = cached.extend([token], state)
    np.testing.assert_allclose(logits, model.logits_of(seq), atol=1e-5, rtol=0)


@pytest.mark.parametrize("settings", [
    DecodeSettings("greedy", max_new_tokens=12, eos_id=EOS),
    DecodeSettings("beam", max_new_tokens=10, eos_id=EOS, beam_size=4, length_penalty=1.0),
    DecodeSettings("beam", max_new_tokens=10, eos_id=EOS, beam_size=3, length_penalty=0.0),
    DecodeSettings("sample", max_new_tokens=12, eos_id=EOS, top_k=5, top_p=0.9, temperature=0.8, seed=11),
], ids=["greedy", "beam", "beam-no-penalty", "sample"])
def test_cached_and_uncached_decoding_give_the_same_tokens(model, settings):
    for prompt in PROMPTS:
        fast = decode(Cached(model), prompt, settings)
        assert fast == decode(Uncached(model), prompt, settings), prompt
        assert EOS not in fast and len(fast) <= settings.max_new_tokens


def test_sampling_is_reproducible_for_a_seed_and_varies_between_seeds(model):
    runs = {seed: decode(Cached(model), [5, 9, 2], DecodeSettings("sample", max_new_tokens=16, seed=seed))
            for seed in range(6)}
    assert runs[0] == decode(Cached(model), [5, 9, 2], DecodeSettings("sample", max_new_tokens=16, seed=0))
    assert len({tuple(tokens) for tokens in runs.values()}) > 1


def test_beam_search_finds_the_best_sequence_of_an_exhaustive_search(model):
    """With a beam as wide as the vocabulary and no early end, beam search over 2 new tokens
    must return the best of all VOCAB**2 continuations (and of the 1-token ones ending at EOS)."""
    prompt = [5, 9, 2]
    settings = DecodeSettings("beam", max_new_tokens=2, eos_id=EOS, beam_size=VOCAB, length_penalty=0.7)
    candidates = []
    first = log_softmax(model.logits_of(prompt))[0]
    for a, b in itertools.product(range(VOCAB), repeat=2):
        if a == EOS:
            continue
        second = log_softmax(model.logits_of(prompt + [a]))[0]
        if b == EOS:
            candidates.append(((first[a] + second[b]) / length_penalty(2, 0.7), [a]))
        else:
            candidates.append(((first[a] + second[b]) / length_penalty(2, 0.7), [a, b]))
    candidates += [(first[EOS] / length_penalty(1, 0.7), [])]
    best = max(candidates, key=lambda c: c[0])
    assert decode(Cached(model), prompt, settings) == best[1]


def test_top_k_and_top_p_draw_only_from_their_set():
    rng = np.random.default_rng(0)
    logits = np.log(np.asarray([0.05, 0.4, 0.3, 0.15, 0.1]))
    drawn = {sample_token(logits, DecodeSettings("sample", top_k=2), rng) for _ in range(300)}
    assert drawn == {1, 2}
    drawn = {sample_token(logits, DecodeSettings("sample", top_p=0.8), rng) for _ in range(300)}
    assert drawn == {1, 2, 3}  # 0.4 + 0.3 < 0.8 <= 0.4 + 0.3 + 0.15
    counts = np.bincount([sample_token(logits, DecodeSettings("sample"), rng) for _ in range(4000)], minlength=5)
    np.testing.assert_allclose(counts / 4000, [0.05, 0.4, 0.3, 0.15, 0.1], atol=0.03)


def test_bad_settings_are_one_error():
    with pytest.raises(ConfigError, match="strategy 'topk' is not beam, greedy or sample; top_p 1.5 must be in"):
        DecodeSettings("topk", top_p=1.5).check()
