"""The studio's web application (Starlette): pages, and the JSON API they call, over the studio's
state (``workspace.Studio``).

Pages (``/``, ``/launch``, ``/runs/{id}``, ``/compare``) are small HTML shells; ``static/studio.js``
(the helpers, and the start) and one script a page (``runs.js``, ``launch.js``, ``run.js`` with
``try.js``, ``compare.js``, each adding itself to ``PAGES``) fill them from the API and keep
them current by polling, writing every value as text (never as HTML). The charts are uPlot's
(MIT), vendored in ``static/``; nothing loads from another site.

Pages come in English or Chinese (``i18n``): the shell carries the page's messages.

API (JSON): ``GET /api/tasks``, ``GET /api/tasks/status`` (which can run; what prepares the
rest), ``GET /api/form?task=PATH``, ``GET /api/preview?task=PATH`` (the data at a glance),
``POST /api/command`` (the command a form's values run, and each value's error),
``POST /api/prepare`` (run a preparation script as a job), ``POST /api/runs`` (launch a run or a
sweep), ``GET /api/runs``, ``GET /api/runs/{id}``, ``GET /api/runs/{id}/metrics?since=OFFSET``,
``GET /api/runs/{id}/log[?since=OFFSET]``, ``POST /api/runs/{id}/stop|resume|clone|delete|predict``,
``POST /api/runs/{id}/chat`` (server-sent events), ``GET /api/machine``, ``POST /api/examples``
(copy the examples into the root). ``/view/{id}/visualdl/...`` and
``/view/{id}/tensorboard/...`` forward to the run's tracker viewer (``viewers``).
"""
from __future__ import annotations

import asyncio
import html
import json
import os
import re
import threading
from typing import Any, Dict, List, Tuple

from wenxin.common.errors import WenxinError
from wenxin.studio import i18n, run_files
from wenxin.inference.http_io import MAX_JSON_DEPTH, json_depth_exceeds
from wenxin.studio.security import BodyTooLarge
from wenxin.studio.store import QUEUED
from wenxin.studio.viewers import VIEWER_KINDS, ViewerError
from wenxin.studio.machine import machine_use
from wenxin.studio.workspace import Studio, StudioError

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


PAGE = """<!doctype html>
<html lang="{html_lang}"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · wenxin studio</title>
<link rel="stylesheet" href="/static/uPlot.min.css"><link rel="stylesheet" href="/static/studio.css">
</head><body data-page="{page}" data-arg="{arg}" data-lang="{lang}">
<header><a class="brand" href="/">wenxin studio</a><nav><a href="/">{nav_runs}</a> <a href="/launch">{nav_launch}</a>
<a href="/compare">{nav_compare}</a></nav>
<a id="language" href="#" data-lang="{other_code}" lang="{other_code}">{other}</a>
<span class="root" title="{root_title}">{root}</span></header>
<main id="main"><noscript>{noscript}</noscript></main>
<script type="application/json" id="messages">{messages}</script>
<script src="/static/uPlot.iife.min.js"></script>{scripts}
</body></html>
"""


# what passes between the browser and a viewer: never the studio's cookies or token
FORWARDED_REQUEST_HEADERS = ("accept", "accept-language", "content-type", "if-none-match", "if-modified-since",
                             "x-xsrf-protected", "user-agent")
FORWARDED_RESPONSE_HEADERS = ("content-type", "content-encoding", "cache-control", "etag", "last-modified",
                              "location", "content-disposition", "x-content-type-options")
VIEWER_TIMEOUT_SECONDS = 60.0
# the page scripts: the helpers first, then each page's (a page's script adds it to PAGES; the run
# page's "try" box and the compare page's charts use the run page's parts, so every page loads all)
SCRIPTS = ("studio.js", "runs.js", "launch.js", "run.js", "try.js", "compare.js")


def forward(port: int, method: str, target: str, headers: Dict[str, str], body: bytes
            ) -> Tuple[int, List[Tuple[str, str]], bytes]:
    """One request to the viewer on ``port`` (127.0.0.1): its status, the headers passed back (a
    redirect to the viewer's own address becomes a path on the studio), and its body."""
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=VIEWER_TIMEOUT_SECONDS)
    try:
        connection.request(method, target, body=body or None, headers=headers)
        response = connection.getresponse()
        content = response.read()
        passed = []
        for name, value in response.getheaders():
            if name.lower() not in FORWARDED_RESPONSE_HEADERS:
                continue
            if name.lower() == "location":
                value = re.sub(r"^https?://[^/]+", "", value)
            passed.append((name, value))
        return response.status, passed, content
    finally:
        connection.close()


