"""Tracker viewers: a run's VisualDL or TensorBoard page, started on demand and reached through the
studio, so the studio's token, host check and limits stand in front of it.

A viewer is the tracker's own server (``visualdl`` or ``tensorboard``) in a child process, bound to
127.0.0.1 on a free port and told to serve under ``/view/<run>/<kind>/`` (VisualDL's
``--public-path``, TensorBoard's ``--path_prefix``); the studio forwards that path to it unchanged.
Nothing the user typed reaches a shell: the command is an argument list whose only user-derived
word is the run's log folder, which lies under the root. At most ``max_viewers`` run at once (the
least recently used one stops for a new one); they stop with the studio, also when it is killed
(Linux's parent-death signal), and elsewhere a viewer left by a killed studio is stopped when the
next one starts (its pid file names it).
"""
from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Tuple

from wenxin.common.process import parent_death_signal
from wenxin.studio.processes import process_alive, process_start_time
from wenxin.studio.security import TOKEN_VARIABLE

LOOPBACK = "127.0.0.1"
READY_DEADLINE_SECONDS = 120.0  # a viewer that has not answered by then is reported, not waited for
MAX_LOG_LINES = 5


def _visualdl_command(logdir: str, port: int, prefix: str) -> List[str]:
    return [sys.executable, "-m", "visualdl.server.app", "--logdir", logdir, "--host", LOOPBACK,
            "--port", str(port), "--public-path", prefix, "--disable-telemetry",
            "--component_tabs", "scalar"]  # wenxin writes scalars; found tabs race a run's first records


def _tensorboard_command(logdir: str, port: int, prefix: str) -> List[str]:
    return [sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--host", LOOPBACK, "--port", str(port),
            "--path_prefix", prefix, "--load_fast", "false"]


@dataclass(frozen=True)
class ViewerKind:
    """How to start one tracker's viewer: its display name, the module it needs, its command."""
    name: str
    module: str
    command: Callable[[str, int, str], List[str]]


VIEWER_KINDS: Dict[str, ViewerKind] = {
    "visualdl": ViewerKind("VisualDL", "visualdl", _visualdl_command),
    "tensorboard": ViewerKind("TensorBoard", "tensorboard", _tensorboard_command),
}


def installed(kind: str) -> bool:
    """Whether the viewer of ``kind`` can start here (its package is importable)."""
    import importlib.util
    spec = VIEWER_KINDS.get(kind)
    return spec is not None and importlib.util.find_spec(spec.module) is not None


def view_prefix(run_id: int, kind: str) -> str:
    return f"/view/{run_id}/{kind}"


class ViewerError(Exception):
    """A viewer that could not start, with the reason (its log's last lines)."""


@dataclass
class Viewer:
    """One running viewer."""
    run_id: int
    kind: str
    logdir: str
    port: int
    process: subprocess.Popen
    log_path: str
    used: float = field(default_factory=time.monotonic)
    ready: bool = False

    def alive(self) -> bool:
        return self.process.poll() is None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def log_tail(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f.read()[-4000:].splitlines() if line.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-MAX_LOG_LINES:])


