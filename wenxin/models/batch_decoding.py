"""Many prompts decoded together through a generation model's step functions (iteration-level
batching, as vLLM, TGI and FastDeploy serve): ``BatchDecoder``.

Each prompt's decoding is a ``Search`` (``wenxin.models.decoding``) with rows of its own (one, or
its beams). A prompt joins with its ``prefill`` step; from then on one ``extend`` step feeds every
row of every prompt its next token, and each search is handed its own rows' logits. A prompt
leaves when its search ends (or when the caller removes it); nobody waits for anyone else's end.

The key/value cache of every row lies in one array ``[layers, 2, rows, heads, columns, head_dim]``
(``ROW_AXIS``, ``COLUMN_AXIS``: the step functions' contract). Rows hold different numbers of
tokens, so each row's tokens are its last columns and the columns before them are padding
(zeros), which ``extend``'s ``visible`` input ``[rows, columns + 1]`` hides from the row's
attention (1: a column the row sees; the last column is the new token's own). Positions are each
row's own (``positions``), so a row's keys and values are those it would have alone, and its logits
equal its logits alone within float32 rounding. When rows leave, columns that every remaining row
has as padding are cut off, so the array is always as wide as the longest row.

A model whose ``advance`` reads each layer's cache where it lies (``wenxin.models.advance_step``;
ERNIE 4.5 chat exports since issue 69) keeps every row's cache in ``KVSlots`` instead
(``in_place``): each row's tokens its first columns, a step feeding the rows' caches as views and
writing only the new tokens' keys and values, rows joining and leaving without the array being
rebuilt (``wenxin.models.kv_slots``).

Where the engine also runs ``advance_pair`` (``wenxin.models.advance_pair``: the int8 ONNX
engine), a step can take prompt parts beside its rows (``step``'s ``beside``, a
``batch_prefill.PartRows``): the turn's prefill and decoding are then one call.

A model whose ``extend`` has no ``visible`` input (an export made before it was added) cannot
hide padding: each prompt then keeps a cache of its own and runs its own ``extend`` (its rows
are all as long), still one step of each prompt in turn.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Hashable, List, Mapping, Optional, Tuple, Union, cast

import numpy as np

from wenxin.models.advance_step import ADVANCE, CHUNK, COLUMN_AXIS, NEW_CACHE, PAIR, ROW_AXIS, SECOND, pair_feed
from wenxin.models.batch_prefill import PartRows, prefill_whole
from wenxin.models.kv_slots import KVSlots
from wenxin.models.decoding import DecodeSettings, PromptSource, Search, StepRunner, new_search

VISIBLE = "visible"  # extend's input that hides each row's padding
CHUNK_STEP = CHUNK  # a model's prefill of a prompt's next tokens over the cache of those before


@dataclasses.dataclass
class Update:
    """What one prompt's decoding gave in a step: ``tokens`` final since its last update (each
    step's token of a search that streams; the whole answer when one that does not ends), and
    whether it has ended (``done``)."""

    key: Hashable
    tokens: List[int]
    done: bool


class _Member:
    """One prompt in the batch: its search, how many rows it has, how many tokens it reported."""

    __slots__ = ("key", "search", "count", "sent")

    def __init__(self, key: Hashable, search: Search, count: int) -> None:
        self.key, self.search, self.count, self.sent = key, search, count, 0

    def update(self) -> Update:
        search = self.search
        if not search.streams and not search.done:
            return Update(self.key, [], False)
        tokens = search.tokens[self.sent:]
        self.sent = len(search.tokens)
        return Update(self.key, tokens, search.done)


class _Cohort:
    """Rows that run in one ``extend`` call: their cache, and per row the token it feeds next, that
    token's position and how many columns of the cache are its own (``lengths``). Members' rows
    are contiguous, in member order."""

    def __init__(self, cache: np.ndarray, member: _Member, tokens: List[int], position: int) -> None:
        count = len(tokens)
        self.cache = cache
        self.members = [member]
        self.tokens = np.asarray(tokens, dtype=np.int64)
        self.positions = np.full(count, position, dtype=np.int64)
        self.lengths = np.full(count, cache.shape[COLUMN_AXIS], dtype=np.int64)

    @property
    def rows(self) -> int:
        return len(self.tokens)

    @property
    def columns(self) -> int:
        return int(self.cache.shape[COLUMN_AXIS])

    def join(self, other: "_Cohort") -> None:
        """Take ``other``'s rows (after this cohort's), padding the narrower cache on the left."""
        width = max(self.columns, other.columns)
        self.cache = np.concatenate([_pad_left(self.cache, width), _pad_left(other.cache, width)], axis=ROW_AXIS)
        self.members += other.members
        self.tokens = np.concatenate([self.tokens, other.tokens])
        self.positions = np.concatenate([self.positions, other.positions])
        self.lengths = np.concatenate([self.lengths, other.lengths])

    def keep(self, rows: List[int], members: List[_Member], tokens: List[int]) -> None:
        """Keep ``rows`` (in this order; repeated rows are copied), now ``members``' rows, feeding
        ``tokens`` next; cut the columns that are padding in every kept row."""
        index = np.asarray(rows, dtype=np.int64)
        cache = self.cache if rows == list(range(self.rows)) else np.take(self.cache, index, axis=ROW_AXIS)
        self.lengths = self.lengths[index]
        self.positions = self.positions[index]
        self.tokens = np.asarray(tokens, dtype=np.int64)
        self.members = members
        cut = cache.shape[COLUMN_AXIS] - int(self.lengths.max(initial=0))
        if cut > 0:
            cache = np.ascontiguousarray(cache[:, :, :, :, cut:])
        self.cache = cache

    def inputs(self, masked: bool) -> Dict[str, np.ndarray]:
        """``extend``'s inputs for every row."""
        feed = {"tokens": self.tokens, "positions": self.positions, "cache": self.cache}
        if masked:
            width = self.columns
            first = width - self.lengths  # each row's first own column
            feed[VISIBLE] = (np.arange(width + 1)[None, :] >= first[:, None]).astype(np.float32)  # [R, N + 1]
        return feed


    def run(self, run: StepRunner, masked: bool) -> np.ndarray:
        """One ``extend`` of every row: the rows' logits ``[R, V]``; the cache grows by a column."""
        out = run("extend", self.inputs(masked))
        self.cache = np.asarray(out["cache"])  # [..., R, ., N + 1, .]
        self.lengths = self.lengths + 1
        self.positions = self.positions + 1
        return np.asarray(out["logits"])


