"""The service's generation endpoints: ``POST /generate`` (wenxin's own JSON and events) and
``POST /v1/chat/completions`` (OpenAI's, ``wenxin.inference.openai_chat``), over the generation
scheduler (``wenxin.inference.generation_scheduler``).

A request is read and checked first (every refusal a 400 naming the field: the body's shape,
the decoding settings, the prompt's size), then its prompt is prepared (tokenized, a
conversation fitted to the context) off the event loop, then it joins the decoding batch and its
tokens are answered as one JSON object or streamed as server-sent events. Its time limit runs
from its arrival, through the prompt's preparation and any wait for room; a client that
disconnects ends its request at whatever stage it is.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Dict, List, Optional, Tuple

import orjson

from wenxin.common.errors import InferenceError
from wenxin.inference.generation_events import DoneEvent, ErrorEvent, Event, FinishReason, TokenEvent
from wenxin.inference.scheduler_front import GenerationJob, Prompt, SchedulerFront, ServiceFull
from wenxin.inference.http_io import Call, RequestError, check_texts, encode_answer, load_json_body, read_body
from wenxin.inference.openai_chat import ChatAnswer, ChatRequestError, error_payload, parse_chat_request
from wenxin.inference.routes import object_schema
from wenxin.inference.service_metrics import ServiceMetrics
from wenxin.inference.stop_strings import MAX_STOP_CHARS, MAX_STOP_STRINGS, parse_stop_strings
from wenxin.models.decoding import (MAX_BEAM_SIZE, MAX_LENGTH_PENALTY, MAX_SEED, MAX_TEMPERATURE, MAX_TOP_K,
                                    MIN_TEMPERATURE, DecodeSettings)

CLIENT_LEFT = 499  # logged for a request whose client left before it was answered (nginx's code)
GENERATE_OPTIONS = ("text", "row", "stream", "stop")  # a /generate body's keys besides the decoding settings
_STOP_SCHEMA = {"oneOf": [{"type": "string", "minLength": 1, "maxLength": MAX_STOP_CHARS},
                          {"type": "array", "maxItems": MAX_STOP_STRINGS,
                           "items": {"type": "string", "minLength": 1, "maxLength": MAX_STOP_CHARS}},
                          {"type": "null"}], "description": "strings that end the answer before them"}
GENERATE_SCHEMA = object_schema({
    "text": {"type": "string", "description": "the input of a model that reads one field"},
    "row": {"type": "array", "items": {"type": "string"}, "description": "one string per input field"},
    "stream": {"type": "boolean", "default": False, "description": "answer with server-sent events"},
    "stop": _STOP_SCHEMA,
    "strategy": {"type": "string", "description": "a registered decoding strategy: greedy, beam, sample, or one "
                                                  "that the --task package registers"},
    "max_new_tokens": {"type": "integer", "minimum": 1, "description": "at most the service's --max_new_tokens"},
    "beam_size": {"type": "integer", "minimum": 1, "maximum": MAX_BEAM_SIZE,
                  "description": "at most the service's --max_rows"},
    "length_penalty": {"type": "number", "minimum": 0, "maximum": MAX_LENGTH_PENALTY},
    "temperature": {"type": "number", "minimum": MIN_TEMPERATURE, "maximum": MAX_TEMPERATURE},
    "top_k": {"type": "integer", "minimum": 0, "maximum": MAX_TOP_K},
    "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "seed": {"type": "integer", "minimum": 0, "maximum": MAX_SEED},
}, oneOf=[{"required": ["text"]}, {"required": ["row"]}])
GENERATE_ANSWERS = {200: "the answer {text, tokens, finish_reason, prompt_tokens}, or its stream of token events "
                         "and a done event",
                    400: "a request the service cannot answer, naming the field", 404: "the model does not generate",
                    503: "the decoding batch and its waiting line are full (Retry-After)"}


@dataclass
class Limits:
    """What one generation request may take (the service's ``Limits`` hands these over)."""

    max_new_tokens: int
    generation_timeout: float
    max_messages: int
    max_prompt_bytes: int
    max_body_bytes: int
    read_timeout: float


@dataclass
class GenerationRequest:
    """A checked generation request: the row to decode, the decoding settings it changes,
    whether to stream, and its stop strings."""

    row: List[str]
    overrides: Dict[str, Any]
    stream: bool
    stop: Tuple[str, ...] = ()


def check_prompt_size(row: List[str], limits: Limits, param: Optional[str] = None) -> None:
    """A 400 for a prompt over ``max_prompt_bytes`` (its texts' UTF-8 bytes)."""
    size = sum(len(text.encode("utf-8", "surrogatepass")) for text in row)
    if size > limits.max_prompt_bytes:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"the prompt is {size} bytes, more than the service's limit of "
                                                   f"{limits.max_prompt_bytes} (--max_prompt_bytes)", param=param)


