"""Generation for many users (issue 54), on real exports of an ERNIE 4.5 chat model and of
ERNIE-Gen, each from both graph modes:

- rows decoded together get, at every step, their logits alone within float32 rounding, whenever
  they joined or left, so greedy, seeded sampling and beam search give their lone tokens (the
  largest difference and the smallest top-2 margin printed);
- the service batches concurrent requests (one model step serves several), each answered as it is
  alone; a client that leaves ends its own row only; a full batch and waiting line is a 503 with
  ``Retry-After``; the service listens while it warms up and /health says so;
- hostile requests (5,000 tiny turns, beam 100,000, infinite temperature, a client that leaves
  while its prompt is prepared) are a 400 naming the field or a bounded cost, and the next
  request is answered;
- every endpoint is a row of one route table, described at /openapi.json."""
from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import threading
import time

import numpy as np
import pytest

pytest.importorskip("sentencepiece")

from conftest import build, write_jsonl  # noqa: E402
from decoding_helpers import alone, compare, together  # noqa: E402
from test_chat_sft import sft_config  # noqa: E402
from test_text_generation import config_for, events_of, gen_data, generation_finished, post  # noqa: E402,F401

FAMILIES = [("chat", "dynamic"), ("chat", "static"), ("gen", "dynamic"), ("gen", "static")]
QUESTIONS = ["你好", "今天天气怎么样？请告诉我详细情况", "what is machine learning and why does it matter so much",
             json.dumps({"system": "你是助手", "src": ["第一个问题", "第二个"], "tgt": ["第一个回答"]}, ensure_ascii=False),
             "hi"]
GEN_ROWS = [["a b", "c d e f g h"], ["a", "b"], ["d e f g h", "a b c d e f"], ["c c", "d d d"], ["e", "f g h"]]


def chat_export(tmp_path, mode):
    """A chat model's export after one step (the fixture's weights barely moved)."""
    data = str(tmp_path / "data")
    rows = [{"src": ["你好"], "tgt": ["你好呀"]}, {"src": ["hello"], "tgt": ["hi there"]}]
    write_jsonl(os.path.join(data, "train.jsonl"), rows * 3)
    write_jsonl(os.path.join(data, "dev.jsonl"), rows)
    config = sft_config(data, str(tmp_path / "out"), mode, max_steps=1, is_eval_dev=0)
    config["model"]["generation"] = {"max_new_tokens": 24, "strategy": "greedy"}
    trainer = build(config, tmp_path)
    trainer.do_train()
    return trainer.export_inference(str(tmp_path / "export"))


def gen_export(tmp_path, gen_data, mode):  # noqa: F811 (the fixture's value)
    config = config_for(gen_data, tmp_path / "out", mode, max_dec_len=10, decoding="greedy")
    config["trainer"].update(max_steps=1, is_eval_dev=0)
    trainer = build(config, tmp_path)
    trainer.do_train()
    return trainer.export_inference(str(tmp_path / "export"))


@pytest.fixture(scope="module", params=FAMILIES, ids=["-".join(f) for f in FAMILIES])
def export(request, tmp_path_factory, gen_data):  # noqa: F811
    family, mode = request.param
    tmp_path = tmp_path_factory.mktemp(f"{family}-{mode}")
    folder = chat_export(tmp_path, mode) if family == "chat" else gen_export(tmp_path, gen_data, mode)
    return family, folder


def strategies(predictor):
    return {"greedy": predictor.settings_for({"strategy": "greedy", "max_new_tokens": 10}),
            "sample": predictor.settings_for({"strategy": "sample", "max_new_tokens": 10, "temperature": 0.8,
                                              "top_k": 20, "top_p": 0.95, "seed": 7}),
            "beam": predictor.settings_for({"strategy": "beam", "max_new_tokens": 8, "beam_size": 3})}


@pytest.mark.parametrize("strategy", ["greedy", "sample", "beam"])
def test_rows_decoded_together_get_their_lone_logits_through_the_exported_steps(export, strategy):
    from wenxin.inference.generator import Generator
    from wenxin.inference.predictor import Predictor
    family, folder = export
    predictor = Predictor(folder)
    assert Generator(predictor).masked  # its extend hides each row's padding: one batch for all
    rows = [[q] for q in QUESTIONS] if family == "chat" else GEN_ROWS
    prompts = [predictor.prompt(row) for row in rows]
    assert len({p[next(iter(p))].shape[1] for p in prompts}) > 2  # prompts of different lengths
    settings = strategies(predictor)[strategy]
    references = [alone(predictor.run_step, True, prompt, settings) for prompt in prompts]
    seen = compare(together(predictor.run_step, True, prompts, settings), references)
    print(f"{family} {strategy}: largest logit difference {seen['largest_difference']:.2e} of the largest logit; "
          f"smallest top-2 margin alone {seen['smallest_margin']:.2e}")


