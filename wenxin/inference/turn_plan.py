"""The generation scheduler's decisions, made without the model, and what each turn did (``Turn``).

Each turn the scheduler (``wenxin.inference.generation_scheduler``) asks, in order: who stops
before anything runs (``stopped``: the client left, the time is up), how many waiting requests
fit the batch (``admissible``), and how many prompt tokens each prompt being prefilled gets this
turn (``prefill_parts``); then it prefills those parts, steps every row whose prompt is done, and
records all of it, with who finished in the step and why, in a ``Turn`` (its ``on_turn`` listener
gets each one: the service's metrics). The decisions are plain functions of counts and times, so
they are tested without a model (``tests/fast/test_turn_plan.py``).
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Protocol, Sequence, Tuple

from wenxin.inference.generation_events import FinishReason
from wenxin.models.batch_prefill import fair_shares

MIN_TURN_PREFILL = 16  # prompt tokens a turn at least, while streams decode (turn_prefill_tokens)
# how many prompt tokens a turn prefills while answers decode (--turn_prefill): "all",
# --prefill_tokens (the default: sooner first tokens and more tokens a second); "rows", about as
# many as the rows that decode (even time between tokens, later first tokens: measured at
# ERNIE-4.5-0.3B's shape and 16 streams, time between tokens p99 1.97 -> 0.97 s, first token p50
# 0.97 -> 2.38 s, tokens a second 29.4 -> 24.9; docs/serving.md)
TURN_PREFILL_RULES = ("all", "rows")


class RequestSize(Protocol):
    """What admission needs of a request: its cache rows and the longest its rows can grow."""

    @property
    def rows(self) -> int: ...

    @property
    def horizon(self) -> int: ...


class Stoppable(Protocol):
    """What ``stopped`` needs of a request."""

    key: int
    deadline: float

    def is_cancelled(self) -> bool: ...


@dataclasses.dataclass(frozen=True)
class Admitted:
    """A request let in from the waiting line, and how many of its prompt's tokens a kept start
    covered (``wenxin.models.prefix_cache``: those are not prefilled again)."""

    key: int
    reused_tokens: int = 0


@dataclasses.dataclass(frozen=True)
class PrefillPart:
    """``tokens`` more of request ``key``'s prompt prefilled this turn; ``completes``: that was the
    rest of it (the request joins the decoding batch this turn and its first token goes out)."""

    key: int
    tokens: int
    completes: bool


@dataclasses.dataclass
class Turn:
    """What one turn of the scheduler did, in order: the requests that ended before it ran and
    why, those let in, the prompt parts prefilled, the requests whose rows stepped and the rows of
    that step (0: no step), the requests that finished in it and why, and those that failed (their
    prompt or the step raised: they were answered with the error), and the CPU seconds its thread
    spent on it (the model's calls and the scheduler's choices; the model's own threads beyond
    the first not counted). Requests are named by their keys (``GenerationJob.key``)."""

    ended: List[Tuple[int, FinishReason]] = dataclasses.field(default_factory=list)
    admitted: List[Admitted] = dataclasses.field(default_factory=list)
    prefilled: List[PrefillPart] = dataclasses.field(default_factory=list)
    decoded: List[int] = dataclasses.field(default_factory=list)
    step_rows: int = 0
    finished: List[Tuple[int, FinishReason]] = dataclasses.field(default_factory=list)
    failed: List[int] = dataclasses.field(default_factory=list)
    cpu_seconds: float = 0.0
    model_cpu_seconds: float = 0.0  # of cpu_seconds, those inside the model's calls

    @property
    def ran(self) -> bool:
        """The model ran: a prompt part was prefilled or a step was taken."""
        return bool(self.prefilled or self.step_rows)


def stop_reason(cancelled: bool, deadline: float, now: float) -> Optional[FinishReason]:
    """Why a request stops before this turn runs (its client left, its time is up), or None."""
    if cancelled:
        return FinishReason.CANCELLED
    if now > deadline:
        return FinishReason.TIME_LIMIT
    return None


def stopped(requests: Sequence[Stoppable], now: float) -> List[Tuple[int, FinishReason]]:
    """The requests among ``requests`` that stop before this turn runs, and why, in their order."""
    ends = []
    for request in requests:
        reason = stop_reason(request.is_cancelled(), request.deadline, now)
        if reason is not None:
            ends.append((request.key, reason))
    return ends


def admissible(waiting: Sequence[RequestSize], running: Sequence[RequestSize], max_rows: int,
               max_cached_tokens: int) -> int:
    """How many of ``waiting``, taken in order, join ``running`` while every request, even at the
    end of its answer, fits: at most ``max_rows`` cache rows, and rows x the longest row at most
    ``max_cached_tokens`` (a first request that does not fit blocks the ones behind it: no
    overtaking, so a large request is never starved)."""
    rows = sum(r.rows for r in running)
    horizon = max((r.horizon for r in running), default=0)
    count = 0
    for request in waiting:
        rows += request.rows
        horizon = max(horizon, request.horizon)
        if rows > max_rows or rows * horizon > max_cached_tokens:
            break
        count += 1
    return count


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


def prefill_parts(remaining: Sequence[Tuple[int, int]], decoding_rows: int, most: int,
                  rule: str = "all") -> List[PrefillPart]:
    """This turn's prompt parts: ``remaining`` is (request key, prompt tokens still to prefill) for
    every prompt being prefilled, in the order they were let in; each gets an even share of
    ``turn_prefill_tokens`` (``fair_shares``: a short newcomer is prefilled whole beside a long
    prompt, which goes on next turn). Prompts that get nothing this turn are left out."""
    shares = fair_shares([left for _, left in remaining], turn_prefill_tokens(decoding_rows, most, rule))
    return [PrefillPart(key, share, share >= left) for (key, left), share in zip(remaining, shares) if share > 0]