def parse_generate_request(body: bytes, num_fields: int, limits: Limits) -> GenerationRequest:
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
    check_prompt_size(row, limits)
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(HTTPStatus.BAD_REQUEST, '"stream" must be true or false')
    try:
        stop = parse_stop_strings(data.get("stop"))
    except ValueError as e:
        raise RequestError(HTTPStatus.BAD_REQUEST, f'"stop": {e}') from None
    return GenerationRequest(row, {k: v for k, v in data.items() if k not in GENERATE_OPTIONS}, stream, stop)


def decode_settings(scheduler: SchedulerFront, overrides: Dict[str, Any], limits: Limits) -> DecodeSettings:
    """The export's decoding settings with a request's changes, ``max_new_tokens`` at most the
    service's (a request asking for more is a 400; an export whose own is more gets the limit)."""
    overrides = dict(overrides)
    asked = overrides.get("max_new_tokens")
    if isinstance(asked, int) and not isinstance(asked, bool) and asked > limits.max_new_tokens:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"max_new_tokens {asked} is over the service's limit "
                                                   f"{limits.max_new_tokens}", param="max_new_tokens")
    default = scheduler.reference.decode_settings
    if "max_new_tokens" not in overrides and default is not None and default.max_new_tokens > limits.max_new_tokens:
        overrides["max_new_tokens"] = limits.max_new_tokens  # the export's own is more than the service allows
    try:
        return scheduler.settings_for(overrides)
    except InferenceError as e:
        raise RequestError(HTTPStatus.BAD_REQUEST, str(e)) from None


def server_sent_event(event: Event) -> bytes:
    """One event of a /generate stream, as ``text/event-stream`` writes it."""
    return b"event: " + event.kind.encode("ascii") + b"\ndata: " + orjson.dumps(event.payload) + b"\n\n"


class GenerationApi:
    """How a generation endpoint reads a request and writes its answer: ``/generate``'s own JSON
    and events (this class), or OpenAI's chat completions (``ChatCompletionsApi``)."""

    def parse(self, body: bytes, scheduler: SchedulerFront, limits: Limits) -> GenerationRequest:
        return parse_generate_request(body, len(scheduler.reference.fields), limits)

    def settings(self, scheduler: SchedulerFront, overrides: Dict[str, Any], limits: Limits) -> DecodeSettings:
        return decode_settings(scheduler, overrides, limits)

    @property
    def prompt_param(self) -> Optional[str]:
        """The request field that holds the prompt (named by errors about it)."""
        return None

    def error(self, e: RequestError) -> Any:
        """The JSON body of a refused request."""
        return {"error": str(e)}

    def answer(self, last: Event) -> Any:
        """The JSON body answering a whole decoding (its ``done`` or ``error`` event)."""
        return last.payload

    def stream_start(self) -> bytes:
        return b""

    def stream_bytes(self, event: Event) -> bytes:
        """What the stream sends for one event (nothing: b"")."""
        return server_sent_event(event)


class ChatCompletionsApi(GenerationApi):
    """``POST /v1/chat/completions`` (``wenxin.inference.openai_chat``): one instance a request."""

    def __init__(self, model_name: str) -> None:
        self.chat = ChatAnswer(model_name)
        self.max_tokens_key = "max_tokens"

    def parse(self, body: bytes, scheduler: SchedulerFront, limits: Limits) -> GenerationRequest:
        if not scheduler.reference.reads_conversations:
            raise RequestError(HTTPStatus.NOT_FOUND, "this model is no chat model (its input is no conversation): "
                                                     "use /generate")
        default = scheduler.reference.decode_settings
        data = load_json_body(body)
        try:
            request = parse_chat_request(data, default.strategy if default else "greedy", limits.max_messages)
        except ChatRequestError as e:
            raise RequestError(HTTPStatus.BAD_REQUEST, str(e), param=e.param) from None
        check_texts(request.row, "messages", param="messages")
        check_prompt_size(request.row, limits, param="messages")
        self.chat.include_usage = request.include_usage
        if isinstance(data, dict) and data.get("max_completion_tokens") is not None:
            self.max_tokens_key = "max_completion_tokens"
        return GenerationRequest(request.row, request.overrides, request.stream, request.stop)

    def settings(self, scheduler: SchedulerFront, overrides: Dict[str, Any], limits: Limits) -> DecodeSettings:
        try:
            return decode_settings(scheduler, overrides, limits)
        except RequestError as e:
            if e.param == "max_new_tokens":
                e.param = self.max_tokens_key
            raise

    @property
    def prompt_param(self) -> Optional[str]:
        return "messages"

    def error(self, e: RequestError) -> Any:
        return error_payload(str(e), e.status, e.param)

    def answer(self, last: Event) -> Any:
        if isinstance(last, DoneEvent):
            return self.chat.completion(last)
        if isinstance(last, ErrorEvent):
            return error_payload(last.error, HTTPStatus(last.status or HTTPStatus.UNPROCESSABLE_ENTITY))
        raise TypeError(f"a token event is no whole answer: {last!r}")

    def stream_start(self) -> bytes:
        return self.chat.first_chunk()

    def stream_bytes(self, event: Event) -> bytes:
        return self.chat.chunks(event)


