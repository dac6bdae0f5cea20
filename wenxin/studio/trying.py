"""Trying a run's exported model from the studio: the exports a run has (one a checkpoint), one
model loaded at a time on a thread of its own, its predictions, and a chat model's answers
streamed piece by piece on the same decoder as ``wenxin serve`` (``Generator``).

The model's thread: a loaded predictor is used from the thread that made it (its engine's
state), so every call on it runs on this one worker, one at a time.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional

from wenxin.common.errors import WenxinError
from wenxin.studio import run_files

MAX_CHAT_MESSAGES = 64
MAX_CHAT_TOKENS = 2048  # an answer's most new tokens from the studio's chat (wenxin serve has its own limit)


class StopAnswer(Exception):
    """The reader left (the page's stop button): the decoding ends at the next step."""


def exports(run_folder: str, index: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
    """The run's exported models, one per checkpoint with an ``inference`` folder: the best first,
    then the newest: ``{"name", "kind", "step", "path"}`` (``path`` relative to the run folder).
    ``index``: the run's checkpoint index, when the caller has read it already."""
    folder = os.path.join(run_files.output_folder(run_folder), "checkpoints")
    found = []
    for entry in (index or run_files.checkpoints(run_folder)).get("checkpoints", []):
        name = os.path.basename(str(entry.get("name", "")))
        inference = os.path.join(folder, name, "inference")
        if name and os.path.isfile(os.path.join(inference, "preprocess.json")):
            found.append({"name": name, "kind": entry.get("kind", ""), "step": entry.get("step"),
                          "path": os.path.relpath(inference, run_folder)})
    found.sort(key=lambda e: (e["kind"] != "best", -(e["step"] or 0)))
    return found


def export_kind(model_dir: str) -> Dict[str, Any]:
    """What an export does, from its ``preprocess.json`` alone (nothing loaded): ``generates``
    (step functions), ``chat`` (its one field reads conversations) and ``max_new_tokens`` (the
    longest answer the chat asks of it: the model's own limit, at most ``MAX_CHAT_TOKENS``)."""
    try:
        with open(os.path.join(model_dir, "preprocess.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return {"generates": False, "chat": False, "max_new_tokens": MAX_CHAT_TOKENS}
    fields = meta.get("fields") or []
    chat = len(fields) == 1 and isinstance(fields[0], dict) and \
        "ChatFieldReader" in json.dumps(fields[0].get("reader", fields[0]))
    generation = meta.get("generation") if isinstance(meta.get("generation"), dict) else {}
    return {"generates": bool(meta.get("steps")), "chat": chat and bool(meta.get("steps")),
            "max_new_tokens": answer_limit(generation.get("max_new_tokens_limit"))}


def answer_limit(model_limit: Any) -> int:
    """The most new tokens a chat answer may ask for: the model's limit (its positions and cache),
    at most ``MAX_CHAT_TOKENS``."""
    if isinstance(model_limit, int) and not isinstance(model_limit, bool) and model_limit > 0:
        return min(model_limit, MAX_CHAT_TOKENS)
    return MAX_CHAT_TOKENS


class ModelShelf:
    """One loaded export at a time (the newest asked for), used from one worker thread."""

    def __init__(self) -> None:
        self.worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="studio-model")
        self.loaded: Dict[str, Any] = {}  # stamp -> Predictor (at most one)

    def close(self) -> None:
        self.worker.shutdown(wait=False, cancel_futures=True)

    def _predictor(self, model_dir: str) -> Any:  # on the worker
        from wenxin.inference.predictor import Predictor
        stamp = f"{model_dir}:{os.path.getmtime(os.path.join(model_dir, 'preprocess.json'))}"
        predictor = self.loaded.get(stamp)
        if predictor is None:
            self.loaded.clear()  # one model in memory at a time
            predictor = Predictor(model_dir, num_threads=1)
            self.loaded[stamp] = predictor
        return predictor

    def predict(self, model_dir: str, rows: List[List[str]]) -> Dict[str, Any]:
        """The export's results for ``rows`` and, for a classifier, its label names by id (for
        probability bars): ``{"predictions", "label_names"}`` (blocking; runs on the worker)."""
        return self.worker.submit(self._predict, model_dir, rows).result()

    def _predict(self, model_dir: str, rows: List[List[str]]) -> Dict[str, Any]:
        predictor = self._predictor(model_dir)
        results = predictor.predict(rows)
        probs = results[0].get("probs") if results and isinstance(results[0], dict) else None
        name_of = getattr(predictor.result_format, "label", None)
        names = [str(name_of(i)) for i in range(len(probs))] if isinstance(probs, list) and callable(name_of) \
            else []
        return {"predictions": results, "label_names": names}

    def chat(self, model_dir: str, request: Dict[str, Any], emit: Callable[[Dict[str, Any]], None],
             stopped: threading.Event) -> "concurrent.futures.Future[None]":
        """Answer a chat request (OpenAI's chat body: messages, temperature, top_p, max_tokens,
        stop) on the worker: ``emit`` gets ``{"text": piece}`` for each piece, then ``{"done":
        {...}}`` or ``{"error": message}``. ``stopped`` set ends the decoding at its next step."""
        return self.worker.submit(self._chat, model_dir, request, emit, stopped)

    def _chat(self, model_dir: str, request: Dict[str, Any], emit: Callable[[Dict[str, Any]], None],
              stopped: threading.Event) -> None:
        from wenxin.inference.generator import Generator
        from wenxin.inference.openai_chat import ChatRequestError, parse_chat_request
        try:
            predictor = self._predictor(model_dir)
            default = predictor.decode_settings.strategy if predictor.decode_settings else "greedy"
            parsed = parse_chat_request({"stream": True, **request}, default, MAX_CHAT_MESSAGES)
            wanted, limit = parsed.overrides.get("max_new_tokens", 0), answer_limit(predictor.max_new_tokens_limit)
            if wanted > limit:
                raise ChatRequestError(f"max_tokens: at most {limit} for this model", "max_tokens")
            settings = predictor.settings_for(parsed.overrides)

            def before_step() -> None:
                if stopped.is_set():
                    raise StopAnswer()
            pieces: Iterator[Any] = Generator(predictor).stream_results(parsed.row, settings, before_step,
                                                                        parsed.stop)
            last: Optional[Any] = None
            for piece in pieces:
                last = piece
                if piece.text:
                    emit({"text": piece.text})
            result = last.result if last is not None else {"text": ""}
            emit({"done": {"text": result.get("text", ""), "tokens": len(result.get("tokens", [])),
                           "stopped": bool(last is not None and last.stopped)}})
        except StopAnswer:
            emit({"done": {"stopped_by_reader": True}})
        except (ChatRequestError, WenxinError, ValueError) as e:
            emit({"error": str(e)})
