"""Stop strings (``wenxin.inference.stop_strings``) through ``AnswerText``, which every decoding
path streams through: on random texts cut into random tokens, the answer ends before the first
stop string, the streamed texts add up to it, and no streamed prefix ever shows part of a stop
string."""
import random

import pytest

from wenxin.inference.formatters import ResultFormat
from wenxin.inference.generator import AnswerText
from wenxin.inference.stop_strings import StopStrings, parse_stop_strings


class TokenText(ResultFormat):
    """A stand-in result format: token ids are indexes into ``pieces``, whose texts it joins."""

    def __init__(self, pieces):
        super().__init__([], [])
        self.pieces = pieces
        self.decoded = 0

    def results(self, outputs, batch, rows):
        ids = outputs["generated"][0].tolist()
        return [{"text": "".join(self.pieces[i] for i in ids), "tokens": [self.pieces[i] for i in ids]}]


def run(pieces, stop):
    """The pieces an answer streams as the tokens come, until a stop string ends it."""
    model = TokenText(pieces)
    answer = AnswerText(model, ["row"], stop)
    steps = []
    for i in range(len(pieces)):
        model.decoded += 1
        steps.append(answer.add(i))
        if steps[-1].stopped:
            return steps, model
    last = answer.finish()
    return steps + ([last] if last is not None else []), model


@pytest.mark.parametrize("seed", range(300))
def test_random_texts_stop_at_the_first_stop_string_as_tokens_come(seed):
    rng = random.Random(seed)
    alphabet = "ab文心。 "
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
    stops = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 10)))) if len(text) > 1 else []
    pieces = [text[i:j] for i, j in zip([0] + cuts, cuts + [len(text)])] if text else []
    steps, model = run(pieces, stops)
    # the answer ends before the first stop string in the text as the tokens come: after the first
    # token with which the text holds one, at the earliest of those it holds then
    decoded, expected, stopped = len(pieces), text, False
    for k in range(1, len(pieces) + 1):
        prefix = "".join(pieces[:k])
        found = [i for i in (prefix.find(s) for s in stops) if i >= 0]
        if found:
            decoded, expected, stopped = k, prefix[:min(found)], True
            break
    final = steps[-1].result["text"] if steps else ""
    assert final == expected and "".join(s.text for s in steps) == expected
    shown = ""
    for step in steps:
        shown += step.text
        assert expected.startswith(shown)  # nothing shown is cut later: not even part of a stop string
    assert bool(steps and steps[-1].stopped) == stopped and model.decoded == decoded
    assert all(step.new_token for step in steps[:-1])


def test_held_text_comes_out_when_it_does_not_become_a_stop_string():
    steps, _ = run(["你好", "，再", "见"], ["再见吧"])
    assert [(s.text, s.new_token) for s in steps] == [("你好", True), ("，", True), ("", True), ("再见", False)]
    assert steps[-1].result["text"] == "你好，再见" and not steps[-1].stopped


def test_a_stop_string_across_tokens_ends_the_decoding_there():
    steps, model = run(["Thought: x", "\nObs", "ervation: y", " more", " text"], ["\nObservation:"])
    assert "".join(s.text for s in steps) == "Thought: x" and steps[-1].stopped and model.decoded == 3


def test_without_stop_strings_every_token_shows_its_text():
    steps, _ = run(["a", "b", "c"], ())
    assert [s.text for s in steps] == ["a", "b", "c"] and not any(s.stopped for s in steps)


def test_stop_strings_are_checked():
    assert parse_stop_strings(None) == () and parse_stop_strings("x") == ("x",)
    assert parse_stop_strings(["a", "bc"]) == ("a", "bc")
    for bad, message in ((5, "a string or a list"), (["a", 1], "a string or a list"), (["a"] * 5, "at most 4"),
                         ([""], "1 to 256 characters"), (["x" * 257], "1 to 256 characters")):
        with pytest.raises(ValueError, match=message):
            parse_stop_strings(bad)
    stops = StopStrings(["abc", "bd"])
    assert stops.safe_length("xxab") == 2 and stops.safe_length("xxb") == 2 and stops.safe_length("xxc") == 3
    assert stops.find("xabdy", 0) == 2 and stops.find("xxabc", 3) == 2 and stops.find("xx", 0) is None
