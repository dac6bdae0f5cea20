"""Generation decoded in a process of its own: ``ProcessScheduler``.

Paddle Inference holds Python's interpreter lock for the whole of ``predictor.run()`` (measured:
a thread stepping a 76 ms program kept the main thread from waking for 73 ms at the median), so
with the ``paddle`` backend the service's event loop waited for every decoding step: under 16
streams at ERNIE-4.5-0.3B's shape ``/health`` took 152 ms at the median and 1.6 s at p99. Here the
``GenerationScheduler`` runs in a child process (started with ``spawn``: a fork of a process that
imported Paddle is not safe), so the serving process only reads requests, prepares their prompts
(tokenizing: the same ``Predictor`` without its model) and writes answers.

The two talk over one pipe, in plain picklable values:

- to the child: ``("submit", key, row, prompt, settings, deadline, stop)``, ``("cancel", key)``,
  ``("close",)``;
- to the serving process: ``("state", state, batched, onednn)`` as the model loads and warms up,
  ``("failed", error)``, ``("events", [(key, event), ...])`` (each turn's typed events,
  ``wenxin.inference.generation_events``) and ``("turn", turn)`` (``turn_plan.Turn``: its metrics,
  and which requests left the waiting line).

Deadlines are ``time.monotonic()`` values, one clock for every process of the machine. If the
child dies, every request it held is answered with an error (503) and the service is told
(``on_failure``), as when the model cannot be loaded.
"""
from __future__ import annotations

import asyncio
import logging
import multiprocessing
import pickle
import signal
import threading
from http import HTTPStatus
from multiprocessing.connection import Connection
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from wenxin.common.errors import InferenceError
from wenxin.common.logs import lean_records, setup_logging
from wenxin.inference.generation_events import DoneEvent, ErrorEvent, Event
from wenxin.inference.generation_scheduler import GenerationScheduler, deliver_events
from wenxin.inference.scheduler_front import GenerationJob, Prompt, SchedulerFront, SchedulerLimits, ServiceFull
from wenxin.inference.turn_plan import Turn
from wenxin.models.decoding import DecodeSettings

logger = logging.getLogger("wenxin.serve")
CLOSE_SECONDS = 30  # how long closing waits for the child before it is killed
# wenxin serve --decode_process: "auto" decodes apart where the backend holds Python's lock while it
# runs (Paddle Inference; not ONNX Runtime, which releases it) and the service is one process
DECODE_PROCESS_CHOICES = ("auto", "on", "off")


