"""``wenxin serve``: an HTTP JSON prediction service over an exported model.

Endpoints:
    GET  /health   -> {"status": "ok", "model_type", "labels", "workers"}
    GET  /metrics  -> Prometheus text: requests, errors, latency, rows per request and per model batch
    POST /predict  <- {"texts": ["...", ...]} (one-field models) or {"rows": [["a", "b"], ...]}
                   -> {"predictions": [{"label", "probability", "probs"}, ...]}
    POST /generate <- {"text": "..."} or {"row": ["a", "b"]}, optional decoding settings
                      ("max_new_tokens", "strategy", "beam_size", "temperature", "top_k", "top_p",
                      "seed", ...), "stop" (strings that end the answer) and "stream" (generation
                      models only)
                   -> {"text", "tokens", "finish_reason", "prompt_tokens"}; with "stream": true,
                      server-sent events:
                      "token" ({"token", "text": what it adds}) as each is chosen, then "done"
                      ({"text", "tokens", "finish_reason", "prompt_tokens"}) or "error"
    POST /v1/chat/completions, GET /v1/models: OpenAI's chat completions API, for chat models
                      (``wenxin.inference.openai_chat``)

The HTTP layer is uvicorn with the httptools (llhttp) parser, strict by itself (a malformed
request line, header or ``Content-Length`` is a 400 and the connection is closed), a small ASGI
app, and a request-start deadline and header size limit (``wenxin.compat.uvicorn_protocol``).
The app refuses chunked bodies, bodies over ``max_body_bytes`` (declared or sent), bodies that
arrive slower than ``read_timeout``, and JSON that is not UTF-8, too deep or of the wrong shape,
each with a 4xx and a JSON error; anything unexpected is a 500 with a JSON error and a logged
traceback. Predictions run in shared batches (``wenxin.inference.batching``); generation
requests one at a time on a thread of their own (``wenxin.inference.generation_worker``), each
ending at ``max_new_tokens``, after ``generation_timeout`` seconds, or when its client goes away. SIGTERM or Ctrl-C
stops accepting connections, answers the requests in flight, and exits 0. Several worker
processes: ``wenxin.inference.workers``.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

import orjson
from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest,
                               multiprocess)

from wenxin.common.errors import ConfigError, InferenceError, Problems
from wenxin.inference.batching import BatchingPool
from wenxin.inference.generation_worker import Event, GenerationJob, GenerationWorker
from wenxin.inference.openai_chat import ChatAnswer, ChatRequestError, error_payload, models_list, parse_chat_request
from wenxin.inference.stop_strings import parse_stop_strings
from wenxin.models.decoding import DecodeSettings

logger = logging.getLogger("wenxin.serve")

Scope = Dict[str, Any]
Receive = Callable[[], Awaitable[Dict[str, Any]]]
Send = Callable[[Dict[str, Any]], Awaitable[None]]


@dataclass
class Limits:
    """What one request may take."""
    max_batch: int = 256            # inputs in one request
    max_body_bytes: int = 1 << 20   # request body
    read_timeout: float = 10.0      # seconds for the whole body to arrive
    header_timeout: float = 10.0    # seconds for the request line and headers
    max_header_bytes: int = 16 * 1024  # the request line and headers
    keep_alive: float = 5.0         # seconds an idle connection stays open
    max_connections: int = 256      # open connections; a new one sheds the oldest idle one first
    max_connections_per_client: int = 128  # open connections of one client address (the same shedding)
    max_new_tokens: int = 256       # generation: tokens in one answer
    generation_timeout: float = 60.0  # generation: seconds one request may decode


@dataclass
class ServeOptions:
    """How each service process runs: its limits, batching, model threads and backend."""
    limits: Limits = field(default_factory=Limits)
    model_batch: int = 64       # most inputs in one model batch
    max_wait_ms: float = 2.0    # how long a request waits for others to share its batch
    model_threads: int = 1      # threads running batches, each with its own predictor
    num_threads: int = 1        # CPU math threads of each predictor
    backend: str = "auto"
    onednn: str = "auto"        # the Paddle backend's oneDNN
    task: str = ""              # a task package to import first (its own tokenizers, field readers)


class RequestError(Exception):
    """A request that gets a 4xx answer; ``close`` when the connection cannot be reused;
    ``param``: the request field at fault, where an API names it (OpenAI's)."""

    def __init__(self, status: HTTPStatus, message: str, close: bool = False, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.status, self.close, self.param = status, close, param


MAX_JSON_DEPTH = 32  # a /predict body needs 3 levels ({"rows": [[...]]}); deeper is refused before parsing
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_A_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth_exceeds(body: bytes, limit: int) -> bool:
    """Whether the arrays and objects of a JSON text nest deeper than ``limit``. Checked before
    ``json.loads``, whose own limit is the interpreter's recursion limit: that differs between
    Pythons (3.13 parses 2000 levels) and anything in the process may raise it."""
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_A_BRACKET)  # strings may hold brackets
    return max(itertools.accumulate(_BRACKET_STEP[b] for b in brackets), default=0) > limit


def load_json_body(body: bytes, exact_numbers: bool = True) -> Any:
    """A request body's JSON, or a 400 saying why it is none (not UTF-8 JSON, nested too deep).

    Where numbers do not matter (``exact_numbers`` false: a /predict body holds strings), orjson
    parses it (0.8 against 6 us for 16 texts). It takes the bodies ``json`` takes, to the same
    strings, lists and objects, but reads integers beyond 64 bits as floats and refuses NaN,
    Infinity and numbers beyond a double: a body it refuses is parsed by ``json``, as before."""
    openings = body.count(b"[") + body.count(b"{")  # no body nests deeper than it has brackets
    if openings > MAX_JSON_DEPTH and json_depth_exceeds(body, MAX_JSON_DEPTH):
        raise RequestError(HTTPStatus.BAD_REQUEST, f"body is not valid JSON: nested too deep "
                                                   f"(more than {MAX_JSON_DEPTH} levels)")
    if not exact_numbers:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"body is not valid UTF-8 JSON: {e}") from None


