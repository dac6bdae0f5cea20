"""A request-start deadline and TCP_NODELAY for uvicorn's h11 protocol (the one place wenxin
reaches into uvicorn).

asyncio sets TCP_NODELAY only on sockets created with ``proto=IPPROTO_TCP``; the service's
listening socket (``socket.create_server``) has proto 0, so its connections would wait 40 ms for
the client's delayed ACK before a response body goes out (measured: 48 ms for a 1 ms model).

uvicorn closes a connection that stays idle between requests (``timeout_keep_alive``), but any
byte received cancels that timer, so a client that sends its headers one byte at a time holds
the connection for ever. This protocol also closes a connection on which no complete request
line and headers arrived within ``header_timeout`` seconds of the connection, or of the previous
response. It uses ``H11Protocol``'s ``connection_made``, ``on_response_complete``, ``cycle``,
``loop`` and ``transport``, which uvicorn 0.30 to 0.54 keep.
"""
from __future__ import annotations

import asyncio
import socket
from typing import Any, Optional

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from wenxin.compat import warn_if_untested

warn_if_untested("uvicorn", uvicorn.__version__)


def protocol_with_header_timeout(header_timeout: float) -> type:
    """An ``H11Protocol`` subclass (for ``uvicorn.Config(http=...)``) with that deadline."""

    class HeaderTimeoutProtocol(H11Protocol):
        _deadline: Optional[asyncio.TimerHandle] = None

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            waiting_for = self.cycle  # a new request replaces the cycle
            self._deadline = self.loop.call_later(header_timeout, self._expire, waiting_for)

        def _expire(self, waiting_for: Any) -> None:
            idle = self.cycle is None or self.cycle.response_complete  # never cut a request being answered
            if self.cycle is waiting_for and idle and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            if sock is not None:  # headers and body are two writes: without this, Nagle's algorithm
                try:              # holds the body until the client's delayed ACK (40 ms)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    pass
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Optional[Exception]) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol
