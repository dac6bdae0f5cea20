"""What a generation request's decoding tells its caller: typed events and why an answer ended.

The scheduler's thread hands each request, in order, any number of ``TokenEvent`` and then one
``DoneEvent`` or ``ErrorEvent`` (``Event``). ``kind`` and ``payload`` are how ``/generate``'s
server-sent events write them (``event: <kind>`` and ``data: <payload as JSON>``).
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, ClassVar, Dict, List, Union


class FinishReason(str, enum.Enum):
    """Why an answer ended (its value is what the API writes)."""

    EOS = "eos"                # the model's end token (or its search ended)
    STOP = "stop"              # one of the request's stop strings
    LENGTH = "length"          # max_new_tokens
    TIME_LIMIT = "time_limit"  # the service's --generation_timeout
    CANCELLED = "cancelled"    # the client left, or the service stopped


@dataclasses.dataclass(frozen=True)
class TokenEvent:
    """One token chosen: the token as the result format writes it and the text it adds (empty
    while a stop string or a character's bytes are still held back)."""

    token: Any
    text: str
    kind: ClassVar[str] = "token"

    @property
    def payload(self) -> Dict[str, Any]:
        return {"token": self.token, "text": self.text}


@dataclasses.dataclass(frozen=True)
class DoneEvent:
    """The request's answer is complete: its whole text and tokens, why it ended, and how many
    tokens its prompt was."""

    text: str
    tokens: List[Any]
    finish_reason: FinishReason
    prompt_tokens: int
    kind: ClassVar[str] = "done"

    @property
    def payload(self) -> Dict[str, Any]:
        return {"text": self.text, "tokens": self.tokens, "finish_reason": self.finish_reason.value,
                "prompt_tokens": self.prompt_tokens}


@dataclasses.dataclass(frozen=True)
class ErrorEvent:
    """The request failed: what went wrong, and the HTTP status it is answered with (0: 422)."""

    error: str
    status: int = 0
    kind: ClassVar[str] = "error"

    @property
    def payload(self) -> Dict[str, Any]:
        return {"error": self.error, **({"status": self.status} if self.status else {})}


Event = Union[TokenEvent, DoneEvent, ErrorEvent]
