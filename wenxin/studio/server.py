"""``wenxin studio``: the studio's web server (uvicorn, with ``wenxin serve``'s hardened HTTP
protocol) over one root folder, with its supervisor."""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import IO, List, Optional, Sequence

from wenxin.common.errors import ConfigError
from wenxin.studio.app import build_app
from wenxin.studio.workspace import Studio, open_studio
from wenxin.studio.sign_in import studio_urls
from wenxin.studio.store import DEFAULT_BACKOFF
from wenxin.studio.security import TOKEN_VARIABLE, Guard, is_loopback, new_token, token_problem

logger = logging.getLogger("wenxin.studio")


class StudioServer:
    """The studio over ``root`` listening on ``host:port`` (port 0: any free one). Off loopback a
    token is required: ``token``, else ``$WENXIN_STUDIO_TOKEN``, else a new one (``self.token``,
    printed once by the command). The process works in ``root`` from then on: task files' relative
    paths mean the same to the studio as to its runs."""

    def __init__(self, root: str, host: str = "127.0.0.1", port: int = 8870, token: Optional[str] = None,
                 max_runs: int = 0, restart_budget: int = 3, max_body_bytes: int = 1 << 20,
                 restart_backoff: Sequence[float] = DEFAULT_BACKOFF) -> None:
        import uvicorn

        from wenxin.compat.uvicorn_protocol import serving_protocol
        from wenxin.inference.server import listen
        if restart_budget < 0:
            raise ConfigError("--restart_budget: at least 0")
        if not restart_backoff or not all(0 <= wait <= 3600 for wait in restart_backoff):
            raise ConfigError(f"--restart_backoff: {list(restart_backoff)}: each wait is from 0 to 3600 seconds")
        if max_runs < 0:
            raise ConfigError("--max_runs: at least 0 (0: one a core pair)")
        given = token if token is not None else os.environ.get(TOKEN_VARIABLE, "")
        problem = token_problem(given, "--token" if token is not None else f"${TOKEN_VARIABLE}")
        if problem:
            raise ConfigError(problem)
        loopback = is_loopback(host)
        self.token = given or ("" if loopback else new_token())
        self.generated_token = not given and not loopback
        self.root = root = os.path.abspath(root)  # before the chdir below: relative to where it was given
        os.makedirs(root, exist_ok=True)
        self.lock = hold_root(root)
        self.socket = listen(host, port)
        self.host, self.port = host, self.socket.getsockname()[1]
        self.lock.say(self.urls[0])
        os.chdir(root)  # task files' relative data paths mean the root, for the studio as for its runs
        self.studio: Studio = open_studio(root, max_runs, restart_budget, restart_backoff)
        app = Guard(build_app(self.studio), self.token, loopback_only=loopback, max_body_bytes=max_body_bytes)
        protocol = serving_protocol(10.0, 16 * 1024, 64, 256)
        config = uvicorn.Config(app, http=protocol, lifespan="off", access_log=False, log_config=None,
                                server_header=False, timeout_keep_alive=5, limit_concurrency=256,
                                timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)

    @property
    def url(self) -> str:
        """The address to open here (``urls``' first)."""
        return self.urls[0]

    @property
    def urls(self) -> List[str]:
        """Every address the studio answers at (``sign_in.studio_urls``)."""
        return studio_urls(self.host, self.port)

    def run(self) -> None:
        """Serve until SIGTERM or Ctrl-C (the runs go on: their keepers are separate processes)."""
        try:
            self.server.run(sockets=[self.socket])
        finally:
            self.studio.close()
            self.lock.release()

    def start_in_thread(self) -> threading.Thread:
        """Serve from a background thread (tests); returns once it accepts requests."""
        thread = threading.Thread(target=self.run, name="wenxin-studio", daemon=True)
        thread.start()
        while not self.server.started:
            if not thread.is_alive():
                raise RuntimeError("the studio stopped while starting")
            time.sleep(0.01)
        return thread

    def stop(self) -> None:
        self.server.should_exit = True


class RootLock:
    """One studio per root: an exclusive lock on ``<root>/.wenxin-studio/studio.lock`` (released
    when the process ends, however it ends), which holds the address of the studio that has it."""

    def __init__(self, path: str, handle: Optional[IO[str]]) -> None:
        self.path, self.handle = path, handle

    def say(self, address: str) -> None:
        """Write the holder's address and process, for a second studio's error."""
        if self.handle is not None:
            self.handle.seek(0)
            self.handle.truncate()
            self.handle.write(f"{address} (pid {os.getpid()})\n")
            self.handle.flush()

    def release(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def hold_root(root: str) -> RootLock:
    """The lock of ``root``; a ``ConfigError`` naming the other studio's address when one holds it.
    (Where the platform has no ``fcntl``, Windows, nothing is locked.)"""
    try:
        import fcntl
    except ImportError:
        return RootLock("", None)
    from wenxin.studio.store import STATE_DIR
    folder = os.path.join(root, STATE_DIR)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "studio.lock")
    handle = open(path, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        other = handle.read().strip() or "an address it has not written yet"
        handle.close()
        raise ConfigError(f"--root: another studio already serves {root}, at {other}: open that one, or stop it "
                          f"first") from None
    return RootLock(path, handle)
