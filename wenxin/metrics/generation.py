"""Generation metrics on token lists: corpus BLEU-4 and ROUGE-L.

Hand-written rather than calling sacrebleu and rouge-chinese at run time: both are a few lines
over n-gram counts and a longest common subsequence, an evaluation runs them on every dev pass,
and neither library is then a dependency. ``tests/fast/test_generation_metrics.py`` checks them
against the libraries on the same tokens (sacrebleu with ``tokenize="none"`` and no smoothing;
rouge-chinese's ROUGE-L F).
"""
from __future__ import annotations

import collections
import math
from typing import Any, Counter, Dict, List, Sequence, Tuple

_BASIC: List[Any] = []  # the basic tokenizer, made on first use


def ngrams(tokens: Sequence[str], n: int) -> "Counter[Tuple[str, ...]]":
    return collections.Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def corpus_bleu(references: Sequence[Sequence[str]], hypotheses: Sequence[Sequence[str]], max_order: int = 4) -> float:
    """Papineni et al.'s corpus BLEU (one reference per hypothesis), in [0, 1]: the geometric
    mean of the clipped n-gram precisions for n = 1..``max_order`` over the whole corpus, times
    the brevity penalty ``exp(1 - r / c)`` when the hypotheses are shorter than the references.
    0 when any order has no match (no smoothing, as ERNIE-kit's and sacrebleu's ``none``)."""
    matches, possible = [0] * max_order, [0] * max_order
    hyp_length = ref_length = 0
    for reference, hypothesis in zip(references, hypotheses):
        hyp_length += len(hypothesis)
        ref_length += len(reference)
        for n in range(1, max_order + 1):
            hyp = ngrams(hypothesis, n)
            matches[n - 1] += sum((hyp & ngrams(reference, n)).values())
            possible[n - 1] += sum(hyp.values())
    if hyp_length == 0 or min(matches) == 0:
        return 0.0
    log_precision = sum(math.log(m / p) for m, p in zip(matches, possible)) / max_order
    brevity = 1.0 if hyp_length > ref_length else math.exp(1 - ref_length / hyp_length)
    return brevity * math.exp(log_precision)


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """The length of the longest common subsequence (dynamic programming, one row at a time)."""
    if len(a) < len(b):
        a, b = b, a
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def rouge_l(references: Sequence[Sequence[str]], hypotheses: Sequence[Sequence[str]]) -> Dict[str, float]:
    """Lin's ROUGE-L per pair (LCS recall, precision and F1), averaged over pairs."""
    totals = {"rouge_l_p": 0.0, "rouge_l_r": 0.0, "rouge_l": 0.0}
    for reference, hypothesis in zip(references, hypotheses):
        common = lcs_length(reference, hypothesis)
        precision = common / len(hypothesis) if hypothesis else 0.0
        recall = common / len(reference) if reference else 0.0
        totals["rouge_l_p"] += precision
        totals["rouge_l_r"] += recall
        totals["rouge_l"] += 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    count = max(1, min(len(references), len(hypotheses)))
    return {key: value / count for key, value in totals.items()}


def generation_metrics(references: List[List[str]], hypotheses: List[List[str]]) -> Dict[str, float]:
    """``bleu4`` and the ROUGE-L scores of tokenized references and hypotheses."""
    return {"bleu4": corpus_bleu(references, hypotheses), **rouge_l(references, hypotheses)}


def basic_tokens(text: str) -> List[str]:
    """The tokens BLEU and ROUGE count, as ERNIE-kit's evaluation cut texts (BERT's basic
    tokenizer: lower-cased, each CJK character and punctuation mark a token, words split at
    spaces), by the ``tokenizers`` library's BERT normalizer and pre-tokenizer."""
    if not _BASIC:
        from tokenizers import normalizers, pre_tokenizers

        _BASIC.extend([normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True),
                       pre_tokenizers.BertPreTokenizer()])
    normalizer, splitter = _BASIC
    return [piece for piece, _ in splitter.pre_tokenize_str(normalizer.normalize_str(text))]
