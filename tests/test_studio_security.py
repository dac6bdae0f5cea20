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
    with serving(root, monkeypatch, host="0.0.0.0", token="s3cret-token-for-tests") as server:
        assert not server.generated_token
        client = Client(server.port)
        status, answer, _ = client.request("GET", "/api/runs", headers={"Host": "studio.lan"})
        assert status == 401 and "token" in answer
        assert client.request("GET", "/?token=wrong", headers={"Host": "studio.lan"})[0] == 401
        status, _, headers = client.request("GET", "/launch?task=task.json&token=s3cret-token-for-tests",
                                            headers={"Host": "studio.lan"})
        assert status == 303 and headers["location"] == "/launch?task=task.json"  # the token leaves the address
        assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
        assert client.cookies["wenxin_studio_token"] == "s3cret-token-for-tests"
        assert client.request("GET", "/api/runs", headers={"Host": "studio.lan"})[0] == 200
        api = Client(server.port)
        assert api.request("GET", "/api/runs", headers={"Authorization": "Bearer s3cret-token-for-tests"})[0] == 200
        assert api.request("GET", "/api/runs", headers={"Authorization": "Bearer s3cret-token-for-testS"})[0] == 401
        # signed in by its cookie, a browser's request still needs the CSRF header (another site's could be it)
        launch = {"task": "task.json", "values": {"trainer.epoch": 1}}
        assert client.request("POST", "/api/runs", launch, csrf=False, headers={"Host": "studio.lan"})[0] == 403
        assert client.get("/api/runs", headers={"Host": "studio.lan"})["runs"] == []


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


