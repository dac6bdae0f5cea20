"""Decoding for generation models: greedy search, beam search with a length penalty, and top-k /
top-p sampling with a seed, all over a key/value cache, so that each new token costs one token's
work rather than a pass over the whole sequence.

A decoding strategy is a ``Search``: a state machine for one prompt that is handed the logits the
model gave its rows at each step and answers which rows go on (``Advance``: each next row's
parent row and the token it feeds). It never runs the model itself, so the same search runs
alone over an ``IncrementalModel`` (``decode_stream``) and beside other prompts' searches in one
batch (``wenxin.models.batch_decoding``), and gives the same tokens for the same logits either way.
Strategies are registered by name (``RegisterSet.decoding_strategies``): adding one is one class.

A model decodes alone through ``IncrementalModel``: ``prefill`` runs the prompt once and returns
the next token's logits and the cache; ``extend`` feeds one token per row and returns the next
logits and the grown cache; ``select`` keeps (and repeats) rows of a cache, which is how beams
follow their parents. The search itself is plain Python over NumPy scores: the per-token work is
the model's, and a search step's host work is a top-k over the vocabulary.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, ClassVar, Dict, Iterator, List, Mapping, Optional, Protocol, Tuple

import numpy as np

from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet

# Upper bounds of the settings (a service sets lower ones: wenxin.inference.server.Limits)
MAX_BEAM_SIZE = 64            # beams of one prompt: each is a row of the key/value cache
MAX_TEMPERATURE = 100.0       # beyond it sampling is uniform anyway
MIN_TEMPERATURE = 1e-6        # below it logits / temperature overflows a double
MAX_LENGTH_PENALTY = 10.0     # GNMT's alpha (0.6 to 2 in practice)
MAX_SEED = 2 ** 63 - 1        # NumPy's generators take seeds from 0 to here (and beyond, but JSON's integers end)
MAX_TOP_K = 2 ** 31 - 1


class IncrementalModel(Protocol):
    """What decoding alone needs of a model (see the module docstring). Logits are ``[rows,
    vocab]`` arrays (NumPy, or anything ``np.asarray`` takes); the prompt and the cache are the
    model's own."""

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
    own token), or after ``max_new_tokens``. ``check`` bounds every number (the module's
    ``MAX_*`` and ``MIN_*``)."""

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

    @property
    def rows(self) -> int:
        """The most rows of the key/value cache this prompt's decoding holds at once."""
        return self.beam_size if self.strategy == "beam" else 1

    def check(self) -> None:
        """One ``ConfigError`` naming every setting out of its range (NaN and infinity too)."""
        problems = []
        strategies = sorted(RegisterSet.decoding_strategies.registered())  # built-in, and any a task registered
        if self.strategy not in strategies:
            problems.append(f"strategy {self.strategy!r} is not {', '.join(strategies[:-1])} or {strategies[-1]}")
        integers: Tuple[Tuple[str, int, Optional[int]], ...] = (
            ("max_new_tokens", 1, None), ("beam_size", 1, MAX_BEAM_SIZE), ("top_k", 0, MAX_TOP_K),
            ("seed", 0, MAX_SEED))
        for name, low, high in integers:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                problems.append(f"{name} {value!r} must be an integer")
            elif value < low or (high is not None and value > high):
                problems.append(f"{name} {value} must be at least {low}" if high is None else
                                f"{name} {value} must be from {low} to {high}")
        numbers = (("temperature", MIN_TEMPERATURE, MAX_TEMPERATURE), ("length_penalty", 0.0, MAX_LENGTH_PENALTY))
        for name, bottom, top in numbers:
            value = getattr(self, name)
            if not _number(value) or not bottom <= value <= top:  # also NaN
                problems.append(f"{name} {value!r} must be a number from {bottom:g} to {top:g}")
        if not _number(self.top_p) or not 0 < self.top_p <= 1:
            problems.append(f"top_p {self.top_p!r} must be in (0, 1]")
        if problems:
            raise ConfigError("decoding: " + "; ".join(problems))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-probabilities, in float64."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's length penalty (Wu et al. 2016): ``((5 + length) / 6) ** alpha``."""
    return ((5.0 + length) / 6.0) ** alpha


def likeliest_first(scores: np.ndarray) -> np.ndarray:
    """The token ids of ``scores`` ``[V]``, highest score first, equal scores by id: what
    ``np.argsort(-scores, kind="stable")`` gives, in a sixth of its time for float32 scores of ERNIE
    4.5's vocabulary of 103,424 (1.2 against 7.3 ms, measured: a sampled token cost more than a
    16-row int8 step's share). Each score's bits, ordered as an integer's, make one int64 key with
    its id, and NumPy's vectorized integer sort orders the keys (ties need no second pass: the
    int8 output layer's logits hold thousands of runs of equal values). Other dtypes and
    non-finite scores take ``argsort`` (tested against it, ties and signed zeros included)."""
    if scores.dtype != np.float32 or scores.ndim != 1 or not np.isfinite(scores).all():
        return np.argsort(-scores, kind="stable")
    bits = (scores + np.float32(0.0)).view(np.int32)  # -0.0 becomes 0.0: equal scores, equal keys
    ordered = bits ^ ((bits >> 31) & np.int32(0x7FFFFFFF))  # a float's order as an int32's
    keys = (~ordered).astype(np.int64) << 32 | np.arange(len(scores), dtype=np.int64)  # high score first, then id
    return np.sort(keys) & 0xFFFFFFFF


