"""The service's HTTP input and output over ASGI: reading a request body within its limits and
deadline, parsing JSON with a depth limit, refusing bad text, and writing JSON answers. Every
refusal is a ``RequestError`` carrying its status (and, where an API names it, the field at
fault); nothing here knows the endpoints (``wenxin.inference.routes`` does)."""
from __future__ import annotations

import asyncio
import itertools
import json
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

import orjson

Scope = Dict[str, Any]
Receive = Callable[[], Awaitable[Dict[str, Any]]]
Send = Callable[[Dict[str, Any]], Awaitable[None]]
Headers = List[Tuple[bytes, bytes]]
JSON_TYPE = b"application/json; charset=utf-8"


class RequestError(Exception):
    """A request that gets a 4xx (or 503) answer; ``close`` when the connection cannot be reused;
    ``param``: the request field at fault, where an API names it (OpenAI's); ``headers``: more
    answer headers (``Retry-After``, ``Allow``)."""

    def __init__(self, status: HTTPStatus, message: str, close: bool = False, param: Optional[str] = None,
                 headers: Sequence[Tuple[bytes, bytes]] = ()) -> None:
        super().__init__(message)
        self.status, self.close, self.param, self.headers = status, close, param, list(headers)


@dataclass
class Call:
    """One HTTP request as the app receives it (ASGI's three values)."""

    scope: Scope
    receive: Receive
    send: Send

    @property
    def method(self) -> str:
        return str(self.scope["method"])

    @property
    def path(self) -> str:
        return str(self.scope["path"])


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
    Infinity and numbers beyond a double: a body it refuses is parsed by ``json``, as before.
    ``json`` reads a number beyond a double (``1e400``) as infinity: the fields' own checks
    refuse it, since every number must be finite."""
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


async def read_body(call: Call, max_bytes: int, seconds: float) -> bytes:
    """The request's whole body: ``Content-Length`` required (chunked bodies refused), at most
    ``max_bytes``, all of it within ``seconds``."""
    headers: Dict[bytes, bytes] = {}
    for name, value in call.scope["headers"]:
        headers.setdefault(name, value)
    if b"transfer-encoding" in headers:
        raise RequestError(HTTPStatus.LENGTH_REQUIRED, "chunked bodies are not accepted: send Content-Length",
                           close=True)
    if b"content-length" not in headers:
        raise RequestError(HTTPStatus.LENGTH_REQUIRED, "Content-Length is required", close=True)
    declared = int(headers[b"content-length"])  # the parser has checked it: one non-negative integer
    if declared > max_bytes:
        raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body of {declared} bytes; the limit is {max_bytes}",
                           close=True)
    chunks, size = [], 0
    with BodyDeadline(seconds) as deadline:
        while True:
            message = await call.receive()
            if message["type"] == "http.disconnect":
                raise RequestError(HTTPStatus.BAD_REQUEST, "the client disconnected", close=True)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_bytes:  # cannot happen past the parser's own count, but never trust one check
                raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {max_bytes} bytes", close=True)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
    raise deadline.error()  # reached only when the deadline ended the read


def check_texts(texts: Sequence[str], which: str, param: Optional[str] = None) -> None:
    """A 400 for a text holding an unpaired surrogate (JSON's "\\ud800"), which is no text."""
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"{which} holds an unpaired surrogate "
                                                       f"(not a Unicode character)", param=param) from None


def encode_answer(payload: Any, close: bool = False, content_type: bytes = JSON_TYPE,
                  extra: Sequence[Tuple[bytes, bytes]] = ()) -> Tuple[Headers, bytes]:
    """The headers and body of an answer: ``payload`` as JSON, or bytes as they are."""
    body = payload if isinstance(payload, bytes) else orjson.dumps(payload)  # 17x json.dumps' speed
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode("ascii")), *extra]
    if close:
        headers.append((b"connection", b"close"))
    return headers, body


async def send_answer(send: Send, status: int, headers: Headers, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