class ViewerPool:
    """The viewers this studio started, at most ``max_viewers`` alive (state in ``state_dir``:
    one log and one pid file a viewer)."""

    def __init__(self, state_dir: str, max_viewers: int = 4, ready_deadline: float = READY_DEADLINE_SECONDS) -> None:
        self.state_dir = os.path.join(state_dir, "viewers")
        self.max_viewers = max_viewers
        self.ready_deadline = ready_deadline
        self._viewers: Dict[Tuple[int, str], Viewer] = {}
        self._lock = threading.Lock()
        os.makedirs(self.state_dir, exist_ok=True)
        self._stop_orphans()

    def _pid_file(self, run_id: int, kind: str) -> str:
        return os.path.join(self.state_dir, f"{run_id}-{kind}.pid")

    def _stop_orphans(self) -> None:
        """Stop the viewers a killed studio left behind (known by pid and start time)."""
        for name in os.listdir(self.state_dir):
            if not name.endswith(".pid"):
                continue
            path = os.path.join(self.state_dir, name)
            try:
                with open(path, encoding="utf-8") as f:
                    record = json.load(f)
                if process_alive(record["pid"], record["started"]):
                    os.kill(int(record["pid"]), 15)
            except (OSError, ValueError, KeyError, TypeError):
                pass
            with contextlib.suppress(OSError):
                os.remove(path)

    def open(self, run_id: int, kind: str, logdir: str) -> Viewer:
        """The viewer of ``run_id``'s ``kind`` records in ``logdir``, started if it is not running,
        once it answers. Raises ``ViewerError`` when it exits or does not answer in time."""
        with self._lock:
            viewer = self._viewers.get((run_id, kind))
            if viewer is not None and (not viewer.alive() or viewer.logdir != logdir):
                self._stop(viewer)
                viewer = None
            if viewer is None:
                self._make_room()
                viewer = self._start(run_id, kind, logdir)
            viewer.used = time.monotonic()
        if not viewer.ready:
            self._wait_ready(viewer)
        return viewer

    def _make_room(self) -> None:
        alive = sorted((v for v in self._viewers.values()), key=lambda v: v.used)
        while len(alive) >= self.max_viewers:
            self._stop(alive.pop(0))

    def _start(self, run_id: int, kind: str, logdir: str) -> Viewer:
        port = free_port()
        log_path = os.path.join(self.state_dir, f"{run_id}-{kind}.log")
        command = VIEWER_KINDS[kind].command(logdir, port, view_prefix(run_id, kind))
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop(TOKEN_VARIABLE, None)  # nor has a viewer's
        with open(log_path, "wb") as log:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       env=env, cwd=os.path.dirname(logdir) or None,
                                       preexec_fn=parent_death_signal)  # a killed studio leaves none
        with open(self._pid_file(run_id, kind), "w", encoding="utf-8") as f:
            json.dump({"pid": process.pid, "started": process_start_time(process.pid)}, f)
        viewer = Viewer(run_id, kind, logdir, port, process, log_path)
        self._viewers[(run_id, kind)] = viewer
        return viewer

    def _wait_ready(self, viewer: Viewer) -> None:
        """Wait until the viewer answers on its prefix (a state, not a time: the deadline only
        turns a viewer that never comes up into an error)."""
        deadline = time.monotonic() + self.ready_deadline
        name = VIEWER_KINDS[viewer.kind].name
        while True:
            if not viewer.alive():
                tail = log_tail(viewer.log_path)
                raise ViewerError(f"{name} exited while starting (exit code {viewer.process.returncode})"
                                  + (f": {tail}" if tail else ""))
            try:
                connection = http.client.HTTPConnection(LOOPBACK, viewer.port, timeout=5)
                connection.request("GET", view_prefix(viewer.run_id, viewer.kind) + "/",
                                   headers={"Accept-Language": "en"})
                status = connection.getresponse().status
                connection.close()
                if status < 500:
                    viewer.ready = True
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise ViewerError(f"{name} did not answer within {self.ready_deadline:.0f} s; its log: "
                                  f"{log_tail(viewer.log_path) or '(empty)'}")
            time.sleep(0.2)

    def _stop(self, viewer: Viewer) -> None:
        self._viewers.pop((viewer.run_id, viewer.kind), None)
        if viewer.alive():
            viewer.process.terminate()
            try:
                viewer.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                viewer.process.kill()
                viewer.process.wait()
        with contextlib.suppress(OSError):
            os.remove(self._pid_file(viewer.run_id, viewer.kind))

    def stop_run(self, run_id: int) -> None:
        """Stop the viewers of ``run_id`` (it is being deleted)."""
        with self._lock:
            for viewer in [v for v in self._viewers.values() if v.run_id == run_id]:
                self._stop(viewer)

    def close(self) -> None:
        with self._lock:
            for viewer in list(self._viewers.values()):
                self._stop(viewer)

    def running(self) -> List[Tuple[int, str]]:
        with self._lock:
            return [key for key, viewer in self._viewers.items() if viewer.alive()]


__all__ = ["VIEWER_KINDS", "Viewer", "ViewerError", "ViewerKind", "ViewerPool", "installed", "view_prefix"]
