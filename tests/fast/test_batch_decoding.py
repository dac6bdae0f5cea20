"""Batched decoding (``wenxin.models.batch_decoding``) on a NumPy model that keeps the step
functions' contract: every prompt's logits at every step equal its logits alone within float32
rounding, whatever else is in the batch and whenever it joined or left, so every strategy gives
the same tokens in a batch as alone; the cache is as wide as its longest row; an old export
without ``visible`` still decodes every prompt, one call each."""
from __future__ import annotations

from typing import List

import numpy as np
import pytest

from decoding_helpers import Recorded, compare, together
from decoding_helpers import alone as decoded_alone
from numpy_decoder import EOS, NumpyDecoder
from wenxin.models.batch_decoding import BatchDecoder, generate_batch
from wenxin.models.decoding import DecodeSettings, PromptSource, SteppedModel, decode, new_search

PROMPTS = [[5, 9, 2], [7], [3, 3, 3, 8, 12, 4, 17, 22, 9, 6, 11], [20, 21], [4, 4]]
STRATEGIES = {
    "greedy": DecodeSettings("greedy", max_new_tokens=12, eos_id=EOS),
    "sample": DecodeSettings("sample", max_new_tokens=12, eos_id=EOS, top_k=8, top_p=0.95, temperature=0.9, seed=5),
    "beam": DecodeSettings("beam", max_new_tokens=10, eos_id=EOS, beam_size=3, length_penalty=1.0),
}


def alone(model: NumpyDecoder, prompt: List[int], settings: DecodeSettings) -> Recorded:
    return decoded_alone(model, model.masked, {"ids": np.asarray([prompt])}, settings)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_a_prompt_alone_decodes_as_the_uncached_model_and_the_old_decode_loop(strategy):
    model = NumpyDecoder()
    settings = STRATEGIES[strategy]
    for prompt in PROMPTS:
        batched = alone(model, prompt, settings).tokens
        assert batched == decode(SteppedModel(model, masked=True), {"ids": np.asarray([prompt])}, settings)
        if strategy == "greedy":  # the cache changes nothing: each token is the argmax of the full recomputation
            ids = list(prompt)
            for token in batched:
                assert int(np.argmax(model.logits_of(ids))) == token
                ids.append(token)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("masked", [True, False], ids=["masked", "old-export"])
def test_prompts_that_join_and_leave_a_running_batch_get_their_logits_alone(strategy, masked):
    """Prompts join at different steps, one is removed part way, and every step's logits of every
    prompt equal its logits alone (float32 rounding), so the tokens are equal."""
    model = NumpyDecoder(masked=masked)
    settings = STRATEGIES[strategy]
    references = [alone(model, prompt, settings) for prompt in PROMPTS]
    searches = together(model, masked, [{"ids": np.asarray([p])} for p in PROMPTS], settings)
    assert len(searches[3].seen) < len(references[3].seen)  # it left part way
    seen = compare(searches, references)
    print(f"{strategy}: largest logit difference {seen['largest_difference']:.2e} of the largest logit; "
          f"smallest top-2 margin {seen['smallest_margin']:.2e}")
    if not masked:  # one extend call per prompt a step
        assert model.calls["extend"] > sum(len(r.seen) - 1 for r in references) // 2


def test_one_extend_runs_every_row_of_every_prompt():
    model = NumpyDecoder()
    settings = DecodeSettings("greedy", max_new_tokens=6, eos_id=None)
    decoder = BatchDecoder(model, True)
    for index, prompt in enumerate(PROMPTS):
        decoder.add(index, {"ids": np.asarray([prompt])}, new_search(settings))
    assert decoder.rows == len(PROMPTS)
    assert decoder.cells == len(PROMPTS) * max(len(p) for p in PROMPTS)  # as wide as the longest row
    updates = decoder.step()
    assert model.calls["extend"] == 1 and sorted(u.key for u in updates) == list(range(len(PROMPTS)))
    assert all(len(u.tokens) == 1 and not u.done for u in updates)