def _portable(error: BaseException) -> BaseException:
    """``error`` if it crosses a pipe intact, else an ``InferenceError`` with its text."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 (any failure to pickle: send its text)
        return InferenceError(f"{type(error).__name__}: {error}")


class _PipeLoop:
    """Stands in for a request's event loop in the child: the scheduler hands it each turn's events
    (``call_soon_threadsafe(deliver_events, items)``) and it sends them to the serving process."""

    def __init__(self, send: Callable[[Any], None], finished: Callable[[int], None]) -> None:
        self._send, self._finished = send, finished

    def call_soon_threadsafe(self, _callback: Callable[..., Any], items: List[Tuple[GenerationJob, Event]]) -> None:
        self._send(("events", [(job.key, event) for job, event in items]))
        for job, event in items:
            if isinstance(event, (DoneEvent, ErrorEvent)):
                self._finished(job.key)


def _child_main(conn: Connection, model_dir: str, limits: SchedulerLimits, num_threads: int, backend: str,
                onednn: str, task: str) -> None:
    """The decoding process: a ``GenerationScheduler`` fed from the pipe. The serving process owns
    its life: Ctrl-C (SIGINT to the terminal's process group) or a SIGTERM to the service's whole
    group drains the requests in flight through the serving process, which then says ``close``."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    setup_logging()
    lean_records()
    _ChildEngine(conn, GenerationScheduler(model_dir, limits, num_threads, backend, onednn, task, wait=False)).run()


class _ChildEngine:
    """The child's side: jobs from the pipe into the scheduler, its events and turns back."""

    def __init__(self, conn: Connection, scheduler: GenerationScheduler) -> None:
        self.conn, self.scheduler = conn, scheduler
        self._lock = threading.Lock()  # the pipe's sending end (the scheduler's thread and this one)
        self.jobs: Dict[int, GenerationJob] = {}
        self.loop = _PipeLoop(self.send, self._finished)
        scheduler.on_state = self._moved
        scheduler.on_failure = lambda error: self.send(("failed", _portable(error)))
        scheduler.on_turn = lambda turn: self.send(("turn", turn))
        if scheduler.error is not None:  # it moved before the listeners were set
            self.send(("failed", _portable(scheduler.error)))
        elif scheduler.state != "loading":
            self._moved(scheduler.state)

    def send(self, message: Any) -> None:
        with self._lock:
            self.conn.send(message)

    def _moved(self, state: str) -> None:
        if state != "failed":
            self.send(("state", state, self.scheduler.batched, self.scheduler.onednn))

    def _finished(self, key: int) -> None:
        self.jobs.pop(key, None)

    def run(self) -> None:
        """Until the serving process says ``close`` or goes away."""
        try:
            while True:
                message = self.conn.recv()
                if message[0] == "submit":
                    self._submit(*message[1:])
                elif message[0] == "cancel" and message[1] in self.jobs:
                    self.jobs[message[1]].cancel()
                elif message[0] == "close":
                    break
        except EOFError:  # the serving process went away
            pass
        finally:
            self.scheduler.close()

    def _submit(self, key: int, row: List[str], prompt: Prompt, settings: DecodeSettings, deadline: float,
                stop: Tuple[str, ...]) -> None:
        job = GenerationJob(row, prompt, settings, deadline, self.loop, stop)  # type: ignore[arg-type]  # a _PipeLoop
        job.key = key
        self.jobs[key] = job
        try:
            self.scheduler.submit(job)
        except ServiceFull as e:  # the serving process counts the same line: only a race
            self.jobs.pop(key, None)
            self.send(("events", [(key, ErrorEvent(str(e), HTTPStatus.SERVICE_UNAVAILABLE))]))


class ProcessScheduler(SchedulerFront):
    """A scheduler (``SchedulerFront``) whose decoding runs in a child process (see the module
    docstring). Its ``on_turn`` listener runs in the thread that reads the pipe."""

    def __init__(self, model_dir: str, limits: Optional[SchedulerLimits] = None, num_threads: int = 1,
                 backend: str = "auto", onednn: str = "auto", task: str = "", wait: bool = True) -> None:
        super().__init__(model_dir, limits, backend, task)
        self._jobs: Dict[int, GenerationJob] = {}  # submitted, not yet answered
        self._waiting: Set[int] = set()  # submitted, not yet let in (or ended)
        self._lock = threading.Lock()  # the jobs and the waiting line (never held while the pipe is used)
        self._send_lock = threading.Lock()  # the pipe's sending end
        self._closing = False
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self.process = context.Process(target=_child_main, name="wenxin-decode", daemon=True,
                                       args=(child_conn, model_dir, self.limits, num_threads, backend, onednn, task))
        self.process.start()
        child_conn.close()
        self._reader = threading.Thread(target=self._read, name="wenxin-decode-reader", daemon=True)
        self._reader.start()
        if wait:
            self.wait_loaded()

    @property
    def waiting_count(self) -> int:
        return len(self._waiting)

    def submit(self, job: GenerationJob) -> None:
        """Send ``job`` to the child (``ServiceFull`` when ``max_waiting`` requests already wait,
        or when the model could not be loaded)."""
        with self._lock:
            self.refuse_when_full(len(self._waiting))
            self._jobs[job.key] = job
            self._waiting.add(job.key)
        job.on_cancel = lambda key=job.key: self._send(("cancel", key))
        self._send(("submit", job.key, job.row, job.prompt, job.settings, job.deadline, job.stop))
        if job.cancelled.is_set():  # cancelled before it was sent: the child is told now
            self._send(("cancel", job.key))

    def close(self) -> None:
        """End every request (cancelled) and stop the child (killed while it still loads the model:
        it has nothing to answer, and a model may take minutes to load)."""
        self._closing = True
        if self.state == "loading":
            self.process.kill()
        self._send(("close",))
        self.process.join(CLOSE_SECONDS)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self._reader.join(CLOSE_SECONDS)
        self._preparer.shutdown(wait=False, cancel_futures=True)

    def _send(self, message: Any) -> None:
        with self._send_lock:
            try:
                self._conn.send(message)
            except (OSError, ValueError):  # the child is gone: its end is answered by _read
                pass

    # ---- the reading thread --------------------------------------------------------------------
    def _read(self) -> None:
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                self._child_gone()
                return
            kind = message[0]
            if kind == "events":
                self._deliver(message[1])
            elif kind == "turn":
                self._turned(message[1])
            elif kind == "state":
                _, self.state, self.batched, self.onednn = message
                if self.state != "loading":
                    self._loaded.set()
            elif kind == "failed":
                self._failed(message[1])

    def _deliver(self, items: List[Tuple[int, Event]]) -> None:
        """Each event to its request's event loop (one call a loop)."""
        by_loop: Dict[asyncio.AbstractEventLoop, List[Tuple[GenerationJob, Event]]] = {}
        with self._lock:
            for key, event in items:
                job = self._jobs.get(key)
                if job is None:
                    continue
                if isinstance(event, (DoneEvent, ErrorEvent)):
                    del self._jobs[key]
                    self._waiting.discard(key)
                by_loop.setdefault(job.loop, []).append((job, event))
        for loop, pairs in by_loop.items():
            try:
                loop.call_soon_threadsafe(deliver_events, pairs)
            except RuntimeError:  # the loop has closed: nobody waits
                for job, _ in pairs:
                    job.cancel()

    def _turned(self, turn: Turn) -> None:
        with self._lock:
            for admitted in turn.admitted:
                self._waiting.discard(admitted.key)
            for key, _ in turn.ended:
                self._waiting.discard(key)
        if self.on_turn is not None:
            self.on_turn(turn)

    def _failed(self, error: BaseException) -> None:
        self.error, self.state = error, "failed"
        self._loaded.set()
        if self.on_failure is not None:
            self.on_failure(error)

    def _child_gone(self) -> None:
        """The pipe closed: after ``close``, or the child died. Whoever still waits gets an error."""
        code = self.process.exitcode if not self.process.is_alive() else None
        with self._lock:  # with the error set here, a request submitted from now on is refused
            left = list(self._jobs)
            gone = self.error is None and not self._closing
            if gone:
                self.error = InferenceError(f"the decoding process exited (exit code {code})")
        if gone and self.error is not None:
            self._failed(self.error)
        message = str(self.error) if self.error is not None else "the service stopped"
        self._deliver([(key, ErrorEvent(message, HTTPStatus.SERVICE_UNAVAILABLE)) for key in left])
