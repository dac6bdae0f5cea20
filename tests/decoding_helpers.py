"""Running prompts alone and together through ``BatchDecoder`` with every logits array a search
is handed kept, so tests can hold a row's logits in a batch against its logits alone."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from wenxin.models.batch_decoding import BatchDecoder
from wenxin.models.batch_prefill import PartRows, PromptPrefill, prefill_together
from wenxin.models.decoding import DecodeSettings, Search, new_search

# prompts join before these steps, and one leaves (a client that went away)
JOINS = {0: [0, 2], 2: [1], 3: [3], 6: [4]}
REMOVED_AT = {5: 3}


class Recorded(Search):
    """A search that keeps every logits array it is handed (and otherwise is the search it wraps)."""

    def __init__(self, inner: Search) -> None:
        super().__init__(inner.settings)
        self.inner, self.seen = inner, []  # type: ignore[var-annotated]
        self.streams = inner.streams  # type: ignore[misc]

    def advance(self, logits: Any) -> Any:
        self.seen.append(np.array(logits, dtype=np.float64))
        advance = self.inner.advance(logits)
        self.tokens, self.done = self.inner.tokens, self.inner.done
        return advance


def alone(run: Any, masked: bool, prompt: Mapping[str, np.ndarray], settings: DecodeSettings,
          in_place: Optional[np.ndarray] = None) -> Recorded:
    """One prompt decoded by itself (``in_place``: see ``BatchDecoder``)."""
    search = Recorded(new_search(settings))
    decoder = BatchDecoder(run, masked, in_place)
    decoder.add(0, prompt, search)
    while decoder.rows:
        decoder.step()
    return search


def alone_in_parts(run: Any, prompt: Mapping[str, np.ndarray], settings: DecodeSettings, empty: np.ndarray,
                   part_tokens: int) -> Recorded:
    """One prompt prefilled ``part_tokens`` at a time by itself, then decoded by itself."""
    prefill = PromptPrefill(prompt["ids"])
    while not prefill.done:
        prefill_together(run, [(prefill, min(part_tokens, prefill.remaining))], empty)
    search = Recorded(new_search(settings))
    decoder = BatchDecoder(run, True, empty)
    decoder.add(0, prompt, search, prefill.outputs)
    while decoder.rows:
        decoder.step()
    return search


def together(run: Any, masked: bool, prompts: Sequence[Mapping[str, np.ndarray]], settings: DecodeSettings,
             joins: Dict[int, List[int]] = JOINS, removed_at: Dict[int, int] = REMOVED_AT,
             steps: int = 200, in_place: Optional[np.ndarray] = None) -> Dict[int, Recorded]:
    """The prompts decoded in one batch, each joining at its step of ``joins`` and the one of
    ``removed_at`` leaving part way (``in_place``: see ``BatchDecoder``)."""
    decoder = BatchDecoder(run, masked, in_place)
    searches: Dict[int, Recorded] = {}
    for step in range(steps):
        for index in joins.get(step, []):
            searches[index] = Recorded(new_search(settings))
            decoder.add(index, prompts[index], searches[index])
        if step in removed_at:
            decoder.remove(removed_at[step])
        if decoder.rows:
            decoder.step()
        elif step > max(joins):
            break
    assert decoder.rows == 0 and decoder.cells == 0
    return searches


def prefilled_beside(run: Any, prompts: Sequence[Mapping[str, np.ndarray]], settings: DecodeSettings,
                     empty: np.ndarray, part_tokens: int = 3, at_once: int = 2) -> Dict[int, Recorded]:
    """The first prompt decodes from its own prefill; the others are prefilled ``part_tokens`` at
    a time, ``at_once`` prompts together, as the second group of each decoding step
    (``BatchDecoder.step``'s ``beside``: ``advance_pair``; alone where no row decodes), and each
    joins when its prompt is done."""
    decoder = BatchDecoder(run, True, empty)
    searches = {0: Recorded(new_search(settings))}
    decoder.add(0, prompts[0], searches[0])
    pending = [(key, PromptPrefill(prompts[key]["ids"])) for key in range(1, len(prompts))]
    while decoder.rows or pending:
        parts = [(prompt, min(part_tokens, prompt.remaining)) for _, prompt in pending[:at_once]]
        if decoder.rows:
            decoder.step(PartRows(parts, empty) if parts else None)
        else:
            prefill_together(run, parts, empty)
        for key, prompt in list(pending[:at_once]):
            if prompt.done:
                searches[key] = Recorded(new_search(settings))
                decoder.add(key, prompts[key], searches[key], prompt.outputs)
                pending.remove((key, prompt))
    return searches


def compare(searches: Dict[int, Recorded], references: Sequence[Recorded], removed: Sequence[int] = (3,),
            relative: float = 4e-6) -> Dict[str, float]:
    """Every batched step's logits against the prompt's alone (within ``relative`` of the largest
    logit: float32 rounding), and the tokens equal for the prompts that stayed; returns the
    largest difference seen and the smallest margin between the two best logits alone."""
    worst = 0.0
    for index, search in searches.items():
        reference = references[index]
        steps = len(search.seen)
        if index not in removed:
            assert search.tokens == reference.tokens, (index, search.tokens, reference.tokens)
            assert steps == len(reference.seen)
        for mine, theirs in zip(search.seen, reference.seen[:steps]):
            scale = float(np.abs(theirs).max())
            np.testing.assert_allclose(mine, theirs, rtol=0, atol=scale * relative)
            worst = max(worst, float(np.abs(mine - theirs).max() / scale))
    margin = min(float(np.diff(np.sort(row)[-2:])[0]) for r in references for step in r.seen for row in step)
    return {"largest_difference": worst, "smallest_margin": margin}
