"""A run's tracker views through the studio: VisualDL and TensorBoard started on demand behind the
studio's token and host checks, serving the run's own records (checked against metrics.jsonl);
what passes between the browser and a viewer (never the studio's cookies), redirects, the Origin
rule for a viewer's POST, viewers stopped with the studio and ones a killed studio left behind."""
import json
import os
import sys
import textwrap

import pytest

from studio_helpers import Client, make_root, serving, studio_root, wait_for_status  # noqa: F401 (the root fixture)

# A stand-in viewer: answers under its prefix with what it received (the real ones take seconds
# to start; they are tried in the slow test below).
ECHO_VIEWER = textwrap.dedent('''
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    port, prefix = int(sys.argv[1]), sys.argv[2]

    class Echo(BaseHTTPRequestHandler):
        def answer(self, status, payload, headers=()):
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Set-Cookie", "viewer=1; Path=/")
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == prefix + "/moved":
                self.answer(302, {}, [("Location", f"http://127.0.0.1:{port}{prefix}/echo?from=moved")])
            else:
                self.answer(200, {"path": self.path, "headers": dict(self.headers)})

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            self.answer(200, {"path": self.path, "body": self.rfile.read(length).decode()})

        def log_message(self, *args):
            pass

    HTTPServer(("127.0.0.1", port), Echo).serve_forever()
''')


@pytest.fixture
def echo_viewer(tmp_path, monkeypatch):
    """Registers the stand-in viewer as kind ``echo`` and every run's trackers as one echo view
    of the run's ``records`` folder."""
    from wenxin.studio import run_files, viewers
    script = tmp_path / "echo_viewer.py"
    script.write_text(ECHO_VIEWER)
    monkeypatch.setitem(viewers.VIEWER_KINDS, "echo", viewers.ViewerKind(
        "Echo", "json", lambda logdir, port, prefix: [sys.executable, str(script), str(port), prefix]))
    monkeypatch.setattr(run_files, "trackers", lambda folder, root: [
        {"name": "Echo", "open": "echo", "view": "echo", "logdir": os.path.join(folder, "records")}])


def finished_run(root, records=True):
    """A finished run in the studio's store (nothing trains), with a records folder."""
    from wenxin.studio.store import Store, database_path
    store = Store(database_path(root))
    run_id = store.add_run(name="done", kind="train", task_path="task.json", sweep_path="", overrides={},
                           command=[], folder=f"studio_runs/{1:04d}-done", restart_budget=0)
    store.update(run_id, status="finished")
    if records:
        os.makedirs(os.path.join(root, "studio_runs", "0001-done", "records"))
    return run_id


