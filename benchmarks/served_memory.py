"""The memory of a ``wenxin serve`` process tree after one answer: run the service of one wenxin
checkout (its folder on ``PYTHONPATH``) on an export, ask for 16 tokens, and print the serving
process's resident memory, its children's, and whether Paddle's library is mapped into the serving
process (Linux ``/proc``; the port free, the checkout's service once its ``/health`` answers 200). Alternate two checkouts for an A/B::

    python benchmarks/served_memory.py OLD_CHECKOUT EXPORT 18871 --backend onnxruntime-int8
    python benchmarks/served_memory.py . EXPORT 18871 --backend onnxruntime-int8

``--body JSON`` (first after the port) asks with that request instead of a chat question, e.g. an
ERNIE-Gen export's ``'{"row": ["a b c", "d e f g"], "max_new_tokens": 16}'``.
"""
import json
import os
import sys
import urllib.request

import psutil

from generation_serving import launched
from measure import resident_gib


def main() -> None:
    repo, folder, port, flags = os.path.abspath(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    question = {"text": "你好，请介绍一下北京。", "max_new_tokens": 16}
    if flags[:1] == ["--body"]:
        question, flags = json.loads(flags[1]), flags[2:]
    env = {**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": repo, "OMP_NUM_THREADS": "1"}
    server = launched([sys.executable, "-m", "wenxin", "serve", "--model_dir", folder, "--port", str(port), *flags],
                      port, env, "/tmp")
    try:
        body = json.dumps(question).encode("utf-8")
        request = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as response:
            response.read()
        with open(f"/proc/{server.pid}/maps", encoding="utf-8") as f:
            paddle = "libpaddle" in f.read()
        children = psutil.Process(server.pid).children()
        print(json.dumps({"checkout": repo, "export": folder, "flags": flags, "serving_gib": resident_gib(server.pid),
                          "children_gib": [resident_gib(child.pid) for child in children],
                          "paddle_in_serving_process": paddle}))
    finally:
        server.terminate()
        server.wait(timeout=120)


if __name__ == "__main__":
    main()
