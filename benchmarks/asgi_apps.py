"""The CPU a request costs in the service's app alone: wenxin's own ASGI app (the route table)
against the same routes on Starlette (issue 54: "Starlette or the present raw ASGI: choose by
measurement").

Both apps sit over the same answered pool (``serving_throughput.serve_floor``'s: each ``/predict``
answered at once with a real batch's results), so what differs is routing, the request and
response objects and the ASGI messages; the body parsing, the JSON answer, the metrics and the log
line are the same code in both. Requests are fed through ASGI's three callables in this process,
without sockets or uvicorn (whose cost is the same for both and, on a service, several times the
app's: ``serving_throughput.py --floor``), in rounds that alternate which app goes first. Reports
µs of CPU a request (``time.process_time``) for ``POST /predict`` with 16 texts and ``GET
/health``.

    python benchmarks/asgi_apps.py --requests 20000 --rounds 4
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wenxin.common.process_settings import apply_process_settings  # noqa: E402

apply_process_settings()  # as wenxin's entry points do, before Paddle loads
os.environ.setdefault("GLOG_minloglevel", "2")

from measure import load_note  # noqa: E402


def apps(model_dir: str, texts: List[str]) -> Dict[str, Any]:
    """wenxin's app and the Starlette one over an answered pool of the model's results."""
    from serving_throughput import starlette_app

    from wenxin.inference import server
    from wenxin.inference.predictor import Predictor
    predictor = Predictor(model_dir)
    answers = predictor.predict([[t] for t in texts], batch_size=len(texts))

    class AnsweredPool:
        meta, model_threads, backend, onednn, on_batch = predictor.meta, 1, predictor.backend, "", None

        def submit(self, rows: List[List[str]], loop: asyncio.AbstractEventLoop) -> "asyncio.Future[Any]":
            future = loop.create_future()
            future.set_result([answers[i % len(answers)] for i in range(len(rows))])
            return future

    model = Predictor(model_dir, load_model=False)
    app = server.PredictionApp(model, server.Limits(), pool=AnsweredPool())  # type: ignore[arg-type]
    return {"wenxin": app, "starlette": starlette_app(app)}


async def drive(app: Callable[..., Any], path: str, method: str, body: bytes, count: int) -> float:
    """CPU seconds for ``count`` requests through ``app``'s ASGI callables."""
    headers = [(b"host", b"bench"), (b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
             "raw_path": path.encode(), "query_string": b"", "root_path": "", "scheme": "http", "headers": headers,
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8866)}
    sent: List[Dict[str, Any]] = []

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    request = {"type": "http.request", "body": body, "more_body": False}
    given = [0]  # messages handed out in the current request

    async def receive() -> Dict[str, Any]:
        given[0] += 1
        return request if given[0] == 1 else {"type": "http.disconnect"}

    start = time.process_time()
    for _ in range(count):
        given[0] = 0
        await app(dict(scope), receive, send)
        if sent[0]["status"] != 200:
            raise SystemExit(f"{path}: answered {sent}")
        sent.clear()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    from small_models import sample_texts, trained_model

    from wenxin.common.logs import lean_records, setup_logging
    setup_logging()
    lean_records()
    logging.getLogger("wenxin.serve").setLevel(logging.WARNING)  # no line a request in either
    work = tempfile.mkdtemp(prefix="wenxin-asgi-")
    model_dir = trained_model("bow", work)
    texts = sample_texts("bow")[:16]
    built = apps(model_dir, texts)
    body = json.dumps({"texts": texts}, ensure_ascii=False).encode()
    print(f"# {load_note()}; {args.requests} requests a run")
    costs: Dict[str, Dict[str, List[float]]] = {name: {"predict": [], "health": []} for name in built}
    for round_index in range(args.rounds):
        names = list(built) if round_index % 2 == 0 else list(reversed(built))
        for name in names:
            for route, path, method, data in (("predict", "/predict", "POST", body), ("health", "/health", "GET", b"")):
                cpu = asyncio.run(drive(built[name], path, method, data, args.requests))
                costs[name][route].append(cpu / args.requests * 1e6)
    print("| app | POST /predict (16 texts): µs of CPU a request | GET /health |")
    print("|---|---|---|")
    for name, routes in costs.items():
        cells = [f"{statistics.median(v):.1f} (runs {', '.join(f'{x:.1f}' for x in v)})" for v in routes.values()]
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
