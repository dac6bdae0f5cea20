"""The HTTP service against a hostile client on 127.0.0.1: malformed and conflicting framing,
request smuggling, slow headers and bodies, deep JSON, bad text, oversized requests, failures
inside the app, many concurrent clients, batching across requests, and a SIGTERM drain. Every
loop is bounded in count and time."""
from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO, answer_across_sigterm, make_sentences, with_rules
from wenxin.inference.batching import BatchingPool
from wenxin.inference.predictor import Predictor
from wenxin.inference.server import (BodyDeadline, Limits, RequestError, ServeOptions, Service, json_depth_exceeds,
                                     load_json_body, parse_request)

TIMEOUT = 1.0  # the service's header and body read timeout in these tests


@pytest.fixture(scope="module")
def exported(exported_classifier):
    return exported_classifier


@pytest.fixture(scope="module")
def service(exported):
    limits = Limits(max_batch=8, max_body_bytes=4096, read_timeout=TIMEOUT, header_timeout=TIMEOUT, keep_alive=TIMEOUT)
    running = Service(exported, port=0, options=ServeOptions(limits=limits))
    thread = running.start_in_thread()
    yield running
    running.stop()
    thread.join(timeout=60)


@pytest.fixture(scope="module")
def patient_service(exported):
    """A service whose header deadline (60 s) cannot pass while a test feeds it headers slowly on a
    busy machine, so a size limit is what answers."""
    limits = Limits(max_batch=8, max_body_bytes=4096, read_timeout=60.0, header_timeout=60.0, keep_alive=TIMEOUT)
    running = Service(exported, port=0, options=ServeOptions(limits=limits))
    thread = running.start_in_thread()
    yield running
    running.stop()
    thread.join(timeout=60)


