"""``wenxin serve --workers N``: several service processes on one socket, supervised.

Each test starts real worker processes (each loads Paddle and the model: 2-3 s)."""
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading

import pytest

from conftest import REPO, answer_across_sigterm, make_sentences, wait_for
from wenxin.data.export_bundle import seal_export
from wenxin.common.errors import InferenceError
from wenxin.inference.predictor import Predictor


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def call(port: int, method: str, path: str, body: dict = None) -> tuple:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json"} if body is not None else {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data


def serving_pids(log_path: str) -> list:
    with open(log_path, encoding="utf-8") as f:
        return [int(pid) for pid in re.findall(r"worker \d of \d serving \(pid (\d+)\)", f.read())]


def predict_concurrently(port: int, texts: list, expected: dict, clients: int = 6) -> list:
    failures = []

    def client(part: list) -> None:
        for text in part:
            status, data = call(port, "POST", "/predict", {"texts": [text]})
            if status != 200 or json.loads(data)["predictions"][0]["label"] != expected[text]:
                failures.append((text, status, data[:200]))

    threads = [threading.Thread(target=client, args=(texts[k::clients],)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return failures


def test_workers_answer_add_up_metrics_replace_a_dead_one_and_drain_on_sigterm(exported_classifier, tmp_path):
    exported, port, log_path = exported_classifier, free_port(), str(tmp_path / "serve.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "wenxin.cli", "serve", "--model_dir", exported,
                                 "--port", str(port), "--workers", "2"], stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": REPO, "GLOG_minloglevel": "2"})
    try:
        wait_for(lambda: len(serving_pids(log_path)) == 2 or proc.poll() is not None, what="two workers")
        first_pids = serving_pids(log_path)
        assert len(first_pids) == 2, open(log_path).read()[-3000:]
        status, health = call(port, "GET", "/health")
        assert status == 200 and json.loads(health)["workers"] == 2

        texts = [t for t, _ in make_sentences(48, seed=21)]
        expected = {t: r["label"] for t, r in zip(texts, Predictor(exported).predict([[t] for t in texts]))}
        assert predict_concurrently(port, texts, expected) == []
        # /metrics adds up every worker's requests, whichever worker answers the scrape
        for _ in range(3):
            metrics = call(port, "GET", "/metrics")[1].decode()
            assert 'wenxin_requests_total{path="/predict",status="200"} 48.0' in metrics, metrics[:2000]

        os.kill(first_pids[0], signal.SIGKILL)  # a worker dies: another takes its place
        wait_for(lambda: len(serving_pids(log_path)) == 3, what="a replacement worker")
        assert f"(pid {first_pids[0]}) died with status -9; starting a new one" in open(log_path).read()
        assert predict_concurrently(port, texts, expected) == []
        metrics = call(port, "GET", "/metrics")[1].decode()
        assert 'wenxin_requests_total{path="/predict",status="200"} 96.0' in metrics  # the dead worker's count stays

        # SIGTERM: a request still arriving is answered, then every process exits, status 0
        answer = answer_across_sigterm(proc, port)
        assert proc.wait(timeout=90) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    output = open(log_path, encoding="utf-8").read()
    assert answer.startswith(b"HTTP/1.1 200 ") and b'"predictions"' in answer
    assert "stopped: every request in flight was answered" in output and "FatalError" not in output
    assert re.search(r"worker \d: POST /predict 200", output)  # each request's line names its worker
    for pid in serving_pids(log_path):
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_a_model_the_workers_cannot_load_is_one_error(exported_classifier, tmp_path):
    broken = str(tmp_path / "broken")
    shutil.copytree(exported_classifier, broken)
    for name in os.listdir(broken):
        if name.endswith(".pdiparams"):
            with open(os.path.join(broken, name), "r+b") as f:
                f.truncate(100)
        if name == "model.onnx":
            os.remove(os.path.join(broken, name))
    seal_export(broken)  # damaged and sealed again, so the workers' own load fails
    result = subprocess.run([sys.executable, "-m", "wenxin.cli", "serve", "--model_dir", broken, "--port",
                             str(free_port()), "--workers", "2"], capture_output=True, text=True, timeout=180,
                            env={**os.environ, "PYTHONPATH": REPO, "GLOG_minloglevel": "2"})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.count("error:") == 1 and f"{broken}: cannot load the model" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout and "FatalError" not in result.stderr + result.stdout


def test_workers_that_keep_dying_stop_the_service(exported_classifier, monkeypatch):
    from wenxin.inference import workers as workers_module
    monkeypatch.setattr(workers_module, "GIVE_UP_DEATHS", 2)
    service = workers_module.ServiceWorkers(exported_classifier, port=0, workers=1)
    thread = service.start_in_thread()
    killed = service.pids[0]
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: service.pids[0] != killed, what="a replacement")
    assert call(service.port, "GET", "/health")[0] == 200  # the replacement answers
    os.kill(service.pids[0], signal.SIGKILL)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert isinstance(service.error, InferenceError) and "2 workers died within 60 s" in str(service.error)


@pytest.mark.slow
def test_workers_die_with_a_sigkilled_supervisor_and_the_port_can_be_served_again(exported_classifier, tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": REPO, "GLOG_minloglevel": "2"}
    command = [sys.executable, "-m", "wenxin.cli", "serve", "--model_dir", exported_classifier, "--port", str(port),
               "--workers", "2"]
    logs = [str(tmp_path / "first.log"), str(tmp_path / "second.log")]
    with open(logs[0], "w") as log:
        first = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for(lambda: len(serving_pids(logs[0])) == 2 or first.poll() is not None, what="two workers")
        workers = serving_pids(logs[0])
        assert len(workers) == 2, open(logs[0]).read()[-3000:]
        first.kill()  # SIGKILL: the supervisor cannot stop its workers itself
        first.wait(timeout=60)
        wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z"
                                 for pid in workers), what="the orphaned workers to exit")
        with open(logs[1], "w") as log:
            second = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_for(lambda: len(serving_pids(logs[1])) == 2 or second.poll() is not None, what="a new service")
            assert second.poll() is None, open(logs[1]).read()[-3000:]
            assert call(port, "GET", "/health")[0] == 200
        finally:
            second.terminate()
            second.wait(timeout=90)
    finally:
        if first.poll() is None:
            first.kill()
        for pid in serving_pids(logs[0]):  # a worker left serving would hold the port for the next test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


STOPPED_BEFORE_SERVING = """
import os, signal, sys
from wenxin.inference.server import ServeOptions, Service, listen
from wenxin.common.process import stop_on_signals
service = Service(sys.argv[1], options=ServeOptions(), sock=listen("127.0.0.1", 0), workers=2)
stop_on_signals(service.stop)  # as a worker does
os.kill(os.getpid(), signal.SIGTERM)  # as die_with_parent sends it when the supervisor was SIGKILLed
service.run()
print("returned without serving")
"""


def test_a_worker_signalled_before_it_serves_stops_instead_of_serving_on(exported_classifier):
    """The window a worker has between loading the model and uvicorn's own signal handlers: a
    SIGTERM that arrives there (a supervisor SIGKILLed just after its workers loaded) stops it.
    With the handler that did nothing, the worker served on as an orphan (a CI run's failure)."""
    env = {**os.environ, "PYTHONPATH": REPO, "GLOG_minloglevel": "2"}
    worker = subprocess.Popen([sys.executable, "-c", STOPPED_BEFORE_SERVING, exported_classifier], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = worker.communicate(timeout=120)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0 and "returned without serving" in output, output[-3000:]