# ---- the service -------------------------------------------------------------------------------
def service_of(folder, backend="auto", **room):
    from wenxin.inference.scheduler_front import SchedulerLimits
    from wenxin.inference.server import Limits, ServeOptions, Service
    limits = Limits(**{k: room.pop(k) for k in list(room) if hasattr(Limits, k)})
    service = Service(folder, port=0, options=ServeOptions(limits=limits, generation=SchedulerLimits(**room),
                                                           backend=backend))
    service.start_in_thread()
    return service


def wait_ready(port):
    """Until /health says the service has warmed up (a state, not a delay)."""
    deadline = time.monotonic() + 120  # a guard against a hang, not a timing the test needs
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/health")
        response = conn.getresponse()
        response.read()
        if response.status == 200:
            return
        assert time.monotonic() < deadline


def answered(port, path):
    """Requests to ``path`` the service has ended, with any status (its Prometheus counter)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in conn.getresponse().read().decode().splitlines()
               if line.startswith(f'wenxin_requests_total{{path="{path}"'))


def metric(port, name):
    """The value of a Prometheus sample ``name`` (with its labels) of the service."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    for line in conn.getresponse().read().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory):
    return chat_export(tmp_path_factory.mktemp("chat-served"), "dynamic")


@pytest.fixture(scope="module")
def chat_int8_folder(chat_folder, tmp_path_factory):
    """``chat_folder`` converted to ONNX: its int8 engine runs every call as ``advance_pair``."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("paddle2onnx")
    from wenxin.inference.onnx_export import export_onnx
    folder = str(tmp_path_factory.mktemp("chat-int8") / "export")
    shutil.copytree(chat_folder, folder)
    export_onnx(folder, {})
    return folder


@pytest.mark.parametrize("backend", ["paddle", "onnxruntime-int8"])
def test_concurrent_requests_share_steps_and_each_gets_its_lone_answer(chat_folder, backend, gate, request):
    """Paddle and the int8 engine run a turn's prompt parts and its decoding step in one
    ``advance_pair`` call (the newcomers' parts beside the first request's row): each request
    gets its lone answer."""
    if backend != "paddle":
        chat_folder = request.getfixturevalue("chat_int8_folder")
    bodies = [{"text": QUESTIONS[0], "max_new_tokens": 12},
              {"text": QUESTIONS[1], "strategy": "sample", "temperature": 0.9, "seed": 3, "max_new_tokens": 12},
              {"text": QUESTIONS[2], "strategy": "beam", "beam_size": 3, "max_new_tokens": 8},
              {"text": QUESTIONS[3], "max_new_tokens": 12, "stop": "。"},
              {"text": QUESTIONS[4], "strategy": "sample", "temperature": 1.2, "seed": 11, "max_new_tokens": 12}]
    service = service_of(chat_folder, backend)
    try:
        port = service.port
        lone = []
        for body in bodies:  # one at a time: each alone in the batch
            status, _, text = post(port, "/generate", body)
            assert status == 200, text
            lone.append(json.loads(text))
        wait_ready(port)
        steps_before = metric(port, "wenxin_generation_step_rows_count")
        rows_before = metric(port, "wenxin_generation_step_rows_sum")
        counted = ("wenxin_prompt_tokens_prefilled_total", "wenxin_prompt_tokens_reused_total",
                   "wenxin_generation_turn_cpu_seconds_total", "wenxin_generation_model_cpu_seconds_total")
        counts_before = [metric(port, name) for name in counted]
        gate.close()  # the first request's first step is held until the others have come
        sockets = [stream_request(port, bodies[0])]
        read_until(sockets[0], b"event: token")
        for body in bodies[1:]:
            sockets.append(stream_request(port, body))
            read_until(sockets[-1], b"200 OK")  # queued
        gate.open()
        prompt_tokens = 0
        for sock, theirs in zip(sockets, lone):
            text = read_until(sock, b"event: done").decode()
            mine = json.loads(text.split("event: done\ndata: ")[1].split("\n")[0])
            assert (mine["text"], mine["tokens"], mine["finish_reason"]) == \
                (theirs["text"], theirs["tokens"], theirs["finish_reason"])
            prompt_tokens += mine["prompt_tokens"]
            sock.close()
        prefilled, reused, turn_cpu, model_cpu = [metric(port, name) - before
                                                  for name, before in zip(counted, counts_before)]
        assert prefilled + reused == prompt_tokens and prefilled > 0, (prefilled, reused, prompt_tokens)
        assert 0 < model_cpu < turn_cpu, (model_cpu, turn_cpu)  # of the decoding thread's CPU, the model's calls'
        steps = metric(port, "wenxin_generation_step_rows_count") - steps_before
        rows = metric(port, "wenxin_generation_step_rows_sum") - rows_before
        assert rows / steps > 1.5, (rows, steps)  # steps ran several requests' rows together
        from wenxin.inference.paddle_backend import runs_empty_groups
        beside = [shape for name, shape in gate.calls if name == "advance_pair" and shape[0]]
        fused = backend != "paddle" or runs_empty_groups()  # an older Paddle loads advance (two calls a turn)
        assert bool(beside) == fused, gate.calls  # prompt parts beside decoding rows
    finally:
        gate.open()
        service.stop()


def stream_request(port, body):
    """A socket that has sent a streaming /generate request and read its response head."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    data = json.dumps({**body, "stream": True}).encode()
    sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                 + str(len(data)).encode() + b"\r\n\r\n" + data)
    return sock


