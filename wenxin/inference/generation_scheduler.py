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
chosen (one wake-up per loop a turn), as typed events (``wenxin.inference.generation_events``).

The turn's decisions (who stops, who fits, each prompt's share of the prompt tokens) are plain
functions of counts and times in ``wenxin.inference.turn_plan``; what each turn did (who ended
and why, who was let in, the prompt parts prefilled, the rows stepped, who finished and why) is
one typed ``Turn`` handed to ``on_turn`` (the service's metrics).

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
import logging
import queue
import threading
import time
from http import HTTPStatus
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import numpy as np

from wenxin.common.errors import WenxinError
from wenxin.inference.generation_events import DoneEvent, ErrorEvent, Event, FinishReason, TokenEvent
from wenxin.inference.generator import AnswerText, Generator
from wenxin.inference.predictor import Predictor
from wenxin.inference.scheduler_front import GenerationJob, SchedulerFront, SchedulerLimits
from wenxin.inference.turn_plan import Admitted, PrefillPart, Turn, admissible, prefill_parts, stopped
from wenxin.models.batch_decoding import BatchDecoder, Update
from wenxin.models.batch_prefill import PartRows, PromptPrefill, fused_and_rest, prefill_together, prefill_whole
from wenxin.models.decoding import DecodeSettings, new_search
from wenxin.models.prefix_cache import PrefixCache

logger = logging.getLogger("wenxin.serve")
_STOP = object()
WARM_UP_ROWS = (1, 4)  # cache rows of the warm-up's steps
WARM_UP_STEPS = 2      # extend steps at each


Outbox = Dict[asyncio.AbstractEventLoop, List[Tuple[GenerationJob, Event]]]


def deliver_events(items: List[Tuple[GenerationJob, Event]]) -> None:
    """Put each event in its job's queue (run by the jobs' event loop: ``call_soon_threadsafe``)."""
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


class GenerationScheduler(SchedulerFront):
    """The service's decoding (see the module docstring).

    Args:
        model_dir: a generation export.
        limits: the batch's room.
        num_threads, backend, onednn, task: the predictor's (see ``Predictor``).
    """

    def __init__(self, model_dir: str, limits: Optional[SchedulerLimits] = None, num_threads: int = 1,
                 backend: str = "auto", onednn: str = "auto", task: str = "", wait: bool = True) -> None:
        super().__init__(model_dir, limits, backend, task)
        self.on_state: Optional[Callable[[str], None]] = None  # told each state it moves to
        self.waiting_count = 0
        self._count_lock = threading.Lock()
        self._jobs: "queue.Queue[Any]" = queue.Queue()
        self.prefixes = PrefixCache(self.limits.prefix_cache_mb << 20)  # the scheduler thread's
        self._thread = threading.Thread(target=self._main, args=(model_dir, num_threads, backend, onednn, task),
                                        name="wenxin-generate", daemon=True)
        self._thread.start()
        if wait:
            self.wait_loaded()

    def submit(self, job: GenerationJob) -> None:
        """Queue ``job`` (``ServiceFull`` when ``max_waiting`` requests already wait, or when the
        model could not be loaded)."""
        with self._count_lock:
            self.refuse_when_full(self.waiting_count)
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
        self._move_to("warming")
        self._loaded.set()
        try:
            self._warm_up(generator)
        except Exception:  # noqa: BLE001 (the first requests then find the kernels cold: not an error)
            logger.exception("the generation warm-up failed; serving without it")
        self._move_to("ready")
        self._serve(generator)

    def _move_to(self, state: str) -> None:
        self.state = state
        if self.on_state is not None:
            self.on_state(state)

    def _failed(self, error: BaseException) -> None:
        """The model could not be loaded: the requests already queued get the error, and so does
        whoever waits (``wait_loaded``) or listens (``on_failure``)."""
        self.error = error
        self._move_to("failed")
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
            turn, started, model_before = Turn(), time.thread_time(), generator.predictor.model_cpu_seconds
            self._end_stopped(decoder, running, waiting, turn, outbox)
            _flush(outbox)
            outbox = {}
            beside = self._admit(decoder, running, waiting, turn)
            if decoder.rows:
                turn.step_rows = decoder.rows
                turn.decoded = [key for key, state in running.items() if state.prefill is None]
                try:
                    updates = decoder.step(beside[0] if beside else None)
                except Exception as e:  # noqa: BLE001 (every request in the batch gets the error)
                    logger.exception("a generation step failed for %d requests", len(running))
                    for key in list(running):
                        turn.failed.append(key)
                        _send_error(running.pop(key).job, e, outbox)
                    decoder = generator.decoder()
                    updates = []
                for update in updates:
                    report_safely(decoder, running, update, turn, outbox)
                _flush(outbox)
                outbox = {}
                if beside:
                    self._join_prefilled(decoder, running, beside[1], turn)
            _flush(outbox)
            if self.on_turn is not None and (turn.ran or turn.ended or turn.failed):
                turn.cpu_seconds = time.thread_time() - started
                turn.model_cpu_seconds = generator.predictor.model_cpu_seconds - model_before
                self.on_turn(turn)

    def _end_stopped(self, decoder: BatchDecoder, running: Dict[int, _Running], waiting: Deque[GenerationJob],
                     turn: Turn, outbox: Outbox) -> None:
        """End requests whose client left or whose time is up, waiting or running."""
        now = time.monotonic()
        ends = dict(stopped(waiting, now))
        for job in [job for job in waiting if job.key in ends]:
            waiting.remove(job)
            self._left_waiting()
            turn.ended.append((job.key, ends[job.key]))
            _send_done(job, None, ends[job.key], outbox)
        for key, reason in stopped([state.job for state in running.values()], now):
            state = running.pop(key)
            decoder.remove(key)
            turn.ended.append((key, reason))
            _send_done(state.job, state.answer, reason, outbox)

    def _admissible(self, waiting: Deque[GenerationJob], running: Dict[int, _Running]) -> int:
        """How many waiting requests, in order, fit beside the running ones (``turn_plan.admissible``)."""
        return admissible(waiting, [s.job for s in running.values()], self.limits.max_rows,
                          self.limits.max_cached_tokens)

    def _admit(self, decoder: BatchDecoder, running: Dict[int, _Running], waiting: Deque[GenerationJob],
               turn: Turn) -> Optional[Tuple[PartRows, List[_Running]]]:
        """Let waiting requests in, in order, while they fit, and spend at most
        ``turn_prefill_tokens`` prompt tokens a turn on their prompts: where the export prefills a prompt
        in parts (``Generator.chunks``), every prompt being prefilled gets an even share of them
        (``fair_shares``: a short newcomer is prefilled in its first turn beside a long prompt, which
        goes on with the rest next turns), the parts of a turn run together (``prefill_together``:
        rows of one ``advance`` call where the export has it). Otherwise each prompt is prefilled
        whole, in order, while the budget lasts. A request's first token goes out as soon as its
        prompt is prefilled, and it joins the decoding batch. Returns the parts that go beside the
        decoding rows in the turn's step (``_prefill_turn``), or None."""
        if not self._generator.chunks:
            self._admit_whole(decoder, running, waiting, turn)
            return None
        for _ in range(self._admissible(waiting, running)):
            job = waiting.popleft()
            self._left_waiting()
            state = _Running(job, AnswerText(self._generator.predictor.result_format, job.row, job.stop))
            state.prefill = self.prefixes.start(job.prompt.inputs["ids"])  # after a kept start it shares
            turn.admitted.append(Admitted(job.key, state.prefill.tokens_done))
            running[job.key] = state
        return self._prefill_turn(decoder, running, turn)

    def _prefill_turn(self, decoder: BatchDecoder, running: Dict[int, _Running], turn: Turn
                      ) -> Optional[Tuple[PartRows, List[_Running]]]:
        """One turn's prefill parts (see ``_admit``); a request whose prompt is done joins. Where
        the engine runs a turn in one call (``Predictor.fuses_turns``) and rows decode, the longest
        parts of similar lengths are not run here but returned (as ``PartRows``, with their
        requests) to go beside the decoding rows in the step (``advance_pair``: the turn costs
        about one call, so the time between tokens stays even)."""
        plan = prefill_parts([(key, s.prefill.remaining) for key, s in running.items() if s.prefill is not None],
                             decoder.rows, self.limits.prefill_tokens, self.limits.turn_prefill)
        if not plan:
            return None
        turn.prefilled.extend(plan)
        parts = [(running[part.key], part.tokens) for part in plan]
        predictor = self._generator.predictor
        run, empty = predictor.run_step, predictor.advance_cache
        beside = None
        if predictor.fuses_turns and decoder.rows and empty is not None:
            fused, rest = fused_and_rest(parts)
            if fused:
                beside = (PartRows([(state.prefill, share) for state, share in fused if state.prefill], empty),
                          [state for state, _ in fused])
                parts = rest
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
                    turn.failed.append(state.job.key)
                    self._failed_prefill(state.job, e)
        self._join_prefilled(decoder, running, [state for state, _ in parts], turn)
        return beside

    def _join_prefilled(self, decoder: BatchDecoder, running: Dict[int, _Running], states: List[_Running],
                        turn: Turn) -> None:
        """Those of ``states`` whose prompt is done join the decoding batch (their start kept)."""
        for state in states:
            if state.prefill is not None and state.prefill.done and state.job.key in running:
                outputs, ids, state.prefill = state.prefill.outputs, state.prefill.ids, None
                if outputs is not None:
                    self.prefixes.keep(ids, outputs["cache"])
                self._join(decoder, running, state, outputs, turn)

    def _admit_whole(self, decoder: BatchDecoder, running: Dict[int, _Running],
                     waiting: Deque[GenerationJob], turn: Turn) -> None:
        """Waiting requests let in, in order, while they fit, each prompt prefilled whole, up to
        ``prefill_tokens`` prompt tokens a turn (and always one request); several in one call where
        the export can (``Generator.together``: ``batch_prefill.prefill_whole``)."""
        budget = self.limits.prefill_tokens
        admitted: List[_Running] = []
        for index in range(self._admissible(waiting, running)):
            if index and budget <= 0:
                break
            job = waiting.popleft()
            self._left_waiting()
            state = _Running(job, AnswerText(self._generator.predictor.result_format, job.row, job.stop))
            running[job.key] = state
            budget -= job.prompt.tokens
            turn.admitted.append(Admitted(job.key))
            turn.prefilled.append(PrefillPart(job.key, job.prompt.tokens, True))
            admitted.append(state)
        prefilled: List[Optional[Dict[str, np.ndarray]]] = [None] * len(admitted)
        if self._generator.together and len(admitted) > 1:
            try:
                prefilled = list(prefill_whole(self._generator.predictor.run_step,
                                               [state.job.prompt.inputs for state in admitted], True))
            except Exception:  # noqa: BLE001 (each prompt is then prefilled alone: only a bad one fails)
                logger.warning("a prefill of %d prompts together failed; each is prefilled alone", len(admitted))
        for state, outputs in zip(admitted, prefilled):
            self._join(decoder, running, state, outputs, turn)

    def _join(self, decoder: BatchDecoder, running: Dict[int, _Running], state: _Running,
              prefilled: Optional[Dict[str, np.ndarray]], turn: Turn) -> None:
        """The request's rows join the batch (its prefill run now, or ``prefilled``'s outputs)."""
        outbox: Outbox = {}
        job = state.job
        try:
            update = decoder.add(job.key, job.prompt.inputs, state.search, prefilled)
        except Exception as e:  # noqa: BLE001 (this request's error only)
            del running[job.key]
            decoder.remove(job.key)
            turn.failed.append(job.key)
            self._failed_prefill(job, e)
            return
        report_safely(decoder, running, update, turn, outbox)
        _flush(outbox)

    def _failed_prefill(self, job: GenerationJob, error: BaseException) -> None:
        if not isinstance(error, (WenxinError, ValueError)):
            logger.exception("a generation prefill failed")
        outbox: Outbox = {}
        _send_error(job, error, outbox)
        _flush(outbox)

    def _left_waiting(self) -> None:
        with self._count_lock:
            self.waiting_count -= 1


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
        _send_done(job, None, FinishReason.CANCELLED, outbox)
    for key, state in running.items():
        decoder.remove(key)
        _send_done(state.job, state.answer, FinishReason.CANCELLED, outbox)


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


def report_safely(decoder: BatchDecoder, running: Dict[int, _Running], update: Update, turn: Turn,
                  outbox: Outbox) -> None:
    """``report``; a failure there (the result format on tokens it cannot read) ends that
    request with its error, never the thread that serves the others."""
    try:
        report(decoder, running, update, turn, outbox)
    except Exception as e:  # noqa: BLE001
        logger.exception("writing a generated answer failed")
        state = running.pop(update.key, None)  # type: ignore[call-overload]  # the decoder's keys are the jobs'
        if state is not None:
            decoder.remove(state.job.key)
            turn.failed.append(state.job.key)
            _send_error(state.job, e, outbox)


def report(decoder: BatchDecoder, running: Dict[int, _Running], update: Update, turn: Turn,
           outbox: Outbox) -> None:
    """Send the tokens of a request's update; end it when its search ended or a stop string did."""
    state = running.get(update.key)  # type: ignore[call-overload]  # the decoder's keys are the jobs'
    if state is None:
        return
    for token in update.tokens:
        piece = state.answer.add(token)
        _send(outbox, state.job, TokenEvent(piece.result["tokens"][-1], piece.text))
        if piece.stopped:
            decoder.remove(update.key)
            del running[state.job.key]
            turn.finished.append((state.job.key, FinishReason.STOP))
            _send_done(state.job, state.answer, FinishReason.STOP, outbox)
            return
    if update.done:
        del running[state.job.key]
        ended = FinishReason.LENGTH if len(state.answer.ids) >= state.job.settings.max_new_tokens \
            else FinishReason.EOS
        turn.finished.append((state.job.key, ended))
        _send_done(state.job, state.answer, ended, outbox)


def _send_done(job: GenerationJob, answer: Optional[AnswerText], reason: FinishReason, outbox: Outbox) -> None:
    """The job's last event: what its answer held back, then ``done`` with the whole answer."""
    if answer is not None:
        held = answer.finish()
        if held is not None:
            _send(outbox, job, TokenEvent("", held.text))
    result: Dict[str, Any] = answer.result if answer is not None else {"text": "", "tokens": []}
    _send(outbox, job, DoneEvent(result["text"], list(result["tokens"]), reason, job.prompt.tokens))


def _send_error(job: GenerationJob, error: BaseException, outbox: Outbox, status: int = 0) -> None:
    """The job's error event (``status``: the HTTP status it is answered with, where not 422)."""
    known = isinstance(error, (WenxinError, ValueError))
    message = str(error) if known else f"internal error: {type(error).__name__}: {error}"
    _send(outbox, job, ErrorEvent(message, status))


def _flush(outbox: Outbox) -> None:
    """Hand each event loop its jobs' events (one call a loop)."""
    for loop, items in outbox.items():
        try:
            loop.call_soon_threadsafe(deliver_events, items)
        except RuntimeError:  # the loop has closed: nobody waits
            for job, _ in items:
                job.cancel()


def _send(outbox: Outbox, job: GenerationJob, event: Event) -> None:
    outbox.setdefault(job.loop, []).append((job, event))
