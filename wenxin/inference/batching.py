"""Batching across requests for the HTTP service.

Concurrent requests are queued. A preprocessing thread takes them in arrival order and groups
everything queued into one batch of at most ``max_batch`` rows. When every model thread is busy
it keeps gathering for at most ``max_wait_ms``; when one is free the batch goes at once, so a lone
request never waits. It converts each request's rows (a bad row fails only its own request) and
collates the batch. ``model_threads`` model threads run the batches. Each owns a ``paddle.inference``
predictor, created on that thread and used only there: a predictor shared between threads, even
one at a time, failed under load with ``RuntimeError: std::exception``. The job queue between
the two stages holds one batch per worker, so the next batch is converted while the model runs
the previous one.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from wenxin.common.errors import InferenceError, WenxinError
from wenxin.inference.predictor import Predictor

logger = logging.getLogger("wenxin")

Rows = List[Sequence[str]]
Results = List[Dict[str, Any]]
_STOP = object()


class _Request:
    """Rows to predict and the future that gets their results: an asyncio future of ``loop``
    (settled in that loop's thread), or a thread-safe one."""
    __slots__ = ("rows", "future", "loop", "pieces_rows", "pieces")

    def __init__(self, rows: Sequence[Sequence[str]], loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
        self.rows, self.loop = rows, loop
        self.pieces_rows: Rows = list(rows)  # what the model runs: the rows, or pieces of long ones
        self.pieces: Sequence[Any] = []
        self.future: Any = loop.create_future() if loop is not None else concurrent.futures.Future()


Outcome = Tuple[_Request, Optional[Results], Optional[BaseException]]


Settled = Tuple[Any, Optional[Results], Optional[BaseException]]  # a future, its results or its error


def _settle(outcomes: List[Settled]) -> None:
    for future, results, error in outcomes:
        if future.done():  # cancelled: nobody waits for it
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(results)


def _finish(outcomes: List[Outcome]) -> None:
    """Settle requests' futures: thread-safe ones here, each event loop's in one call made in its
    own thread (one wake-up per batch instead of one per request: measured, the wake-ups cost the
    model thread more than running a small model)."""
    by_loop: Dict[asyncio.AbstractEventLoop, List[Settled]] = {}
    for request, results, error in outcomes:
        if request.loop is None:
            _settle([(request.future, results, error)])
        else:
            by_loop.setdefault(request.loop, []).append((request.future, results, error))
    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, items)
        except RuntimeError:  # the loop has closed: nobody waits for these answers
            pass


Part = Tuple[Optional[List[int]], Rows, Dict[str, Any]]  # a model batch: its rows' indexes in the job (None: all,
# in order), the rows, their collated arrays


class _Job:
    """The rows of the requests it answers, in order, collated as one model batch or, where the
    model sorts rows by length (``Predictor.sorted_batches``), as several."""
    __slots__ = ("requests", "rows", "parts")

    def __init__(self, requests: List[_Request], rows: Rows, parts: List[Part]) -> None:
        self.requests, self.rows, self.parts = requests, rows, parts


class BatchingPool:
    """Runs the predictions of concurrent requests in shared batches.

    Args:
        model_dir: an exported folder.
        backend: ``auto``, ``paddle`` or ``onnxruntime`` (see ``Predictor``).
        onednn: the Paddle backend's oneDNN setting (see ``Predictor``).
        model_threads: threads running batches, each with its own predictor.
        max_batch: most rows in one model batch (a larger request runs as its own batch).
        max_wait_ms: how long the first request of a batch waits for others.
        num_threads: CPU math threads of each predictor.
        task: a task package to import first (see ``Predictor``).
    """

    def __init__(self, model_dir: str, model_threads: int = 1, max_batch: int = 64, max_wait_ms: float = 2.0,
                 num_threads: int = 1, backend: str = "auto", onednn: str = "auto", task: str = "") -> None:
        self.converter = Predictor(model_dir, load_model=False, backend=backend, task=task)
        self.backend = self.converter.backend
        self.meta = self.converter.meta
        self.num_fields = len(self.converter.fields)
        self.model_threads, self.max_batch, self.max_wait = model_threads, max_batch, max_wait_ms / 1000.0
        self.onednn = ""  # the Paddle backend's oneDNN choice, in words (set by the model threads)
        self.rows_run = 0  # rows predicted so far
        self.largest_batch = 0  # the most rows one model batch held
        self.on_batch: Optional[Callable[[int], None]] = None  # told each model batch's rows (metrics)
        self._busy = 0  # model threads running a batch
        self._lock = threading.Lock()
        self._requests: "queue.Queue[Any]" = queue.Queue()
        self._jobs: "queue.Queue[Any]" = queue.Queue(maxsize=model_threads)
        self._ready = threading.Barrier(model_threads + 1)
        self._startup_errors: List[BaseException] = []
        self._loaded: List[Predictor] = []  # the model threads' predictors (their engines' rules)
        self._threads = [threading.Thread(target=self._model_loop, args=(model_dir, num_threads, self.backend, onednn),
                                          name=f"wenxin-model-{i}", daemon=True) for i in range(model_threads)]
        for thread in self._threads:
            thread.start()
        self._ready.wait()
        if self._startup_errors:
            self.close()
            error = self._startup_errors[0]
            raise error if isinstance(error, WenxinError) else InferenceError(f"{model_dir}: {error}")
        # how a batch's rows split into model batches: the rule of a loaded predictor, whose engine
        # has its say (only its rule is read here; the model thread alone runs it)
        self._sorted_batches = self._loaded[0].sorted_batches
        self._collector = threading.Thread(target=self._collect_loop, name="wenxin-batcher", daemon=True)
        self._collector.start()
        self._closed = False

    # ---- the caller's side ---------------------------------------------------------------
    def submit(self, rows: Sequence[Sequence[str]], loop: Optional[asyncio.AbstractEventLoop] = None) -> Any:
        """Queue ``rows``; the future gets one result per row, in order (or the row's error). With
        ``loop`` (call from its thread), an asyncio future of that loop; else a thread-safe one."""
        request = _Request(rows, loop)
        self._requests.put(request)
        return request.future

    def predict(self, rows: Rows) -> Results:
        return self.submit(rows).result()

    def close(self) -> None:
        """Finish what is queued, then stop the threads."""
        if getattr(self, "_collector", None) is not None and self._collector.is_alive():
            self._requests.put(_STOP)
            self._collector.join()
        for thread in self._threads:
            if thread.is_alive():
                self._jobs.put(_STOP)
        for thread in self._threads:
            thread.join()

    # ---- the preprocessing thread ------------------------------------------------------------
    def _collect_loop(self) -> None:
        carried: Optional[_Request] = None
        while True:
            first = carried if carried is not None else self._requests.get()
            carried = None
            if first is _STOP:
                return
            batch, rows = [first], len(first.rows)
            deadline = time.perf_counter() + self.max_wait
            stop = False
            while rows < self.max_batch:
                try:
                    nxt = self._requests.get_nowait()  # everything already queued joins the batch
                except queue.Empty:
                    remaining = deadline - time.perf_counter()
                    if self._busy < self.model_threads or remaining <= 0:
                        break  # a model thread is free: waiting would only add latency
                    try:  # every model thread is busy: gather more while they work
                        nxt = self._requests.get(timeout=min(remaining, 0.0005))
                    except queue.Empty:
                        continue
                if nxt is _STOP:
                    stop = True
                    break
                if rows + len(nxt.rows) > self.max_batch:
                    carried = nxt  # it starts the next batch
                    break
                batch.append(nxt)
                rows += len(nxt.rows)
            self._convert(batch)
            if stop:
                self._requests.put(_STOP)

    def _convert(self, batch: List[_Request]) -> None:
        try:  # the whole batch's columns at once (fast paths convert a column in numpy)
            rows: Rows = []
            for request in batch:
                request.pieces_rows, request.pieces = self.converter.result_format.split_rows(request.rows)
                rows.extend(request.pieces_rows)
            order = self._sorted_batches(rows, len(rows))
            if order is None:
                parts: List[Part] = [(None, rows, self.converter.convert(rows))]
            else:
                parts = []
                for indexes in order:
                    chunk = [rows[i] for i in indexes]
                    parts.append((indexes, chunk, self.converter.convert(chunk)))
        except Exception:  # noqa: BLE001 (request by request below, so that a bad row fails its own request only)
            self._convert_each(batch)
            return
        self._jobs.put(_Job(batch, rows, parts))

    def _convert_each(self, batch: List[_Request]) -> None:
        kept: List[_Request] = []
        examples: List[Any] = []
        rows: Rows = []
        for request in batch:
            try:
                request.pieces_rows, request.pieces = self.converter.result_format.split_rows(request.rows)
                examples.extend(self.converter.examples(request.pieces_rows))
            except Exception as e:  # noqa: BLE001 (a bad row fails its own request only)
                _finish([(request, None, e)])
                continue
            kept.append(request)
            rows.extend(request.pieces_rows)
        if not kept:
            return
        try:
            arrays = self.converter.collate(examples)
        except Exception as e:  # noqa: BLE001
            _finish([(request, None, e) for request in kept])
            return
        self._jobs.put(_Job(kept, rows, [(None, rows, arrays)]))

    # ---- the model threads -----------------------------------------------------------------
    def _model_loop(self, model_dir: str, num_threads: int, backend: str, onednn: str) -> None:
        try:
            loaded = Predictor(model_dir, num_threads=num_threads, backend=backend, onednn=onednn)
            loaded.warm_up(min(16, self.max_batch))  # kernels built before the first request
            self.onednn = loaded.onednn
            with self._lock:
                self._loaded.append(loaded)
            predictor: Optional[Predictor] = loaded
        except BaseException as e:  # noqa: BLE001 (reported by the constructor)
            self._startup_errors.append(e)
            predictor = None
        self._ready.wait()
        if predictor is None:
            return
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            with self._lock:
                self._busy += 1
                self.rows_run += len(job.rows)
                self.largest_batch = max(self.largest_batch, *(len(rows) for _, rows, _ in job.parts))
            if self.on_batch is not None:
                for _, rows, _ in job.parts:
                    self.on_batch(len(rows))
            try:
                results = self._results(predictor, job)
            except Exception as e:  # noqa: BLE001 (every request of the batch gets the error)
                logger.exception("prediction failed for a batch of %d rows", len(job.rows))
                _finish([(request, None, e) for request in job.requests])
                continue
            finally:
                with self._lock:
                    self._busy -= 1
            outcomes: List[Outcome] = []
            start = 0
            for request in job.requests:
                mine = results[start:start + len(request.pieces_rows)]
                start += len(request.pieces_rows)
                try:
                    outcomes.append((request, predictor.result_format.join_results(mine, request.pieces,
                                                                                    request.rows), None))
                except Exception as e:  # noqa: BLE001
                    outcomes.append((request, None, e))
            _finish(outcomes)

    @staticmethod
    def _results(predictor: Predictor, job: _Job) -> Results:
        """The job's results, one per row in its order."""
        indexes, rows, arrays = job.parts[0]
        if indexes is None:  # one batch, in order
            return predictor.result_format.results(predictor.run(arrays), arrays, rows)
        return predictor.run_sorted(job.parts, len(job.rows))  # type: ignore[arg-type]  # every part has its indexes
