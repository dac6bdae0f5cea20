"""Generation for the HTTP service: one thread decodes requests of a generation export one at a
time, with a predictor of its own, and hands each token to the request's event loop as it is
chosen (``GenerationWorker``). A request stops early when its client goes away (``cancel``), when
it has run ``time_limit`` seconds, or at ``max_new_tokens``; every model step checks, so beam
search (whose tokens come at its end) stops as promptly as greedy search."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import threading
import time
from typing import Any, Dict, Optional, Sequence


from wenxin.common.errors import WenxinError
from wenxin.inference.predictor import Predictor
from wenxin.models.decoding import DecodeSettings

logger = logging.getLogger("wenxin.serve")
_STOP = object()


class _Stopped(Exception):
    """Raised inside a model step to end a request's decoding (``reason``: cancelled, time_limit)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass
class Event:
    """What a request's decoding reports: ``token`` (one token and the text it adds), ``done``
    (the whole text, its tokens, why it ended: ``eos``, ``stop`` (a stop string), ``length``,
    ``time_limit``, ``cancelled``, and how many tokens the prompt was) or ``error``."""

    kind: str
    data: Dict[str, Any]


class GenerationJob:
    """One request: its row and settings, the events its decoding sends (an asyncio queue of the
    loop that waits), and whether it is cancelled."""

    def __init__(self, row: Sequence[str], settings: DecodeSettings, time_limit: float,
                 loop: asyncio.AbstractEventLoop, stop: Sequence[str] = ()) -> None:
        self.row, self.settings, self.time_limit, self.loop = list(row), settings, time_limit, loop
        self.stop = tuple(stop)  # stop strings (wenxin.inference.stop_strings)
        self.events: "asyncio.Queue[Event]" = asyncio.Queue()
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        """Stop decoding at the next model step (the client went away)."""
        self.cancelled.set()

    def send(self, event: Event) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the loop has closed: nobody waits
            self.cancelled.set()


class GenerationWorker:
    """The thread that decodes (see the module docstring). ``settings_for`` checks a request's
    decoding settings against the export's before it is queued."""

    def __init__(self, model_dir: str, num_threads: int = 1, backend: str = "auto", onednn: str = "auto",
                 task: str = "") -> None:
        self.jobs: "queue.Queue[Any]" = queue.Queue()
        self.reference = Predictor(model_dir, load_model=False, backend=backend, task=task)  # settings, fields
        self._ready = threading.Event()
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._loop, args=(model_dir, num_threads, backend, onednn, task),
                                        name="wenxin-generate", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def settings_for(self, overrides: Dict[str, Any]) -> DecodeSettings:
        return self.reference.settings_for(overrides)

    def submit(self, job: GenerationJob) -> None:
        self.jobs.put(job)

    def close(self) -> None:
        self.jobs.put(_STOP)
        self._thread.join(timeout=30)

    def _loop(self, model_dir: str, num_threads: int, backend: str, onednn: str, task: str) -> None:
        try:
            predictor = Predictor(model_dir, num_threads=num_threads, backend=backend, onednn=onednn, task=task)
        except BaseException as e:  # noqa: BLE001 (reported to the constructor)
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        while True:
            job = self.jobs.get()
            if job is _STOP:
                return
            self._run(predictor, job)

    def _run(self, predictor: Predictor, job: GenerationJob) -> None:
        deadline = time.monotonic() + job.time_limit

        def before_step() -> None:
            if job.cancelled.is_set():
                raise _Stopped("cancelled")
            if time.monotonic() > deadline:
                raise _Stopped("time_limit")

        reason = "eos"
        result: Dict[str, Any] = {"text": "", "tokens": []}
        try:
            prompt = predictor.prompt(job.row)  # converted once: for its length and the decoding
            prompt_tokens = predictor.prompt_length(prompt)
            for step in predictor.stream_results(job.row, job.settings, before_step, job.stop, prompt):
                result = step.result
                # a step without a new token sends text held back for a stop string it did not become
                job.send(Event("token", {"token": result["tokens"][-1] if step.new_token else "", "text": step.text}))
                if step.stopped:
                    reason = "stop"
            if reason != "stop" and len(result["tokens"]) >= job.settings.max_new_tokens:
                reason = "length"
        except _Stopped as e:
            reason = e.reason
        except (WenxinError, ValueError) as e:
            job.send(Event("error", {"error": str(e)}))
            return
        except Exception as e:  # noqa: BLE001 (an answer, never a dead worker)
            logger.exception("generation failed")
            job.send(Event("error", {"error": f"internal error: {type(e).__name__}: {e}"}))
            return
        job.send(Event("done", {"text": result["text"], "tokens": result["tokens"], "finish_reason": reason,
                                "prompt_tokens": prompt_tokens}))