class BodyDeadline:
    """Ends a request's body read (the ``with`` block) in a 408 when the body has not arrived
    within ``seconds``: a timer cancels the reading task, and the block's ``CancelledError`` is
    swallowed for the caller to raise ``error()``. One timer a body: ``asyncio.wait_for`` around
    each read cost a task and a timer a message (6 us of a request's 90 us of HTTP work)."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.expired = seconds, False

    def __enter__(self) -> "BodyDeadline":
        self._task = asyncio.current_task()
        self._cancelling = self._cancels()
        self._timer = asyncio.get_running_loop().call_later(self.seconds, self._expire)
        return self

    def _cancels(self) -> int:
        """The cancels requested of the task and not yet handled (Python 3.11+; else 0)."""
        return getattr(self._task, "cancelling", lambda: 0)()

    def _expire(self) -> None:
        self.expired = True
        if self._task is not None:
            self._task.cancel()

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> bool:
        self._timer.cancel()
        if not (self.expired and kind is not None and issubclass(kind, asyncio.CancelledError)):
            return False  # the body arrived, or the task was cancelled for another reason
        uncancel = getattr(self._task, "uncancel", None)  # Python 3.11+: the cancel is handled
        if uncancel is not None and uncancel() > self._cancelling:
            return False  # cancelled from outside as well (the service stopping): that goes on
        return True

    def error(self) -> RequestError:
        return RequestError(HTTPStatus.REQUEST_TIMEOUT, f"the body did not arrive within {self.seconds:g} s",
                            close=True)


def check_texts(texts: List[str], which: str) -> None:
    """A 400 for a text holding an unpaired surrogate (JSON's "\\ud800"), which is no text."""
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"{which} holds an unpaired surrogate "
                                                       f"(not a Unicode character)") from None


def parse_request(body: bytes, num_fields: int, max_batch: int) -> List[List[str]]:
    """Validate a /predict body; raises RequestError with the 4xx to answer."""
    data = load_json_body(body, exact_numbers=False)  # any number in "texts" or "rows" is refused
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
    try:  # one encoding of every text at once; the input at fault is looked for only on an error
        "".join(itertools.chain.from_iterable(rows)).encode("utf-8")
    except UnicodeEncodeError:
        for i, row in enumerate(rows):
            check_texts(row, f"input {i}")
    return rows


