"""An answer's text decoded as its ids come (``wenxin.data.incremental_text``), against decoding
all the ids every time (what every stream did before) on ERNIE 4.5's tokenizer: random answers of
ordinary pieces, spaces, whole and broken UTF-8 byte pieces, special tokens and ids outside the
vocabulary; and a chat answer's streamed result (``AnswerText`` over ``ChatFormat``)."""
import os
import random
import re

import pytest

pytest.importorskip("sentencepiece")

from wenxin.data.ernie45_tokenizer import Ernie45Tokenizer  # noqa: E402
from wenxin.data.incremental_text import IncrementalText  # noqa: E402
from wenxin.inference.formatters import ChatFormat, GrowingChatAnswer, RebuiltResult  # noqa: E402
from wenxin.inference.generator import AnswerText  # noqa: E402

FOLDER = os.path.join(os.path.dirname(__file__), "fixtures", "ernie45", "tied")


@pytest.fixture(scope="module")
def tokenizer():
    return Ernie45Tokenizer(FOLDER)


def text_of(tokenizer):
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)


class ChatField:
    """What ``ChatFormat`` reads of its field: the tokenizer."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer


def random_answer(tokenizer, rng, length):
    """Ids as a model might choose them, and some it should not: byte pieces of whole characters,
    lone and misordered bytes, specials, ids past the vocabulary."""
    size = tokenizer.processor.GetPieceSize()
    byte_id = {int(tokenizer.processor.IdToPiece(i)[3:5], 16): i for i in range(size)
               if re.fullmatch(r"<0x[0-9A-F]{2}>", tokenizer.processor.IdToPiece(i))}
    ordinary = [i for i in range(size) if i not in byte_id.values()]
    specials = sorted(set(tokenizer.special_ids.values()))
    ids = []
    while len(ids) < length:
        kind = rng.random()
        if kind < 0.55:
            ids.append(rng.choice(ordinary))
        elif kind < 0.75:  # a whole character as bytes (2, 3 or 4 of them)
            ids.extend(byte_id[b] for b in rng.choice("éЖ中文😀 \n").encode("utf-8"))
        elif kind < 0.85:  # a byte on its own: a lead without its followers, or a follower alone
            ids.append(byte_id[rng.choice([0xE4, 0xB8, 0x80, 0xF0, 0xC3, 0x41, 0xFF])])
        elif kind < 0.95:
            ids.append(rng.choice(specials))
        else:
            ids.append(rng.choice([size, size + 7, 10 ** 6]))
    return ids[:length]


@pytest.mark.parametrize("seed", range(200))
def test_the_text_equals_decoding_all_the_ids_after_every_id(tokenizer, seed):
    rng = random.Random(seed)
    ids = random_answer(tokenizer, rng, rng.randint(1, 60))
    text = IncrementalText(text_of(tokenizer), tokenizer.incomplete_tail)
    for k, token_id in enumerate(ids, 1):
        assert text.add(token_id) == tokenizer.decode_complete(ids[:k]), (ids[:k], k)


def test_english_and_chinese_text_round_trips_id_by_id(tokenizer):
    sample = "ERNIE 4.5 learning:  two  spaces, 文心一言的机器学习 and 😀 emoji.\nA new line."
    ids = tokenizer.encode(sample)
    text = IncrementalText(text_of(tokenizer), tokenizer.incomplete_tail)
    for token_id in ids:
        text.add(token_id)
    assert text.text == tokenizer.decode_complete(ids)
    assert text.text.replace(" ", "") == sample.replace(" ", "")  # the fixture's vocabulary keeps the words


def test_a_window_stays_short_when_text_comes(tokenizer):
    """Each id decodes a few ids, not the answer so far (the point of the module), also where ids
    bring no text (special tokens left out)."""
    decoded = []

    def decode(ids):
        decoded.append(len(ids))
        return tokenizer.decode(ids, skip_special_tokens=True)

    ids = tokenizer.encode("machine learning " * 40) + [tokenizer.special_ids["cls_token"]] * 50
    text = IncrementalText(decode, tokenizer.incomplete_tail)
    for token_id in ids:
        text.add(token_id)
    assert text.text == tokenizer.decode_complete(ids)
    assert len(ids) > 150 and max(decoded) <= 3


@pytest.mark.parametrize("seed", range(40))
def test_a_chat_answer_streams_the_same_result_as_rebuilding_it(tokenizer, seed):
    rng = random.Random(1000 + seed)
    chat = ChatFormat([], [ChatField(tokenizer)])
    assert isinstance(chat.growing(["row"]), GrowingChatAnswer)
    ids = random_answer(tokenizer, rng, rng.randint(1, 50))
    growing, rebuilt = AnswerText(chat, ["row"]), AnswerText(chat, ["row"])
    rebuilt.growing = RebuiltResult(chat, ["row"])
    for token_id in ids:
        piece, expected = growing.add(token_id), rebuilt.add(token_id)
        assert piece == expected
    assert growing.result == chat.results({"generated": [ids]}, {}, [["row"]])[0]


@pytest.mark.parametrize("seed", range(30))
def test_a_decoding_that_rewrites_earlier_text_is_decoded_whole_there(seed):
    """A tokenizer that is not concatenative (here "a" then "X" reads "A"): where the window's
    text does not begin with its head's, the whole ids are decoded, so the text is still right."""
    pieces = ["a", "X", "b", " "]

    def decode(ids):
        return "".join(pieces[i] for i in ids).replace("aX", "A")

    rng = random.Random(seed)
    ids = [rng.randrange(len(pieces)) for _ in range(rng.randint(1, 40))]
    text = IncrementalText(decode, lambda ids: 0)
    for k, token_id in enumerate(ids, 1):
        assert text.add(token_id) == decode(ids[:k]), ids[:k]
