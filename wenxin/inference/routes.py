"""The service's route table: each endpoint is one ``Route`` (method, path, handler, the JSON
Schema of its request body, what it answers), looked up by method and path, and described by the
OpenAPI document the service serves at ``/openapi.json`` (built from the same rows, so it never
lists an endpoint that is not there, nor misses one). Adding an endpoint is a row and a handler."""
from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Awaitable, Callable, Dict, Optional, Sequence, Tuple

from wenxin.inference.http_io import Call, RequestError


@dataclass
class Answer:
    """What a handler answers when it does not send its answer itself: a status, a JSON payload
    (or bytes with ``content_type``), and how many inputs the request held (metrics)."""

    status: HTTPStatus
    payload: Any
    inputs: int = 0
    content_type: Optional[bytes] = None


Handler = Callable[[Call], Awaitable[Optional[Answer]]]  # None: the handler sent its answer (a stream)


@dataclass
class Route:
    """One endpoint. ``request``: the JSON Schema of its body (None: it reads none); ``answers``:
    status -> what it means, for the OpenAPI document; ``streams``: it may answer with server-sent
    events (``text/event-stream``)."""

    method: str
    path: str
    handler: Handler
    summary: str
    request: Optional[Dict[str, Any]] = None
    answers: Dict[int, str] = field(default_factory=lambda: {200: "the answer"})
    streams: bool = False


class RouteTable:
    """Routes by method and path; ``find`` raises the 404 or 405 (with ``Allow``) of a request
    that matches none."""

    def __init__(self, routes: Sequence[Route]) -> None:
        self.routes = list(routes)
        self._by_key: Dict[Tuple[str, str], Route] = {}
        for route in self.routes:
            key = (route.method, route.path)
            if key in self._by_key:
                raise ValueError(f"two routes for {route.method} {route.path}")
            self._by_key[key] = route
        self.paths = {route.path for route in self.routes}

    def find(self, method: str, path: str) -> Route:
        route = self._by_key.get((method, path))
        if route is not None:
            return route
        if path in self.paths:
            allowed = ", ".join(sorted(r.method for r in self.routes if r.path == path))
            raise RequestError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not allowed on {path} (allowed: {allowed})",
                               close=True, headers=[(b"allow", allowed.encode("ascii"))])
        raise RequestError(HTTPStatus.NOT_FOUND, f"no such endpoint: {path}", close=method != "GET")

    def openapi(self, title: str, version: str, description: str = "") -> Dict[str, Any]:
        """The OpenAPI 3.1 document of every route."""
        paths: Dict[str, Dict[str, Any]] = {}
        for route in self.routes:
            operation: Dict[str, Any] = {"summary": route.summary, "responses": {}}
            for status, meaning in sorted(route.answers.items()):
                content: Dict[str, Any] = {"application/json": {"schema": {"type": "object"}}}
                if route.streams and status == 200:
                    content["text/event-stream"] = {"schema": {"type": "string"}}
                operation["responses"][str(status)] = {"description": meaning, "content": content}
            if route.request is not None:
                operation["requestBody"] = {"required": True,
                                            "content": {"application/json": {"schema": route.request}}}
            paths.setdefault(route.path, {})[route.method.lower()] = operation
        return {"openapi": "3.1.0", "info": {"title": title, "version": version, "description": description},
                "paths": paths}


def object_schema(properties: Dict[str, Any], required: Sequence[str] = (), **extra: Any) -> Dict[str, Any]:
    """A JSON Schema object with ``properties`` and no others."""
    schema: Dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False, **extra}
    if required:
        schema["required"] = list(required)
    return schema