def test_the_cache_narrows_when_its_longest_row_leaves():
    model = NumpyDecoder()
    decoder = BatchDecoder(model, True)
    short = DecodeSettings("greedy", max_new_tokens=20, eos_id=None)
    decoder.add("long", {"ids": np.asarray([list(range(2, 29)) * 3])}, new_search(short))  # 81 tokens
    decoder.add("short", {"ids": np.asarray([[5, 6]])}, new_search(short))
    assert decoder.cells == 2 * 81
    decoder.step()
    assert decoder.cells == 2 * 82
    assert decoder.remove("long") and not decoder.remove("long")
    assert decoder.cells == 1 * 3  # the short row's 2 prompt tokens and the one fed


def test_streaming_updates_add_up_to_the_answer_and_beam_search_gives_it_at_its_end():
    model = NumpyDecoder()
    for strategy, settings in STRATEGIES.items():
        decoder = BatchDecoder(model, True)
        search = new_search(settings)
        got = decoder.add("p", {"ids": np.asarray([PROMPTS[0]])}, search)
        pieces = [got]
        while decoder.rows:
            pieces += decoder.step()
        assert pieces[-1].done and all(not u.done for u in pieces[:-1])
        assert [t for u in pieces for t in u.tokens] == search.tokens
        if strategy == "beam":
            assert all(not u.tokens for u in pieces[:-1])


def test_generate_batch_decodes_every_row_and_pads_with_minus_one():
    model = NumpyDecoder()
    settings = DecodeSettings("greedy", max_new_tokens=12, eos_id=EOS)
    width = max(len(p) for p in PROMPTS)
    batch = {"ids": np.asarray([p + [0] * (width - len(p)) for p in PROMPTS]),
             "lengths": np.asarray([len(p) for p in PROMPTS])}
    out = generate_batch(model, batch, PromptSource({"ids": "ids"}, "lengths"), settings, masked=True)
    assert out.shape == (len(PROMPTS), 12)
    for row, prompt in zip(out, PROMPTS):
        tokens = alone(model, prompt, settings).tokens
        assert row[:len(tokens)].tolist() == tokens and (row[len(tokens):] == -1).all()
    steps = []

    class Stop(Exception):
        pass

    def before_step():
        steps.append(1)
        if len(steps) > 7:
            raise Stop

    with pytest.raises(Stop):
        generate_batch(model, batch, PromptSource({"ids": "ids"}, "lengths"), settings, True, before_step)


def test_the_decoding_strategy_of_extending_md_runs_alone_and_in_a_batch(tmp_path, monkeypatch):
    """docs/extending.md's worked example of a decoding strategy, as the page shows it."""
    import re
    import sys

    from conftest import REPO
    page = open(f"{REPO}/docs/extending.md", encoding="utf-8").read()
    (code,) = re.findall(r"<!-- file: no_repeat.py -->\n```python\n(.*?)```", page, re.S)
    (tmp_path / "no_repeat.py").write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "no_repeat", raising=False)
    from wenxin.common.registry import RegisterSet
    registry = RegisterSet.decoding_strategies
    registry.names()  # the built-ins loaded, then registered into a copy that the test's end drops
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    import no_repeat  # noqa: F401 (registers it)
    model = NumpyDecoder()
    settings = DecodeSettings("no_repeat", max_new_tokens=12, eos_id=EOS)
    references = [alone(model, prompt, settings) for prompt in PROMPTS]
    for reference in references:
        assert all(a != b for a, b in zip(reference.tokens, reference.tokens[1:]))
    greedy = [alone(model, prompt, STRATEGIES["greedy"]).tokens for prompt in PROMPTS]
    assert [r.tokens for r in references] != greedy  # it chose otherwise somewhere
    searches = together(model, True, [{"ids": np.asarray([p])} for p in PROMPTS], settings)
    compare(searches, references)