def exchange(port: int, raw: bytes, wait: float = 10.0) -> bytes:
    """Send raw bytes, then read until the server closes the connection (or ``wait`` passes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(raw)
        received = b""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                return received
            received += chunk
        raise AssertionError(f"the server kept the connection open; got {received[:300]!r}")


def statuses(received: bytes) -> list:
    return [int(line.split()[1]) for line in received.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]


def post(port: int, body: bytes, headers: dict = None) -> tuple:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/predict", body=body, headers={"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, json.loads(data) if data.startswith(b"{") else data


GOOD = json.dumps({"texts": ["好"]}).encode()
HIDDEN = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


FRAMING = [
    ("negative length", b"Content-Length: -1\r\n", b"x" * 200, 400),
    ("non-numeric length", b"Content-Length: 12abc\r\n", GOOD, 400),
    ("huge length", b"Content-Length: 1000000000000\r\n", b"{", 413),
    ("conflicting lengths", f"Content-Length: {len(GOOD)}\r\nContent-Length: 5\r\n".encode(), GOOD, 400),
    ("missing length", b"", b"", 411),
    ("missing length, a body", b"", GOOD, 400),  # no length: the body is parsed as the next request
    ("chunked smuggling", b"Transfer-Encoding: chunked\r\n", b"0\r\n\r\n" + HIDDEN, 411),
    ("chunked and length", f"Transfer-Encoding: chunked\r\nContent-Length: {len(GOOD)}\r\n".encode(), GOOD, 400),
    ("odd transfer coding", b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n" + HIDDEN, 411),
    ("oversized header", b"X-Big: " + b"a" * 20000 + f"\r\nContent-Length: {len(GOOD)}\r\n".encode(), GOOD, 400),
    ("bad request line", b"", b"", 400),
]


@pytest.mark.parametrize("name,head,body,expected", FRAMING, ids=[case[0] for case in FRAMING])
def test_framing_attacks_get_one_answer_and_a_closed_connection(service, name, head, body, expected):
    start = b"POST /predict HTTP/1.1\r\nHost: x\r\n" if name != "bad request line" else b"POST /predict HTTP/9\r\n"
    received = exchange(service.port, start + head + b"\r\n" + body + HIDDEN)
    assert statuses(received) == [expected], received[:500]  # the hidden request never runs


def test_slow_headers_and_bodies_are_cut_off_and_do_not_block_others(service):
    slow = []
    for _ in range(20):  # slowloris: headers one byte at a time
        sock = socket.create_connection(("127.0.0.1", service.port), timeout=10)
        sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\n")
        slow.append(sock)
    started = time.monotonic()
    assert post(service.port, GOOD)[0] == 200  # served meanwhile
    for sock in slow:
        closed = False
        while time.monotonic() - started < 10 * TIMEOUT and not closed:
            try:
                sock.sendall(b"X")
                closed = sock.recv(1, socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                time.sleep(0.1)
            except OSError:
                closed = True
        assert closed, "a slow-header connection stayed open"
        sock.close()
    assert time.monotonic() - started < 10 * TIMEOUT
    # a body that never completes: 408, then the connection is closed
    received = exchange(service.port, b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"texts\"")
    assert statuses(received) == [408]


@pytest.mark.parametrize("pieces", [
    [b"X-Big: " + b"a" * 1000] * 20,                                  # one header growing, never ended
    [b"X-%d: a\r\n" % i for i in range(3000)],                        # many small headers
    [b"X-Big: " + b"a" * 70000 + b"\r\n"],                            # one header, one piece
], ids=["growing header", "many headers", "one huge header"])
def test_headers_over_the_limit_are_refused_however_they_arrive(patient_service, pieces):
    """16 KiB of request line and headers at most, counted while they arrive (the parser itself
    has no limit)."""
    service = patient_service
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as sock:
        sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\n")
        received = b""
        try:
            for piece in pieces:
                sock.sendall(piece)
                time.sleep(0.001)
        except OSError:  # closed while sending: the answer was already sent
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    assert statuses(received) == [400], received[:300]
    assert post(service.port, GOOD)[0] == 200


BODIES = [
    # refused by the service's own depth limit, whatever the interpreter's recursion limit
    ("deep json", b'{"texts": ' + b"[" * 2000 + b"]" * 2000 + b"}", 400, "nested too deep"),
    ("33 levels", b'{"texts": ' + b"[" * 32 + b"]" * 32 + b"}", 400, "nested too deep"),
    ("not utf-8", b'{"texts": ["\xc3\x28"]}', 400, "not valid UTF-8 JSON"),
    ("lone surrogate", b'{"texts": ["a\\ud800b"]}', 400, "input 0 holds an unpaired surrogate"),
    ("third text's surrogate", b'{"texts": ["ok", "fine", "a\\udc00"]}', 400, "input 2 holds an unpaired surrogate"),
    ("10,000 texts", json.dumps({"texts": ["a"] * 10000}).encode(), 413, "the limit is 4096"),
    ("9 texts", json.dumps({"texts": ["a"] * 9}).encode(), 413, "9 inputs in one request; the limit is 8"),
    ("number as text", b'{"texts": [1e999]}', 400, '"texts" must be a list of strings'),
]


@pytest.mark.parametrize("name,body,status,message", BODIES, ids=[case[0] for case in BODIES])
def test_bad_bodies_get_a_clear_4xx(service, name, body, status, message):
    got, data = post(service.port, body)
    assert got == status and message in data["error"], (got, data)


def test_a_body_deadline_ends_only_its_own_read():
    """``BodyDeadline`` (one timer a body): it ends a read that outlives it, and only that."""
    import asyncio

    async def read(deadline_s: float, arrives_s: float) -> str:
        with BodyDeadline(deadline_s) as deadline:
            await asyncio.sleep(arrives_s)  # the body's messages
            return "body"
        raise deadline.error()

    async def scenarios() -> None:
        with pytest.raises(RequestError, match="did not arrive within 0.05 s") as refused:
            await read(0.05, 60)
        assert refused.value.close and refused.value.status == 408
        task = asyncio.current_task()
        assert task is not None and getattr(task, "cancelling", lambda: 0)() == 0  # Python 3.11+: handled
        assert await read(0.05, 0) == "body"
        await asyncio.sleep(0.1)  # its deadline, had it been left behind, would cancel this task here
        # a cancel from outside (the service stopping) is not a 408: it goes on
        reader = asyncio.ensure_future(read(60, 60))
        await asyncio.sleep(0)
        reader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reader
        # both at once: Python 3.11+ counts cancels, so the outside one goes on; before 3.11 no
        # count tells them apart, and the read ends in the 408
        deadlines: list = []

        async def read_in_view() -> str:
            with BodyDeadline(60) as deadline:
                deadlines.append(deadline)
                await asyncio.sleep(60)
                return "body"
            raise deadline.error()

        reader = asyncio.ensure_future(read_in_view())
        await asyncio.sleep(0)
        deadlines[0]._expire()
        reader.cancel()
        with pytest.raises(asyncio.CancelledError if sys.version_info >= (3, 11) else RequestError):
            await reader

    asyncio.run(scenarios())


def test_the_depth_limit_holds_whatever_the_recursion_limit():
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(50000)  # what a library in the same process may do (hypothesis, jedi)
    try:
        deep = b'{"texts": ' + b"[" * 2000 + b"]" * 2000 + b"}"
        with pytest.raises(RequestError, match="nested too deep"):
            parse_request(deep, num_fields=1, max_batch=8)
    finally:
        sys.setrecursionlimit(before)
    # brackets inside strings, escaped quotes among them, are text, not nesting
    text = '[[[[\\"{{{{' * 40
    assert parse_request(json.dumps({"texts": [text]}).encode(), num_fields=1, max_batch=8) == [[text]]
    assert not json_depth_exceeds(b"[" * 32 + b"]" * 32, 32) and json_depth_exceeds(b"[" * 33 + b"]" * 33, 32)


@pytest.mark.parametrize("body", [
    b'{"texts": ["a", "\\u597d", "\xe5\xa5\xbd"]}', b'{"texts": ["a"], "x": NaN}', b'{"texts": ["a"], "x": 1e400}',
    b'{"texts": ["a"], "x": 123456789012345678901234567890}', b'{"texts": ["a"], "texts": ["b"]}',
    b'{"texts": ["\\ud800"]}', b'{"texts": ["a"]} x', b'\xef\xbb\xbf{"texts": ["a"]}', b'{"texts": ["\xff"]}',
    b" [1, [2, [3]]] ", b""])
@pytest.mark.parametrize("exact_numbers", [True, False])
def test_bodies_parse_as_the_json_module_parses_them(body, exact_numbers):
    """Either parser (``json``, or orjson where numbers do not matter) takes a body exactly when
    ``json`` does, to the same value (numbers aside for orjson), and a body refused is refused
    with ``json``'s reason."""
    try:
        expected = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        with pytest.raises(RequestError, match="not valid UTF-8 JSON") as raised:
            load_json_body(body, exact_numbers)
        assert str(e) in str(raised.value)
        return
    got = load_json_body(body, exact_numbers)

    def shape(value):  # numbers as their float value: orjson reads integers beyond 64 bits as floats
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shape(v) for v in value]
        return float(value) if isinstance(value, (int, float)) and not exact_numbers else value
    assert json.dumps(shape(got)) == json.dumps(shape(expected))  # NaN and inf compare by their text