class _SlotCohort:
    """Every row of an in-place ``advance`` model (``wenxin.models.advance_step``): their caches
    in ``KVSlots`` (never copied at a step), and per row the token it feeds next and that token's
    position. Members' rows are contiguous, in member order."""

    def __init__(self, empty: np.ndarray) -> None:
        self.slots = KVSlots(empty)
        self.members: List[_Member] = []
        self.tokens = np.zeros(0, dtype=np.int64)
        self.positions = np.zeros(0, dtype=np.int64)

    @property
    def rows(self) -> int:
        return len(self.tokens)

    @property
    def columns(self) -> int:
        return self.slots.columns

    def add(self, cache: np.ndarray, member: _Member, tokens: List[int], position: int) -> None:
        """``member``'s rows join after the others: their caches, tokens and next position."""
        self.slots.append(cache)
        self.members.append(member)
        self.tokens = np.concatenate([self.tokens, np.asarray(tokens, dtype=np.int64)])
        self.positions = np.concatenate([self.positions, np.full(len(tokens), position, dtype=np.int64)])

    def keep(self, rows: List[int], members: List[_Member], tokens: List[int]) -> None:
        """Keep ``rows`` (repeated rows are copied), now ``members``' rows, feeding ``tokens``
        next: in this order, or the members reordered so that fewer rows move (``fewest_moves``)."""
        rows, members, tokens = fewest_moves(rows, members, tokens)
        self.slots.keep(rows)
        self.positions = self.positions[np.asarray(rows, dtype=np.int64)]
        self.tokens = np.asarray(tokens, dtype=np.int64)
        self.members = members

    def run(self, run: StepRunner, masked: bool, beside: Optional[PartRows] = None) -> np.ndarray:
        """One ``advance`` of a token a row: the rows' logits ``[R, V]``; each row's new keys and
        values are written after its own. ``beside``: prompt parts run in the same call, as the
        second group of ``advance_pair`` (their outputs go to their ``took``)."""
        feed: Dict[str, np.ndarray] = {"tokens": self.tokens[:, None], "positions": self.positions[:, None],
                                       **self.slots.inputs(1)}
        if beside is None:
            out = run(ADVANCE, feed)
        else:
            out = run(PAIR, pair_feed(feed, beside.inputs))
            logits = np.asarray(out["logits"])  # [R + Rb, V]: the decoding rows first
            beside.took(logits[self.rows:], np.asarray(out[SECOND + NEW_CACHE]))
            out = {"logits": logits[:self.rows], NEW_CACHE: out[NEW_CACHE]}
        self.slots.write(np.asarray(out[NEW_CACHE]))
        self.positions = self.positions + 1
        return np.asarray(out["logits"])


