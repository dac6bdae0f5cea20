"""The HTTP prediction service: endpoints, limits, clear 4xx errors, and concurrent clients."""
import http.client
import json
import sys
import threading

import numpy as np
import pytest

from conftest import make_sentences
from wenxin.inference.predictor import Predictor
from wenxin.inference.server import Limits, ServeOptions, Service


@pytest.fixture(scope="module")
def served(exported_classifier):
    exported = exported_classifier
    limits = Limits(max_batch=8, max_body_bytes=2048, read_timeout=1.0, keep_alive=1.0)
    service = Service(exported, port=0, options=ServeOptions(limits=limits, model_threads=2))
    thread = service.start_in_thread()
    yield exported, service.port
    service.stop()
    thread.join(timeout=60)


def request(port, method, path, body=None, raw=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    payload = raw if raw is not None else (json.dumps(body).encode("utf-8") if body is not None else None)
    conn.request(method, path, body=payload, headers=headers or {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = json.loads(response.read().decode("utf-8"))
    conn.close()
    return response.status, data


def test_health_and_predict_match_the_predictor(served):
    folder, port = served
    status, health = request(port, "GET", "/health")
    assert status == 200 and health["status"] == "ok" and health["labels"] == ["0", "1"] and health["model_threads"] == 2
    assert health["onednn"] == ("off (the model's rule)" if health["backend"] == "paddle" else None)  # BoW's rule
    # uvicorn runs uvloop where it is installed (a dependency, but on Windows)
    assert health["event_loop"] == ("asyncio" if sys.platform == "win32" else "uvloop")
    texts = ["好棒的书", "太差了", ""]
    status, result = request(port, "POST", "/predict", {"texts": texts})
    assert status == 200
    expected = Predictor(folder).predict([[t] for t in texts])
    assert [p["label"] for p in result["predictions"]] == [e["label"] for e in expected]
    np.testing.assert_allclose([p["probs"] for p in result["predictions"]], [e["probs"] for e in expected],
                               atol=1e-6)
    status, result = request(port, "POST", "/predict", {"rows": [["好"]]})
    assert status == 200 and len(result["predictions"]) == 1


@pytest.mark.parametrize("body,raw,status,message", [
    (None, b"{not json", 400, "not valid UTF-8 JSON"),
    (None, b"\xff\xfe", 400, "not valid UTF-8 JSON"),
    ([1, 2], None, 400, 'expected an object with "texts"'),
    ({"texts": "one string"}, None, 400, '"texts" must be a list of strings'),
    ({"texts": ["a", 3]}, None, 400, '"texts" must be a list of strings'),
    ({"rows": [["a", "b"]]}, None, 400, '"rows" must be a list of lists of 1 strings'),
    ({"texts": []}, None, 400, "nothing to predict"),
    ({"texts": ["a"] * 9}, None, 413, "the limit is 8"),
    ({"texts": ["长" * 1000]}, None, 413, "the limit is 2048"),
])
def test_malformed_requests_get_clear_4xx(served, body, raw, status, message):
    _, port = served
    got_status, data = request(port, "POST", "/predict", body=body, raw=raw)
    assert got_status == status and message in data["error"]


def test_unknown_endpoints(served):
    _, port = served
    assert request(port, "GET", "/nope")[0] == 404
    assert request(port, "POST", "/health", {"texts": ["a"]})[0] == 405


def test_concurrent_clients_get_their_own_answers(served):
    folder, port = served
    texts = [t for t, _ in make_sentences(40, seed=9)]
    expected = {t: e["label"] for t, e in zip(texts, Predictor(folder).predict([[t] for t in texts]))}
    errors = []

    def client(chunk):
        for i in range(0, len(chunk), 4):
            status, result = request(port, "POST", "/predict", {"texts": chunk[i:i + 4]})
            if status != 200 or [p["label"] for p in result["predictions"]] != [expected[t] for t in chunk[i:i + 4]]:
                errors.append((status, result))

    threads = [threading.Thread(target=client, args=(texts[k::4],)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_line_separators_inside_texts_keep_one_prediction_per_text(served):
    """The service never splits a text: U+2028, U+2029, \\x85, \\x0b, \\x0c and \\r stay inside it."""
    folder, port = served
    texts = ["好\u2028棒", "差\u2029了", "a\x85b", "c\x0bd", "e\x0cf", "g\rh", "好\n差"]
    status, result = request(port, "POST", "/predict", {"texts": texts})
    assert status == 200 and len(result["predictions"]) == len(texts)
    expected = Predictor(folder).predict([[t] for t in texts])
    assert [p["label"] for p in result["predictions"]] == [e["label"] for e in expected]


KEY = "k3y-of-the-service-0123456789"


@pytest.fixture(scope="module")
def served_with_key(exported_classifier):
    service = Service(exported_classifier, port=0, options=ServeOptions(api_key=KEY))
    thread = service.start_in_thread()
    yield service.port
    service.stop()
    thread.join(timeout=60)


def test_a_service_with_an_api_key_answers_only_requests_that_carry_it(served_with_key):
    """Issue 67: ``Authorization: Bearer KEY`` as OpenAI's clients send it; ``/health`` stays open
    for probes; a missing or wrong key is a 401 with ``WWW-Authenticate`` (OpenAI's error object
    on its paths), and OpenAI's own client gets in with the key."""
    port = served_with_key
    body = {"texts": ["好书"]}
    for headers in ({}, {"Authorization": "Bearer wrong-key-of-the-same-len"}, {"Authorization": KEY},
                    {"Authorization": f"Basic {KEY}"}, {"Authorization": f"Bearer {KEY}x"}):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/predict", body=json.dumps(body), headers={"Content-Type": "application/json", **headers})
        response = conn.getresponse()
        answer = json.loads(response.read())
        assert response.status == 401 and response.getheader("WWW-Authenticate") == 'Bearer realm="wenxin"', headers
        assert "an API key is needed" in answer["error"]
        conn.close()
    status, answer = request(port, "POST", "/predict", body, headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200 and len(answer["predictions"]) == 1
    assert request(port, "GET", "/health")[0] == 200
    status, answer = request(port, "GET", "/v1/models")
    assert status == 401 and answer["error"]["code"] == "invalid_api_key" and "message" in answer["error"]
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
    assert len(client.models.list().data) == 1
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x" * 20, max_retries=0).models.list()


def test_serving_beyond_loopback_needs_a_key_or_says_none(monkeypatch, capsys, exported_classifier):
    from conftest import assert_one_error_block
    from wenxin.cli import main
    from wenxin.common.errors import ConfigError
    from wenxin.inference.api_key import API_KEY_VARIABLE, resolve_api_key
    monkeypatch.delenv(API_KEY_VARIABLE, raising=False)
    assert resolve_api_key(None, "127.0.0.1") is None and resolve_api_key(None, "::1") is None
    assert resolve_api_key("none", "0.0.0.0") is None  # on purpose
    assert resolve_api_key(KEY, "0.0.0.0") == KEY
    monkeypatch.setenv(API_KEY_VARIABLE, KEY)
    assert resolve_api_key(None, "0.0.0.0") == KEY
    for key, said in (("short", "at least 16 visible ASCII characters"), ("with a space in it!!", "without spaces")):
        with pytest.raises(ConfigError, match=said):
            resolve_api_key(key, "127.0.0.1")
    monkeypatch.delenv(API_KEY_VARIABLE)
    code = main(["serve", "--model_dir", exported_classifier, "--host", "0.0.0.0", "--port", "0"])
    captured = capsys.readouterr()
    assert_one_error_block(code, captured.out, captured.err, ["--host 0.0.0.0 serves beyond this machine",
                                                              "--api_key none"])