def test_nul_characters_and_odd_text_are_predicted(service, exported):
    texts = ["a\x00b", "\x00", "😀好", "\ufeff差", " " * 50]
    got, data = post(service.port, json.dumps({"texts": texts}).encode())
    assert got == 200
    expected = Predictor(exported).predict([[t] for t in texts])
    assert [p["label"] for p in data["predictions"]] == [e["label"] for e in expected]


def test_a_failure_inside_the_app_is_a_500_with_json(service, caplog):
    original = service.pool.submit

    def broken(rows, loop=None):
        raise RuntimeError("std::exception")

    service.pool.submit = broken
    try:
        got, data = post(service.port, GOOD)
    finally:
        service.pool.submit = original
    assert got == 500 and data == {"error": "internal error: RuntimeError: std::exception"}
    assert post(service.port, GOOD)[0] == 200
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
    conn.request("GET", "/metrics")
    metrics = conn.getresponse().read().decode()
    assert 'wenxin_requests_total{path="/predict",status="500"} 1.0' in metrics
    assert "wenxin_errors_total 1.0" in metrics and "wenxin_request_seconds_bucket" in metrics
    assert "wenxin_model_batch_inputs_count" in metrics
    assert "\nwenxin_predict_in_flight 0.0\n" in metrics  # a failed request is no longer in flight either