GENERATION_PATHS = ("/generate", "/v1/chat/completions")
KNOWN_PATHS = ("/predict", "/health", "/metrics", "/v1/models") + GENERATION_PATHS
GENERATE_OPTIONS = ("text", "row", "stream", "stop")  # a /generate body's keys besides the decoding settings


@dataclass
class GenerationRequest:
    """A checked generation request: the row to decode, the decoding settings it changes,
    whether to stream, and its stop strings."""

    row: List[str]
    overrides: Dict[str, Any]
    stream: bool
    stop: Tuple[str, ...] = ()


def parse_generate_request(body: bytes, num_fields: int) -> GenerationRequest:
    """Validate a /generate body."""
    data = load_json_body(body)
    if not isinstance(data, dict) or ("text" in data) == ("row" in data):
        raise RequestError(HTTPStatus.BAD_REQUEST, 'expected an object with "text" (a string) or "row" '
                                                   '(a list of strings, one per input field)')
    if "text" in data:
        if num_fields != 1:
            raise RequestError(HTTPStatus.BAD_REQUEST, f'this model reads {num_fields} fields: send "row"')
        if not isinstance(data["text"], str):
            raise RequestError(HTTPStatus.BAD_REQUEST, '"text" must be a string')
        row = [data["text"]]
    else:
        row = data["row"]
        if not isinstance(row, list) or len(row) != num_fields or not all(isinstance(c, str) for c in row):
            raise RequestError(HTTPStatus.BAD_REQUEST, f'"row" must be a list of {num_fields} strings')
    check_texts(row, "the input")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(HTTPStatus.BAD_REQUEST, '"stream" must be true or false')
    try:
        stop = parse_stop_strings(data.get("stop"))
    except ValueError as e:
        raise RequestError(HTTPStatus.BAD_REQUEST, f'"stop": {e}') from None
    return GenerationRequest(row, {k: v for k, v in data.items() if k not in GENERATE_OPTIONS}, stream, stop)


def decode_settings(worker: GenerationWorker, overrides: Dict[str, Any], limits: Limits) -> DecodeSettings:
    """The export's decoding settings with a request's changes, ``max_new_tokens`` at most the
    service's (a request asking for more is a 400; an export whose own is more gets the limit)."""
    overrides = dict(overrides)
    asked = overrides.get("max_new_tokens")
    if isinstance(asked, int) and not isinstance(asked, bool) and asked > limits.max_new_tokens:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"max_new_tokens {asked} is over the service's limit "
                                                   f"{limits.max_new_tokens}")
    if "max_new_tokens" not in overrides and worker.reference.decode_settings is not None \
            and worker.reference.decode_settings.max_new_tokens > limits.max_new_tokens:
        overrides["max_new_tokens"] = limits.max_new_tokens  # the export's own is more than the service allows
    try:
        return worker.settings_for(overrides)
    except InferenceError as e:
        raise RequestError(HTTPStatus.BAD_REQUEST, str(e)) from None


def server_sent_event(event: Event) -> bytes:
    """One event of a /generate stream, as ``text/event-stream`` writes it."""
    return b"event: " + event.kind.encode("ascii") + b"\ndata: " + orjson.dumps(event.data) + b"\n\n"


class GenerationApi:
    """How a generation endpoint reads a request and writes its answer: ``/generate``'s own JSON
    and events (this class), or OpenAI's chat completions (``ChatCompletionsApi``)."""

    def parse(self, body: bytes, worker: GenerationWorker, num_fields: int) -> GenerationRequest:
        return parse_generate_request(body, num_fields)

    def error(self, e: RequestError) -> Any:
        """The JSON body of a refused request."""
        return {"error": str(e)}

    def answer(self, last: Event) -> Any:
        """The JSON body answering a whole decoding (its ``done`` or ``error`` event)."""
        return last.data

    def stream_start(self) -> bytes:
        return b""

    def stream_bytes(self, event: Event) -> bytes:
        """What the stream sends for one event (nothing: b"")."""
        return server_sent_event(event)


