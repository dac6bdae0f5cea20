"""``wenxin serve`` imports Paddle only where its own process runs the model on Paddle
(``wenxin.inference.server.loads_paddle_here``): an export served with ONNX Runtime, and a
generation export decoding in a process of its own, are served by a process that never loads
Paddle (0.28 GiB of memory: issue 69's bound on a serving process). Checked in the process's
memory map (Linux): Paddle's library is mapped there or not. A model folder whose export is not
built yet is built with Paddle first (``export_of_folder``), as before."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request

import pytest

pytest.importorskip("sentencepiece")
pytest.importorskip("onnxruntime")
pytest.importorskip("paddle2onnx")

from conftest import wait_until_serving  # noqa: E402
from test_chat_sft import FOLDER  # noqa: E402
from test_server_workers import free_port  # noqa: E402
from wenxin.inference.server import ServeOptions, loads_paddle_here  # noqa: E402
from wenxin.model_folders import FolderSettings, export_of_folder  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A chat model's export as Paddle serves it, and a copy converted to ONNX."""
    from wenxin.inference.onnx_export import export_onnx
    tmp_path = tmp_path_factory.mktemp("serve-without-paddle")
    os.environ["WENXIN_CACHE"] = str(tmp_path / "cache")
    try:
        source = export_of_folder(FOLDER, FolderSettings(graph_mode="dynamic"))
    finally:
        del os.environ["WENXIN_CACHE"]
    onnx = str(tmp_path / "onnx")
    shutil.copytree(source, onnx)
    export_onnx(onnx, {})
    return source, onnx


def test_the_serving_process_loads_paddle_only_where_it_runs_the_model_on_paddle(exports):
    paddle_export, onnx_export = exports
    assert not loads_paddle_here(onnx_export, ServeOptions())  # auto: ONNX Runtime
    assert not loads_paddle_here(onnx_export, ServeOptions(backend="onnxruntime-int8"))
    assert loads_paddle_here(onnx_export, ServeOptions(backend="paddle", decode_process="off"))
    assert not loads_paddle_here(onnx_export, ServeOptions(backend="paddle", decode_process="auto"))  # a child decodes
    assert loads_paddle_here(paddle_export, ServeOptions(decode_process="off"))
    assert not loads_paddle_here(paddle_export, ServeOptions(decode_process="on"))
    assert not loads_paddle_here(paddle_export, ServeOptions(decode_process="off"), workers=2)  # each worker loads


def paddle_mapped(pid: int) -> bool:
    """Whether Paddle's library is mapped into process ``pid`` (Linux)."""
    with open(f"/proc/{pid}/maps", encoding="utf-8") as f:
        return "libpaddle" in f.read()


def served_answer(folder: str, tmp_path, *flags: str) -> tuple:
    """Serve ``folder`` in a process of its own, ask for an answer, and say whether Paddle is in
    the serving process (after the answer) and the answer."""
    port = free_port()
    env = {**os.environ, "GLOG_minloglevel": "2",
           "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    log_path = str(tmp_path / f"serve-{port}.log")
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "wenxin", "serve", "--model_dir", folder, "--port", str(port),
                                   *flags], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path))
        try:
            wait_until_serving(server, port, log_path)
            request = urllib.request.Request(f"http://127.0.0.1:{port}/generate", method="POST",
                                             data='{"text": "你好", "max_new_tokens": 4}'.encode("utf-8"),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=300) as response:
                answer = response.read().decode("utf-8")
            return paddle_mapped(server.pid), answer
        finally:
            server.terminate()
            assert server.wait(timeout=60) == 0


@pytest.mark.parametrize("which, flags, loads", [
    ("onnx", (), False),
    ("paddle", ("--decode_process", "on"), False),
    ("paddle", ("--decode_process", "off"), True),
], ids=["onnx-runtime", "paddle-decoding-apart", "paddle-in-process"])
def test_a_service_that_does_not_run_paddle_itself_never_loads_it(exports, tmp_path, which, flags, loads):
    paddle_export, onnx_export = exports
    mapped, answer = served_answer(onnx_export if which == "onnx" else paddle_export, tmp_path, *flags)
    assert mapped == loads
    assert '"text"' in answer
