"""Work on the parts of data files in forked worker processes, results in part order.

The work's shared context (a reader, say) is set before the workers fork, so it reaches them
without pickling; a worker returns ``Failed`` for an error, which the parent raises again (the
first in part order). Workers ignore Ctrl-C (the parent stops them), end their part and exit
when the parent stops early, and die with the parent even when it is SIGKILLed; a worker that dies
is reported and its parts run in the parent.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, List, NamedTuple, Optional

from wenxin.common.errors import DataError, WenxinError
from wenxin.common.process import children_leave_parent_garbage
from wenxin.common.progress import progress_of
from wenxin.data.cached_examples import CacheUnavailable

logger = logging.getLogger(__name__)
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
              weights: Optional[List[int]] = None, progress: str = "", bar: bool = False) -> List[Any]:
    """``work(task)`` for every task in up to ``processes`` forked workers (in this process for
    one), with ``context()`` returning ``shared``; results in task order. ``progress`` titles the
    progress advanced by each task's weight: a bar with ``bar``, else a log line every 30 s.

    A worker that dies (killed, or crashed) never leaves the parent waiting for a result that
    will not come (``multiprocessing.Pool`` did, when a task's worker died): the executor reports
    it, and the tasks without a result run in this process, after a warning."""
    global _context
    shown = progress_of(sum(weights), progress, bar, logger.info, "lines") if progress and weights else None
    results: List[Any] = []
    weights = weights or [0] * len(tasks)

    def take(result: Any) -> None:
        if isinstance(result, Failed):
            raise CacheUnavailable(result.message) if result.unavailable else DataError(result.message)
        results.append(result)
        if shown is not None:
            shown.update(shown.done + weights[len(results) - 1])

    _context = shared
    try:
        processes = min(processes, len(tasks))
        if processes > 1:
            pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"),
                                       initializer=_worker_signals)
            try:
                with children_leave_parent_garbage():  # the pool forks its workers as map submits the tasks
                    results_in_order = pool.map(work, tasks)
                for result in results_in_order:
                    take(result)
            except BrokenProcessPool:
                logger.warning("%s: a worker process died (killed or crashed); the %d parts left run in this "
                               "process", progress or "worker processes", len(tasks) - len(results))
            except BaseException:  # an error or a signal: stop, leaving the workers to end their part and exit
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            pool.shutdown(wait=True)  # they exit by themselves (killed, Paddle would print a crash report each)
        for task in tasks[len(results):]:
            take(work(task))
    finally:
        _context = None
        if shown is not None:
            shown.close(keep=False)
    return results
