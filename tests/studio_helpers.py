"""Helpers of the studio's tests: a root with a small task, a studio served from a thread, an
HTTP client with cookies, and waiting for a run's state (never for a number of seconds)."""
from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import time
from http.cookies import SimpleCookie
from typing import Any, Dict, Iterator, Optional, Tuple

import pytest

from conftest import make_sentences, task_config, write_config, write_tsv

pytest.importorskip("starlette", reason="wenxin studio needs the studio extra")
pytest.importorskip("psutil", reason="wenxin studio needs the studio extra")

# a run that has not reached its state by then is a failure, not a slow machine
WAIT_SECONDS = int(os.environ.get("WENXIN_TEST_WAIT", "600"))


def make_root(root: str, epoch: int = 3, **trainer: Any) -> str:
    """A root folder with ``data/`` and ``task.json`` (relative data paths, as a user's project)."""
    for name, seed, n in (("train", 1, 240), ("dev", 2, 60), ("test", 3, 60)):
        write_tsv(os.path.join(root, "data", f"{name}.tsv"), make_sentences(n, seed))
    config = task_config("data", "./output/unused", epoch=epoch, **{"train_log_step": 5, **trainer})
    config["trainer"]["type"] = "CustomTrainer"
    write_config(os.path.join(root, "task.json"), config)
    return root


class Client:
    """HTTP to the studio with a cookie jar, as a browser keeps one."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.port = port
        self.host = host
        self.cookies: Dict[str, str] = {}

    def request(self, method: str, path: str, body: Any = None, headers: Optional[Dict[str, str]] = None,
                csrf: bool = True, raw: Optional[bytes] = None) -> Tuple[int, Any, Dict[str, str]]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=120)
        sent = {"Host": f"localhost:{self.port}"}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        data = raw
        if method == "POST" and raw is None:
            data = json.dumps(body if body is not None else {}).encode()
            sent["Content-Type"] = "application/json"
            if csrf and "wenxin_studio_csrf" in self.cookies:
                sent["X-Studio-CSRF"] = self.cookies["wenxin_studio_csrf"]
        sent.update(headers or {})
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        payload = response.read()
        answer = {k.lower(): v for k, v in response.getheaders()}
        for value in response.headers.get_all("Set-Cookie") or []:
            cookie: SimpleCookie = SimpleCookie()
            cookie.load(value)
            self.cookies.update({name: morsel.value for name, morsel in cookie.items()})
        connection.close()
        try:
            content: Any = json.loads(payload)
        except ValueError:
            content = payload.decode("utf-8", "replace")
        return response.status, content, answer

    def get(self, path: str, **kwargs: Any) -> Any:
        status, content, _ = self.request("GET", path, **kwargs)
        assert status == 200, (path, status, content)
        return content

    def post(self, path: str, body: Any = None, expect: int = 200) -> Any:
        status, content, _ = self.request("POST", path, body)
        assert status == expect, (path, status, content)
        return content


@contextlib.contextmanager
def serving(root: str, monkeypatch: Any, **settings: Any) -> Iterator[Any]:
    """A studio over ``root`` served from a thread; stopped at the end (its runs go on)."""
    from wenxin.studio.server import StudioServer
    monkeypatch.chdir(root)
    settings.setdefault("restart_backoff", (0,))  # a test that waits on back-off asks for it
    server = StudioServer(root, port=0, **settings)
    thread = server.start_in_thread()
    try:
        yield server
    finally:
        server.stop()
        thread.join(WAIT_SECONDS)  # its root lock is released once it has stopped serving
        server.studio.close()


@pytest.fixture(name="root")
def studio_root(tmp_path: Any) -> Iterator[str]:
    """An empty root folder; every keeper and run started over it is killed at the end."""
    folder = str(tmp_path / "root")
    os.makedirs(folder)
    yield folder
    kill_processes_of(folder)


def wait_for(client: Client, run_id: int, predicate: Any, what: str) -> Dict[str, Any]:
    deadline = time.time() + WAIT_SECONDS
    run: Dict[str, Any] = {}
    while time.time() < deadline:
        run = client.get(f"/api/runs/{run_id}")
        if predicate(run):
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} never {what}: {run.get('status')} {run.get('events')}")


def wait_for_status(client: Client, run_id: int, *statuses: str) -> Dict[str, Any]:
    return wait_for(client, run_id, lambda run: run["status"] in statuses, f"became {statuses}")


def wait_for_checkpoint(client: Client, run_id: int) -> Dict[str, Any]:
    """Until the run is running and has saved a checkpoint (so a restart has one to continue from)."""
    return wait_for(client, run_id, lambda run: run["status"] == "running" and any(
        c["kind"] == "periodic" for c in run["checkpoints"].get("checkpoints", [])), "saved a checkpoint")


def kill_processes_of(root: str) -> None:
    """SIGKILL every keeper and run the studio's state knows (a failed test leaves none behind)."""
    from wenxin.studio.store import Store, database_path
    if not os.path.isfile(database_path(root)):
        return
    import psutil
    for run in Store(database_path(root)).runs():
        for pid in (run["keeper_pid"], run["train_pid"]):
            with contextlib.suppress(psutil.Error, OSError, TypeError):
                if any("wenxin" in part for part in psutil.Process(pid).cmdline()):  # not a reused pid
                    os.kill(pid, signal.SIGKILL)


def store_run(root: str, run_id: int) -> Dict[str, Any]:
    from wenxin.studio.store import Store, database_path
    run = Store(database_path(root)).run(run_id)
    assert run is not None
    return run
