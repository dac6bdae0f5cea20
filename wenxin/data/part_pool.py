"""Work on the parts of data files in forked worker processes, results in part order.

The work's shared context (a reader, say) is set before the workers fork, so it reaches them
without pickling; a worker returns ``Failed`` for an error, which the parent raises again (the
first in part order). Workers ignore Ctrl-C (the parent stops them), die quietly when the pool
ends them, and die with the parent even when it is SIGKILLed.
"""
from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import signal
from typing import Any, Callable, Iterable, List, NamedTuple, Optional

from wenxin.common.errors import DataError, WenxinError
from wenxin.common.progress import ProgressBar
from wenxin.data.cached_examples import CacheUnavailable

PR_SET_PDEATHSIG = 1  # prctl option: a signal for this process when its parent dies
_context: Any = None  # the running work's context (set in the parent before the workers fork)


class Failed(NamedTuple):
    """A worker's error, raised again by the parent."""

    message: str
    unavailable: bool  # a CacheUnavailable (the reader may convert in memory instead)


def failure(e: BaseException) -> Failed:
    """What a worker returns for an error."""
    if isinstance(e, WenxinError):
        return Failed(str(e), isinstance(e, CacheUnavailable))
    return Failed(f"{type(e).__name__}: {e}", False)


def context() -> Any:
    """The context of the work running now (in a worker, or in the parent without workers)."""
    assert _context is not None, "called outside run_parts"
    return _context


def _worker_signals() -> None:
    """A worker ignores Ctrl-C (the parent stops the workers) and dies quietly when the pool
    terminates it: the parent's handlers (wenxin's, Paddle's crash report) would print a traceback
    from every worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):  # Linux: die with the parent, even a SIGKILLed one
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def run_parts(work: Callable[[Any], Any], tasks: List[Any], processes: int, shared: Any,
              weights: Optional[List[int]] = None, progress: str = "") -> List[Any]:
    """``work(task)`` for every task in up to ``processes`` forked workers (in this process for
    one), with ``context()`` returning ``shared``; results in task order. ``progress`` titles a
    progress bar advanced by each task's weight."""
    global _context
    bar = ProgressBar(sum(weights or []), progress) if progress and weights else None
    results: List[Any] = []
    processes = min(processes, len(tasks))
    _context = shared
    try:
        with contextlib.ExitStack() as stack:
            if processes > 1:
                pool = stack.enter_context(multiprocessing.get_context("fork").Pool(
                    processes, initializer=_worker_signals))
                outcomes: Iterable[Any] = pool.imap(work, tasks)
            else:
                outcomes = map(work, tasks)
            for result, weight in zip(outcomes, weights or [0] * len(tasks)):
                if isinstance(result, Failed):
                    raise CacheUnavailable(result.message) if result.unavailable else DataError(result.message)
                results.append(result)
                if bar is not None:
                    bar.update(bar.done + weight)
            if processes > 1:
                pool.close()  # let the workers exit (leaving the block would kill them, and
                pool.join()   # Paddle's signal handler would print a crash report for each)
    finally:
        _context = None
        if bar is not None:
            bar.close(keep=False)
    return results
