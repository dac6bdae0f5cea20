"""A long prompt does not stall the service (issue 69, point 3), on a real export of an ERNIE 4.5
chat model: while it is prefilled a part a turn the running answers step between its parts, and a
small request sent after it is prefilled beside it in its first turn and answered before the long
one's prefill ends; each answer is the one it gets alone."""
from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("sentencepiece")

import test_generation_serving as serving  # noqa: E402
from test_generation_serving import read_until, service_of, stream_request, wait_ready  # noqa: E402
from test_text_generation import post  # noqa: E402

chat_folder, gate = serving.chat_folder, serving.gate  # the fixtures test_generation_serving's tests use


def test_the_running_answers_go_on_while_a_long_prompt_is_prefilled_a_chunk_a_turn(chat_folder, monkeypatch, gate):
    """The long prompt goes a part of at most ``--prefill_tokens`` a turn, and the running answer
    steps in each of those turns (in the same ``advance_pair`` call, the part beside its row)."""
    from wenxin.inference import generation_scheduler
    from wenxin.inference.service_metrics import ServiceMetrics
    from wenxin.models.decoding import DecodeSettings
    monkeypatch.setattr(DecodeSettings, "stops", lambda self, token: False)  # answers run to max_new_tokens
    long_question = "请详细地介绍一下文心大模型的特点、用途、训练方法以及它和别的模型有什么不同"
    whole = service_of(chat_folder)
    try:
        status, _, text = post(whole.port, "/generate", {"text": long_question, "max_new_tokens": 5})
        expected = json.loads(text)
    finally:
        whole.stop()
    turns = []  # the scheduler's typed account of each turn
    monkeypatch.setattr(ServiceMetrics, "observe_turn", lambda self, turn: turns.append(turn))
    keys, send = {}, generation_scheduler._send
    monkeypatch.setattr(generation_scheduler, "_send", lambda outbox, job, event: (
        keys.setdefault(job.row[0], job.key), send(outbox, job, event)))
    service = service_of(chat_folder, prefill_tokens=8)
    try:
        wait_ready(service.port)
        gate.close()  # the running answer's steps held until the long prompt is queued: it cannot end first
        running = stream_request(service.port, {"text": "hi", "max_new_tokens": 200})
        read_until(running, b"event: token")
        asking = stream_request(service.port, {"text": long_question, "max_new_tokens": 5})
        read_until(asking, b"200 OK")  # queued
        gate.open()
        text = read_until(asking, b"event: done").decode()
        done = json.loads(text.split("event: done\ndata: ")[1].split("\n")[0])
        assert done["tokens"] == expected["tokens"]
        asking.close()
        key = keys[long_question]
        parts = [(turn, part) for turn in turns for part in turn.prefilled if part.key == key]
        reused = sum(admitted.reused_tokens for turn in turns for admitted in turn.admitted if admitted.key == key)
        assert sum(part.tokens for _, part in parts) + reused == expected["prompt_tokens"]
        assert all(part.tokens <= 8 for _, part in parts) and len(parts) > 3  # a part a turn
        assert len({id(turn) for turn, _ in parts}) == len(parts)
        assert all(turn.step_rows for turn, _ in parts)  # the running answer stepped in each of them
        running.close()
    finally:
        gate.open()
        service.stop()


def test_a_small_newcomer_is_not_held_up_by_a_long_prompts_prefill(chat_folder, monkeypatch, gate):
    """Issue 69's hostile case: a short request sent while a long prompt is being prefilled gets
    its first token before the long one (an even share of each turn's prompt tokens), and each
    gets its lone answer."""
    from wenxin.inference import generation_scheduler
    from wenxin.inference.generation_events import FinishReason
    from wenxin.inference.service_metrics import ServiceMetrics
    from wenxin.models.decoding import DecodeSettings
    monkeypatch.setattr(DecodeSettings, "stops", lambda self, token: False)  # answers run to max_new_tokens
    long_question, short_question = "请详细地介绍一下文心大模型的特点、用途、训练方法以及它和别的模型有什么不同", "你好"
    alone = service_of(chat_folder)
    try:
        expected = {q: json.loads(post(alone.port, "/generate", {"text": q, "max_new_tokens": 4})[2])
                    for q in (long_question, short_question)}
    finally:
        alone.stop()
    assert expected[long_question]["prompt_tokens"] > 4 * expected[short_question]["prompt_tokens"]
    sent, send, keys = [], generation_scheduler._send, {}
    monkeypatch.setattr(generation_scheduler, "_send", lambda outbox, job, event: (
        sent.append((job.row[0], event.kind)), keys.setdefault(job.row[0], job.key), send(outbox, job, event)))
    turns = []  # the scheduler's typed account of each turn
    monkeypatch.setattr(ServiceMetrics, "observe_turn", lambda self, turn: turns.append(turn))
    service = service_of(chat_folder, prefill_tokens=8)
    try:
        wait_ready(service.port)
        gate.close()  # the running answer's steps held: the turns go on only when the test says
        running = stream_request(service.port, {"text": "hi", "max_new_tokens": 200})
        read_until(running, b"event: token")
        asking = stream_request(service.port, {"text": long_question, "max_new_tokens": 4})
        read_until(asking, b"200 OK")  # queued
        gate.calls.clear()
        gate.release()  # one step: the next turn lets the long prompt in and prefills its first part
        deadline = time.monotonic() + 120  # a guard against a hang: the state is the long prompt's first part
        while not any(name != "advance" and (shape is None or shape[0]) for name, shape in gate.calls):
            # gone to the engine: beside the next step (advance_pair, held at the gate), or alone
            assert time.monotonic() < deadline
            time.sleep(0.01)
        newcomer = stream_request(service.port, {"text": short_question, "max_new_tokens": 4})
        read_until(newcomer, b"200 OK")  # queued while the long prompt is prefilled
        gate.open()
        answers = {}
        for sock, question in ((asking, long_question), (newcomer, short_question)):
            text = read_until(sock, b"event: done").decode()
            answers[question] = json.loads(text.split("event: done\ndata: ")[1].split("\n")[0])["tokens"]
            sock.close()
        assert answers == {q: expected[q]["tokens"] for q in expected}
        firsts = [row for row, kind in sent if kind == "token" and row in (long_question, short_question)]
        assert firsts[0] == short_question, firsts  # it did not wait for the long prompt's whole prefill
        # the turns say the same: the newcomer's prompt completed in an earlier turn than the long
        # one's, no turn held more than --prefill_tokens prompt tokens, every prompt token was
        # prefilled once (or came from a kept start), and both answers ran to their length
        long_key, short_key = keys[long_question], keys[short_question]
        completed = {part.key: index for index, turn in enumerate(turns) for part in turn.prefilled if part.completes}
        assert completed[short_key] < completed[long_key]
        assert all(sum(part.tokens for part in turn.prefilled) <= 8 for turn in turns)
        for question, key in ((long_question, long_key), (short_question, short_key)):
            prefilled = sum(part.tokens for turn in turns for part in turn.prefilled if part.key == key)
            reused = sum(a.reused_tokens for turn in turns for a in turn.admitted if a.key == key)
            assert prefilled + reused == expected[question]["prompt_tokens"]
            assert [r for turn in turns for k, r in turn.finished if k == key] == [FinishReason.LENGTH]
            assert any(key in turn.decoded for turn in turns)
        running.close()
    finally:
        gate.open()
        service.stop()
