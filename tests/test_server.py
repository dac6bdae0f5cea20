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