class ClientWatch:
    """Waits for a request's client to disconnect (on ``receive``, after its body was read); then
    ``left`` is set and the request's job, once it has one, is cancelled."""

    def __init__(self, call: Call) -> None:
        self.left = asyncio.Event()
        self.job: Optional[GenerationJob] = None
        self._task = asyncio.ensure_future(self._watch(call))

    async def _watch(self, call: Call) -> None:
        while True:
            message = await call.receive()
            if message["type"] == "http.disconnect":
                self.left.set()
                if self.job is not None:
                    self.job.cancel()
                return

    def attach(self, job: GenerationJob) -> None:
        self.job = job
        if self.left.is_set():
            job.cancel()

    def close(self) -> None:
        self._task.cancel()


class GenerationEndpoints:
    """The handlers of ``/generate`` and ``/v1/chat/completions`` (see the module docstring)."""

    def __init__(self, scheduler: SchedulerFront, limits: Limits, metrics: ServiceMetrics,
                 model_name: str, log: Any) -> None:
        self.scheduler, self.limits, self.metrics, self.model_name = scheduler, limits, metrics, model_name
        self.log = log  # (path, status, seconds, tokens): the app's line and metrics of a finished request

    async def generate(self, call: Call) -> None:
        await self._serve(call, GenerationApi())

    async def chat_completions(self, call: Call) -> None:
        await self._serve(call, ChatCompletionsApi(self.model_name))

    async def _serve(self, call: Call, api: GenerationApi) -> None:
        start = time.perf_counter()
        deadline = time.monotonic() + self.limits.generation_timeout
        status: int = HTTPStatus.OK
        tokens = 0
        watch: Optional[ClientWatch] = None
        try:
            try:
                body = await read_body(call, self.limits.max_body_bytes, self.limits.read_timeout)
                request = api.parse(body, self.scheduler, self.limits)
                settings = api.settings(self.scheduler, request.overrides, self.limits)
                watch = ClientWatch(call)
                prompt = await self._prepare(request, api, watch, deadline)
                if prompt is None:  # the client left, or the time ran out while the prompt was prepared
                    if watch.left.is_set():
                        status = CLIENT_LEFT
                        self.metrics.generations.labels("cancelled").inc()
                    else:
                        await self._answer_event(call, api, request.stream,
                                                 DoneEvent("", [], FinishReason.TIME_LIMIT, 0))
                        self.metrics.generations.labels(FinishReason.TIME_LIMIT.value).inc()
                    return
                try:
                    self.scheduler.check_room(prompt, settings)
                except InferenceError as e:
                    param = "beam_size" if settings.rows > self.scheduler.limits.max_rows else api.prompt_param
                    raise RequestError(HTTPStatus.BAD_REQUEST, str(e), param=param) from None
                job = GenerationJob(request.row, prompt, settings, deadline, asyncio.get_running_loop(), request.stop)
                try:
                    self.scheduler.submit(job)
                except ServiceFull as e:
                    self.metrics.refused.inc()
                    raise RequestError(HTTPStatus.SERVICE_UNAVAILABLE, str(e),
                                       headers=[(b"retry-after", str(e.retry_after).encode("ascii"))]) from None
            except RequestError as e:
                status = e.status
                headers, answer = encode_answer(api.error(e), e.close, extra=e.headers)
                await call.send({"type": "http.response.start", "status": int(status), "headers": headers})
                await call.send({"type": "http.response.body", "body": answer})
                return
            watch.attach(job)
            try:
                answering = self._stream(call, job, api) if request.stream else self._answer(call, job, api)
                status, last = await answering
                tokens = len(last.tokens) if isinstance(last, DoneEvent) else 0
                self.metrics.generations.labels(last.finish_reason.value if isinstance(last, DoneEvent)
                                                else "error").inc()
            finally:
                job.cancel()  # a no-op once it is done; stops it when this request ends early
        finally:
            if watch is not None:
                watch.close()
            self.log(call.path, int(status), time.perf_counter() - start, tokens)

    async def answer_rows(self, rows: List[List[str]]) -> List[Dict[str, Any]]:
        """``/predict`` on a generation model: each row decoded with the export's settings (within
        the service's limits), together with every other request; ``{"text", "tokens"}`` each."""
        settings = decode_settings(self.scheduler, {}, self.limits)
        deadline = time.monotonic() + self.limits.generation_timeout
        loop = asyncio.get_running_loop()
        jobs: List[GenerationJob] = []
        try:
            for index, row in enumerate(rows):
                check_prompt_size(row, self.limits)
                try:
                    prompt = await asyncio.wait_for(self.scheduler.prepare(row),
                                                    max(deadline - time.monotonic(), 1e-3))
                    self.scheduler.check_room(prompt, settings)
                except (InferenceError, ValueError) as e:
                    raise RequestError(HTTPStatus.BAD_REQUEST, f"input {index}: {e}") from None
                except asyncio.TimeoutError:
                    raise RequestError(HTTPStatus.SERVICE_UNAVAILABLE, f"input {index}: its prompt was not ready "
                                       f"within --generation_timeout {self.limits.generation_timeout:g} s") from None
                jobs.append(GenerationJob(row, prompt, settings, deadline, loop))
                try:
                    self.scheduler.submit(jobs[-1])
                except ServiceFull as e:
                    self.metrics.refused.inc()
                    raise RequestError(HTTPStatus.SERVICE_UNAVAILABLE, str(e),
                                       headers=[(b"retry-after", str(e.retry_after).encode("ascii"))]) from None
            results = []
            for index, job in enumerate(jobs):
                while True:
                    event = await job.events.get()
                    if not isinstance(event, TokenEvent):
                        break
                if isinstance(event, ErrorEvent):
                    raise InferenceError(f"input {index}: {event.error}")
                self.metrics.generations.labels(event.finish_reason.value).inc()
                results.append({"text": event.text, "tokens": event.tokens})
            return results
        finally:
            for job in jobs:
                job.cancel()

    async def _prepare(self, request: GenerationRequest, api: GenerationApi, watch: ClientWatch,
                       deadline: float) -> Optional[Prompt]:
        """The request's prompt, prepared off the event loop; None when the client left or the time
        ran out first (a 400 for a prompt that cannot be made: too long, malformed)."""
        preparing = asyncio.ensure_future(self.scheduler.prepare(request.row))
        leaving = asyncio.ensure_future(watch.left.wait())
        try:
            done, _ = await asyncio.wait({preparing, leaving}, timeout=max(deadline - time.monotonic(), 0.0),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            leaving.cancel()
        if preparing not in done:
            preparing.cancel()
            return None
        try:
            return preparing.result()
        except (InferenceError, ValueError) as e:
            raise RequestError(HTTPStatus.BAD_REQUEST, str(e), param=api.prompt_param) from None

    async def _answer_event(self, call: Call, api: GenerationApi, stream: bool, event: Event) -> None:
        """Answer with one final event (as a whole answer, or a stream of it alone)."""
        if stream:
            headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
            await call.send({"type": "http.response.start", "status": 200, "headers": headers})
            await call.send({"type": "http.response.body", "body": api.stream_start() + api.stream_bytes(event)})
            return
        headers, body = encode_answer(api.answer(event))
        await call.send({"type": "http.response.start", "status": 200, "headers": headers})
        await call.send({"type": "http.response.body", "body": body})

    @staticmethod
    async def _answer(call: Call, job: GenerationJob, api: GenerationApi) -> Tuple[HTTPStatus, Event]:
        """Wait for the whole result and answer it as one JSON object."""
        while True:
            event = await job.events.get()
            if isinstance(event, TokenEvent):
                continue
            status = HTTPStatus.OK if isinstance(event, DoneEvent) else \
                HTTPStatus(event.status or HTTPStatus.UNPROCESSABLE_ENTITY)
            headers, body = encode_answer(api.answer(event))
            await call.send({"type": "http.response.start", "status": int(status), "headers": headers})
            await call.send({"type": "http.response.body", "body": body})
            return status, event

    @staticmethod
    async def _stream(call: Call, job: GenerationJob, api: GenerationApi) -> Tuple[HTTPStatus, Event]:
        """Send each event as it comes (server-sent events), until ``done`` or ``error``."""
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
        await call.send({"type": "http.response.start", "status": 200, "headers": headers})
        first = api.stream_start()
        if first:
            await call.send({"type": "http.response.body", "body": first, "more_body": True})
        while True:
            event = await job.events.get()
            last = not isinstance(event, TokenEvent)
            chunk = api.stream_bytes(event)
            if chunk or last:
                await call.send({"type": "http.response.body", "body": chunk, "more_body": not last})
            if last:
                return HTTPStatus.OK, event