def page(title_key: str, name: str, root: str, language: str, arg: str = "", **title_values: object) -> str:
    """A page's shell in ``language``; its script fills it from the API (with the same messages)."""
    said = i18n.messages()[language]
    # inside <script>: no "</" may close it early (JSON allows "\u003c" for "<")
    embedded = json.dumps(said, ensure_ascii=False).replace("<", "\\u003c")
    return PAGE.format(title=html.escape(i18n.text(language, title_key, **title_values)), page=name,
                       arg=html.escape(arg), root=html.escape(root), lang=language,
                       html_lang=i18n.HTML_LANG[language], nav_runs=html.escape(said["nav.runs"]),
                       nav_launch=html.escape(said["nav.launch"]), nav_compare=html.escape(said["nav.compare"]),
                       other=html.escape(said["lang.other"]), other_code=said["lang.other_code"],
                       root_title=html.escape(said["nav.root"]), noscript=html.escape(said["noscript"]),
                       messages=embedded,
                       scripts="".join(f'<script src="/static/{name}"></script>' for name in SCRIPTS))


def build_app(studio: Studio) -> Any:  # noqa: C901 (ruff counts the routes' handlers, small closures, as one)
    """The Starlette application of ``studio``."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    def error(e: StudioError) -> JSONResponse:
        said = {"notice": e.notice.as_json()} if e.notice else {}
        return JSONResponse({"error": str(e), **said}, status_code=e.status)

    async def body_of(request: Request) -> Dict[str, Any]:
        try:
            body = await request.body()
        except BodyTooLarge:
            raise StudioError(413, "the request body is too large") from None
        if json_depth_exceeds(body, MAX_JSON_DEPTH):  # before the parser meets it (a deep body is no form)
            raise StudioError(400, f"the request body nests deeper than {MAX_JSON_DEPTH} levels")
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            raise StudioError(400, "the request body is not JSON") from None
        if not isinstance(data, dict):
            raise StudioError(400, "the request body must be a JSON object")
        return data

    def run_id_of(request: Request) -> int:
        text = request.path_params["run_id"]
        if not text.isdigit() or len(text) > 12:
            raise StudioError(404, "no such run")
        return int(text)

    def api(handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            try:
                result = await handler(request)
            except StudioError as e:
                return error(e)
            return result if isinstance(result, Response) else JSONResponse(result)
        return endpoint

    async def in_thread(function: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, function, *args)

    # pages
    def language_of(request: Request) -> str:
        return i18n.choose_language(request.cookies.get(i18n.LANGUAGE_COOKIE, ""),
                                    request.headers.get("accept-language", ""))

    def shell(request: Request, title_key: str, name: str, arg: str = "", **title_values: object) -> HTMLResponse:
        return HTMLResponse(page(title_key, name, studio.root, language_of(request), arg, **title_values),
                            headers={"Vary": "Accept-Language, Cookie"})

    async def runs_page(request: Request) -> HTMLResponse:
        return shell(request, "title.runs", "runs")

    async def launch_page(request: Request) -> HTMLResponse:
        return shell(request, "title.launch", "launch", request.query_params.get("task", ""))

    async def run_page(request: Request) -> HTMLResponse:
        run_id = request.path_params["run_id"]
        return shell(request, "title.run", "run", run_id, id=run_id)

    async def compare_page(request: Request) -> HTMLResponse:
        return shell(request, "title.compare", "compare", request.query_params.get("ids", ""))

    # API
    async def tasks(request: Request) -> Any:
        return await in_thread(studio.tasks.list_files)

    async def form(request: Request) -> Any:
        return await in_thread(studio.tasks.form, request.query_params.get("task"))

    async def machine(request: Request) -> Any:
        return await in_thread(machine_use)

    async def task_status(request: Request) -> Any:
        return {"status": await in_thread(studio.tasks.task_status)}

    async def preview(request: Request) -> Any:
        return await in_thread(studio.tasks.preview, request.query_params.get("task"))

    async def check_values(request: Request) -> Any:
        return await in_thread(studio.tasks.check_values, await body_of(request))

    async def prepare(request: Request) -> Any:
        return await in_thread(studio.prepare, await body_of(request))

    async def launch(request: Request) -> Any:
        body = await body_of(request)
        return await in_thread(studio.launch, body)

    async def runs(request: Request) -> Any:
        return {"runs": [studio.summary(run) for run in studio.store.runs()], "max_runs": studio.supervisor.max_runs}

    async def run(request: Request) -> Any:
        return studio.details(run_id_of(request))

    async def metrics(request: Request) -> Any:
        run = studio.run_or_404(run_id_of(request))
        since = request.query_params.get("since", "0")
        if not since.isdigit():
            raise StudioError(400, "since: a byte offset")
        records, offset = run_files.metrics_since(studio.folder(run), int(since))
        return {"records": records, "next": offset}

    async def log(request: Request) -> Any:
        """The log's tail; with ``since`` (the ``next`` of the last answer) only the lines after it."""
        run = studio.run_or_404(run_id_of(request))
        since = request.query_params.get("since")
        if since is None:
            return {"text": run_files.log_tail(studio.folder(run))}
        if not since.isdigit() or len(since) > 15:
            raise StudioError(400, "since: a byte offset (the next of the last answer)")
        text, next_offset = run_files.log_since(studio.folder(run), int(since))
        return {"text": text, "next": next_offset}

    async def stop(request: Request) -> Any:
        run_id = run_id_of(request)
        studio.run_or_404(run_id)
        try:
            return {"status": studio.supervisor.stop(run_id)}
        except ValueError as e:
            raise StudioError.refused(409, e) from None

    async def resume(request: Request) -> Any:
        run_id = run_id_of(request)
        studio.run_or_404(run_id)
        try:
            studio.supervisor.resume(run_id)
        except ValueError as e:
            raise StudioError.refused(409, e) from None
        return {"status": QUEUED}

    async def clone(request: Request) -> Any:
        source = studio.run_or_404(run_id_of(request))
        body = await body_of(request)
        body.setdefault("name", f"{source['name']} (clone)")
        return await in_thread(studio.launch, body, source)

    async def delete(request: Request) -> Any:
        run_id = run_id_of(request)
        body = await body_of(request)
        await in_thread(studio.delete, run_id, body.get("confirm"))
        return {"deleted": run_id}

    async def predict(request: Request) -> Any:
        run_id = run_id_of(request)
        body = await body_of(request)
        return await in_thread(studio.predict, run_id, body.get("texts"), body.get("checkpoint"))

    async def chat(request: Request) -> Response:
        """A chat model's answer as server-sent events (``{"text"}`` pieces, then ``{"done"}`` or
        ``{"error"}``); the reader leaving (the page's stop) ends the decoding at its next step."""
        run_id = run_id_of(request)
        body = await body_of(request)
        checkpoint = body.pop("checkpoint", None)
        model_dir, _ = await in_thread(studio.chosen_export, run_id, checkpoint)
        loop = asyncio.get_running_loop()
        queue: "asyncio.Queue[Dict[str, Any]]" = asyncio.Queue()
        stopped = threading.Event()

        def emit(event: Dict[str, Any]) -> None:  # from the model's thread
            loop.call_soon_threadsafe(queue.put_nowait, event)
        studio.models.chat(model_dir, body, emit, stopped)

        async def events() -> Any:
            try:
                while True:
                    event = await queue.get()
                    yield f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode()
                    if "done" in event or "error" in event:
                        return
            finally:
                stopped.set()  # ended, or the reader left: the decoding stops at its next step
        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    async def view(request: Request) -> Response:
        """A viewer's page or data, through the studio (started on the first request)."""
        run_id = run_id_of(request)
        kind = request.path_params["kind"]
        logdir = await in_thread(studio.viewer_logdir, run_id, kind)
        try:
            viewer = await in_thread(studio.viewers.open, run_id, kind, logdir)
        except ViewerError as e:
            raise StudioError(502, str(e)) from None
        try:
            body = await request.body()
        except BodyTooLarge:
            raise StudioError(413, "the request body is too large") from None
        headers = {name: request.headers[name] for name in FORWARDED_REQUEST_HEADERS if name in request.headers}
        headers.setdefault("accept-language", "en")  # VisualDL's page fails without one
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        query = request.scope.get("query_string", b"")
        target = raw_path.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")
        try:
            status, passed, content = await in_thread(forward, viewer.port, request.method, target, headers, body)
        except OSError as e:
            raise StudioError(502, f"{VIEWER_KINDS[kind].name} did not answer ({e})") from None
        return Response(content, status_code=status, headers=dict(passed))

    async def view_root(request: Request) -> Response:
        from starlette.responses import RedirectResponse
        return RedirectResponse(f"{request.url.path}/", status_code=307)

    async def examples(request: Request) -> Any:
        await body_of(request)
        from wenxin.runner import copy_examples
        try:
            written = await in_thread(copy_examples, studio.root)
        except WenxinError as e:
            raise StudioError(500, str(e)) from None
        return {"written": [os.path.relpath(path, studio.root) for path in written]}

    routes = [
        Route("/", runs_page), Route("/launch", launch_page), Route("/runs/{run_id}", run_page),
        Route("/compare", compare_page),
        Route("/api/tasks", api(tasks)), Route("/api/form", api(form)),
        Route("/api/tasks/status", api(task_status)), Route("/api/preview", api(preview)),
        Route("/api/machine", api(machine)),
        Route("/api/command", api(check_values), methods=["POST"]),
        Route("/api/prepare", api(prepare), methods=["POST"]),
        Route("/api/runs", api(runs), methods=["GET"]), Route("/api/runs", api(launch), methods=["POST"]),
        Route("/api/runs/{run_id}", api(run)), Route("/api/runs/{run_id}/metrics", api(metrics)),
        Route("/api/runs/{run_id}/log", api(log)),
        Route("/api/runs/{run_id}/stop", api(stop), methods=["POST"]),
        Route("/api/runs/{run_id}/resume", api(resume), methods=["POST"]),
        Route("/api/runs/{run_id}/clone", api(clone), methods=["POST"]),
        Route("/api/runs/{run_id}/delete", api(delete), methods=["POST"]),
        Route("/api/runs/{run_id}/predict", api(predict), methods=["POST"]),
        Route("/api/runs/{run_id}/chat", api(chat), methods=["POST"]),
        Route("/api/examples", api(examples), methods=["POST"]),
        Route("/view/{run_id}/{kind}", view_root),
        Route("/view/{run_id}/{kind}/{rest:path}", api(view), methods=["GET", "HEAD", "POST"]),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes)


__all__ = ["build_app"]
