"""``wenxin serve``: an HTTP JSON prediction service over an exported model.

Endpoints (the route table, ``PredictionApp.routes``; ``GET /openapi.json`` describes them all):
    GET  /health   -> {"status": "ok", "model_type", "labels", "label_names", "workers", ...}; a generation model
                      answers 503 {"status": "warming"} until its warm-up is done
    GET  /metrics  -> Prometheus text: requests, errors, latency, rows per request and per model
                      batch, rows per decoding step
    GET  /openapi.json -> the OpenAPI document of every endpoint
    POST /predict  <- {"texts": ["...", ...]} (one-field models) or {"rows": [["a", "b"], ...]}
                   -> {"predictions": [{"label", "probability", "probs"}, ...]} (a generation
                      model's: {"text", "tokens"} each, decoded with its own settings)
    POST /generate <- {"text": "..."} or {"row": ["a", "b"]}, optional decoding settings
                      ("max_new_tokens", "strategy", "beam_size", "temperature", "top_k", "top_p",
                      "seed", "length_penalty"), "stop" (strings that end the answer) and "stream"
                      (generation models only)
                   -> {"text", "tokens", "finish_reason", "prompt_tokens"}; with "stream": true,
                      server-sent events:
                      "token" ({"token", "text": what it adds}) as each is chosen, then "done"
                      ({"text", "tokens", "finish_reason", "prompt_tokens"}) or "error"
    POST /v1/chat/completions, GET /v1/models: OpenAI's chat completions API, for chat models
                      (``wenxin.inference.openai_chat``)

The HTTP layer is uvicorn with the httptools (llhttp) parser, strict by itself (a malformed
request line, header or ``Content-Length`` is a 400 and the connection is closed), this small ASGI
app, and a request-start deadline and header size limit (``wenxin.compat.uvicorn_protocol``).
The app refuses chunked bodies, bodies over ``max_body_bytes`` (declared or sent), bodies that
arrive slower than ``read_timeout``, and JSON that is not UTF-8, too deep or of the wrong shape,
each with a 4xx and a JSON error (``wenxin.inference.http_io``); anything unexpected is a 500 with
a JSON error and a logged traceback. Predictions run in shared batches
(``wenxin.inference.batching``); generations decode together, a request joining the running batch
at the next step (``wenxin.inference.generation_scheduler``), each ending at ``max_new_tokens``,
after ``generation_timeout`` seconds, or when its client goes away. SIGTERM or Ctrl-C stops
accepting connections, answers the requests in flight, and exits 0. Several worker processes:
``wenxin.inference.workers``.

The app is plain ASGI with a route table of its own rather than Starlette (which the studio
uses): the same routes doing the same work cost 57.8 µs of CPU a ``/predict`` request here and 78.4
on Starlette (``benchmarks/asgi_apps.py``; docs/performance.md, "Raw ASGI or Starlette").
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Dict, List, Optional

from prometheus_client import CONTENT_TYPE_LATEST

from wenxin.common.errors import ConfigError, InferenceError, Problems
from wenxin.common.registry import RegisterSet
from wenxin.inference.api_key import OPEN_PATHS, authorized
from wenxin.inference.batching import BatchingPool
from wenxin.inference.decode_process import DECODE_PROCESS_CHOICES, ProcessScheduler
from wenxin.inference.generation_api import (GENERATE_ANSWERS, GENERATE_SCHEMA, GenerationEndpoints,
                                             Limits as GenerationLimits)
from wenxin.inference.generation_scheduler import GenerationScheduler
from wenxin.inference.http_io import (BodyDeadline, Call, Receive, RequestError, Scope, Send, check_texts,
                                      encode_answer, json_depth_exceeds, load_json_body, read_body, send_answer)
from wenxin.inference.openai_chat import CHAT_SCHEMA, models_list
from wenxin.inference.predictor import Predictor
from wenxin.inference.routes import Answer, Route, RouteTable, object_schema
from wenxin.inference.scheduler_front import SchedulerFront, SchedulerLimits
from wenxin.inference.service_metrics import ServiceMetrics
from wenxin.inference.turn_plan import TURN_PREFILL_RULES

logger = logging.getLogger("wenxin.serve")

__all__ = ["BodyDeadline", "Limits", "PredictionApp", "RequestError", "ServeOptions", "Service", "check_settings",
           "json_depth_exceeds", "listen", "load_json_body", "parse_request"]


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
    generation_timeout: float = 60.0  # generation: seconds from a request's arrival to the end of its answer
    max_messages: int = 1024        # generation: messages of one chat request
    max_prompt_bytes: int = 256 * 1024  # generation: the prompt's text (UTF-8 bytes)

    def generation(self) -> GenerationLimits:
        return GenerationLimits(self.max_new_tokens, self.generation_timeout, self.max_messages,
                                self.max_prompt_bytes, self.max_body_bytes, self.read_timeout)


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
    generation: SchedulerLimits = field(default_factory=SchedulerLimits)  # the decoding batch's room
    api_key: Optional[str] = None  # what clients must send as Authorization: Bearer (wenxin.inference.api_key)
    model_name: str = ""  # what /v1/models lists and chat completions name (default: the export folder's name)
    listen_while_loading: bool = False  # a generation model: answer (/health 503 "loading") while it loads
    decode_process: str = "off"  # DECODE_PROCESS_CHOICES: a generation model decodes in a process of its own


PREDICT_SCHEMA = object_schema({
    "texts": {"type": "array", "items": {"type": "string"}, "description": "inputs of a model that reads one field"},
    "rows": {"type": "array", "items": {"type": "array", "items": {"type": "string"}},
             "description": "inputs, one string per field"},
}, oneOf=[{"required": ["texts"]}, {"required": ["rows"]}])


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


class PredictionApp:
    """The ASGI application: the route table, limits, the JSON contract, logging and metrics.
    ``pool`` predicts (a classifier's, a tagger's...), ``scheduler`` decodes (a generation
    model's); ``model`` describes the export (its fields, labels, settings)."""

    def __init__(self, model: Predictor, limits: Limits, workers: int = 1, pool: Optional[BatchingPool] = None,
                 scheduler: Optional[SchedulerFront] = None, model_name: str = "model",
                 api_key: Optional[str] = None) -> None:
        self.model, self.pool, self.scheduler, self.limits, self.workers = model, pool, scheduler, limits, workers
        self.api_key = api_key  # None: every request is answered (loopback, or --api_key none)
        self.model_name = model_name  # what /v1/models lists and chat completions name
        self.log_prefix = ""  # "worker 2: " when several processes serve
        self.metrics = ServiceMetrics()
        if pool is not None:
            pool.on_batch = self.metrics.batches.observe
        self.generation: Optional[GenerationEndpoints] = None
        if scheduler is not None:
            scheduler.on_turn = self.metrics.observe_turn
            self.generation = GenerationEndpoints(scheduler, limits.generation(), self.metrics, model_name,
                                                  self._log_generation)
        self.routes = RouteTable(self._route_rows())
        version = sys.modules["wenxin"].__version__  # the package, imported before any of its modules
        self._openapi = self.routes.openapi("wenxin serve", version, f"the model {model_name}")

    def _route_rows(self) -> List[Route]:
        """Every endpoint, in one place."""
        generating = self._generating
        return [
            Route("POST", "/predict", self.predict, "predict rows of raw text", PREDICT_SCHEMA,
                  {200: "one result per input", 400: "a malformed request", 413: "too many inputs",
                   422: "an input the model cannot read"}),
            Route("GET", "/health", self.health, "the service's model and settings",
                  answers={200: "serving", 503: "warming up (a generation model)"}),
            Route("GET", "/metrics", self.exposition, "Prometheus metrics"),
            Route("GET", "/openapi.json", self.openapi, "this document"),
            Route("GET", "/v1/models", self.models, "OpenAI's model list: the one model served"),
            Route("POST", "/generate", generating("generate"), "generate text from a row (generation models)",
                  GENERATE_SCHEMA, GENERATE_ANSWERS, streams=True),
            Route("POST", "/v1/chat/completions", generating("chat_completions"),
                  "OpenAI's chat completions (chat models)", CHAT_SCHEMA, GENERATE_ANSWERS, streams=True),
        ]

    def _generating(self, name: str) -> Any:
        async def handler(call: Call) -> Optional[Answer]:
            if self.generation is None:
                message = "this model does not generate (its export has no step functions): use /predict"
                if call.path.startswith("/v1/"):  # OpenAI's error object
                    from wenxin.inference.openai_chat import error_payload
                    return Answer(HTTPStatus.NOT_FOUND, error_payload(message, HTTPStatus.NOT_FOUND))
                raise RequestError(HTTPStatus.NOT_FOUND, message)
            await getattr(self.generation, name)(call)
            return None
        return handler

    # ---- dispatch ------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        start = time.perf_counter()
        call = Call(scope, receive, send)
        predict = scope["path"] == "/predict"
        if predict:
            self.metrics.in_flight.inc()
        inputs, close, extra = 0, False, []
        content_type: Optional[bytes] = None
        try:
            try:
                route = self.routes.find(call.method, call.path)
                if self.api_key is not None and route.path not in OPEN_PATHS and \
                        not authorized(scope["headers"], self.api_key):
                    raise RequestError(HTTPStatus.UNAUTHORIZED, "an API key is needed: send Authorization: Bearer "
                                                                "KEY (the key wenxin serve was given)",
                                       close=True, headers=[(b"www-authenticate", b'Bearer realm="wenxin"')])
                answer = await route.handler(call)
                if answer is None:  # it answered itself (and logged)
                    return
                status, payload, inputs, content_type = answer.status, answer.payload, answer.inputs, \
                    answer.content_type
            except RequestError as e:
                status, payload, close, extra = e.status, {"error": str(e)}, e.close, e.headers
                if status == HTTPStatus.UNAUTHORIZED and call.path.startswith("/v1/"):  # OpenAI's error object
                    from wenxin.inference.openai_chat import error_payload
                    payload = error_payload(str(e), status)
                    payload["error"]["code"] = "invalid_api_key"
            except InferenceError as e:
                status, payload = HTTPStatus.UNPROCESSABLE_ENTITY, {"error": str(e)}
            except Exception as e:  # noqa: BLE001 (every failure is an answer, never a dropped connection)
                logger.exception("%s %s failed", scope["method"], scope["path"])
                status = HTTPStatus.INTERNAL_SERVER_ERROR
                payload = {"error": f"internal error: {type(e).__name__}: {e}"}
            # counted before the answer leaves: a client that has its answer and then asks /metrics
            # (served by any worker) finds its request counted
            seconds = time.perf_counter() - start
            self._observe(scope["path"], int(status), seconds, inputs)
        finally:  # a cancelled request too
            if predict:
                self.metrics.in_flight.dec()
        headers, body = encode_answer(payload, close, **({"content_type": content_type} if content_type else {}),
                                      extra=extra)
        await send_answer(send, int(status), headers, body)
        logger.info("%s%s %s %d %.1f ms %d inputs", self.log_prefix, scope["method"], scope["path"], int(status),
                    seconds * 1000, inputs)

    def _observe(self, path: str, status: int, seconds: float, inputs: int) -> None:
        known = path if path in self.routes.paths else "other"
        self.metrics.answered(known, status).inc()
        self.metrics.latency.observe(seconds)
        if status >= 500:
            self.metrics.errors.inc()
        if inputs:
            self.metrics.rows.observe(inputs)

    def _log_generation(self, path: str, status: int, seconds: float, tokens: int) -> None:
        self._observe(path, status, seconds, 0)
        logger.info("%sPOST %s %d %.1f ms %d tokens", self.log_prefix, path, status, seconds * 1000, tokens)

    # ---- handlers ------------------------------------------------------------------------------
    async def predict(self, call: Call) -> Answer:
        body = await read_body(call, self.limits.max_body_bytes, self.limits.read_timeout)
        rows = parse_request(body, len(self.model.fields), self.limits.max_batch)
        if self.pool is not None:
            results = await self.pool.submit(rows, asyncio.get_running_loop())
        else:
            assert self.generation is not None
            results = await self.generation.answer_rows(rows)
        return Answer(HTTPStatus.OK, {"predictions": results}, len(rows))

    async def health(self, call: Call) -> Answer:
        backend = self.pool.backend if self.pool is not None else self.model.backend
        onednn = self.pool.onednn if self.pool is not None else (self.scheduler.onednn if self.scheduler else "")
        health: Dict[str, Any] = {
            "status": "ok", "model_type": self.model.meta.get("model_type"), "labels": self.model.meta.get("labels"),
            "label_names": self.model.meta.get("label_names") or None,
            "workers": self.workers, "model_threads": self.pool.model_threads if self.pool is not None else 1,
            "backend": backend, "onednn": onednn or None, "event_loop": event_loop_name()}
        if self.scheduler is not None:
            limits = self.scheduler.limits
            health["generation"] = {"max_rows": limits.max_rows, "max_cached_tokens": limits.max_cached_tokens,
                                    "max_waiting": limits.max_waiting, "batched": self.scheduler.batched}
            state = self.scheduler.state
            if state != "ready":
                reason = {"loading": "the generation model is loading; requests wait for it",
                          "warming": "the generation model is warming up (a prefill and a few decoding steps); "
                                     "requests wait for it"}.get(state, f"the model could not be loaded "
                                                                        f"({self.scheduler.error})")
                health.update(status=state, reason=reason,
                              seconds=round(time.monotonic() - self.scheduler.started, 1))
                return Answer(HTTPStatus.SERVICE_UNAVAILABLE, health)
        return Answer(HTTPStatus.OK, health)

    async def exposition(self, call: Call) -> Answer:
        return Answer(HTTPStatus.OK, self.metrics.exposition(), content_type=CONTENT_TYPE_LATEST.encode("latin-1"))

    async def openapi(self, call: Call) -> Answer:
        return Answer(HTTPStatus.OK, self._openapi)

    async def models(self, call: Call) -> Answer:
        return Answer(HTTPStatus.OK, models_list(self.model_name))


def event_loop_name() -> str:
    """The running event loop's library: ``uvloop`` (uvicorn's choice where it is installed: 13-15%
    less CPU a request, measured) or ``asyncio``."""
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def decodes_apart(choice: str, backend: str, workers: int) -> bool:
    """Whether a generation model decodes in a process of its own (``--decode_process``): ``on``;
    ``auto`` where the backend holds Python's lock while it runs (Paddle Inference) and the service
    is one process (a worker of several is a daemon process, which cannot start another)."""
    if choice == "auto":
        return workers == 1 and RegisterSet.inference_backends.get(backend).holds_interpreter_lock
    return choice == "on"


def loads_paddle_here(model_dir: str, options: ServeOptions, workers: int = 1) -> bool:
    """Whether the serving process itself runs the model on Paddle: one process (several workers
    load it in theirs), a backend that loads Paddle, and not a generation model decoding in a
    process of its own (``decodes_apart``). Otherwise it never imports Paddle (0.28 GiB)."""
    if workers > 1:
        return False
    model = Predictor(model_dir, load_model=False, backend=options.backend, task=options.task)
    if not RegisterSet.inference_backends.get(model.backend).loads_paddle:
        return False
    return not (model.steps and decodes_apart(options.decode_process, model.backend, workers))


def check_settings(options: ServeOptions, workers: int = 1) -> None:
    """One error naming every setting out of range (the command line's flags)."""
    problems = Problems()
    limits, room = options.limits, options.generation
    for flag, value, low in (("--workers", workers, 1), ("--model_threads", options.model_threads, 1),
                             ("--num_threads", options.num_threads, 1),
                             ("--model_batch", options.model_batch, 1), ("--max_batch", limits.max_batch, 1),
                             ("--max_body_bytes", limits.max_body_bytes, 16),
                             ("--max_connections", limits.max_connections, 2),
                             ("--max_wait_ms", options.max_wait_ms, 0),
                             ("--max_connections_per_client", limits.max_connections_per_client, 1),
                             ("--read_timeout", limits.read_timeout, 0.001),
                             ("--read_timeout", limits.header_timeout, 0.001),
                             ("keep_alive", limits.keep_alive, 1), ("max_header_bytes", limits.max_header_bytes, 256),
                             ("--max_new_tokens", limits.max_new_tokens, 1),
                             ("--generation_timeout", limits.generation_timeout, 1e-6),
                             ("--max_messages", limits.max_messages, 1),
                             ("--max_prompt_bytes", limits.max_prompt_bytes, 1),
                             ("--max_rows", room.max_rows, 1), ("--max_cached_tokens", room.max_cached_tokens, 2),
                             ("--max_waiting", room.max_waiting, 0), ("--prefill_tokens", room.prefill_tokens, 1),
                             ("--prefix_cache_mb", room.prefix_cache_mb, 0)):
        if not value >= low:  # also NaN
            problems.add(f"{flag}: {value} is below the minimum {low}")
    if room.turn_prefill not in TURN_PREFILL_RULES:
        problems.add(f"--turn_prefill: {room.turn_prefill!r} is not one of {', '.join(TURN_PREFILL_RULES)}")
    if options.decode_process not in DECODE_PROCESS_CHOICES:
        problems.add(f"--decode_process: {options.decode_process!r} is not one of {', '.join(DECODE_PROCESS_CHOICES)}")
    elif options.decode_process == "on" and workers > 1:
        problems.add("--decode_process on: each of several --workers is a process already and cannot start another; "
                     "use --workers 1 or --decode_process auto")
    problems.raise_if_any()


def listen(host: str, port: int) -> socket.socket:
    """The service's listening socket (port 0: any free port)."""
    try:
        return socket.create_server((host, port), backlog=2048)
    except OSError as e:
        raise ConfigError(f"--host/--port: cannot listen on {host}:{port} ({e.strerror or e})") from None


class Service:
    """One service process: the batching pool or the generation scheduler, the app and the
    uvicorn server over one socket (``sock``, shared with the other workers, or its own on
    ``host:port``). ``workers`` is what /health reports; ``wenxin.inference.workers`` runs several."""

    def __init__(self, model_dir: str, host: str = "127.0.0.1", port: int = 8866,
                 options: Optional[ServeOptions] = None, sock: Optional[socket.socket] = None,
                 workers: int = 1) -> None:
        import uvicorn

        from wenxin.compat.uvicorn_protocol import serving_protocol
        options = options or ServeOptions()
        self.limits = options.limits
        check_settings(options, workers)
        model = Predictor(model_dir, load_model=False, backend=options.backend, task=options.task)
        self.pool: Optional[BatchingPool] = None
        self.scheduler: Optional[SchedulerFront] = None
        self.load_error: Optional[BaseException] = None
        if model.steps:
            apart = decodes_apart(options.decode_process, model.backend, workers)
            scheduler_class = ProcessScheduler if apart else GenerationScheduler
            self.scheduler = scheduler_class(model_dir, options.generation, options.num_threads, options.backend,
                                             options.onednn, options.task, wait=not options.listen_while_loading)
            self.scheduler.on_failure = self._model_failed
        else:
            self.pool = BatchingPool(model_dir, options.model_threads, options.model_batch, options.max_wait_ms,
                                     options.num_threads, options.backend, options.onednn, options.task)
        self.backend = model.backend
        self.app = PredictionApp(model, self.limits, workers, self.pool, self.scheduler,
                                 options.model_name or os.path.basename(os.path.normpath(model_dir)), options.api_key)
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
        """Serve until SIGTERM or Ctrl-C (main thread) or ``stop()``; in-flight requests are answered.
        A generation model that could not be loaded while the service listened stops it, with its
        error raised here."""
        try:
            if self.load_error is None:
                self.server.run(sockets=[self.socket])
        finally:
            self.close_models()
        if self.load_error is not None:
            raise self.load_error

    def _run_in_thread(self) -> None:
        try:
            self.run()
        except BaseException as e:  # noqa: BLE001 (the model's load error stays in load_error for the caller)
            if e is not self.load_error:
                raise

    def _model_failed(self, error: BaseException) -> None:
        self.load_error = error
        if hasattr(self, "server"):
            self.server.should_exit = True

    def close_models(self) -> None:
        if self.pool is not None:
            self.pool.close()
        if self.scheduler is not None:
            self.scheduler.close()

    def start_in_thread(self) -> threading.Thread:
        """Serve from a background thread (tests, notebooks); returns once it accepts requests."""
        thread = threading.Thread(target=self._run_in_thread, name="wenxin-serve", daemon=True)
        thread.start()
        while not self.server.started:
            if not thread.is_alive():
                raise RuntimeError("the service stopped while starting")
            time.sleep(0.01)
        return thread

    def stop(self) -> None:
        self.server.should_exit = True
