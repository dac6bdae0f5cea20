"""The studio's guard: an ASGI middleware in front of every request.

- **Host.** Bound to a loopback address, the studio answers only requests whose ``Host`` names
  a loopback address (a web page cannot point another name at it: DNS rebinding).
- **Token.** Listening elsewhere needs a token (``--token``, ``$WENXIN_STUDIO_TOKEN``, or one
  generated and printed once at start, as Jupyter does). The first visit carries it as
  ``?token=...``; the studio answers with an HttpOnly, SameSite=Strict cookie and sends the
  browser on to the same page without it. API clients may send ``Authorization: Bearer TOKEN``.
  Tokens are compared in constant time.
- **Cross-site request forgery.** Every request that changes state (POST) must carry the
  ``X-Studio-CSRF`` header equal to the ``wenxin_studio_csrf`` cookie (which only the studio's
  own pages can read), unless it signs in with ``Authorization: Bearer`` (a header no browser
  sends by itself), a JSON body, and an ``Origin`` (when the browser sends one) equal to the
  studio's own. A tracker viewer's page (under ``/view/``) cannot send the studio's header: its
  requests that are not GET must carry an ``Origin`` equal to the studio's own (every browser
  sends one with them), and viewers only read records.
- **Limits.** Request bodies over ``max_body_bytes`` are refused (413) before they are read;
  the HTTP layer's header size and request-start deadline are ``wenxin serve``'s.
"""
from __future__ import annotations

import hmac
import secrets
from html import escape
from http.cookies import SimpleCookie
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qsl, urlencode

from wenxin.common.addresses import is_loopback
from wenxin.studio.i18n import HTML_LANG, LANGUAGE_COOKIE, choose_language, text

TOKEN_VARIABLE = "WENXIN_STUDIO_TOKEN"  # the token from the environment (kept out of the runs' environment)
MIN_TOKEN_CHARS = 16  # a shorter token can be guessed
TOKEN_COOKIE = "wenxin_studio_token"
CSRF_COOKIE = "wenxin_studio_csrf"
CSRF_HEADER = b"x-studio-csrf"
MAX_BODY_BYTES = 1024 * 1024
VIEWER_PATH = "/view/"  # tracker viewers, forwarded by the studio (``viewers``)

Scope = Dict[str, Any]
Receive = Callable[[], Awaitable[Dict[str, Any]]]
Send = Callable[[Dict[str, Any]], Awaitable[None]]


def new_token() -> str:
    return secrets.token_urlsafe(24)


def token_problem(token: str, where: str) -> Optional[str]:
    """Why ``token`` (from ``where``) will not do, or None: too short to resist guessing."""
    if 0 < len(token) < MIN_TOKEN_CHARS:
        return (f"{where}: {len(token)} characters; a token needs at least {MIN_TOKEN_CHARS} (a short one can be "
                f"guessed; leave it out and the studio makes one)")
    return None


def _headers(scope: Scope) -> Dict[bytes, bytes]:
    return {name.lower(): value for name, value in scope.get("headers", [])}


def _cookies(headers: Dict[bytes, bytes]) -> Dict[str, str]:
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(headers.get(b"cookie", b"").decode("latin-1"))
    except Exception:  # noqa: BLE001 (a malformed cookie header counts as none)
        return {}
    return {name: morsel.value for name, morsel in cookie.items()}


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


