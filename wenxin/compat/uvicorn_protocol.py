"""uvicorn's httptools protocol with a request-start deadline, a header size limit and
TCP_NODELAY (the one place wenxin reaches into uvicorn).

Why httptools: its C parser (llhttp) costs 0.09 ms a request where h11's pure-Python parser
costs 0.33 ms (measured: a fixed-response app served 11,000 against 3,000 requests/s), and for a
small model that was more than the model. llhttp is strict by itself: a malformed request line
or header, a negative or non-numeric ``Content-Length``, two ``Content-Length`` headers, and
``Content-Length`` beside ``Transfer-Encoding`` are parse errors (400, connection closed).

What this class adds:

- **TCP_NODELAY.** asyncio sets it only on sockets created with ``proto=IPPROTO_TCP``; the
  service's listening socket (``socket.create_server``) has proto 0, so its connections would
  wait 40 ms for the client's delayed ACK before a response body goes out.
- **A deadline for each request's line and headers.** uvicorn closes a connection that stays
  idle between requests (``timeout_keep_alive``), but any byte received cancels that timer, so a
  client sending its headers one byte at a time would hold the connection for ever. Here a
  connection on which no complete request line and headers arrived within ``header_timeout``
  seconds of the connection, or of the previous response, is closed.
- **A header size limit.** llhttp has none (Node.js enforces its own outside the parser); the
  request line and headers may take at most ``max_header_bytes``: counted as the parser
  reports them, and as raw bytes while they are still incomplete.

- **One send per response**: see ``_OneWriteResponses``.
- **Connections shed, not requests refused.** uvicorn answers every new request with 503 once
  ``limit_concurrency`` connections are open, however many of them are idle or stuck sending
  headers (256 half-sent connections, kept open by reconnecting, made 53 of 57 ``/health``
  probes of another client fail). Here a new connection closes the oldest *idle* one (no
  request being answered: a keep-alive connection, or one still sending its headers) of its
  own address once that address holds ``max_per_client`` connections, and of the address
  holding the most once the service holds one fewer than ``max_total``. A request being
  answered is never cut, and ``/health`` is answered even when every connection is busy.

It uses ``HttpToolsProtocol``'s ``connection_made``, ``data_received``, ``on_message_begin``,
``on_url``, ``on_header``, ``on_headers_complete``, ``on_response_complete``,
``send_400_response``, ``cycle``, ``loop``, ``transport``, ``client``, ``url``, ``connections``
(the server's set of open protocols) and ``limit_concurrency``, which uvicorn 0.30 to 0.54 keep.
``serving_protocol`` checks them where the service starts: when a uvicorn release lacks one, the
service runs on uvicorn's stock protocol instead, with a warning naming what is missing (and
without the deadline, the header limit and the shedding).
"""
from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import socket
from collections import Counter
from typing import Any, Iterable, List, Optional, Union

import uvicorn

from wenxin.compat import warn_if_untested

logger = logging.getLogger("wenxin")
warn_if_untested("uvicorn", uvicorn.__version__)
try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools missing, or the module moved: serving_protocol falls back
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

# what the hardened protocol takes from HttpToolsProtocol: methods it overrides or calls, and
# attributes the class's own code sets on each connection
USED_METHODS = ("connection_made", "data_received", "connection_lost", "on_message_begin", "on_url", "on_header",
                "on_headers_complete", "on_response_complete", "send_400_response")
USED_ATTRIBUTES = ("cycle", "loop", "transport", "client", "url", "connections", "limit_concurrency")
STOCK_PROTOCOL = "httptools"  # uvicorn's own class for the same parser (or "h11" without httptools)


def missing_internals(protocol: Optional[type]) -> List[str]:
    """What the hardened protocol needs and ``protocol`` (uvicorn's ``HttpToolsProtocol``) lacks."""
    if protocol is None:
        return ["uvicorn.protocols.http.httptools_impl.HttpToolsProtocol"]
    missing = [f"{name}()" for name in USED_METHODS if not callable(getattr(protocol, name, None))]
    try:
        source = inspect.getsource(protocol)
    except (OSError, TypeError):  # no source to read: trust the methods
        return missing
    return missing + [f"self.{name}" for name in USED_ATTRIBUTES if f"self.{name}" not in source]


def serving_protocol(header_timeout: float, max_header_bytes: int = 16 * 1024, max_per_client: int = 0,
                     max_total: int = 0) -> Union[type, str]:
    """The protocol for ``uvicorn.Config(http=...)``: the hardened one, or, when this uvicorn's
    ``HttpToolsProtocol`` lacks what it uses, uvicorn's stock protocol, with a warning."""
    missing = missing_internals(HttpToolsProtocol)
    if not missing:
        return hardened_protocol(header_timeout, max_header_bytes, max_per_client, max_total)
    stock = STOCK_PROTOCOL if HttpToolsProtocol is not None else "h11"
    logger.warning("uvicorn %s: its HTTP protocol lacks what wenxin's hardening uses (%s); serving with uvicorn's "
                   "stock %s protocol: no deadline for a request's headers, no header size limit, no connection "
                   "shedding (put a proxy in front, or install uvicorn 0.30 to 0.55)", uvicorn.__version__,
                   ", ".join(missing), stock)
    return stock


