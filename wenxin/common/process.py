"""The command-line process itself: Paddle's log level, background-thread failures, and
signals that end a run before training (Ctrl-C, SIGTERM). Nothing here imports Paddle, so the
command sets these up before Paddle loads.
"""
from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import threading
from typing import Any, Callable, Iterator, List, Optional


def quiet_paddle() -> None:
    """Silence Paddle's glog chatter unless the user asked for it."""
    os.environ.setdefault("GLOG_minloglevel", "2")
    os.environ.setdefault("GLOG_v", "0")


class Terminated(BaseException):
    """SIGTERM outside the training loop (which handles it itself: a checkpoint, then exit 0)."""


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, then act on them. ``import paddle`` turns
    an interrupt in the middle of it into an ``ImportError`` with its own message, and installs
    C handlers of its own part way through (a SIGTERM that met one ended the process with
    Paddle's banner), so the signals are blocked, not only caught, while the block runs: they
    stay pending, and are taken (``sigtimedwait``) when it ends, whatever handlers the block
    installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: List[int] = []
    held = {sig for sig in (signal.SIGINT, signal.SIGTERM) if not ignored(sig)}
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in held}
    blocking = hasattr(signal, "pthread_sigmask")
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, held) if blocking else None
    try:
        yield
    finally:
        if mask is not None:  # take the signals that arrived while blocked, before unblocking
            for sig in signal.sigpending() & held:
                signal.sigtimedwait([sig], 0)
                received.append(sig)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if signal.SIGINT in received:
        raise KeyboardInterrupt()
    if signal.SIGTERM in received:
        raise Terminated()


def load_paddle() -> None:
    """Import Paddle with signals held, then (Paddle installs handlers of its own) make SIGTERM
    end the command with one error line."""
    from wenxin.common.paddle_support import old_paddle_problem, require_paddle
    require_paddle()
    with deferred_signals():
        paddle = importlib.import_module("paddle")
    problem = old_paddle_problem("paddle", getattr(paddle, "__version__", "0.0.0"))  # a source build
    if problem:
        from wenxin.common.errors import InstallError
        raise InstallError(problem)
    end_on_sigterm()


def ignored(sig: int) -> bool:
    """Whether the process ignores ``sig``, as a background job of a non-interactive shell
    ignores SIGINT (or under ``nohup``-like launchers): wenxin then leaves it ignored, at every
    stage alike."""
    return signal.getsignal(sig) == signal.SIG_IGN


def end_on_sigterm() -> None:
    """Let SIGTERM end the command with one ``error:`` line instead of a silent kill."""
    if threading.current_thread() is threading.main_thread() and not ignored(signal.SIGTERM):
        def on_sigterm(signum: int, frame: Any) -> None:
            raise Terminated()

        signal.signal(signal.SIGTERM, on_sigterm)


_thread_failures: List[BaseException] = []


def watch_thread_failures() -> None:
    """Keep exceptions of background threads (a DataLoader's reader thread) for the main thread
    to report as part of its one error, instead of printing their tracebacks to stderr."""
    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            _thread_failures.append(args.exc_value)
            logging.getLogger("wenxin").debug("thread %s failed: %r", getattr(args.thread, "name", "?"), args.exc_value)

    threading.excepthook = hook


def last_thread_failure() -> Optional[str]:
    """The last line of the newest background-thread exception (its own message), if any."""
    if not _thread_failures:
        return None
    error = _thread_failures[-1]
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(error).__name__


def first_line(error: BaseException) -> str:
    """The first non-blank line of ``error``'s message ('' for none)."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else ""


def describe_failure(error: BaseException) -> str:
    """What failed: a background thread's own exception (a DataLoader's, which the main thread
    sees only as a dead queue), else ``error``'s type and first line."""
    return last_thread_failure() or f"{type(error).__name__}: {first_line(error)}"


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent ends, however it ends
    (``prctl(PR_SET_PDEATHSIG)``); False where that is not available. Safe in a ``preexec_fn``."""
    import ctypes
    import sys
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> None:
    """Have this process receive ``sig`` when ``parent_pid`` (the process that started it) ends,
    however it ends (a SIGKILLed supervisor must not leave its workers serving as orphans).

    Linux delivers it through ``parent_death_signal``; elsewhere a daemon thread watches the
    parent's pid change. A parent already gone gets ``sig`` sent at once."""
    if not parent_death_signal(sig):
        def watch() -> None:
            while os.getppid() == parent_pid:
                threading.Event().wait(0.5)
            os.kill(os.getpid(), sig)
        threading.Thread(target=watch, name="wenxin-parent-watch", daemon=True).start()
    if os.getppid() != parent_pid:  # it ended before the request above was in place
        os.kill(os.getpid(), sig)


def stop_on_signals(stop: Callable[[], None]) -> None:
    """From now on SIGTERM and Ctrl-C call ``stop`` (main thread only).

    A service hands its ``stop`` here before it runs. uvicorn installs handlers of its own while it
    serves (they answer the requests in flight) and puts these back afterwards, raising the
    signals it caught again, which then call ``stop`` once more (harmless). A signal that arrives
    before uvicorn's handlers are in place must still stop the service: a worker whose supervisor
    was SIGKILLed just after the model loaded is sent SIGTERM at once (``die_with_parent``), and a
    handler that did nothing there left it serving as an orphan."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop())


@contextlib.contextmanager
def children_leave_parent_garbage() -> Iterator[None]:
    """Processes forked inside this block never collect the parent's garbage.

    A forked child inherits the parent's unreachable-but-uncollected objects; if its garbage
    collector frees them, their finalizers run in a process without the parent's threads. An
    ONNX Runtime session or a Paddle predictor from earlier work then tears down a thread pool
    that is not there, and the child dies of SIGSEGV (a DataLoader worker: "Blocking queue is
    killed"). Freezing moves every object into the permanent generation, which a collector
    never visits, for as long as the block lasts in the parent and for good in the children
    (Python's documented way to fork: ``gc.freeze``)."""
    import gc
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