async def _answer(send: Send, status: int, text: str, headers: Optional[List[Tuple[bytes, bytes]]] = None) -> None:
    body = text.encode()
    headers = headers or []
    plain = [(b"content-type", b"text/plain; charset=utf-8")]
    kind = [] if any(name == b"content-type" for name, _ in headers) else plain
    await send({"type": "http.response.start", "status": status,
                "headers": [*kind, (b"content-length", str(len(body)).encode()), (b"cache-control", b"no-store"),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


def _wants_page(headers: Dict[bytes, bytes]) -> bool:
    """A browser opening a page (not a script or the page's own fetch): it is shown a page to sign in on."""
    return b"text/html" in headers.get(b"accept", b"")


# the sign-in page's look (the studio's stylesheet is behind the token too)
SIGN_IN_STYLE = ("body{font:16px/1.5 system-ui,sans-serif;margin:0;padding:1em;color:#1d2330;background:#f6f7f9}"
                 "main{max-width:32em}.cause{color:#8f1d14}input,button{font:inherit;min-height:44px;"
                 "box-sizing:border-box;max-width:100%}input{width:100%}button{padding:0 1.2em;border:1px solid "
                 "#3d6bd6;background:#3d6bd6;color:#fff;border-radius:4px}")


def sign_in_page(language: str, wrong: bool) -> str:
    """The page a browser without the studio's token gets, in its language: what it needs, and a
    field to paste the token into (sent as ``?token=``, which signs in and becomes a cookie)."""
    said = [escape(text(language, "signin.wrong"))] if wrong else []
    title = escape(text(language, "signin.title"))
    return (f'<!doctype html><html lang="{HTML_LANG[language]}"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{title}</title><style>{SIGN_IN_STYLE}</style></head><body><main><h1>{title}</h1>'
            + "".join(f'<p class="cause">{line}</p>' for line in said)
            + f'<p>{escape(text(language, "signin.need"))}</p><form method="get" action="/"><p><label>'
            f'{escape(text(language, "signin.token"))} <input type="password" name="token" autocomplete="off" '
            f'required minlength="{MIN_TOKEN_CHARS}"></label></p><p><button type="submit">'
            f'{escape(text(language, "signin.go"))}</button></p></form></main></body></html>')


async def _refuse_unsigned(send: Send, headers: Dict[bytes, bytes], cookies: Dict[str, str], wrong: bool,
                           text_answer: str) -> None:
    """401: a sign-in page in the browser's language for a browser, ``text_answer`` for anything else."""
    if not _wants_page(headers):
        await _answer(send, 401, text_answer)
        return
    language = choose_language(cookies.get(LANGUAGE_COOKIE, ""), headers.get(b"accept-language", b"").decode("latin-1"))
    await _answer(send, 401, sign_in_page(language, wrong), [(b"content-type", b"text/html; charset=utf-8")])


class Guard:
    """Wraps the studio's ASGI app with the checks above."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], token: str, loopback_only: bool,
                 max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.token = token
        self.loopback_only = loopback_only
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get(b"host", b"").decode("latin-1")
        if self.loopback_only and not is_loopback(host.rsplit(":", 1)[0] if not host.endswith("]") else host):
            await _answer(send, 421, "this studio answers only requests addressed to localhost")
            return
        cookies = _cookies(headers)
        extra: List[Tuple[bytes, bytes]] = []
        by_bearer = False
        if self.token:
            signed = await self._signed_in(scope, headers, cookies, send)
            if signed is None:  # answered: signed in by the address's token, or refused
                return
            by_bearer = signed
        csrf = cookies.get(CSRF_COOKIE, "")
        if scope["method"] not in ("GET", "HEAD"):
            problem = self._forgery_problem(scope, headers, csrf, host, by_bearer)
            if problem:
                await _answer(send, 403, problem)
                return
        if not csrf:
            cookie = f"{CSRF_COOKIE}={secrets.token_urlsafe(24)}; SameSite=Strict; Path=/"
            extra.append((b"set-cookie", cookie.encode()))
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            await _answer(send, 413, f"a request body holds at most {self.max_body_bytes} bytes")
            return
        await self.app(scope, self._limited(receive), self._with_headers(send, extra))

    async def _signed_in(self, scope: Scope, headers: Dict[bytes, bytes], cookies: Dict[str, str],
                         send: Send) -> Optional[bool]:
        """Whether the request carries the studio's token, and came by bearer token rather than
        the cookie; None when it has been answered: a GET with ``?token=`` (signed in and sent on
        without it, or refused), or a request without the token (refused)."""
        assert self.token is not None
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        given = query.get("token")
        if given is not None and scope["method"] == "GET":
            if not _same(given, self.token):
                await _refuse_unsigned(send, headers, cookies, True, "wrong token")
                return None
            rest = urlencode([(k, v) for k, v in parse_qsl(scope["query_string"].decode("latin-1")) if k != "token"])
            location = scope["path"] + (f"?{rest}" if rest else "")
            await _answer(send, 303, "signed in", [
                (b"location", location.encode("latin-1")),
                (b"set-cookie", f"{TOKEN_COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode())])
            return None
        bearer = headers.get(b"authorization", b"").decode("latin-1")
        presented = cookies.get(TOKEN_COOKIE) or (bearer[7:] if bearer.startswith("Bearer ") else "")
        if not presented or not _same(presented, self.token):
            await _refuse_unsigned(send, headers, cookies, False, "this studio needs its token: open the address it "
                                   "printed at start (…/?token=...), or send Authorization: Bearer TOKEN")
            return None
        # a header no browser adds by itself: such a request cannot be forged by another site
        return TOKEN_COOKIE not in cookies

    @staticmethod
    def _forgery_problem(scope: Scope, headers: Dict[bytes, bytes], csrf: str, host: str, by_bearer: bool) -> str:
        origin = headers.get(b"origin", b"").decode("latin-1")
        if scope["path"].startswith(VIEWER_PATH):
            if origin not in (f"http://{host}", f"https://{host}"):
                return "a viewer's request that is not GET needs the Origin of the studio's own pages"
            return ""
        sent = headers.get(CSRF_HEADER, b"").decode("latin-1")
        if not by_bearer and (not csrf or not sent or not _same(csrf, sent)):
            return "a state-changing request needs the X-Studio-CSRF header of the studio's own pages"
        if origin and origin not in (f"http://{host}", f"https://{host}"):
            return f"a request from another origin ({origin[:100]}) may not change the studio's state"
        if not headers.get(b"content-type", b"").startswith(b"application/json"):
            return "a state-changing request sends JSON (Content-Type: application/json)"
        return ""

    def _limited(self, receive: Receive) -> Receive:
        seen = 0
        limit = self.max_body_bytes

        async def limited() -> Dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge()
            return message

        return limited

    @staticmethod
    def _with_headers(send: Send, extra: List[Tuple[bytes, bytes]]) -> Send:
        if not extra:
            return send

        async def sending(message: Dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        return sending


class BodyTooLarge(Exception):
    """A chunked body ran past the limit (the app answers 413)."""
