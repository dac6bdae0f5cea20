"""``wenxin serve``: an HTTP JSON prediction service over an exported model.

Endpoints:
    GET  /health   -> {"status": "ok", "model_type", "labels", "workers"}
    POST /predict  <- {"texts": ["...", ...]} (one-field models) or {"rows": [["a", "b"], ...]}
                   -> {"predictions": [{"label", "probability", "probs"}, ...]}

Malformed requests get a 4xx status with ``{"error": "..."}``. Requests are served by a thread per
connection; each prediction borrows one of ``workers`` predictors from a pool (a paddle.inference
predictor is not safe to share between threads).
"""
from __future__ import annotations

import json
import logging
import queue
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Tuple

from wenxin.inference.predictor import InferenceError, Predictor

logger = logging.getLogger("wenxin")


class PredictorPool:
    """A fixed set of predictors over one model folder, lent to one request at a time."""

    def __init__(self, model_dir: str, workers: int, num_threads: int = 1) -> None:
        self.predictors: "queue.Queue[Predictor]" = queue.Queue()
        for _ in range(workers):
            self.predictors.put(Predictor(model_dir, num_threads=num_threads))
        self.workers = workers
        first = self.predictors.queue[0]
        self.meta = first.meta
        self.num_fields = len(first.fields)

    def predict(self, rows: List[List[str]]) -> List[Dict[str, Any]]:
        predictor = self.predictors.get()
        try:
            return predictor.predict(rows)
        finally:
            self.predictors.put(predictor)


class RequestError(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_request(body: bytes, num_fields: int, max_batch: int) -> List[List[str]]:
    """Validate a /predict body; raises RequestError with the 4xx to answer."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"body is not valid UTF-8 JSON: {e}") from None
    if not isinstance(data, dict) or ("texts" in data) == ("rows" in data):
        raise RequestError(HTTPStatus.BAD_REQUEST, 'expected an object with "texts" (a list of strings) '
                                                   'or "rows" (a list of lists of strings)')
    if "texts" in data:
        if num_fields != 1:
            raise RequestError(HTTPStatus.BAD_REQUEST, f'this model reads {num_fields} fields: send "rows"')
        items = data["texts"]
        if not isinstance(items, list) or not all(isinstance(t, str) for t in items):
            raise RequestError(HTTPStatus.BAD_REQUEST, '"texts" must be a list of strings')
        rows = [[t] for t in items]
    else:
        rows = data["rows"]
        if not isinstance(rows, list) or not all(
                isinstance(r, list) and len(r) == num_fields and all(isinstance(c, str) for c in r) for r in rows):
            raise RequestError(HTTPStatus.BAD_REQUEST, f'"rows" must be a list of lists of {num_fields} strings')
    if not rows:
        raise RequestError(HTTPStatus.BAD_REQUEST, "nothing to predict: the list is empty")
    if len(rows) > max_batch:
        raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                           f"{len(rows)} inputs in one request; the limit is {max_batch}")
    return rows


def make_handler(pool: PredictorPool, max_batch: int, max_body_bytes: int) -> type:
    class PredictionHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reply(self, status: HTTPStatus, payload: Dict[str, Any]) -> None:
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            if self.path != "/health":
                return self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {self.path}"})
            self._reply(HTTPStatus.OK, {"status": "ok", "model_type": pool.meta.get("model_type"),
                                        "labels": pool.meta.get("labels"), "workers": pool.workers})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/predict":
                return self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {self.path}"})
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                return self._reply(HTTPStatus.LENGTH_REQUIRED, {"error": "Content-Length is required"})
            if length > max_body_bytes:
                self.close_connection = True  # the unread body makes the connection unusable
                return self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                   {"error": f"body of {length} bytes; the limit is {max_body_bytes}"})
            try:
                rows = parse_request(self.rfile.read(length), pool.num_fields, max_batch)
                self._reply(HTTPStatus.OK, {"predictions": pool.predict(rows)})
            except RequestError as e:
                self._reply(e.status, {"error": str(e)})
            except InferenceError as e:
                self._reply(HTTPStatus.UNPROCESSABLE_ENTITY, {"error": str(e)})

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (base-class signature)
            logger.debug("%s - %s", self.address_string(), format % args)

    return PredictionHandler


def create_server(model_dir: str, host: str = "127.0.0.1", port: int = 8866, workers: int = 2,
                  max_batch: int = 256, max_body_bytes: int = 1 << 20, num_threads: int = 1
                  ) -> Tuple[ThreadingHTTPServer, PredictorPool]:
    pool = PredictorPool(model_dir, workers, num_threads)
    server = ThreadingHTTPServer((host, port), make_handler(pool, max_batch, max_body_bytes))
    server.daemon_threads = True
    return server, pool


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread
