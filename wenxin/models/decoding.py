"""Decoding for generation models: greedy search, beam search with a length penalty, and top-k /
top-p sampling with a seed, all over a key/value cache, so that each new token costs one token's
work rather than a pass over the whole sequence.

A model decodes through ``IncrementalModel``: ``prefill`` runs the prompt once and returns the
next token's logits and the cache; ``extend`` feeds one token per row and returns the next
logits and the grown cache; ``select`` keeps (and repeats) rows of a cache, which is how beams
follow their parents. The search itself is plain Python over NumPy scores: the per-token work is
the model's, and a search step's host work is a top-k over the vocabulary.

Prompts are decoded one at a time (a beam search's rows are its beams); batching prompts of
different lengths is left to a caller that pads them.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Protocol, Tuple

import numpy as np

from wenxin.common.errors import ConfigError


class IncrementalModel(Protocol):
    """What decoding needs of a model (see the module docstring). Logits are ``[rows, vocab]``
    arrays (NumPy, or anything ``np.asarray`` takes); the prompt and the cache are the model's own."""

    def prefill(self, prompt: Any) -> Tuple[Any, Any]: ...

    def extend(self, tokens: List[int], cache: Any) -> Tuple[Any, Any]: ...

    def select(self, cache: Any, rows: List[int]) -> Any: ...


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
    """How to decode. ``strategy``: ``greedy``, ``beam`` (``beam_size`` beams, scores divided
    by GNMT's length penalty ``((5 + length) / 6) ** length_penalty``, as ERNIE-Gen does) or
    ``sample`` (``temperature``, then the ``top_k`` most likely tokens (0: all) and the smallest
    set whose probability reaches ``top_p`` (1.0: all), drawn with ``seed``). Decoding stops at
    ``eos_id`` or any of ``stop_ids`` (not part of the result; a chat model ends a turn with its
    own token), or after ``max_new_tokens``."""

    strategy: str = "greedy"
    max_new_tokens: int = 32
    eos_id: Optional[int] = None
    beam_size: int = 4
    length_penalty: float = 1.0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    stop_ids: Tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop_ids", tuple(int(i) for i in self.stop_ids))  # a list, read from JSON

    def as_dict(self) -> Dict[str, Any]:
        values = dataclasses.asdict(self)
        values["stop_ids"] = list(self.stop_ids)
        return values

    def stops(self, token: int) -> bool:
        """Whether ``token`` ends the generated text."""
        return token == self.eos_id or token in self.stop_ids

    def check(self) -> None:
        problems = []
        if self.strategy not in ("greedy", "beam", "sample"):
            problems.append(f"strategy {self.strategy!r} is not greedy, beam or sample")
        if self.max_new_tokens < 1:
            problems.append(f"max_new_tokens {self.max_new_tokens} must be at least 1")
        if self.beam_size < 1:
            problems.append(f"beam_size {self.beam_size} must be at least 1")
        if not self.temperature > 0:
            problems.append(f"temperature {self.temperature} must be above 0")
        if self.top_k < 0:
            problems.append(f"top_k {self.top_k} must be 0 (all tokens) or more")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p {self.top_p} must be in (0, 1]")
        if problems:
            raise ConfigError("decoding: " + "; ".join(problems))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-probabilities, in float64."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's length penalty (Wu et al. 2016): ``((5 + length) / 6) ** alpha``."""
    return ((5.0 + length) / 6.0) ** alpha


def decode(model: IncrementalModel, prompt: Any, settings: DecodeSettings) -> List[int]:
    """The generated tokens after ``prompt`` (see ``DecodeSettings``)."""
    return list(decode_stream(model, prompt, settings))


def decode_stream(model: IncrementalModel, prompt: Any, settings: DecodeSettings) -> Iterator[int]:
    """``decode``'s tokens as they are chosen: greedy search and sampling yield each token before
    the model computes the next (a consumer that stops iterating stops the work); beam search's
    best hypothesis is known only at its end, so its tokens come together then."""
    settings.check()
    if settings.strategy == "beam":
        yield from beam_search(model, prompt, settings)
        return
    rng = np.random.default_rng(settings.seed)
    logits, cache = model.prefill(prompt)
    for step in range(settings.max_new_tokens):
        row = np.asarray(logits, dtype=np.float64)[0]
        token = int(np.argmax(row)) if settings.strategy == "greedy" else sample_token(row, settings, rng)
        if settings.stops(token):
            return
        yield token
        if step + 1 < settings.max_new_tokens:
            logits, cache = model.extend([token], cache)


def sample_token(logits: np.ndarray, settings: DecodeSettings, rng: np.random.Generator) -> int:
    """One token drawn from ``softmax(logits / temperature)`` cut to the top-k and top-p set."""
    scores = logits / settings.temperature
    order = np.argsort(-scores, kind="stable")  # most likely first; ties by token id
    if settings.top_k:
        order = order[:settings.top_k]
    probs = np.exp(scores[order] - scores[order[0]])
    probs /= probs.sum()
    if settings.top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(probs), settings.top_p) + 1)  # the smallest set reaching top_p
        order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
    return int(order[rng.choice(len(order), p=probs)])