class ChatCompletionsApi(GenerationApi):
    """``POST /v1/chat/completions`` (``wenxin.inference.openai_chat``): one instance a request."""

    def __init__(self, model_name: str) -> None:
        self.chat = ChatAnswer(model_name)

    def parse(self, body: bytes, worker: GenerationWorker, num_fields: int) -> GenerationRequest:
        if not worker.reference.reads_conversations:
            raise RequestError(HTTPStatus.NOT_FOUND, "this model is no chat model (its input is no conversation): "
                                                     "use /generate")
        default = worker.reference.decode_settings
        try:
            request = parse_chat_request(load_json_body(body), default.strategy if default else "greedy")
        except ChatRequestError as e:
            raise RequestError(HTTPStatus.BAD_REQUEST, str(e), param=e.param) from None
        check_texts(request.row, "messages")
        self.chat.include_usage = request.include_usage
        return GenerationRequest(request.row, request.overrides, request.stream, request.stop)

    def error(self, e: RequestError) -> Any:
        return error_payload(str(e), e.status, e.param)

    def answer(self, last: Event) -> Any:
        if last.kind == "done":
            return self.chat.completion(last.data)
        return error_payload(last.data.get("error", "generation failed"), HTTPStatus.UNPROCESSABLE_ENTITY)

    def stream_start(self) -> bytes:
        return self.chat.first_chunk()

    def stream_bytes(self, event: Event) -> bytes:
        return self.chat.chunks(event)