def test_a_viewer_starts_on_demand_and_sees_nothing_of_the_studios_cookies(root, monkeypatch, echo_viewer):
    make_root(root)
    run_id = finished_run(root)
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        client.get("/")
        assert server.studio.viewers.running() == []
        run = client.get(f"/api/runs/{run_id}")
        assert run["trackers"] == [{"name": "Echo", "open": "echo", "view": "echo", "url": f"/view/{run_id}/echo/",
                                    "logdir": os.path.join(root, "studio_runs", "0001-done", "records")}]
        assert server.studio.viewers.running() == []  # listing a link starts nothing

        status, _, headers = client.request("GET", f"/view/{run_id}/echo")
        assert status == 307 and headers["location"].endswith(f"/view/{run_id}/echo/")
        seen = client.get(f"/view/{run_id}/echo/data?x=1&y=%2F", headers={"Accept-Language": "zh",
                                                                         "Authorization": "Bearer no"})
        assert seen["path"] == f"/view/{run_id}/echo/data?x=1&y=%2F"  # the path and query as sent
        sent = {name.lower(): value for name, value in seen["headers"].items()}
        assert sent["accept-language"] == "zh"
        assert "cookie" not in sent and "authorization" not in sent  # the studio's secrets stay here
        assert "wenxin_studio_csrf" in client.cookies
        assert server.studio.viewers.running() == [(run_id, "echo")]

        # the viewer's cookies do not reach the browser; its redirects stay on the studio
        status, _, headers = client.request("GET", f"/view/{run_id}/echo/moved")
        assert status == 302 and headers["location"] == f"/view/{run_id}/echo/echo?from=moved"
        assert "viewer" not in client.cookies

        # a viewer's POST needs the studio's Origin (a browser always sends one), not its CSRF header
        own = f"http://localhost:{server.port}"
        raw = b'{"query": 1}'
        assert client.request("POST", f"/view/{run_id}/echo/q", raw=raw)[0] == 403
        assert client.request("POST", f"/view/{run_id}/echo/q", raw=raw, headers={"Origin": "http://evil.example"})[0] \
            == 403
        status, answer, _ = client.request("POST", f"/view/{run_id}/echo/q", raw=raw,
                                           headers={"Origin": own, "Content-Type": "text/plain"})
        assert status == 200 and answer["body"] == '{"query": 1}'

        # unknown viewers, runs and runs without records: one clear answer each
        for path, expected in ((f"/view/{run_id}/nothing/", "no viewer 'nothing'"), ("/view/99/echo/", "no run 99"),
                               ("/view/x/echo/", "no such run")):
            status, answer, _ = client.request("GET", path)
            assert status == 404 and expected in answer["error"], path
        process = server.studio.viewers._viewers[(run_id, "echo")].process
    assert process.poll() is not None  # the viewer stopped with the studio
    assert not os.listdir(os.path.join(root, ".wenxin-studio", "viewers")) or not any(
        name.endswith(".pid") for name in os.listdir(os.path.join(root, ".wenxin-studio", "viewers")))


def test_records_outside_the_root_and_missing_ones_are_refused(root, monkeypatch, tmp_path, echo_viewer):
    from wenxin.studio import run_files
    make_root(root)
    run_id = finished_run(root, records=False)
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        status, answer, _ = client.request("GET", f"/view/{run_id}/echo/")
        assert status == 404 and "no records yet" in answer["error"]
        outside = tmp_path / "elsewhere"
        outside.mkdir()
        monkeypatch.setattr(run_files, "trackers", lambda folder, root: [
            {"name": "Echo", "open": "echo", "view": "echo", "logdir": str(outside)}])
        assert "url" not in client.get(f"/api/runs/{run_id}")["trackers"][0]
        status, answer, _ = client.request("GET", f"/view/{run_id}/echo/")
        assert status == 403 and "outside the root" in answer["error"]
        assert server.studio.viewers.running() == []


def test_a_viewer_that_fails_to_start_is_one_error_with_its_log(root, monkeypatch, tmp_path, echo_viewer):
    from wenxin.studio import viewers
    monkeypatch.setitem(viewers.VIEWER_KINDS, "echo", viewers.ViewerKind(
        "Echo", "json", lambda logdir, port, prefix: [sys.executable, "-c", "raise SystemExit('no such logdir')"]))
    make_root(root)
    run_id = finished_run(root)
    with serving(root, monkeypatch) as server:
        status, answer, _ = Client(server.port).request("GET", f"/view/{run_id}/echo/")
        assert status == 502 and "Echo exited while starting (exit code 1): no such logdir" in answer["error"]


def test_a_viewer_left_by_a_killed_studio_is_stopped_by_the_next(tmp_path, echo_viewer):
    from wenxin.studio.viewers import ViewerPool
    records = tmp_path / "records"
    records.mkdir()
    first = ViewerPool(str(tmp_path / "state"), max_viewers=2)
    viewer = first.open(1, "echo", str(records))
    assert viewer.alive()
    # the studio was killed: it never closed its pool; the next studio's pool stops the orphan
    ViewerPool(str(tmp_path / "state"))
    assert viewer.process.wait(timeout=60) is not None
    # at most max_viewers at once: the least recently used one stops for a new one
    a, b = first.open(2, "echo", str(records)), first.open(3, "echo", str(records))
    first.open(2, "echo", str(records))
    c = first.open(4, "echo", str(records))
    assert a.alive() and c.alive() and b.process.wait(timeout=60) is not None
    assert sorted(first.running()) == [(2, "echo"), (4, "echo")]
    first.close()
    assert first.running() == [] and not a.alive()