def test_path_valued_keys_are_confined_by_their_schema_type_not_their_name(root, monkeypatch):
    import json

    from wenxin.config.task_schema import ROOT
    with open(os.path.join(root, "task.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["studio"] = {"form": ["trainer.epoch", "trainer.load_parameters", "trainer.load_checkpoint"]}
    with open(os.path.join(root, "task.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    kept = ROOT["trainer"].children["checkpoints"].children
    assert kept["load_parameters"].path and kept["load_checkpoint"].path
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        client.get("/")
        controls = {f["key"]: f["control"] for f in client.get("/api/form?task=task.json")["fields"]}
        # the task file's studio.form names flat keys: the form shows them in their group
        assert controls["trainer.checkpoints.load_parameters"] == controls["trainer.checkpoints.load_checkpoint"] == "path"
        for key in ("trainer.checkpoints.load_parameters", "trainer.checkpoints.load_checkpoint"):
            for value in ("/etc", "../../outside"):
                status, answer, _ = client.request("POST", "/api/runs", {"task": "task.json", "values": {key: value}})
                assert status == 400 and answer["error"].startswith(f"{key}: ") \
                    and "outside the studio's root" in answer["error"], (key, value, answer)
        assert client.get("/api/runs")["runs"] == []


def test_every_key_named_like_a_path_is_typed_as_one():
    """A guard for new keys: one named ``*_path``, ``*_dir``, ``*_file`` is a path by its type too."""
    from wenxin.config.schema import Key
    from wenxin.config.task_schema import ROOT

    def walk(schema, prefix):
        for name, key in schema.items():
            yield f"{prefix}{name}", key
            if isinstance(key, Key) and key.children:
                yield from walk(key.children, f"{prefix}{name}.")
    named = [(path, key) for path, key in walk(ROOT, "") if path.endswith(("path", "_dir", "_file"))]
    assert len(named) >= 6
    assert [path for path, key in named if not key.path] == []


def test_a_short_token_is_refused_and_the_token_stays_out_of_the_environment_of_children(root, monkeypatch):
    from wenxin.common.errors import ConfigError
    from wenxin.studio.server import StudioServer
    monkeypatch.chdir(root)
    with pytest.raises(ConfigError, match=r"--token: 1 characters; a token needs at least 16"):
        StudioServer(root, port=0, host="0.0.0.0", token="x")
    monkeypatch.setenv("WENXIN_STUDIO_TOKEN", "fifteen-chars-x")
    with pytest.raises(ConfigError, match=r"\$WENXIN_STUDIO_TOKEN: 15 characters"):
        StudioServer(root, port=0, host="0.0.0.0")


def test_deeply_nested_json_is_a_400_not_a_traceback(root, monkeypatch, caplog):
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        client.get("/")
        for depth in (100, 100_000):
            raw = b'{"task": "task.json", "values": ' + b"[" * depth + b"]" * depth + b"}"
            status, answer, _ = client.request("POST", "/api/runs", raw=raw, headers={
                "Content-Type": "application/json", "X-Studio-CSRF": client.cookies["wenxin_studio_csrf"]})
            assert status == 400 and "nests deeper" in answer["error"], (depth, status, answer)
    assert "Traceback" not in caplog.text


def test_a_relative_root_is_the_folder_it_names_from_where_it_was_given(root, monkeypatch):
    from wenxin.studio.server import StudioServer
    monkeypatch.chdir(os.path.dirname(root))
    server = StudioServer(os.path.basename(root), port=0)
    thread = server.start_in_thread()
    try:
        assert server.root == root and os.getcwd() == root
        assert "task.json" in Client(server.port).get("/api/tasks")["tasks"]
    finally:
        server.stop()
        thread.join(60)
    assert not os.path.exists(os.path.join(root, os.path.basename(root)))


def test_the_printed_addresses_are_the_ones_it_answers_at(root, monkeypatch):
    from wenxin.studio.server import StudioServer
    from wenxin.studio.sign_in import machine_addresses
    monkeypatch.chdir(root)
    for host, expected in (("127.0.0.1", "localhost"), ("127.0.0.2", "127.0.0.2")):
        server = StudioServer(root, host=host, port=0)
        thread = server.start_in_thread()
        try:
            assert server.urls == [f"http://{expected}:{server.port}/"]
            if host != "127.0.0.1":  # the address printed is one that answers
                assert Client(server.port, host=host).request(
                    "GET", "/", headers={"Host": f"{host}:{server.port}"})[0] == 200
        finally:
            server.stop()
            thread.join(60)
    server = StudioServer(root, host="0.0.0.0", port=0, token="an-address-test-token")
    try:
        own = machine_addresses()
        assert server.urls == [f"http://localhost:{server.port}/"] + [f"http://{a}:{server.port}/" for a in own]
        assert all(not a.startswith("127.") for a in own)
    finally:
        server.studio.close()
        server.lock.release()
        server.socket.close()


def test_a_second_studio_over_the_same_root_is_refused_naming_the_first(root, monkeypatch):
    from wenxin.common.errors import ConfigError
    from wenxin.studio.server import StudioServer
    with serving(root, monkeypatch) as first:
        with pytest.raises(ConfigError, match=rf"another studio already serves {root}, at "
                                              rf"http://localhost:{first.port}/ \(pid {os.getpid()}\)"):
            StudioServer(root, port=0)
    StudioServer(root, port=0).lock.release()  # once the first has stopped, the root is free again


def decode_terminal_qr(text, width=None):
    """The module matrix (1: dark) of a QR code drawn without colours (into a pipe or a log file):
    each character is two modules, the upper and the lower; a line's light end is left out."""
    pairs = {"\u2588": (1, 1), "\u2580": (1, 0), "\u2584": (0, 1), " ": (0, 0)}
    lines = text.splitlines()
    width = width or max(len(line) for line in lines)
    rows = []
    for line in lines:
        line = line.ljust(width)
        rows.append([pairs[c][0] for c in line])
        rows.append([pairs[c][1] for c in line])
    return rows


def decode_coloured_qr(text):
    """The module matrix of a QR code drawn in colours: every cell must set its foreground (the
    upper module) and background (the lower) itself, never leaving one to the terminal."""
    import re
    colour = {"30": 1, "97": 0, "40": 1, "107": 0}
    rows = []
    for line in text.splitlines():
        cells = re.findall(r"\x1b\[(\d+);(\d+)m\u2580", line)
        assert line == "".join(f"\x1b[{a};{b}m\u2580" for a, b in cells) + "\x1b[0m", line
        rows.append([colour[a] for a, _ in cells])
        rows.append([colour[b] for _, b in cells])
    return rows


def test_the_qr_code_reads_alike_on_light_and_dark_terminals():
    """Issue 67: drawn as inverted half blocks, the code decoded only on a dark terminal. In
    colours every module is black or white whatever the terminal's own ground; without colours
    (a pipe, a log) dark modules are blocks on the page's ground."""
    from wenxin.studio.sign_in import qr_modules, qr_text
    url = "http://192.168.1.7:8870/?token=abcdefghijklmnopqrstuvwx"
    expected = [[int(m) for m in row] for row in qr_modules(url)]
    coloured = decode_coloured_qr(qr_text(url))
    assert coloured[:len(expected)] == expected and not any(coloured[len(expected):][0])  # a light last half row
    assert not any(expected[0]) and not any(row[0] for row in expected)  # the quiet zone: light all round
    assert decode_terminal_qr(qr_text(url, colours=False), len(expected[0]))[:len(expected)] == expected


def test_a_chosen_token_signs_the_phone_in_through_the_code_but_is_not_printed():
    """With $WENXIN_STUDIO_TOKEN set, the code carried no token, so a phone could not sign in."""
    from wenxin.studio.sign_in import qr_modules, sign_in_text
    urls = ["http://localhost:8870/", "http://192.168.1.7:8870/"]
    said = sign_in_text("/root", urls, "", "?token=chosen-token-of-the-user", colours=True)
    assert "chosen-token" not in said.split("from this code:")[0]  # the addresses are printed without it
    drawn = said.split("from this code:\n", 1)[1]
    expected = [[int(m) for m in row] for row in qr_modules("http://192.168.1.7:8870/?token=chosen-token-of-the-user")]
    assert decode_coloured_qr(drawn)[:len(expected)] == expected


def test_the_command_on_every_address_prints_each_machine_address_and_a_qr_code_of_one(root):
    import re
    import signal
    import subprocess
    import sys

    from conftest import read_until
    from wenxin.studio.sign_in import machine_addresses, qr_modules
    own = machine_addresses()
    if not own:
        pytest.skip("this machine has no network address but loopback")
    env = {k: v for k, v in os.environ.items() if k != "WENXIN_STUDIO_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "wenxin.cli", "studio", "--root", root, "--host", "0.0.0.0",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            encoding="utf-8")
    try:
        said = read_until(proc.stderr, "printed this once", timeout=120)
        port, token = re.search(r"open http://localhost:(\d+)/\?token=(\S+)", said).groups()
        for address in own:
            assert f"  or http://{address}:{port}/?token={token}\n" in said
        url = f"http://{own[0]}:{port}/?token={token}"
        drawn = said.split("from this code:\n", 1)[1].split("\n(the token", 1)[0]
        expected = [[int(m) for m in row] for row in qr_modules(url)]
        rows = decode_terminal_qr(drawn, len(expected[0]))
        rows += [[0] * len(expected[0])] * (len(expected) - len(rows))  # its last light line: no characters
        assert rows[:len(expected)] == expected
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


SIGNALLED_AS_IT_PRINTS = """
import os, signal, sys


class Tripwire:
    \"\"\"stderr that sends this process SIGTERM as the studio's address is written\"\"\"

    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        self.stream.write(text)
        if "open http://" in text:
            self.stream.flush()
            os.kill(os.getpid(), signal.SIGTERM)
        return len(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


sys.stderr = Tripwire(sys.stderr)
from wenxin.cli import main
code = main(["studio", "--root", sys.argv[1], "--port", "0"])
print("the studio returned", code)
sys.exit(code)
"""


def test_a_studio_stopped_the_moment_it_prints_its_address_stops_cleanly(root):
    """Whoever reads the address may stop the studio at once (a script, this suite): a SIGTERM sent
    as the address is written stops it as one sent while it serves does. Before, its handlers were
    put in place after the sign-in text, so such a signal ended it with status 143 (found by the
    suite: the test above sends SIGTERM as soon as it reads that text's last line)."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "WENXIN_STUDIO_TOKEN"}
    studio = subprocess.run([sys.executable, "-c", SIGNALLED_AS_IT_PRINTS, root], capture_output=True, text=True,
                            env=env, timeout=120)
    assert studio.returncode == 0 and "the studio returned 0" in studio.stdout, studio.stderr[-3000:]


def curl_blocks():
    """The ``bash`` blocks of docs/studio.md's "From a script" section, as written there."""
    import re

    from conftest import REPO
    with open(os.path.join(REPO, "docs", "studio.md"), encoding="utf-8") as f:
        section = f.read().split("### From a script", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, re.DOTALL)


@pytest.mark.skipif(not __import__("shutil").which("curl"), reason="needs curl")
def test_the_documented_curl_examples_work(root, monkeypatch, tmp_path):
    import re
    import subprocess
    bearer, loopback = curl_blocks()
    token = "a-token-for-the-curl-example"
    for block, settings in ((bearer, {"host": "0.0.0.0", "token": token}), (loopback, {})):
        with serving(root, monkeypatch, **settings) as server:
            env = {**os.environ, "STUDIO": f"http://127.0.0.1:{server.port}", "TOKEN": token}
            done = subprocess.run(["bash", "-e", "-c", block], cwd=str(tmp_path), env=env, capture_output=True,
                                  text=True, timeout=120)
            assert done.returncode == 0, (block, done.stdout, done.stderr)
            launched = re.findall(r'\{"id":(\d+),"command"', done.stdout)  # the launch's answer
            assert len(launched) == 1, done.stdout
            run_id = int(launched[0])
            assert server.studio.store.run(run_id)["overrides"] == {"trainer.epoch": 1}
            server.studio.supervisor.stop(run_id)


def test_pages_speak_the_language_of_the_switch_else_the_browser(root, monkeypatch):
    import json
    import re
    with serving(root, monkeypatch) as server:
        client = Client(server.port)
        for headers, lang, nav in (({"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8"}, "zh-CN", "运行"),
                                   ({"Accept-Language": "en-US,en"}, "en", "runs"),
                                   ({}, "en", "runs"),
                                   ({"Accept-Language": "zh-CN", "Cookie": "wenxin_studio_lang=en"}, "en", "runs"),
                                   ({"Accept-Language": "en", "Cookie": "wenxin_studio_lang=zh"}, "zh-CN", "运行")):
            for path in ("/", "/launch?task=task.json", "/runs/1", "/compare"):
                status, page, answer = client.request("GET", path, headers=headers)
                assert status == 200 and f'<html lang="{lang}">' in page, (headers, path)
                assert f'<a href="/">{nav}</a>' in page and "Accept-Language" in answer["vary"]
                said = json.loads(re.search(r'<script type="application/json" id="messages">(.*?)</script>', page,
                                            re.DOTALL).group(1))
                assert said["nav.runs"] == nav