def beam_search(model: IncrementalModel, prompt: Any, settings: DecodeSettings) -> List[int]:
    """The best finished hypothesis by length-normalized log-probability. At each step every
    alive beam's continuations compete; those ending in ``eos_id`` finish, the best others (up to
    ``beam_size``) go on. The search ends when ``beam_size`` hypotheses have finished and no
    alive beam scores better than the best of them at its current length, or at
    ``max_new_tokens`` (alive beams then count as finished)."""
    k, alpha = settings.beam_size, settings.length_penalty
    logits, cache = model.prefill(prompt)
    beams: List[Tuple[float, List[int]]] = [(0.0, [])]  # (sum of log-probabilities, tokens)
    finished: List[Tuple[float, List[int]]] = []  # (normalized score, tokens)
    for step in range(settings.max_new_tokens):
        logprobs = log_softmax(logits)  # [rows, V]
        totals = np.asarray([score for score, _ in beams])[:, None] + logprobs  # [rows, V]
        flat = totals.ravel()
        count = min(flat.size, 2 * k)
        best = np.argpartition(-flat, count - 1)[:count]
        best = best[np.lexsort((best, -flat[best]))]  # by score, ties by position: deterministic
        parents: List[int] = []
        tokens: List[int] = []
        grown: List[Tuple[float, List[int]]] = []
        for index in best.tolist():
            row, token = divmod(index, logprobs.shape[1])
            score, seq = beams[row][0] + logprobs[row, token], beams[row][1]
            if settings.stops(token):
                finished.append((score / length_penalty(len(seq) + 1, alpha), seq))
            elif len(grown) < k:
                parents.append(row)
                tokens.append(token)
                grown.append((score, seq + [token]))
        beams = grown
        if not beams or step + 1 == settings.max_new_tokens:
            break
        best_alive = max(score for score, _ in beams) / length_penalty(step + 1, alpha)
        if len(finished) >= k and max(score for score, _ in finished) >= best_alive:
            break
        logits, cache = model.extend(tokens, model.select(cache, parents))
    finished.extend((score / length_penalty(len(seq), alpha), seq) for score, seq in beams)
    return max(finished, key=lambda item: (item[0], [-t for t in item[1]]))[1] if finished else []


StepRunner = Callable[[str, Dict[str, np.ndarray]], Dict[str, np.ndarray]]  # (step name, inputs) -> outputs


class SteppedModel:
    """An ``IncrementalModel`` over a model's two step functions, however they run (eagerly, as
    static programs, or exported): ``prefill`` (the prompt's named inputs -> ``logits``
    ``[1, V]``, ``cache`` and ``position`` ``[1]``, the first new token's position) and
    ``extend`` (``tokens`` ``[R]``, their ``positions`` ``[R]`` and ``cache`` -> ``logits``
    ``[R, V]`` and the grown ``cache``). The cache is one array whose third axis is the row; this
    object's cache is ``(array, next position)``, every row of a step being at the same position."""

    def __init__(self, run: StepRunner) -> None:
        self.run = run

    def prefill(self, prompt: Dict[str, np.ndarray]) -> Tuple[np.ndarray, Tuple[np.ndarray, int]]:
        out = self.run("prefill", prompt)
        return out["logits"], (out["cache"], int(np.asarray(out["position"]).reshape(-1)[0]))

    def extend(self, tokens: List[int], cache: Tuple[np.ndarray, int]) -> Tuple[np.ndarray, Tuple[np.ndarray, int]]:
        array, position = cache
        out = self.run("extend", {"tokens": np.asarray(tokens, dtype=np.int64),
                                  "positions": np.full(len(tokens), position, dtype=np.int64), "cache": array})
        return out["logits"], (out["cache"], position + 1)

    def select(self, cache: Tuple[np.ndarray, int], rows: List[int]) -> Tuple[np.ndarray, int]:
        return np.ascontiguousarray(cache[0][:, :, rows]), cache[1]


@dataclasses.dataclass(frozen=True)
class PromptSource:
    """Where a batch's rows keep a generation model's prompts: each ``prefill`` input is a batch
    tensor ``[B, T]`` (``inputs``: prefill input -> tensor name), cut to the row's length (the
    tensor ``lengths`` ``[B]``). The model states it; an export records it (``preprocess.json``'s
    ``generation.prompt``), so the Predictor feeds the exported steps as training fed the model's."""

    inputs: Mapping[str, str]
    lengths: str

    def prompts(self, batch: Mapping[str, np.ndarray]) -> List[Dict[str, np.ndarray]]:
        """Each row's ``prefill`` inputs, without padding (``[1, length]``)."""
        lengths = np.asarray(batch[self.lengths]).reshape(-1).tolist()
        return [{name: np.ascontiguousarray(np.asarray(batch[tensor])[row:row + 1, :length])
                 for name, tensor in self.inputs.items()} for row, length in enumerate(lengths)]


def generate_batch(run: StepRunner, batch: Mapping[str, np.ndarray], source: PromptSource,
                   settings: DecodeSettings) -> np.ndarray:
    """Every row of ``batch`` decoded through the step functions ``run`` runs: ``[B,
    max_new_tokens]`` token ids, -1 after each row's end."""
    prompts = source.prompts(batch)
    out = np.full((len(prompts), settings.max_new_tokens), -1, dtype=np.int64)
    model = SteppedModel(run)
    for row, prompt in enumerate(prompts):
        tokens = decode(model, prompt, settings)
        out[row, :len(tokens)] = tokens
    return out
