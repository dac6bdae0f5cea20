"""Decoding an exported generation model: ``Generator`` (``Predictor`` predicts, a ``Generator``
decodes, both over one loaded export) and ``AnswerText``, an answer's text as its tokens come.

Every path that decodes an export runs ``wenxin.models.batch_decoding.BatchDecoder``: ``wenxin
predict`` and ``run_infer.py`` through ``Generator.generate`` (up to ``max_rows`` rows decode
together, a new prompt joining as soon as one ends), ``wenxin predict --stream`` and the studio's
try box through ``Generator.stream_results``, and ``wenxin serve`` through its scheduler
(``wenxin.inference.generation_scheduler``), which shares the batch between requests.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Deque, Dict, Iterator, List, NamedTuple, Optional, Protocol, Sequence, Tuple

import numpy as np

from wenxin.common.errors import InferenceError
from wenxin.inference.formatters import ResultFormat
from wenxin.inference.stop_strings import StopStrings
from wenxin.models.batch_decoding import CHUNK_STEP, VISIBLE, BatchDecoder
from wenxin.models.batch_prefill import prefill_whole
from wenxin.models.infill_step import PREFILL_ROWS
from wenxin.models.decoding import DecodeSettings, PromptSource, Search, new_search

Row = Sequence[str]
Progress = Callable[[int], None]  # told the rows done


class StreamedText(NamedTuple):
    """One piece of a streamed answer: the result so far, the text this piece adds, whether a
    token was generated for it, and whether a stop string ended the answer."""

    result: Dict[str, Any]
    text: str
    new_token: bool
    stopped: bool


class AnswerText:
    """One answer's text as its tokens come, in the export's result format. With ``stop`` strings
    (``wenxin.inference.stop_strings``) the answer ends before the first one, and text that may
    begin one is held back until it cannot. The pieces' texts add up to the last result's text."""

    def __init__(self, result_format: ResultFormat, row: Row, stop: Sequence[str] = ()) -> None:
        self.growing = result_format.growing(list(row))
        self.stops = StopStrings(stop)
        self.ids: List[int] = []
        self.sent = 0  # characters of the text already given out
        self.result: Dict[str, Any] = {"text": "", "tokens": []}
        self.stopped = False

    def add(self, token_id: int) -> StreamedText:
        """The piece one new token adds (``stopped``: a stop string ended the answer with it)."""
        self.ids.append(token_id)
        result = self.growing.add(token_id)
        text = result["text"]
        cut = self.stops.find(text, self.sent) if self.stops else None
        if cut is not None:
            result["text"] = text[:cut]
            self.result, self.stopped = result, True
            piece = StreamedText(result, text[self.sent:cut], True, True)
            self.sent = cut
            return piece
        shown = self.stops.safe_length(text) if self.stops else len(text)
        piece = StreamedText(result, text[self.sent:shown], True, False)
        self.result, self.sent = result, max(self.sent, shown)
        return piece

    def finish(self) -> Optional[StreamedText]:
        """The text held back for a stop string that the answer did not become (None: nothing)."""
        if self.stopped or self.sent >= len(self.result["text"]):
            return None
        piece = StreamedText(self.result, self.result["text"][self.sent:], False, False)
        self.sent = len(self.result["text"])
        return piece


class GenerationExport(Protocol):
    """What a ``Generator`` is handed: a loaded generation export (``Predictor`` is one, and its
    ``predict`` hands generation to this module)."""

    engine: Any  # the loaded backend; None where the export is not loaded
    steps: Dict[str, Dict[str, Any]]  # the step functions' inputs and outputs
    advance_cache: Optional[np.ndarray]  # an export with advance: its cache of one row holding nothing
    in_place_cache: Optional[np.ndarray]  # the same where its advance keeps the cache in place, else None
    decode_settings: Optional[DecodeSettings]  # None: the export does not generate
    prompt_source: Optional[PromptSource]
    result_format: ResultFormat
    model_cpu_seconds: float  # CPU of the calling thread inside the step programs' calls, so far

    @property
    def fuses_turns(self) -> bool: ...  # its engine runs advance_pair: prompt parts beside the decoding rows

    def run_step(self, name: str, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]: ...

    def settings_for(self, overrides: Optional[Dict[str, Any]] = None) -> DecodeSettings: ...

    def prompt(self, row: Sequence[str]) -> Dict[str, np.ndarray]: ...


def _nothing() -> None:
    """What runs before a step when nothing is to."""


class Generator:
    """Decodes rows with a loaded generation export (``predictor``, used from the thread that
    made it). ``masked``: the export's ``extend`` hides padding (``visible``), so prompts share
    one batch; an older export decodes each prompt with calls of its own."""

    def __init__(self, predictor: GenerationExport) -> None:
        if predictor.decode_settings is None:
            raise InferenceError("this model does not generate (no step functions in its export)")
        if predictor.engine is None:
            raise InferenceError("this Predictor cannot generate (not loaded)")
        self.predictor = predictor
        self.masked = VISIBLE in {i["name"] for i in predictor.steps["extend"]["inputs"]}
        # a prompt can be prefilled a part at a time (wenxin.models.batch_prefill): a prompt of ids alone
        prompt_inputs = set(predictor.prompt_source.inputs) if predictor.prompt_source is not None else set()
        self.chunks = CHUNK_STEP in predictor.steps and prompt_inputs == {"ids"}
        # whole prompts can be prefilled several in one call (batch_prefill.prefill_whole: ERNIE-Gen's infill)
        self.together = PREFILL_ROWS in predictor.steps

    def decoder(self) -> BatchDecoder:
        """A new batch over the export's step functions."""
        return BatchDecoder(self.predictor.run_step, self.masked, self.predictor.in_place_cache)

    def generate(self, rows: Sequence[Row], settings: Optional[DecodeSettings] = None, max_rows: int = 64,
                 progress: Optional[Progress] = None,
                 before_step: Optional[Callable[[], None]] = None) -> List[Dict[str, Any]]:
        """One result per row, in order. At most ``max_rows`` cache rows decode together (a beam
        search's prompt holds ``beam_size``); a prompt joins as soon as there is room. ``progress``
        is told after each finished row; ``before_step`` is called before each model step (an
        exception it raises ends the decoding: a stop signal)."""
        settings = settings or self.predictor.settings_for()
        width = max(settings.rows, max_rows)
        decoder = self.decoder()
        step_begins = before_step or _nothing
        waiting: Deque[Tuple[int, Row]] = collections.deque(enumerate(rows))
        searches: Dict[int, Search] = {}
        results: List[Dict[str, Any]] = [{}] * len(rows)
        done = 0

        def finish(index: int) -> None:
            nonlocal done
            ids = np.asarray([searches.pop(index).tokens], dtype=np.int64).reshape(1, -1)
            results[index] = self.predictor.result_format.results({"generated": ids}, {}, [rows[index]])[0]
            done += 1
            if progress is not None:
                progress(done)

        while waiting or decoder.rows:
            joining: List[Tuple[int, Dict[str, np.ndarray]]] = []  # as many as there is room for
            while waiting and decoder.rows + (len(joining) + 1) * settings.rows <= width:
                index, row = waiting.popleft()
                joining.append((index, self.predictor.prompt(row)))
            prefilled = prefill_whole(self.predictor.run_step, [prompt for _, prompt in joining], self.together,
                                      step_begins)
            for (index, prompt), outputs in zip(joining, prefilled):
                searches[index] = new_search(settings)
                if decoder.add(index, prompt, searches[index], outputs).done:
                    finish(index)
            if decoder.rows:
                step_begins()
                for update in decoder.step():
                    if update.done:
                        finish(int(update.key))  # type: ignore[call-overload]
        return results

    def stream_results(self, row: Row, settings: Optional[DecodeSettings] = None,
                       before_step: Optional[Callable[[], None]] = None, stop: Sequence[str] = (),
                       prompt: Optional[Dict[str, np.ndarray]] = None) -> Iterator[StreamedText]:
        """One row's answer as its tokens are chosen (``AnswerText``'s pieces; a last piece
        without a new token sends text held back for a stop string). Stopping the iteration stops
        the decoding; ``before_step`` is called before every model step (an exception it raises
        ends the decoding there). ``prompt``: the row's prompt inputs, where the caller has them."""
        settings = settings or self.predictor.settings_for()
        if prompt is None:
            prompt = self.predictor.prompt(row)
        answer = AnswerText(self.predictor.result_format, row, stop)
        decoder = self.decoder()
        if before_step is not None:
            before_step()
        updates = [decoder.add(0, prompt, new_search(settings))]
        while True:
            for update in updates:
                for token in update.tokens:
                    piece = answer.add(token)
                    yield piece
                    if piece.stopped:
                        return
            if not decoder.rows:
                break
            if before_step is not None:
                before_step()
            updates = decoder.step()
        last = answer.finish()
        if last is not None:
            yield last
