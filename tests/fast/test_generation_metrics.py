"""BLEU-4 and ROUGE-L (``wenxin.metrics.generation``) against sacrebleu and rouge-chinese on the
same tokens: random corpora of Chinese characters, with and without brevity penalty, and edge
cases."""
from __future__ import annotations

import random

import pytest

from wenxin.metrics.generation import corpus_bleu, generation_metrics, lcs_length, rouge_l

sacrebleu = pytest.importorskip("sacrebleu")
rouge_chinese = pytest.importorskip("rouge_chinese")
CHARS = list("我们你他是的了在有这个中国人大学生时间工作北京")


def corpus(seed: int, n: int, shorter: bool = False):
    rng = random.Random(seed)
    refs, hyps = [], []
    for _ in range(n):
        ref = [rng.choice(CHARS) for _ in range(rng.randint(4, 20))]
        hyp = [t for t in ref if rng.random() < 0.8] + [rng.choice(CHARS) for _ in range(rng.randint(0, 4))]
        if shorter:
            hyp = hyp[:max(4, len(hyp) // 2)]
        if rng.random() < 0.2:
            rng.shuffle(hyp)
        refs.append(ref)
        hyps.append(hyp)
    return refs, hyps


@pytest.mark.parametrize("seed, shorter", [(1, False), (2, True), (3, False)])
def test_bleu_equals_sacrebleus(seed, shorter):
    refs, hyps = corpus(seed, 200, shorter)
    ours = corpus_bleu(refs, hyps)
    theirs = sacrebleu.corpus_bleu([" ".join(h) for h in hyps], [[" ".join(r) for r in refs]], tokenize="none",
                                   smooth_method="none", force=True).score / 100
    assert ours == pytest.approx(theirs, abs=1e-9) and 0 < ours < 1


@pytest.mark.parametrize("seed", [4, 5])
def test_rouge_l_equals_rouge_chineses(seed):
    refs, hyps = corpus(seed, 200)
    ours = rouge_l(refs, hyps)
    theirs = rouge_chinese.Rouge().get_scores([" ".join(h) for h in hyps], [" ".join(r) for r in refs], avg=True)
    assert ours["rouge_l"] == pytest.approx(theirs["rouge-l"]["f"], abs=1e-6)
    assert ours["rouge_l_p"] == pytest.approx(theirs["rouge-l"]["p"], abs=1e-9)
    assert ours["rouge_l_r"] == pytest.approx(theirs["rouge-l"]["r"], abs=1e-9)


def test_edge_cases():
    assert corpus_bleu([["a", "b"]], [[]]) == 0.0
    assert corpus_bleu([list("abcdef")], [list("abcdef")]) == pytest.approx(1.0)
    assert corpus_bleu([list("abcdef")], [list("abcxyz")]) == 0.0  # no 4-gram matches, no smoothing
    assert lcs_length(list("abcbdab"), list("bdcaba")) == 4
    assert rouge_l([["a"]], [[]]) == {"rouge_l_p": 0.0, "rouge_l_r": 0.0, "rouge_l": 0.0}
    assert set(generation_metrics([["a"]], [["a"]])) == {"bleu4", "rouge_l", "rouge_l_p", "rouge_l_r"}
