"""Generation for the HTTP service: concurrent requests decode together (``GenerationScheduler``).

One thread owns the export's predictor and runs a loop; each turn it ends the requests whose
client left (``cancel``) or whose time is up, lets waiting requests in while there is room,
prefills their prompts, at most ``turn_prefill_tokens`` prompt tokens a turn (``prefill_tokens``,
or by the rule ``rows`` about as many as the rows that decode) shared evenly among them
(``wenxin.models.batch_prefill``: a short prompt is not held up by a long one, and the running
streams never wait for more than one turn's prompt tokens; the prompts of a turn are rows of one
call where the export has ``advance``), then runs one ``extend`` step for every row of every
request whose prompt is done (``wenxin.models.batch_decoding``). A prompt that starts as an
earlier one did (the chat template, a system prompt, a conversation's earlier turns) is prefilled
only after that start (``wenxin.models.prefix_cache``: ``prefix_cache_mb`` of starts kept). A request
leaves when its search ends, at ``max_new_tokens``, at a stop string or at its time limit;
nobody waits for anyone else's end. Each token is handed to the request's event loop as it is
chosen (one wake-up per loop a turn).

Room: at most ``max_rows`` cache rows (a beam search's request holds ``beam_size``) and at most
``max_cached_tokens`` token slots of key/value cache. Rows are padded to the longest, so a
request is let in only where, even at the end of every request's answer, rows x the longest row
stays within it. A request that could never fit is refused before it is queued (a 400); one that
finds ``max_waiting`` requests already waiting is a 503 with ``Retry-After``.

Prompts are prepared (tokenized, a conversation fitted to the context) in a thread of their own
before a request is queued, so a long prompt never holds up the decoding; the request's time
limit and its client's disconnect apply there too.

The predictor is loaded when the scheduler is made (an error there is the service's); its
warm-up (a prefill and a few steps at 1 and at several rows, not whole answers) runs in the
thread while the service already answers (``ready`` is False until it is done: /health says
so).
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import itertools
import logging
import queue
import threading
import time
from http import HTTPStatus
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from wenxin.common.errors import InferenceError, WenxinError
from wenxin.inference.generator import AnswerText, Generator
from wenxin.inference.predictor import Predictor
from wenxin.models.batch_decoding import BatchDecoder, Update
from wenxin.models.batch_prefill import PromptPrefill, fair_shares, prefill_together
from wenxin.models.decoding import DecodeSettings, new_search
from wenxin.models.prefix_cache import PrefixCache

logger = logging.getLogger("wenxin.serve")
_STOP = object()
WARM_UP_ROWS = (1, 4)  # cache rows of the warm-up's steps
WARM_UP_STEPS = 2      # extend steps at each
MIN_TURN_PREFILL = 16  # prompt tokens a turn at least, while streams decode (turn_prefill_tokens)
# how many prompt tokens a turn prefills while answers decode (--turn_prefill): "all",
# --prefill_tokens (the default: sooner first tokens and more tokens a second); "rows", about as
# many as the rows that decode (even time between tokens, later first tokens: measured at
# ERNIE-4.5-0.3B's shape and 16 streams, time between tokens p99 1.97 -> 0.97 s, first token p50
# 0.97 -> 2.38 s, tokens a second 29.4 -> 24.9; docs/serving.md)
TURN_PREFILL_RULES = ("all", "rows")


def turn_prefill_tokens(decoding_rows: int, most: int, rule: str = "all") -> int:
    """The prompt tokens a turn prefills: ``most`` (``--prefill_tokens``) while no stream decodes
    or by the rule ``all``; by the rule ``rows``, while streams decode, as many as the rows that
    decode (at least ``MIN_TURN_PREFILL``, at most ``most``): on a CPU a prompt token costs about
    what a decoding row adds to a step (at ERNIE-4.5-0.3B's shape 13-16 and 19 CPU-ms), so a turn
    that prefills costs at most about twice one that does not (measured in
    ``benchmarks/generation_serving.py``). A rule of counts, never a timing."""
    if decoding_rows <= 0 or rule == "all":
        return most
    return min(most, max(MIN_TURN_PREFILL, decoding_rows))


@dataclasses.dataclass
class SchedulerLimits:
    """The room of one service process's generation batch (see the module docstring)."""

    max_rows: int = 32
    max_cached_tokens: int = 65536
    max_waiting: int = 64
    prefill_tokens: int = 512
    turn_prefill: str = "all"  # TURN_PREFILL_RULES: a turn's prompt tokens while answers decode
    prefix_cache_mb: int = 64  # prompts' starts kept for later prompts that share them (0: none)


class ServiceFull(Exception):
    """The batch and its waiting line are full: a 503, to be retried after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclasses.dataclass
class Event:
    """What a request's decoding reports: ``token`` (one token and the text it adds), ``done``
    (the whole text, its tokens, why it ended: ``eos``, ``stop`` (a stop string), ``length``,
    ``time_limit``, ``cancelled``, and how many tokens the prompt was) or ``error``."""

    kind: str
    data: Dict[str, Any]


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


Outbox = Dict[asyncio.AbstractEventLoop, List[Tuple[GenerationJob, Event]]]


def _deliver(items: List[Tuple[GenerationJob, Event]]) -> None:
    for job, event in items:
        job.events.put_nowait(event)


class _Running:
    """A request let in: its job, its answer's text so far, its search, and, while its prompt is
    prefilled a part a turn, that prefill (it joins the decoding batch once it is done)."""

    __slots__ = ("job", "answer", "search", "prefill")

    def __init__(self, job: GenerationJob, answer: AnswerText) -> None:
        self.job, self.answer = job, answer
        self.search = new_search(job.settings)
        self.prefill: Optional[PromptPrefill] = None


class GenerationScheduler:
    """The service's decoding (see the module docstring).

    Args:
        model_dir: a generation export.
        limits: the batch's room.
        num_threads, backend, onednn, task: the predictor's (see ``Predictor``).
    """

    def __init__(self, model_dir: str, limits: Optional[SchedulerLimits] = None, num_threads: int = 1,
                 backend: str = "auto", onednn: str = "auto", task: str = "", wait: bool = True) -> None:
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
        self.on_step: Optional[Callable[[int], None]] = None  # told each step's rows (metrics)
        self.on_prefill: Optional[Callable[[List[int]], None]] = None  # told each turn's prompt tokens a prompt
        self.on_reuse: Optional[Callable[[int], None]] = None  # told a prompt's tokens a kept start covered
        self.waiting_count = 0
        self._count_lock = threading.Lock()
        self._jobs: "queue.Queue[Any]" = queue.Queue()
        self.prefixes = PrefixCache(self.limits.prefix_cache_mb << 20)  # the scheduler thread's
        self._preparer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="wenxin-prompts")
        self._loaded = threading.Event()
        self._thread = threading.Thread(target=self._main, args=(model_dir, num_threads, backend, onednn, task),
                                        name="wenxin-generate", daemon=True)
        self._thread.start()
        if wait:
            self.wait_loaded()

    @property
    def ready(self) -> bool:
        """Loaded and warmed up."""
        return self.state == "ready"

    def wait_loaded(self) -> None:
        """Until the model is loaded (its error raised here, where it could not be)."""
        self._loaded.wait()
        if self.error is not None:
            raise self.error

    # ---- the caller's side (the event loop) ----------------------------------------------------
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

    def submit(self, job: GenerationJob) -> None:
        """Queue ``job`` (``ServiceFull`` when ``max_waiting`` requests already wait, or when the
        model could not be loaded)."""
        if self.error is not None:
            raise ServiceFull(f"the model could not be loaded ({self.error})")
        with self._count_lock:
            if self.waiting_count >= self.limits.max_waiting:
                raise ServiceFull(f"the service is full: {self.waiting_count} requests wait for room in the "
                                  f"generation batch (--max_waiting {self.limits.max_waiting}); try again shortly")
            self.waiting_count += 1
        self._jobs.put(job)

    def close(self) -> None:
        """End every request (cancelled) and stop the thread."""
        self._jobs.put(_STOP)
        self._thread.join(timeout=30)
        self._preparer.shutdown(wait=False, cancel_futures=True)

    # ---- the decoding thread -------------------------------------------------------------------
    def _main(self, model_dir: str, num_threads: int, backend: str, onednn: str, task: str) -> None:
        try:
            predictor = Predictor(model_dir, num_threads=num_threads, backend=backend, onednn=onednn, task=task)
            generator = Generator(predictor)
        except BaseException as e:  # noqa: BLE001 (reported to wait_loaded and on_failure)
            self._failed(e)
            return
        logger.info("generation model loaded in %.1f s", time.monotonic() - self.started)
        self.batched, self.onednn = generator.masked, predictor.onednn
        if not generator.masked:
            logger.warning("%s: its extend step has no 'visible' input (an export made before batched decoding): each "
                           "request decodes with calls of its own; export the model again to batch them", model_dir)
        self._generator = generator
        self.state = "warming"
        self._loaded.set()
        try:
            self._warm_up(generator)
        except Exception:  # noqa: BLE001 (the first requests then find the kernels cold: not an error)
            logger.exception("the generation warm-up failed; serving without it")
        self.state = "ready"
        self._serve(generator)

    def _failed(self, error: BaseException) -> None:
        """The model could not be loaded: the requests already queued get the error, and so does
        whoever waits (``wait_loaded``) or listens (``on_failure``)."""
        self.error, self.state = error, "failed"
        self._loaded.set()
        for _ in range(fail_queued(self._jobs, error)):
            self._left_waiting()
        if self.on_failure is not None:
            self.on_failure(error)

    def _warm_up(self, generator: Generator) -> None:
        """``warm_up`` on a made-up prompt (a model whose input is no text is warmed by its first request)."""
        try:
            prompt = self._prepare([" ".join("样例文本" * 4)] * len(self.reference.fields))
        except (WenxinError, ValueError):
            return
        warm_up(generator, prompt.inputs)

    def _serve(self, generator: Generator) -> None:
        decoder = generator.decoder()
        running: Dict[int, _Running] = {}
        waiting: Deque[GenerationJob] = collections.deque()
        while True:
            outbox: Outbox = {}
            if not take_jobs(self._jobs, waiting, block=not running and not waiting):
                end_all(decoder, running, waiting, outbox)
                _flush(outbox)
                return
            self._end_stopped(decoder, running, waiting, outbox)
            _flush(outbox)
            outbox = {}
            self._admit(decoder, running, waiting)
            if decoder.rows:
                if self.on_step is not None:
                    self.on_step(decoder.rows)
                try:
                    updates = decoder.step()
                except Exception as e:  # noqa: BLE001 (every request in the batch gets the error)
                    logger.exception("a generation step failed for %d requests", len(running))
                    for key in list(running):
                        _send_error(running.pop(key).job, e, outbox)
                    decoder = generator.decoder()
                    updates = []
                for update in updates:
                    self._report_safely(decoder, running, update, outbox)
            _flush(outbox)

    def _end_stopped(self, decoder: BatchDecoder, running: Dict[int, _Running], waiting: Deque[GenerationJob],
                     outbox: Outbox) -> None:
        """End requests whose client left or whose time is up, waiting or running."""
        now = time.monotonic()
        for job in list(waiting):
            reason = _stopped(job, now)
            if reason:
                waiting.remove(job)
                self._left_waiting()
                _send_done(job, None, reason, outbox)
        for key, state in list(running.items()):
            reason = _stopped(state.job, now)
            if reason:
                decoder.remove(key)
                del running[key]
                _send_done(state.job, state.answer, reason, outbox)

    def _fits(self, job: GenerationJob, decoder: BatchDecoder, running: Dict[int, _Running]) -> bool:
        rows = sum(s.job.rows for s in running.values()) + job.rows
        horizon = max([s.job.horizon for s in running.values()] + [job.horizon])
        return rows <= self.limits.max_rows and rows * horizon <= self.limits.max_cached_tokens

    def _admit(self, decoder: BatchDecoder, running: Dict[int, _Running], waiting: Deque[GenerationJob]) -> None:
        """Let waiting requests in, in order, while they fit, and spend at most
        ``turn_prefill_tokens`` prompt tokens a turn on their prompts: where the export prefills a prompt
        in parts (``Generator.chunks``), every prompt being prefilled gets an even share of them
        (``fair_shares``: a short newcomer is prefilled in its first turn beside a long prompt, which
        goes on with the rest next turns), the parts of a turn run together (``prefill_together``:
        rows of one ``advance`` call where the export has it). Otherwise each prompt is prefilled
        whole, in order, while the budget lasts. A request's first token goes out as soon as its
        prompt is prefilled, and it joins the decoding batch."""
        if not self._generator.chunks:
            self._admit_whole(decoder, running, waiting)
            return
        while waiting and self._fits(waiting[0], decoder, running):
            job = waiting.popleft()
            self._left_waiting()
            state = _Running(job, AnswerText(self._generator.predictor.result_format, job.row, job.stop))
            state.prefill = self.prefixes.start(job.prompt.inputs["ids"])  # after a kept start it shares
            if state.prefill.tokens_done and self.on_reuse is not None:
                self.on_reuse(state.prefill.tokens_done)
            running[job.key] = state
        self._prefill_turn(decoder, running)

    def _prefill_turn(self, decoder: BatchDecoder, running: Dict[int, _Running]) -> None:
        """One turn's prefill parts (see ``_admit``); a request whose prompt is done joins."""
        prefilling = [s for s in running.values() if s.prefill is not None]
        shares = fair_shares([s.prefill.remaining for s in prefilling if s.prefill is not None],
                             turn_prefill_tokens(decoder.rows, self.limits.prefill_tokens,
                                                 self.limits.turn_prefill))
        parts = [(state, share) for state, share in zip(prefilling, shares) if share > 0]
        if not parts:
            return
        if self.on_prefill is not None:
            self.on_prefill([share for _, share in parts])
        run, empty = self._generator.predictor.run_step, self._generator.predictor.advance_cache
        before = [state.prefill.tokens_done if state.prefill else 0 for state, _ in parts]
        try:
            prefill_together(run, [(state.prefill, share) for state, share in parts if state.prefill], empty)
        except Exception:  # noqa: BLE001 (one request's prompt must not fail the others': each alone)
            for (state, share), done in zip(parts, before):
                if state.prefill is None or state.prefill.tokens_done != done:  # its part went through
                    continue
                try:
                    prefill_together(run, [(state.prefill, share)], None)
                except Exception as e:  # noqa: BLE001 (this request's error only)
                    del running[state.job.key]
                    self._failed_prefill(state.job, e)
        for state, _ in parts:
            if state.prefill is not None and state.prefill.done and state.job.key in running:
                outputs, ids, state.prefill = state.prefill.outputs, state.prefill.ids, None
                if outputs is not None:
                    self.prefixes.keep(ids, outputs["cache"])
                self._join(decoder, running, state, outputs)

    def _admit_whole(self, decoder: BatchDecoder, running: Dict[int, _Running],
                     waiting: Deque[GenerationJob]) -> None:
        """Waiting requests let in, in order, while they fit, each prompt prefilled whole, up to
        ``prefill_tokens`` prompt tokens a turn (and always one request)."""
        budget = self.limits.prefill_tokens
        first = True
        while waiting and (first or budget > 0) and self._fits(waiting[0], decoder, running):
            job = waiting.popleft()
            self._left_waiting()
            first = False
            state = _Running(job, AnswerText(self._generator.predictor.result_format, job.row, job.stop))
            running[job.key] = state
            budget -= job.prompt.tokens
            self._join(decoder, running, state, None)

    def _join(self, decoder: BatchDecoder, running: Dict[int, _Running], state: _Running,
              prefilled: Optional[Dict[str, np.ndarray]]) -> None:
        """The request's rows join the batch (its prefill run now, or ``prefilled``'s outputs)."""
        outbox: Outbox = {}
        job = state.job
        try:
            update = decoder.add(job.key, job.prompt.inputs, state.search, prefilled)
        except Exception as e:  # noqa: BLE001 (this request's error only)
            del running[job.key]
            decoder.remove(job.key)
            self._failed_prefill(job, e)
            return
        self._report_safely(decoder, running, update, outbox)
        _flush(outbox)

    def _failed_prefill(self, job: GenerationJob, error: BaseException) -> None:
        if not isinstance(error, (WenxinError, ValueError)):
            logger.exception("a generation prefill failed")
        outbox: Outbox = {}
        _send_error(job, error, outbox)
        _flush(outbox)

    def _report_safely(self, decoder: BatchDecoder, running: Dict[int, _Running], update: Update,
                       outbox: Outbox) -> None:
        """``_report``; a failure there (the result format on tokens it cannot read) ends that
        request with its error, never the thread that serves the others."""
        try:
            self._report(decoder, running, update, outbox)
        except Exception as e:  # noqa: BLE001
            logger.exception("writing a generated answer failed")
            state = running.pop(update.key, None)  # type: ignore[call-overload]  # the decoder's keys are the jobs'
            if state is not None:
                decoder.remove(state.job.key)
                _send_error(state.job, e, outbox)

    def _report(self, decoder: BatchDecoder, running: Dict[int, _Running], update: Update, outbox: Outbox) -> None:
        """Send the tokens of a request's update; end it when its search ended or a stop string did."""
        state = running.get(update.key)  # type: ignore[call-overload]  # the decoder's keys are the jobs'
        if state is None:
            return
        for token in update.tokens:
            piece = state.answer.add(token)
            _send(outbox, state.job, Event("token", {"token": piece.result["tokens"][-1], "text": piece.text}))
            if piece.stopped:
                decoder.remove(update.key)
                del running[state.job.key]
                _send_done(state.job, state.answer, "stop", outbox)
                return
        if update.done:
            del running[state.job.key]
            ended = "length" if len(state.answer.ids) >= state.job.settings.max_new_tokens else "eos"
            _send_done(state.job, state.answer, ended, outbox)

    def _left_waiting(self) -> None:
        with self._count_lock:
            self.waiting_count -= 1


def check_room(limits: SchedulerLimits, prompt: Prompt, settings: DecodeSettings) -> None:
    """An ``InferenceError`` for a request that could never fit a batch of ``limits``, even alone."""
    rows, horizon = settings.rows, prompt.tokens + 1 + settings.max_new_tokens
    if rows > limits.max_rows:
        raise InferenceError(f"beam_size {rows} is more than the service's --max_rows {limits.max_rows}")
    if rows * horizon > limits.max_cached_tokens:
        raise InferenceError(f"{rows} rows x ({prompt.tokens} prompt tokens + {settings.max_new_tokens} "
                             f"new) = {rows * horizon} cached tokens, more than the service's "
                             f"--max_cached_tokens {limits.max_cached_tokens}")


def take_jobs(jobs: "queue.Queue[Any]", waiting: Deque[GenerationJob], block: bool) -> bool:
    """Move queued jobs to ``waiting``; False when the scheduler is told to stop."""
    while True:
        try:
            job = jobs.get() if block else jobs.get_nowait()
        except queue.Empty:
            return True
        if job is _STOP:
            return False
        waiting.append(job)
        block = False


def fail_queued(jobs: "queue.Queue[Any]", error: BaseException) -> int:
    """Every queued job gets ``error``; returns how many there were."""
    outbox: Outbox = {}
    failed = 0
    while True:
        try:
            job = jobs.get_nowait()
        except queue.Empty:
            break
        if isinstance(job, GenerationJob):
            failed += 1
            _send_error(job, error, outbox, HTTPStatus.SERVICE_UNAVAILABLE)  # the service's failure, not the request's
    _flush(outbox)
    return failed


def end_all(decoder: BatchDecoder, running: Dict[int, "_Running"], waiting: Deque[GenerationJob],
            outbox: Outbox) -> None:
    """Every request, waiting or running, ends (``cancelled``)."""
    for job in waiting:
        _send_done(job, None, "cancelled", outbox)
    for key, state in running.items():
        decoder.remove(key)
        _send_done(state.job, state.answer, "cancelled", outbox)


def warm_up(generator: Generator, prompt: Dict[str, np.ndarray]) -> None:
    """A prefill of ``prompt`` and ``WARM_UP_STEPS`` extend steps at each of ``WARM_UP_ROWS`` rows."""
    started = time.process_time()
    steps = 0
    settings = DecodeSettings("greedy", max_new_tokens=WARM_UP_STEPS + 1, eos_id=None)
    for rows in WARM_UP_ROWS:
        decoder = generator.decoder()
        for key in range(rows):
            decoder.add(key, prompt, new_search(settings))
        while decoder.rows:
            decoder.step()
            steps += 1
    logger.info("generation warmed up: %d prefills and %d steps in %.1f CPU-seconds",
                sum(WARM_UP_ROWS), steps, time.process_time() - started)


def _send_done(job: GenerationJob, answer: Optional[AnswerText], reason: str, outbox: Outbox) -> None:
    """The job's last event: what its answer held back, then ``done`` with the whole answer."""
    if answer is not None:
        held = answer.finish()
        if held is not None:
            _send(outbox, job, Event("token", {"token": "", "text": held.text}))
    result = answer.result if answer is not None else {"text": "", "tokens": []}
    _send(outbox, job, Event("done", {"text": result["text"], "tokens": result["tokens"], "finish_reason": reason,
                                      "prompt_tokens": job.prompt.tokens}))


def _send_error(job: GenerationJob, error: BaseException, outbox: Outbox, status: int = 0) -> None:
    """The job's error event (``status``: the HTTP status it is answered with, where not 422)."""
    known = isinstance(error, (WenxinError, ValueError))
    message = str(error) if known else f"internal error: {type(error).__name__}: {error}"
    _send(outbox, job, Event("error", {"error": message, **({"status": status} if status else {})}))


def _flush(outbox: Outbox) -> None:
    """Hand each event loop its jobs' events (one call a loop)."""
    for loop, items in outbox.items():
        try:
            loop.call_soon_threadsafe(_deliver, items)
        except RuntimeError:  # the loop has closed: nobody waits
            for job, _ in items:
                job.cancel()


def _stopped(job: GenerationJob, now: float) -> str:
    if job.cancelled.is_set():
        return "cancelled"
    if now > job.deadline:
        return "time_limit"
    return ""


def _send(outbox: Outbox, job: GenerationJob, event: Event) -> None:
    outbox.setdefault(job.loop, []).append((job, event))
