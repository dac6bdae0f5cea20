"""Loopback servers that answer as the model hubs do, for the calls their client libraries make
(no test reaches the internet): ``FakeHuggingFace`` (``huggingface_hub`` through ``HF_ENDPOINT``),
``FakeModelScope`` (``modelscope_hub`` through ``MODELSCOPE_ENDPOINT``) and ``FakeAIStudio``
(``aistudio_sdk``'s Gitea routes through ``STUDIO_GIT_HOST``). Each serves ``repos`` (repo id ->
folder); ``cut_after``: file name -> bytes of a response sent before the connection drops (a
download interrupted), for the next ``cuts`` responses of it; ``corrupt``: file names whose bytes differ
from their listed checksum; ``requests``: every (method, path and query, Range header)."""
import hashlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional
from urllib.parse import parse_qs, unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LFS_FROM_BYTES = 10_000  # files this large are LFS files: their sha256 is the hub's checksum


class FakeHub:
    """The HTTP server, the files of each repo, and sending a file (ranges, cuts, corruption);
    a subclass's ``route`` answers its hub's paths."""

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

            def do_POST(self):
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

    @staticmethod
    def sha256(path: str) -> str:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    def answer(self, handler: BaseHTTPRequestHandler, head: bool) -> None:
        url = urlparse(handler.path)
        self.requests.append((handler.command, unquote(handler.path), handler.headers.get("Range")))
        self.route(handler, unquote(url.path).strip("/").split("/"), parse_qs(url.query), head)

    def route(self, handler: BaseHTTPRequestHandler, parts: List[str], query: Dict[str, List[str]],
              head: bool) -> None:
        raise NotImplementedError

    def send_file(self, handler: BaseHTTPRequestHandler, data: bytes, name: str, headers: Dict[str, str],
                  head: bool) -> None:
        """``data`` from the byte its Range asks for (206), or whole (200), cut where asked."""
        headers = {"Accept-Ranges": "bytes", **headers}
        start, end = 0, len(data) - 1
        wanted = handler.headers.get("Range")
        if wanted and wanted.startswith("bytes=") and not head:
            first, _, last = wanted[len("bytes="):].partition("-")
            start, end = int(first), int(last) if last else len(data) - 1
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        body = data[start:end + 1]
        cut = None if head or self.cuts <= 0 else self.cut_after.get(name)
        if cut is not None and cut < len(body):  # a response shorter than the cut (a probe) arrives whole
            self.cuts -= 1
        else:
            cut = None
        self.send(handler, 206 if wanted and not head else 200, body, headers, head, cut)

    @staticmethod
    def send_json(handler: BaseHTTPRequestHandler, status: int, body: object, head: bool = False,
                  headers: Optional[Dict[str, str]] = None) -> None:
        FakeHub.send(handler, status, json.dumps(body).encode(),
                     {"Content-Type": "application/json", **(headers or {})}, head)

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


