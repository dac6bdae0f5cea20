"""The generation scheduler's decisions (``wenxin.inference.turn_plan``), without a model, and
its typed events (``wenxin.inference.generation_events``)."""
import dataclasses
import json

import pytest

from wenxin.inference.generation_events import DoneEvent, ErrorEvent, FinishReason, TokenEvent
from wenxin.inference.turn_plan import (MIN_TURN_PREFILL, PrefillPart, Turn, admissible, prefill_parts,
                                        stop_reason, stopped, turn_prefill_tokens)


@dataclasses.dataclass
class Request:
    key: int = 0
    rows: int = 1
    horizon: int = 100
    deadline: float = 10.0
    cancelled: bool = False

    def is_cancelled(self) -> bool:
        return self.cancelled


def test_a_request_stops_when_its_client_left_or_its_time_is_up_and_cancelled_comes_first():
    assert stop_reason(False, deadline=10.0, now=9.0) is None
    assert stop_reason(False, deadline=10.0, now=10.5) is FinishReason.TIME_LIMIT
    assert stop_reason(True, deadline=10.0, now=10.5) is FinishReason.CANCELLED
    requests = [Request(1), Request(2, cancelled=True), Request(3, deadline=1.0), Request(4)]
    assert stopped(requests, now=5.0) == [(2, FinishReason.CANCELLED), (3, FinishReason.TIME_LIMIT)]


def test_admission_counts_rows_and_rows_times_the_longest_horizon_and_never_overtakes():
    running = [Request(rows=2, horizon=100)]
    # 2 + 1 + 1 rows x 100 = 400 tokens fit 400; a third does not
    assert admissible([Request(), Request(), Request()], running, max_rows=8, max_cached_tokens=400) == 2
    # a longer request raises every row's horizon: 3 rows x 200 = 600 > 500
    assert admissible([Request(horizon=200)], running, max_rows=8, max_cached_tokens=500) == 0
    # rows bound: a beam search of 4 rows does not fit 2 + 4 > 5, and the small one behind it waits too
    assert admissible([Request(rows=4), Request()], running, max_rows=5, max_cached_tokens=10**6) == 0
    assert admissible([], running, max_rows=5, max_cached_tokens=10**6) == 0
    assert admissible([Request()], [], max_rows=1, max_cached_tokens=100) == 1


def test_a_turn_prefills_prefill_tokens_or_by_the_rows_rule_as_many_as_rows_decode():
    assert turn_prefill_tokens(0, 512, "rows") == 512  # nothing decodes: nobody waits
    assert turn_prefill_tokens(1, 512, "rows") == MIN_TURN_PREFILL == 16
    assert turn_prefill_tokens(40, 512, "rows") == 40
    assert turn_prefill_tokens(40, 8, "rows") == turn_prefill_tokens(0, 8, "rows") == 8  # --prefill_tokens bounds it
    assert turn_prefill_tokens(40, 512) == turn_prefill_tokens(40, 512, "all") == 512  # the default


def test_a_small_newcomer_beside_a_long_prompt_is_prefilled_whole_in_its_first_turn():
    """Issue 69's hostile case, as the decision: a 300-token prompt being prefilled and a 5-token
    newcomer share a turn of 64 tokens; the newcomer's part completes it, the long one goes on."""
    parts = prefill_parts([(7, 300), (8, 5)], decoding_rows=1, most=64)
    assert parts == [PrefillPart(7, 59, False), PrefillPart(8, 5, True)]
    assert sum(p.tokens for p in parts) == 64
    # by the rule "rows" while 20 rows decode, the turn holds 20 prompt tokens, split evenly
    assert prefill_parts([(7, 300), (8, 300)], decoding_rows=20, most=64, rule="rows") == [
        PrefillPart(7, 10, False), PrefillPart(8, 10, False)]
    # a prompt whose rest fits completes; prompts with nothing to do are left out
    assert prefill_parts([(7, 3), (8, 0)], decoding_rows=0, most=64) == [PrefillPart(7, 3, True)]
    assert prefill_parts([], decoding_rows=4, most=64) == []


def test_a_turn_says_whether_the_model_ran():
    assert not Turn().ran
    assert not Turn(ended=[(1, FinishReason.CANCELLED)]).ran
    assert Turn(prefilled=[PrefillPart(1, 4, True)]).ran
    assert Turn(step_rows=3, decoded=[1, 2]).ran


@pytest.mark.parametrize("event, kind, payload", [
    (TokenEvent("你", "你"), "token", {"token": "你", "text": "你"}),
    (DoneEvent("你好", ["你", "好"], FinishReason.LENGTH, 7), "done",
     {"text": "你好", "tokens": ["你", "好"], "finish_reason": "length", "prompt_tokens": 7}),
    (ErrorEvent("bad prompt"), "error", {"error": "bad prompt"}),
    (ErrorEvent("not loaded", 503), "error", {"error": "not loaded", "status": 503}),
])
def test_events_write_the_payload_the_api_has_always_sent(event, kind, payload):
    assert event.kind == kind and event.payload == payload
    assert json.loads(json.dumps(event.payload)) == payload  # plain JSON: the enum writes its value


def test_finish_reasons_are_the_api_strings():
    assert [r.value for r in FinishReason] == ["eos", "stop", "length", "time_limit", "cancelled"]
    assert FinishReason("length") is FinishReason.LENGTH
