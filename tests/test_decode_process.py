"""``wenxin serve --decode_process``: generation decoded in a child process
(``wenxin.inference.decode_process.ProcessScheduler``). The answers are those of the in-thread
scheduler; the serving process answers /health and /metrics while the child is stopped (a state:
SIGSTOP, not a timing); a child that dies answers its requests with an error and stops the
service instead of leaving them waiting."""
from __future__ import annotations

import http.client
import json
import os
import signal
import time

import pytest

pytest.importorskip("paddle")

import test_generation_serving as serving  # noqa: E402
from test_generation_serving import QUESTIONS, read_until, stream_request, wait_ready  # noqa: E402
from test_text_generation import events_of, post  # noqa: E402

chat_folder = serving.chat_folder  # the fixture

BODIES = [{"text": QUESTIONS[0], "max_new_tokens": 8},
          {"text": QUESTIONS[1], "strategy": "sample", "temperature": 0.9, "seed": 3, "max_new_tokens": 8},
          {"text": QUESTIONS[2], "strategy": "beam", "beam_size": 3, "max_new_tokens": 6},
          {"text": QUESTIONS[3], "max_new_tokens": 8, "stop": "。"}]


def service_with(folder, decode_process):
    from wenxin.inference.server import ServeOptions, Service
    service = Service(folder, port=0, options=ServeOptions(decode_process=decode_process))
    service.start_in_thread()
    return service


def get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path)
    response = conn.getresponse()
    return response.status, response.read().decode("utf-8")


def stopped(process):
    """Whether ``process`` is stopped (SIGSTOP), from /proc (Linux)."""
    with open(f"/proc/{process.pid}/stat", encoding="ascii") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def stop(process):
    """SIGSTOP ``process`` and wait until the kernel has stopped it (a state, not a delay)."""
    os.kill(process.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 60  # a guard against a hang
    while not stopped(process):
        assert time.monotonic() < deadline
        time.sleep(0.001)


def test_decoding_in_a_process_of_its_own_gives_the_answers_of_decoding_in_a_thread(chat_folder):
    answers = {}
    for choice in ("off", "on"):
        service = service_with(chat_folder, choice)
        try:
            wait_ready(service.port)
            answers[choice] = [json.loads(post(service.port, "/generate", body)[2]) for body in BODIES]
            status, _, text = post(service.port, "/generate", {**BODIES[0], "stream": True})
            answers[choice].append([event for event, _ in events_of(text)][-1])
            chat = json.loads(post(service.port, "/v1/chat/completions", {
                "messages": [{"role": "user", "content": QUESTIONS[0]}], "max_tokens": 8})[2])
            answers[choice].append((chat["choices"][0]["message"]["content"], chat["usage"]))
            process = getattr(service.scheduler, "process", None)
            assert (process is not None and process.pid != os.getpid() and process.is_alive()) == (choice == "on")
            if process is not None:  # Ctrl-C reaches the terminal's whole group: the service, not the child, drains
                os.kill(process.pid, signal.SIGINT)
                assert json.loads(post(service.port, "/generate", BODIES[0])[2]) == answers[choice][0]
                assert process.is_alive()
            health = json.loads(get(service.port, "/health")[1])
            assert health["status"] == "ok" and health["generation"]["batched"] is True
            rows = [line for line in get(service.port, "/metrics")[1].splitlines()
                    if line.startswith("wenxin_generation_step_rows_count")]
            assert float(rows[0].rsplit(" ", 1)[1]) > 0  # the child's turns reach the service's metrics
        finally:
            service.stop()
    assert answers["on"] == answers["off"]
    assert answers["on"][-2] == "done"


def test_the_service_answers_while_its_decoding_process_is_stopped(chat_folder):
    service = service_with(chat_folder, "on")
    try:
        wait_ready(service.port)
        expected = json.loads(post(service.port, "/generate", BODIES[0])[2])
        child = service.scheduler.process
        stop(child)
        try:
            asking = stream_request(service.port, BODIES[0])
            read_until(asking, b"200 OK")  # submitted: the child will find it in the pipe
            # nothing of the service waits for the decoding: it answers while the child cannot run
            status, text = get(service.port, "/health")
            assert status == 200 and json.loads(text)["status"] == "ok"
            assert get(service.port, "/metrics")[0] == 200
            assert post(service.port, "/generate", {"text": "x" * 10, "max_new_tokens": 10**6})[0] == 400
            assert stopped(child)
        finally:
            os.kill(child.pid, signal.SIGCONT)
        text = read_until(asking, b"event: done").decode()
        done = json.loads(text.split("event: done\ndata: ")[1].split("\n")[0])
        assert done["tokens"] == expected["tokens"] and done["finish_reason"] == expected["finish_reason"]
        asking.close()
    finally:
        service.stop()


def test_a_decoding_process_that_dies_answers_its_requests_and_stops_the_service(chat_folder):
    service = service_with(chat_folder, "on")
    try:
        wait_ready(service.port)
        child = service.scheduler.process
        stop(child)
        asking = stream_request(service.port, BODIES[0])
        read_until(asking, b"200 OK")
        os.kill(child.pid, signal.SIGKILL)
        text = read_until(asking, b"event: error").decode()
        assert "the decoding process exited" in text
        asking.close()
        assert service.load_error is not None and "decoding process" in str(service.load_error)
        assert service.server.should_exit  # a service without its decoding stops, it does not hang
    finally:
        service.stop()


def test_decode_process_auto_is_on_where_the_backend_keeps_pythons_lock_and_one_process_serves():
    from wenxin.common.errors import ConfigError
    from wenxin.inference.server import ServeOptions, check_settings, decodes_apart
    assert decodes_apart("auto", "paddle", workers=1)
    assert not decodes_apart("auto", "paddle", workers=2)  # a worker is a daemon process: no child of its own
    assert not decodes_apart("auto", "onnxruntime", workers=1)  # it releases the lock while it runs
    assert decodes_apart("on", "onnxruntime", workers=1) and not decodes_apart("off", "paddle", workers=1)
    with pytest.raises(ConfigError, match="--decode_process on"):
        check_settings(ServeOptions(decode_process="on"), workers=2)
    with pytest.raises(ConfigError, match="--decode_process: 'sometimes'"):
        check_settings(ServeOptions(decode_process="sometimes"))