def read_until(sock, marker):
    received = b""
    while marker not in received:
        chunk = sock.recv(4096)
        assert chunk, received
        received += chunk
    return received


@pytest.fixture(scope="module")
def endless(tmp_path_factory, gen_data):  # noqa: F811
    """An ERNIE-Gen export that never ends a text on its own ([SEP]'s output bias at -1e4)."""
    tmp_path = tmp_path_factory.mktemp("endless")
    config = config_for(gen_data, tmp_path / "out", max_dec_len=60, decoding="greedy")
    config["trainer"].update(max_steps=1, is_eval_dev=0)
    trainer = build(config, tmp_path)
    trainer.do_train()
    values = trainer.model.lm_head.bias.numpy()
    values[trainer.model.special["sep_id"]] = -1e4
    trainer.model.lm_head.bias.set_value(values)
    return trainer.export_inference(str(tmp_path / "export"))


class StepGate:
    """Holds the service's decoding steps (``extend``) while closed, each ``release()`` letting one
    through: a test sets the order of events instead of racing a fast tiny model."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._closed, self._permits = False, 0

    def wait(self) -> None:
        with self._condition:
            assert self._condition.wait_for(lambda: not self._closed or self._permits, timeout=120), \
                "the test never released the step"
            if self._closed:
                self._permits -= 1

    def close(self) -> None:
        with self._condition:
            self._closed, self._permits = True, 0

    def release(self) -> None:
        with self._condition:
            self._permits += 1
            self._condition.notify_all()

    def open(self) -> None:
        with self._condition:
            self._closed = False
            self._condition.notify_all()


def decoding_step(name, inputs):
    """Whether a step runner's call is a decoding step (an in-place ``advance`` of the batch, or an
    older export's ``extend``), not a prompt's prefill."""
    return name == "extend" or (name == "advance" and "cache" not in inputs) or name == "advance_pair"


@pytest.fixture
def gate(monkeypatch):
    from wenxin.inference.scheduler_front import GenerationJob
    from wenxin.inference.predictor import Predictor
    step_gate, run_step, cancel = StepGate(), Predictor.run_step, GenerationJob.cancel
    step_gate.cancelled = threading.Event()
    step_gate.calls = []  # (step, the shape of advance_pair's second group's tokens) of each call

    def gated(self, name, inputs):
        step_gate.calls.append((name, tuple(inputs["second_tokens"].shape) if "second_tokens" in inputs else None))
        if decoding_step(name, inputs):
            step_gate.wait()
        return run_step(self, name, inputs)

    def noted_cancel(self):
        step_gate.cancelled.set()
        cancel(self)

    monkeypatch.setattr(Predictor, "run_step", gated)
    monkeypatch.setattr(GenerationJob, "cancel", noted_cancel)
    return step_gate


def test_a_client_that_leaves_ends_its_row_only_and_a_full_service_answers_503(endless, gate):
    service = service_of(endless, max_rows=2, max_waiting=1, max_new_tokens=60)
    try:
        port = service.port
        wait_ready(port)  # its warm-up's steps are through
        gate.close()
        staying = stream_request(port, {"row": ["e", "f g"], "max_new_tokens": 40})
        read_until(staying, b"event: token")  # its prefill's token; its first step waits at the gate
        leaving = stream_request(port, {"row": ["a b", "c d"], "max_new_tokens": 60})
        read_until(leaving, b"200 OK")  # queued (its head is sent then)
        gate.release()  # the held step; then the newcomer joins, and the next step waits
        read_until(leaving, b"event: token")
        leaving.close()  # the client goes away mid-stream
        assert gate.cancelled.wait(120)  # the service noticed
        gate.open()
        text = read_until(staying, b"event: done").decode()
        done = json.loads(text.split("event: done\ndata: ")[1].split("\n")[0])
        assert done["finish_reason"] == "length" and len(done["tokens"]) == 40  # the other row went on to its end
        assert generation_finished(port) == {"cancelled": 1.0, "length": 1.0}
        staying.close()

        # one request decoding (its step held), one waiting: the next is refused at once, saying when to retry
        gate.close()
        running = stream_request(port, {"row": ["a", "b"], "max_new_tokens": 60})
        read_until(running, b"event: token")
        waiting = stream_request(port, {"row": ["c", "d"], "max_new_tokens": 5})
        read_until(waiting, b"200 OK")  # its head is sent once it is queued
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/generate", json.dumps({"row": ["e", "f"]}), {"Content-Type": "application/json"})
        response = conn.getresponse()
        body = json.loads(response.read())
        assert response.status == 503 and response.getheader("retry-after") == "1"
        assert "--max_waiting 1" in body["error"]
        assert metric(port, "wenxin_generations_refused_total") == 1
        gate.open()
        for sock in (running, waiting):
            sock.close()
        deadline = time.monotonic() + 120  # a guard against a hang, not a timing the test needs
        while sum(generation_finished(port).values()) < 4:  # both ended (cancelled, or done first): room again
            assert time.monotonic() < deadline, generation_finished(port)
        status, _, text = post(port, "/generate", {"row": ["a", "b"], "max_new_tokens": 3})
        assert status == 200 and len(json.loads(text)["tokens"]) == 3
    finally:
        gate.open()
        service.stop()


def test_the_service_listens_while_it_warms_up(chat_folder, monkeypatch):
    from wenxin.inference.generation_scheduler import GenerationScheduler
    release = threading.Event()
    warm_up = GenerationScheduler._warm_up

    def slow_warm_up(self, generator):
        release.wait(120)
        warm_up(self, generator)

    monkeypatch.setattr(GenerationScheduler, "_warm_up", slow_warm_up)
    service = service_of(chat_folder)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
        conn.request("GET", "/health")
        response = conn.getresponse()
        health = json.loads(response.read())
        assert response.status == 503 and health["status"] == "warming" and "warming up" in health["reason"]
        answers = []
        asking = threading.Thread(target=lambda: answers.append(post(service.port, "/generate",
                                                                     {"text": "hi", "max_new_tokens": 2})))
        asking.start()  # a request during the warm-up waits for it
        release.set()
        asking.join()
        assert answers[0][0] == 200
        conn.request("GET", "/health")
        response = conn.getresponse()
        assert response.status == 200 and json.loads(response.read())["status"] == "ok"
    finally:
        release.set()
        service.stop()


def raw_post(port, path, body: bytes):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def test_hostile_requests_get_a_400_naming_the_field_or_a_bounded_cost(chat_folder):
    turns = [{"role": r, "content": "嗯"} for _ in range(5000) for r in ("user", "assistant")]
    messages = turns + [{"role": "user", "content": "最后一个问题"}]
    service = service_of(chat_folder, max_messages=20000)
    strict = service_of(chat_folder)
    try:
        status, body = raw_post(strict.port, "/v1/chat/completions", json.dumps({"messages": messages}).encode())
        assert status == 400 and body["error"]["param"] == "messages"
        assert "10001 messages, more than the service's limit of 1024" in body["error"]["message"]
        # allowed that many, the conversation is fitted to the context from its end: a bounded cost
        status, body = raw_post(service.port, "/v1/chat/completions",
                                json.dumps({"messages": messages, "max_tokens": 3}).encode())
        assert status == 200 and body["usage"]["completion_tokens"] <= 3
        assert 0 < body["usage"]["prompt_tokens"] <= 160  # the field's max_seq_len
        for raw, param, message in [
                (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": Infinity}', "temperature",
                 "from 0 to 2"),
                (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": 1e400}', "temperature",
                 "from 0 to 2"),
                (b'{"messages": [{"role": "user", "content": "hi"}], "top_p": NaN}', "top_p", "above 0")]:
            status, body = raw_post(service.port, "/v1/chat/completions", raw)
            assert status == 400 and body["error"]["param"] == param and message in body["error"]["message"], body
        for raw, message in [(b'{"text": "hi", "strategy": "beam", "beam_size": 100000}', "beam_size 100000 must be"),
                             (b'{"text": "hi", "strategy": "beam", "beam_size": 40}', "more than the service's "
                                                                                      "--max_rows 32"),
                             (b'{"text": "hi", "strategy": "sample", "temperature": 1e400}', "temperature inf"),
                             (b'{"text": "hi", "strategy": "sample", "temperature": 5e-324}', "temperature 5e-324"),
                             (b'{"text": "hi", "seed": -1}', "seed -1 must be from 0"),
                             (b'{"text": "hi", "strategy": "beam", "length_penalty": 1e308}', "length_penalty"),
                             (b'{"text": "' + "长".encode() * 100000 + b'"}', "more than the service's limit of "
                                                                            "262144 (--max_prompt_bytes)")]:
            status, body = raw_post(service.port, "/generate", raw)
            assert status == 400 and message in body["error"], body

        # a client that sends its request and leaves (while its body is read, or its prompt prepared)
        before = answered(service.port, "/v1/chat/completions")
        data = json.dumps({"messages": messages, "stream": True}).encode()
        sock = socket.create_connection(("127.0.0.1", service.port), timeout=30)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
        sock.close()
        deadline = time.monotonic() + 120  # a guard against a hang, not a timing the test needs
        while answered(service.port, "/v1/chat/completions") <= before:  # it ended, whatever its stage
            assert time.monotonic() < deadline
        status, _, text = post(service.port, "/generate", {"text": "hi", "max_new_tokens": 2})
        assert status == 200 and len(json.loads(text)["tokens"]) <= 2
    finally:
        service.stop()
        strict.stop()


def test_every_endpoint_is_a_row_of_the_route_table_and_of_the_openapi_document(chat_folder):
    service = service_of(chat_folder)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
        conn.request("GET", "/openapi.json")
        response = conn.getresponse()
        document = json.loads(response.read())
        assert response.status == 200 and document["openapi"].startswith("3.")
        routes = {(r.method.lower(), r.path) for r in service.app.routes.routes}
        assert {(m, p) for p, ops in document["paths"].items() for m in ops} == routes
        assert {("post", "/predict"), ("post", "/generate"), ("post", "/v1/chat/completions"), ("get", "/health"),
                ("get", "/metrics"), ("get", "/openapi.json"), ("get", "/v1/models")} == routes
        generate = document["paths"]["/generate"]["post"]
        settings = generate["requestBody"]["content"]["application/json"]["schema"]["properties"]
        from wenxin.models.decoding import DecodeSettings
        assert set(DecodeSettings().as_dict()) - {"eos_id", "stop_ids"} <= set(settings)
        assert "text/event-stream" in generate["responses"]["200"]["content"] and "503" in generate["responses"]
        conn.request("GET", "/generate")
        response = conn.getresponse()
        response.read()
        assert response.status == 405 and response.getheader("allow") == "POST"
    finally:
        service.stop()


def test_the_route_table_refuses_two_routes_for_one_endpoint():
    from wenxin.inference.routes import Route, RouteTable

    async def handler(call):
        return None

    with pytest.raises(ValueError, match="two routes for GET /x"):
        RouteTable([Route("GET", "/x", handler, "a"), Route("GET", "/x", handler, "b")])


def test_generation_on_predict_decodes_every_row_with_the_exports_settings(chat_folder):
    from wenxin.inference.generator import Generator
    from wenxin.inference.predictor import Predictor
    predictor = Predictor(chat_folder)
    expected = Generator(predictor).generate([[q] for q in QUESTIONS[:3]], max_rows=2)
    assert [r["text"] for r in predictor.predict([[q] for q in QUESTIONS[:3]])] == [r["text"] for r in expected]
    service = service_of(chat_folder)
    try:
        status, _, text = post(service.port, "/predict", {"texts": QUESTIONS[:3]})
        assert status == 200 and [p["text"] for p in json.loads(text)["predictions"]] == [r["text"] for r in expected]
    finally:
        service.stop()
    with pytest.raises(Exception, match="decodes through its step functions"):
        predictor.run(predictor.convert([[QUESTIONS[0]]]))
    assert np.all(np.asarray([len(r["tokens"]) for r in expected]) <= 24)


def test_a_long_prompt_prefilled_in_parts_alone_or_beside_others_gives_the_whole_prefill(export):
    from wenxin.inference.generator import Generator
    from wenxin.inference.predictor import Predictor
    from wenxin.models.batch_prefill import PromptPrefill, fair_shares, prefill_together
    family, folder = export
    predictor = Predictor(folder)
    assert Generator(predictor).chunks == (family == "chat")  # ERNIE-Gen's source is read both ways: whole
    if family != "chat":
        return
    prompts = [predictor.prompt([text]) for text in ("请详细地介绍一下文心大模型的特点、用途、训练方法以及它和别的模型有什么不同",
                                                     "你好", "what is machine learning")]
    assert prompts[0]["ids"].shape[1] > 40
    wholes = [predictor.run_step("prefill", prompt) for prompt in prompts]
    for size, empty in ((7, None), (16, None), (7, predictor.advance_cache), (16, predictor.advance_cache)):
        parts = [PromptPrefill(prompt["ids"]) for prompt in prompts]
        turns = 0
        while not all(part.done for part in parts):
            shares = fair_shares([part.remaining for part in parts], size)
            assert sum(shares) <= size
            prefill_together(predictor.run_step, list(zip(parts, shares)), empty)
            turns += 1
        assert turns >= -(-sum(prompt["ids"].shape[1] for prompt in prompts) // size)
        for part, whole in zip(parts, wholes):
            np.testing.assert_allclose(part.outputs["logits"], whole["logits"], rtol=0,
                                       atol=4e-6 * float(np.abs(whole["logits"]).max()))
            np.testing.assert_allclose(part.outputs["cache"], whole["cache"], rtol=0, atol=1e-5)
            assert int(part.outputs["position"][0]) == int(whole["position"][0])


def test_the_service_answers_while_its_model_loads_and_a_model_that_cannot_load_stops_it(chat_folder, monkeypatch):
    """Issue 69, point 5: with ``listen_while_loading`` (``wenxin serve``'s one process) the port
    answers at once: /health 503 ``loading`` with the seconds so far, a request waits for the model;
    a model that cannot load ends the requests that waited with its error and stops the service,
    which raises it."""
    from wenxin.common.errors import InferenceError
    from wenxin.inference import generation_scheduler
    from wenxin.inference.server import ServeOptions, Service
    release, fail = threading.Event(), []
    real = generation_scheduler.Predictor

    def slow_predictor(*args, **kwargs):
        if kwargs.get("load_model", True):  # the decoding thread's predictor: held until the test says
            release.wait(120)
            if fail:
                raise InferenceError("the model files cannot be read (a test's failure)")
        return real(*args, **kwargs)

    monkeypatch.setattr(generation_scheduler, "Predictor", slow_predictor)
    for failing in (False, True):
        release.clear()
        fail[:] = [True] if failing else []
        service = Service(chat_folder, port=0, options=ServeOptions(listen_while_loading=True))
        thread = service.start_in_thread()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
            conn.request("GET", "/health")
            response = conn.getresponse()
            health = json.loads(response.read())
            assert response.status == 503 and health["status"] == "loading" and health["seconds"] >= 0, health
            answers: list = []
            asking = threading.Thread(target=lambda port=service.port, into=answers: into.append(
                post(port, "/generate", {"text": "hi", "max_new_tokens": 2})))
            asking.start()  # a request while the model loads waits for it
            deadline = time.monotonic() + 60  # a guard against a hang: the state is the request queued
            while service.scheduler.waiting_count == 0:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            release.set()
            asking.join(60)
            if not failing:
                assert answers[0][0] == 200
                wait_ready(service.port)
            else:
                status, _, text = answers[0]
                assert status == 503 and "the model files cannot be read" in text, answers
                thread.join(60)
                assert not thread.is_alive()  # the service stopped
                assert isinstance(service.load_error, InferenceError)
        finally:
            release.set()
            service.stop()
            thread.join(60)
