"""Loopback servers that answer as the model hubs do, for the calls their client libraries make
(no test reaches the internet). ``FakeHuggingFace``: Hugging Face's API and file routes, as
``huggingface_hub`` calls them through ``HF_ENDPOINT`` / ``endpoint=``."""
import hashlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LFS_FROM_BYTES = 10_000  # files this large are LFS files: their sha256 is the hub's checksum


class FakeHuggingFace:
    """Serves ``repos`` (repo id -> folder) at ``url``. ``cut_after``: file name -> bytes sent
    before the connection drops (a download interrupted), for the next ``cuts`` downloads of the
    file; ``corrupt``: file names whose
    bytes differ from their listed sha256; ``requests``: every (method, path, Range header)."""

    def __init__(self, repos: Dict[str, str]) -> None:
        self.repos = repos
        self.cut_after: Dict[str, int] = {}
        self.cuts = 1
        self.corrupt: set = set()
        self.requests: List[tuple] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                fake.answer(self, head=True)

            def do_GET(self):
                fake.answer(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def files(self, repo: str) -> Dict[str, str]:
        folder = self.repos[repo]
        return {os.path.relpath(os.path.join(top, name), folder): os.path.join(top, name)
                for top, _, names in os.walk(folder) for name in names}

    def content(self, path: str, name: str) -> bytes:
        with open(path, "rb") as f:
            data = f.read()
        return data[:-1] + bytes([data[-1] ^ 1]) if name in self.corrupt else data

    def sibling(self, name: str, path: str) -> dict:
        size = os.path.getsize(path)
        entry = {"rfilename": name, "size": size}
        if size >= LFS_FROM_BYTES:
            with open(path, "rb") as f:
                entry["lfs"] = {"sha256": hashlib.sha256(f.read()).hexdigest(), "size": size, "pointerSize": 134}
        return entry

    def answer(self, handler: BaseHTTPRequestHandler, head: bool) -> None:
        path = unquote(urlparse(handler.path).path)
        self.requests.append((handler.command, path, handler.headers.get("Range")))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo = "/".join(parts[2:4])
            if repo not in self.repos:
                return self.error(handler, 404, "RepoNotFound", "Repository not found")
            if len(parts) >= 6 and parts[4] == "tree":  # list_repo_tree: every file, LFS ones with their sha256
                tree = []
                for name, p in sorted(self.files(repo).items()):
                    entry = self.sibling(name, p)
                    item = {"type": "file", "path": name, "size": entry["size"], "oid": hashlib.sha1(
                        self.content(p, name)).hexdigest()}
                    if "lfs" in entry:
                        item["lfs"] = {"oid": entry["lfs"]["sha256"], "size": entry["size"], "pointerSize": 134}
                    tree.append(item)
                return self.send(handler, 200, json.dumps(tree).encode(), {"Content-Type": "application/json"}, head)
            info = {"id": repo, "modelId": repo, "sha": COMMIT, "private": False, "gated": False,
                    "siblings": [self.sibling(name, p) for name, p in sorted(self.files(repo).items())]}
            return self.send(handler, 200, json.dumps(info).encode(), {"Content-Type": "application/json"}, head)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, name = "/".join(parts[:2]), "/".join(parts[4:])
            if repo not in self.repos:
                return self.error(handler, 404, "RepoNotFound", "Repository not found")
            files = self.files(repo)
            if name not in files:
                return self.error(handler, 404, "EntryNotFound", f"{name} does not exist")
            data = self.content(files[name], name)
            entry = self.sibling(name, files[name])
            etag = entry["lfs"]["sha256"] if "lfs" in entry else hashlib.sha1(data).hexdigest()
            headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
            if "lfs" in entry:
                headers["X-Linked-Etag"] = f'"{etag}"'
                headers["X-Linked-Size"] = str(len(data))
            start = 0
            wanted = handler.headers.get("Range")
            if wanted and wanted.startswith("bytes=") and not head:
                start = int(wanted[len("bytes="):].split("-")[0])
            if start:
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            body = data[start:]
            cut = None if head or self.cuts <= 0 else self.cut_after.get(name)
            if cut is not None:
                self.cuts -= 1
            return self.send(handler, 206 if start else 200, body, headers, head, cut)
        return self.error(handler, 404, "EntryNotFound", "no such route")

    @staticmethod
    def error(handler: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        FakeHuggingFace.send(handler, status, json.dumps({"error": message}).encode(),
                             {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"},
                             handler.command == "HEAD")

    @staticmethod
    def send(handler: BaseHTTPRequestHandler, status: int, body: bytes, headers: Dict[str, str], head: bool,
             cut: Optional[int] = None) -> None:
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if head:
            return
        if cut is not None:
            handler.wfile.write(body[:cut])
            handler.wfile.flush()
            handler.close_connection = True
            handler.connection.shutdown(2)  # the connection drops mid-file
            return
        handler.wfile.write(body)
