"""The side of a generation scheduler that the service's event loop talks to: ``SchedulerFront``,
and the values the two sides pass (``SchedulerLimits``, ``Prompt``, ``GenerationJob``,
``ServiceFull``).

Two schedulers share it: ``GenerationScheduler`` (``wenxin.inference.generation_scheduler``), which
decodes in a thread of the serving process, and ``ProcessScheduler``
(``wenxin.inference.decode_process``), which decodes in a child process. Either way prompts are
prepared here (tokenized, a conversation fitted to the context) in a thread of their own, by the
export's ``Predictor`` without its model, before a request is queued.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from wenxin.common.errors import InferenceError
from wenxin.inference.generation_events import Event
from wenxin.inference.predictor import Predictor
from wenxin.inference.turn_plan import Turn
from wenxin.models.decoding import DecodeSettings


@dataclasses.dataclass
class SchedulerLimits:
    """The room of one service process's generation batch (see the module docstring)."""

    max_rows: int = 32
    max_cached_tokens: int = 65536
    max_waiting: int = 64
    prefill_tokens: int = 512
    turn_prefill: str = "all"  # turn_plan.TURN_PREFILL_RULES: a turn's prompt tokens while answers decode
    prefix_cache_mb: int = 64  # prompts' starts kept for later prompts that share them (0: none)


class ServiceFull(Exception):
    """The batch and its waiting line are full: a 503, to be retried after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclasses.dataclass
class Prompt:
    """A request's prepared prompt: the ``prefill`` inputs and their length in tokens."""

    inputs: Dict[str, np.ndarray]
    tokens: int


class GenerationJob:
    """One request: its row, prompt and settings, its deadline, the events its decoding sends (an
    asyncio queue of the loop that waits), and whether it is cancelled."""

    _keys = itertools.count()

    def __init__(self, row: Sequence[str], prompt: Prompt, settings: DecodeSettings, deadline: float,
                 loop: asyncio.AbstractEventLoop, stop: Sequence[str] = ()) -> None:
        self.key = next(self._keys)
        self.row, self.prompt, self.settings, self.deadline, self.loop = list(row), prompt, settings, deadline, loop
        self.stop = tuple(stop)  # stop strings (wenxin.inference.stop_strings)
        self.events: "asyncio.Queue[Event]" = asyncio.Queue()
        self.cancelled = threading.Event()
        self.on_cancel: Optional[Callable[[], None]] = None  # told when cancelled (a decoding process's job)

    @property
    def rows(self) -> int:
        """Cache rows it holds at most (its beams)."""
        return self.settings.rows

    @property
    def horizon(self) -> int:
        """The longest a row of its cache can grow: the prompt (and a model's start token), and the answer."""
        return self.prompt.tokens + 1 + self.settings.max_new_tokens

    def cancel(self) -> None:
        """Stop decoding at the next turn (the client went away)."""
        self.cancelled.set()
        if self.on_cancel is not None:
            self.on_cancel()

    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()


def check_room(limits: SchedulerLimits, prompt: Prompt, settings: DecodeSettings) -> None:
    """An ``InferenceError`` for a request that could never fit a batch of ``limits``, even alone."""
    rows, horizon = settings.rows, prompt.tokens + 1 + settings.max_new_tokens
    if rows > limits.max_rows:
        raise InferenceError(f"beam_size {rows} is more than the service's --max_rows {limits.max_rows}")
    if rows * horizon > limits.max_cached_tokens:
        raise InferenceError(f"{rows} rows x ({prompt.tokens} prompt tokens + {settings.max_new_tokens} "
                             f"new) = {rows * horizon} cached tokens, more than the service's "
                             f"--max_cached_tokens {limits.max_cached_tokens}")


class SchedulerFront:
    """What the service's endpoints use of a generation scheduler: its room, the export's settings
    and prompts (``reference``), its state (``loading``, ``warming``, ``ready`` or ``failed``, with
    ``error``), its listeners, and ``submit``/``close``, which each scheduler implements."""

    def __init__(self, model_dir: str, limits: Optional[SchedulerLimits], backend: str, task: str) -> None:
        self.limits = limits or SchedulerLimits()
        self.reference = Predictor(model_dir, load_model=False, backend=backend, task=task)  # settings, fields
        if self.reference.decode_settings is None:
            raise InferenceError(f"{model_dir}: this model does not generate (no step functions in its export)")
        self.state = "loading"  # then "warming" and "ready", or "failed" (``error`` says why)
        self.error: Optional[BaseException] = None
        self.on_failure: Optional[Callable[[BaseException], None]] = None  # told when the model cannot load
        self.started = time.monotonic()
        self.batched = True  # requests share one batch (False: an export whose extend cannot hide padding)
        self.onednn = ""  # the Paddle backend's oneDNN choice, in words
        self.on_turn: Optional[Callable[[Turn], None]] = None  # told what each turn that ran did (metrics)
        self._preparer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="wenxin-prompts")
        self._loaded = threading.Event()

    @property
    def ready(self) -> bool:
        """Loaded and warmed up."""
        return self.state == "ready"

    def wait_loaded(self) -> None:
        """Until the model is loaded (its error raised here, where it could not be)."""
        self._loaded.wait()
        if self.error is not None:
            raise self.error

    def settings_for(self, overrides: Dict[str, Any]) -> DecodeSettings:
        return self.reference.settings_for(overrides)

    async def prepare(self, row: Sequence[str]) -> Prompt:
        """The prompt of ``row``, prepared in the prompt thread (an ``InferenceError`` names what is
        wrong with it). Cancelling the awaiting task leaves the result to nobody."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._preparer, self._prepare, list(row))

    def _prepare(self, row: List[str]) -> Prompt:
        inputs = self.reference.prompt(row)
        return Prompt(inputs, self.reference.prompt_length(inputs))

    def check_room(self, prompt: Prompt, settings: DecodeSettings) -> None:
        """An ``InferenceError`` for a request that could never fit the batch, even alone."""
        check_room(self.limits, prompt, settings)

    def refuse_when_full(self, waiting: int) -> None:
        """``ServiceFull`` when the model could not be loaded or ``waiting`` requests already wait."""
        if self.error is not None:
            raise ServiceFull(f"the model could not be loaded ({self.error})")
        if waiting >= self.limits.max_waiting:
            raise ServiceFull(f"the service is full: {waiting} requests wait for room in the generation batch "
                              f"(--max_waiting {self.limits.max_waiting}); try again shortly")

    def submit(self, job: GenerationJob) -> None:
        """Queue ``job`` (``ServiceFull``: see ``refuse_when_full``)."""
        raise NotImplementedError

    def close(self) -> None:
        """End every request (cancelled) and stop decoding."""
        raise NotImplementedError