class _OneWriteResponses:
    """The connection's transport, holding a response's status line and headers until its body
    is written (or the loop's current callbacks have run), so both leave in one send: uvicorn
    writes them separately, and the second send cost the server a wake-up of the client
    (measured: socket writes were the service's largest cost after the model's own work)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport, self._loop = transport, loop
        self._held = b""

    def write(self, data: bytes) -> None:
        if self._held:
            data, self._held = self._held + data, b""
        elif data.startswith(b"HTTP/1.1 ") and data.endswith(b"\r\n\r\n"):  # a response's head
            self._held = data
            self._loop.call_soon(self.flush)
            return
        self._transport.write(data)

    def flush(self) -> None:
        if self._held:
            held, self._held = self._held, b""
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # everything else is the transport's
        return getattr(self._transport, name)


def request_path(url: bytes) -> bytes:
    """The path of a request target (``/health?x=1`` -> ``/health``)."""
    return url.split(b"?", 1)[0]


class HeadersTooLarge(Exception):
    """Raised from a parser callback; httptools turns it into a parse error (a 400)."""


def hardened_protocol(header_timeout: float, max_header_bytes: int = 16 * 1024, max_per_client: int = 0,  # noqa: C901
                      # (C901: ruff counts the methods of the class made here as one function; each is small)
                      max_total: int = 0) -> type:
    """An ``HttpToolsProtocol`` subclass (for ``uvicorn.Config(http=...)``) with that deadline,
    header limit and connection shedding (0: no limit)."""
    opened = itertools.count()  # the order connections were made in: the oldest is shed first

    class HardenedProtocol(HttpToolsProtocol):
        _deadline: Optional[asyncio.TimerHandle] = None
        _header_bytes = 0            # of the request being read
        _reading_headers = True      # its request line and headers are not complete yet
        _order = 0

        def _idle(self) -> bool:
            """Not answering a request: open keep-alive, or still sending a request's headers."""
            return (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing()

        def _host(self) -> Any:
            return self.client[0] if self.client else None

        def _shed_one(self, candidates: Iterable["HardenedProtocol"]) -> bool:
            idle = [c for c in candidates if c._idle()]
            if not idle:
                return False
            oldest = min(idle, key=lambda c: c._order)
            oldest.transport.close()
            return True

        def _shed(self) -> None:
            mine = [c for c in self.connections if isinstance(c, HardenedProtocol) and c._host() == self._host()]
            if max_per_client and len(mine) > max_per_client and not self._shed_one(mine):
                self.transport.close()  # every other connection of this address is being answered
                return
            live = [c for c in self.connections if isinstance(c, HardenedProtocol) and not c.transport.is_closing()]
            if max_total and len(live) >= max_total:  # keep a free slot: a new request is not refused
                busiest, _ = Counter(c._host() for c in live).most_common(1)[0]
                if not self._shed_one(c for c in live if c._host() == busiest and c is not self):
                    self._shed_one(c for c in live if c is not self)

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            waiting_for = self.cycle  # a new request replaces the cycle
            self._deadline = self.loop.call_later(header_timeout, self._expire, waiting_for)

        def _expire(self, waiting_for: Any) -> None:
            idle = self.cycle is None or self.cycle.response_complete  # never cut a request being answered
            if self.cycle is waiting_for and idle and not self.transport.is_closing():
                self.transport.close()

        def _count(self, size: int) -> None:
            self._header_bytes += size
            if self._header_bytes > max_header_bytes:
                raise HeadersTooLarge()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(_OneWriteResponses(transport, self.loop))  # type: ignore[arg-type]
            sock = transport.get_extra_info("socket")
            if sock is not None:  # headers and body are two writes: without this, Nagle's algorithm
                try:              # holds the body until the client's delayed ACK (40 ms)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    pass
            self._order = next(opened)
            self._shed()
            if not self.transport.is_closing():
                self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._reading_headers and not self.transport.is_closing():
                # still incomplete: httptools holds these bytes until a header ends
                self._header_bytes += len(data)
                if self._header_bytes > max_header_bytes:
                    self.send_400_response(f"Request line and headers over {max_header_bytes} bytes.")

        def on_message_begin(self) -> None:
            self._header_bytes, self._reading_headers = 0, True
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._count(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value) + 4)
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._reading_headers = False
            if request_path(self.url) != b"/health":
                super().on_headers_complete()
                return
            limit, self.limit_concurrency = self.limit_concurrency, None  # /health is answered even then
            try:
                super().on_headers_complete()
            finally:
                self.limit_concurrency = limit

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Optional[Exception]) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            super().connection_lost(exc)

    return HardenedProtocol
