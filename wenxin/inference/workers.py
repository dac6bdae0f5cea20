"""``wenxin serve --workers N``: N service processes on one listening socket.

Paddle's predictor holds Python's GIL while it runs, and the HTTP, JSON and text work of a
request is Python too, so one process serves with one core whatever its threads (measured: a
Python loop beside a thread running the Paddle predictor slowed to 0.38 of its speed; beside
ONNX Runtime, 0.98). More cores need more processes. Each worker is a ``Service`` in a process
of its own (started with ``spawn``: Paddle is not fork-safe) that loads the model, accepts
connections from the shared socket, and batches its own requests.

The parent only supervises. It waits until every worker has loaded the model (a worker that
cannot is the service's one error), starts a new worker when one dies, and gives up when workers
keep dying. On SIGTERM or Ctrl-C it sends SIGTERM to every worker, which stops accepting,
answers its requests in flight and exits 0. Metrics are added up across the workers by
prometheus_client's multiprocess mode, in a temporary folder of the service's own.
"""
from __future__ import annotations

import collections
import contextlib
import importlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from typing import Any, Deque, Dict, Iterator, List, Optional, Set, Tuple

from wenxin.common import errors
from wenxin.common.errors import InferenceError, WenxinError
from wenxin.inference.server import ServeOptions, check_settings, listen

logger = logging.getLogger("wenxin.serve")

_METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"
GIVE_UP_DEATHS = 5          # workers dying within GIVE_UP_SECONDS after the start: stop the service
GIVE_UP_SECONDS = 60.0


def _worker_main(index: int, sock: socket.socket, model_dir: str, options: ServeOptions, workers: int,
                 report: multiprocessing.connection.Connection, supervisor: int) -> None:
    """A worker process: load the model, say so, serve until SIGTERM (also sent when the
    supervisor ends, however it ends)."""
    from wenxin.common.logs import lean_records, setup_logging
    from wenxin.common.process import die_with_parent, quiet_paddle, stop_on_signals
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(143))  # until the model is loaded
    die_with_parent(supervisor)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops the workers
    quiet_paddle()
    setup_logging()
    lean_records()  # a line a request
    try:
        importlib.import_module("paddle")  # it installs signal handlers of its own: replaced below
        # stopped while loading the model (another worker failed): quietly, without Paddle's banner
        signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(143))
        from wenxin.inference.server import Service
        service = Service(model_dir, options=options, sock=sock, workers=workers)
    except BaseException as e:  # noqa: BLE001 (reported by the parent as the service's error)
        problems = e.problems if isinstance(e, WenxinError) else [f"{type(e).__name__}: {e}"]
        if not isinstance(e, WenxinError):
            logger.exception("worker %d could not start", index)
        report.send(("error", type(e).__name__, problems))
        report.close()
        raise SystemExit(2) from None
    service.app.log_prefix = f"worker {index + 1}: "
    stop_on_signals(service.stop)  # also one that arrives before uvicorn's handlers are in place
    report.send(("ready", os.getpid(), []))
    report.close()
    service.run()


def _error(class_name: str, problems: List[str]) -> WenxinError:
    """A worker's startup error, as the same class when it is one of wenxin's."""
    kind = getattr(errors, class_name, None)
    if not (isinstance(kind, type) and issubclass(kind, WenxinError)):
        kind = InferenceError
    return kind(problems=problems)