def fewest_moves(rows: List[int], members: List[_Member], tokens: List[int]
                 ) -> Tuple[List[int], List[_Member], List[int]]:
    """``rows`` (each member's, in ``members``' order), ``members`` and ``tokens`` reordered by
    member so that the fewest rows move in the cache: a member whose one row stays in its slot
    keeps it, and those past the kept rows' end fill the slots of those that left: where one row
    of 16 leaves, one row moves instead of every row after it (at ERNIE-4.5-0.3B's shape after 150
    tokens, 16.1 -> 2.4 CPU-ms, ``benchmarks/kv_slots_keep.py``; a served turn in which a request
    finished took 87-153 ms more than the others). As given where a member keeps several rows (a
    beam search's): its rows stay together and in order."""
    if any(member.count != 1 for member in members) or len(set(rows)) != len(rows):
        return rows, members, tokens
    kept = len(rows)
    placed = {row: index for index, row in enumerate(rows) if row < kept}  # slot -> member staying in it
    gaps = iter(slot for slot in range(kept) if slot not in placed)
    for index, row in enumerate(rows):
        if row >= kept:
            placed[next(gaps)] = index
    order = [placed[slot] for slot in range(kept)]
    return [rows[i] for i in order], [members[i] for i in order], [tokens[i] for i in order]


def _pad_left(cache: np.ndarray, width: int) -> np.ndarray:
    missing = width - cache.shape[COLUMN_AXIS]
    if missing <= 0:
        return cache
    pad = [(0, 0)] * cache.ndim
    pad[COLUMN_AXIS] = (missing, 0)
    return np.pad(cache, pad)