def test_an_online_wandb_run_is_a_link(root, monkeypatch):
    """WandbHook writes an online run's address; the studio links it (offline: the sync command)."""
    from types import SimpleNamespace

    from wenxin.controller.hooks.trackers import WandbHook
    from wenxin.studio import run_files

    class FakeRun:
        id, dir, url = "abc123", root, "https://wandb.ai/me/wenxin/runs/abc123"

    fake = SimpleNamespace(init=lambda **kwargs: FakeRun(), Settings=lambda **kwargs: None)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    run_folder = os.path.join(root, "studio_runs", "0001-x")
    output = os.path.join(run_folder, "output")
    os.makedirs(output)
    with open(os.path.join(output, "config.json"), "w", encoding="utf-8") as f:
        json.dump({"trainer": {"visualdl": False, "hooks": [{"type": "WandbHook", "params": {"mode": "online"}}]}}, f)
    assert run_files.trackers(run_folder, root) == [
        {"name": "wandb", "open": f"wandb sync {os.path.join(output, 'wandb', 'offline-run-*')}"}]
    hook = WandbHook(mode="online")
    hook.trainer = SimpleNamespace(output_path=output)
    hook.open()
    assert run_files.trackers(run_folder, root) == [{"name": "wandb", "open": FakeRun.url, "url": FakeRun.url}]


def test_visualdl_and_tensorboard_views_show_the_runs_own_records(root, monkeypatch):
    pytest.importorskip("visualdl")
    pytest.importorskip("tensorboard")
    pytest.importorskip("tensorboardX")
    make_root(root, epoch=2)
    with serving(root, monkeypatch, host="0.0.0.0", token="viewer-t0ken-for-tests") as server:
        client = Client(server.port)
        status, _, _ = client.request("GET", "/?token=viewer-t0ken-for-tests")
        assert status == 303
        client.get("/")  # the page's CSRF cookie
        run_id = client.post("/api/runs", {"task": "task.json", "values": {"trainer.hooks": ["TensorBoardHook"],
                                                                  "trainer.visualdl": True}})["id"]
        run = wait_for_status(client, run_id, "finished", "failed")
        assert run["status"] == "finished", run
        links = {t["name"]: t.get("url") for t in run["trackers"]}
        assert links == {"VisualDL": f"/view/{run_id}/visualdl/", "TensorBoard": f"/view/{run_id}/tensorboard/"}
        with open(os.path.join(root, "studio_runs", f"{run_id:04d}-task", "output", "logs", "metrics.jsonl"),
                  encoding="utf-8") as f:
            losses = {r["step"]: r["loss"] for r in map(json.loads, f) if r["tag"] == "train"}
        assert len(losses) >= 3

        assert Client(server.port).request("GET", f"/view/{run_id}/visualdl/")[0] == 401  # behind the token
        status, _, headers = client.request("GET", f"/view/{run_id}/visualdl/")
        assert status == 302 and headers["location"] == f"/view/{run_id}/visualdl/index"
        assert "<title>VisualDL</title>" in client.get(f"/view/{run_id}/visualdl/index")
        runs = client.get(f"/view/{run_id}/visualdl/api/runs")["data"]
        shown = client.get(f"/view/{run_id}/visualdl/api/scalar/list?run={runs[0]}&tag=train/loss")["data"]
        assert {row[1]: row[2] for row in shown} == pytest.approx(losses, rel=1e-6)  # [time, step, value]

        assert "<tb-webapp>" in client.get(f"/view/{run_id}/tensorboard/")
        shown = client.get(f"/view/{run_id}/tensorboard/data/plugin/scalars/scalars?run=.&tag=train/loss")
        assert {row[1]: row[2] for row in shown} == pytest.approx(losses, rel=1e-6)
        assert sorted(server.studio.viewers.running()) == [(run_id, "tensorboard"), (run_id, "visualdl")]
        viewers = list(server.studio.viewers._viewers.values())
    assert all(not viewer.alive() for viewer in viewers)