def test_many_concurrent_clients_each_get_their_own_answers(exported):
    """16 clients on 2 model threads: no dropped or failed request, every answer its own."""
    service = Service(exported, port=0, options=ServeOptions(limits=Limits(max_batch=16), model_threads=2, max_wait_ms=5))
    thread = service.start_in_thread()
    texts = [t for t, _ in make_sentences(64, seed=11)]
    expected = {t: e["label"] for t, e in zip(texts, Predictor(exported).predict([[t] for t in texts]))}
    failures = []

    def client(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
        for i in range(25):
            chunk = [texts[(k * 7 + i * 3 + j) % len(texts)] for j in range(1 + (k + i) % 4)]
            try:
                conn.request("POST", "/predict", body=json.dumps({"texts": chunk}))
                response = conn.getresponse()
                answer = json.loads(response.read())
                if response.status != 200 or [p["label"] for p in answer["predictions"]] != [expected[t] for t in chunk]:
                    failures.append((response.status, answer))
            except Exception as e:  # noqa: BLE001
                failures.append(repr(e))
        conn.close()

    clients = [threading.Thread(target=client, args=(k,)) for k in range(16)]
    for c in clients:
        c.start()
    for c in clients:
        c.join(timeout=120)
    service.stop()
    thread.join(timeout=60)
    assert not failures, failures[:3]
    assert service.pool.rows_run == sum(1 + (k + i) % 4 for k in range(16) for i in range(25))


def test_batching_returns_each_request_its_own_results_in_order(exported):
    pool = BatchingPool(exported, model_threads=1, max_batch=64, max_wait_ms=200)
    try:
        texts = [t for t, _ in make_sentences(30, seed=12)]
        requests = [[[t] for t in texts[i:i + 3]] for i in range(0, 30, 3)]
        pool._busy += pool.model_threads  # as if the model threads were busy: requests gather for max_wait_ms
        futures = [pool.submit(rows) for rows in requests]
        bad = pool.submit([["a", "b"], ["c"]][1:] + [[]])  # a row without its column fails alone
        expected = Predictor(exported).predict([[t] for t in texts])
        got = [r for future in futures for r in future.result(timeout=60)]
        pool._busy -= pool.model_threads
        assert [r["label"] for r in got] == [e["label"] for e in expected]
        assert pool.largest_batch > 3  # requests shared a model batch
        with pytest.raises(Exception, match="expected 1 columns"):
            bad.result(timeout=60)
    finally:
        pool.close()


def test_batching_sorts_a_gathered_batch_by_length_where_the_model_asks(exported, tmp_path):
    """A model whose rule is ``sorted_batch_rows`` (ERNIE's) runs the rows of requests gathered
    together sorted by length, in model batches of that many; every request still gets its own
    results in order, and the metrics see each model batch."""
    pool = BatchingPool(with_rules(exported, tmp_path / "sorted", sorted_batch_rows=4), model_threads=1, max_batch=64,
                        max_wait_ms=200, backend="paddle")
    seen = []
    pool.on_batch = seen.append
    try:
        texts = [t for t, _ in make_sentences(30, seed=13)]
        requests = [[[t] for t in texts[i:i + 5]] for i in range(0, 30, 5)]
        pool._busy += pool.model_threads  # as if the model threads were busy: requests gather for max_wait_ms
        futures = [pool.submit(rows) for rows in requests]
        expected = Predictor(exported, backend="paddle").predict([[t] for t in texts])
        got = [r for future in futures for r in future.result(timeout=60)]
        pool._busy -= pool.model_threads
        assert [r["label"] for r in got] == [e["label"] for e in expected]
        assert max(abs(a - b) for r, e in zip(got, expected) for a, b in zip(r["probs"], e["probs"])) < 1e-6
        assert pool.largest_batch == 4 and sum(seen) == 30 and len(seen) > 6  # 5 rows a request, 4 a model batch
    finally:
        pool.close()


def test_sigterm_answers_the_request_in_flight_then_exits_0(exported, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "wenxin", "cli.py"), "serve", "--model_dir", exported,
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": REPO, "GLOG_minloglevel": "2"})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        answer = answer_across_sigterm(proc, port)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert statuses(answer) == [200] and b'"predictions"' in answer
    assert proc.returncode == 0, err[-2000:]
    assert "stopped: every request in flight was answered" in err and "FatalError" not in err
    assert "POST /predict 200" in err and out == ""  # the request log line; serve has no result


def test_bad_settings_and_a_taken_port_are_one_line_each(exported):
    from wenxin.common.errors import ConfigError
    from wenxin.inference.scheduler_front import SchedulerLimits
    with pytest.raises(ConfigError) as e:
        Service(exported, port=0, workers=0,
                options=ServeOptions(limits=Limits(max_batch=0, read_timeout=float("nan")), model_threads=0,
                                     generation=SchedulerLimits(turn_prefill="sometimes")))
    assert [p.split(":")[0] for p in e.value.problems] == ["--workers", "--model_threads", "--max_batch", "--read_timeout",
                                                           "--turn_prefill"]
    assert "'sometimes' is not one of all, rows" in e.value.problems[-1]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ConfigError, match=f"--host/--port: cannot listen on 127.0.0.1:{taken.getsockname()[1]}"):
            Service(exported, port=taken.getsockname()[1])