class ServiceWorkers:
    """Runs ``workers`` service processes over one listening socket and supervises them.

    Args:
        model_dir: an exported folder.
        host, port: where to listen (port 0: a free port, then in ``port``).
        workers: the number of processes, each with the model loaded.
        options: what each process runs (limits, batching, backend).
        stop_timeout: seconds a worker has to answer its requests after SIGTERM before it is killed.
    """

    def __init__(self, model_dir: str, host: str = "127.0.0.1", port: int = 8866, workers: int = 2,
                 options: Optional[ServeOptions] = None, stop_timeout: float = 35.0) -> None:
        self.model_dir, self.workers = model_dir, workers
        self.options = options or ServeOptions()
        check_settings(self.options, workers)
        self.stop_timeout = stop_timeout
        from wenxin.inference.predictor import Predictor
        # the folder's files and the backend, checked here before any worker loads the model
        self.backend = Predictor(model_dir, load_model=False, backend=self.options.backend,
                                 task=self.options.task).backend
        self.socket = listen(host, port)
        self.host, self.port = host, self.socket.getsockname()[1]
        self._context = multiprocessing.get_context("spawn")
        self._processes: Dict[int, Any] = {}  # worker index -> process
        self._deaths: Deque[float] = collections.deque()
        self._serving: Set[int] = set()  # pids of workers that have loaded the model
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._metrics_dir = tempfile.mkdtemp(prefix="wenxin-serve-metrics-")

    @property
    def pids(self) -> List[int]:
        """The worker processes' ids, in worker order."""
        return [p.pid for _, p in sorted(self._processes.items())]

    def stop(self) -> None:
        """Ask the service to stop (safe from a signal handler or another thread)."""
        self._stopping.set()

    def run(self) -> None:
        """Start the workers, supervise them until ``stop()``, then stop them; raises the error of
        a worker that cannot load the model, or when workers keep dying."""
        try:
            self._start_all()
            self._started.set()
            self._supervise()
        finally:
            self._stop_all()
            self.socket.close()
            shutil.rmtree(self._metrics_dir, ignore_errors=True)

    def start_in_thread(self) -> threading.Thread:
        """Run from a background thread (tests); returns once every worker serves. An error that
        ends the service later is kept in ``error``."""
        self.error: Optional[BaseException] = None

        def target() -> None:
            try:
                self.run()
            except BaseException as e:  # noqa: BLE001 (kept for the caller)
                self.error = e

        thread = threading.Thread(target=target, name="wenxin-serve-workers", daemon=True)
        thread.start()
        while not self._started.wait(0.05):
            if not thread.is_alive():
                raise self.error or InferenceError("the service stopped while starting")
        return thread

    # ---- starting ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _metrics_environment(self) -> Iterator[None]:
        """The metrics folder in the environment a worker starts with (prometheus_client reads it
        when it is imported), and nowhere else."""
        previous = os.environ.get(_METRICS_DIR)
        os.environ[_METRICS_DIR] = self._metrics_dir
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(_METRICS_DIR, None)
            else:
                os.environ[_METRICS_DIR] = previous

    def _spawn(self, index: int) -> Tuple[Any, multiprocessing.connection.Connection]:
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(target=_worker_main, name=f"wenxin-serve-worker-{index}",
                                        args=(index, self.socket, self.model_dir, self.options, self.workers, sender,
                                              os.getpid()),
                                        daemon=True)
        with self._metrics_environment():
            process.start()
        sender.close()
        self._processes[index] = process
        return process, receiver

    def _wait_ready(self, starting: Dict[int, Tuple[Any, multiprocessing.connection.Connection]]) -> None:
        """Wait until every starting worker has loaded the model; raise the first one's error."""
        pending = dict(starting)
        while pending:
            if self._stopping.is_set():
                return
            for index, (process, receiver) in list(pending.items()):
                if receiver.poll():
                    try:
                        kind, detail, problems = receiver.recv()
                    except EOFError:
                        kind, detail, problems = "exit", None, []
                elif not process.is_alive():
                    kind, detail, problems = "exit", None, []
                else:
                    continue
                receiver.close()
                del pending[index]
                if kind == "error":
                    raise _error(detail, problems)
                if kind == "exit":
                    raise InferenceError(f"worker {index} exited with status {process.exitcode} while loading "
                                         f"{self.model_dir}")
                self._serving.add(process.pid)
                logger.info("worker %d of %d serving (pid %d)", index + 1, self.workers, detail)
            if pending:
                multiprocessing.connection.wait([r for _, r in pending.values()]
                                                + [p.sentinel for p, _ in pending.values()], timeout=0.2)

    def _start_all(self) -> None:
        self._wait_ready({index: self._spawn(index) for index in range(self.workers)})

    # ---- supervising ---------------------------------------------------------------------------
    def _supervise(self) -> None:
        while not self._stopping.is_set():
            sentinels = [p.sentinel for p in self._processes.values()]
            multiprocessing.connection.wait(sentinels, timeout=0.2)
            for index, process in list(self._processes.items()):
                if process.is_alive() or self._stopping.is_set():
                    continue
                self._note_death(index, process)
                self._wait_ready({index: self._spawn(index)})

    def _note_death(self, index: int, process: Any) -> None:
        now = time.monotonic()
        self._deaths.append(now)
        while self._deaths and now - self._deaths[0] > GIVE_UP_SECONDS:
            self._deaths.popleft()
        if len(self._deaths) >= GIVE_UP_DEATHS:
            raise InferenceError(f"{len(self._deaths)} workers died within {GIVE_UP_SECONDS:g} s (the last, "
                                 f"worker {index + 1}, with status {process.exitcode}): stopping the service")
        logger.error("worker %d (pid %d) died with status %s; starting a new one", index + 1, process.pid,
                     process.exitcode)

    def _stop_all(self) -> None:
        """SIGTERM to every serving worker: each answers its requests in flight and exits; kill
        the late. A worker still loading the model has nothing to answer and is killed at once
        (a SIGTERM in the middle of ``import paddle`` meets Paddle's own handler and its banner).
        This process's copy of the listening socket is closed first: once the draining workers
        have closed theirs, a new client is refused at once instead of waiting in the backlog."""
        self.socket.close()
        alive = [p for p in self._processes.values() if p.is_alive()]
        for process in alive:
            with contextlib.suppress(ProcessLookupError):
                if process.pid in self._serving:
                    os.kill(process.pid, signal.SIGTERM)
                else:
                    process.kill()
        deadline = time.monotonic() + self.stop_timeout
        for process in alive:
            process.join(max(deadline - time.monotonic(), 0.0))
            if process.is_alive():
                logger.error("worker (pid %d) did not stop within %g s: killed", process.pid, self.stop_timeout)
                process.kill()
                process.join()