class FakeHuggingFace(FakeHub):
    """Hugging Face's API (model info, tree) and ``resolve`` file routes."""

    def sibling(self, name: str, path: str) -> dict:
        size = os.path.getsize(path)
        entry = {"rfilename": name, "size": size}
        if size >= LFS_FROM_BYTES:
            entry["lfs"] = {"sha256": self.sha256(path), "size": size, "pointerSize": 134}
        return entry

    def route(self, handler, parts, query, head):
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
                return self.send_json(handler, 200, tree, head)
            info = {"id": repo, "modelId": repo, "sha": COMMIT, "private": False, "gated": False,
                    "siblings": [self.sibling(name, p) for name, p in sorted(self.files(repo).items())]}
            return self.send_json(handler, 200, info, head)
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
            headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{etag}"'}
            if "lfs" in entry:
                headers["X-Linked-Etag"] = f'"{etag}"'
                headers["X-Linked-Size"] = str(len(data))
            return self.send_file(handler, data, name, headers, head)
        return self.error(handler, 404, "EntryNotFound", "no such route")

    @staticmethod
    def error(handler: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        FakeHub.send_json(handler, status, {"error": message}, handler.command == "HEAD",
                          {"X-Error-Code": code, "X-Error-Message": message})


class FakeModelScope(FakeHub):
    """ModelScope's API: ``/api/v1/models/OWNER/NAME/repo/files`` (every file with its size and
    SHA-256) and ``/api/v1/models/OWNER/NAME/repo?FilePath=...`` (a file, ranges too)."""

    def route(self, handler, parts, query, head):
        if parts[:3] == ["api", "v1", "models"] and len(parts) >= 6 and parts[5] == "repo" or \
                parts[:3] == ["api", "v1", "models"] and parts[-2:] == ["repo", "files"]:
            repo = "/".join(parts[3:5])
            if repo not in self.repos:
                return self.error(handler, 404, f"model {repo} does not exist")
            files = self.files(repo)
            if parts[-1] == "files":
                listing = [{"Path": name, "Name": os.path.basename(name), "Type": "blob",
                            "Size": os.path.getsize(p), "Sha256": self.sha256(p), "Revision": COMMIT}
                           for name, p in sorted(files.items())]
                return self.send_json(handler, 200, {"Code": 200, "Success": True, "Data": {"Files": listing}}, head)
            name = query.get("FilePath", [""])[0]
            if name not in files:
                return self.error(handler, 404, f"file {name} does not exist")
            return self.send_file(handler, self.content(files[name], name), name, {}, head)
        if parts == ["api", "v1", "repos", "internalAccelerationInfo"]:  # the library asks for a region
            return self.send_json(handler, 200, {"Code": 200, "Success": True, "Data": {}}, head)
        return self.error(handler, 404, "no such route")

    @staticmethod
    def error(handler: BaseHTTPRequestHandler, status: int, message: str) -> None:
        FakeHub.send_json(handler, status, {"Code": 10010205001, "Success": False, "Message": message},
                          handler.command == "HEAD")


class FakeAIStudio(FakeHub):
    """AI Studio's Gitea: ``tags/REV`` (not a tag here), ``git/trees/REV`` (the file list),
    ``contents/PATH`` (a file's size, commit and SHA-256) and ``media/PATH`` (the file, ranges too)."""

    def route(self, handler, parts, query, head):
        if parts[:3] != ["api", "v1", "repos"] or len(parts) < 7:
            return self.send_json(handler, 404, {"message": "not found"}, head)
        repo, what, rest = "/".join(parts[3:5]), parts[5], "/".join(parts[6:])
        if repo not in self.repos:
            return self.send_json(handler, 404, {"message": "repository does not exist"}, head)
        files = self.files(repo)
        if what == "tags":
            return self.send_json(handler, 404, {"message": "tag does not exist"}, head)
        if what == "git" and rest.startswith("trees/"):
            tree = [{"path": name, "mode": "100644", "type": "blob", "size": os.path.getsize(p),
                     "sha": hashlib.sha1(self.content(p, name)).hexdigest()} for name, p in sorted(files.items())]
            return self.send_json(handler, 200, {"sha": COMMIT, "url": f"{self.url}/api/v1/repos/{repo}/git/trees/"
                                                 f"{COMMIT}", "tree": tree, "truncated": False, "page": 1,
                                                 "total_count": len(tree)}, head)
        if rest not in files:
            return self.send_json(handler, 404, {"message": f"{rest} does not exist"}, head)
        if what == "contents":
            p = files[rest]
            return self.send_json(handler, 200, {
                "name": os.path.basename(rest), "path": rest, "type": "file", "size": os.path.getsize(p),
                "sha": hashlib.sha1(self.content(p, rest)).hexdigest(), "last_commit_sha": COMMIT,
                "Sha256": self.sha256(p)}, head)
        if what == "media":
            return self.send_file(handler, self.content(files[rest], rest), rest, {}, head)
        return self.send_json(handler, 404, {"message": "not found"}, head)