class BatchDecoder:
    """Decodes prompts together (see the module docstring).

    Args:
        run: runs a step function by name (``prefill``, ``extend``) on named inputs.
        masked: whether ``extend`` reads ``visible`` (every prompt then shares one batch).
        in_place: for a model whose ``advance`` reads each layer's cache where it lies, the
            cache of one row holding nothing (``advance_step.empty_cache``): every row then
            shares one batch whose caches stay in place (``KVSlots``); None: ``extend`` steps on
            one padded cache array (see the module docstring).

    ``add`` runs a prompt's ``prefill`` and its search's first choice; ``step`` runs one
    ``extend`` for every row and returns each prompt's ``Update``; ``remove`` drops a prompt (a
    client that left, a time limit). ``rows`` and ``cells`` (rows x columns of the cache arrays,
    padding included: the memory held) tell a caller how full it is.
    """

    def __init__(self, run: StepRunner, masked: bool, in_place: Optional[np.ndarray] = None) -> None:
        self.run, self.masked, self.in_place = run, masked, in_place
        self.cohorts: List[Union[_Cohort, _SlotCohort]] = []

    @property
    def rows(self) -> int:
        return sum(c.rows for c in self.cohorts)

    @property
    def cells(self) -> int:
        """Cached token slots held: rows x columns of each cache, padding included."""
        return sum(c.rows * c.columns for c in self.cohorts)

    @property
    def keys(self) -> List[Hashable]:
        return [m.key for c in self.cohorts for m in c.members]

    def add(self, key: Hashable, prompt: Mapping[str, np.ndarray], search: Search,
            prefilled: Optional[Mapping[str, np.ndarray]] = None) -> Update:
        """Run ``prompt``'s ``prefill`` (or take its outputs, ``prefilled``: a
        ``batch_prefill.PromptPrefill``'s) and its search's first choice; unless that ends it, its
        rows join the batch at the next ``step``."""
        out = prefilled if prefilled is not None else self.run("prefill", dict(prompt))
        member = _Member(key, search, 0)
        advance = search.advance(np.asarray(out["logits"]))
        if advance is not None:
            member.count = len(advance.tokens)
            cache = np.take(np.asarray(out["cache"]), np.asarray(advance.parents, dtype=np.int64), axis=ROW_AXIS)
            position = int(np.asarray(out["position"]).reshape(-1)[0])
            if self.in_place is not None:
                if not self.cohorts:
                    self.cohorts.append(_SlotCohort(self.in_place))
                cast(_SlotCohort, self.cohorts[0]).add(cache, member, advance.tokens, position)
            elif self.masked and self.cohorts:
                cast(_Cohort, self.cohorts[0]).join(_Cohort(cache, member, advance.tokens, position))
            else:
                self.cohorts.append(_Cohort(cache, member, advance.tokens, position))
        return member.update()

    def step(self, beside: Optional[PartRows] = None) -> List[Update]:
        """One ``extend`` of every row; each prompt's search chooses from its rows' logits.
        ``beside``: prompt parts prefilled in the same call (``advance_pair``), for a model whose
        rows' caches stay in place and that has the pair (a serving turn: ``fuses_turns``)."""
        if beside is not None and (self.in_place is None or not self.cohorts):
            raise ValueError("prompt parts go beside the decoding rows only in a step of rows kept in place")
        updates: List[Update] = []
        for cohort in list(self.cohorts):
            if beside is not None:
                logits = cast(_SlotCohort, cohort).run(self.run, self.masked, beside)  # [R, V]
            else:
                logits = cohort.run(self.run, self.masked)  # [R, V]
            rows: List[int] = []
            tokens: List[int] = []
            members: List[_Member] = []
            start = 0
            for member in cohort.members:
                count = member.count
                advance = member.search.advance(logits[start:start + count])
                if advance is not None:
                    rows += [start + parent for parent in advance.parents]
                    tokens += advance.tokens
                    member.count = len(advance.tokens)
                    members.append(member)
                start += count
                updates.append(member.update())
            self._keep(cohort, rows, members, tokens)
        return updates

    def remove(self, key: Hashable) -> bool:
        """Drop ``key``'s rows (False: it is not in the batch)."""
        for cohort in self.cohorts:
            rows: List[int] = []
            start, found = 0, False
            for member in cohort.members:
                if member.key == key:
                    found = True
                else:
                    rows += range(start, start + member.count)
                start += member.count
            if found:
                members = [m for m in cohort.members if m.key != key]
                self._keep(cohort, rows, members, cohort.tokens[rows].tolist())
                return True
        return False

    def _keep(self, cohort: Union[_Cohort, _SlotCohort], rows: List[int], members: List[_Member],
              tokens: List[int]) -> None:
        if not rows:
            self.cohorts.remove(cohort)
        else:
            cohort.keep(rows, members, tokens)


def generate_batch(run: StepRunner, batch: Mapping[str, np.ndarray], source: PromptSource, settings: DecodeSettings,
                   masked: bool, before_step: Optional[Callable[[], None]] = None,
                   in_place: Optional[np.ndarray] = None, together: bool = False) -> np.ndarray:
    """Every row of ``batch`` decoded together through the step functions ``run`` runs: ``[B,
    max_new_tokens]`` token ids, -1 after each row's end. ``before_step`` is called before each
    model step (an exception it raises ends the decoding there: a stop signal). ``in_place``: see
    ``BatchDecoder``; ``together``: ``run`` prefills several prompts in one call
    (``batch_prefill.prefill_whole``)."""
    prompts = source.prompts(batch)
    out = np.full((len(prompts), settings.max_new_tokens), -1, dtype=np.int64)
    decoder = BatchDecoder(run, masked, in_place)
    searches = [new_search(settings) for _ in prompts]
    for row, prefilled in enumerate(prefill_whole(run, prompts, together, before_step)):
        decoder.add(row, prompts[row], searches[row], prefilled)
    while decoder.rows:
        if before_step is not None:
            before_step()
        decoder.step()
    for row, search in enumerate(searches):
        out[row, :len(search.tokens)] = search.tokens
    return out
