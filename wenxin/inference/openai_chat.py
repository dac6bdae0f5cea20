"""OpenAI's chat completions API over a chat export, for ``wenxin serve``.

``POST /v1/chat/completions`` and ``GET /v1/models`` answer as OpenAI's API does, so that OpenAI's
client libraries, and the tools built on them, talk to a fine-tuned ERNIE 4.5 as they talk to
OpenAI, vLLM or FastDeploy. The decoding is ``/generate``'s (the same worker, limits, stop tokens
and time limit); only the request and the answer are shaped differently.

A request's ``messages`` (system or developer first, then user and assistant in turns, ending
with the user's) become the prompt ERNIEKit's SFT line describes (``system``, ``src``, ``tgt``).
Settings: ``max_completion_tokens`` (or ``max_tokens``), ``temperature`` (0: greedy), ``top_p``,
``top_k``, ``seed`` (sampling without one draws a seed per request, so asking again gives
another answer), ``stop`` (up to 4 strings), ``n`` 1, ``stream`` and
``stream_options.include_usage``. A field that would change the answer and is not supported
(penalties, log probabilities, tools, ``n`` over 1, a response format) is a 400 naming it, never
ignored; ``model`` is taken as given (one
model is served; answers name it as the export's folder).
"""
from __future__ import annotations

import json
import secrets
import time
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import orjson

from wenxin.inference.generation_events import DoneEvent, Event, FinishReason, TokenEvent
from wenxin.inference.stop_strings import parse_stop_strings
from wenxin.models.decoding import MAX_SEED, MAX_TOP_K, MIN_TEMPERATURE

# fields that change nothing here (OpenAI's client sends them as the user sets them)
HARMLESS_FIELDS = {"model", "user", "metadata", "store", "service_tier", "parallel_tool_calls"}
# fields that would change the answer, accepted only at the value that changes nothing
UNSUPPORTED_UNLESS = {"presence_penalty": (None, 0), "frequency_penalty": (None, 0),
                      "logprobs": (None, False), "top_logprobs": (None, 0), "n": (None, 1), "tools": (None, []),
                      "tool_choice": (None, "none"), "functions": (None, []), "function_call": (None, "none"),
                      "response_format": (None, {"type": "text"}), "logit_bias": (None, {}),
                      "reasoning_effort": (None,), "modalities": (None, ["text"]), "audio": (None,),
                      "prediction": (None,), "web_search_options": (None,)}
SETTINGS_FIELDS = {"messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature",
                   "top_p", "top_k", "seed", "stop"}
FINISH_REASONS = {FinishReason.EOS: "stop", FinishReason.STOP: "stop", FinishReason.LENGTH: "length",
                  FinishReason.TIME_LIMIT: "length", FinishReason.CANCELLED: "stop"}


_TEXT = {"oneOf": [{"type": "string"}, {"type": "array", "items": {
    "type": "object", "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
    "required": ["type", "text"]}}]}
CHAT_SCHEMA: Dict[str, Any] = {
    "type": "object", "required": ["messages"],
    "description": "OpenAI's chat completions request; fields that would change the answer and are not supported "
                   "are refused by name",
    "properties": {
        "model": {"type": "string", "description": "taken as given: one model is served"},
        "messages": {"type": "array", "minItems": 1, "description": "system or developer first, then user and "
                     "assistant in turns, ending with the user's; at most the service's --max_messages",
                     "items": {"type": "object", "required": ["role", "content"], "properties": {
                         "role": {"enum": ["system", "developer", "user", "assistant"]}, "content": _TEXT}}},
        "stream": {"type": "boolean"},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
        "max_tokens": {"type": "integer", "minimum": 1}, "max_completion_tokens": {"type": "integer", "minimum": 1},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2, "description": "0: greedy"},
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "top_k": {"type": "integer", "minimum": 0, "maximum": MAX_TOP_K},
        "seed": {"type": "integer", "minimum": 0, "maximum": MAX_SEED},
        "stop": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
        "n": {"const": 1}, "user": {"type": "string"}}}


