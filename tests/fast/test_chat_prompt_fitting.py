"""Fitting a conversation into the context (``wenxin.data.chat_format``): encoded turn by turn,
newest first for a prompt and oldest first for training, it gives exactly the ids of the
quadratic search it replaced (encode everything, drop a turn, encode everything again) on random
conversations, with and without a system prompt, and its work grows with what fits rather than
with the conversation: 5,000 turns encode no more turns than 50 do."""
from __future__ import annotations

import os
import random

import pytest

pytest.importorskip("sentencepiece")

from conftest import REPO  # noqa: E402
from wenxin.data.chat_format import encode_conversation, encode_prompt, fit_prompt  # noqa: E402
from wenxin.data.ernie45_tokenizer import Ernie45Tokenizer  # noqa: E402

FOLDER = os.path.join(REPO, "tests", "fixtures", "ernie45", "tied")
WORDS = ["你好", "天气", "hello", "world", "模型", "训练", "a", "。", "？", "文心", "data", " "]


@pytest.fixture(scope="module")
def tokenizer():
    return Ernie45Tokenizer(FOLDER)


def text(rng: random.Random, longest: int) -> str:
    return "".join(rng.choice(WORDS) for _ in range(rng.randint(1, longest)))


def quadratic_prompt(tokenizer, system, turns, question, max_length, encoding="template"):
    """What the prompt's fitting did before: the whole prompt again for every turn dropped."""
    for first in range(len(turns) + 1):
        ids = encode_prompt(tokenizer, system, turns[first:], question, encoding)
        if len(ids) <= max_length:
            return ids, first
    return [], len(turns)


def quadratic_first_turns(tokenizer, system, turns, learn, max_length, encoding="template"):
    kept = len(turns)
    while kept:
        encoded = encode_conversation(tokenizer, system, turns[:kept], learn[:kept], encoding=encoding)
        if len(encoded.ids) <= max_length:
            return encoded
        kept -= 1
    return None


@pytest.mark.parametrize("seed", range(60))
def test_fitting_gives_the_ids_of_the_quadratic_search(tokenizer, seed):
    encoding = "erniekit" if seed % 4 == 3 else "template"  # ERNIEKit's piecewise encoding fits the same way
    rng = random.Random(seed)
    system = text(rng, 30) if seed % 3 else None
    turns = [(text(rng, 12), text(rng, 12)) for _ in range(rng.randint(0, 12))]
    question = text(rng, 10)
    for max_length in (8, 24, 60, 140, 400):
        ids, dropped = fit_prompt(tokenizer, system, turns, question, max_length, encoding)
        assert (ids, dropped) == quadratic_prompt(tokenizer, system, turns, question, max_length, encoding), max_length
        if turns:
            learn = [rng.random() < 0.7 for _ in turns]
            expected = quadratic_first_turns(tokenizer, system, turns, learn, max_length, encoding)
            encoded = encode_conversation(tokenizer, system, turns, learn, max_length=max_length, encoding=encoding)
            assert (encoded.ids, encoded.learn) == ((expected.ids, expected.learn) if expected else ([], []))


def test_a_long_conversation_costs_what_its_last_turns_cost(tokenizer):
    """5,000 one-character turns (the red team's 365 KB chat) encode about as many turns as fit."""
    counted = Ernie45Tokenizer(FOLDER)
    calls = []
    encode = counted.encode
    counted.encode = lambda value: calls.append(value) or encode(value)  # type: ignore[method-assign]
    for count in (50, 5000):
        turns = [("问", "答")] * count
        calls.clear()
        ids, dropped = fit_prompt(counted, "你是助手", turns, "最后一个问题", 256)
        assert 0 < len(ids) <= 256 and dropped > 0
        encodings = len(calls)
        if count == 50:
            few = encodings
    assert encodings <= few + 2, (few, encodings)
    calls.clear()
    encoded = encode_conversation(counted, None, [("问", "答")] * 5000, max_length=256)
    assert 0 < len(encoded.ids) <= 256 and len(calls) < 100
