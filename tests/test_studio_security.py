"""wenxin studio from outside: the Host check on loopback, the token off loopback (query once, then
a cookie; a bearer header for API clients), cross-site request forgery, body limits, paths
confined to the root, and user values that never reach a shell. Each is tried over real HTTP
against a served studio; no run is trained here."""
import os

import pytest

from studio_helpers import Client, make_root, serving


@pytest.fixture
def root(tmp_path):
    folder = str(tmp_path / "root")
    os.makedirs(folder)
    make_root(folder)
    return folder


def test_on_loopback_only_requests_addressed_to_localhost_are_answered(root, monkeypatch):
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        assert client.request("GET", "/")[0] == 200
        for host in ("evil.example", "evil.example:80", "192.168.1.10"):  # DNS rebinding names another host
            status, answer, _ = client.request("GET", "/api/runs", headers={"Host": host})
            assert status == 421 and "localhost" in answer, host
        assert client.request("GET", "/", headers={"Host": f"127.0.0.1:{server.port}"})[0] == 200
        assert client.request("GET", "/", headers={"Host": f"[::1]:{server.port}"})[0] == 200


def test_off_loopback_the_token_is_needed_and_becomes_a_cookie(root, monkeypatch):
    with serving(root, monkeypatch, host="0.0.0.0", token="s3cret-token") as server:
        assert not server.generated_token
        client = Client(server.port)
        status, answer, _ = client.request("GET", "/api/runs", headers={"Host": "studio.lan"})
        assert status == 401 and "token" in answer
        assert client.request("GET", "/?token=wrong", headers={"Host": "studio.lan"})[0] == 401
        status, _, headers = client.request("GET", "/launch?task=task.json&token=s3cret-token",
                                            headers={"Host": "studio.lan"})
        assert status == 303 and headers["location"] == "/launch?task=task.json"  # the token leaves the address
        assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
        assert client.cookies["wenxin_studio_token"] == "s3cret-token"
        assert client.request("GET", "/api/runs", headers={"Host": "studio.lan"})[0] == 200
        api = Client(server.port)
        assert api.request("GET", "/api/runs", headers={"Authorization": "Bearer s3cret-token"})[0] == 200
        assert api.request("GET", "/api/runs", headers={"Authorization": "Bearer s3cret-tokeN"})[0] == 401


def test_off_loopback_without_a_token_one_is_generated(root, monkeypatch):
    monkeypatch.delenv("WENXIN_STUDIO_TOKEN", raising=False)
    with serving(root, monkeypatch, host="0.0.0.0") as server:
        assert server.generated_token and len(server.token) >= 24
        assert Client(server.port).request("GET", "/")[0] == 401
    monkeypatch.setenv("WENXIN_STUDIO_TOKEN", "from-the-environment")
    with serving(root, monkeypatch, host="0.0.0.0") as server:
        assert server.token == "from-the-environment" and not server.generated_token


def test_state_changes_need_the_pages_csrf_header_json_and_the_same_origin(root, monkeypatch):
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        client.get("/")  # the page visit that sets the CSRF cookie
        assert client.cookies.get("wenxin_studio_csrf")
        launch = {"task": "task.json", "values": {"trainer.epoch": 1}}
        # a cross-site form: no header, or the wrong one, or form encoding, or another origin
        assert client.request("POST", "/api/runs", launch, csrf=False)[0] == 403
        assert client.request("POST", "/api/runs", launch, headers={"X-Studio-CSRF": "guess"})[0] == 403
        status, answer, _ = client.request(
            "POST", "/api/runs", raw=b"task=task.json", headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "X-Studio-CSRF": client.cookies["wenxin_studio_csrf"]})
        assert status == 403 and "JSON" in answer
        status, answer, _ = client.request("POST", "/api/runs", launch, headers={"Origin": "http://evil.example"})
        assert status == 403 and "another origin" in answer
        stranger = Client(server.port)  # no cookie at all
        assert stranger.request("POST", "/api/runs", launch, headers={"X-Studio-CSRF": ""})[0] == 403
        assert client.get("/api/runs")["runs"] == []  # none of them queued a run