def test_half_sent_connections_are_shed_and_health_stays_answerable(exported):
    """A client holding more connections than the service takes, each stuck in its headers and
    reopened when closed, no longer starves the others: the oldest idle connection is shed for a
    new one, so /health and predictions keep getting 200."""
    limits = Limits(max_batch=8, read_timeout=30.0, header_timeout=30.0, keep_alive=30.0, max_connections=24,
                    max_connections_per_client=12)
    running = Service(exported, port=0, options=ServeOptions(limits=limits))
    thread = running.start_in_thread()
    held = []
    try:
        def hold() -> socket.socket:
            sock = socket.create_connection(("127.0.0.1", running.port), timeout=10)
            sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nX-Slow: ")  # never finished
            return sock

        for _ in range(48):  # twice the service's connections, from one address
            held.append(hold())
        answers = []
        for _ in range(10):
            for i, sock in enumerate(held):  # the attacker reopens what was shed
                sock.setblocking(False)
                try:
                    closed = sock.recv(1) == b""
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                sock.setblocking(True)
                if closed:
                    sock.close()
                    held[i] = hold()
            conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
            conn.request("GET", "/health")
            response = conn.getresponse()
            answers.append(response.status)
            response.read()
            conn.close()
        assert answers == [200] * 10
        assert post(running.port, GOOD)[0] == 200
    finally:
        for sock in held:
            sock.close()
        running.stop()
        thread.join(timeout=60)


def test_todays_uvicorn_has_everything_the_hardened_protocol_uses():
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from wenxin.compat.uvicorn_protocol import missing_internals
    assert missing_internals(HttpToolsProtocol) == []


@pytest.mark.parametrize("protocol,stock", [(type("ChangedProtocol", (), {"on_url": lambda self, url: None}),
                                             "httptools"), (None, "h11")], ids=["changed", "gone"])
def test_a_uvicorn_whose_protocol_changed_serves_with_its_stock_one_and_a_warning(exported, monkeypatch, protocol,
                                                                                   stock):
    """A uvicorn release that renamed what the hardened protocol uses (or moved the class) must not
    break serving: the stock protocol answers, and a warning says what is lost."""
    from conftest import wenxin_log
    from wenxin.compat import uvicorn_protocol
    monkeypatch.setattr(uvicorn_protocol, "HttpToolsProtocol", protocol)
    with wenxin_log() as messages:
        running = Service(exported, port=0, options=ServeOptions(limits=Limits(header_timeout=TIMEOUT)))
    warning = [m for m in messages if "serving with uvicorn's stock" in m]
    assert len(warning) == 1 and f"stock {stock} protocol" in warning[0], messages
    assert "connection_made()" in warning[0] or "HttpToolsProtocol" in warning[0]
    assert running.server.config.http == stock
    thread = running.start_in_thread()
    try:
        assert post(running.port, GOOD)[0] == 200
    finally:
        running.stop()
        thread.join(timeout=60)