# temperatures over which the logits' order is the scores' (sample_token): dividing float32 values
# by such a temperature in float64 keeps distinct values distinct and equal ones equal
ORDER_KEEPING_TEMPERATURES = (1e-4, 1e4)


def sampling_order(logits: np.ndarray, scores: np.ndarray, temperature: float) -> np.ndarray:
    """``likeliest_first`` of ``scores`` (``logits / temperature``): float32 logits (a search
    hands them over in float64) are ordered as float32, which is the scores' order
    (``ORDER_KEEPING_TEMPERATURES``); other logits by their scores."""
    low, high = ORDER_KEEPING_TEMPERATURES
    if low <= temperature <= high:
        narrow = logits.astype(np.float32)
        if np.array_equal(narrow, logits):
            return likeliest_first(narrow)
    return likeliest_first(scores)


def sample_token(logits: np.ndarray, settings: DecodeSettings, rng: np.random.Generator) -> int:
    """One token drawn from ``softmax(logits / temperature)`` cut to the top-k and top-p set."""
    scores = logits / settings.temperature
    order = sampling_order(logits, scores, settings.temperature)  # most likely first; ties by token id
    if settings.top_k:
        order = order[:settings.top_k]
    probs = np.exp(scores[order] - scores[order[0]])
    probs /= probs.sum()
    if settings.top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(probs), settings.top_p) + 1)  # the smallest set reaching top_p
        order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
    return int(order[rng.choice(len(order), p=probs)])


@dataclasses.dataclass
class Advance:
    """What a search asks of the next model step: for each of its next rows, the row of the step
    just run that it continues (``parents``, an index into the rows the search was given) and the
    token it feeds (``tokens``)."""

    parents: List[int]
    tokens: List[int]


class Search:
    """One prompt's decoding (see the module docstring). ``advance`` is given the logits of the
    search's rows ``[rows, vocab]`` (the prompt's, one row, first) and returns the next step's
    rows, or None when the search has ended. ``tokens`` is the answer so far: for a search that
    ``streams``, every token in it is final as soon as it is there; otherwise it is the whole
    answer once the search has ended (beam search: the best hypothesis is known only then)."""

    streams: ClassVar[bool] = True

    def __init__(self, settings: DecodeSettings) -> None:
        self.settings = settings
        self.tokens: List[int] = []
        self.done = False

    def advance(self, logits: np.ndarray) -> Optional[Advance]:
        raise NotImplementedError


class _OneRowSearch(Search):
    """A search with one row that appends one chosen token a step (``choose``: given the row's
    logits as the model gave them)."""

    def choose(self, logits: np.ndarray) -> int:
        raise NotImplementedError

    def advance(self, logits: np.ndarray) -> Optional[Advance]:
        token = self.choose(np.asarray(logits)[0])
        if self.settings.stops(token):
            self.done = True
            return None
        self.tokens.append(token)
        if len(self.tokens) >= self.settings.max_new_tokens:
            self.done = True
            return None
        return Advance([0], [token])


@RegisterSet.decoding_strategies.register("greedy")
class GreedySearch(_OneRowSearch):
    """The most likely token at every step."""

    def choose(self, logits: np.ndarray) -> int:
        # float32 as given: the same token as in float64 (exact), without a copy of the vocabulary
        # in float64 a row and step (1.7% of a served batch's decoding at ERNIE 4.5's vocabulary)
        return int(np.argmax(logits))


@RegisterSet.decoding_strategies.register("sample")
class SampleSearch(_OneRowSearch):
    """A token drawn at every step (``sample_token``), from a generator seeded with ``seed``."""

    def __init__(self, settings: DecodeSettings) -> None:
        super().__init__(settings)
        self.rng = np.random.default_rng(settings.seed)

    def choose(self, logits: np.ndarray) -> int:
        return sample_token(np.asarray(logits, dtype=np.float64), self.settings, self.rng)