class ServiceMetrics:
    """The service's Prometheus metrics, in a registry of its own. When several processes serve
    (``PROMETHEUS_MULTIPROC_DIR`` is set before they start), each writes its values to files
    there and /metrics adds up every process's (prometheus_client's multiprocess mode)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("wenxin_requests", "HTTP requests answered", ["path", "status"],
                                registry=self.registry)
        self.errors = Counter("wenxin_errors", "requests answered with a 5xx status", registry=self.registry)
        self.latency = Histogram("wenxin_request_seconds", "time from the request to its answer",
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10),
                                 registry=self.registry)
        self.rows = Histogram("wenxin_request_inputs", "inputs in one /predict request",
                              buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), registry=self.registry)
        self.batches = Histogram("wenxin_model_batch_inputs", "inputs in one model batch (after batching)",
                                 buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), registry=self.registry)
        self.generations = Counter("wenxin_generations", "generation requests decoded, by how they ended "
                                   "(eos, length, time_limit, cancelled, error)", ["reason"], registry=self.registry)
        self.in_flight = Gauge("wenxin_predict_in_flight", "/predict requests whose headers arrived, not yet answered",
                               multiprocess_mode="livesum", registry=self.registry)
        self._answered: Dict[Tuple[str, int], Any] = {}

    def answered(self, path: str, status: int) -> Any:
        """The counter of requests to ``path`` answered with ``status`` (kept: ``labels()`` builds
        and checks its key each call, 2 us of a request's 90 us of HTTP work)."""
        child = self._answered.get((path, status))
        if child is None:
            child = self._answered[(path, status)] = self.requests.labels(path, str(status))
        return child

    def exposition(self) -> bytes:
        """The Prometheus text of this process, or of all the service's processes."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)


class PredictionApp:
    """The ASGI application: routes, limits, the JSON contract, logging and metrics."""

    def __init__(self, pool: BatchingPool, limits: Limits, workers: int = 1,
                 generator: Optional[GenerationWorker] = None, model_name: str = "model") -> None:
        self.pool, self.limits, self.workers, self.generator = pool, limits, workers, generator
        self.model_name = model_name  # what /v1/models lists and chat completions name
        self.log_prefix = ""  # "worker 2: " when several processes serve
        self.metrics = ServiceMetrics()
        pool.on_batch = self.metrics.batches.observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "POST" and scope["path"] in GENERATION_PATHS:
            api = GenerationApi() if scope["path"] == "/generate" else ChatCompletionsApi(self.model_name)
            await self._generate(scope, receive, send, api)
            return
        start = time.perf_counter()
        predict = scope["path"] == "/predict"
        if predict:
            self.metrics.in_flight.inc()
        try:
            status, headers, body, inputs = await self._answer(scope, receive)
            # counted before the answer leaves: a client that has its answer and then asks /metrics
            # (served by any worker) finds its request counted
            seconds = time.perf_counter() - start
            self._observe(scope["path"], int(status), seconds, inputs)
        finally:  # a cancelled request too
            if predict:
                self.metrics.in_flight.dec()
        await send({"type": "http.response.start", "status": int(status), "headers": headers})
        await send({"type": "http.response.body", "body": body})
        logger.info("%s%s %s %d %.1f ms %d inputs", self.log_prefix, scope["method"], scope["path"], int(status),
                    seconds * 1000, inputs)

    async def _answer(self, scope: Scope, receive: Receive) -> Tuple[HTTPStatus, List[Tuple[bytes, bytes]], bytes, int]:
        """The status, headers and body that answer a request, and how many inputs it held."""
        inputs, close = 0, False
        try:
            status, payload, inputs = await self._route(scope, receive)
        except RequestError as e:
            status, payload, close = e.status, {"error": str(e)}, e.close
        except InferenceError as e:
            status, payload = HTTPStatus.UNPROCESSABLE_ENTITY, {"error": str(e)}
        except Exception as e:  # noqa: BLE001 (every failure is an answer, never a dropped connection)
            logger.exception("%s %s failed", scope["method"], scope["path"])
            status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {type(e).__name__}: {e}"}
        headers, body = self._encode(payload, close)
        return status, headers, body, inputs

    @staticmethod
    def _encode(payload: Any, close: bool = False) -> Tuple[List[Tuple[bytes, bytes]], bytes]:
        """The headers and body of an answer: JSON, or Prometheus text (bytes)."""
        if isinstance(payload, bytes):
            body, content_type = payload, CONTENT_TYPE_LATEST.encode("latin-1")
        else:
            body = orjson.dumps(payload)  # the same numbers as json.dumps, 17x faster (80 against 4.5 us)
            content_type = b"application/json; charset=utf-8"
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode("ascii"))]
        if close:
            headers.append((b"connection", b"close"))
        return headers, body

    async def _generate(self, scope: Scope, receive: Receive, send: Send, api: GenerationApi) -> None:
        """POST /generate or /v1/chat/completions (see the module docstring): one answer, or a
        stream of events. The decoding stops when the client disconnects (a task waits for that
        on ``receive``)."""
        start = time.perf_counter()
        path = scope["path"]
        status, tokens = HTTPStatus.OK, 0
        try:
            try:
                if self.generator is None:
                    raise RequestError(HTTPStatus.NOT_FOUND, "this model does not generate (its export has no step "
                                                             "functions): use /predict")
                body = await self._read_body(scope, receive)
                request = api.parse(body, self.generator, self.pool.num_fields)
                settings = decode_settings(self.generator, request.overrides, self.limits)
            except RequestError as e:
                status = e.status
                headers, body = self._encode(api.error(e), e.close)
                await send({"type": "http.response.start", "status": int(status), "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
            job = GenerationJob(request.row, settings, self.limits.generation_timeout, asyncio.get_running_loop(),
                                request.stop)
            watcher = asyncio.create_task(self._cancel_on_disconnect(receive, job))
            self.generator.submit(job)
            try:
                answering = self._stream(job, send, api) if request.stream else self._answer_generation(job, send, api)
                status, last = await answering
                tokens = len(last.data.get("tokens", []))
                self.metrics.generations.labels(last.data.get("finish_reason", "error")).inc()
            finally:
                job.cancel()  # a no-op once it is done; stops it when this request ends early
                watcher.cancel()
        finally:
            seconds = time.perf_counter() - start
            self._observe(path, int(status), seconds, 0)
            logger.info("%sPOST %s %d %.1f ms %d tokens", self.log_prefix, path, int(status), seconds * 1000, tokens)

    @staticmethod
    async def _cancel_on_disconnect(receive: Receive, job: GenerationJob) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                job.cancel()
                return

    async def _answer_generation(self, job: GenerationJob, send: Send, api: GenerationApi) -> Tuple[HTTPStatus, Event]:
        """Wait for the whole result and answer it as one JSON object."""
        while True:
            event = await job.events.get()
            if event.kind == "token":
                continue
            status = HTTPStatus.OK if event.kind == "done" else HTTPStatus.UNPROCESSABLE_ENTITY
            headers, body = self._encode(api.answer(event))
            await send({"type": "http.response.start", "status": int(status), "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return status, event

    @staticmethod
    async def _stream(job: GenerationJob, send: Send, api: GenerationApi) -> Tuple[HTTPStatus, Event]:
        """Send each event as it comes (server-sent events), until ``done`` or ``error``."""
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        first = api.stream_start()
        if first:
            await send({"type": "http.response.body", "body": first, "more_body": True})
        while True:
            event = await job.events.get()
            last = event.kind != "token"
            chunk = api.stream_bytes(event)
            if chunk or last:
                await send({"type": "http.response.body", "body": chunk, "more_body": not last})
            if last:
                return HTTPStatus.OK, event

    def _observe(self, path: str, status: int, seconds: float, inputs: int) -> None:
        known = path if path in KNOWN_PATHS else "other"
        self.metrics.answered(known, status).inc()
        self.metrics.latency.observe(seconds)
        if status >= 500:
            self.metrics.errors.inc()
        if inputs:
            self.metrics.rows.observe(inputs)

    async def _route(self, scope: Scope, receive: Receive) -> Tuple[HTTPStatus, Any, int]:
        method, path = scope["method"], scope["path"]
        if path == "/predict" and method == "POST":
            body = await self._read_body(scope, receive)
            rows = parse_request(body, self.pool.num_fields, self.limits.max_batch)
            results = await self.pool.submit(rows, asyncio.get_running_loop())
            return HTTPStatus.OK, {"predictions": results}, len(rows)
        if path == "/health" and method == "GET":
            return HTTPStatus.OK, {"status": "ok", "model_type": self.pool.meta.get("model_type"),
                                   "labels": self.pool.meta.get("labels"), "workers": self.workers,
                                   "model_threads": self.pool.model_threads, "backend": self.pool.backend,
                                   "onednn": self.pool.onednn or None, "event_loop": event_loop_name()}, 0
        if path == "/metrics" and method == "GET":
            return HTTPStatus.OK, self.metrics.exposition(), 0
        if path == "/v1/models" and method == "GET":
            return HTTPStatus.OK, models_list(self.model_name), 0
        if path in KNOWN_PATHS:
            raise RequestError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not allowed on {path}", close=True)
        raise RequestError(HTTPStatus.NOT_FOUND, f"no such endpoint: {path}", close=method != "GET")

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        headers: Dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name, value)
        if b"transfer-encoding" in headers:
            raise RequestError(HTTPStatus.LENGTH_REQUIRED, "chunked bodies are not accepted: send Content-Length",
                               close=True)
        if b"content-length" not in headers:
            raise RequestError(HTTPStatus.LENGTH_REQUIRED, "Content-Length is required", close=True)
        declared = int(headers[b"content-length"])  # the parser has checked it: one non-negative integer
        limit = self.limits.max_body_bytes
        if declared > limit:
            raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body of {declared} bytes; the limit is {limit}",
                               close=True)
        chunks, size = [], 0
        with BodyDeadline(self.limits.read_timeout) as deadline:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise RequestError(HTTPStatus.BAD_REQUEST, "the client disconnected", close=True)
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:  # cannot happen past the parser's own count, but never trust one check
                    raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {limit} bytes", close=True)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
        raise deadline.error()  # reached only when the deadline ended the read


def event_loop_name() -> str:
    """The running event loop's library: ``uvloop`` (uvicorn's choice where it is installed: 13-15%
    less CPU a request, measured) or ``asyncio``."""
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def check_settings(options: ServeOptions, workers: int = 1) -> None:
    """One error naming every setting out of range (the command line's flags)."""
    problems = Problems()
    limits = options.limits
    for flag, value, low in (("--workers", workers, 1), ("--model_threads", options.model_threads, 1),
                             ("--model_batch", options.model_batch, 1), ("--max_batch", limits.max_batch, 1),
                             ("--max_body_bytes", limits.max_body_bytes, 16),
                             ("--max_connections", limits.max_connections, 2),
                             ("--max_wait_ms", options.max_wait_ms, 0),
                             ("--max_connections_per_client", limits.max_connections_per_client, 1),
                             ("--read_timeout", limits.read_timeout, 0.001),
                             ("--read_timeout", limits.header_timeout, 0.001),
                             ("keep_alive", limits.keep_alive, 1), ("max_header_bytes", limits.max_header_bytes, 256),
                             ("--max_new_tokens", limits.max_new_tokens, 1),
                             ("--generation_timeout", limits.generation_timeout, 1e-6)):
        if not value >= low:  # also NaN
            problems.add(f"{flag}: {value} is below the minimum {low}")
    problems.raise_if_any()


def listen(host: str, port: int) -> socket.socket:
    """The service's listening socket (port 0: any free port)."""
    try:
        return socket.create_server((host, port), backlog=2048)
    except OSError as e:
        raise ConfigError(f"--host/--port: cannot listen on {host}:{port} ({e.strerror or e})") from None


class Service:
    """One service process: the batching pool, the app and the uvicorn server over one socket
    (``sock``, shared with the other workers, or its own on ``host:port``). ``workers`` is what
    /health reports; ``wenxin.inference.workers`` runs several."""

    def __init__(self, model_dir: str, host: str = "127.0.0.1", port: int = 8866,
                 options: Optional[ServeOptions] = None, sock: Optional[socket.socket] = None,
                 workers: int = 1) -> None:
        import uvicorn

        from wenxin.compat.uvicorn_protocol import serving_protocol
        options = options or ServeOptions()
        self.limits = options.limits
        check_settings(options, workers)
        self.pool = BatchingPool(model_dir, options.model_threads, options.model_batch, options.max_wait_ms,
                                 options.num_threads, options.backend, options.onednn, options.task)
        self.generator = (GenerationWorker(model_dir, options.num_threads, options.backend, options.onednn,
                                           options.task) if self.pool.meta.get("steps") else None)
        self.app = PredictionApp(self.pool, self.limits, workers, self.generator,
                                 os.path.basename(os.path.normpath(model_dir)))
        try:
            self.socket = sock or listen(host, port)
        except ConfigError:
            self.close_models()
            raise
        self.host, self.port = host, self.socket.getsockname()[1]
        protocol = serving_protocol(self.limits.header_timeout, self.limits.max_header_bytes,
                                    self.limits.max_connections_per_client, self.limits.max_connections)
        config = uvicorn.Config(self.app, http=protocol,
                                lifespan="off", access_log=False, log_config=None, server_header=False,
                                date_header=False, timeout_keep_alive=max(int(self.limits.keep_alive), 1),
                                limit_concurrency=self.limits.max_connections, backlog=2048,
                                timeout_graceful_shutdown=30)
        self.server = uvicorn.Server(config)
        # its start and stop lines repeat wenxin's own (through the root handler Paddle installs);
        # its warnings (an invalid request, the connection limit) stay
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)

    def run(self) -> None:
        """Serve until SIGTERM or Ctrl-C (main thread) or ``stop()``; in-flight requests are answered."""
        try:
            self.server.run(sockets=[self.socket])
        finally:
            self.close_models()

    def close_models(self) -> None:
        self.pool.close()
        if self.generator is not None:
            self.generator.close()

    def start_in_thread(self) -> threading.Thread:
        """Serve from a background thread (tests, notebooks); returns once it accepts requests."""
        thread = threading.Thread(target=self.run, name="wenxin-serve", daemon=True)
        thread.start()
        while not self.server.started:
            if not thread.is_alive():
                raise RuntimeError("the service stopped while starting")
            time.sleep(0.01)
        return thread

    def stop(self) -> None:
        self.server.should_exit = True