class ChatRequestError(ValueError):
    """A request that breaks the API; ``param`` names the field (OpenAI's error object)."""

    def __init__(self, message: str, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.param = param


def error_payload(message: str, status: HTTPStatus, param: Optional[str] = None) -> Dict[str, Any]:
    """OpenAI's error object (its clients read ``error.message``)."""
    kind = ("invalid_request_error" if status < 500 else "server_error") if status != HTTPStatus.NOT_FOUND \
        else "not_found_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def message_text(content: Any, where: str) -> str:
    """A message's text: a string, or a list of text parts (``{"type": "text", "text": ...}``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ChatRequestError(f"{where}[{i}]: only text parts ({{\"type\": \"text\", \"text\": ...}}) are "
                                       f"supported", f"{where}[{i}]")
            texts.append(part["text"])
        return "".join(texts)
    raise ChatRequestError(f"{where}: expected a string or a list of text parts", where)


def _add_turn(where: str, role: Any, message: Dict[str, Any], text: str, src: List[str], tgt: List[str]) -> None:
    """A user's question (``src``) or the assistant's answer to the one before (``tgt``); the user
    and the assistant take turns."""
    if role == "user":
        if len(src) != len(tgt):
            raise ChatRequestError(f"{where}.role: two user messages in a row (the user and the assistant "
                                   f"take turns)", f"{where}.role")
        src.append(text)
    elif role == "assistant":
        if len(src) != len(tgt) + 1:
            raise ChatRequestError(f"{where}.role: an assistant message answers a user message", f"{where}.role")
        if not isinstance(message.get("content"), (str, list)):
            raise ChatRequestError(f"{where}.content: an assistant message needs its text", f"{where}.content")
        tgt.append(text)
    else:
        raise ChatRequestError(f"{where}.role: {role!r} is not system, developer, user or assistant "
                               f"(tool messages are not supported)", f"{where}.role")


def conversation_line(messages: Any, max_messages: int = 1024) -> str:
    """``messages`` -> the prompt as ERNIEKit's SFT line (``{"system", "src", "tgt"}``, one answer
    fewer than questions), which a chat export's field reads; at most ``max_messages``."""
    if not isinstance(messages, list) or not messages:
        raise ChatRequestError("messages: expected a non-empty list of messages", "messages")
    if len(messages) > max_messages:
        raise ChatRequestError(f"messages: {len(messages)} messages, more than the service's limit of "
                               f"{max_messages} (--max_messages)", "messages")
    system: Optional[str] = None
    src: List[str] = []
    tgt: List[str] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ChatRequestError(f"{where}: expected an object with role and content", where)
        role = message.get("role")
        text = message_text(message.get("content"), f"{where}.content")
        if role in ("system", "developer"):
            if i != 0:
                raise ChatRequestError(f"{where}.role: a {role} message comes first, and once", f"{where}.role")
            system = text
        else:
            _add_turn(where, role, message, text, src, tgt)
    if len(src) != len(tgt) + 1:
        raise ChatRequestError("messages: the last message must be the user's (the answer continues it)", "messages")
    line: Dict[str, Any] = {"src": src, "tgt": tgt}
    if system:
        line["system"] = system
    return json.dumps(line, ensure_ascii=False)


