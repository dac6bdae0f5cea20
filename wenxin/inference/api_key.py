"""The service's API key: clients send ``Authorization: Bearer KEY``, as OpenAI's clients do.

``wenxin serve`` bound to a loopback address needs no key (only this machine reaches it); bound
beyond it (``--host 0.0.0.0`` to serve colleagues), it refuses to start without one unless told
``--api_key none``. The key comes from ``--api_key`` or ``$WENXIN_API_KEY`` (which keeps it out of
the process list). Every endpoint but ``/health`` (for load balancers' probes) asks for it; keys
are compared in constant time.
"""
from __future__ import annotations

import hmac
import os
from typing import Iterable, Optional, Tuple

from wenxin.common.addresses import is_loopback
from wenxin.common.errors import ConfigError

API_KEY_VARIABLE = "WENXIN_API_KEY"
NO_KEY = "none"  # --api_key none: serve beyond loopback without a key, on purpose
MIN_KEY_CHARS = 16  # a shorter key can be guessed
OPEN_PATHS = frozenset({"/health"})  # answered without a key


def resolve_api_key(flag: Optional[str], host: str) -> Optional[str]:
    """The key the service asks for (None: none), from ``--api_key`` or the environment; one
    ``ConfigError`` for a service beyond loopback without one, or a key that is too short or
    cannot travel in a header."""
    key = flag if flag is not None else (os.environ.get(API_KEY_VARIABLE) or None)
    if key == NO_KEY:
        return None
    if key is None:
        if is_loopback(host):
            return None
        raise ConfigError(f"--host {host} serves beyond this machine, and no API key is set: give one with --api_key "
                          f"KEY or ${API_KEY_VARIABLE} (clients send it as Authorization: Bearer KEY), or serve "
                          f"without one on purpose with --api_key {NO_KEY}")
    if len(key) < MIN_KEY_CHARS or not all("!" <= c <= "~" for c in key):
        raise ConfigError(f"--api_key: at least {MIN_KEY_CHARS} visible ASCII characters without spaces (a shorter "
                          f"key can be guessed); e.g. python -c \"import secrets; print(secrets.token_urlsafe(24))\"")
    return key


def authorized(headers: Iterable[Tuple[bytes, bytes]], key: str) -> bool:
    """Whether a request's headers carry ``Authorization: Bearer <key>`` (compared in constant time)."""
    expected = b"Bearer " + key.encode("ascii")
    for name, value in headers:
        if name.lower() == b"authorization":
            return hmac.compare_digest(value.strip(), expected)
    return False