@RegisterSet.decoding_strategies.register("beam")
class BeamSearch(Search):
    """The best finished hypothesis by length-normalized log-probability. At each step every
    alive beam's continuations compete; those ending in an end token finish, the best others (up
    to ``beam_size``) go on. The search ends when ``beam_size`` hypotheses have finished and no
    alive beam scores better than the best of them at its current length, or at
    ``max_new_tokens`` (alive beams then count as finished)."""

    streams = False

    def __init__(self, settings: DecodeSettings) -> None:
        super().__init__(settings)
        self.beams: List[Tuple[float, List[int]]] = [(0.0, [])]  # (sum of log-probabilities, tokens)
        self.finished: List[Tuple[float, List[int]]] = []  # (normalized score, tokens)
        self.step = 0

    def advance(self, logits: np.ndarray) -> Optional[Advance]:
        k, alpha = self.settings.beam_size, self.settings.length_penalty
        logprobs = log_softmax(logits)  # [rows, V]
        totals = np.asarray([score for score, _ in self.beams])[:, None] + logprobs  # [rows, V]
        flat = totals.ravel()
        count = min(flat.size, 2 * k)
        best = np.argpartition(-flat, count - 1)[:count]
        best = best[np.lexsort((best, -flat[best]))]  # by score, ties by position: deterministic
        parents: List[int] = []
        tokens: List[int] = []
        grown: List[Tuple[float, List[int]]] = []
        for index in best.tolist():
            row, token = divmod(index, logprobs.shape[1])
            score, seq = self.beams[row][0] + logprobs[row, token], self.beams[row][1]
            if self.settings.stops(token):
                self.finished.append((score / length_penalty(len(seq) + 1, alpha), seq))
            elif len(grown) < k:
                parents.append(row)
                tokens.append(token)
                grown.append((score, seq + [token]))
        self.beams = grown
        self.step += 1
        if grown and self.step < self.settings.max_new_tokens:
            best_alive = max(score for score, _ in grown) / length_penalty(self.step, alpha)
            if len(self.finished) < k or max(score for score, _ in self.finished) < best_alive:
                return Advance(parents, tokens)
        self._finish()
        return None

    def _finish(self) -> None:
        candidates = self.finished + [(score / length_penalty(len(seq), self.settings.length_penalty), seq)
                                      for score, seq in self.beams]
        self.tokens = max(candidates, key=lambda item: (item[0], [-t for t in item[1]]))[1] if candidates else []
        self.done = True


def new_search(settings: DecodeSettings) -> Search:
    """The registered search of ``settings.strategy`` for one prompt (settings checked)."""
    settings.check()
    return RegisterSet.decoding_strategies.get(settings.strategy, None, "decoding: strategy")(settings)


def decode(model: IncrementalModel, prompt: Any, settings: DecodeSettings) -> List[int]:
    """The generated tokens after ``prompt`` (see ``DecodeSettings``)."""
    return list(decode_stream(model, prompt, settings))


def decode_stream(model: IncrementalModel, prompt: Any, settings: DecodeSettings) -> Iterator[int]:
    """``decode``'s tokens as they are chosen: greedy search and sampling yield each token before
    the model computes the next (a consumer that stops iterating stops the work); beam search's
    best hypothesis is known only at its end, so its tokens come together then."""
    search = new_search(settings)
    logits, cache = model.prefill(prompt)
    rows, sent = 1, 0
    while True:
        advance = search.advance(np.asarray(logits))
        if search.streams:
            new, sent = search.tokens[sent:], len(search.tokens)
            yield from new
        if advance is None:
            break
        if advance.parents != list(range(rows)):
            cache = model.select(cache, advance.parents)
        rows = len(advance.tokens)
        logits, cache = model.extend(advance.tokens, cache)
    if not search.streams:
        yield from search.tokens


StepRunner = Callable[[str, Dict[str, np.ndarray]], Dict[str, np.ndarray]]  # (step name, inputs) -> outputs


class SteppedModel:
    """An ``IncrementalModel`` over a model's two step functions, however they run (eagerly, as
    static programs, or exported): ``prefill`` (the prompt's named inputs -> ``logits``
    ``[1, V]``, ``cache`` and ``position`` ``[1]``, the first new token's position) and
    ``extend`` (``tokens`` ``[R]``, their ``positions`` ``[R]`` and ``cache`` -> ``logits``
    ``[R, V]`` and the grown ``cache``). The cache is one array whose third axis is the row; this
    object's cache is ``(array, next position)``, every row of a step being at the same position.
    ``masked``: the model's ``extend`` also reads ``visible`` ``[R, N + 1]`` (which cached
    columns each row sees: here all of them)."""

    def __init__(self, run: StepRunner, masked: bool = False) -> None:
        self.run, self.masked = run, masked

    def prefill(self, prompt: Dict[str, np.ndarray]) -> Tuple[np.ndarray, Tuple[np.ndarray, int]]:
        out = self.run("prefill", prompt)
        return out["logits"], (out["cache"], int(np.asarray(out["position"]).reshape(-1)[0]))

    def extend(self, tokens: List[int], cache: Tuple[np.ndarray, int]) -> Tuple[np.ndarray, Tuple[np.ndarray, int]]:
        array, position = cache
        inputs = {"tokens": np.asarray(tokens, dtype=np.int64),
                  "positions": np.full(len(tokens), position, dtype=np.int64), "cache": array}
        if self.masked:
            inputs["visible"] = np.ones((len(tokens), array.shape[4] + 1), dtype=np.float32)
        out = self.run("extend", inputs)
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