def test_bodies_over_the_limit_and_malformed_requests_are_refused(root, monkeypatch):
    with serving(root, monkeypatch, max_body_bytes=4096) as server:
        client = Client(server.port)
        client.get("/")
        status, answer, _ = client.request("POST", "/api/runs", {"task": "task.json", "name": "x" * 10000})
        assert status == 413
        for raw in (b"{not json", b"[1, 2]", b'"text"'):
            status, answer, _ = client.request("POST", "/api/runs", raw=raw, headers={
                "Content-Type": "application/json", "X-Studio-CSRF": client.cookies["wenxin_studio_csrf"]})
            assert status == 400, raw
        for path in ("/api/runs/abc", "/api/runs/99", "/api/runs/1" + "0" * 30, "/api/runs/99/metrics"):
            assert client.request("GET", path)[0] == 404, path
        assert client.request("GET", "/api/runs/1/metrics?since=-5")[0] in (400, 404)
        status, answer, _ = client.request("POST", "/api/runs", {"task": "task.json", "name": "y" * 200})
        assert status == 400 and "name" in answer["error"]


def test_paths_stay_inside_the_root(root, monkeypatch, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text(open(os.path.join(root, "task.json"), encoding="utf-8").read(), encoding="utf-8")
    os.symlink(str(outside), os.path.join(root, "link.json"))
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        client.get("/")
        assert "link.json" not in client.get("/api/tasks")["tasks"]  # it leads out of the root
        for task in ("../outside.json", str(outside), "link.json", "data/../../outside.json"):
            status, answer, _ = client.request("GET", f"/api/form?task={task}")
            assert status == 400 and "outside the studio's root" in answer["error"], task
            status, answer, _ = client.request("POST", "/api/runs", {"task": task, "values": {}})
            assert status == 400 and "outside the studio's root" in answer["error"], task
        status, answer, _ = client.request("POST", "/api/runs", {"task": "task.json", "values": {},
                                                                 "sweep": "../../etc/passwd"})
        assert status == 400 and "outside the studio's root" in answer["error"]
        assert client.request("GET", "/static/../task.json")[0] == 404
        assert client.request("GET", "/static/%2e%2e/task.json")[0] == 404


def test_a_value_never_reaches_a_shell(root, monkeypatch):
    """A run's name and its values go into an argument list; shell syntax in them is only text."""
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        client.get("/")
        marker = os.path.join(root, "pwned")
        name = "x; touch pwned; $(touch pwned) `touch pwned`"
        started = client.post("/api/runs", {"task": "task.json", "name": name, "values": {"trainer.epoch": 1}})
        run = server.studio.store.run(started["id"])
        assert run["name"] == name
        assert all(marker not in part for part in run["command"])  # the name is not in the command at all
        assert not set(";$`() /") & set(os.path.basename(run["folder"]))  # the folder's name is made safe
        from studio_helpers import wait_for_status
        wait_for_status(client, started["id"], "finished", "failed")
        assert not os.path.exists(marker)


def test_the_command_prints_its_generated_token_once_and_stops_on_sigterm(root):
    import re
    import signal
    import subprocess
    import sys

    from conftest import read_until
    env = {k: v for k, v in os.environ.items() if k != "WENXIN_STUDIO_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "wenxin.cli", "studio", "--root", root, "--host", "0.0.0.0",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        said = read_until(proc.stderr, "printed this once", timeout=120)
        port, token = re.search(r"open http://[^:]+:(\d+)/\?token=(\S+)", said).groups()
        client = Client(int(port))
        assert client.request("GET", "/api/runs", headers={"Host": "studio.lan"})[0] == 401
        assert client.request("GET", f"/?token={token}", headers={"Host": "studio.lan"})[0] == 303
        assert client.request("GET", "/api/runs", headers={"Host": "studio.lan"})[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert proc.stdout.read() == ""  # the address and token go to the log (stderr), not stdout
    finally:
        if proc.poll() is None:
            proc.kill()