def _number(data: Dict[str, Any], key: str, low: float, high: float,
            low_open: bool = False) -> Optional[Union[int, float]]:
    """A number field from ``low`` to ``high`` (above ``low`` where ``low_open``; never NaN or infinite)."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high \
            or (low_open and value == low):
        what = f"above {low:g} and at most {high:g}" if low_open else f"from {low:g} to {high:g}"
        raise ChatRequestError(f"{key}: expected a number {what}, got {value!r}", key)
    return value


def _integer(data: Dict[str, Any], key: str, low: int, high: Optional[int] = None) -> Optional[int]:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        what = f"of at least {low}" if high is None else f"from {low} to {high}"
        raise ChatRequestError(f"{key}: expected an integer {what}, got {value!r}", key)
    return value


@dataclass
class ChatRequest:
    """A checked chat completions request: the prompt row, the decoding settings' changes, and
    how to answer."""

    row: List[str]
    overrides: Dict[str, Any]
    stream: bool
    include_usage: bool
    stop: Tuple[str, ...] = ()


def _check_fields(data: Dict[str, Any]) -> None:
    """Every field is one this service reads, ignores harmlessly, or takes at its default only."""
    for key, value in data.items():
        if key in HARMLESS_FIELDS or key in SETTINGS_FIELDS:
            continue
        if key in UNSUPPORTED_UNLESS:
            if not any(value == allowed and isinstance(value, bool) == isinstance(allowed, bool)
                       for allowed in UNSUPPORTED_UNLESS[key]):
                raise ChatRequestError(f"{key}: not supported by this service (it would change the answer)", key)
            continue
        raise ChatRequestError(f"{key}: unknown field", key)


def _decoding_overrides(data: Dict[str, Any], default_strategy: str) -> Dict[str, Any]:
    """The decoding settings a request changes: its token limit, and greedy or sampling (with a
    seed: the request's, or a new one each time, as OpenAI's API answers)."""
    overrides: Dict[str, Any] = {}
    for key in ("max_completion_tokens", "max_tokens"):
        tokens = _integer(data, key, 1)
        if tokens is not None:
            overrides["max_new_tokens"] = tokens
            break
    temperature = _number(data, "temperature", 0.0, 2.0)
    if temperature is not None and 0 < temperature < MIN_TEMPERATURE:
        raise ChatRequestError(f"temperature: expected 0 (greedy) or a number from {MIN_TEMPERATURE:g} to 2, "
                               f"got {temperature!r}", "temperature")
    top_p = _number(data, "top_p", 0.0, 1.0, low_open=True)
    top_k = _integer(data, "top_k", 0, MAX_TOP_K)
    seed = _integer(data, "seed", 0, MAX_SEED)
    if temperature == 0.0:
        overrides["strategy"] = "greedy"
    elif temperature is not None or top_p is not None or top_k is not None:
        overrides["strategy"] = "sample"
        overrides.update({k: v for k, v in (("temperature", temperature), ("top_p", top_p), ("top_k", top_k))
                          if v is not None})
    if seed is not None:
        overrides["seed"] = seed
    elif overrides.get("strategy", default_strategy) == "sample":
        overrides["seed"] = secrets.randbelow(2 ** 31)  # another answer each time, as OpenAI's API gives
    return overrides


def parse_chat_request(data: Any, default_strategy: str, max_messages: int = 1024) -> ChatRequest:
    """A request body (parsed JSON) -> ``ChatRequest``; ``ChatRequestError`` names a bad field.
    ``default_strategy``: the export's, which applies when the request sets no sampling field;
    ``max_messages``: the service's limit."""
    if not isinstance(data, dict):
        raise ChatRequestError("expected a JSON object with messages")
    _check_fields(data)
    if not isinstance(data.get("model", ""), str):
        raise ChatRequestError("model: expected a string (the model's name)", "model")
    row = [conversation_line(data.get("messages"), max_messages)]
    stream = False if data.get("stream") is None else data["stream"]
    if not isinstance(stream, bool):
        raise ChatRequestError("stream: expected true or false", "stream")
    options = {} if data.get("stream_options") is None else data["stream_options"]
    if not isinstance(options, dict) or not set(options) <= {"include_usage"} \
            or not isinstance(options.get("include_usage", False), bool):
        raise ChatRequestError("stream_options: expected {\"include_usage\": true or false}", "stream_options")
    overrides = _decoding_overrides(data, default_strategy)
    try:
        stop = parse_stop_strings(data.get("stop"))
    except ValueError as e:
        raise ChatRequestError(f"stop: {e}", "stop") from None
    return ChatRequest(row, overrides, stream, bool(options.get("include_usage", False)), stop)


class ChatAnswer:
    """The answer to one chat completions request: the whole completion, or its stream of chunks
    (server-sent events ending ``data: [DONE]``)."""

    def __init__(self, model: str, include_usage: bool = False) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model, self.include_usage = model, include_usage

    @staticmethod
    def usage(done: DoneEvent) -> Dict[str, int]:
        prompt, completion = done.prompt_tokens, len(done.tokens)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def completion(self, done: DoneEvent) -> Dict[str, Any]:
        """The ``chat.completion`` object of a finished decoding."""
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": done.text},
                             "logprobs": None, "finish_reason": FINISH_REASONS[done.finish_reason]}],
                "usage": self.usage(done)}

    def _chunk(self, choices: Sequence[Dict[str, Any]], usage: Optional[Dict[str, int]] = None) -> bytes:
        chunk: Dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                                 "model": self.model, "choices": list(choices)}
        if self.include_usage:
            chunk["usage"] = usage
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def first_chunk(self) -> bytes:
        return self._chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])

    def chunks(self, event: Event) -> bytes:
        """The stream's bytes for one decoding event (nothing for a token that adds no text yet)."""
        if isinstance(event, TokenEvent):
            text = event.text
            return self._chunk([{"index": 0, "delta": {"content": text}, "finish_reason": None}]) if text else b""
        if isinstance(event, DoneEvent):
            reason = FINISH_REASONS[event.finish_reason]
            last = self._chunk([{"index": 0, "delta": {}, "finish_reason": reason}])
            if self.include_usage:
                last += self._chunk([], self.usage(event))
            return last + b"data: [DONE]\n\n"
        error = error_payload(event.error, HTTPStatus.UNPROCESSABLE_ENTITY)
        return b"data: " + orjson.dumps(error) + b"\n\ndata: [DONE]\n\n"


def models_list(model: str) -> Dict[str, Any]:
    """``GET /v1/models``: the one model served."""
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "wenxin"}]}
